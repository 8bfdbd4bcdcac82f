//! Backends: what runs the resolved steps of one launch on this rank.
//!
//! Everything around that is the executor's and shared by every backend: loading the plan,
//! checking the launch's arguments and bindings, resolving (or reusing) the steps for the
//! launch sizes and their fusion schedule, staging buffers in and out, the launch's entry and
//! exit signals, its trace event and its log record. A backend receives all of it as a [`StepContext`]: the
//! [`Resolved`] steps, the address map ([`LaunchMemory`]), the launch's signal block
//! ([`LaunchSignals`], which also carries the bounded waits every backend must use) and the
//! host collective library; it may keep state per loaded plan ([`Backend::PlanState`]).
//!
//! One file per implementation: [`interp`] (the interpreter, the reference) and [`jit`]
//! (kernels compiled through LLVM); both run the channels of a multi-channel rank on the one
//! runner in `channels`. [`Chosen`] runs each launch on the one
//! [`ExecOptions::backend`] names, and for `auto` on the one the rule in [`auto`] picks.
//!
//! **Errors** are the executor's ([`ExecError`]); a backend stops at the first one.

pub mod auto;
mod channels;
pub mod interp;
pub mod jit;

use super::cancel::LaunchCancel;
use super::dtype::ElemTypes;
use super::error::ExecError;
use super::fabric::{Fabric, WaitContext};
use super::hostcoll::{Exchanges, HostCollRequest, HostCollectives};
use super::reduce::ReduceOp;
use super::resolved::Resolved;
use super::staging::LaunchMemory;
use super::trace;
use crate::config::{BackendKind, ExecOptions};
use std::sync::Mutex;
use symsched_plan::{Cmp, LaunchSizes, Plan, SignalUpdate, WaitTarget};

/// Runs the resolved steps of one launch (see the module docs).
pub trait Backend {
    /// What the backend keeps per loaded plan between launches (scratch vectors, compiled
    /// code); created empty at load.
    type PlanState: Default + Send;

    /// Run every step of `ctx.resolved`, in order, as the plan prescribes; for a speculating
    /// launch ([`Steps::Speculating`]) with the launch's agreement check between its prefix
    /// and the rest.
    fn run<F: Fabric>(
        &self,
        ctx: &StepContext<'_, F>,
        state: &mut Self::PlanState,
        part: Steps<'_>,
    ) -> Result<(), ExecError>;
}

/// The signals of one launch of a loaded plan: the plan's block of slots on this group and the
/// launch epoch, so waits and set-signals are relative to it (counters are never reset).
#[derive(Clone, Copy)]
pub struct LaunchSignals<'a> {
    /// First slot of the plan's block.
    pub base: u32,
    pub epoch: u64,
    /// Per plan slot, the group ranks that update it on this rank (named by a timeout).
    pub signallers: &'a [Vec<u32>],
}

impl LaunchSignals<'_> {
    /// Deliver `u` to its peer (release: this rank's earlier writes are visible first).
    #[inline]
    pub fn send<F: Fabric>(&self, fabric: &F, u: &SignalUpdate) -> Result<(), ExecError> {
        fabric.signal(u.peer, self.base + u.slot, u.mode, u.value_at(self.epoch))
    }

    /// Block until plan slot `slot` compares true against `target` for this epoch, or the
    /// fabric's deadline passes (the error names the plan step, the slot and its signallers).
    #[inline]
    pub fn wait<F: Fabric>(
        &self,
        fabric: &F,
        plan: &Plan,
        slot: u32,
        cmp: Cmp,
        target: WaitTarget,
        step: u32,
    ) -> Result<u64, ExecError> {
        let ctx = WaitContext {
            schedule: &plan.schedule,
            step,
            slot_name: &plan.signals[slot as usize].name,
            signallers: &self.signallers[slot as usize],
        };
        fabric.wait(self.base + slot, cmp, target.at(self.epoch), &ctx)
    }

    /// [`LaunchSignals::wait`] for `channel` of a multi-channel launch: `cancel` (the launch's
    /// shared cancel word, `None` when the rank has one channel) stops it early once another
    /// channel failed.
    #[allow(clippy::too_many_arguments)] // the wait's own arguments plus the channel's
    #[inline]
    pub fn wait_in<F: Fabric>(
        &self,
        fabric: &F,
        plan: &Plan,
        slot: u32,
        cmp: Cmp,
        target: WaitTarget,
        step: u32,
        cancel: Option<(&LaunchCancel, u32)>,
    ) -> Result<u64, ExecError> {
        let Some((cancel, channel)) = cancel else {
            return self.wait(fabric, plan, slot, cmp, target, step);
        };
        let ctx = WaitContext {
            schedule: &plan.schedule,
            step,
            slot_name: &plan.signals[slot as usize].name,
            signallers: &self.signallers[slot as usize],
        };
        fabric.wait_cancellable(
            self.base + slot,
            cmp,
            target.at(self.epoch),
            &ctx,
            cancel,
            channel,
        )
    }
}

/// Everything a backend gets to run one launch's steps on this rank.
pub struct StepContext<'a, F: Fabric> {
    pub fabric: &'a F,
    pub plan: &'a Plan,
    /// The loaded plan's key (names its host collectives).
    pub key: &'a str,
    pub resolved: &'a Resolved,
    /// The launch sizes the steps were resolved for.
    pub sizes: &'a LaunchSizes,
    pub memory: &'a LaunchMemory<'a, F>,
    pub signals: LaunchSignals<'a>,
    pub types: ElemTypes,
    pub op: ReduceOp,
    pub opts: &'a ExecOptions,
    /// The step trace of this launch, when tracing is on.
    pub trace: Option<&'a trace::Launch<'a>>,
    pub(crate) host: &'a dyn HostCollectives,
    pub(crate) exchanges: &'a Mutex<Exchanges>,
}

/// The launch's check of the peers' agreement words (and the credits they imply), which a
/// speculating launch runs between its prefix and the rest of its steps; its error ends the
/// launch.
pub type Check<'c> = &'c mut dyn FnMut() -> Result<(), ExecError>;

/// How a backend call runs a launch's resolved steps. A launch that speculates (see
/// "Speculative scratch puts" in `super::super::loaded`, only on a rank with one channel) runs
/// its prefix before its check of the peers' agreement words and the rest after it, in one
/// backend call: the interpreter calls the check between the two ranges, the JIT's kernel
/// through its `agree` intrinsic.
pub enum Steps<'c> {
    /// Every step; the launch was agreed before.
    All,
    /// The first `prefix` steps with their waits skipped (exit-credit waits the check of the
    /// last agreed launch made unnecessary), then `check`, then the rest.
    Speculating { prefix: usize, check: Check<'c> },
}

impl Steps<'_> {
    /// The same part for a second call (after the first made no kernel and ran nothing).
    pub fn reborrow(&mut self) -> Steps<'_> {
        match self {
            Steps::All => Steps::All,
            Steps::Speculating { prefix, check } => Steps::Speculating {
                prefix: *prefix,
                check: &mut **check,
            },
        }
    }
}

impl<F: Fabric> StepContext<'_, F> {
    /// Run a host collective step on the framework's library, or over the heap itself when the
    /// executor has no other.
    pub fn host_collective(&self, req: HostCollRequest) -> Result<(), ExecError> {
        if self.host.is_builtin() {
            let mut ex = self.exchanges.lock().unwrap_or_else(|e| e.into_inner());
            ex.run(self.fabric, req)
        } else {
            self.host.run(req)
        }
    }
}

/// The backend [`ExecOptions::backend`] names, per launch: the interpreter, the JIT, or for
/// `auto` the one [`auto::prefers_jit`] picks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chosen;

/// What [`Chosen`] keeps per loaded plan: each backend's own state, and the plan's traits for
/// the `auto` rule (read from the plan at its first `auto` launch).
#[derive(Default)]
pub struct ChosenState {
    pub interp: <interp::Interpreter as Backend>::PlanState,
    pub jit: <jit::Jit as Backend>::PlanState,
    traits: Option<auto::PlanTraits>,
    /// Why the JIT could not make a kernel for an `auto` launch of this plan: from then on
    /// `auto` runs the plan on the interpreter (warned once per plan).
    jit_unavailable: Option<String>,
}

std::thread_local! {
    static OVERRIDE: std::cell::Cell<Option<BackendKind>> = const { std::cell::Cell::new(None) };
}

/// Run `f` with every launch it makes on this thread on `kind` instead of the executor's
/// [`ExecOptions::backend`] (`None`: the executor's): the per-call choice of the C ABI and the
/// Python layer. A launch runs its steps on the calling thread, so the choice reaches exactly
/// the launches inside `f`; nested calls restore the outer choice.
///
/// ```
/// use symsched_runtime::config::BackendKind;
/// use symsched_runtime::exec::backend::{launches_on, overridden};
/// assert_eq!(launches_on(Some(BackendKind::Jit), overridden), Some(BackendKind::Jit));
/// assert_eq!(overridden(), None);
/// ```
pub fn launches_on<R>(kind: Option<BackendKind>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<BackendKind>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|o| o.replace(kind.or(o.get()))));
    f()
}

/// The backend [`launches_on`] chose for this thread, if any.
pub fn overridden() -> Option<BackendKind> {
    OVERRIDE.with(|o| o.get())
}

/// `auto`: whether the JIT runs this launch ([`auto`]; the same on every rank, since it reads
/// only the plan, the launch sizes over all ranks, the dtypes and the op).
fn auto_prefers_jit(
    plan: &Plan,
    res: &Resolved,
    types: ElemTypes,
    op: ReduceOp,
    state: &mut ChosenState,
) -> bool {
    let traits = *state
        .traits
        .get_or_insert_with(|| auto::PlanTraits::of(plan));
    let bytes = auto::message_bytes(plan, &res.max_len, types);
    auto::prefers_jit(traits, bytes, types, op)
}

/// The backend [`Chosen`] runs a launch of `plan`, resolved as `res`, on: `(kind, jit)`.
#[inline]
fn choose(
    plan: &Plan,
    res: &Resolved,
    types: ElemTypes,
    op: ReduceOp,
    opts: &ExecOptions,
    state: &mut ChosenState,
) -> (BackendKind, bool) {
    let kind = overridden().unwrap_or(opts.backend);
    let jit = match kind {
        BackendKind::Interp => false,
        BackendKind::Jit => true,
        BackendKind::Auto => {
            state.jit_unavailable.is_none() && auto_prefers_jit(plan, res, types, op, state)
        }
    };
    (kind, jit)
}

impl Backend for Chosen {
    type PlanState = ChosenState;

    #[inline]
    fn run<F: Fabric>(
        &self,
        ctx: &StepContext<'_, F>,
        state: &mut ChosenState,
        mut part: Steps<'_>,
    ) -> Result<(), ExecError> {
        let (kind, jit) = choose(ctx.plan, ctx.resolved, ctx.types, ctx.op, ctx.opts, state);
        if !jit {
            return interp::Interpreter.run(ctx, &mut state.interp, part);
        }
        match jit::Jit.run(ctx, &mut state.jit, part.reborrow()) {
            // No kernel could be made (no step has run: the kernel is made before it is
            // called), so `auto` falls back to the reference for this plan. Every rank
            // compiles the same kernel, so a failure is normally the same on every rank; a
            // rank that falls back alone still runs the plan's signal protocol.
            Err(ExecError::Jit(e)) if kind == BackendKind::Auto => {
                tracing::warn!(
                    schedule = %ctx.plan.schedule,
                    "auto backend: the JIT cannot make a kernel ({e}); this plan runs on the \
                     interpreter from now on"
                );
                state.jit_unavailable = Some(e.to_string());
                interp::Interpreter.run(ctx, &mut state.interp, part)
            }
            r => r,
        }
    }
}
