//! Typed errors of the host runtime core (heap, bootstrap, groups, signals, primitives).

use std::fmt;

use symsched_plan::Cmp;

/// Where a wait happened, for error messages: which schedule and step was waiting and on which
/// named signal. The executor fills it from the plan; direct primitive users may use
/// [`WaitContext::default`].
#[derive(Debug, Clone, Default)]
pub struct WaitContext {
    /// Schedule (plan) name, e.g. `ring_allreduce`.
    pub schedule: String,
    /// Step description (id and/or source text) within the schedule.
    pub step: String,
    /// Source name of the signal, e.g. `ready[2]`.
    pub signal: String,
    /// Group-local ranks expected to update this slot; when empty, every other member is assumed.
    pub expected_from: Vec<usize>,
    /// For ADD slots: how much each rank of `expected_from` adds per launch (same order); when
    /// empty, every expected rank is assumed to add the same amount. Only used to say whose
    /// update is missing when the wait times out.
    pub weights: Vec<u64>,
}

impl WaitContext {
    /// A context naming a schedule, a step and a signal.
    pub fn new(
        schedule: impl Into<String>,
        step: impl Into<String>,
        signal: impl Into<String>,
    ) -> Self {
        WaitContext {
            schedule: schedule.into(),
            step: step.into(),
            signal: signal.into(),
            expected_from: Vec::new(),
            weights: Vec::new(),
        }
    }

    /// Restricts "who should have signalled" to these group-local ranks.
    pub fn expecting(mut self, peers: impl IntoIterator<Item = usize>) -> Self {
        self.expected_from = peers.into_iter().collect();
        self.weights.clear();
        self
    }

    /// Like [`WaitContext::expecting`] with the amount each rank adds to the (ADD) slot per
    /// launch, so a timeout can tell exactly who is behind when the amounts differ.
    ///
    /// ```
    /// # use symsched_runtime::WaitContext;
    /// // Rank 1 adds 2 per launch (two chunks), rank 2 adds 1.
    /// let c = WaitContext::new("s", "step 4", "ready[0]").expecting_weighted([(1, 2), (2, 1)]);
    /// assert_eq!(c.expected_from, [1, 2]);
    /// ```
    pub fn expecting_weighted(mut self, peers: impl IntoIterator<Item = (usize, u64)>) -> Self {
        let (r, w): (Vec<usize>, Vec<u64>) = peers.into_iter().unzip();
        self.expected_from = r;
        self.weights = w;
        self
    }
}

/// A list of ranks rendered as `[0, 3]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankList(pub Vec<usize>);

impl fmt::Display for RankList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Everything the runtime core can report. Every bad input maps to its own variant.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A required environment variable is missing or malformed.
    #[error("environment variable {var}: {reason}")]
    Env { var: &'static str, reason: String },
    /// The runtime cannot work on this host (see [`crate::is_available`]).
    #[error("symmetric memory is not available: {0}")]
    Unavailable(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Bootstrap did not complete in time.
    #[error(
        "rank {rank}: rendezvous step `{step}` timed out after {timeout_ms} ms in {dir}; \
         missing ranks {missing}"
    )]
    RendezvousTimeout {
        rank: usize,
        step: String,
        dir: String,
        timeout_ms: u64,
        missing: RankList,
    },
    /// Bootstrap data from a peer was inconsistent (world size, heap size, protocol).
    #[error("rank {rank}: rendezvous protocol error: {reason}")]
    Rendezvous { rank: usize, reason: String },
    /// A heap allocation did not fit.
    #[error("rank {rank}: out of symmetric memory: requested {requested} bytes, {free} free (largest block {largest})")]
    OutOfMemory {
        rank: usize,
        requested: u64,
        free: u64,
        largest: u64,
    },
    /// `free` of an offset that is not the start of a live allocation.
    #[error("rank {rank}: free of offset {offset} which is not a live allocation")]
    InvalidFree { rank: usize, offset: u64 },
    /// An alignment that is zero or not a power of two.
    #[error("alignment {0} is not a power of two")]
    BadAlignment(u64),
    /// Ranks made different allocation calls: offsets no longer agree.
    #[error(
        "ALLOCATION MISMATCH at {point}: rank {rank} made {ops} heap ops (hash {hash:#018x}) but \
         rank {peer} made {peer_ops} (hash {peer_hash:#018x}); every rank must make the same \
         malloc/free calls with the same sizes in the same order{detail}"
    )]
    AllocMismatch {
        point: String,
        rank: usize,
        peer: usize,
        ops: u64,
        hash: u64,
        peer_ops: u64,
        peer_hash: u64,
        detail: String,
    },
    /// A group-local rank is not in `0..size`.
    #[error("rank {peer} is outside the group of size {size}")]
    RankOutsideGroup { peer: usize, size: usize },
    /// A global rank is not in `0..world_size`.
    #[error("global rank {rank} is outside the world of size {world}")]
    RankOutsideWorld { rank: usize, world: usize },
    /// The calling rank is not a member of the group it asked for.
    #[error("rank {rank} is not a member of group {members}")]
    NotAMember { rank: usize, members: RankList },
    /// A group lists a rank twice, or is empty.
    #[error("invalid group {members}: {reason}")]
    InvalidGroup { members: RankList, reason: String },
    /// Members of a non-hierarchical group live on different nodes.
    #[error(
        "group {members} spans nodes ({nodes}); symmetric memory is intra-node: use a \
         hierarchical schedule for cross-node groups"
    )]
    CrossNode { members: RankList, nodes: String },
    /// A peer exists but is on another node, so its heap is not mapped here.
    #[error("group-local rank {peer} (global {global}) is on another node and not reachable through shared memory")]
    PeerUnreachable { peer: usize, global: usize },
    /// A byte range does not fit in the heap.
    #[error("heap range [{offset}, {offset}+{len}) is past the heap end {heap_len}")]
    OffsetPastHeap {
        offset: u64,
        len: u64,
        heap_len: u64,
    },
    /// A byte range is inside the runtime's reserved area (header, signal pads).
    #[error("heap range [{offset}, {offset}+{len}) overlaps the reserved runtime area below {user_base}")]
    ReservedRange {
        offset: u64,
        len: u64,
        user_base: u64,
    },
    /// Source and destination sizes differ.
    #[error("size mismatch: {what}: expected {expected} bytes, got {found}")]
    SizeMismatch {
        what: String,
        expected: u64,
        found: u64,
    },
    /// A signal slot is outside the range the group owns.
    #[error("signal slot {slot} is outside the group's {count} slots")]
    SlotOutOfRange { slot: usize, count: usize },
    /// The group's signal pad has no room left.
    #[error(
        "group {group}: signal pad exhausted: key `{key}` asked for {requested} slots, {free} left"
    )]
    SignalPadExhausted {
        group: String,
        key: String,
        requested: usize,
        free: usize,
    },
    /// The group's scratch arena has no room left.
    #[error("group {group}: scratch arena exhausted: key `{key}` asked for {requested} bytes, {free} left (raise SYMSCHED_SCRATCH_SIZE)")]
    ScratchExhausted {
        group: String,
        key: String,
        requested: u64,
        free: u64,
    },
    /// No free signal pad for a new group.
    #[error("too many groups: all {0} signal pads are in use")]
    TooManyGroups(usize),
    /// A cached per-key entry was asked again with an incompatible shape.
    #[error("group {group}: key `{key}` was first used with {first} but now with {now}")]
    KeyConflict {
        group: String,
        key: String,
        first: String,
        now: String,
    },
    /// Group members registered different signal slots (keys, counts or order).
    #[error(
        "SIGNAL SLOT MISMATCH in group {group}: rank {rank} registered slots with hash {hash:#018x} \
         but rank {peer} has {peer_hash:#018x}; every member must call signal_slots with the same \
         keys and counts in the same order"
    )]
    SlotMismatch {
        group: String,
        rank: usize,
        peer: usize,
        hash: u64,
        peer_hash: u64,
    },
    /// A wait hit its deadline (boxed: the context is large and errors are cold).
    #[error(transparent)]
    SignalTimeout(Box<SignalTimeoutError>),
    /// A peer process exited while this rank depended on it.
    #[error(transparent)]
    PeerDied(Box<PeerDiedError>),
    /// A member marked the group aborted ([`crate::Group::abort`]); the group refuses every
    /// wait until [`crate::Group::reset_after_abort`].
    #[error(transparent)]
    GroupAborted(Box<GroupAbortedError>),
    /// [`crate::Group::reset_after_abort`] did not complete: some members did not take part in
    /// time. The group stays aborted for good.
    #[error(
        "rank {rank} (group {group}): reset_after_abort timed out after {timeout_ms} ms while \
         {phase}; members that did not get there: {missing}; the group cannot be used again"
    )]
    ResetTimeout {
        rank: usize,
        group: String,
        phase: &'static str,
        timeout_ms: u64,
        missing: RankList,
    },
    /// The plan was produced by an incompatible compiler.
    #[error("plan schema version {found} is not supported by this runtime (expects {expected})")]
    PlanVersion { found: u32, expected: u32 },
    /// An argument was invalid in a way not covered above (null pointer, bad UTF-8, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl RuntimeError {
    /// Wraps the current `errno` with a description of what was attempted.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        RuntimeError::Os {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// Wraps an I/O error with a description of what was attempted.
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        RuntimeError::Os {
            what: what.into(),
            source,
        }
    }
}

/// Details of a signal-wait timeout.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "rank {rank} (group {group}, local rank {local_rank}): signal wait timed out after \
     {timeout_ms} ms in schedule `{schedule}` step `{step}` on signal `{signal}` (slot {slot}): \
     expected {cmp:?} {expected}, observed {observed}; peers that never signalled: \
     {missing}{detail}"
)]
pub struct SignalTimeoutError {
    /// Global rank of the waiter.
    pub rank: usize,
    /// Group-local rank of the waiter.
    pub local_rank: usize,
    /// Group name (member list).
    pub group: String,
    /// Schedule being executed.
    pub schedule: String,
    /// Step that waited.
    pub step: String,
    /// Signal name.
    pub signal: String,
    /// Slot index.
    pub slot: usize,
    /// Comparison.
    pub cmp: Cmp,
    /// Target value.
    pub expected: u64,
    /// Last observed value.
    pub observed: u64,
    /// Group-local ranks whose update this wait still lacks: for an ADD slot those that added
    /// less than their share of the target, for a SET slot those whose last value does not
    /// satisfy the comparison (from the line's per-sender tallies, over all launches).
    pub missing: RankList,
    /// Per-sender accounting behind `missing`, e.g. `; per sender: rank 1 (local 1) added 4 of
    /// 4, rank 2 (local 2) added 3 of 4`.
    pub detail: String,
    /// The deadline that expired.
    pub timeout_ms: u64,
}

/// Details of an aborted group, as seen by the member that noticed.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "rank {rank} (group {group}): group aborted by rank {by_rank}: {message}{also}; noticed \
     {noticed}; every member must call reset_after_abort() before using the group again"
)]
pub struct GroupAbortedError {
    /// Global rank that noticed.
    pub rank: usize,
    /// Group name.
    pub group: String,
    /// Global rank that aborted the group (the first in group order, if several did).
    pub by_rank: usize,
    /// Its group-local rank.
    pub by_local: usize,
    /// The error text it recorded (at most [`crate::abort::MESSAGE_BYTES`] bytes).
    pub message: String,
    /// Other members that aborted too, e.g. `; ranks [3] aborted too`.
    pub also: String,
    /// Where this rank noticed, e.g. `while waiting in schedule `x` step `3` on signal `s``.
    pub noticed: String,
}

/// Details of a dead peer.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "rank {rank} (group {group}): peer rank {peer} (pid {pid}) died while waiting in \
     schedule `{schedule}` step `{step}` on signal `{signal}`"
)]
pub struct PeerDiedError {
    /// Global rank that noticed.
    pub rank: usize,
    /// Group (or rendezvous step) it was in.
    pub group: String,
    /// Global rank of the dead peer.
    pub peer: usize,
    /// Its pid.
    pub pid: i32,
    /// Schedule being executed.
    pub schedule: String,
    /// Step that waited.
    pub step: String,
    /// Signal name.
    pub signal: String,
}
