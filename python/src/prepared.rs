//! A launch prepared once per (group, schedule, params, dtype, op, wire, sizes): the compiled
//! and loaded plan, element types and launch sizes, so a call from Python only binds buffers.
//!
//! Every launch is agreed by the executor itself before data moves (element counts, dtypes,
//! op and the binding rule — a role buffer bound the same way on every rank: the same heap
//! offset when symmetric, or staged everywhere; see `symsched_runtime::exec::agreement`): a
//! disagreement is an `AgreementError` on every rank. So this layer keeps no per-rank record of
//! what was checked — nothing here decides differently on different ranks what a rank
//! launches. An eager alltoallv (`run_counts` with receive counts) checks its counts in its
//! own round.

use std::sync::Arc;

use pyo3::prelude::*;
use symsched_plan::{BufferRole, CollectiveKind, LaunchSizes};
use symsched_runtime::exec::binding::{binding_pattern, EMPTY, STAGED};
use symsched_runtime::exec::{
    AlltoallvOutcome, Binding, ElemTypes, Executor, GroupFabric, LaunchArgs, LoadedPlan, ReduceOp,
};

use crate::errors;

/// A prepared launch (`symsched._native.Prepared`); see the module docs.
#[pyclass(name = "Prepared", module = "symsched._native", frozen)]
pub struct PyPrepared {
    pub(crate) exec: Arc<Executor<GroupFabric>>,
    pub(crate) plan: Arc<LoadedPlan>,
    pub(crate) types: ElemTypes,
    pub(crate) op: ReduceOp,
    pub(crate) sizes: LaunchSizes,
    /// (base, length) of this rank's heap segment in this process.
    pub(crate) heap: (usize, usize),
    pub(crate) rank: usize,
    pub(crate) members: Vec<usize>,
    /// Whether the plan's extents take alltoallv counts (run with `run_counts`, not `run`).
    pub(crate) needs_counts: bool,
    /// The backend its runs use (`None`: the executor's).
    pub(crate) backend: Option<symsched_runtime::config::BackendKind>,
}

/// Exchange this rank's send-count row, check that the counts the peers send here equal
/// `recv_counts` (when given), and return the count matrix (the launch then agrees on it and
/// on the binding pattern).
///
/// The exchange is needed on every alltoallv launch, cached or not: where this rank writes into
/// a peer's buffer depends on what every other rank sends that peer, which only they know.
pub(crate) fn exchange_counts(
    exec: &Executor<GroupFabric>,
    row: Vec<u64>,
    recv_counts: Option<Vec<u64>>,
    members: &[usize],
    me: usize,
) -> PyResult<Vec<Vec<u64>>> {
    let p = members.len();
    if row.len() != p {
        return Err(errors::value(format!(
            "send counts must have one entry per group rank ({p}), got {}",
            row.len()
        )));
    }
    let m = exec
        .allgather_u64("python/counts", &row)
        .map_err(errors::exec)?;
    if let Some(expect) = recv_counts {
        let got: Vec<u64> = m.iter().map(|r| r.get(me).copied().unwrap_or(0)).collect();
        if got != expect {
            return Err(errors::value(format!(
                "`receive_list` {expect:?} does not match what the peers send to this rank {got:?}"
            )));
        }
    }
    Ok(m)
}

/// Bind `buffers` ((address, bytes) each) against the heap `(base, len)`: heap addresses in
/// place, others as host memory to stage, empty ones as empty host slices.
///
/// # Safety
/// Every non-heap `(ptr, n)` with `n > 0` must describe live, writable memory that nothing
/// else accesses while the bindings are alive.
pub(crate) unsafe fn bind<'a>(
    heap: (usize, usize),
    buffers: &[(usize, usize)],
) -> Vec<Binding<'a>> {
    let (base, len) = heap;
    buffers
        .iter()
        .map(|&(ptr, n)| {
            if n == 0 {
                Binding::Host(&mut [])
            } else if ptr >= base && ptr + n <= base + len {
                Binding::Heap {
                    offset: (ptr - base) as u64,
                    bytes: n as u64,
                }
            } else {
                // SAFETY: the caller's contract (see above)
                Binding::Host(unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, n) })
            }
        })
        .collect()
}

impl PyPrepared {
    /// Whether this launch is a plain alltoallv (`in`, `out`, no wire conversion), which
    /// `run_counts` runs with the runtime's eager protocol. Decided by the plan and types
    /// alone, never by the buffers, so every rank of a consistent call takes the same protocol.
    pub(crate) fn eager_plan(&self) -> bool {
        let plan = self.plan.plan();
        plan.collective == CollectiveKind::Alltoallv
            && plan.buffers.len() == 2
            && plan.buffers[0].role == BufferRole::Input
            && plan.buffers[1].role == BufferRole::Output
            && self.types.wire == self.types.data
    }

    /// The eager alltoallv (see `symsched_runtime::exec::eager`): one round for small chunks;
    /// for large ones the plan runs after the header round with the matrix it carried (and the
    /// binding check the plan needs). Without the GIL.
    ///
    /// # Safety
    /// As for [`bind`]: `buffers` = [(send address, bytes), (receive address, bytes)] of live
    /// tensors the caller keeps alive for the duration of the call.
    pub(crate) unsafe fn run_eager(
        &self,
        buffers: &[(usize, usize)],
        send_counts: &[u64],
        recv_counts: &[u64],
    ) -> PyResult<()> {
        let [(sp, sn), (rp, rn)] = *buffers else {
            return Err(errors::value(format!(
                "alltoallv takes 2 buffers (send, receive), got {}",
                buffers.len()
            )));
        };
        // A send buffer overlapping the receive buffer is read from a copy: the two are held as
        // separate slices, and the protocol must not depend on where the tensors live.
        let copy: Vec<u8>;
        let overlap = sn > 0 && rn > 0 && sp < rp + rn && rp < sp + sn;
        let send: &[u8] = if sn == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract: a live tensor of sn bytes.
            let s = unsafe { std::slice::from_raw_parts(sp as *const u8, sn) };
            if overlap {
                copy = s.to_vec();
                &copy
            } else {
                s
            }
        };
        // Large chunks of a symmetric send buffer are pulled by the receivers in place.
        let send_heap = match binding_pattern(self.heap, &[(sp, sn)])[..] {
            [off] if !overlap && off != STAGED && off != EMPTY => Some(off),
            _ => None,
        };
        let recv: &mut [u8] = if rn == 0 {
            &mut []
        } else {
            // SAFETY: the caller's contract; `send` no longer aliases it (copied when it did).
            unsafe { std::slice::from_raw_parts_mut(rp as *mut u8, rn) }
        };
        let outcome = self
            .exec
            .alltoallv_eager(
                self.types.data,
                send_counts,
                recv_counts,
                send,
                send_heap,
                recv,
            )
            .map_err(errors::exec)?;
        match outcome {
            AlltoallvOutcome::Done => Ok(()),
            AlltoallvOutcome::Rendezvous(m) => {
                let sizes = LaunchSizes {
                    vars: self.sizes.vars.clone(),
                    counts: Some(m),
                };
                // SAFETY: the caller's contract; the slices above are no longer used.
                unsafe { self.launch(buffers, &sizes) }
            }
        }
    }

    /// One launch of the plan over `buffers` with `sizes` (the GIL already released).
    ///
    /// # Safety
    /// As for [`bind`]: the caller keeps the tensors `buffers` describe alive for the duration
    /// of the launch, and no Rust reference aliases them.
    pub(crate) unsafe fn launch(
        &self,
        buffers: &[(usize, usize)],
        sizes: &LaunchSizes,
    ) -> PyResult<()> {
        let mut binds = bind(self.heap, buffers);
        symsched_runtime::exec::backend::launches_on(self.backend, || {
            self.exec.launch(
                &self.plan,
                LaunchArgs {
                    types: self.types,
                    op: self.op,
                    sizes,
                    buffers: &mut binds,
                },
            )
        })
        .map_err(errors::exec)
    }
}

#[pymethods]
impl PyPrepared {
    /// Name of the schedule this launch runs.
    #[getter]
    fn schedule(&self) -> String {
        self.plan.plan().schedule.clone()
    }

    /// Run the launch with `buffers` = (address, bytes) of the role buffers in signature order:
    /// heap addresses are used in place, others staged. Releases the GIL while it runs.
    fn run(&self, py: Python<'_>, buffers: Vec<(usize, usize)>) -> PyResult<()> {
        if self.needs_counts {
            return Err(errors::value(format!(
                "schedule `{}` takes alltoallv counts; launch it with run_counts",
                self.plan.plan().schedule
            )));
        }
        py.detach(move || -> PyResult<()> {
            // SAFETY: (ptr, n) describe live contiguous tensors the caller keeps alive for the
            // duration of the launch; no Rust reference aliases them.
            unsafe { self.launch(&buffers, &self.sizes) }
        })
    }

    /// Run a launch whose extents take alltoallv counts: `send_counts` is this rank's row (one
    /// entry per group rank), `recv_counts` (optional) what this rank expects from each peer.
    ///
    /// A plain alltoallv given `recv_counts` runs the runtime's eager protocol: one round when
    /// every chunk is at most `EAGER_MAX_CHUNK` bytes, counts checked against every peer's (a
    /// mismatch is a `ValueError` on every rank); larger chunks run the plan after that round.
    /// Otherwise the rows are exchanged in one round first (see
    /// `exchange_counts`). Every rank must call it alike (with or without `recv_counts`).
    /// Releases the GIL while it runs.
    #[pyo3(signature = (buffers, send_counts, recv_counts=None))]
    fn run_counts(
        &self,
        py: Python<'_>,
        buffers: Vec<(usize, usize)>,
        send_counts: Vec<u64>,
        recv_counts: Option<Vec<u64>>,
    ) -> PyResult<()> {
        if !self.needs_counts {
            return Err(errors::value(format!(
                "schedule `{}` takes no alltoallv counts; launch it with run",
                self.plan.plan().schedule
            )));
        }
        if let (Some(recv), true) = (&recv_counts, self.eager_plan()) {
            // SAFETY: as in `run`: live tensors kept alive by the caller, not aliased.
            return py.detach(|| unsafe { self.run_eager(&buffers, &send_counts, recv) });
        }
        py.detach(move || -> PyResult<()> {
            let m = exchange_counts(
                &self.exec,
                send_counts,
                recv_counts,
                &self.members,
                self.rank,
            )?;
            let sizes = LaunchSizes {
                vars: self.sizes.vars.clone(),
                counts: Some(m),
            };
            // SAFETY: as in `run`: live tensors kept alive by the caller, not aliased.
            unsafe { self.launch(&buffers, &sizes) }
        })
    }

    /// Run the launch `iters` times back to back in one native call (the GIL released once)
    /// and return the seconds they took: what a launch costs below the Python call, which
    /// `scripts/latency_layers.py` takes apart from `run`'s cost (`iters = 0` measures the
    /// call itself). With `send_counts` and `recv_counts`, each launch is `run_counts`'s eager
    /// alltoallv. Every rank must call it with the same `iters`.
    #[pyo3(signature = (buffers, iters, send_counts=None, recv_counts=None))]
    fn run_repeat(
        &self,
        py: Python<'_>,
        buffers: Vec<(usize, usize)>,
        iters: u32,
        send_counts: Option<Vec<u64>>,
        recv_counts: Option<Vec<u64>>,
    ) -> PyResult<f64> {
        let eager = match (&send_counts, &recv_counts) {
            (Some(s), Some(r)) if self.needs_counts && self.eager_plan() => Some((s, r)),
            (None, None) if !self.needs_counts => None,
            _ => {
                let name = &self.plan.plan().schedule;
                return Err(errors::value(format!(
                    "run_repeat of `{name}`: counts go with an eager alltoallv plan only"
                )));
            }
        };
        py.detach(move || -> PyResult<f64> {
            let t0 = std::time::Instant::now();
            for _ in 0..iters {
                // SAFETY: as in `run`: live tensors kept alive by the caller, not aliased.
                match eager {
                    Some((s, r)) => unsafe { self.run_eager(&buffers, s, r)? },
                    None => unsafe { self.launch(&buffers, &self.sizes)? },
                }
            }
            Ok(t0.elapsed().as_secs_f64())
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Prepared(schedule={}, group={:?}, rank={})",
            self.plan.plan().schedule,
            self.members,
            self.rank
        )
    }
}
