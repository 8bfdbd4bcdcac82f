//! `symsched._native`: the PyO3 module the `symsched` Python package sits on.
//!
//! It exposes the host runtime (symmetric heap, groups, one-sided primitives) and the plan
//! executor over compiled standard-library schedules. The Python package does argument
//! validation, autograd and profiling; this crate does memory, synchronisation and execution,
//! and releases the GIL for everything that can block.

mod a2a_hit;
mod block;
mod errors;
mod group;
mod heap_records;
mod hostcoll;
mod mc2;
mod plans;
mod prepared;
mod runtime;
mod signals;
mod tensor_hit;
mod torch_tensor;

use pyo3::prelude::*;

/// None when this host can run the runtime, else the reason it cannot.
#[pyfunction]
fn availability() -> Option<String> {
    runtime::availability()
}

/// Names of the schedules in the embedded standard library.
#[pyfunction]
fn schedules() -> Vec<String> {
    plans::schedule_names()
}

/// Merge the executor's buffered step events into `SYMSCHED_TRACE` (see
/// `symsched_runtime::exec::trace`); a no-op when tracing is off.
#[pyfunction]
fn flush_trace(py: Python<'_>) -> PyResult<()> {
    py.detach(symsched_runtime::exec::trace::flush)
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PLAN_SCHEMA_VERSION", symsched_plan::PLAN_SCHEMA_VERSION)?;
    m.add_function(wrap_pyfunction!(availability, m)?)?;
    m.add_function(wrap_pyfunction!(schedules, m)?)?;
    m.add_function(wrap_pyfunction!(flush_trace, m)?)?;
    m.add_function(wrap_pyfunction!(a2a_hit::alltoall_hit, m)?)?;
    m.add_class::<runtime::PyRuntime>()?;
    m.add_class::<block::HeapBlock>()?;
    m.add_class::<group::PyGroup>()?;
    m.add_class::<prepared::PyPrepared>()?;
    m.add_class::<tensor_hit::PyTensorHits>()?;
    mc2::register(m)?;
    hostcoll::register(m)?;
    Ok(())
}
