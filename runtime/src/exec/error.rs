//! Typed errors of the plan executor.

use symsched_plan::{Cmp, HostCollOp, PlanError};

/// Everything that can go wrong when executing a plan. Every bad input maps to its own variant so
/// callers (the CLI, the C ABI, the Python layer) can report it precisely.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A peer index is not a member of the group.
    #[error("rank {peer} is outside the group of size {size}")]
    RankOutsideGroup { peer: u32, size: u32 },
    /// A byte range does not fit in the symmetric heap.
    #[error("heap range [{offset}, {offset}+{len}) is past the heap end {heap_len}")]
    OffsetPastHeap {
        offset: u64,
        len: u64,
        heap_len: u64,
    },
    /// A user buffer has the wrong number of bytes for the plan and sizes.
    #[error("buffer `{buffer}` needs {expected} bytes but {found} were given")]
    SizeMismatch {
        buffer: String,
        expected: u64,
        found: u64,
    },
    /// The launch gave the wrong number of role buffers.
    #[error("plan `{schedule}` has {expected} role buffers but {found} were bound")]
    BindingCount {
        schedule: String,
        expected: usize,
        found: usize,
    },
    /// Data and wire types do not go together (e.g. an integer with a float wire).
    #[error("dtype mismatch: {0}")]
    DtypeMismatch(String),
    /// The reduce op (or matmul) is not defined for this dtype.
    #[error("operation `{op}` is not supported for dtype {dtype}")]
    UnsupportedOp { op: String, dtype: String },
    /// An alltoallv plan was launched without the counts matrix.
    #[error(
        "plan `{0}` needs the alltoallv counts matrix (gather it with `Executor::gather_counts`)"
    )]
    MissingCounts(String),
    /// alltoallv counts disagree: `sender` sends `sent` elements to `receiver`, which expects
    /// `expected` (reported alike on every rank of the group).
    #[error(
        "alltoallv counts disagree: rank {sender} sends {sent} elements to rank {receiver}, \
         which expects {expected} from it"
    )]
    CountsMismatch {
        sender: u32,
        receiver: u32,
        sent: u64,
        expected: u64,
    },
    /// The plan was compiled for another group size.
    #[error("plan `{schedule}` was compiled for {plan_size} ranks but the group has {group_size}")]
    GroupSizeMismatch {
        schedule: String,
        plan_size: u32,
        group_size: u32,
    },
    /// An unknown dtype / op name.
    #[error("unknown {what} `{name}`")]
    UnknownName { what: &'static str, name: String },
    /// A wait expired (boxed: the description is large and errors travel by value).
    #[error("{0}")]
    Timeout(Box<WaitTimeout>),
    /// The fabric ran out of signal slots or scratch.
    #[error("out of resources: {0}")]
    Exhausted(String),
    /// Evaluating the plan's extents failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The ranks of a launch disagree on what they launch (sizes, dtypes, op, binding
    /// pattern); reported alike on every rank before anything was written
    /// ([`super::agreement`]).
    #[error(transparent)]
    Disagreement(Box<Disagreement>),
    /// An error of the executor's own machinery (e.g. a rank thread panicked).
    #[error("runtime: {0}")]
    Runtime(String),
    /// An error reported by the multi-process runtime core underneath (timeouts with the peers
    /// that never signalled, dead peers, exhausted pads, …).
    #[error(transparent)]
    Core(Box<crate::error::RuntimeError>),
    /// A `HostColl` step failed in the framework's collective library (boxed: see
    /// [`HostCollFailure`]).
    #[error("{0}")]
    HostColl(Box<HostCollFailure>),
    /// The JIT backend could not make a kernel for the launch (boxed: see
    /// [`JitFailure`]).
    #[error(transparent)]
    Jit(Box<JitFailure>),
    /// A channel of a multi-channel launch stopped because another channel of the same rank
    /// failed (the launch reports that channel's own error; see [`super::cancel`]).
    #[error("rank {rank}: channel {channel} cancelled: the launch was cancelled because channel {failed} failed")]
    ChannelCancelled {
        rank: u32,
        channel: u32,
        failed: u32,
    },
}

impl From<symsched_plan::UnknownName> for ExecError {
    fn from(e: symsched_plan::UnknownName) -> Self {
        ExecError::UnknownName {
            what: e.what,
            name: e.name,
        }
    }
}

impl From<crate::error::RuntimeError> for ExecError {
    fn from(e: crate::error::RuntimeError) -> Self {
        ExecError::Core(Box::new(e))
    }
}

/// A rank whose launch signature differs from another rank's (see [`super::agreement`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the ranks of group {group} disagree on launch of `{schedule}`: {}{detail}. Every rank must \
     make the same call with the same element counts, dtype, op and tensor kinds (all symmetric \
     at the same offset, or all ordinary); nothing was written",
    .per_rank.join("; ")
)]
pub struct Disagreement {
    pub schedule: String,
    pub group: String,
    /// What each group rank launched, in rank order (`"rank 0: 100 elements f32 sum"`).
    pub per_rank: Vec<String>,
    /// When only the binding differs: which buffer, and the rule (empty otherwise).
    pub detail: String,
}

/// A `HostColl` step the framework's collective library failed (an exception in the framework,
/// its own timeout, a peer that left): which collective, over which ranks, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "host collective {op:?} of `{key}` (#{ordinal}) over global ranks {members:?} failed in {library}: {reason}"
)]
pub struct HostCollFailure {
    pub op: HostCollOp,
    /// The library that ran it (e.g. `gloo`, `mccl`).
    pub library: String,
    /// Global ranks of the members.
    pub members: Vec<usize>,
    pub key: String,
    pub ordinal: u32,
    /// What the library reported (for Python: the exception's type and message).
    pub reason: String,
}

impl From<HostCollFailure> for ExecError {
    fn from(e: HostCollFailure) -> Self {
        ExecError::HostColl(Box::new(e))
    }
}

/// Everything known about an expired wait.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "rank {rank} of group {group}: timed out after {timeout_ms} ms in schedule `{schedule}` \
     step {step} waiting for signal `{slot}` {cmp:?} {expected} (observed {observed}); \
     peers that signal this slot: {signallers:?}"
)]
pub struct WaitTimeout {
    pub rank: u32,
    pub group: String,
    pub schedule: String,
    pub step: u32,
    pub slot: String,
    pub cmp: Cmp,
    pub expected: u64,
    pub observed: u64,
    pub timeout_ms: u64,
    pub signallers: Vec<u32>,
}

/// Why the JIT could not make a kernel ([`ExecError::Jit`]). The status of the C ABI is
/// `Unavailable` for every case: the JIT cannot run this launch here, the interpreter can.
#[derive(Debug, thiserror::Error)]
pub enum JitFailure {
    /// The kernel cache of a compile configuration could not be set up (e.g. no LLVM target
    /// for the host CPU).
    #[error("jit: {error}")]
    Setup { error: symsched_jit::JitError },
    /// Lowering, optimising, generating code for or caching the kernel of one (schedule, rank)
    /// failed.
    #[error("jit: cannot compile schedule `{schedule}` for rank {rank}: {error}")]
    Compile {
        schedule: String,
        rank: u32,
        error: symsched_jit::JitError,
    },
}

impl From<JitFailure> for ExecError {
    fn from(f: JitFailure) -> Self {
        ExecError::Jit(Box::new(f))
    }
}
