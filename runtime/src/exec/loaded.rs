//! A plan loaded on a group: what is decided once per (group, plan) — its signal slots, who
//! signals each of them here, which roles peers reach into — and the state its launches carry
//! from one to the next (epoch, the last resolution, the staging area, the backend's scratch).
//!
//! **Registrations.** A plan's signal slots and its agreement's slots and record are taken
//! from the group's registries when it is loaded, and again at its first launch after each
//! group reset: a reset forgets the registries ([`crate::abort`]), since ranks may have loaded
//! different plans before the failure, and re-registering at the first launch takes them in
//! the order of the collective calls, which is the same on every rank. (After a reset a load
//! registers nothing: a plan loaded then and one kept from before both register at their
//! first launch.)
//!
//! **Epochs.** Every launch of a plan on a group increments its epoch; waits compare against
//! `WaitTarget::at(epoch)` and set-signals write `SignalUpdate::value_at(epoch)`, so counters are
//! never reset.
//!
//! **Refused launches** count too: a launch the ranks do not agree on (a [`super::Disagreement`],
//! or one rank's own refusal of its arguments) is refused on every rank after some ranks
//! may already have sent their entry credits (they stage before the agreement completes, see
//! [`super::executor`]). So every rank finishes it as a launch whose steps did nothing: it sends
//! the entry signals it has not sent and its exit signals — one credit per accessing pair, as
//! any launch — adds to each of its own `add` slots what the steps of one launch would have
//! added there ([`LoadedPlan::step_adds`]; `set` slots need nothing, the next launch's values
//! are larger), and advances the epoch. Every counter then holds what one more launch leaves,
//! on every rank, and the next launch runs as if the refused one had run.
//!
//! **Exit credits** between two ranks that check each other's launch agreement word (members
//! that share heaps, in a group of more than one) are not sent: rank q publishes its word of
//! launch `e` only after it finished launch `e − 1` — its last step, its stage-out and its exit
//! signals — so once rank r has checked q's word of `e`, everything q's exit credit of `e − 1`
//! would tell r holds. So r applies that credit itself, to its own slot, right after the check
//! (and when the launch is refused, with the refused launch's other signals): the credit wait
//! of r's first access to q then reads a line in r's own cache instead of one q just wrote,
//! and q's exit saves one remote update per peer. The counters hold the same values as when q
//! sent the credits.
//!
//! **Entry credits** between the same pairs follow the same rule when the word says so: a
//! rank that stages in before the agreement and has entry credits for such peers publishes its
//! word after the stage-in, flagged
//! "entered" ([`super::agreement`]), and sends no entry credit to a peer that checks its word;
//! the peer applies it to its own slot after its check, as it would have arrived. A rank that
//! stages after the agreement publishes unflagged and sends its entry credits once it has
//! staged. In a refused launch every credit still arrives exactly once: a rank that refused
//! its own arguments sends all its entry credits and applies none by word, so a flagged rank
//! sends it the ones its word would have implied (`PeerEntry::Refused`).
//!
//! **Speculative scratch puts.** Without them a rank's first put into a peer's scratch waits
//! for that peer's word of this launch (it carries the peer's exit credit of the last one), so
//! a plan like `allreduce_one_shot` pays one more cache-line trip per launch than it would
//! without the agreement: the peer's word has to arrive before the data can leave. A small
//! layout therefore keeps its scratch twice, by launch parity (`super::staging`), and a launch
//! that repeats the last launch every rank agreed on, with none refused since
//! (`AgreementArea::repeats_agreed`), runs its *speculative prefix* before its check: its first
//! steps when they are only exit-credit waits (skipped), puts into a peer's scratch and `add`
//! signals on slots it alone updates there, waited for with `>=` or `>` ([`speculative_prefix`]), one
//! channel, untraced. Both backends run the prefix, the check and the rest in one call: the
//! interpreter calls the check between the two ranges; the JIT's kernel for a speculating
//! launch is compiled with the check after the prefix (its `agree` intrinsic; nothing fused or
//! moved across it), and skips its waits until then — a prefix that is the whole list runs in
//! the launch's ordinary kernel, waits skipped, with the check after the call. (A shared slot would let its signal of the next launch complete a count
//! that a peer still in this launch waits for, before a slower rank's data has landed.) The waits may
//! be skipped because the put of launch `e` lands in the copy the peer last read in `e − 2`,
//! and this rank's check of the peer's word of `e − 1` — published after the peer finished
//! `e − 2` — already implied that. Its word says so (`SPECULATED`). The check then comes before
//! anything the prefix did not do: no role buffer is written and no received data is read
//! before it. A refused launch in which some ranks speculated keeps every counter right: a
//! rank that checked the words adds for its own slots what one launch's steps add there less
//! what the speculating peers' prefixes sent it ([`LoadedPlan::spec_adds`]); a rank that
//! refused its own arguments checked no word, adds the whole, and takes the speculating peers'
//! share off again when its next launch reads their words of the refused one, before any wait.

use super::agreement::{AgreementArea, PeerEntry};
use super::backend::{Backend, Chosen};
use super::dtype::ElemTypes;
use super::error::ExecError;
use super::fabric::Fabric;
use super::reduce::{check_op, ReduceOp};
use super::resolved::Resolved;
use super::staging::{RoleAccess, Staging};
use std::sync::{Mutex, MutexGuard};
use symsched_plan::{BufferRole, Cmp, Extent, LaunchSizes, Op, Plan, SignalMode, SignalUpdate};

/// A plan loaded on a group: its slots, epoch and caches (see the module docs).
pub struct LoadedPlan {
    pub(crate) plan: Plan,
    /// Cache key of the plan on its group (schedule, source hash, size, params).
    pub(crate) key: String,
    /// For each slot, the ranks that update it on this rank.
    pub(crate) signallers: Vec<Vec<u32>>,
    pub(crate) access: RoleAccess,
    has_reduce: bool,
    /// The plan's extents take alltoallv counts.
    pub(crate) uses_counts: bool,
    /// Per `add` slot of this rank that the plan's steps add to: what one launch's steps add
    /// here (its stride without the credits). A refused launch adds it itself, since no step
    /// ran anywhere (see "Refused launches" in the module docs).
    pub(crate) step_adds: Vec<(u32, u64)>,
    /// This rank's exit signals that still go to their peer: those to a peer that does not
    /// check this rank's launch agreement word (see "Exit credits" in the module docs).
    pub(crate) exit_sent: Vec<SignalUpdate>,
    /// The exit credits peers no longer send to this rank, since this rank's check of their
    /// agreement word implies them: applied here, to this rank's own slots, once the words of a
    /// launch are checked (or the launch is refused).
    pub(crate) exit_by_word: Vec<SignalUpdate>,
    /// This rank's entry signals that always go to their peer (one that does not check this
    /// rank's agreement word).
    pub(crate) entry_always: Vec<SignalUpdate>,
    /// This rank's entry signals that a flagged word implies ("Entry credits" in the module
    /// docs): sent only after an unflagged word, or to a peer that refused its arguments.
    pub(crate) entry_implied: Vec<SignalUpdate>,
    /// The peers' entry signals to this rank that their flagged words imply, with the sender.
    pub(crate) entry_by_word: Vec<(u32, SignalUpdate)>,
    /// Length of this rank's speculative prefix ([`speculative_prefix`]; 0: it never
    /// speculates).
    pub(crate) spec_prefix: usize,
    /// Per peer q, what q's speculative prefix adds to this rank's `add` slots (slot, value):
    /// a refused launch in which q speculated adds that much less here itself.
    pub(crate) spec_adds: Vec<Vec<(u32, u64)>>,
    state: Mutex<PlanState>,
}

/// What a plan holds in its group's registries in one reset generation (see the module docs).
pub(crate) struct Registered {
    /// First slot of the plan's block of signal slots on the group.
    pub(crate) slot_base: u32,
    /// The launch agreement's slots and records ([`super::agreement`]).
    pub(crate) agreement: AgreementArea,
}

impl Registered {
    /// Take the slots and records of `plan`, loaded under `key`.
    pub(crate) fn take<F: Fabric>(
        fabric: &F,
        plan: &Plan,
        key: &str,
        roles: usize,
    ) -> Result<Registered, ExecError> {
        let slot_base = fabric.signal_slots(&format!("plan/{key}"), plan.signals.len() as u32)?;
        let agreement = AgreementArea::load(fabric, key, roles)?;
        Ok(Registered {
            slot_base,
            agreement,
        })
    }
}

/// What one launch of a plan leaves for the next.
pub(crate) struct PlanState {
    /// The registrations of this generation (`None` until the first launch after a reset).
    pub(crate) regs: Option<Registered>,
    pub(crate) epoch: u64,
    /// Launches that reached the agreement (successful or refused alike on every rank; the
    /// epoch counts the same launches since refused ones count too).
    pub(crate) agree_seq: u64,
    /// The group's reset generation the epoch and sequence count in.
    pub(crate) generation: u64,
    /// Per role, the group's binding pattern word (from the last agreement).
    pub(crate) bound: Vec<u64>,
    /// Per rank, what its word of the last agreement implied about its entry credits.
    pub(crate) entries: Vec<PeerEntry>,
    /// Per rank, whether it ran its speculative prefix in the last agreement's launch.
    pub(crate) speculated: Vec<bool>,
    /// Launches in which this rank ran its speculative prefix (tests and traces read it).
    pub(crate) speculations: u64,
    /// The steps resolved for the last launch's sizes.
    pub(crate) resolved: Option<Resolved>,
    pub(crate) staging: Staging,
    pub(crate) backend: <Chosen as Backend>::PlanState,
}

impl LoadedPlan {
    /// Load `plan` (already checked against the group) under `key`: reserve its signal slots
    /// on `fabric`'s group and decide what its launches share.
    pub(crate) fn load<F: Fabric>(
        fabric: &F,
        plan: &Plan,
        key: String,
    ) -> Result<LoadedPlan, ExecError> {
        let me = fabric.rank();
        let mut signallers = vec![Vec::new(); plan.signals.len()];
        for prog in &plan.ranks {
            let ups = prog
                .steps
                .iter()
                .filter_map(|s| signal_of(&s.op))
                .chain(prog.entry_signals.iter())
                .chain(prog.exit_signals.iter());
            for u in ups {
                let list: &mut Vec<u32> = &mut signallers[u.slot as usize];
                if u.peer == me && !list.contains(&prog.rank) {
                    list.push(prog.rank);
                }
            }
        }
        let mut step_adds: Vec<(u32, u64)> = Vec::new();
        for u in plan
            .ranks
            .iter()
            .flat_map(|r| &r.steps)
            .filter_map(|s| signal_of(&s.op))
        {
            if u.peer != me || u.mode != SignalMode::Add {
                continue;
            }
            match step_adds.iter_mut().find(|(slot, _)| *slot == u.slot) {
                Some((_, n)) => *n = n.wrapping_add(u.value),
                None => step_adds.push((u.slot, u.value)),
            }
        }
        // Exit credits between ranks that check each other's agreement word (every pair of
        // members that share heaps, when the group has more than one): the word implies them.
        let by_word = |from: u32, u: &SignalUpdate| {
            !cfg!(symsched_bench_no_agreement)
                && from != u.peer
                && fabric.size() > 1
                && fabric.reachable(from)
                && fabric.reachable(u.peer)
                && plan
                    .signals
                    .get(u.slot as usize)
                    .is_some_and(|s| s.name.starts_with("__credit["))
        };
        let exit_sent = plan
            .ranks
            .get(me as usize)
            .map(|r| {
                r.exit_signals
                    .iter()
                    .filter(|u| !by_word(me, u))
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        let exit_by_word = plan
            .ranks
            .iter()
            .flat_map(|r| r.exit_signals.iter().map(move |u| (r.rank, u)))
            .filter(|&(from, u)| u.peer == me && by_word(from, u))
            .map(|(_, u)| *u)
            .collect();
        let own_entries = plan
            .ranks
            .get(me as usize)
            .map_or(&[][..], |r| &r.entry_signals);
        let (entry_implied, entry_always) =
            own_entries.iter().copied().partition(|u| by_word(me, u));
        let entry_by_word = plan
            .ranks
            .iter()
            .flat_map(|r| r.entry_signals.iter().map(move |u| (r.rank, *u)))
            .filter(|(from, u)| u.peer == me && by_word(*from, u))
            .collect();
        let checks_words =
            |q: u32| !cfg!(symsched_bench_no_agreement) && fabric.size() > 1 && fabric.reachable(q);
        let prefixes: Vec<usize> = (0..plan.ranks.len() as u32)
            .map(|q| speculative_prefix(plan, q, &checks_words))
            .collect();
        let spec_adds = plan
            .ranks
            .iter()
            .map(|r| {
                let mut adds: Vec<(u32, u64)> = Vec::new();
                let n = prefixes.get(r.rank as usize).copied().unwrap_or(0);
                for u in r.steps[..n].iter().filter_map(|s| signal_of(&s.op)) {
                    if u.peer != me {
                        continue;
                    }
                    match adds.iter_mut().find(|(slot, _)| *slot == u.slot) {
                        Some((_, v)) => *v = v.wrapping_add(u.value),
                        None => adds.push((u.slot, u.value)),
                    }
                }
                adds
            })
            .collect();
        let staging = Staging::new(&key);
        let access = RoleAccess::of(plan);
        let generation = fabric.generation();
        let regs = if generation == 0 {
            Some(Registered::take(fabric, plan, &key, access.roles)?)
        } else {
            None
        };
        Ok(LoadedPlan {
            plan: plan.clone(),
            key,
            signallers,
            access,
            has_reduce: plan
                .ranks
                .iter()
                .flat_map(|r| &r.steps)
                .any(|s| matches!(s.op, Op::Reduce { .. })),
            uses_counts: plan
                .buffers
                .iter()
                .any(|b| matches!(b.extent, Extent::Counts { .. })),
            step_adds,
            exit_sent,
            exit_by_word,
            entry_always,
            entry_implied,
            entry_by_word,
            spec_prefix: prefixes.get(me as usize).copied().unwrap_or(0),
            spec_adds,
            state: Mutex::new(PlanState {
                regs,
                epoch: 0,
                agree_seq: 0,
                generation,
                bound: Vec::new(),
                entries: Vec::new(),
                speculated: Vec::new(),
                speculations: 0,
                resolved: None,
                staging,
                backend: Default::default(),
            }),
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Launches done so far on this group.
    pub fn epoch(&self) -> u64 {
        self.lock_state().epoch
    }

    /// Launches of this group in which this rank ran its speculative prefix before its check
    /// of the agreement ("Speculative scratch puts" in the module docs).
    pub fn speculations(&self) -> u64 {
        self.lock_state().speculations
    }

    /// How many times this rank laid its staging area out: a launch that repeats the one before
    /// (resolution, dtypes, bindings) keeps its layout.
    pub fn layouts(&self) -> u64 {
        self.lock_state().staging.layouts()
    }

    /// Number of role buffers a launch binds.
    #[inline]
    pub(crate) fn roles(&self) -> usize {
        self.access.roles
    }

    /// The launch state; launches of one plan on one group run one at a time.
    #[inline]
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a launch's arguments fit the plan: an op defined for the data type when the
    /// plan reduces, one binding per role, and the counts matrix when extents take it.
    /// Whether the plan's op matters: it reduces.
    #[inline]
    pub(crate) fn reduces(&self) -> bool {
        self.plan.collective.reduces() || self.has_reduce
    }

    #[inline]
    pub(crate) fn check_launch(
        &self,
        types: ElemTypes,
        op: ReduceOp,
        sizes: &LaunchSizes,
        bindings: usize,
    ) -> Result<(), ExecError> {
        let plan = &self.plan;
        if plan.collective.reduces() || self.has_reduce {
            check_op(op, types.data)?;
        }
        if bindings != self.roles() {
            return Err(ExecError::BindingCount {
                schedule: plan.schedule.clone(),
                expected: self.roles(),
                found: bindings,
            });
        }
        if self.uses_counts && sizes.counts.is_none() {
            return Err(ExecError::MissingCounts(plan.schedule.clone()));
        }
        Ok(())
    }
}

/// The signal update a step sends, if any.
fn signal_of(op: &Op) -> Option<&SignalUpdate> {
    match op {
        Op::Put {
            signal: Some(u), ..
        } => Some(u),
        Op::Signal { update } => Some(update),
        _ => None,
    }
}

/// Length of rank q's *speculative prefix*: the longest run of its first steps that are only
/// exit-credit waits, puts into a peer's scratch (with or without an `add` signal) and `add`
/// signals to a peer (not credits, on a slot no other rank updates there and that every wait
/// there compares with `>=` or `>`), on one channel,
/// towards peers that check q's agreement word, with at least one put; 0 otherwise. Such a prefix writes nothing a caller owns, so a
/// launch that repeats the last agreed one may run it before its check of the peers' words
/// (see "Speculative scratch puts" in the module docs); its waits are skipped there.
pub(crate) fn speculative_prefix(plan: &Plan, q: u32, checks_words: &dyn Fn(u32) -> bool) -> usize {
    let Some(prog) = plan.ranks.get(q as usize) else {
        return 0;
    };
    let has_scratch = plan.buffers.iter().any(|b| b.role == BufferRole::Scratch);
    if !has_scratch || prog.steps.iter().any(|s| s.channel != 0) {
        return 0;
    }
    let credit = |slot: u32| {
        plan.signals
            .get(slot as usize)
            .is_some_and(|s| s.name.starts_with("__credit["))
    };
    // q must be the only rank that updates the slot on that peer: a shared counter could reach
    // the count a wait of the launch before asks for with q's signal of this one, while a slower
    // peer's data of that launch has yet to arrive. One sender's signals arrive in its order.
    let only_sender = |u: &SignalUpdate| {
        plan.ranks.iter().all(|r| {
            r.rank == q
                || !r
                    .steps
                    .iter()
                    .filter_map(|s| signal_of(&s.op))
                    .chain(r.entry_signals.iter())
                    .chain(r.exit_signals.iter())
                    .any(|v| v.peer == u.peer && v.slot == u.slot)
        })
    };
    // And every wait on it there must hold for any larger count (`>=`, `>`): a signal of the
    // next launch may land before such a wait of this one looks.
    let monotone = |u: &SignalUpdate| {
        plan.ranks.get(u.peer as usize).is_some_and(|r| {
            r.steps.iter().all(|s| match &s.op {
                Op::Wait { slot, cmp, .. } if *slot == u.slot => matches!(cmp, Cmp::Ge | Cmp::Gt),
                _ => true,
            })
        })
    };
    let plain_add = |u: &SignalUpdate| {
        u.peer != q
            && u.mode == SignalMode::Add
            && !credit(u.slot)
            && checks_words(u.peer)
            && only_sender(u)
            && monotone(u)
    };
    let mut len = 0;
    for s in &prog.steps {
        let ok = match &s.op {
            Op::Wait { slot, cmp, target } => {
                credit(*slot) && *cmp == Cmp::Ge && target.offset == 0 && target.stride == 1
            }
            Op::Put {
                dst, peer, signal, ..
            } => {
                let scratch = plan
                    .buffers
                    .get(dst.buffer as usize)
                    .is_some_and(|b| b.role == BufferRole::Scratch);
                *peer != q
                    && scratch
                    && checks_words(*peer)
                    && signal.as_ref().is_none_or(plain_add)
            }
            Op::Signal { update } => plain_add(update),
            _ => false,
        };
        if !ok {
            break;
        }
        len += 1;
    }
    // A trailing wait protects nothing in the prefix.
    while len > 0 && matches!(prog.steps[len - 1].op, Op::Wait { .. }) {
        len -= 1;
    }
    if prog.steps[..len]
        .iter()
        .any(|s| matches!(s.op, Op::Put { .. }))
    {
        len
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    //! Refused launches leave every counter as one more launch would ("Refused launches",
    //! "Exit credits" and "Entry credits" in the module docs): after a script of launches with
    //! refusals of every kind in it, every plan slot on every rank holds what the same number of
    //! agreed launches leaves. A credit counted twice (or lost) in a refusal shows here even
    //! where the agreement's own waits keep the data right.

    use crate::config::{BackendKind, ExecOptions};
    use crate::exec::{
        Binding, DType, ElemTypes, ExecError, Executor, Fabric, LaunchArgs, LocalWorld, ReduceOp,
        WaitContext,
    };
    use std::sync::Barrier;
    use std::time::Duration;
    use symsched_plan::{Cmp, LaunchSizes};

    /// Both backends: each runs a speculative prefix, the check and the rest in one call.
    const BACKENDS: [BackendKind; 2] = [BackendKind::Interp, BackendKind::Jit];

    fn executor<F: Fabric>(fabric: F, backend: BackendKind) -> Executor<F> {
        Executor::with_options(
            fabric,
            ExecOptions {
                backend,
                ..ExecOptions::default()
            },
        )
    }

    const P: u32 = 3;
    const N: u64 = 64;

    #[derive(Clone, Copy, PartialEq)]
    enum Launch {
        Agreed,
        /// This rank refuses its own arguments (a buffer one element short).
        RefusedBy(u32),
        /// Rank 0 launches one element fewer than the others.
        Sizes,
    }

    /// Every plan slot's value on every rank after `script`, and the launches in which some
    /// rank speculated.
    fn counters(
        p: u32,
        name: &str,
        staged: bool,
        script: &[Launch],
        backend: BackendKind,
    ) -> (Vec<Vec<u64>>, u64) {
        let params = match name {
            "broadcast_push" => Some(("root".to_string(), 1i64)),
            "reduce_push" => Some(("root".to_string(), 0i64)),
            _ => None,
        }
        .into_iter()
        .collect();
        let plan = crate::exec::test_plans::standard_with(name, p, &params);
        let world = LocalWorld::new(p, 8 << 20)
            .expect("world")
            .with_timeout(Duration::from_secs(30));
        let group = world.world_group().expect("group");
        let done = Barrier::new(p as usize);
        std::thread::scope(|s| {
            let ranks: Vec<_> = (0..p)
                .map(|r| {
                    let (group, plan, done) = (group.clone(), &plan, &done);
                    s.spawn(move || {
                        let ex = executor(group.fabric(r).expect("fabric"), backend);
                        let lp = ex.load(plan).expect("loads");
                        let mut sizes = LaunchSizes::default();
                        sizes.vars.insert("n".into(), N);
                        let lens = ex.role_lens(&lp, &sizes).expect("role lengths");
                        let offsets: Vec<u64> = lens
                            .iter()
                            .enumerate()
                            .map(|(i, n)| {
                                ex.fabric()
                                    .scratch(&format!("t/{i}"), (n * 4).max(8))
                                    .expect("scratch")
                            })
                            .collect();
                        let mut private: Vec<Vec<u8>> =
                            lens.iter().map(|n| vec![0u8; *n as usize * 4]).collect();
                        for (k, launch) in script.iter().enumerate() {
                            let mut sizes = sizes.clone();
                            if *launch == Launch::Sizes && r == 0 {
                                sizes.vars.insert("n".into(), N - 1);
                            }
                            let short = *launch == Launch::RefusedBy(r);
                            let mut b: Vec<Binding<'_>> = if staged || short {
                                private.iter_mut().map(|v| Binding::Host(v)).collect()
                            } else {
                                offsets
                                    .iter()
                                    .zip(&lens)
                                    .map(|(&offset, &n)| Binding::Heap {
                                        offset,
                                        bytes: n * 4,
                                    })
                                    .collect()
                            };
                            if short {
                                if let Some(Binding::Host(v)) = b.first_mut() {
                                    let keep = v.len() - 4;
                                    *v = &mut std::mem::take(v)[..keep];
                                }
                            }
                            let res = ex.launch(
                                &lp,
                                LaunchArgs {
                                    types: ElemTypes::new(DType::F32, None).expect("f32"),
                                    op: ReduceOp::Sum,
                                    sizes: &sizes,
                                    buffers: &mut b,
                                },
                            );
                            match launch {
                                Launch::Agreed => res
                                    .unwrap_or_else(|e| panic!("{name} rank {r} launch {k}: {e}")),
                                _ => assert!(
                                    matches!(
                                        res,
                                        Err(ExecError::Disagreement(_)
                                            | ExecError::SizeMismatch { .. })
                                    ),
                                    "{name} rank {r} launch {k}: {res:?}"
                                ),
                            }
                        }
                        // Every signal of every rank has landed once all are here.
                        done.wait();
                        let base = lp.lock_state().regs.as_ref().expect("registered").slot_base;
                        let slots = (0..plan.signals.len() as u32)
                            .map(|i| {
                                let ctx = WaitContext {
                                    schedule: &plan.schedule,
                                    step: u32::MAX,
                                    slot_name: &plan.signals[i as usize].name,
                                    signallers: &[],
                                };
                                ex.fabric().wait(base + i, Cmp::Ge, 0, &ctx).expect("read")
                            })
                            .collect::<Vec<u64>>();
                        (slots, lp.speculations())
                    })
                })
                .collect();
            let all: Vec<(Vec<u64>, u64)> =
                ranks.into_iter().map(|h| h.join().expect("rank")).collect();
            let spec = all.iter().map(|(_, n)| n).sum();
            (all.into_iter().map(|(c, _)| c).collect(), spec)
        })
    }

    #[test]
    fn refused_launches_leave_the_counters_of_agreed_ones() {
        use Launch::*;
        let script = [
            Agreed,
            RefusedBy(0),
            Agreed,
            RefusedBy(1),
            Agreed,
            Sizes,
            Agreed,
            RefusedBy(2),
            RefusedBy(0),
            Agreed,
            Agreed,
        ];
        for backend in BACKENDS {
            for name in [
                "broadcast_push",
                "allgather_push",
                "alltoall_push",
                "allreduce_one_shot",
            ] {
                for staged in [false, true] {
                    let (got, _) = counters(P, name, staged, &script, backend);
                    let (want, _) = counters(P, name, staged, &[Agreed; 11], backend);
                    assert_eq!(
                        got, want,
                        "{name} staged={staged} {backend:?}: counters after refusals"
                    );
                }
            }
            // At 2 ranks the scratch puts of `allreduce_one_shot` and `allgather_one_shot` run
            // ahead of the check in repeated launches (the JIT's kernel checks after them), and
            // `reduce_push`'s sender (its put and signal are its whole list), the refused
            // launches included: the accounting covers them.
            let script2 = script.map(|l| if l == RefusedBy(2) { RefusedBy(1) } else { l });
            let names: &[&str] = &["allreduce_one_shot", "allgather_one_shot", "reduce_push"];
            for (staged, &name) in [false, true]
                .into_iter()
                .flat_map(|s| names.iter().map(move |n| (s, n)))
            {
                let (got, spec) = counters(2, name, staged, &script2, backend);
                let (want, _) = counters(2, name, staged, &[Agreed; 11], backend);
                assert_eq!(
                    got, want,
                    "{name} P=2 staged={staged} {backend:?}: counters after refusals"
                );
                assert!(
                    spec > 0,
                    "{name} P=2 staged={staged} {backend:?}: no launch speculated"
                );
            }
        }
    }

    /// Back-to-back launches of a plan whose scratch puts run ahead of the check: a rank one
    /// launch ahead puts into its peer's scratch while the peer still reduces the launch
    /// before, so every result is checked (the scratch kept by launch parity keeps them apart).
    #[test]
    fn speculative_launches_keep_every_result() {
        // At 2 ranks every `arrived` slot has one signaller and the prefix runs ahead; at 3 and 4
        // the slot is shared, so a peer's signal of the next launch must not run ahead (it could
        // complete a count that still misses a slower peer's data).
        for backend in BACKENDS {
            for ranks in [2, 3, 4] {
                let spec = keep_every_result(ranks, 3000, backend);
                // Its prefix is not the whole list: the JIT's kernel checks after it.
                if ranks == 2 {
                    assert!(spec > 3000, "{backend:?}: few launches speculated: {spec}");
                } else {
                    assert_eq!(
                        spec, 0,
                        "{ranks} ranks {backend:?}: speculated with a shared signal slot"
                    );
                }
            }
        }
    }

    /// Launches `launches` allreduces on `ranks` threads, checks every element of every result,
    /// and returns how many rank-launches speculated.
    /// A launch keeps the staging layout of the one before only when it repeats it: a change
    /// of binding (symmetric ↔ private, another heap offset), of size or of dtype lays the area
    /// out again, and every result stays right across the changes (a stale layout would address
    /// the peers' copies where they are no longer).
    #[test]
    fn the_staging_layout_is_kept_only_for_a_repeated_launch() {
        #[derive(Clone, Copy)]
        enum Bind {
            HeapA,
            HeapB,
            Private,
        }
        // (binding, n, f64?, layouts so far): each change alters one input of the layout (a
        // change of binding alters both this rank's binding and the group's).
        let script: [(Bind, u64, bool, u64); 10] = [
            (Bind::HeapA, 16, false, 1),
            (Bind::HeapA, 16, false, 1),
            (Bind::Private, 16, false, 2),
            (Bind::Private, 16, false, 2),
            (Bind::Private, 8, false, 3),
            (Bind::Private, 8, true, 4),
            (Bind::Private, 8, true, 4),
            (Bind::HeapA, 8, true, 5),
            (Bind::HeapB, 8, true, 6),
            (Bind::HeapA, 16, false, 7),
        ];
        const RANKS: u32 = 2;
        for backend in BACKENDS {
            let plan = crate::exec::test_plans::standard_with(
                "allreduce_one_shot",
                RANKS,
                &Default::default(),
            );
            let world = LocalWorld::new(RANKS, 8 << 20)
                .expect("world")
                .with_timeout(Duration::from_secs(30));
            let group = world.world_group().expect("group");
            std::thread::scope(|s| {
                for r in 0..RANKS {
                    let (group, plan) = (group.clone(), &plan);
                    s.spawn(move || {
                        let ex = executor(group.fabric(r).expect("fabric"), backend);
                        let lp = ex.load(plan).expect("loads");
                        let heap = [
                            ex.fabric().scratch("t/a", 16 * 8).expect("a"),
                            ex.fabric().scratch("t/b", 16 * 8).expect("b"),
                        ];
                        let mut private = [0u8; 16 * 8];
                        for (k, &(bind, n, wide, layouts)) in script.iter().enumerate() {
                            let dtype = if wide { DType::F64 } else { DType::F32 };
                            let size = dtype.size() as u64;
                            let value = |q: u32, i: u64| (k as u64 * 10 + q as u64 + i) as f64;
                            let mut data: Vec<u8> = (0..n)
                                .flat_map(|i| match wide {
                                    true => value(r, i).to_le_bytes().to_vec(),
                                    false => (value(r, i) as f32).to_le_bytes().to_vec(),
                                })
                                .collect();
                            let at = match bind {
                                Bind::HeapA => Some(heap[0]),
                                Bind::HeapB => Some(heap[1]),
                                Bind::Private => None,
                            };
                            let mut b = match at {
                                Some(offset) => {
                                    let p = ex.fabric().heap_ptr(r, offset, n * size).expect("x");
                                    // SAFETY: this rank's own heap range of n * size bytes,
                                    // not in a launch now.
                                    unsafe {
                                        std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len())
                                    };
                                    [Binding::Heap {
                                        offset,
                                        bytes: n * size,
                                    }]
                                }
                                None => {
                                    private[..data.len()].copy_from_slice(&data);
                                    [Binding::Host(&mut private[..data.len()])]
                                }
                            };
                            let mut sizes = LaunchSizes::default();
                            sizes.vars.insert("n".into(), n);
                            ex.launch(
                                &lp,
                                LaunchArgs {
                                    types: ElemTypes::new(dtype, None).expect("dtype"),
                                    op: ReduceOp::Sum,
                                    sizes: &sizes,
                                    buffers: &mut b,
                                },
                            )
                            .unwrap_or_else(|e| panic!("{backend:?} rank {r} launch {k}: {e}"));
                            match at {
                                Some(offset) => {
                                    let p = ex.fabric().heap_ptr(r, offset, n * size).expect("x");
                                    // SAFETY: as above, after the launch.
                                    unsafe {
                                        std::ptr::copy_nonoverlapping(
                                            p,
                                            data.as_mut_ptr(),
                                            data.len(),
                                        )
                                    };
                                }
                                None => {
                                    let len = data.len();
                                    data.copy_from_slice(&private[..len]);
                                }
                            }
                            for i in 0..n {
                                let at = (i * size) as usize..((i + 1) * size) as usize;
                                let got = match wide {
                                    true => {
                                        f64::from_le_bytes(data[at].try_into().expect("8 bytes"))
                                    }
                                    false => {
                                        f32::from_le_bytes(data[at].try_into().expect("4 bytes"))
                                            as f64
                                    }
                                };
                                let want: f64 = (0..RANKS).map(|q| value(q, i)).sum();
                                assert_eq!(
                                    got, want,
                                    "{backend:?} rank {r} launch {k} element {i}"
                                );
                            }
                            assert_eq!(
                                lp.layouts(),
                                layouts,
                                "{backend:?} rank {r} launch {k}: layouts"
                            );
                        }
                    });
                }
            });
        }
    }

    fn keep_every_result(ranks: u32, launches: u64, backend: BackendKind) -> u64 {
        const LEN: usize = 16;
        let plan = crate::exec::test_plans::standard_with(
            "allreduce_one_shot",
            ranks,
            &Default::default(),
        );
        let world = LocalWorld::new(ranks, 8 << 20)
            .expect("world")
            .with_timeout(Duration::from_secs(30));
        let group = world.world_group().expect("group");
        let spec: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..ranks)
                .map(|r| {
                    let (group, plan) = (group.clone(), &plan);
                    s.spawn(move || {
                        let ex = executor(group.fabric(r).expect("fabric"), backend);
                        let lp = ex.load(plan).expect("loads");
                        let mut sizes = LaunchSizes::default();
                        sizes.vars.insert("n".into(), LEN as u64);
                        let offset = ex.fabric().scratch("t/x", LEN as u64 * 4).expect("x");
                        let x = ex
                            .fabric()
                            .heap_ptr(r, offset, LEN as u64 * 4)
                            .expect("x address") as *mut f32;
                        for k in 0..launches {
                            for i in 0..LEN {
                                // SAFETY: this rank's own heap range of LEN f32, not in a
                                // launch now.
                                unsafe { x.add(i).write((k * 10 + r as u64 + i as u64) as f32) };
                            }
                            let mut b = [Binding::Heap {
                                offset,
                                bytes: LEN as u64 * 4,
                            }];
                            ex.launch(
                                &lp,
                                LaunchArgs {
                                    types: ElemTypes::new(DType::F32, None).expect("f32"),
                                    op: ReduceOp::Sum,
                                    sizes: &sizes,
                                    buffers: &mut b,
                                },
                            )
                            .unwrap_or_else(|e| panic!("rank {r} launch {k}: {e}"));
                            for i in 0..LEN {
                                let want = (0..ranks as u64)
                                    .map(|q| (k * 10 + q + i as u64) as f32)
                                    .sum::<f32>();
                                // SAFETY: as above.
                                let got = unsafe { x.add(i).read() };
                                assert_eq!(got, want, "rank {r} launch {k} element {i}");
                            }
                        }
                        lp.speculations()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("rank")).sum()
        });
        spec
    }
}
