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
//!
//! When the caller also names the already-loaded library holding the BLAS `sgemm_`/`dgemm_` that
//! torch itself calls for float32/float64 `mm` on the CPU, steps whose three operands are all
//! float32 (or all float64) and aligned call that GEMM directly, without the GIL: a Python round
//! trip (GIL acquisition, view lookup, dispatch) costs several µs per step and an MC2 launch makes
//! P of them, where the separate path calls `torch.matmul` once. Every other step (16-bit floats,
//! fp8, mixed types) still goes to the callback.

use std::ffi::{c_char, c_int};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pyo3::prelude::*;
use symsched_runtime::exec::matmul::{self, MatmulEngine, MatmulStep};
use symsched_runtime::exec::{DType, ExecError};

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

/// The Fortran-interface GEMM (`sgemm_` / `dgemm_`, LP64 integers) of the BLAS torch links:
/// `C = alpha·op(A)·op(B) + beta·C`, column-major, every argument by reference. The two trailing
/// lengths are the hidden lengths of the `transa`/`transb` strings that Fortran callers pass.
type Gemm<T> = unsafe extern "C" fn(
    transa: *const c_char,
    transb: *const c_char,
    m: *const c_int,
    n: *const c_int,
    k: *const c_int,
    alpha: *const T,
    a: *const T,
    lda: *const c_int,
    b: *const T,
    ldb: *const c_int,
    beta: *const T,
    c: *mut T,
    ldc: *const c_int,
    transa_len: usize,
    transb_len: usize,
);

/// `c = a × b` for row-major operands through a column-major GEMM: row-major `c` is the
/// column-major `cᵀ = bᵀ·aᵀ`, so the operands are passed swapped and untransposed. `None` when
/// a dimension does not fit the LP64 integers or is 0 (left to the callback, which handles it).
///
/// # Safety
/// `c`, `a`, `b` point to m·n, m·k, k·n aligned elements of `T`; `c` overlaps neither operand;
/// `gemm` is a BLAS `?gemm_` of element type `T`.
unsafe fn gemm_row_major<T: From<u8>>(
    gemm: Gemm<T>,
    c: *mut T,
    a: *const T,
    b: *const T,
    (m, k, n): (usize, usize, usize),
) -> Option<()> {
    let (m, k, n) = (
        c_int::try_from(m).ok()?,
        c_int::try_from(k).ok()?,
        c_int::try_from(n).ok()?,
    );
    if m == 0 || k == 0 || n == 0 {
        return None;
    }
    let (no, one, zero) = (b'N' as c_char, T::from(1), T::from(0));
    // SAFETY: the caller's contract; beta = 0 means `c` is only written, never read.
    unsafe { gemm(&no, &no, &n, &m, &k, &one, b, &n, a, &k, &zero, c, &n, 1, 1) };
    Some(())
}

/// The GEMMs steps of one element type may call directly (see the module docs).
#[derive(Clone, Copy)]
struct Blas {
    sgemm: Option<Gemm<f32>>,
    dgemm: Option<Gemm<f64>>,
}

impl Blas {
    /// Run `s` on the BLAS when its types and alignment allow; false when it must go elsewhere.
    ///
    /// # Safety
    /// As for [`MatmulEngine::matmul`].
    unsafe fn try_run(&self, s: &MatmulStep) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { run_on(self.sgemm, DType::F32, s) || run_on(self.dgemm, DType::F64, s) }
    }
}

/// Run `s` on `gemm` when every operand is `dt` (element type `T`) and aligned for `T`.
///
/// # Safety
/// As for [`MatmulEngine::matmul`]; `dt` is the runtime's name of `T`.
unsafe fn run_on<T: From<u8>>(gemm: Option<Gemm<T>>, dt: DType, s: &MatmulStep) -> bool {
    let Some(g) = gemm else { return false };
    let aligned = [s.c.0 as usize, s.a.0 as usize, s.b.0 as usize]
        .iter()
        .all(|p| p.is_multiple_of(std::mem::align_of::<T>()));
    if !(aligned && s.a.1 == dt && s.b.1 == dt && s.c.1 == dt) {
        return false;
    }
    // SAFETY: the interpreter's contract for engine steps (ranges of m·n, m·k, k·n elements,
    // `c` disjoint from the operands), types and alignment checked just above.
    unsafe {
        gemm_row_major(
            g,
            s.c.0 as *mut T,
            s.a.0 as *const T,
            s.b.0 as *const T,
            (s.m, s.k, s.n),
        )
        .is_some()
    }
}

/// The callback engine with an optional direct BLAS path for float32/float64 steps.
struct BlasFirstEngine {
    blas: Blas,
    callback: PyCallbackEngine,
}

impl MatmulEngine for BlasFirstEngine {
    fn name(&self) -> &str {
        "python+blas"
    }

    unsafe fn matmul(&self, s: &MatmulStep, scratch: &mut Vec<f64>) -> Result<(), ExecError> {
        // SAFETY: forwarded from the caller.
        if unsafe { self.blas.try_run(s) } {
            return Ok(());
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.callback.matmul(s, scratch) }
    }
}

/// `sgemm_` / `dgemm_` of the library at `path`, which must already be loaded (`RTLD_NOLOAD`:
/// nothing is loaded or initialised here); `None` for a symbol it lacks.
fn blas_of(path: &str) -> PyResult<Blas> {
    let err = |what: &str| pyo3::exceptions::PyValueError::new_err(format!("{what}: {path}"));
    let c_path = std::ffi::CString::new(path).map_err(|_| err("NUL byte in the library path"))?;
    // SAFETY: `c_path` is a valid C string; RTLD_NOLOAD only returns a handle to a library the
    // process has already loaded (bumping its reference count, never released: torch keeps the
    // library loaded for the life of the process anyway, and the symbols must stay valid).
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if handle.is_null() {
        return Err(err("not a library this process has loaded"));
    }
    // SAFETY: `handle` is live (see above) and the names are valid C strings. The Fortran BLAS
    // symbols `sgemm_` / `dgemm_` have the reference-BLAS signature that `Gemm<T>` spells out.
    unsafe {
        let s = libc::dlsym(handle, c"sgemm_".as_ptr());
        let d = libc::dlsym(handle, c"dgemm_".as_ptr());
        Ok(Blas {
            sgemm: (!s.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, Gemm<f32>>(s)),
            dgemm: (!d.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, Gemm<f64>>(d)),
        })
    }
}

/// Send every matmul step of this process to `callback` (see the module docs), or back to the
/// executor's built-in deterministic kernel with `None`.
///
/// `blas_library` names an already-loaded library whose Fortran-interface (LP64) `sgemm_` /
/// `dgemm_` is the GEMM `callback` itself uses for float32 / float64 (torch's
/// `libtorch_cpu.so` with MKL): such steps then call it directly, without the GIL. A library
/// that is not loaded is a `ValueError`; one without the symbols leaves every step to
/// `callback`.
#[pyfunction]
#[pyo3(signature = (callback, blas_library = None))]
pub fn set_matmul_engine(callback: Option<Py<PyAny>>, blas_library: Option<&str>) -> PyResult<()> {
    let blas = match blas_library {
        Some(path) => blas_of(path)?,
        None => Blas {
            sgemm: None,
            dgemm: None,
        },
    };
    matmul::set_engine(callback.map(|callback| {
        let callback = PyCallbackEngine { callback };
        if blas.sgemm.is_none() && blas.dgemm.is_none() {
            Arc::new(callback) as Arc<dyn MatmulEngine>
        } else {
            Arc::new(BlasFirstEngine { blas, callback }) as Arc<dyn MatmulEngine>
        }
    }));
    Ok(())
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
        rt: rt.runtime.clone(),
        offset: 0,
        nbytes: rt.runtime.heap().size().max(1),
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
