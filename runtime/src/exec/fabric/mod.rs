//! What one rank of a group needs from the machinery underneath to execute plans: the
//! [`Fabric`] trait, with one implementation per file.
//!
//! - [`local`]: ranks are threads of one process sharing one allocation per rank
//!   ([`LocalWorld`](local::LocalWorld)); used by fast tests and the in-process engine;
//! - [`group`]: ranks are processes sharing the runtime's memfd heap ([`GroupFabric`](group::GroupFabric)
//!   over a runtime [`crate::Group`]).
//!
//! The executor only ever talks to this trait, so every implementation runs the very same
//! executor; `runtime/tests/fabric_conformance.rs` runs one contract suite over each.
//!
//! **Errors** are the executor's ([`ExecError`]), the same variants on every implementation:
//! [`ExecError::RankOutsideGroup`] for a peer outside the group, [`ExecError::OffsetPastHeap`]
//! for a range past the heap, [`ExecError::Exhausted`] when slots or scratch run out, and for an
//! expired wait [`ExecError::Timeout`] (in-process) or [`ExecError::Core`] carrying the runtime
//! core's timeout or dead-peer error (multi-process), both naming the peers that never signalled.

use super::cancel::LaunchCancel;
use super::error::ExecError;
use crate::config::ExecOptions;
use symsched_plan::{Cmp, SignalMode};

pub mod group;
pub mod local;

/// Context of a wait, so a timeout can say exactly what was stuck.
#[derive(Debug, Clone, Copy)]
pub struct WaitContext<'a> {
    /// Schedule name.
    pub schedule: &'a str,
    /// Plan step id (`u32::MAX` for executor-internal waits).
    pub step: u32,
    /// Name of the plan's signal slot (`ready[2]`, `__credit[1]`, …).
    pub slot_name: &'a str,
    /// Group-local ranks that update this slot on the waiting rank.
    pub signallers: &'a [u32],
}

/// Where a peer's heap segment lies in this process ([`Fabric::heap_span`]): [`Fabric::heap_ptr`]
/// of `len` bytes at `offset` is `base + offset` whenever `lo <= offset` and
/// `offset + len <= hi`, and fails outside. The JIT hands it to its kernels as the ABI's
/// `HeapView`, whose `address` is the one statement of that rule (the fabrics' conformance
/// test checks it against `heap_ptr`).
#[derive(Debug, Clone, Copy)]
pub struct HeapSpan {
    pub base: *mut u8,
    pub lo: u64,
    pub hi: u64,
}

/// A rank's view of its group: symmetric memory, signal slots, waits.
///
/// Memory is addressed by *symmetric offsets*: the same offset names the same allocation on every
/// rank. Signal slots are 64-bit counters, one per cache line, private to the group.
pub trait Fabric: Send + Sync {
    /// Group-local rank of the caller.
    fn rank(&self) -> u32;
    /// Number of ranks in the group.
    fn size(&self) -> u32;
    /// Short description of the group for messages (`"world[0,1,2]"`).
    fn label(&self) -> &str;
    /// The executor knobs of the world this rank belongs to, read once when the world was set
    /// up (the runtime's [`crate::RuntimeConfig::exec`], or a [`local::LocalWorld`]'s); what
    /// [`crate::exec::Executor::new`] runs with.
    fn exec_options(&self) -> &ExecOptions;
    /// Address of `len` bytes at `offset` in `peer`'s heap segment (`peer == rank()` is local).
    /// Fails with [`ExecError::RankOutsideGroup`] or [`ExecError::OffsetPastHeap`].
    fn heap_ptr(&self, peer: u32, offset: u64, len: u64) -> Result<*mut u8, ExecError>;
    /// Where `peer`'s heap lies in this process, when that mapping stays put for as long as
    /// this fabric lives: a compiled kernel's addresses are then arithmetic on a span prepared
    /// once, and only a range outside it goes through [`Fabric::heap_ptr`] (for the error).
    /// `None` (the default, and for a peer `heap_ptr` refuses outright): every range goes
    /// through `heap_ptr`.
    fn heap_span(&self, peer: u32) -> Option<HeapSpan> {
        let _ = peer;
        None
    }
    /// Symmetric scratch of at least `bytes`, the same offset on every rank for the same `key`;
    /// repeated calls with the same key and a size not larger return the same allocation. All
    /// ranks of the group ask for the same keys (not necessarily at the same moment).
    fn scratch(&self, key: &str, bytes: u64) -> Result<u64, ExecError>;
    /// `count` consecutive signal slots for `key`, zero-initialised on first use; returns the
    /// first slot's index (the same on every rank).
    fn signal_slots(&self, key: &str, count: u32) -> Result<u32, ExecError>;
    /// Update `slot` on `peer`; release: every memory write of this thread before the call is
    /// visible to a thread that observes the update.
    fn signal(&self, peer: u32, slot: u32, mode: SignalMode, value: u64) -> Result<(), ExecError>;
    /// Block until the local `slot` compares true against `target` (acquire), or the deadline
    /// passes; returns the observed value.
    fn wait(&self, slot: u32, cmp: Cmp, target: u64, ctx: &WaitContext) -> Result<u64, ExecError>;
    /// [`Fabric::wait`] for channel `channel` of a multi-channel launch: also stops, with
    /// [`ExecError::ChannelCancelled`], soon after another channel marked `cancel` (see
    /// [`super::cancel`]). The default looks at `cancel` only before waiting (the wait stays
    /// bounded by the deadline); the in-process and multi-process fabrics look inside their
    /// poll loops.
    fn wait_cancellable(
        &self,
        slot: u32,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
        cancel: &LaunchCancel,
        channel: u32,
    ) -> Result<u64, ExecError> {
        cancel.check(channel)?;
        self.wait(slot, cmp, target, ctx)
    }
    /// Where this rank's counters of slots `first .. first + count` lie, when they lie at a
    /// fixed stride in memory this process can read: the address of `first`'s counter and the
    /// stride in bytes. A compiled kernel looks at a counter there (acquire) before it calls
    /// [`Fabric::wait`], which it then does only when the wait must block; `None` (the
    /// default): every wait goes through [`Fabric::wait`].
    fn signal_words(&self, first: u32, count: u32) -> Option<(*const u64, usize)> {
        let _ = (first, count);
        None
    }
    /// Fail when the group was marked aborted by a member (see [`crate::abort`]); an
    /// implementation without failure propagation is always usable.
    fn check_usable(&self) -> Result<(), ExecError> {
        Ok(())
    }
    /// Mark the group aborted with `message`, so every peer's waits fail at once naming this
    /// rank and the message; a no-op where there is no failure propagation.
    fn abort(&self, message: &str) {
        let _ = message;
    }
    /// The group's reset generation ([`crate::Group::generation`]): launch state kept across
    /// launches (epochs) is only valid within one generation.
    fn generation(&self) -> u64 {
        0
    }
    /// Whether `peer` shares this rank's heaps (a group spanning nodes reaches only the
    /// members of its own node; the other nodes meet through host collectives).
    fn reachable(&self, peer: u32) -> bool {
        peer < self.size()
    }
}
