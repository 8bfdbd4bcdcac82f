//! A group of the runtime as seen from Python: one-sided primitives on heap offsets, plan
//! launches through the executor, and the duals of a schedule.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use symsched_plan::LaunchSizes;
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::backend::launches_on;
use symsched_runtime::exec::{DType, ElemTypes, Executor, GroupFabric, LaunchArgs, ReduceOp};
use symsched_runtime::{Group, Runtime};

use crate::errors;
use crate::plans::{self, Dual};
use crate::prepared::{self, PyPrepared};
use crate::signals::{self, cmp_from_code, SigOp};

/// One runtime group (`symsched._native.Group`): ordered global ranks, group-local peers.
#[pyclass(name = "Group", module = "symsched._native", frozen)]
pub struct PyGroup {
    runtime: Arc<Runtime>,
    group: Arc<Group>,
    exec: Arc<Executor<GroupFabric>>,
    /// The backend this group's launches run on (`Group.backend`), `None`: the executor's
    /// (`SYMSCHED_BACKEND`); a call's own `backend=` wins over both.
    backend: Mutex<Option<BackendKind>>,
}

/// A Python backend name (`interp`, `jit` or `auto`) as the runtime's choice.
pub(crate) fn parse_backend(name: Option<&str>) -> PyResult<Option<BackendKind>> {
    name.map(|b| {
        BackendKind::parse(b).ok_or_else(|| {
            errors::value(format!("unknown backend `{b}` (use interp, jit or auto)"))
        })
    })
    .transpose()
}

impl PyGroup {
    pub fn new(runtime: Arc<Runtime>, group: Arc<Group>) -> PyResult<Self> {
        let fabric = GroupFabric::new(group.clone());
        Ok(PyGroup {
            runtime,
            group,
            exec: Arc::new(Executor::new(fabric)),
            backend: Mutex::new(None),
        })
    }

    /// A call's backend, else the group's.
    fn backend_for(&self, call: Option<&str>) -> PyResult<Option<BackendKind>> {
        Ok(parse_backend(call)?.or(*self.backend.lock().unwrap_or_else(|e| e.into_inner())))
    }

    fn heap_range(&self) -> (usize, usize) {
        let h = self.runtime.heap();
        (h.base() as usize, h.size())
    }

    fn sig_ptr(&self, peer: usize, offset: usize, width: usize) -> PyResult<usize> {
        if width != 4 && width != 8 {
            return Err(errors::value(format!(
                "signal width must be 4 or 8 bytes, got {width}"
            )));
        }
        if !offset.is_multiple_of(width) {
            return Err(errors::value(format!(
                "signal offset {offset} is not {width}-byte aligned"
            )));
        }
        Ok(self
            .group
            .peer_ptr(peer, offset, width)
            .map_err(errors::rt)? as usize)
    }
}

/// A group's abort as Python sees it: `(global rank, group-local rank, message, permanent,
/// CLOCK_MONOTONIC ns of the abort)`.
pub(crate) type AbortRow = (usize, usize, String, bool, u64);

/// The abort `group` reports, or None (shared by every Python handle on a runtime group).
pub(crate) fn abort_row(group: &Group) -> Option<AbortRow> {
    group.aborted().map(|a| {
        (
            a.rank,
            a.local_rank,
            a.message,
            a.permanent,
            a.at_monotonic_ns,
        )
    })
}

/// The collective reset of an aborted `group`, without the GIL, bounded by `timeout_ms`
/// (default: the signal timeout); returns the new generation.
pub(crate) fn reset_after_abort(
    py: Python<'_>,
    group: &Arc<Group>,
    timeout_ms: Option<u64>,
) -> PyResult<u64> {
    let g = group.clone();
    let timeout = timeout_ms
        .map(Duration::from_millis)
        .unwrap_or_else(|| group.signal_timeout());
    py.detach(move || g.reset_after_abort_timeout(timeout).map_err(Box::new))
        .map_err(errors::rt_boxed)
}

#[pymethods]
impl PyGroup {
    /// This rank's index in the group.
    #[getter]
    fn rank(&self) -> usize {
        self.group.rank()
    }

    /// Number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.group.size()
    }

    /// The runtime's name of the group (its member list, e.g. `[0, 1]`): the executor's trace
    /// events use it for their lane (`tid` = `group <name>`).
    #[getter]
    fn name(&self) -> String {
        self.group.name().to_string()
    }

    /// The backend this group's launches run on: `"interp"`, `"jit"`, `"auto"`, or `None`
    /// for the `SYMSCHED_BACKEND` knob's choice. Every rank of the group should set the same.
    #[getter]
    fn get_backend(&self) -> Option<&'static str> {
        self.backend
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(BackendKind::name)
    }

    #[setter]
    fn set_backend(&self, name: Option<&str>) -> PyResult<()> {
        *self.backend.lock().unwrap_or_else(|e| e.into_inner()) = parse_backend(name)?;
        Ok(())
    }

    /// Global ranks in group order.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.group.members().to_vec()
    }

    /// Copy `nbytes` from local address `src_ptr` into `peer`'s heap at `dst_offset`.
    fn put(
        &self,
        py: Python<'_>,
        dst_offset: usize,
        src_ptr: usize,
        nbytes: usize,
        peer: usize,
    ) -> PyResult<()> {
        let g = self.group.clone();
        py.detach(move || {
            // SAFETY: the Python layer passes the address and length of a live, contiguous tensor
            // (empty tensors may have a null address, hence the special case).
            let src: &[u8] = if nbytes == 0 {
                &[]
            } else {
                unsafe { std::slice::from_raw_parts(src_ptr as *const u8, nbytes) }
            };
            g.put_bytes(peer, dst_offset, src).map_err(Box::new)
        })
        .map_err(errors::rt_boxed)
    }

    /// Copy `nbytes` of `peer`'s heap at `src_offset` into local address `dst_ptr`.
    fn get(
        &self,
        py: Python<'_>,
        dst_ptr: usize,
        src_offset: usize,
        nbytes: usize,
        peer: usize,
    ) -> PyResult<()> {
        let g = self.group.clone();
        py.detach(move || {
            // SAFETY: as in `put`.
            let dst: &mut [u8] = if nbytes == 0 {
                &mut []
            } else {
                unsafe { std::slice::from_raw_parts_mut(dst_ptr as *mut u8, nbytes) }
            };
            g.get_bytes(peer, src_offset, dst).map_err(Box::new)
        })
        .map_err(errors::rt_boxed)
    }

    /// Set (op 0) or add to (op 1) the `width`-byte signal word at heap `offset` on `peer`.
    fn signal(
        &self,
        offset: usize,
        value: i64,
        op: u32,
        peer: usize,
        width: usize,
    ) -> PyResult<()> {
        let sop = SigOp::from_code(op)
            .ok_or_else(|| errors::value(format!("signal op {op} is not SET=0 / ADD=1")))?;
        let p = self.sig_ptr(peer, offset, width)?;
        // SAFETY: sig_ptr bounds-checked and aligned the word inside the peer's mapping.
        unsafe { signals::update(p as *mut u8, width, sop, value) };
        Ok(())
    }

    /// Block until the local signal word at `offset` compares true (`cmp` in CANN numbering)
    /// against `value`; bounded by `timeout_ms` or the runtime's signal timeout.
    #[pyo3(signature = (offset, cmp, value, width, timeout_ms=None))]
    fn wait(
        &self,
        py: Python<'_>,
        offset: usize,
        cmp: u32,
        value: i64,
        width: usize,
        timeout_ms: Option<u64>,
    ) -> PyResult<i64> {
        let c = cmp_from_code(cmp)
            .ok_or_else(|| errors::value(format!("compare op {cmp} is not in 0..=5")))?;
        let p = self.sig_ptr(self.group.rank(), offset, width)?;
        let timeout = timeout_ms
            .map(Duration::from_millis)
            .unwrap_or_else(|| self.group.signal_timeout());
        // SAFETY: as in `signal`; the mapping outlives the wait (the group holds it).
        let r = py.detach(move || unsafe { signals::wait(p as *mut u8, width, c, value, timeout) });
        r.map_err(|observed| {
            errors::runtime(format!(
                "rank {} (group {:?}): shmem_wait_for_signal timed out after {} ms waiting for signal at heap \
                 offset {offset} {c:?} {value} (observed {observed})",
                self.runtime.rank(),
                self.group.members(),
                timeout.as_millis()
            ))
        })
    }

    /// `put` then a signal update on the same peer: the data is visible before the signal.
    #[allow(clippy::too_many_arguments)]
    fn put_with_signal(
        &self,
        py: Python<'_>,
        dst_offset: usize,
        src_ptr: usize,
        nbytes: usize,
        sig_offset: usize,
        value: i64,
        op: u32,
        peer: usize,
        width: usize,
    ) -> PyResult<()> {
        let sop = SigOp::from_code(op)
            .ok_or_else(|| errors::value(format!("signal op {op} is not SET=0 / ADD=1")))?;
        let p = self.sig_ptr(peer, sig_offset, width)?;
        self.put(py, dst_offset, src_ptr, nbytes, peer)?;
        // SAFETY: as in `signal`; the release update orders the copy above before it.
        unsafe { signals::update(p as *mut u8, width, sop, value) };
        Ok(())
    }

    /// Mark the group aborted by this rank with `message`: every member's waits on the group
    /// fail at once naming this rank and the message, and the group refuses waits until every
    /// member calls `reset_after_abort` (see `symsched_runtime::abort`). A no-op when some
    /// member already aborted it.
    fn abort(&self, message: &str) {
        self.group.abort(message);
    }

    /// The abort the group reports, as `(global rank, group-local rank, message, permanent,
    /// CLOCK_MONOTONIC ns of the abort)`, or None when no member aborted it.
    fn aborted(&self) -> Option<AbortRow> {
        abort_row(&self.group)
    }

    /// Make an aborted group usable again: collective over the members, bounded by
    /// `timeout_ms` (default: the signal timeout). Returns the new generation.
    #[pyo3(signature = (timeout_ms=None))]
    fn reset_after_abort(&self, py: Python<'_>, timeout_ms: Option<u64>) -> PyResult<u64> {
        reset_after_abort(py, &self.group, timeout_ms)
    }

    /// A new handle on the same runtime group with a fresh executor (no loaded plan, every
    /// launch epoch at 0). `reset_after_abort` zeroes the signal pad, so the epochs this
    /// handle's loaded plans count from no longer match it (and differ between the ranks that
    /// launched the failed collective and the one that did not): after a reset a layer
    /// launches through a renewed handle.
    fn renewed(&self) -> PyResult<PyGroup> {
        PyGroup::new(self.runtime.clone(), self.group.clone())
    }

    /// Completed resets of this group on this rank.
    fn generation(&self) -> u64 {
        self.group.generation()
    }

    /// Block until every member reached the barrier.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.group.clone();
        py.detach(move || g.barrier().map_err(Box::new))
            .map_err(errors::rt_boxed)
    }

    /// Run standard schedule `schedule` on this group. `buffers` are (address, bytes) of the role
    /// buffers in signature order: heap addresses are used in place, others staged. Returns None:
    /// step events are recorded by the executor itself (`symsched_runtime::exec::trace`) and
    /// merged into `SYMSCHED_TRACE` by `_native.flush_trace`, so `trace` is unused.
    /// `backend` runs this launch on `"interp"`, `"jit"` or `"auto"` instead of the group's.
    #[pyo3(signature = (schedule, params, buffers, dtype, op, wire, sizes, send_counts=None, recv_counts=None, trace=false, backend=None))]
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        py: Python<'_>,
        schedule: &str,
        params: BTreeMap<String, i64>,
        buffers: Vec<(usize, usize)>,
        dtype: &str,
        op: Option<&str>,
        wire: Option<&str>,
        sizes: BTreeMap<String, u64>,
        send_counts: Option<Vec<u64>>,
        recv_counts: Option<Vec<u64>>,
        trace: bool,
        backend: Option<&str>,
    ) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let _ = trace;
        let backend = self.backend_for(backend)?;
        let size =
            u32::try_from(self.group.size()).map_err(|_| errors::value("group too large"))?;
        let plan = plans::plan(schedule, size, &params).map_err(errors::value)?;
        let data = DType::parse(dtype).map_err(|e| errors::exec(e.into()))?;
        let wire = wire
            .map(DType::parse)
            .transpose()
            .map_err(|e| errors::exec(e.into()))?;
        let types = ElemTypes::new(data, wire).map_err(errors::exec)?;
        let rop = ReduceOp::parse(op.unwrap_or("sum")).map_err(|e| errors::exec(e.into()))?;
        let (base, len) = self.heap_range();
        let exec = self.exec.clone();
        let me = self.group.rank();
        let members = self.group.members().to_vec();
        py.detach(move || -> PyResult<()> {
            let lp = exec.load(&plan).map_err(errors::exec)?;
            let mut ls = LaunchSizes {
                vars: sizes,
                counts: None,
            };
            if let Some(row) = send_counts {
                ls.counts = Some(prepared::exchange_counts(
                    &exec,
                    row,
                    recv_counts,
                    &members,
                    me,
                )?);
            }
            // SAFETY: (ptr, n) describe live contiguous tensors the caller keeps alive for the
            // duration of the launch; no other Rust reference aliases them.
            let mut binds = unsafe { prepared::bind((base, len), &buffers) };
            launches_on(backend, || {
                exec.launch(
                    &lp,
                    LaunchArgs {
                        types,
                        op: rop,
                        sizes: &ls,
                        buffers: &mut binds,
                    },
                )
            })
            .map_err(errors::exec)
        })?;
        Ok(None)
    }

    /// Prepare launches of `schedule` with fixed `params`, element types, reduce op and `sizes`
    /// (compiles and loads the plan once); `Prepared.run(buffers)` then only binds buffers.
    /// Plans whose extents use alltoallv counts run with `Prepared.run_counts`. Every launch is
    /// agreed by every rank (sizes, dtypes, op, binding pattern), so `check_always` no longer
    /// changes anything; it is accepted so existing callers keep working.
    /// `backend` (`"interp"`, `"jit"`, `"auto"`) fixes the backend of its runs, else the
    /// group's at this call.
    #[pyo3(signature = (schedule, params, dtype, op, wire, sizes, check_always=false, backend=None))]
    #[allow(clippy::too_many_arguments)] // mirrors the Python call: one argument per launch property
    fn prepare(
        &self,
        py: Python<'_>,
        schedule: &str,
        params: BTreeMap<String, i64>,
        dtype: &str,
        op: Option<&str>,
        wire: Option<&str>,
        sizes: BTreeMap<String, u64>,
        check_always: bool,
        backend: Option<&str>,
    ) -> PyResult<PyPrepared> {
        let backend = self.backend_for(backend)?;
        let _ = check_always;
        let size =
            u32::try_from(self.group.size()).map_err(|_| errors::value("group too large"))?;
        let plan = py
            .detach(|| plans::plan(schedule, size, &params))
            .map_err(errors::value)?;
        let needs_counts = plan
            .buffers
            .iter()
            .any(|b| matches!(b.extent, symsched_plan::Extent::Counts { .. }));
        let data = DType::parse(dtype).map_err(|e| errors::exec(e.into()))?;
        let wire = wire
            .map(DType::parse)
            .transpose()
            .map_err(|e| errors::exec(e.into()))?;
        let types = ElemTypes::new(data, wire).map_err(errors::exec)?;
        let rop = ReduceOp::parse(op.unwrap_or("sum")).map_err(|e| errors::exec(e.into()))?;
        let lp = self.exec.load(&plan).map_err(errors::exec)?;
        Ok(PyPrepared {
            exec: self.exec.clone(),
            plan: lp,
            types,
            op: rop,
            sizes: LaunchSizes {
                vars: sizes,
                counts: None,
            },
            heap: self.heap_range(),
            rank: self.group.rank(),
            members: self.group.members().to_vec(),
            needs_counts,
            backend,
        })
    }

    /// The duals `schedule` declares for this group size: dicts with `kind` ("schedule" or
    /// "identity_assuming_replicated"), and for schedules `name`, `params`, `collective`.
    fn duals<'py>(
        &self,
        py: Python<'py>,
        schedule: &str,
        params: BTreeMap<String, i64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let size =
            u32::try_from(self.group.size()).map_err(|_| errors::value("group too large"))?;
        let plan = plans::plan(schedule, size, &params).map_err(errors::value)?;
        let ds = plans::duals(&plan).map_err(errors::value)?;
        ds.into_iter()
            .map(|d| {
                let out = PyDict::new(py);
                match d {
                    Dual::Schedule {
                        name,
                        params,
                        collective,
                    } => {
                        out.set_item("kind", "schedule")?;
                        out.set_item("name", name)?;
                        out.set_item("params", params)?;
                        out.set_item("collective", collective)?;
                    }
                    Dual::IdentityAssumingReplicated => {
                        out.set_item("kind", "identity_assuming_replicated")?;
                    }
                }
                Ok(out)
            })
            .collect()
    }
}
