//! The cached call of a small alltoall, checked and launched in one native call
//! (`symsched._native.alltoall_hit`).
//!
//! A cached alltoall from Python used to read a dozen tensor attributes, build a cache key of
//! tuples and convert the buffer and count lists for `Prepared.run_counts`: about 4 µs of
//! interpreter work around a 1–4 µs native call. Here the same checks read the attributes
//! straight from the objects and the launch takes the values as read, so no Python object is
//! built per call. Whatever is unusual — a non-tensor, another dtype or device, a list whose
//! members are not back to back, a count that is not a plain non-negative int, any error while
//! reading — declines (returns `False`) *before* anything is sent, and the Python full path
//! then reports it with the argument named.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyTuple};

use crate::heap_records::{released_tensor, Records};
use crate::prepared::PyPrepared;
use crate::torch_tensor::{see, torch_types};

/// The members of a list or tuple (anything else declines).
fn members<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        Some(l.iter().collect())
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Some(t.iter().collect())
    } else {
        None
    }
}

/// Everything checked and nothing sent yet: the launch's buffers and counts.
struct Launch {
    buffers: [(usize, usize); 2],
    send: Vec<u64>,
    recv: Vec<u64>,
}

/// The checks of a cached alltoall; `None` declines.
#[allow(clippy::too_many_arguments)] // the call's arguments, as Python passes them
fn check(
    prepared: &PyPrepared,
    sends: &[Bound<'_, PyAny>],
    receive: &Bound<'_, PyAny>,
    dtype: &Bound<'_, PyAny>,
    receive_list: &Bound<'_, PyAny>,
    grad: bool,
    records: Option<&Records<'_>>,
    released: Option<&Bound<'_, PyDict>>,
) -> PyResult<Option<Launch>> {
    let py = receive.py();
    let (tensor, strided) = torch_types(py)?;
    let (tensor, strided) = (&tensor, &strided);
    let p = prepared.members.len();
    if sends.len() != p || !receive.is_instance(tensor)? {
        return Ok(None);
    }
    if !receive.getattr(intern!(py, "dtype"))?.is(dtype) {
        return Ok(None);
    }
    let Some(r) = see(receive, tensor, strided, None, false)? else {
        return Ok(None);
    };
    if !r.contiguous {
        return Ok(None);
    }
    if r.numel == 0 && released.is_some_and(|d| released_tensor(d, receive).unwrap_or(true)) {
        return Ok(None);
    }
    let Some(counts) = members(receive_list) else {
        return Ok(None);
    };
    if counts.len() != p {
        return Ok(None);
    }
    let mut recv = Vec::with_capacity(p);
    for c in &counts {
        // exactly int: a bool (True == 1) or a 0-d tensor goes through the full path's checks
        if !c.is_exact_instance_of::<PyInt>() {
            return Ok(None);
        }
        let Ok(v) = c.extract::<u64>() else {
            return Ok(None);
        };
        recv.push(v);
    }
    let total = recv.iter().try_fold(0u64, |a, &c| a.checked_add(c));
    if total != Some(r.numel) {
        return Ok(None);
    }
    // the caller picks the launch prepared for this dtype; its element size is what every
    // address range below is measured in
    let esize = prepared.types.data.size();
    if receive
        .getattr(intern!(py, "itemsize"))?
        .extract::<usize>()?
        != esize
    {
        return Ok(None);
    }
    // (first address, one past the last) of the non-empty members: torch reports address 0
    // for an empty tensor, which has no place in the buffer
    let mut span: Option<(usize, usize)> = None;
    let mut send = Vec::with_capacity(p);
    for t in sends {
        let Some(s) = see(t, tensor, strided, Some(dtype), grad)? else {
            return Ok(None);
        };
        send.push(s.numel);
        if s.numel == 0 {
            if released.is_some_and(|d| released_tensor(d, t).unwrap_or(true)) {
                return Ok(None);
            }
            continue;
        }
        let Some(bytes) = usize::try_from(s.numel)
            .ok()
            .and_then(|n| n.checked_mul(esize))
        else {
            return Ok(None);
        };
        let start = match span {
            None => s.ptr,
            // a list that is not one buffer in order is concatenated by the Python path
            Some((start, end)) if s.ptr == end => start,
            Some(_) => return Ok(None),
        };
        if !s.contiguous {
            return Ok(None);
        }
        let Some(end) = s.ptr.checked_add(bytes) else {
            return Ok(None);
        };
        span = Some((start, end));
    }
    let (start, end) = span.unwrap_or((0, 0));
    let rbytes = usize::try_from(r.numel)
        .ok()
        .and_then(|n| n.checked_mul(esize));
    let Some(rbytes) = rbytes else {
        return Ok(None);
    };
    let buffers = [(start, end - start), (r.ptr, rbytes)];
    if let Some(records) = records {
        // views of memory released with symm.free (the full path raises StaleTensorError) lie
        // in the heap: memory outside it needs no look-up
        let (base, len) = prepared.heap;
        for (ptr, n) in buffers {
            if ptr >= base && ptr - base <= len && records.span_live(ptr, n)? != Some(true) {
                return Ok(None);
            }
        }
    }
    Ok(Some(Launch {
        buffers,
        send,
        recv,
    }))
}

/// Run a cached alltoall through `prepared` (a plain `alltoallv` launch) when every argument
/// passes the checks the Python fast path made: `send_tensor_list` (list or tuple, one tensor
/// per group rank, CPU, strided, the receive tensor's dtype, back to back in memory in order),
/// `receive_tensor` (CPU, strided, contiguous, `sum(receive_list)` elements, of `dtype`: the
/// caller passes the dtype it picked `prepared` by), `receive_list`
/// (plain non-negative ints, one per rank). With `grad`, a send tensor that requires grad
/// declines; `records`, when given, are `symsched.memory`'s `(_starts, _allocs, _live_ok,
/// _lock)` (there are released records), and a buffer in the symmetric heap must not lie in
/// released memory; `released`, when given, is `symsched.memory._released` (tensors `symm.free`
/// released, by id), and no argument may be one of them.
/// Returns `False`, having sent nothing, when a check declines; `True` after the launch.
/// Launch errors are raised as `Prepared.run_counts` raises them. Releases the GIL while it runs.
#[pyfunction]
#[pyo3(signature = (prepared, send_tensor_list, receive_tensor, dtype, receive_list, grad, records=None, released=None))]
#[allow(clippy::too_many_arguments)] // the call's arguments, as Python passes them
pub fn alltoall_hit(
    py: Python<'_>,
    prepared: PyRef<'_, PyPrepared>,
    send_tensor_list: &Bound<'_, PyAny>,
    receive_tensor: &Bound<'_, PyAny>,
    dtype: &Bound<'_, PyAny>,
    receive_list: &Bound<'_, PyAny>,
    grad: bool,
    records: Option<&Bound<'_, PyAny>>,
    released: Option<&Bound<'_, PyDict>>,
) -> PyResult<bool> {
    if !prepared.eager_plan() {
        return Ok(false);
    }
    // held across the launch: the tensors (and so their memory) outlive it even if another
    // thread empties the caller's list meanwhile
    let Some(sends) = members(send_tensor_list) else {
        return Ok(false);
    };
    let records = match records.map(Records::new).transpose() {
        Ok(r) => r,
        Err(_) => return Ok(false),
    };
    let launch = match check(
        &prepared,
        &sends,
        receive_tensor,
        dtype,
        receive_list,
        grad,
        records.as_ref(),
        released,
    ) {
        Ok(Some(l)) => l,
        // an attribute that cannot be read is the full path's to report
        Ok(None) | Err(_) => return Ok(false),
    };
    let prepared = &*prepared;
    // SAFETY: both buffers lie in tensors held above (`sends`, `receive_tensor`) for the whole
    // call; they were checked contiguous, and the eager call copies a send buffer that
    // overlaps the receive buffer before writing.
    py.detach(|| unsafe { prepared.run_eager(&launch.buffers, &launch.send, &launch.recv) })?;
    Ok(true)
}
