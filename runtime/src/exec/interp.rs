//! The plan interpreter: runs one rank's step list of a [`Plan`] on a [`Fabric`].
//!
//! Per group (one [`Executor`] per fabric) it caches, per plan: the signal slots (one block per
//! plan key), the launch epoch, the symmetric scratch area and the resolved step list for the
//! last sizes. A launch with the same sizes therefore allocates nothing.
//!
//! **Buffers.** Role buffers are bound per launch ([`Binding`]): memory already in the symmetric
//! heap is used in place (its offset must be the same on every rank, as for any symmetric
//! tensor); private memory bound to a role that no rank puts into or gets from (e.g.
//! reduce-scatter's `in` and `out`, the wire allreduce's `x`) is used in place too, since only
//! its owner ever addresses it; private memory bound to any other role is *staged*: copied into a heap staging area before the steps (inputs
//! and in-out roles), copied back after them (outputs and in-out roles), and only then are the
//! plan's exit signals (launch credits) sent, so no peer writes into the staging area of the next
//! launch while this one is still copying out; when peers put into or get from role buffers, a
//! barrier after the copy-in keeps them from touching the staging area before it is filled.
//! Every rank of a group must bind a remotely accessed role the same way (heap or staged), which
//! is what makes the layout of the symmetric area (staged roles and scratch buffers, each sized
//! for the largest rank; one area per (group, plan), grown geometrically) agree on every rank.
//!
//! **Fusion.** A reduce and the puts/casts of its result right after it run as one pass over the
//! data ([`super::fuse`]); gets whose landing slot only feeds the reduce after them are read by
//! the reduce straight from the peer ([`super::fuse_get`]).
//!
//! **Extents** come from [`BufferDecl::chunk_span`] / [`BufferDecl::region_span`]; a region on a
//! peer (put destination, get source) is measured with the *peer's* extents, which differ from
//! ours only for alltoallv counts. A step moves the length of its data region (source of
//! put/get/copy/cast, destination of reduce).
//!
//! **alltoallv counts.** Each rank knows only its own send counts. [`Executor::gather_counts`]
//! exchanges the rows through the heap (every rank writes its row into every peer's exchange
//! area, then signals) and returns the full `counts[sender][receiver]` matrix to put in
//! [`LaunchSizes::counts`]; it is a collective over the group. [`Executor::alltoallv_eager`]
//! ([`super::eager`]) folds that exchange into the data round instead, and hands back the
//! matrix for a launch only when a chunk is too large to go eagerly. A counts plan keeps its
//! resolved steps for a repeated matrix.
//!
//! **Epochs.** Every launch of a plan on a group increments its epoch; waits compare against
//! `WaitTarget::at(epoch)` and set-signals write `SignalUpdate::value_at(epoch)`, so counters are
//! never reset.

use super::dtype::{convert, DType, ElemTypes};
use super::eager::AlltoallvOutcome;
use super::error::ExecError;
use super::fabric::{Fabric, WaitContext};
use super::hostcoll::{HostCollRequest, HostCollectives};
use super::reduce::{reduce_raw, reduce_raw_then, scale_avg, Operand, ReduceOp};
use super::resolved::{RReg, RStep, Resolved};
use crate::config::ExecOptions;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use symsched_plan::{
    BufferDecl, BufferRole, LaunchSizes, Op, Plan, Rank, SignalUpdate, PLAN_SCHEMA_VERSION,
};

const AREA_ALIGN: u64 = 64;

/// How one role buffer is bound for a launch.
#[derive(Debug)]
pub enum Binding<'a> {
    /// The tensor is in the symmetric heap at `offset` (the same on every rank), `bytes` long;
    /// used in place.
    Heap { offset: u64, bytes: u64 },
    /// Private memory; staged through heap scratch.
    Host(&'a mut [u8]),
    /// Private read-only memory for an input role; staged in.
    HostRead(&'a [u8]),
}

/// Everything a launch needs besides the plan.
pub struct LaunchArgs<'s, 'b, 'c> {
    pub types: ElemTypes,
    pub op: ReduceOp,
    pub sizes: &'s LaunchSizes,
    /// One binding per role buffer, in signature order.
    pub buffers: &'b mut [Binding<'c>],
}

/// A plan loaded on a group: its slots, epoch and caches.
pub struct LoadedPlan {
    plan: Plan,
    key: String,
    slot_base: u32,
    /// For each slot, the ranks that update it on this rank.
    signallers: Vec<Vec<u32>>,
    roles: usize,
    /// Per role buffer: whether any rank puts into, or gets from, a peer's copy of it. Only such
    /// roles need to live in the heap; private memory bound to any other role is used in place.
    remote: Vec<bool>,
    /// Whether any role is remote: then staged roles need a barrier after the copy-in, or a
    /// fast peer could write before (or read before) it.
    remote_roles: bool,
    has_reduce: bool,
    state: Mutex<PlanState>,
}

struct PlanState {
    epoch: u64,
    resolved: Option<Resolved>,
    area: Option<(u64, u64)>,
    operands: Vec<Operand>,
    /// The consumers of a fused reduce (reused across launches).
    links: Vec<Link>,
    mm: Vec<f64>,
    area_off: Vec<u64>,
    base: Vec<u64>,
    /// Per buffer, for this launch: bound to private memory that is used in place.
    in_place: Vec<bool>,
    /// Per role, for this launch: address and length of private memory used in place.
    private: Vec<Option<(usize, u64)>>,
}

impl LoadedPlan {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Launches done so far on this group.
    pub fn epoch(&self) -> u64 {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).epoch
    }
}

/// One fused consumer of a reduce, resolved to addresses for a launch: convert each finished
/// block from `src` into `dst` (a peer's memory for a put, local for a copy or a one-operand
/// reduce).
#[derive(Debug, Clone, Copy)]
struct Link {
    src: *const u8,
    src_dtype: DType,
    dst: *mut u8,
    dst_dtype: DType,
    /// A one-operand reduce: convert through the accumulator as the reduce does (which, unlike
    /// a same-type copy, quiets NaNs), not with a plain conversion.
    via_acc: bool,
}

// SAFETY: addresses into symmetric memory, only dereferenced by the launch that resolved them
// while it holds the plan's state lock (the same rule as reduce operands).
unsafe impl Send for Link {}

/// Executes plans for one rank of one group.
pub struct Executor<F: Fabric> {
    fabric: F,
    opts: ExecOptions,
    plans: Mutex<HashMap<String, Arc<LoadedPlan>>>,
    host: Box<dyn HostCollectives>,
    internal: Mutex<super::hostcoll::Exchanges>,
    /// The one-round alltoallv channel ([`super::eager`]).
    eager: Mutex<super::eager::EagerChannel>,
}

impl<F: Fabric> Executor<F> {
    /// An executor with the knobs of the fabric's world ([`Fabric::exec_options`]) whose
    /// `HostColl` steps and counts exchange go through the heap itself.
    pub fn new(fabric: F) -> Executor<F> {
        let opts = fabric.exec_options().clone();
        Executor::with_options(fabric, opts)
    }

    /// [`Executor::new`] with other knobs.
    pub fn with_options(fabric: F, opts: ExecOptions) -> Executor<F> {
        super::trace::configure(opts.trace.as_deref());
        Executor {
            eager: Mutex::new(super::eager::EagerChannel::new(&opts)),
            opts,
            fabric,
            plans: Mutex::new(HashMap::new()),
            host: Box::new(super::hostcoll::HeapHostColl),
            internal: Mutex::new(Default::default()),
        }
    }

    /// Replace the host collective library (e.g. the framework's gloo group).
    pub fn with_host_collectives(mut self, host: Box<dyn HostCollectives>) -> Self {
        self.host = host;
        self
    }

    pub fn fabric(&self) -> &F {
        &self.fabric
    }

    /// The knobs this executor runs with.
    pub fn options(&self) -> &ExecOptions {
        &self.opts
    }

    /// Register a plan on this group (cached by schedule, source hash, size and params).
    pub fn load(&self, plan: &Plan) -> Result<Arc<LoadedPlan>, ExecError> {
        if plan.schema_version != PLAN_SCHEMA_VERSION {
            return Err(symsched_plan::PlanError::Version {
                found: plan.schema_version,
                expected: PLAN_SCHEMA_VERSION,
            }
            .into());
        }
        if plan.group_size != self.fabric.size() {
            return Err(ExecError::GroupSizeMismatch {
                schedule: plan.schedule.clone(),
                plan_size: plan.group_size,
                group_size: self.fabric.size(),
            });
        }
        plan.check_consistency()?;
        let key = format!(
            "{}#{}#P{}#{:?}",
            plan.schedule, plan.source_hash, plan.group_size, plan.params
        );
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = plans.get(&key) {
            return Ok(p.clone());
        }
        let slot_base = self
            .fabric
            .signal_slots(&format!("plan/{key}"), plan.signals.len() as u32)?;
        let me = self.fabric.rank();
        let mut signallers = vec![Vec::new(); plan.signals.len()];
        for prog in &plan.ranks {
            let ups = prog
                .steps
                .iter()
                .filter_map(|s| match &s.op {
                    Op::Put {
                        signal: Some(u), ..
                    } => Some(u),
                    Op::Signal { update } => Some(update),
                    _ => None,
                })
                .chain(prog.exit_signals.iter());
            for u in ups {
                let list: &mut Vec<u32> = &mut signallers[u.slot as usize];
                if u.peer == me && !list.contains(&prog.rank) {
                    list.push(prog.rank);
                }
            }
        }
        let roles = plan
            .buffers
            .iter()
            .take_while(|b| b.role != BufferRole::Scratch)
            .count();
        let mut remote = plan.remote_buffers();
        remote.truncate(roles);
        let remote_roles = remote.iter().any(|r| *r);
        let loaded = Arc::new(LoadedPlan {
            plan: plan.clone(),
            key: key.clone(),
            slot_base,
            signallers,
            roles,
            remote,
            remote_roles,
            has_reduce: has_reduce(plan),
            state: Mutex::new(PlanState {
                epoch: 0,
                resolved: None,
                area: None,
                operands: Vec::new(),
                links: Vec::new(),
                mm: Vec::new(),
                area_off: Vec::new(),
                base: Vec::new(),
                in_place: Vec::new(),
                private: Vec::new(),
            }),
        });
        plans.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Element count of each role buffer on this rank for the given sizes.
    pub fn role_lens(&self, lp: &LoadedPlan, sizes: &LaunchSizes) -> Result<Vec<u64>, ExecError> {
        let me = self.fabric.rank();
        lp.plan.buffers[..lp.roles]
            .iter()
            .map(|b| b.total_len(me, sizes).map_err(ExecError::from))
            .collect()
    }

    /// Gather every rank's alltoallv send counts into the `counts[sender][receiver]` matrix.
    /// Collective over the group.
    pub fn gather_counts(&self, my_row: &[u64]) -> Result<Vec<Vec<u64>>, ExecError> {
        let p = self.fabric.size() as usize;
        if my_row.len() != p {
            return Err(ExecError::SizeMismatch {
                buffer: "alltoallv counts row".into(),
                expected: p as u64,
                found: my_row.len() as u64,
            });
        }
        self.allgather_u64("counts", my_row)
    }

    /// Allgather of small u64 vectors (same length on every rank) through the heap; returns
    /// every rank's values in rank order. Collective over the group.
    pub fn allgather_u64(&self, tag: &str, vals: &[u64]) -> Result<Vec<Vec<u64>>, ExecError> {
        let members: Vec<u32> = (0..self.fabric.size()).collect();
        let bytes: Vec<u8> = vals.iter().flat_map(|c| c.to_le_bytes()).collect();
        let mut ex = self.internal.lock().unwrap_or_else(|e| e.into_inner());
        let all = ex.exchange(&self.fabric, tag, &members, &bytes)?;
        Ok(all
            .chunks(vals.len().max(1) * 8)
            .map(|row| {
                row.chunks(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect()
            })
            .collect())
    }

    /// All-to-all-v of `dtype` elements in one round when every chunk is small or pulled, on
    /// this group's eager channel (see [`super::eager`]): `send` holds this rank's chunks for
    /// ranks 0..P in order (`send_counts[j]` elements for rank j), `recv` receives
    /// `recv_counts[j]` elements from each rank j in order.
    ///
    /// Collective over the group. Returns [`AlltoallvOutcome::Rendezvous`] with the agreed
    /// counts matrix when a chunk of an ordinary (non-heap) send buffer is too large to go
    /// eagerly; the caller then runs the plan. Counts that disagree between a sender and its
    /// receiver fail on every rank with [`ExecError::CountsMismatch`] and leave every output
    /// untouched.
    ///
    /// `send_heap` is the symmetric heap offset of `send` when it lies in this rank's heap
    /// segment (its chunks above [`super::eager::PULL_MIN_BYTES`] are then pulled by the
    /// receivers, at any size), else `None`.
    pub fn alltoallv_eager(
        &self,
        dtype: DType,
        send_counts: &[u64],
        recv_counts: &[u64],
        send: &[u8],
        send_heap: Option<u64>,
        recv: &mut [u8],
    ) -> Result<AlltoallvOutcome, ExecError> {
        let mut chan = self.eager.lock().unwrap_or_else(|e| e.into_inner());
        chan.alltoallv(
            &self.fabric,
            dtype,
            send_counts,
            recv_counts,
            send,
            send_heap,
            recv,
        )
    }

    /// Block until every rank of the group has called `barrier` as often as this one.
    pub fn barrier(&self) -> Result<(), ExecError> {
        let members: Vec<u32> = (0..self.fabric.size()).collect();
        let mut ex = self.internal.lock().unwrap_or_else(|e| e.into_inner());
        ex.barrier(&self.fabric, &members)
    }

    /// Run one launch of `lp` on this rank. Collective: every rank of the group launches the
    /// same plans in the same order.
    pub fn launch(&self, lp: &LoadedPlan, args: LaunchArgs) -> Result<(), ExecError> {
        let plan = &lp.plan;
        let types = args.types;
        if plan.collective.reduces() || lp.has_reduce {
            check_op(args.op, types.data)?;
        }
        if args.buffers.len() != lp.roles {
            return Err(ExecError::BindingCount {
                schedule: plan.schedule.clone(),
                expected: lp.roles,
                found: args.buffers.len(),
            });
        }
        let uses_counts = plan
            .buffers
            .iter()
            .any(|b| matches!(b.extent, symsched_plan::Extent::Counts { .. }));
        if uses_counts && args.sizes.counts.is_none() {
            return Err(ExecError::MissingCounts(plan.schedule.clone()));
        }
        let mut st = lp.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        let res = super::resolve::resolve_or_reuse(
            &mut st.resolved,
            plan,
            self.fabric.rank(),
            args.sizes,
            uses_counts,
            &self.opts,
        )?;
        // Lay out the scratch/staging area: staged roles and scratch buffers, each sized for the
        // largest rank. Heap-bound roles need no slot; every rank binds each role the same way,
        // so the layout agrees across ranks.
        let elem = |b: &BufferDecl| types.of(b.elem);
        st.area_off.clear();
        let mut need = 0u64;
        // Private memory bound to a role no peer touches is worked on in place (no staging).
        st.in_place.clear();
        st.in_place.extend((0..plan.buffers.len()).map(|i| {
            !matches!(args.buffers.get(i), Some(Binding::Heap { .. }))
                && i < lp.roles
                && !lp.remote[i]
        }));
        let in_place = std::mem::take(&mut st.in_place);
        let direct = |i: usize| in_place[i];
        for (i, b) in plan.buffers.iter().enumerate() {
            st.area_off.push(need);
            if matches!(args.buffers.get(i), Some(Binding::Heap { .. })) || direct(i) {
                continue;
            }
            let bytes = res.max_len[i]
                .checked_mul(elem(b).size() as u64)
                .ok_or(symsched_plan::PlanError::SizeOverflow)?;
            need = need
                .checked_add(bytes.next_multiple_of(AREA_ALIGN))
                .ok_or(symsched_plan::PlanError::SizeOverflow)?;
        }
        for (i, bnd) in args.buffers.iter().enumerate() {
            let expected = res.my_len[i] * elem(&plan.buffers[i]).size() as u64;
            let found = match bnd {
                Binding::Heap { bytes, .. } => *bytes,
                Binding::Host(s) => s.len() as u64,
                Binding::HostRead(s) => s.len() as u64,
            };
            if found != expected {
                return Err(ExecError::SizeMismatch {
                    buffer: plan.buffers[i].name.clone(),
                    expected,
                    found,
                });
            }
            if let Binding::HostRead(_) = bnd {
                if plan.buffers[i].role != BufferRole::Input {
                    return Err(ExecError::DtypeMismatch(format!(
                        "buffer `{}` is written by the plan but was bound read-only",
                        plan.buffers[i].name
                    )));
                }
            }
            if let Binding::Heap { offset, bytes } = bnd {
                self.fabric.heap_ptr(self.fabric.rank(), *offset, *bytes)?;
            }
        }
        let area = match st.area {
            Some((off, cap)) if cap >= need => off,
            old => {
                // Grow geometrically so a sweep over sizes allocates O(largest) in total.
                let cap = need.max(AREA_ALIGN).max(old.map_or(0, |(_, c)| 2 * c));
                let off = self
                    .fabric
                    .scratch(&format!("plan/{}/area/{cap}", lp.key), cap)?;
                st.area = Some((off, cap));
                off
            }
        };
        st.base.clear();
        for i in 0..plan.buffers.len() {
            st.base.push(match args.buffers.get(i) {
                Some(Binding::Heap { offset, .. }) => *offset,
                _ => area + st.area_off[i],
            });
        }
        let base = std::mem::take(&mut st.base);
        let me = self.fabric.rank();
        // Addresses of the roles used in place from private memory (see `direct`), with their
        // byte lengths; the plan only reads `HostRead` memory (checked above).
        let mut private = std::mem::take(&mut st.private);
        private.clear();
        for (i, bnd) in args.buffers.iter_mut().enumerate() {
            private.push(match bnd {
                Binding::Host(s) if direct(i) => Some((s.as_mut_ptr() as usize, s.len() as u64)),
                Binding::HostRead(s) if direct(i) => Some((s.as_ptr() as usize, s.len() as u64)),
                _ => None,
            });
        }
        // Copy staged inputs in.
        for (i, bnd) in args.buffers.iter().enumerate() {
            let src: &[u8] = match bnd {
                Binding::Host(s) => s,
                Binding::HostRead(s) => s,
                Binding::Heap { .. } => continue,
            };
            if plan.buffers[i].role == BufferRole::Output || src.is_empty() || direct(i) {
                continue;
            }
            let dst = self.fabric.heap_ptr(me, base[i], src.len() as u64)?;
            // SAFETY: `dst` is a checked heap range of src.len() bytes, disjoint from `src`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        }
        let staged = args
            .buffers
            .iter()
            .enumerate()
            .any(|(i, b)| !matches!(b, Binding::Heap { .. }) && !direct(i));
        if staged && lp.remote_roles {
            let members: Vec<u32> = (0..self.fabric.size()).collect();
            let mut ex = self.internal.lock().unwrap_or_else(|e| e.into_inner());
            ex.barrier(&self.fabric, &members)?;
        }
        let epoch = st.epoch;
        let ptr = |rank: Rank, r: &RReg, n: u64| -> Result<(*mut u8, DType), ExecError> {
            let dt = elem(&plan.buffers[r.buf as usize]);
            let sz = dt.size() as u64;
            if let Some(Some((p, len))) = private.get(r.buf as usize) {
                let (at, bytes) = (r.elem * sz, n * sz);
                if rank != me || at.checked_add(bytes).is_none_or(|end| end > *len) {
                    return Err(symsched_plan::PlanError::Inconsistent(format!(
                        "region of `{}` on rank {rank} outside this rank's private binding",
                        plan.buffers[r.buf as usize].name
                    ))
                    .into());
                }
                // In bounds of the caller's binding (checked just above), live for the launch.
                return Ok(((*p + at as usize) as *mut u8, dt));
            }
            let p = self
                .fabric
                .heap_ptr(rank, base[r.buf as usize] + r.elem * sz, n * sz)?;
            Ok((p, dt))
        };
        let sig = |u: &SignalUpdate| -> Result<(), ExecError> {
            self.fabric
                .signal(u.peer, lp.slot_base + u.slot, u.mode, u.value_at(epoch))
        };
        // A plain move of `n` elements: streamed past the cache when step `si` qualifies.
        let mv = |si: usize, sd: DType, s: *mut u8, dd: DType, d: *mut u8, n: u64| {
            let bytes = n as usize * sd.size();
            if sd == dd
                && bytes >= self.opts.nt_min_bytes
                && !std::ptr::eq(s, d)
                && res.nt.get(si).copied().unwrap_or(false)
            {
                // SAFETY: both ranges were bounds-checked for `n` elements of this type, and
                // distinct regions of moves never overlap (as `convert` assumes).
                unsafe { super::stream_copy::copy(d, s, bytes) };
            } else {
                // SAFETY: both ranges are bounds-checked heap ranges; distinct buffers or
                // ranks, or the identical range (a self-put), which `convert` allows.
                unsafe { convert(sd, s, dd, d, n as usize) };
            }
        };
        let tr = super::trace::Launch::begin(plan, me, self.fabric.label(), epoch);
        let my_steps = &plan.ranks[me as usize].steps;
        // Steps still to pass over because they ran fused into the reduce before them.
        let mut skip = 0usize;
        for (si, step) in res.steps.iter().enumerate() {
            let t0 = tr.as_ref().map(|_| std::time::Instant::now());
            if skip > 0 {
                skip -= 1;
            } else {
                match step {
                    RStep::Put {
                        src,
                        dst,
                        peer,
                        n,
                        signal,
                    } => {
                        let (s, sd) = ptr(me, src, *n)?;
                        let (d, dd) = ptr(*peer, dst, *n)?;
                        mv(si, sd, s, dd, d, *n);
                        if let Some(u) = signal {
                            sig(u)?;
                        }
                    }
                    // Read by the reduce it feeds, straight from the peer.
                    RStep::Get { .. } if res.get_folds.folded(si) => {}
                    RStep::Get { src, dst, peer, n } => {
                        let (s, sd) = ptr(*peer, src, *n)?;
                        let (d, dd) = ptr(me, dst, *n)?;
                        mv(si, sd, s, dd, d, *n);
                    }
                    RStep::Signal(u) => sig(u)?,
                    RStep::Wait {
                        slot,
                        cmp,
                        target,
                        id,
                    } => {
                        let ctx = WaitContext {
                            schedule: &plan.schedule,
                            step: *id,
                            slot_name: &plan.signals[*slot as usize].name,
                            signallers: &lp.signallers[*slot as usize],
                        };
                        self.fabric
                            .wait(lp.slot_base + slot, *cmp, target.at(epoch), &ctx)?;
                    }
                    RStep::Reduce { dst, srcs, n } => {
                        let (d, dd) = ptr(me, dst, *n)?;
                        st.operands.clear();
                        for s in srcs {
                            let (p, dt) = ptr(me, s, *n)?;
                            st.operands.push(Operand { ptr: p, dtype: dt });
                        }
                        for pull in res.get_folds.pulls(si) {
                            let (p, dt) = ptr(pull.peer, &pull.src, *n)?;
                            st.operands[pull.operand] = Operand { ptr: p, dtype: dt };
                        }
                        let fused = res.chain.get(si).copied().unwrap_or(0) as usize;
                        if fused == 0 {
                            // SAFETY: all ranges checked; the verifier guarantees `dst` is either
                            // one of the operands or disjoint from all of them.
                            unsafe {
                                reduce_raw(types.acc, args.op, d, dd, &st.operands, *n as usize)?
                            };
                        } else {
                            st.links.clear();
                            for next in &res.steps[si + 1..=si + fused] {
                                let (src, dst, peer, via_acc) = match next {
                                    RStep::Put { src, dst, peer, .. } => (src, dst, *peer, false),
                                    RStep::Copy { src, dst, .. } => (src, dst, me, false),
                                    RStep::Reduce { srcs, dst, .. } => (&srcs[0], dst, me, true),
                                    _ => unreachable!(
                                        "fuse::reduce_chains admits puts, copies and one-operand reduces only"
                                    ),
                                };
                                let (sp, sd) = ptr(me, src, *n)?;
                                let (dp, ddt) = ptr(peer, dst, *n)?;
                                st.links.push(Link {
                                    src: sp as *const u8,
                                    src_dtype: sd,
                                    dst: dp,
                                    dst_dtype: ddt,
                                    via_acc,
                                });
                            }
                            let links = &st.links;
                            // SAFETY: as above for the reduce; every link range was checked for `n`
                            // elements, and `fuse::reduce_chains` admitted only links that write
                            // outside every local operand and the destination (peer memory or
                            // disjoint local regions), reading blocks the reduce (or an earlier link)
                            // has just made final. A link may write a peer operand of a folded get
                            // only as the identical region (`fuse_get`): block by block, after the
                            // reduce has read it. A fused one-operand reduce may also rewrite exactly
                            // a region the chain produced (the destination included), only within
                            // the block `reduce_raw_then` has finished.
                            unsafe {
                                reduce_raw_then(
                                    types.acc,
                                    args.op,
                                    d,
                                    dd,
                                    &st.operands,
                                    *n as usize,
                                    &mut |first, len| {
                                        for l in links {
                                            let src = l.src.add(first * l.src_dtype.size());
                                            let dst = l.dst.add(first * l.dst_dtype.size());
                                            if l.via_acc {
                                                super::reduce::convert_via_acc(
                                                    types.acc,
                                                    src,
                                                    l.src_dtype,
                                                    dst,
                                                    l.dst_dtype,
                                                    len,
                                                );
                                            } else {
                                                convert(l.src_dtype, src, l.dst_dtype, dst, len);
                                            }
                                        }
                                    },
                                )?
                            };
                            // Each put's signal follows all of its data, as unfused.
                            for next in &res.steps[si + 1..=si + fused] {
                                if let RStep::Put {
                                    signal: Some(u), ..
                                } = next
                                {
                                    sig(u)?;
                                }
                            }
                            skip = fused;
                        }
                    }
                    RStep::Copy { src, dst, n } => {
                        let (s, sd) = ptr(me, src, *n)?;
                        let (d, dd) = ptr(me, dst, *n)?;
                        mv(si, sd, s, dd, d, *n);
                    }
                    RStep::Matmul { c, a, b, m, k, n } => {
                        let (cp, cd) = ptr(me, c, m * n)?;
                        let (ap, ad) = ptr(me, a, m * k)?;
                        let (bp, bd) = ptr(me, b, k * n)?;
                        let mm = super::matmul::MatmulStep {
                            c: (cp, cd),
                            a: (ap, ad),
                            b: (bp, bd),
                            m: *m as usize,
                            k: *k as usize,
                            n: *n as usize,
                        };
                        // SAFETY: the three ranges were just bounds-checked for their element counts.
                        unsafe { super::matmul::run(&mm, &mut st.mm)? };
                    }
                    RStep::HostColl {
                        op,
                        reg,
                        n,
                        members,
                        ordinal,
                    } => {
                        let (p, dt) = ptr(me, reg, *n)?;
                        let len = *n as usize * dt.size();
                        // SAFETY: checked local heap range; no peer touches it during a host
                        // collective (the verifier forbids mixing shmem traffic on it).
                        let data = unsafe { std::slice::from_raw_parts_mut(p, len) };
                        let req = HostCollRequest {
                            op: *op,
                            data,
                            dtype: dt,
                            acc: types.acc,
                            reduce: args.op,
                            members,
                            key: &lp.key,
                            ordinal: *ordinal,
                        };
                        if self.host.is_builtin() {
                            let mut ex = self.internal.lock().unwrap_or_else(|e| e.into_inner());
                            ex.run(&self.fabric, req)?;
                        } else {
                            self.host.run(req)?;
                        }
                    }
                }
            }
            if let (Some(tr), Some(t0), Some(ps)) = (&tr, t0, my_steps.get(si)) {
                let size = super::trace::written_buffer(&ps.op)
                    .map_or(0, |b| elem(&plan.buffers[b as usize]).size() as u64);
                tr.step(ps, step.elems() * size, t0);
            }
        }
        if let Some(tr) = tr {
            tr.end();
        }
        // avg = sum, then one division by P over every written role (bit-identical everywhere).
        if args.op == ReduceOp::Avg && plan.collective.reduces() {
            for (i, b) in plan.buffers[..lp.roles].iter().enumerate() {
                if matches!(b.role, BufferRole::Output | BufferRole::InOut) && res.my_len[i] > 0 {
                    let dt = elem(b);
                    let whole = RReg {
                        buf: i as u32,
                        elem: 0,
                    };
                    let (p, _) = ptr(me, &whole, res.my_len[i])?;
                    // SAFETY: checked local range.
                    unsafe { scale_avg(types.acc, p, dt, res.my_len[i] as usize, plan.group_size) };
                }
            }
        }
        // Copy staged outputs out, then hand out the launch credits.
        for (i, bnd) in args.buffers.iter_mut().enumerate() {
            if let Binding::Host(dst) = bnd {
                if plan.buffers[i].role == BufferRole::Input || dst.is_empty() || direct(i) {
                    continue;
                }
                let src = self.fabric.heap_ptr(me, base[i], dst.len() as u64)?;
                // SAFETY: checked heap range, disjoint from the private slice.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
            }
        }
        for u in &plan.ranks[me as usize].exit_signals {
            sig(u)?;
        }
        st.epoch += 1;
        st.base = base;
        st.in_place = in_place;
        st.private = private;
        Ok(())
    }
}

fn has_reduce(plan: &Plan) -> bool {
    plan.ranks
        .iter()
        .flat_map(|r| &r.steps)
        .any(|s| matches!(s.op, Op::Reduce { .. }))
}

/// Whether `op` is defined for `dtype` (every op is, for every data type; kept as the one place
/// that decides).
pub fn check_op(op: ReduceOp, dtype: DType) -> Result<(), ExecError> {
    if !dtype.is_data() {
        return Err(ExecError::UnsupportedOp {
            op: op.to_string(),
            dtype: dtype.to_string(),
        });
    }
    Ok(())
}
