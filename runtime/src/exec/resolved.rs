//! The resolved step representation every backend runs: one rank's steps of a plan for one set
//! of launch sizes, with every region resolved to a buffer and element offset and every length
//! to an element count, plus the execution schedule the resolve passes chose for them (which
//! steps run fused into a reduce, which gets a reduce performs itself, which moves stream past
//! the cache). It is produced by [`super::resolve`] and depends on nothing but the plan.

use symsched_plan::{Cmp, HostCollOp, Rank, SignalUpdate, WaitTarget};

/// A region resolved for given sizes: buffer and element offset on the rank that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RReg {
    pub buf: u32,
    pub elem: u64,
}

/// One resolved step (the plan's [`symsched_plan::Op`] with extents evaluated). A step moves
/// `n` elements: the length of its data region (source of a put/get/copy/cast, destination of a
/// reduce). `Copy` covers casts too: the element types of its buffers say whether it converts.
#[derive(Debug, Clone)]
pub enum RStep {
    Put {
        src: RReg,
        dst: RReg,
        peer: Rank,
        n: u64,
        signal: Option<SignalUpdate>,
    },
    Get {
        src: RReg,
        dst: RReg,
        peer: Rank,
        n: u64,
    },
    Signal(SignalUpdate),
    Wait {
        slot: u32,
        cmp: Cmp,
        target: WaitTarget,
        /// The plan step id (for timeouts and traces).
        id: u32,
    },
    Reduce {
        dst: RReg,
        srcs: Vec<RReg>,
        n: u64,
    },
    Copy {
        src: RReg,
        dst: RReg,
        n: u64,
    },
    Matmul {
        c: RReg,
        a: RReg,
        b: RReg,
        m: u64,
        k: u64,
        n: u64,
    },
    HostColl {
        op: HostCollOp,
        reg: RReg,
        n: u64,
        members: Vec<Rank>,
        /// Position among this rank's host collectives: the k-th one on every rank is the same
        /// collective (step ids differ between ranks).
        ordinal: u32,
    },
}

impl RStep {
    /// Elements the step writes (0 for signals and waits), for the step trace.
    pub fn elems(&self) -> u64 {
        match self {
            RStep::Put { n, .. }
            | RStep::Get { n, .. }
            | RStep::Reduce { n, .. }
            | RStep::Copy { n, .. }
            | RStep::HostColl { n, .. } => *n,
            RStep::Matmul { m, n, .. } => m * n,
            RStep::Signal(_) | RStep::Wait { .. } => 0,
        }
    }

    /// Regions the step reads or writes in the memory of `me` (the rank executing it), with
    /// their element counts: the resolved counterpart of the plan's `Op::reads`/`Op::writes`
    /// restricted to local memory.
    pub fn local_regions(&self, me: Rank) -> Vec<(RReg, u64)> {
        match self {
            RStep::Put {
                src, dst, peer, n, ..
            } => {
                let mut v = vec![(*src, *n)];
                if *peer == me {
                    v.push((*dst, *n));
                }
                v
            }
            RStep::Get {
                src, dst, peer, n, ..
            } => {
                let mut v = vec![(*dst, *n)];
                if *peer == me {
                    v.push((*src, *n));
                }
                v
            }
            RStep::Reduce { dst, srcs, n } => {
                let mut v: Vec<_> = srcs.iter().map(|s| (*s, *n)).collect();
                v.push((*dst, *n));
                v
            }
            RStep::Copy { src, dst, n } => vec![(*src, *n), (*dst, *n)],
            RStep::Matmul { c, a, b, m, k, n } => vec![(*c, m * n), (*a, m * k), (*b, k * n)],
            RStep::HostColl { reg, n, .. } => vec![(*reg, *n)],
            RStep::Signal(_) | RStep::Wait { .. } => Vec::new(),
        }
    }
}

/// A reduce operand replaced by the source of a folded get: read `src` on `peer` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pull {
    /// Index into the reduce's operand list.
    pub operand: usize,
    pub peer: Rank,
    pub src: RReg,
}

/// Per step of a resolved list: which gets are folded away and what each reduce reads instead.
#[derive(Debug, Default, Clone)]
pub struct GetFolds {
    pub(crate) folded: Vec<bool>,
    pub(crate) pulls: Vec<Vec<Pull>>,
}

impl GetFolds {
    /// Whether step `i` is a get that a later reduce performs as part of its pass.
    pub fn folded(&self, i: usize) -> bool {
        self.folded.get(i).copied().unwrap_or(false)
    }

    /// The operands reduce step `i` reads from a peer directly (empty for most steps).
    pub fn pulls(&self, i: usize) -> &[Pull] {
        self.pulls.get(i).map_or(&[], |v| v.as_slice())
    }
}

/// The steps of one channel of this rank: a contiguous range of [`Resolved::steps`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSteps {
    /// The plan's channel number ([`symsched_plan::Step::channel`]).
    pub channel: u32,
    pub steps: std::ops::Range<usize>,
}

/// Steps, buffer sizes and execution schedule of one plan for one set of sizes on this rank.
///
/// **Channels.** The steps are grouped by channel (channel order; plan order within a
/// channel), so every channel's sequence is one contiguous range ([`Resolved::channels`]) and
/// every schedule decision below (`chain`, `get_folds`, `nt`) is made within one channel: a
/// chain or fold never spans two channels. A single-channel rank keeps the plan's order.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The launch sizes this was resolved for (see [`super::resolve::resolve_or_reuse`]);
    /// `None` never matches, so such a resolution is not reused.
    pub(crate) key: Option<Vec<u64>>,
    /// A number no other resolution of this process carries: a launch that reuses this
    /// resolution repeats its key, which the launch agreement then need not compare word by
    /// word (`super::agreement`; the compare was a `memcmp` call, ~30 instructions a launch).
    pub(crate) serial: u64,
    pub steps: Vec<RStep>,
    /// Elements of each buffer on this rank.
    pub my_len: Vec<u64>,
    /// Largest element count of each buffer over all ranks (staging and scratch capacity).
    pub max_len: Vec<u64>,
    /// Per step: how many of the steps right after it run fused into it, block by block
    /// (decided by the reduce-chain pass); 0 for steps that run alone.
    pub chain: Vec<u32>,
    /// Gets run inside the reduce that consumes them (decided by the get-fold pass).
    pub get_folds: GetFolds,
    /// Per step: a plain move whose destination nobody reads, which may stream past the cache
    /// (decided by the streaming pass; the byte threshold is checked when it runs).
    pub nt: Vec<bool>,
    /// The rank's non-empty channels, in channel order (one entry for a single-channel rank,
    /// none for a rank without steps).
    pub channels: Vec<ChannelSteps>,
    /// Per step, the index of its plan step in the rank's step list (the trace's step).
    pub plan_index: Vec<u32>,
}

impl Resolved {
    /// Whether the rank's steps run on more than one channel (then on a worker each).
    #[inline]
    pub fn multi_channel(&self) -> bool {
        self.channels.len() > 1
    }

    /// Where plan step `plan_step` (its index in the rank's step list) sits in [`Self::steps`]:
    /// the same place for a one-channel rank; a multi-channel rank's list is grouped by channel.
    pub fn position_of(&self, plan_step: usize) -> Option<usize> {
        if self
            .plan_index
            .get(plan_step)
            .is_some_and(|&p| p as usize == plan_step)
        {
            return Some(plan_step);
        }
        self.plan_index
            .iter()
            .position(|&p| p as usize == plan_step)
    }
}
