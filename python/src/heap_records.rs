//! `symsched.memory`'s bookkeeping of released symmetric memory, read from native code: the
//! cached calls (`a2a_hit`, `tensor_hit`) refuse a buffer in a block `symm.free` released, as
//! the Python path does, without a Python call per buffer.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// `symsched.memory`'s allocation records, as the caller passes them when some block was
/// released: `(starts, allocs, live_ok, lock)` — sorted start addresses; start → record with
/// `start`, `nbytes`, `live`; the memo `ptr → nbytes` of ranges found live since the last
/// `free`; the lock every change to the records and `free`'s clearing of the memo hold.
pub(crate) struct Records<'py> {
    starts: Bound<'py, PyList>,
    allocs: Bound<'py, PyDict>,
    live_ok: Bound<'py, PyDict>,
    lock: Bound<'py, PyAny>,
}

impl<'py> Records<'py> {
    pub(crate) fn new(records: &Bound<'py, PyAny>) -> PyResult<Self> {
        let (starts, allocs, live_ok, lock) = records.extract()?;
        Ok(Self {
            starts,
            allocs,
            live_ok,
            lock,
        })
    }

    /// Whether no byte of `[ptr, ptr + n)` can be a view of memory released with `symm.free`
    /// (`None`: not decided here, the caller declines). A range in the memo is live, as
    /// `memory.live` takes it; otherwise the records decide, read under the lock (taken without
    /// blocking: a busy lock declines), and a live answer enters the memo there, as
    /// `memory.live` adds it. Measured in the perftest's sweep (every size frees its buffers):
    /// the look-up on every call was ~0.35 µs of a ~2.6 µs cached alltoall.
    pub(crate) fn span_live(&self, ptr: usize, n: usize) -> PyResult<Option<bool>> {
        let py = self.starts.py();
        if let Some(m) = self.live_ok.get_item(ptr)? {
            if m.extract::<usize>().is_ok_and(|m| m == n) {
                return Ok(Some(true));
            }
        }
        if !self
            .lock
            .call_method1(intern!(py, "acquire"), (false,))?
            .is_truthy()?
        {
            return Ok(None);
        }
        let live = self.records_say_live(ptr, n);
        if matches!(live, Ok(true)) {
            // `memory.live` bounds the memo the same way
            if self.live_ok.len() >= LIVE_MAX {
                self.live_ok.clear();
            }
            let noted = self.live_ok.set_item(ptr, n);
            self.lock.call_method0(intern!(py, "release"))?;
            noted?;
        } else {
            self.lock.call_method0(intern!(py, "release"))?;
        }
        live.map(Some)
    }

    /// True when the span lies in one live record (then so does every tensor in it) or touches
    /// none; false (the per-tensor checks decide) when it lies in a released one or straddles
    /// records. A native mirror of `memory._lookup` for a span of several tensors.
    fn records_say_live(&self, ptr: usize, n: usize) -> PyResult<bool> {
        let py = self.starts.py();
        let starts = &self.starts;
        let end = ptr.saturating_add(n);
        // bisect_right: the number of records starting at or before `ptr`
        let (mut lo, mut hi) = (0, starts.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if ptr < starts.get_item(mid)?.extract::<usize>()? {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if lo > 0 {
            let Some(a) = self.allocs.get_item(starts.get_item(lo - 1)?)? else {
                return Ok(false);
            };
            let a_end = a
                .getattr(intern!(py, "start"))?
                .extract::<usize>()?
                .saturating_add(a.getattr(intern!(py, "nbytes"))?.extract()?);
            if end <= a_end {
                return a.getattr(intern!(py, "live"))?.is_truthy();
            }
            if ptr < a_end {
                return Ok(false);
            }
        }
        Ok(lo >= starts.len() || starts.get_item(lo)?.extract::<usize>()? >= end)
    }
}

/// `memory._LIVE_MAX`: the memo is emptied when it reaches this many ranges.
const LIVE_MAX: usize = 4096;

/// Whether `t` is a tensor `symm.free` released: `released` maps `id(t)` to a weak reference
/// (which tells a reused id apart). Only empty tensors need asking: `free` leaves its tensor
/// with no elements.
pub(crate) fn released_tensor(
    released: &Bound<'_, PyDict>,
    t: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let Some(r) = released.get_item(t.as_ptr() as usize)? else {
        return Ok(false);
    };
    Ok(r.call0()?.is(t))
}
