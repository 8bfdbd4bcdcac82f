//! The executor: runs compiled [`Plan`]s for one rank of one group, over any [`Fabric`].
//!
//! Per group (one [`Executor`] per fabric) it loads each plan once ([`Executor::load`]: signal
//! slots, caches) and then launches it as often as asked. A launch ([`Executor::launch`]) is a
//! fixed sequence of phases, all shared by every backend except the one that runs the steps:
//!
//! 1. **check** the arguments against the plan ([`LoadedPlan`]);
//! 2. **resolve or reuse** the steps for the launch sizes ([`super::resolve`]);
//! 3. **bind, publish, stage in, agree**: check the bindings; publish this rank's launch
//!    signature ([`super::agreement`]; a local refusal takes part too, so every rank fails
//!    alike); lay out the staging area and copy staged inputs in ([`super::binding`],
//!    [`super::staging`]) — before the peers' words are checked when this rank binds no role
//!    empty and the area need not grow, after it otherwise; check every peer's word before the
//!    first step. A refused launch still counts as one (its signals and epoch, see
//!    [`super::loaded`]);
//! 4. **entry signals**: the plan's entry credits, once the staged inputs are in place. A peer's
//!    put into a role buffer waits for them (or for a later signal of this rank), and a peer's
//!    get from a role buffer follows a signal of this rank (both proved by the verifier), so no
//!    peer touches this rank's staging area before it is filled — no barrier needed;
//! 5. **run the steps** on the backend ([`super::backend`]), traced when tracing is on;
//! 6. **finish** an `avg`: one division by P over every written role (bit-identical everywhere);
//! 7. **stage out** the staged outputs;
//! 8. **exit signals**: only then the plan's launch credits, so no peer writes into the staging
//!    area of the next launch while this one is still copying out — except those between ranks
//!    that check each other's agreement word: the word of the next launch, published after this
//!    phase, implies them, and the peer applies them itself after its check ("Exit credits" in
//!    [`super::loaded`]);
//! 9. **record**: at `DEBUG` the launch is logged — schedule, group, bytes bound, duration and
//!    outcome, whichever phase it ended in ([`crate::log::launch_record`]); below `DEBUG` this
//!    phase measures nothing.
//!
//! A launch with the same sizes as the previous one allocates nothing.
//!
//! **Failures.** A launch on a group a member marked aborted is refused at once. A launch that
//! fails on this rank after the agreement (its peers are inside the launch and would wait for
//! it) marks the group aborted with its error ([`crate::abort`]), so every peer fails at once
//! naming this rank and the error; a group reset restarts the epochs.
//!
//! **alltoallv counts.** Each rank knows only its own send counts. [`Executor::gather_counts`]
//! exchanges the rows through the heap (every rank writes its row into every peer's exchange
//! area, then signals) and returns the full `counts[sender][receiver]` matrix to put in
//! [`LaunchSizes::counts`]; it is a collective over the group. [`Executor::alltoallv_eager`]
//! ([`super::eager`]) folds that exchange into the data round instead, and hands back the
//! matrix for a launch only when a chunk is too large to go eagerly. A counts plan keeps its
//! resolved steps for a repeated matrix.

use super::agreement::{own_pattern_into, PeerEntry, Signature};
use super::backend::{Backend, Chosen, ChosenState, LaunchSignals, StepContext, Steps};
use super::binding::{self, Binding};
use super::dtype::{DType, ElemTypes};
use super::eager::{AlltoallvOutcome, EagerChannel};
use super::error::ExecError;
use super::fabric::Fabric;
use super::hostcoll::{Exchanges, HeapHostColl, HostCollectives};
use super::loaded::{LoadedPlan, PlanState, Registered};
use super::reduce::{scale_avg, ReduceOp};
use super::resolve::resolve_or_reuse;
use super::resolved::{RReg, Resolved};
use super::staging::{LaunchMemory, Staging};
use super::trace;
use crate::config::ExecOptions;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use symsched_plan::{BufferRole, LaunchSizes, Plan, SignalMode, PLAN_SCHEMA_VERSION};

/// Everything a launch needs besides the plan.
pub struct LaunchArgs<'s, 'b, 'c> {
    pub types: ElemTypes,
    pub op: ReduceOp,
    pub sizes: &'s LaunchSizes,
    /// One binding per role buffer, in signature order.
    pub buffers: &'b mut [Binding<'c>],
}

/// Executes plans for one rank of one group.
pub struct Executor<F: Fabric> {
    fabric: F,
    opts: ExecOptions,
    plans: Mutex<HashMap<String, Arc<LoadedPlan>>>,
    host: Box<dyn HostCollectives>,
    /// Heap exchanges of the executor's own collectives (barrier, allgather, host collectives).
    internal: Mutex<Exchanges>,
    /// The one-round alltoallv channel ([`super::eager`]).
    eager: Mutex<EagerChannel>,
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
        trace::configure(opts.trace.as_deref());
        Executor {
            eager: Mutex::new(EagerChannel::new(&opts)),
            opts,
            fabric,
            plans: Mutex::new(HashMap::new()),
            host: Box::new(HeapHostColl),
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
        let loaded = Arc::new(LoadedPlan::load(&self.fabric, plan, key.clone())?);
        plans.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Element count of each role buffer on this rank for the given sizes.
    pub fn role_lens(&self, lp: &LoadedPlan, sizes: &LaunchSizes) -> Result<Vec<u64>, ExecError> {
        let me = self.fabric.rank();
        lp.plan.buffers[..lp.roles()]
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
    /// same plans in the same order. The phases are listed in the module docs; at `DEBUG` every
    /// launch is logged ([`crate::log::launch_record`]).
    pub fn launch(&self, lp: &LoadedPlan, args: LaunchArgs) -> Result<(), ExecError> {
        if !crate::log::launch_records_enabled() {
            return self.launch_guarded(lp, args);
        }
        // 9. record
        let bytes = args.buffers.iter().map(Binding::len).sum();
        let t0 = std::time::Instant::now();
        let r = self.launch_guarded(lp, args);
        let outcome = r
            .as_ref()
            .map(|_| ())
            .map_err(|e| e as &dyn std::fmt::Display);
        crate::log::launch_record(
            &lp.plan.schedule,
            self.fabric.label(),
            bytes,
            t0.elapsed(),
            outcome,
        );
        r
    }

    /// A launch inside failure propagation: refused at once on a group a member aborted, and
    /// when it fails after this rank published a valid word (its peers may then be inside the
    /// launch and would wait for it), the group is marked aborted with the error so every peer
    /// fails at once naming this rank ([`crate::abort`]). A disagreement is not such a failure:
    /// every rank refuses the launch alike and the group stays usable.
    fn launch_guarded(&self, lp: &LoadedPlan, args: LaunchArgs) -> Result<(), ExecError> {
        self.fabric.check_usable()?;
        let mut committed = false;
        let r = self.launch_phases(lp, args, &mut committed);
        if let Err(e) = &r {
            let from_peer = matches!(e, ExecError::Core(c)
                if matches!(**c, crate::error::RuntimeError::GroupAborted(_)));
            let refused = matches!(e, ExecError::Disagreement(_));
            if committed && !from_peer && !refused {
                self.fabric.abort(&format!(
                    "launch of `{}` failed on this rank: {e}",
                    lp.plan.schedule
                ));
            }
        }
        r
    }

    /// Phases 1 to 8 of a launch; `committed` is set once this rank published a valid word
    /// (its peers may then go on into the launch).
    #[inline]
    fn launch_phases(
        &self,
        lp: &LoadedPlan,
        args: LaunchArgs,
        committed: &mut bool,
    ) -> Result<(), ExecError> {
        let LaunchArgs {
            types,
            op,
            sizes,
            buffers,
        } = args;
        let mut state = lp.lock_state();
        let st = &mut *state;
        let generation = self.fabric.generation();
        if st.generation != generation || st.regs.is_none() {
            self.register(lp, st, generation)?;
        }
        let Some(regs) = st.regs.as_mut() else {
            return Err(ExecError::Runtime("plan registrations missing".into()));
        };
        let signals = LaunchSignals {
            base: regs.slot_base,
            epoch: st.epoch,
            signallers: &lp.signallers,
        };
        // 1. check; 2. resolve or reuse; 3a. check the bindings — all local: a refusal still
        // takes part in the agreement, so every peer fails too instead of waiting for it.
        let me = self.fabric.rank();
        let local = lp
            .check_launch(types, op, sizes, buffers.len())
            .and_then(|()| {
                resolve_or_reuse(
                    &mut st.resolved,
                    &lp.plan,
                    me,
                    sizes,
                    lp.uses_counts,
                    &self.opts,
                )
            })
            .and_then(|res| {
                binding::check(&self.fabric, &lp.plan, res, types, buffers)?;
                Ok(res)
            });
        // 3b. stage in before the agreement when this rank binds no role empty (its own
        // binding is then the group's if the group agrees) and the area need not grow; before
        // publishing when the word can then carry entry credits ("Entry credits" in
        // `super::loaded`), after it otherwise (the word then leaves one stage-in earlier).
        // Nothing a peer reads or writes moves before the check below: every peer checks this
        // rank's word before its first step, and staging writes only this rank's own area.
        st.agree_seq += 1;
        let carry = !lp.entry_implied.is_empty();
        let prepared = local.and_then(|res| {
            let sig = signature(lp, res, types, op, sizes, buffers);
            let eligible = !own_pattern_into(&sig, lp.roles(), &mut st.bound);
            // Digested here, while the signature is at hand: the staging below takes the
            // bindings, and building it again cost ~25 instructions a launch (it is built again
            // only to write a record, off the common path).
            let digests = regs.agreement.digests(&sig, &st.bound);
            // A launch that may speculate stages in before publishing too: its word then
            // tells whether it does ("Speculative scratch puts" in `super::loaded`). Either
            // backend runs the prefix, the check and the rest in one call (the JIT's kernel
            // checks through an intrinsic).
            let early = eligible && (carry || (lp.spec_prefix > 0 && speculation_fits(lp, res)));
            let staged = early
                && st.staging.stage_in(
                    &self.fabric,
                    &lp.plan,
                    &lp.access,
                    res,
                    types,
                    &st.bound,
                    buffers,
                    false,
                    st.epoch,
                )?;
            Ok((res, eligible && !early, staged, digests))
        });
        // 3c. publish this rank's word (a local refusal too, so every peer refuses alike)
        let (res, stage_after_publish, staged, digests) = match prepared {
            Ok(v) => v,
            Err(e) => {
                regs.agreement.publish(
                    &self.fabric,
                    &lp.plan,
                    st.agree_seq,
                    Err(&e),
                    false,
                    false,
                )?;
                self.undo_speculators(lp, signals, &regs.agreement.take_speculators())?;
                // Every peer refuses this launch too (it sees this rank's invalid word).
                self.finish_refused(lp, signals, EntrySent::None, &[], &[])?;
                regs.agreement.refused_unread();
                st.epoch += 1;
                return Err(e);
            }
        };
        let entered = staged && carry;
        let speculate = staged
            && !carry
            && !trace::enabled()
            && st.staging.twinned()
            && regs.agreement.repeats_agreed(digests);
        *committed = true;
        let published = match regs.agreement.publish_repeated(
            &self.fabric,
            st.agree_seq,
            digests,
            entered,
            speculate,
        )? {
            Some(p) => p,
            None => regs.agreement.publish(
                &self.fabric,
                &lp.plan,
                st.agree_seq,
                Ok((&signature(lp, res, types, op, sizes, buffers), digests)),
                entered,
                speculate,
            )?,
        };
        self.undo_speculators(lp, signals, &regs.agreement.take_speculators())?;
        // 4. entry signals, when staged (after a flagged word, those it does not carry)
        let sent = if entered {
            self.send_entry_signals(lp, signals, false)?;
            EntrySent::AllButWord
        } else if staged
            || (stage_after_publish
                && st.staging.stage_in(
                    &self.fabric,
                    &lp.plan,
                    &lp.access,
                    res,
                    types,
                    &st.bound,
                    buffers,
                    false,
                    st.epoch,
                )?)
        {
            self.send_entry_signals(lp, signals, true)?;
            EntrySent::All
        } else {
            EntrySent::None
        };
        let run_steps =
            |memory: &LaunchMemory<'_, F>, backend: &mut ChosenState, part: Steps<'_>| {
                self.run_steps(lp, res, sizes, memory, signals, types, op, backend, part)
            };
        let memory = if published.speculated() {
            // 4b. the speculative prefix (puts into the peers' scratch copy of this launch's
            // parity, and their signals), 3d. the agreement, 5. the rest: one backend call,
            // which calls `check` between the prefix and the rest
            st.speculations += 1;
            let memory = st.staging.memory(&self.fabric, &lp.plan, types);
            let mut refused = false;
            let (bound, entries, speculated) = (&mut st.bound, &mut st.entries, &mut st.speculated);
            let mut check = || {
                let verdict = regs.agreement.agree(
                    &self.fabric,
                    &lp.plan,
                    &published,
                    bound,
                    entries,
                    speculated,
                );
                refused = verdict.is_err();
                verdict?;
                // The peers' exit credits of the previous launch and entry credits of this
                // one, which their checked words imply.
                self.apply_credits_by_word(lp, signals, entries)
            };
            let part = Steps::Speculating {
                prefix: lp.spec_prefix,
                check: &mut check,
            };
            if let Err(e) = run_steps(&memory, &mut st.backend, part) {
                if refused && matches!(e, ExecError::Disagreement(_)) {
                    self.finish_refused(lp, signals, sent, &st.entries, &st.speculated)?;
                    st.epoch += 1;
                }
                return Err(e);
            }
            memory
        } else {
            // 3d. the agreement: every peer's word before this rank's first step
            let verdict = regs.agreement.agree(
                &self.fabric,
                &lp.plan,
                &published,
                &mut st.bound,
                &mut st.entries,
                &mut st.speculated,
            );
            if let Err(e) = verdict {
                if matches!(e, ExecError::Disagreement(_)) {
                    self.finish_refused(lp, signals, sent, &st.entries, &st.speculated)?;
                    st.epoch += 1;
                }
                return Err(e);
            }
            // The peers' exit credits of the previous launch and entry credits of this one,
            // which their checked words imply.
            self.apply_credits_by_word(lp, signals, &st.entries)?;
            if sent == EntrySent::None {
                // Under the group's binding, now agreed.
                st.staging.stage_in(
                    &self.fabric,
                    &lp.plan,
                    &lp.access,
                    res,
                    types,
                    &st.bound,
                    buffers,
                    true,
                    st.epoch,
                )?;
                self.send_entry_signals(lp, signals, true)?;
            }
            let memory = st.staging.memory(&self.fabric, &lp.plan, types);
            // 5. run the steps
            run_steps(&memory, &mut st.backend, Steps::All)?;
            memory
        };
        // The test inline, the work out of line: a call that returns at once was ~20
        // instructions a launch.
        if op == ReduceOp::Avg && lp.plan.collective.reduces() {
            finish_avg(lp, res, &memory, types)?;
        }
        // 7. stage out; 8. exit signals
        st.staging.stage_out(&self.fabric, buffers)?;
        if !lp.exit_sent.is_empty() {
            self.send_exit_signals(lp, signals)?;
        }
        st.epoch += 1;
        Ok(())
    }

    /// End a launch refused on every rank as one whose steps did nothing, so every counter
    /// holds what one more launch leaves ("Refused launches" in [`super::loaded`]): the entry
    /// signals not sent yet (after a flagged word, only to the peers that refused their
    /// arguments: they apply none by word), the credits the peers' words imply (`entries`, as
    /// [`super::agreement::AgreementArea::check`] left them; empty when this rank refused its
    /// own arguments and checked nothing), the exit signals, and on this rank's own `add`
    /// slots what the steps would have added. The caller advances the epoch.
    #[cold]
    #[inline(never)]
    fn finish_refused(
        &self,
        lp: &LoadedPlan,
        signals: LaunchSignals<'_>,
        sent: EntrySent,
        entries: &[PeerEntry],
        speculated: &[bool],
    ) -> Result<(), ExecError> {
        match sent {
            EntrySent::None => self.send_entry_signals(lp, signals, true)?,
            EntrySent::All => {}
            EntrySent::AllButWord => {
                for u in lp
                    .entry_implied
                    .iter()
                    .filter(|u| entries.get(u.peer as usize) == Some(&PeerEntry::Refused))
                {
                    signals.send(&self.fabric, u)?;
                }
            }
        }
        self.apply_credits_by_word(lp, signals, entries)?;
        self.send_exit_signals(lp, signals)?;
        let me = self.fabric.rank();
        for &(slot, n) in &lp.step_adds {
            // Less what the peers that speculated sent here themselves (their prefixes ran).
            let sent_by_prefix = spec_adds_to(lp, speculated, slot);
            let n = n.wrapping_sub(sent_by_prefix);
            if n != 0 {
                self.fabric
                    .signal(me, signals.base + slot, SignalMode::Add, n)?;
            }
        }
        Ok(())
    }

    /// After a launch this rank refused on its own arguments, the peers that speculated in it
    /// (`speculators`, read from their words before this rank's next launch): their prefix
    /// signals reached this rank on top of what its refusal added for every peer, so that much
    /// is taken off again — before any wait of the plan reads those slots.
    fn undo_speculators(
        &self,
        lp: &LoadedPlan,
        signals: LaunchSignals<'_>,
        speculators: &[u32],
    ) -> Result<(), ExecError> {
        let me = self.fabric.rank();
        for &q in speculators {
            for &(slot, n) in lp.spec_adds.get(q as usize).map_or(&[][..], |v| v) {
                self.fabric
                    .signal(me, signals.base + slot, SignalMode::Add, n.wrapping_neg())?;
            }
        }
        Ok(())
    }

    /// A launch in a new reset generation (or the first after a load in one): the group was
    /// reset after an abort, so its counters restart from zero and its registries are empty;
    /// the plan takes its slots and scratch again, now, in the order of the collective calls
    /// (see `super::loaded`). Out of line: the launch path only tests for it.
    #[cold]
    #[inline(never)]
    fn register(
        &self,
        lp: &LoadedPlan,
        st: &mut PlanState,
        generation: u64,
    ) -> Result<(), ExecError> {
        if st.generation != generation {
            st.epoch = 0;
            st.agree_seq = 0;
            st.generation = generation;
            st.regs = None;
            st.staging = Staging::new(&lp.key);
            st.bound.clear();
            st.entries.clear();
        }
        if st.regs.is_none() {
            st.regs = Some(Registered::take(
                &self.fabric,
                &lp.plan,
                &lp.key,
                lp.roles(),
            )?);
        }
        Ok(())
    }

    /// Phase 4: the plan's entry credits, right after the staged inputs are in place: from now
    /// on peers may write into this rank's role buffers. After a flagged word only those the
    /// word does not carry ("Entry credits" in [`super::loaded`]): `implied` sends those too.
    #[inline]
    fn send_entry_signals(
        &self,
        lp: &LoadedPlan,
        signals: LaunchSignals<'_>,
        implied: bool,
    ) -> Result<(), ExecError> {
        for u in &lp.entry_always {
            signals.send(&self.fabric, u)?;
        }
        if implied {
            for u in &lp.entry_implied {
                signals.send(&self.fabric, u)?;
            }
        }
        Ok(())
    }

    /// Phase 5: run the resolved steps on the backend, inside the launch's trace event.
    #[allow(clippy::too_many_arguments)] // the launch's parts, handed on to the backend
    #[inline]
    fn run_steps(
        &self,
        lp: &LoadedPlan,
        res: &Resolved,
        sizes: &LaunchSizes,
        memory: &LaunchMemory<'_, F>,
        signals: LaunchSignals<'_>,
        types: ElemTypes,
        op: ReduceOp,
        state: &mut ChosenState,
        part: Steps<'_>,
    ) -> Result<(), ExecError> {
        let tr = trace::Launch::begin(
            &lp.plan,
            self.fabric.rank(),
            self.fabric.label(),
            signals.epoch,
        );
        let ctx = StepContext {
            fabric: &self.fabric,
            plan: &lp.plan,
            key: &lp.key,
            resolved: res,
            sizes,
            memory,
            signals,
            types,
            op,
            opts: &self.opts,
            trace: tr.as_ref(),
            host: self.host.as_ref(),
            exchanges: &self.internal,
        };
        Chosen.run(&ctx, state, part)?;
        if let Some(tr) = tr {
            tr.end();
        }
        Ok(())
    }

    /// Phase 8: the plan's launch credits, after every staged output was copied out — those
    /// the peer's check of this rank's next agreement word does not imply ("Exit credits" in
    /// [`super::loaded`]).
    #[inline]
    fn send_exit_signals(
        &self,
        lp: &LoadedPlan,
        signals: LaunchSignals<'_>,
    ) -> Result<(), ExecError> {
        for u in &lp.exit_sent {
            signals.send(&self.fabric, u)?;
        }
        Ok(())
    }

    /// The credits the peers did not send since this rank's check of their words of this
    /// launch implies them ("Exit credits" and "Entry credits" in [`super::loaded`]): applied to
    /// this rank's own slots, once per launch, after the check (or in a refusal) — the exit
    /// credits of the previous launch (none in a plan's first epoch, as no launch came before
    /// it), and the entry credits of this launch from every peer whose word was flagged.
    #[inline(always)]
    fn apply_credits_by_word(
        &self,
        lp: &LoadedPlan,
        signals: LaunchSignals<'_>,
        entries: &[PeerEntry],
    ) -> Result<(), ExecError> {
        let me = self.fabric.rank();
        for (from, u) in &lp.entry_by_word {
            if entries.get(*from as usize) == Some(&PeerEntry::ByWord) {
                self.fabric
                    .signal(me, signals.base + u.slot, u.mode, u.value_at(signals.epoch))?;
            }
        }
        if signals.epoch == 0 {
            return Ok(());
        }
        for u in &lp.exit_by_word {
            self.fabric.signal(
                me,
                signals.base + u.slot,
                u.mode,
                u.value_at(signals.epoch - 1),
            )?;
        }
        Ok(())
    }
}

/// What the prefixes of the peers marked in `speculated` add to this rank's slot `slot`.
fn spec_adds_to(lp: &LoadedPlan, speculated: &[bool], slot: u32) -> u64 {
    speculated
        .iter()
        .zip(&lp.spec_adds)
        .filter(|(s, _)| **s)
        .flat_map(|(_, adds)| adds.iter())
        .filter(|(s, _)| *s == slot)
        .fold(0u64, |acc, (_, n)| acc.wrapping_add(*n))
}

/// Whether this rank's resolution keeps its speculative prefix as the plan has it: one
/// channel, and the prefix's steps in plan order (none dropped), so that the peers' account of
/// the signals it sends holds.
#[inline]
fn speculation_fits(lp: &LoadedPlan, res: &Resolved) -> bool {
    let n = lp.spec_prefix;
    !res.multi_channel()
        && res.plan_index.len() >= n
        && res.plan_index[..n]
            .iter()
            .enumerate()
            .all(|(i, &p)| p as usize == i)
}

/// Phase 6 of an `avg` launch of a reducing plan: `avg` = sum, then one division by P over
/// every written role (bit-identical everywhere).
#[inline(never)]
fn finish_avg<F: Fabric>(
    lp: &LoadedPlan,
    res: &Resolved,
    memory: &LaunchMemory<'_, F>,
    types: ElemTypes,
) -> Result<(), ExecError> {
    let plan = &lp.plan;
    let me = memory.rank();
    for (i, b) in plan.buffers[..lp.roles()].iter().enumerate() {
        if matches!(b.role, BufferRole::Output | BufferRole::InOut) && res.my_len[i] > 0 {
            let whole = RReg {
                buf: i as u32,
                elem: 0,
            };
            let (p, dt) = memory.ptr(me, &whole, res.my_len[i])?;
            // SAFETY: checked local range.
            unsafe { scale_avg(types.acc, p, dt, res.my_len[i] as usize, plan.group_size) };
        }
    }
    Ok(())
}

/// Which of this rank's entry credits it has sent before its check of the agreement ("Entry
/// credits" in [`super::loaded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntrySent {
    /// None (it stages after the check, or refused its own arguments).
    None,
    /// Every one (it staged before the check; its word is unflagged and carries none).
    All,
    /// Those its word does not carry (it staged before publishing; its word is flagged).
    AllButWord,
}

/// This rank's launch as the agreement sees it.
#[inline]
fn signature<'a>(
    lp: &LoadedPlan,
    res: &'a Resolved,
    types: ElemTypes,
    op: ReduceOp,
    sizes: &'a LaunchSizes,
    buffers: &'a [Binding<'a>],
) -> Signature<'a> {
    Signature {
        types,
        op,
        reduces: lp.reduces(),
        sizes,
        key: res.key.as_deref(),
        resolution: res.serial,
        buffers,
        lens: &res.my_len[..lp.roles().min(res.my_len.len())],
    }
}
