//! Mapping of the runtime's typed errors onto Python exceptions.
//!
//! Bad inputs become `ValueError`; everything else (timeouts, dead peers, bootstrap failures)
//! becomes `RuntimeError`. The Python layer wraps both in symsched's own exception types. A
//! launch the ranks disagree on is symsched's own `AgreementError` (a `SymschedRuntimeError`
//! and a `ValueError`), raised alike on every rank.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::types::{PyAnyMethods, PyType};
use pyo3::{PyErr, Python};
use symsched_runtime::exec::ExecError;
use symsched_runtime::RuntimeError;

/// A runtime error as a Python exception.
pub fn rt(e: RuntimeError) -> PyErr {
    match e {
        RuntimeError::RankOutsideGroup { .. }
        | RuntimeError::RankOutsideWorld { .. }
        | RuntimeError::NotAMember { .. }
        | RuntimeError::InvalidGroup { .. }
        | RuntimeError::OffsetPastHeap { .. }
        | RuntimeError::ReservedRange { .. }
        | RuntimeError::SizeMismatch { .. }
        | RuntimeError::BadAlignment(_)
        | RuntimeError::InvalidFree { .. } => PyValueError::new_err(e.to_string()),
        RuntimeError::AllocMismatch { .. } => agreement(e.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// A boxed runtime error (closures that run without the GIL box it to stay small).
#[allow(clippy::boxed_local)] // the box is what crossed the GIL-free closure
pub fn rt_boxed(e: Box<RuntimeError>) -> PyErr {
    rt(*e)
}

/// An executor error as a Python exception.
pub fn exec(e: ExecError) -> PyErr {
    match e {
        ExecError::RankOutsideGroup { .. }
        | ExecError::OffsetPastHeap { .. }
        | ExecError::SizeMismatch { .. }
        | ExecError::BindingCount { .. }
        | ExecError::DtypeMismatch(_)
        | ExecError::UnsupportedOp { .. }
        | ExecError::UnknownName { .. }
        | ExecError::GroupSizeMismatch { .. }
        | ExecError::CountsMismatch { .. } => PyValueError::new_err(e.to_string()),
        ExecError::Disagreement(d) => agreement(d.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// `symsched.core.errors.AgreementError(msg)`, or a `ValueError` when that module cannot be
/// imported (the native module used on its own).
pub fn agreement(msg: String) -> PyErr {
    Python::attach(|py| {
        let cls = py
            .import("symsched.core.errors")
            .and_then(|m| m.getattr("AgreementError"))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match cls {
            Ok(cls) => PyErr::from_type(cls, msg),
            Err(_) => PyValueError::new_err(msg),
        }
    })
}

/// A plain message as a `ValueError`.
pub fn value(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

/// A plain message as a `RuntimeError`.
pub fn runtime(msg: impl Into<String>) -> PyErr {
    PyRuntimeError::new_err(msg.into())
}
