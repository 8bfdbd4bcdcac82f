//! The cached call of an all-reduce, all-gather or reduce-scatter, checked and launched in one
//! native call (`symsched._native.TensorHits`).
//!
//! A cached call from Python read seven attributes per tensor, built a cache key holding each
//! tensor's dtype and element count, looked it up, checked released memory per buffer and
//! converted a list of `(address, bytes)` tuples for `Prepared.run`: at 8 B that front was
//! about two thirds of the call. Here the front keeps a key of what does not depend on the
//! tensors (the collective, the group, the op, the wire and the knobs) and one `TensorHits`
//! per such key holds the launches prepared for each (dtypes, element counts). `run` reads the
//! tensors, finds the launch, makes the cached path's checks and launches with the values as
//! read. Whatever is unusual — a non-tensor, another device or layout, a non-contiguous tensor,
//! a dtype or size not seen before, released memory, any error while reading — declines
//! (returns `False`) *before* anything is sent; the Python path then takes the call.

use std::sync::Mutex;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::heap_records::Records;
use crate::prepared::PyPrepared;
use crate::torch_tensor::torch_types;

/// The most tensors a cached call takes (the all-gather and reduce-scatter take two).
const MAX_TENSORS: usize = 4;

/// The most (dtypes, sizes) one key keeps; a full set is emptied, as the Python caches are.
const MAX_ENTRIES: usize = 256;

/// The launch prepared for one (dtypes, element counts) of the tensors, in buffer order.
struct Entry {
    dtypes: Vec<Py<PyAny>>,
    numels: Vec<u64>,
    /// Per tensor, whether it must lie in the symmetric heap (`Some(true)`), outside it
    /// (`Some(false)`), or either: the schedules of some sizes depend on the kind of a buffer.
    kinds: Vec<Option<bool>>,
    nbytes: Vec<usize>,
    prepared: Py<PyPrepared>,
    /// The addresses last found not to lie in released memory, and `memory._frees` then: while
    /// no block is released, the same addresses need no look-up (the memo `memory.live` keeps
    /// until the next `free`, without a dictionary look-up per buffer).
    live: Option<(u64, Buffers)>,
}

/// `(address, bytes)` of a call's buffers, in buffer order (the first `n` of them used).
type Buffers = [(usize, usize); MAX_TENSORS];

/// The launches cached for one key of the front (collective, group, op, wire, knobs), found by
/// the tensors' dtypes and element counts.
///
/// ```python
/// hits = TensorHits()
/// hits.add([torch.float32], [n], [4 * n], prepared)  # after a validated call
/// hits.run((tensor,), None, 0)  # the Prepared it launched; False: declined, nothing sent
/// ```
#[pyclass(name = "TensorHits", module = "symsched._native", frozen)]
pub struct PyTensorHits {
    entries: Mutex<Vec<Entry>>,
}

/// One tensor as read: its dtype object, element count and address.
struct Read<'py> {
    dtype: Bound<'py, PyAny>,
    ptr: usize,
    in_heap: bool,
}

/// The checks of the Python path's `plain` (a CPU, strided, contiguous `torch.Tensor`) on a
/// tensor already seen to be a `torch.Tensor` (its element count read), and what the launch
/// needs from it; `None` declines.
///
/// A tensor whose address lies in this rank's heap segment `heap` is a CPU tensor (the
/// segment is host memory mapped here) and a strided one (`data_ptr` raises for the layouts
/// without one storage), so only its contiguity and dtype are read: 5 attribute reads per
/// tensor instead of 9, ~0.16 µs of a call at 8 B. Any other address is checked in full.
fn read<'py>(
    t: &Bound<'py, PyAny>,
    strided: &Bound<'py, PyAny>,
    heap: (usize, usize),
) -> PyResult<Option<Read<'py>>> {
    let py = t.py();
    let ptr: usize = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
    let (base, len) = heap;
    let in_heap = ptr >= base && ptr - base < len;
    if !in_heap
        && (!t.getattr(intern!(py, "is_cpu"))?.is_truthy()?
            || !t.getattr(intern!(py, "layout"))?.is(strided))
    {
        return Ok(None);
    }
    if !t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()? {
        return Ok(None);
    }
    Ok(Some(Read {
        dtype: t.getattr(intern!(py, "dtype"))?,
        ptr,
        in_heap,
    }))
}

/// A launch that passed the checks: the prepared plan, its buffers and how many there are.
type Found = (Py<PyPrepared>, Buffers, usize);

/// What tells a buffer in released memory, as `run` takes it: `memory._records` when blocks
/// were released, and `memory._frees`.
struct Released<'a, 'py> {
    records: Option<&'a Bound<'py, PyAny>>,
    frees: u64,
}

impl PyTensorHits {
    /// The prepared launch and buffers for `tensors`, when every check passes.
    fn find(
        &self,
        tensors: &Bound<'_, PyTuple>,
        released: Released<'_, '_>,
    ) -> PyResult<Option<Found>> {
        let py = tensors.py();
        let Released { records, frees } = released;
        let (tensor, strided) = torch_types(py)?;
        let n = tensors.len();
        if n > MAX_TENSORS {
            return Ok(None);
        }
        // element counts first: a size no launch was kept for (a larger call of the same
        // shape, kept by the Python path under a key of its own) declines after one read
        let mut numels = [0u64; MAX_TENSORS];
        for (i, t) in tensors.iter().enumerate() {
            if !t.is_instance(&tensor)? {
                return Ok(None);
            }
            numels[i] = t.call_method0(intern!(py, "numel"))?.extract()?;
        }
        let numels = &numels[..n];
        let heap = {
            let Ok(entries) = self.entries.lock() else {
                return Ok(None);
            };
            match entries.iter().find(|e| e.numels == numels) {
                // every launch kept here runs in this rank's one heap segment
                Some(e) => e.prepared.get().heap,
                None => return Ok(None),
            }
        };
        let mut seen = Vec::with_capacity(n);
        for t in tensors.iter() {
            let Some(r) = read(&t, &strided, heap)? else {
                return Ok(None);
            };
            seen.push(r);
        }
        let mut buffers: Buffers = [(0, 0); MAX_TENSORS];
        let (prepared, trusted) = {
            let Ok(entries) = self.entries.lock() else {
                return Ok(None);
            };
            let Some(e) = entries.iter().find(|e| {
                e.numels == numels
                    && e.dtypes.iter().zip(&seen).all(|(d, r)| r.dtype.is(d))
                    && e.kinds
                        .iter()
                        .zip(&seen)
                        .all(|(k, r)| k.is_none_or(|k| k == r.in_heap))
            }) else {
                return Ok(None);
            };
            for (b, (r, &nb)) in buffers.iter_mut().zip(seen.iter().zip(&e.nbytes)) {
                *b = (r.ptr, nb);
            }
            let trusted = e.live.is_some_and(|(f, b)| f == frees && b == buffers);
            (e.prepared.clone_ref(py), trusted)
        };
        if let (Some(records), false) = (records, trusted) {
            // views of memory released with symm.free lie in the heap (see `a2a_hit`)
            let records = Records::new(records)?;
            for (r, &(ptr, nb)) in seen.iter().zip(&buffers) {
                if r.in_heap && records.span_live(ptr, nb)? != Some(true) {
                    return Ok(None);
                }
            }
            // every buffer found live: trusted until the next free (the GIL is held from the
            // look-up to here, and `free` counts after it marks a block released)
            if let Ok(mut entries) = self.entries.lock() {
                if let Some(e) = entries.iter_mut().find(|e| e.prepared.is(&prepared)) {
                    e.live = Some((frees, buffers));
                }
            }
        }
        Ok(Some((prepared, buffers, n)))
    }
}

#[pymethods]
impl PyTensorHits {
    #[new]
    fn new() -> Self {
        Self {
            entries: Mutex::new(Vec::new()),
        }
    }

    /// Remember `prepared` for tensors of `dtypes` and `numels`, in buffer order, whose buffers
    /// are `nbytes` long and, where `kinds` says, in the symmetric heap (`True`) or outside it
    /// (`False`) — a heap address is taken as symmetric, as `symm.empty` is the only way to
    /// one; released blocks are refused on their own — replacing a launch kept for the same
    /// dtypes, counts and kinds. Returns whether it was kept: only a native `Prepared` launch
    /// taking no alltoallv counts is (a launch across nodes, which runs host steps, stays with
    /// the Python path).
    #[pyo3(signature = (dtypes, numels, nbytes, prepared, kinds=None))]
    fn add(
        &self,
        dtypes: Vec<Py<PyAny>>,
        numels: Vec<u64>,
        nbytes: Vec<usize>,
        prepared: &Bound<'_, PyAny>,
        kinds: Option<Vec<Option<bool>>>,
    ) -> PyResult<bool> {
        let kinds = kinds.unwrap_or_else(|| vec![None; numels.len()]);
        if dtypes.len() != numels.len()
            || nbytes.len() != numels.len()
            || kinds.len() != numels.len()
            || numels.len() > MAX_TENSORS
        {
            return Err(crate::errors::value(
                "TensorHits.add: one dtype, count, byte size and kind per tensor, at most 4 tensors",
            ));
        }
        let Ok(prepared) = prepared.cast::<PyPrepared>() else {
            return Ok(false);
        };
        if prepared.get().needs_counts {
            return Ok(false);
        }
        let Ok(mut entries) = self.entries.lock() else {
            return Ok(false);
        };
        entries.retain(|e| {
            !(e.numels == numels
                && e.kinds == kinds
                && e.dtypes.iter().zip(&dtypes).all(|(a, b)| a.is(b)))
        });
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.push(Entry {
            dtypes,
            numels,
            kinds,
            nbytes,
            prepared: prepared.clone().unbind(),
            live: None,
        });
        Ok(true)
    }

    fn __len__(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    /// Launch the cached call of `tensors` (in buffer order) when every check passes: each a
    /// CPU, strided, contiguous `torch.Tensor` whose dtype and element count match a launch
    /// added here. `records`, when given, are `symsched.memory._records` (there are released
    /// blocks): a buffer in the symmetric heap must not lie in released memory; `frees` is
    /// `symsched.memory._frees` (how many blocks were released so far), under which buffers
    /// found live stay trusted. Returns the `Prepared` it launched, `False` having sent
    /// nothing when a check declines, and `(prepared, error)` when the launch failed (the
    /// caller maps the error as for `Prepared.run`). Releases the GIL while it launches.
    #[pyo3(signature = (tensors, records=None, frees=0))]
    fn run(
        &self,
        py: Python<'_>,
        tensors: &Bound<'_, PyTuple>,
        records: Option<&Bound<'_, PyAny>>,
        frees: u64,
    ) -> PyResult<Py<PyAny>> {
        let (prepared, buffers, n) = match self.find(tensors, Released { records, frees }) {
            Ok(Some(found)) => found,
            // an attribute that cannot be read is the Python path's to report
            Ok(None) | Err(_) => {
                return Ok(false.into_pyobject(py)?.to_owned().into_any().unbind());
            }
        };
        let p = prepared.get();
        // SAFETY: every buffer lies in a tensor of `tensors`, which the caller holds for the
        // whole call; each was checked contiguous, with the element count its byte size was
        // cached for.
        match py.detach(|| unsafe { p.launch(&buffers[..n], &p.sizes) }) {
            Ok(()) => Ok(prepared.into_any()),
            Err(e) => Ok((prepared, e.into_value(py))
                .into_pyobject(py)?
                .into_any()
                .unbind()),
        }
    }
}
