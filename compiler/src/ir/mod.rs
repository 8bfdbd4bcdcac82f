//! The dataflow IR: one schedule instantiated for a concrete group size P.
//!
//! The canonical state is [`Program::ranks`], each rank's steps in program order. The petgraph
//! view ([`graph::build`]) is derived from it: nodes are steps, edges are program order,
//! signal→wait synchronisation and data dependencies. Stages that edit steps (the optimiser, the
//! "delete one wait" property test) edit the rank lists and rebuild the graph.
//!
//! Steps reuse the plan's [`Op`] vocabulary, so the plan back end is a projection, not a
//! translation. Wait targets in the IR hold the per-launch value in `offset`; the epoch
//! `stride` is filled by [`Program::assign_epoch_strides`] after instantiation.

use crate::diag::Span;
use std::collections::BTreeMap;
use std::fmt;
use symsched_plan::{
    BufferDecl, CollectiveKind, DualDecl, Hierarchy, Op, Rank, Region, SignalMode, SignalSlot,
    SizeVar,
};

/// Prefix of the internal credit slots ([`credits`] names them, [`graph`] tells them apart);
/// tools that reason about user-written waits skip them.
pub const CREDIT_SLOT_PREFIX: &str = "__credit";

pub mod chains;
pub mod credits;
pub mod declared;
mod eval;
pub mod graph;
pub mod instantiate;
pub mod limits;
pub mod transpose;

/// A schedule instantiated for one group size and one binding of its parameters.
#[derive(Debug, Clone)]
pub struct Program {
    pub schedule: String,
    pub collective: CollectiveKind,
    pub group_size: u32,
    pub params: BTreeMap<String, i64>,
    pub hierarchy: Option<Hierarchy>,
    pub size_vars: Vec<SizeVar>,
    /// Role buffers first (signature order), then scratch (declaration order, `use` inlining
    /// adds the callee's scratch with a `NAME#i.` prefix).
    pub buffers: Vec<BufferDecl>,
    pub buffer_spans: Vec<Span>,
    /// Flattened signal slots (`ready[0]`, `ready[1]`, …).
    pub signals: Vec<SignalSlot>,
    pub signal_spans: Vec<Span>,
    /// `ranks[r]` is rank r's program, in order.
    pub ranks: Vec<Vec<Step>>,
    /// Per rank, the signal updates sent on entry, before the first step (entry credits, see
    /// [`credits`]).
    pub entry_signals: Vec<Vec<symsched_plan::SignalUpdate>>,
    /// Per rank, the signal updates sent on exit (launch credits, see [`credits`]).
    pub exit_signals: Vec<Vec<symsched_plan::SignalUpdate>>,
    pub duals: Vec<(DualDecl, Span)>,
    /// Span of the schedule header (name and `implements` clause), for whole-schedule findings.
    pub header_span: Span,
    /// The chunk map of a declared collective (`collective` is then `Declared`).
    pub declared: Option<std::sync::Arc<symsched_plan::DeclaredCollective>>,
}

/// One step of one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub op: Op,
    /// The statement the step came from.
    pub span: Span,
    /// For steps inlined by `use`: the `use` statements' spans, outermost first.
    pub inlined_from: Vec<Span>,
    /// The channel of its rank that runs it (`channel C { … }`; 0 outside any). Program order
    /// holds only among the steps of one channel ([`Program::chains`]).
    pub channel: u32,
}

/// Identifies a step: rank and position in that rank's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepRef {
    pub rank: Rank,
    pub index: u32,
}

impl fmt::Display for StepRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} step {}", self.rank, self.index)
    }
}

impl Program {
    /// The collective's source name (a declared collective's own name).
    pub fn collective_name(&self) -> &str {
        match &self.declared {
            Some(d) => &d.name,
            None => self.collective.name(),
        }
    }

    pub fn step(&self, at: StepRef) -> &Step {
        &self.ranks[at.rank as usize][at.index as usize]
    }

    /// Every step with its reference, rank-major.
    pub fn steps(&self) -> impl Iterator<Item = (StepRef, &Step)> {
        self.ranks.iter().enumerate().flat_map(|(r, steps)| {
            steps.iter().enumerate().map(move |(i, s)| {
                (
                    StepRef {
                        rank: r as Rank,
                        index: i as u32,
                    },
                    s,
                )
            })
        })
    }

    pub fn step_count(&self) -> usize {
        self.ranks.iter().map(Vec::len).sum()
    }

    /// The most channels any rank's steps use (1 without `channel` blocks).
    pub fn channel_count(&self) -> u32 {
        self.ranks
            .iter()
            .flatten()
            .map(|s| s.channel + 1)
            .max()
            .unwrap_or(1)
    }

    /// Program order: the steps of each rank split by channel ([`chains::Chains`]).
    pub fn chains(&self) -> chains::Chains {
        chains::Chains::of(self)
    }

    /// Human-readable form of a region, e.g. `land[2]`, `x[0..3]`, `out[1] @ 3`.
    pub fn region_text(&self, region: &Region, on: Option<Rank>) -> String {
        let name = self
            .buffers
            .get(region.buffer as usize)
            .map(|b| b.name.as_str())
            .unwrap_or("?");
        let idx = if region.count == 1 {
            format!("[{}]", region.first)
        } else {
            format!("[{}..{}]", region.first, region.first + region.count)
        };
        match on {
            Some(p) => format!("{name}{idx} @ {p}"),
            None => format!("{name}{idx}"),
        }
    }

    pub fn slot_name(&self, slot: u32) -> &str {
        self.signals
            .get(slot as usize)
            .map(|s| s.name.as_str())
            .unwrap_or("?")
    }

    /// One line per step in `.sched`-like syntax, waits with their epoch-relative target
    /// (`epoch*S + T`); the text dump's form.
    pub fn op_text(&self, op: &Op) -> String {
        self.op_text_with(op, true)
    }

    /// [`Self::op_text`] as a diagnostic shows it: a wait's target is the count within one
    /// launch, as the source wrote it (`wait s >= 2`), not the runtime's epoch-relative form.
    pub fn source_op_text(&self, op: &Op) -> String {
        self.op_text_with(op, false)
    }

    fn op_text_with(&self, op: &Op, epochs: bool) -> String {
        let upd = |u: &symsched_plan::SignalUpdate| {
            let sym = match u.mode {
                SignalMode::Add => "+=",
                SignalMode::Set => "=",
            };
            format!(
                "signal {} @ {} {sym} {}",
                self.slot_name(u.slot),
                u.peer,
                u.value
            )
        };
        match op {
            Op::Put {
                src,
                dst,
                peer,
                signal,
            } => {
                let mut s = format!(
                    "put {} -> {}",
                    self.region_text(src, None),
                    self.region_text(dst, Some(*peer))
                );
                if let Some(u) = signal {
                    s.push_str(", ");
                    s.push_str(&upd(u));
                }
                s
            }
            Op::Get { src, dst, peer } => format!(
                "get {} -> {}",
                self.region_text(src, Some(*peer)),
                self.region_text(dst, None)
            ),
            Op::Signal { update } => upd(update),
            Op::Wait { slot, cmp, target } => {
                let c = match cmp {
                    symsched_plan::Cmp::Eq => "==",
                    symsched_plan::Cmp::Ne => "!=",
                    symsched_plan::Cmp::Gt => ">",
                    symsched_plan::Cmp::Ge => ">=",
                    symsched_plan::Cmp::Lt => "<",
                    symsched_plan::Cmp::Le => "<=",
                };
                if target.stride == 0 || !epochs {
                    format!("wait {} {c} {}", self.slot_name(*slot), target.offset)
                } else {
                    format!(
                        "wait {} {c} epoch*{} + {}",
                        self.slot_name(*slot),
                        target.stride,
                        target.offset
                    )
                }
            }
            Op::Reduce { dst, srcs } => format!(
                "{} = reduce({})",
                self.region_text(dst, None),
                srcs.iter()
                    .map(|r| self.region_text(r, None))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Op::Copy { src, dst } => format!(
                "{} = copy({})",
                self.region_text(dst, None),
                self.region_text(src, None)
            ),
            Op::Cast { src, dst } => format!(
                "{} = cast({})",
                self.region_text(dst, None),
                self.region_text(src, None)
            ),
            Op::Matmul { c, a, b } => format!(
                "compute {} = matmul({}, {})",
                self.region_text(c, None),
                self.region_text(a, None),
                self.region_text(b, None)
            ),
            Op::HostColl {
                op,
                region,
                members,
            } => format!(
                "hostcoll {:?}({}) over {:?}",
                op,
                self.region_text(region, None),
                members
            )
            .to_lowercase(),
        }
    }

    /// Fill every epoch stride: for `Add` slots, the total added to the waiting rank's slot by
    /// one launch; for `Set` slots, one more than the largest value set on that rank's slot.
    /// Must be called whenever steps are added or removed.
    pub fn assign_epoch_strides(&mut self) {
        let p = self.group_size as usize;
        let slots = self.signals.len();
        // received[rank][slot] = sum of adds (or max set value + 1)
        let mut received = vec![vec![0u64; slots]; p];
        let updates = self.ranks.iter().flatten().filter_map(|s| match &s.op {
            Op::Put {
                signal: Some(u), ..
            } => Some(u),
            Op::Signal { update } => Some(update),
            _ => None,
        });
        let credits = self
            .entry_signals
            .iter()
            .chain(&self.exit_signals)
            .flatten();
        for upd in updates.chain(credits) {
            let (r, sl) = (upd.peer as usize, upd.slot as usize);
            if r >= p || sl >= slots {
                continue;
            }
            match upd.mode {
                SignalMode::Add => received[r][sl] = received[r][sl].saturating_add(upd.value),
                SignalMode::Set => received[r][sl] = received[r][sl].max(upd.value + 1),
            }
        }
        // Set slots: every rank uses the same period so a setter need not know the receiver's.
        let mut set_period = vec![0u64; slots];
        for (sl, slot) in self.signals.iter().enumerate() {
            if slot.mode == SignalMode::Set {
                set_period[sl] = (0..p).map(|r| received[r][sl]).max().unwrap_or(1).max(1);
            }
        }
        for (r, steps) in self.ranks.iter_mut().enumerate() {
            for s in steps.iter_mut() {
                match &mut s.op {
                    Op::Wait { slot, target, .. } => {
                        let sl = *slot as usize;
                        if sl < slots {
                            target.stride = match self.signals[sl].mode {
                                SignalMode::Add => received[r][sl],
                                SignalMode::Set => set_period[sl],
                            };
                        }
                    }
                    Op::Put {
                        signal: Some(u), ..
                    }
                    | Op::Signal { update: u } => {
                        let sl = u.slot as usize;
                        if sl < slots && u.mode == SignalMode::Set {
                            u.stride = set_period[sl];
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}
