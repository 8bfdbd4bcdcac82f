//! A symmetric heap block exported to Python through the buffer protocol, so
//! a framework makes a zero-copy tensor over it (`torch.frombuffer(block, dtype=torch.uint8)`,
//! `numpy.frombuffer`). The block holds the runtime (and so the heap mapping) alive while any
//! tensor refers to it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use symsched_runtime::Runtime;

/// One allocation of the symmetric heap.
#[pyclass(module = "symsched._native", frozen)]
pub struct HeapBlock {
    pub(crate) rt: Arc<Runtime>,
    /// Offset in the heap segment (the same on every rank).
    #[pyo3(get)]
    pub offset: usize,
    /// Bytes exported (at least 1).
    #[pyo3(get)]
    pub nbytes: usize,
    pub(crate) freed: AtomicBool,
}

impl HeapBlock {
    fn addr(&self) -> *mut u8 {
        // SAFETY: offset + nbytes lies inside the mapped heap (checked by the allocator).
        unsafe { self.rt.heap().base().add(self.offset) }
    }

    pub(crate) fn is_freed(&self) -> bool {
        self.freed.load(Ordering::Acquire)
    }
}

#[pymethods]
impl HeapBlock {
    /// Address of the block in this process.
    #[getter]
    fn ptr(&self) -> usize {
        self.addr() as usize
    }

    /// Whether `symm.free` released this block.
    #[getter]
    fn freed(&self) -> bool {
        self.is_freed()
    }

    /// # Safety
    /// Called by CPython with a valid `view`; fills it to describe a writable byte buffer.
    unsafe fn __getbuffer__(
        slf: PyRef<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("null Py_buffer"));
        }
        if slf.is_freed() {
            return Err(PyBufferError::new_err(
                "symmetric block was released with symm.free",
            ));
        }
        let ptr = slf.addr();
        let len = slf.nbytes as isize;
        let owner = slf.into_ptr();
        // SAFETY: PyBuffer_FillInfo takes a new reference to `owner` into view->obj; we created
        // one with into_ptr and release it below only on failure.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, owner, ptr as *mut c_void, len, 0, flags) };
        // PyBuffer_FillInfo increfs obj itself, so drop the reference into_ptr made.
        unsafe { ffi::Py_DECREF(owner) };
        if rc != 0 {
            return Err(PyBufferError::new_err(
                "could not export the symmetric block",
            ));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __repr__(&self) -> String {
        format!(
            "HeapBlock(offset={}, nbytes={}, freed={})",
            self.offset,
            self.nbytes,
            self.is_freed()
        )
    }
}
