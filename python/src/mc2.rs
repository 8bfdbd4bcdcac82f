//! The MC2 matmul engine backed by a Python callable (torch's GEMM), registered with the
//! executor's process-wide engine slot (`symsched_runtime::exec::matmul`).
//!
//! Launches run with the GIL released; every matmul step of a plan then re-acquires it, calls
//! `callback(c_addr, a_addr, b_addr, m, k, n, c_dtype, a_dtype, b_dtype)` (addresses in this
//! rank's heap segment, or in the caller's tensors for roles the executor uses in place; dtype
//! names as in `DType::name`), and releases it again. The callback runs `torch.mm(..., out=)`
//! on views of those ranges, which itself drops the GIL while it computes,
//! so other Python threads are blocked only for the view lookup. Steps still run on the
//! launching thread, in plan order, so each block is multiplied when the schedule's waits allow.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pyo3::prelude::*;
use symsched_runtime::exec::matmul::{self, MatmulEngine, MatmulStep};
use symsched_runtime::exec::ExecError;

use crate::block::HeapBlock;
use crate::runtime::PyRuntime;

/// Calls a Python callable for every matmul step (see the module docs).
struct PyCallbackEngine {
    callback: Py<PyAny>,
}

impl MatmulEngine for PyCallbackEngine {
    fn name(&self) -> &str {
        "python"
    }

    unsafe fn matmul(&self, s: &MatmulStep, _scratch: &mut Vec<f64>) -> Result<(), ExecError> {
        Python::attach(|py| {
            let args = (
                s.c.0 as usize,
                s.a.0 as usize,
                s.b.0 as usize,
                s.m,
                s.k,
                s.n,
                s.c.1.name(),
                s.a.1.name(),
                s.b.1.name(),
            );
            self.callback
                .call1(py, args)
                .map(drop)
                .map_err(|e| ExecError::Runtime(e.to_string()))
        })
    }
}

/// Send every matmul step of this process to `callback` (see the module docs), or back to the
/// executor's built-in deterministic kernel with `None`.
#[pyfunction]
#[pyo3(signature = (callback))]
pub fn set_matmul_engine(callback: Option<Py<PyAny>>) {
    matmul::set_engine(
        callback.map(|callback| Arc::new(PyCallbackEngine { callback }) as Arc<dyn MatmulEngine>),
    );
}

/// Name of the engine matmul steps go to: "builtin" or "python".
#[pyfunction]
pub fn matmul_engine() -> String {
    matmul::engine_name()
}

/// A block spanning this rank's whole heap segment, for zero-copy views of any heap address
/// (the matmul callback's operands live in staging areas no allocation describes).
#[pyfunction]
pub fn heap_block(rt: PyRef<'_, PyRuntime>) -> HeapBlock {
    HeapBlock {
        rt: rt.shared.clone(),
        offset: 0,
        nbytes: rt.shared.runtime.heap().size().max(1),
        freed: AtomicBool::new(false),
    }
}

/// Register this file's functions on the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(set_matmul_engine, m)?)?;
    m.add_function(wrap_pyfunction!(matmul_engine, m)?)?;
    m.add_function(wrap_pyfunction!(heap_block, m)?)?;
    Ok(())
}
