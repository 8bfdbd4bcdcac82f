//! The symsched plan: a verified schedule instantiated for one group size, as per-rank ordered
//! step lists. This crate is the contract between the compiler (which emits plans), the host
//! runtime (which interprets them) and the Ascend C lowering (which turns them into kernels).
//!
//! Everything here is plain data with serde derives; the JSON form is versioned by
//! [`PLAN_SCHEMA_VERSION`] and documented in `docs/plan-schema.md`.
//!
//! Vocabulary:
//! - a **buffer** is symmetric: every rank of the group has its own copy at the same offset;
//!   it is split into `chunks` chunks whose element extents are symbolic in the launch's size
//!   variables (see [`Extent`]);
//! - a **region** is a contiguous range of chunks of one buffer on one rank;
//! - a **signal slot** is a 64-bit counter on its own 64-byte line, one per (group instance,
//!   plan, slot); counters only grow, so waits are relative to the launch epoch (see [`WaitTarget`]).
//!
//! ```
//! use symsched_plan::{SizeExpr, Bindings};
//! let e = SizeExpr::var("n").scaled(4);
//! let mut b = Bindings::default();
//! b.insert("n".into(), 10);
//! assert_eq!(e.eval(&b).unwrap(), 40);
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod access;
mod declared;
mod dtype;
mod extent;
mod fold;
mod reduce_op;
pub use access::{Accesses, Owner, RegionAccess};
pub use declared::{BlockRef, DeclaredCollective, DeclaredRole, PostBlock};
pub use dtype::{DType, UnknownName};
pub use extent::*;
pub use fold::*;
pub use reduce_op::ReduceOp;

/// Version of the JSON plan schema. Bump on any incompatible change; runtimes refuse plans whose
/// major version differs from theirs.
/// Version 2 added [`RankProgram::entry_signals`] (a version-1 executor would never send them,
/// and the waits on them would time out). Version 3 added [`Step::channel`] (a version-2
/// executor would run a rank's channels as one sequence, where a wait of one channel for another
/// channel's later signal never returns).
pub const PLAN_SCHEMA_VERSION: u32 = 3;

/// How many channels one rank's steps may be split into ([`Step::channel`] is below it). On the
/// device a channel is an AI core of the kernel's launch (`blockDim`); on the host, a worker.
pub const MAX_CHANNELS: u32 = 8;

/// Bytes reserved for one signal slot: one counter per cache line, so hot signals never share one.
pub const SIGNAL_LINE_BYTES: u32 = 64;

/// A schedule instantiated for one group size (and one binding of its integer parameters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub schema_version: u32,
    /// Schedule name as written in the source.
    pub schedule: String,
    /// The collective the verifier proved this plan implements.
    pub collective: CollectiveKind,
    /// Group size P the plan was instantiated for.
    pub group_size: u32,
    /// Integer parameters bound at instantiation (e.g. `root`, `src`, `dst`, `L`).
    pub params: BTreeMap<String, i64>,
    /// Set for hierarchical schedules: shmem traffic stays inside blocks of `ranks_per_node`
    /// consecutive ranks; traffic across blocks goes through `HostColl` steps only.
    pub hierarchy: Option<Hierarchy>,
    /// Symbolic size variables the extents use, with their meaning (e.g. `n`: elements per rank).
    pub size_vars: Vec<SizeVar>,
    /// Buffers, indexed by [`BufferId`]. Role buffers come first in signature order.
    pub buffers: Vec<BufferDecl>,
    /// Signal slots, indexed by [`SlotId`].
    pub signals: Vec<SignalSlot>,
    /// One program per rank, `ranks[r].rank == r`.
    pub ranks: Vec<RankProgram>,
    /// Backward forms declared by the schedule and proved by the verifier.
    pub duals: Vec<DualDecl>,
    /// Hex digest of the source text the plan was compiled from (for caches and diagnostics).
    pub source_hash: String,
    /// How every reduced output chunk is computed, as the verifier proved it (the order a
    /// checking reference follows). Empty for collectives that do not reduce; older plans
    /// without it read as empty.
    #[serde(default, skip_serializing_if = "FoldTable::is_empty")]
    pub folds: FoldTable,
    /// The chunk map of a collective the source declares (`collective NAME(…) { … }`), set
    /// exactly when [`Plan::collective`] is [`CollectiveKind::Declared`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<DeclaredCollective>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    Allgather,
    ReduceScatter,
    Allreduce,
    Alltoall,
    Alltoallv,
    Broadcast,
    /// Reduce to `root`; non-root buffers are left unspecified.
    Reduce,
    /// Point-to-point: `src` sends its buffer to `dst` (params `src`, `dst`).
    Sendrecv,
    AllgatherMatmul,
    MatmulReduceScatter,
    /// A collective the source declares by its chunk map ([`Plan::declared`]); `reduces` when
    /// some output block combines several input blocks.
    Declared {
        reduces: bool,
    },
}

impl CollectiveKind {
    /// The built-in collectives.
    pub const ALL: [CollectiveKind; 10] = [
        CollectiveKind::Allgather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::Allreduce,
        CollectiveKind::Alltoall,
        CollectiveKind::Alltoallv,
        CollectiveKind::Broadcast,
        CollectiveKind::Reduce,
        CollectiveKind::Sendrecv,
        CollectiveKind::AllgatherMatmul,
        CollectiveKind::MatmulReduceScatter,
    ];

    /// The name used in `.sched` sources (`implements allgather(...)`).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::Allgather => "allgather",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::Allreduce => "allreduce",
            CollectiveKind::Alltoall => "alltoall",
            CollectiveKind::Alltoallv => "alltoallv",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Sendrecv => "sendrecv",
            CollectiveKind::AllgatherMatmul => "allgather_matmul",
            CollectiveKind::MatmulReduceScatter => "matmul_reduce_scatter",
            CollectiveKind::Declared { .. } => "declared",
        }
    }

    /// A built-in collective by its source name (declared ones are looked up in the source).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether the collective combines values with the launch's reduce op.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            CollectiveKind::ReduceScatter
                | CollectiveKind::Allreduce
                | CollectiveKind::Reduce
                | CollectiveKind::MatmulReduceScatter
                | CollectiveKind::Declared { reduces: true }
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    pub ranks_per_node: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeVar {
    pub name: String,
    pub meaning: String,
}

/// Index into [`Plan::buffers`].
pub type BufferId = u32;
/// Index into [`Plan::signals`].
pub type SlotId = u32;
/// Group-local rank.
pub type Rank = u32;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BufferDecl {
    pub name: String,
    pub role: BufferRole,
    pub chunks: u32,
    pub extent: Extent,
    pub elem: ElemClass,
}

/// How a buffer is bound at launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferRole {
    /// A role of the collective's signature that is only read (e.g. allgather `in`).
    Input,
    /// A role that is only written (e.g. allgather `out`).
    Output,
    /// A role read and written in place (e.g. allreduce `x`).
    InOut,
    /// Schedule-private symmetric scratch, allocated by the runtime per (group, plan, sizes).
    Scratch,
}

/// Element type class of a buffer; the concrete dtypes are launch parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElemClass {
    /// The user's dtype.
    Data,
    /// The wire dtype (low-precision transport); equals the data dtype when none is chosen.
    Wire,
    /// The accumulator dtype (f32 for 16-bit and 8-bit floats, else the data dtype).
    Acc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalSlot {
    /// Source name, with the index for signal arrays: `ready[2]`.
    pub name: String,
    /// How updates to this slot change it; a slot is either set or added to, never both.
    pub mode: SignalMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalMode {
    Add,
    Set,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankProgram {
    pub rank: Rank,
    pub steps: Vec<Step>,
    /// Signal updates the executor sends when the rank *enters* a launch: before the first step
    /// and after staged inputs were copied in. They are the entry credits that let a peer write
    /// into this rank's role buffers (see "Entry rule" in `docs/plan-schema.md`).
    #[serde(default)]
    pub entry_signals: Vec<SignalUpdate>,
    /// Signal updates the executor sends after the last step *and* after copying staged outputs
    /// out: the launch credits that let peers start their next launch (see `docs/plan-schema.md`).
    #[serde(default)]
    pub exit_signals: Vec<SignalUpdate>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Stable id of the step within the plan (the IR node index).
    pub id: u32,
    /// Byte range of the statement in the schedule source, for diagnostics.
    pub span: (u32, u32),
    pub op: Op,
    /// The channel of its rank that runs the step (below [`MAX_CHANNELS`]). A rank's channels
    /// run concurrently, each its own steps in order; they order against each other only
    /// through signals, like ranks. Plans without channels have every step on channel 0, and
    /// the field is left out of their JSON.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub channel: u32,
}

fn is_zero(c: &u32) -> bool {
    *c == 0
}

impl RankProgram {
    /// How many channels the rank's steps use (1 for a rank without steps).
    pub fn channel_count(&self) -> u32 {
        self.steps.iter().map(|s| s.channel + 1).max().unwrap_or(1)
    }
}

impl Plan {
    /// The most channels any rank uses (1 for a plan without channels).
    pub fn channel_count(&self) -> u32 {
        self.ranks
            .iter()
            .map(RankProgram::channel_count)
            .max()
            .unwrap_or(1)
    }
}

/// A contiguous range of chunks of one buffer, on the rank that executes the step unless the
/// op says otherwise (`Put::dst` and `Get::src` live on `peer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Region {
    pub buffer: BufferId,
    pub first: u32,
    pub count: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    /// CANN / OpenSHMEM numbering: EQ=0, NE=1, GT=2, GE=3, LT=4, LE=5.
    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn holds(self, observed: u64, target: u64) -> bool {
        match self {
            Cmp::Eq => observed == target,
            Cmp::Ne => observed != target,
            Cmp::Gt => observed > target,
            Cmp::Ge => observed >= target,
            Cmp::Lt => observed < target,
            Cmp::Le => observed <= target,
        }
    }
}

/// The value a wait compares against in launch `epoch` (0 for the first launch of this plan on
/// this group instance): `epoch * stride + offset`. `stride` is the total amount added to the slot
/// on the waiting rank by one launch (for `Add` slots) or the set-value period (for `Set` slots),
/// so counters never need a reset between back-to-back launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitTarget {
    pub stride: u64,
    pub offset: u64,
}

impl WaitTarget {
    pub fn at(self, epoch: u64) -> u64 {
        epoch.wrapping_mul(self.stride).wrapping_add(self.offset)
    }
}

/// A signal update delivered to `peer`'s copy of `slot`. For `Set` slots the value written is
/// `epoch * stride + value`; for `Add` slots `value` is added and `stride` is unused (0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalUpdate {
    pub slot: SlotId,
    pub peer: Rank,
    pub mode: SignalMode,
    pub value: u64,
    pub stride: u64,
}

impl SignalUpdate {
    pub fn value_at(self, epoch: u64) -> u64 {
        match self.mode {
            SignalMode::Add => self.value,
            SignalMode::Set => epoch.wrapping_mul(self.stride).wrapping_add(self.value),
        }
    }
}

/// Framework collectives a `HostColl` step may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostCollOp {
    Allreduce,
    Allgather,
    ReduceScatter,
    Broadcast,
}

/// One step of one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// Copy local `src` into `peer`'s `dst`; with `signal`, the data is visible at the peer before
    /// the signal update is (put_with_signal). When `src` and `dst` element classes differ the
    /// data is converted on the way (round to nearest even).
    Put {
        src: Region,
        dst: Region,
        peer: Rank,
        signal: Option<SignalUpdate>,
    },
    /// Copy `peer`'s `src` into local `dst`.
    Get {
        src: Region,
        dst: Region,
        peer: Rank,
    },
    /// Update a signal slot on `update.peer`.
    Signal { update: SignalUpdate },
    /// Block until the local `slot` compares true against the epoch-relative target.
    Wait {
        slot: SlotId,
        cmp: Cmp,
        target: WaitTarget,
    },
    /// `dst = srcs[0] ⊕ srcs[1] ⊕ …` folded left to right with the launch's reduce op, in the
    /// accumulator dtype, then rounded once into `dst`. All regions are local and have the same
    /// extent; `dst` may also appear among `srcs`.
    Reduce { dst: Region, srcs: Vec<Region> },
    /// Local copy.
    Copy { src: Region, dst: Region },
    /// Local copy with conversion between element classes (round to nearest even).
    Cast { src: Region, dst: Region },
    /// `c = a × b` for one block: `a` is m×k, `b` is k×n, `c` is m×n, row-major; dims are the size
    /// variables `m`, `k`, `n` of the launch.
    Matmul { c: Region, a: Region, b: Region },
    /// A collective done by the framework's own library over `members` (group-local ranks, this
    /// rank included) on the local `region`.
    HostColl {
        op: HostCollOp,
        region: Region,
        members: Vec<Rank>,
    },
}

/// A backward form the schedule declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DualDecl {
    /// The adjoint is the named schedule, with its params bound as given.
    Schedule {
        name: String,
        params: BTreeMap<String, i64>,
    },
    /// Identity backward, valid only when the downstream computation is replicated (Megatron g).
    IdentityAssumingReplicated,
}

/// Errors from reading or checking a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("plan JSON is malformed: {0}")]
    Json(#[from] serde_json::Error),
    #[error("plan schema version {found} is not supported (this build reads version {expected})")]
    Version { found: u32, expected: u32 },
    #[error("plan is inconsistent: {0}")]
    Inconsistent(String),
    #[error("size variable `{0}` has no value at launch")]
    UnboundSize(String),
    #[error("size expression overflows for the given sizes")]
    SizeOverflow,
}

impl Plan {
    /// Parse and version-check a JSON plan, then check its internal references.
    pub fn from_json(text: &str) -> Result<Plan, PlanError> {
        #[derive(Deserialize)]
        struct VersionOnly {
            schema_version: u32,
        }
        let v: VersionOnly = serde_json::from_str(text)?;
        if v.schema_version != PLAN_SCHEMA_VERSION {
            return Err(PlanError::Version {
                found: v.schema_version,
                expected: PLAN_SCHEMA_VERSION,
            });
        }
        let plan: Plan = serde_json::from_str(text)?;
        plan.check_consistency()?;
        Ok(plan)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plan types serialize infallibly")
    }

    /// A declared collective's map comes with its kind and names only role blocks that exist,
    /// so a reference can index by it.
    fn check_declared(&self) -> Result<(), String> {
        let d = match (&self.declared, self.collective) {
            (None, CollectiveKind::Declared { .. }) => {
                return Err("a declared collective without its chunk map".into())
            }
            (None, _) => return Ok(()),
            (Some(d), CollectiveKind::Declared { reduces }) if reduces == d.reduces() => d,
            (Some(_), _) => {
                return Err("a chunk map that disagrees with the plan's collective".into())
            }
        };
        let ok = |b: &BlockRef| {
            b.rank < self.group_size
                && d.roles
                    .get(b.role as usize)
                    .is_some_and(|r| b.block < r.blocks)
                && self
                    .buffers
                    .get(b.role as usize)
                    .is_some_and(|x| x.role != BufferRole::Scratch)
        };
        let sorted = d
            .post
            .windows(2)
            .all(|w| DeclaredCollective::order(&w[0].at) < DeclaredCollective::order(&w[1].at));
        match d
            .post
            .iter()
            .find(|b| !ok(&b.at) || b.sources.is_empty() || !b.sources.iter().all(ok))
        {
            Some(b) => Err(format!(
                "declared block {} of role {} on rank {} names a block that does not exist",
                b.at.block, b.at.role, b.at.rank
            )),
            None if !sorted => Err("declared chunk map not sorted".into()),
            None => Ok(()),
        }
    }

    /// Checks every id and rank the steps use, so executors can index without further checks.
    pub fn check_consistency(&self) -> Result<(), PlanError> {
        let bad = |m: String| Err(PlanError::Inconsistent(m));
        if self.ranks.len() != self.group_size as usize {
            return bad(format!(
                "{} rank programs for group size {}",
                self.ranks.len(),
                self.group_size
            ));
        }
        self.folds.check().map_err(PlanError::Inconsistent)?;
        self.check_declared().map_err(PlanError::Inconsistent)?;
        for b in &self.buffers {
            if let Extent::Blocks { blocks, .. } = &b.extent {
                if *blocks == 0 || b.chunks % blocks != 0 {
                    return bad(format!(
                        "buffer `{}` has {} chunk(s), not a whole number per each of its {blocks} block(s)",
                        b.name, b.chunks
                    ));
                }
            }
        }
        let chunk_ok = |rank: u32, buffer: u32, chunk: u32| {
            rank < self.group_size
                && self
                    .buffers
                    .get(buffer as usize)
                    .is_some_and(|b| b.role != BufferRole::Scratch && chunk < b.chunks)
        };
        for n in &self.folds.nodes {
            if let FoldNode::Input {
                rank,
                buffer,
                chunk,
            } = n
            {
                if !chunk_ok(*rank, *buffer, *chunk) {
                    return bad(format!(
                        "fold input chunk {chunk} of buffer {buffer} on rank {rank} does not exist"
                    ));
                }
            }
        }
        if let Some(o) = self
            .folds
            .outputs
            .iter()
            .find(|o| !chunk_ok(o.rank, o.buffer, o.chunk))
        {
            return bad(format!(
                "fold output chunk {} of buffer {} on rank {} does not exist",
                o.chunk, o.buffer, o.rank
            ));
        }
        for (r, prog) in self.ranks.iter().enumerate() {
            if prog.rank as usize != r {
                return bad(format!("rank program {r} is labelled {}", prog.rank));
            }
            for step in &prog.steps {
                self.check_step(step)?;
            }
            for (i, u) in prog
                .entry_signals
                .iter()
                .chain(&prog.exit_signals)
                .enumerate()
            {
                let probe = Step {
                    id: u32::MAX - i as u32,
                    span: (0, 0),
                    op: Op::Signal { update: *u },
                    channel: 0,
                };
                self.check_step(&probe)?;
            }
        }
        Ok(())
    }

    fn check_step(&self, step: &Step) -> Result<(), PlanError> {
        if step.channel >= MAX_CHANNELS {
            return Err(PlanError::Inconsistent(format!(
                "step {} runs on channel {} (channels are 0..{MAX_CHANNELS})",
                step.id, step.channel
            )));
        }
        let region = |reg: &Region| -> Result<(), PlanError> {
            let Some(b) = self.buffers.get(reg.buffer as usize) else {
                return Err(PlanError::Inconsistent(format!(
                    "step {} names buffer {} of {}",
                    step.id,
                    reg.buffer,
                    self.buffers.len()
                )));
            };
            if reg
                .first
                .checked_add(reg.count)
                .is_none_or(|end| end > b.chunks)
            {
                return Err(PlanError::Inconsistent(format!(
                    "step {} reads chunks {}..{} of `{}` which has {}",
                    step.id,
                    reg.first,
                    reg.first as u64 + reg.count as u64,
                    b.name,
                    b.chunks
                )));
            }
            Ok(())
        };
        let rank = |r: Rank| -> Result<(), PlanError> {
            if r >= self.group_size {
                return Err(PlanError::Inconsistent(format!(
                    "step {} names rank {r} in a group of {}",
                    step.id, self.group_size
                )));
            }
            Ok(())
        };
        let slot = |s: SlotId| -> Result<(), PlanError> {
            if s as usize >= self.signals.len() {
                return Err(PlanError::Inconsistent(format!(
                    "step {} names signal slot {s} of {}",
                    step.id,
                    self.signals.len()
                )));
            }
            Ok(())
        };
        match &step.op {
            Op::Put {
                src,
                dst,
                peer,
                signal,
            } => {
                region(src)?;
                region(dst)?;
                rank(*peer)?;
                if let Some(u) = signal {
                    slot(u.slot)?;
                    rank(u.peer)?;
                }
            }
            Op::Get { src, dst, peer } => {
                region(src)?;
                region(dst)?;
                rank(*peer)?;
            }
            Op::Signal { update } => {
                slot(update.slot)?;
                rank(update.peer)?;
            }
            Op::Wait { slot: s, .. } => slot(*s)?,
            Op::Reduce { dst, srcs } => {
                region(dst)?;
                for s in srcs {
                    region(s)?;
                }
            }
            Op::Copy { src, dst } | Op::Cast { src, dst } => {
                region(src)?;
                region(dst)?;
            }
            Op::Matmul { c, a, b } => {
                region(c)?;
                region(a)?;
                region(b)?;
            }
            Op::HostColl {
                region: reg,
                members,
                ..
            } => {
                region(reg)?;
                for m in members {
                    rank(*m)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_mismatch_is_a_typed_error() {
        let text = r#"{"schema_version": 99}"#;
        match Plan::from_json(text) {
            Err(PlanError::Version { found: 99, .. }) => {}
            other => panic!("expected version error, got {other:?}"),
        }
    }

    #[test]
    fn cmp_codes_follow_cann_numbering() {
        let codes: Vec<u32> = [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le]
            .iter()
            .map(|c| c.code())
            .collect();
        assert_eq!(codes, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn epoch_relative_targets() {
        let t = WaitTarget {
            stride: 3,
            offset: 3,
        };
        assert_eq!(t.at(0), 3);
        assert_eq!(t.at(2), 9);
    }
}
