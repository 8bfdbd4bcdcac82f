//! A launch prepared once per (group, schedule, params, dtype, op, wire, sizes): the compiled
//! and loaded plan, element types and launch sizes, so a call from Python only binds buffers.
//!
//! It also enforces the binding rule — a role buffer is bound the same way on every rank (the
//! same heap offset when symmetric, or staged everywhere) — because the executor derives every
//! peer's buffer addresses from its own bindings: a mismatch would silently write into the
//! wrong place of a peer's heap. The first launch per local binding pattern exchanges that
//! pattern through the runtime and compares; later launches with a pattern already checked skip
//! the exchange (`check_always`, the Python knob `SYMSCHED_CHECK_BINDINGS=always`, exchanges
//! on every launch). An eager
//! alltoallv (`run_counts` with receive counts) needs no such check — no peer addresses the
//! caller's tensors — and checks only before it falls back to the plan for large chunks. The
//! rule itself (patterns and their check) is the runtime's: `symsched_runtime::exec::binding`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use symsched_plan::{BufferRole, CollectiveKind, LaunchSizes};
use symsched_runtime::exec::binding::{self, binding_pattern, EMPTY, STAGED};
use symsched_runtime::exec::{
    AlltoallvOutcome, Binding, ElemTypes, Executor, GroupFabric, LaunchArgs, LoadedPlan, ReduceOp,
};

use crate::errors;

/// Binding patterns remembered per prepared launch (fresh symmetric tensors add new offsets).
const MAX_CHECKED: usize = 256;

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
    pub(crate) check_always: bool,
    /// Binding patterns already agreed by every rank.
    pub(crate) checked: Mutex<HashSet<Vec<u64>>>,
    /// Whether the plan's extents take alltoallv counts (run with `run_counts`, not `run`).
    pub(crate) needs_counts: bool,
    /// The backend its runs use (`None`: the executor's).
    pub(crate) backend: Option<symsched_runtime::config::BackendKind>,
}

/// The runtime's binding rule ([`binding::check_patterns`]) as a Python `ValueError`.
pub(crate) fn check_patterns(
    rows: &[&[u64]],
    plan: &symsched_plan::Plan,
    members: &[usize],
) -> PyResult<()> {
    binding::check_patterns(rows, plan, members).map_err(|e| errors::value(e.to_string()))
}

/// Exchange this rank's send-count row together with the binding pattern of `buffers` (one
/// round for both, so the binding rule costs nothing extra), check the patterns and that the
/// counts the peers send here equal `recv_counts` (when given), and return the count matrix.
///
/// The exchange is needed on every alltoallv launch, cached or not: where this rank writes into
/// a peer's buffer depends on what every other rank sends that peer, which only they know.
#[allow(clippy::too_many_arguments)] // one argument per piece of launch context
pub(crate) fn exchange_counts(
    exec: &Executor<GroupFabric>,
    heap: (usize, usize),
    buffers: &[(usize, usize)],
    row: Vec<u64>,
    recv_counts: Option<Vec<u64>>,
    plan: &symsched_plan::Plan,
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
    let mut mine = row;
    mine.extend(binding_pattern(heap, buffers));
    let all = exec
        .allgather_u64("python/counts+bindings", &mine)
        .map_err(errors::exec)?;
    let patterns: Vec<&[u64]> = all.iter().map(|r| r.get(p..).unwrap_or(&[])).collect();
    check_patterns(&patterns, plan, members)?;
    let m: Vec<Vec<u64>> = all.iter().map(|r| r[..p.min(r.len())].to_vec()).collect();
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
    /// Exchange `mine` with every rank and fail (on every rank alike) when they differ.
    fn agree(&self, mine: &[u64]) -> PyResult<()> {
        let all = self
            .exec
            .allgather_u64("python/bindings", mine)
            .map_err(|e| {
                errors::runtime(format!(
                    "binding check of `{}` on group {:?}: {e} (a peer launched something else: every \
                     rank must make the same symsched calls in the same order, binding each tensor \
                     the same way — all symmetric or all ordinary)",
                    self.plan.plan().schedule,
                    self.members
                ))
            })?;
        let rows: Vec<&[u64]> = all.iter().map(|r| r.as_slice()).collect();
        check_patterns(&rows, self.plan.plan(), &self.members)
    }

    /// Check the binding pattern of `buffers` with every rank, unless this pattern was already
    /// agreed (see the module docs).
    fn agreed(&self, buffers: &[(usize, usize)]) -> PyResult<()> {
        let pattern = binding_pattern(self.heap, buffers);
        let known = !self.check_always
            && self
                .checked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&pattern);
        if !known {
            self.agree(&pattern)?;
            let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            // bounded: every rank makes the same calls, so every rank forgets at the same call
            if checked.len() >= MAX_CHECKED {
                checked.clear();
            }
            checked.insert(pattern);
        }
        Ok(())
    }

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
                self.agreed(buffers)?;
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
    unsafe fn launch(&self, buffers: &[(usize, usize)], sizes: &LaunchSizes) -> PyResult<()> {
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
            self.agreed(&buffers)?;
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
    /// Otherwise the rows and binding patterns are exchanged in one round first (see
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
                self.heap,
                &buffers,
                send_counts,
                recv_counts,
                self.plan.plan(),
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

    fn __repr__(&self) -> String {
        format!(
            "Prepared(schedule={}, group={:?}, rank={})",
            self.plan.plan().schedule,
            self.members,
            self.rank
        )
    }
}
