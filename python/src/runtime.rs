//! The process's runtime handle: bootstrap, heap allocation, stats, groups.
//!
//! Blocks and groups hold the runtime itself (`Arc<Runtime>`, so the heap mapping outlives
//! every tensor over it); only this handle knows them, never the other way round.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use symsched_runtime::Runtime;

use crate::block::HeapBlock;
use crate::errors;
use crate::group::PyGroup;

/// None when the runtime can run on this host, else why not.
pub fn availability() -> Option<String> {
    symsched_runtime::is_available().err()
}

/// The symsched host runtime of this process (`symsched._native.Runtime`).
#[pyclass(name = "Runtime", module = "symsched._native", frozen)]
pub struct PyRuntime {
    pub(crate) runtime: Arc<Runtime>,
    /// Groups made so far, by member list (a group is set up once per process).
    groups: Mutex<Vec<(Vec<usize>, Py<PyGroup>)>>,
}

#[pymethods]
impl PyRuntime {
    /// Join the job from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
    /// LOCAL_WORLD_SIZE, MASTER_PORT, SYMSCHED_JOB_ID). Blocks until every local rank joined.
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Self> {
        let runtime = py.detach(Runtime::init_from_env).map_err(errors::rt)?;
        // Step events carry the global rank as trace pid, like the Python op events.
        if let Ok(r) = u32::try_from(runtime.rank()) {
            symsched_runtime::exec::trace::set_process_rank(r);
        }
        Ok(PyRuntime {
            runtime: Arc::new(runtime),
            groups: Mutex::new(Vec::new()),
        })
    }

    #[getter]
    fn rank(&self) -> usize {
        self.runtime.rank()
    }

    #[getter]
    fn world_size(&self) -> usize {
        self.runtime.world_size()
    }

    #[getter]
    fn local_rank(&self) -> usize {
        self.runtime.local_rank()
    }

    /// The private rendezvous directory of this job on this node.
    #[getter]
    fn rendezvous_dir(&self) -> String {
        self.runtime.config().rendezvous_dir.display().to_string()
    }

    /// Whether this process (local rank 0, directory derived from the environment) owns the
    /// rendezvous directory and so removes it at finalize.
    #[getter]
    fn owns_rendezvous_dir(&self) -> bool {
        let c = self.runtime.config();
        c.owns_rendezvous_dir && c.local_rank == 0
    }

    /// Barrier over every rank of the job (used by `symm.finalize`).
    fn world_barrier(&self, py: Python<'_>) -> PyResult<()> {
        let runtime = self.runtime.clone();
        py.detach(move || runtime.world().and_then(|w| w.barrier()).map_err(Box::new))
            .map_err(errors::rt_boxed)
    }

    /// Bytes of this rank's heap segment.
    #[getter]
    fn heap_size(&self) -> usize {
        self.runtime.heap().size()
    }

    /// Address of this rank's heap segment in this process.
    #[getter]
    fn heap_base(&self) -> usize {
        self.runtime.heap().base() as usize
    }

    /// Symmetric allocation of `nbytes` (64-byte aligned); a collective over the world (one
    /// barrier, without the GIL): a rank asking for another size fails the call on every rank
    /// (`AgreementError`) and the heap stays as it was.
    fn alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<HeapBlock> {
        let rt = self.runtime.clone();
        let a = py
            .detach(move || rt.empty_collective(nbytes.max(1), 64).map_err(Box::new))
            .map_err(errors::rt_boxed)?;
        Ok(HeapBlock {
            rt: self.runtime.clone(),
            offset: a.offset,
            nbytes: nbytes.max(1),
            freed: AtomicBool::new(false),
        })
    }

    /// Release `block`: a collective over the world (one barrier, without the GIL), so no
    /// rank reuses the block before every rank released it. Tensors over it must not be used
    /// afterwards.
    fn free(&self, py: Python<'_>, block: &HeapBlock) -> PyResult<()> {
        if block.freed.swap(true, Ordering::AcqRel) {
            return Err(errors::value("block was already freed"));
        }
        let (rt, offset) = (self.runtime.clone(), block.offset);
        py.detach(move || rt.free_collective(offset).map_err(Box::new))
            .map_err(|e| {
                block.freed.store(false, Ordering::Release);
                errors::rt_boxed(e)
            })
    }

    /// Heap offset of `block` (the same on every rank).
    fn offset_of(&self, block: &HeapBlock) -> usize {
        block.offset
    }

    /// `{"allocated", "peak", "free"}` bytes of the symmetric heap.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.runtime.stats();
        let d = PyDict::new(py);
        d.set_item("allocated", s.allocated)?;
        d.set_item("peak", s.peak)?;
        d.set_item("free", s.free)?;
        Ok(d)
    }

    /// The group of `members` (global ranks in group order); collective over the members on
    /// first use, cached afterwards.
    fn group(&self, py: Python<'_>, members: Vec<usize>) -> PyResult<Py<PyGroup>> {
        {
            let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, g)) = groups.iter().find(|(m, _)| *m == members) {
                return Ok(g.clone_ref(py));
            }
        }
        let runtime = self.runtime.clone();
        let m = members.clone();
        let g = py
            .detach(move || runtime.group(&m, false).map_err(Box::new))
            .map_err(errors::rt_boxed)?;
        let pg = Py::new(py, PyGroup::new(self.runtime.clone(), g)?)?;
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((members, pg.clone_ref(py)));
        Ok(pg)
    }

    fn __repr__(&self) -> String {
        format!(
            "Runtime(rank={}, world_size={}, heap={} bytes)",
            self.runtime.rank(),
            self.runtime.world_size(),
            self.runtime.heap().size()
        )
    }
}
