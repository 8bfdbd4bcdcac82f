//! Derived duals (`dual derived`): the backward schedule of an instantiated forward program,
//! built by transposing its dataflow (reverse-mode differentiation of a linear program).
//!
//! The forward's steps are visited in the reverse of a topological order of its happens-before
//! (`HappensBefore::events`), keeping for every forward location `(rank, buffer, chunk)` its
//! *gradient*: a lazy sum of physical chunks of the backward program (terms), empty for zero.
//! Initially the gradient of every differentiated output chunk is the matching chunk of the
//! backward's input role. Each forward step is undone by its adjoint:
//!
//! | forward | adjoint |
//! |---|---|
//! | `dst = copy(src)` | `g(src) += g(dst)`, `g(dst) = 0` |
//! | `dst = reduce(s₁, …)` (fan-in) | `g(sᵢ) += g(dst)` for every operand (fan-out), `g(dst) = 0` |
//! | `put src -> dst @ p` (at its arrival on p) | p puts `g(dst)` into a landing slot of the sender, with a signal; `g(dst) = 0` |
//! | the same put (at its issue) | the sender adds the landing slot to `g(src)` |
//! | `get src @ p -> dst` | the reader puts `g(dst)` into a landing slot of p, which adds it to `g(src)`; `g(dst) = 0` |
//! | `signal`, `wait`, launch credits | nothing: the backward's own synchronisation is regenerated |
//!
//! So a gather becomes a scatter of gradients and the other way round, a copy to many ranks
//! (broadcast) a reduce, and a reduce a broadcast. Sums are only materialised when a value has
//! to move (the source of a gradient put must be one region) and at the end, when the gradient
//! of each forward input chunk is written into the backward's output role (`copy` of one term,
//! `reduce` of several, in the order of the ranks their gradients come from). Every
//! materialisation and every landing slot is a fresh chunk of a *clone* of the forward buffer
//! it stands for (same chunk count and extent, so every step moves exactly the lengths the
//! forward moved), so no physical chunk is written twice and no write can race a read.
//!
//! Synchronisation is regenerated from the backward's own data dependencies: every gradient put
//! adds 1 to the receiver's `arrived` counter and the receiver waits, before it first reads a
//! landing slot, for every put issued to it so far (in the order the adjoints were generated,
//! which is a valid execution order, so the waits cannot deadlock); a final wait covers the
//! rest. If happens-before does not guarantee that each read follows its put's arrival under
//! this single counter (a chain of rounds, as in a ring), the program is rebuilt with one slot
//! per incoming put (`arrived[j]`, waited for individually). Launch credits are inserted as for
//! any schedule. A landing slot whose only use is the final copy into an output role chunk of
//! the same extent is replaced by a put straight into that chunk.
//!
//! Not transposable (E0445, naming the step): `compute` (matmul), `hostcoll`, `cast`, a copy
//! between regions of different chunk counts, a reduce whose operand is neither as long as its
//! destination nor spread from a one-chunk destination, declared collectives and alltoallv
//! (runtime-sized chunks). The result is verified like any schedule (postcondition of the dual
//! collective, races, deadlock, bounds) and against the forward as an adjoint.
//!
//! Channels: every backward step is placed on channel 0. The adjoints are generated in one
//! order that the forward's happens-before allows (across all its channels), so one sequence
//! per rank in that order cannot deadlock; overlapping the backward's channels is left to a
//! declared dual.

use super::graph::{self, Event};
use super::{credits, limits, Program, Step, StepRef};
use crate::diag::{Diagnostic, Span};
use crate::front::collectives;
use std::collections::{BTreeMap, HashMap, HashSet};
use symsched_plan::{
    BufferDecl, BufferId, BufferRole, Cmp, CollectiveKind, DualDecl, Extent, LaunchSizes, Op, Rank,
    Region, SignalMode, SignalSlot, SignalUpdate, WaitTarget,
};

/// The derived dual of schedule `F` is the schedule `F.dual` (not a valid source name, so it
/// cannot collide with a written one).
pub const DERIVED_SUFFIX: &str = ".dual";

/// Code of a forward the transposition cannot handle.
pub const E_UNTRANSPOSABLE: &str = "E0445";

/// Name of the derived dual of `forward`.
pub fn derived_name(forward: &str) -> String {
    format!("{forward}{DERIVED_SUFFIX}")
}

/// The forward schedule a derived dual's name stands for.
pub fn forward_name(name: &str) -> Option<&str> {
    name.strip_suffix(DERIVED_SUFFIX).filter(|f| !f.is_empty())
}

/// The collective whose schedules are adjoints of `kind`'s (built-in collectives only).
pub fn dual_collective(kind: CollectiveKind) -> Option<CollectiveKind> {
    use CollectiveKind::*;
    Some(match kind {
        Allgather => ReduceScatter,
        ReduceScatter => Allgather,
        Alltoall => Alltoall,
        Alltoallv => Alltoallv,
        Allreduce => Allreduce,
        Broadcast => Reduce,
        Reduce => Broadcast,
        Sendrecv => Sendrecv,
        AllgatherMatmul => MatmulReduceScatter,
        MatmulReduceScatter => AllgatherMatmul,
        Declared { .. } => return None,
    })
}

/// The params of the dual of a `kind` schedule bound to `params` (an involution): a sendrecv's
/// gradient travels from `dst` back to `src`; every other param is kept.
pub fn dual_params(kind: CollectiveKind, params: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    let mut out = params.clone();
    if kind == CollectiveKind::Sendrecv {
        if let (Some(s), Some(d)) = (params.get("src"), params.get("dst")) {
            out.insert("src".into(), *d);
            out.insert("dst".into(), *s);
        }
    }
    out
}

/// Why a forward cannot be transposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransposeError {
    /// The collective has no built-in dual (a declared collective).
    #[error("the collective `{0}` has no dual collective to derive a backward schedule for")]
    NoDualCollective(String),
    /// A step of a kind the transposition does not handle.
    #[error("rank {rank} step `{op}` cannot be transposed: {why}")]
    Step {
        rank: Rank,
        op: String,
        why: &'static str,
        span: Span,
    },
    /// The collective's roles cannot be mapped (runtime-sized chunks, operand roles).
    #[error("{0}")]
    Roles(String),
    /// The forward has no happens-before order (it deadlocks).
    #[error(
        "the forward has a synchronisation cycle (it deadlocks), so it has no order to reverse"
    )]
    Cycle,
}

impl TransposeError {
    /// The diagnostic (E0445) for a forward `fwd` whose `dual derived` clause is `decl`.
    pub fn to_diagnostic(&self, fwd: &Program, decl: Span) -> Diagnostic {
        let mut d = Diagnostic::error(
            E_UNTRANSPOSABLE,
            format!(
                "[dual] cannot derive the dual of `{}` at P = {}: {self}",
                fwd.schedule, fwd.group_size
            ),
        );
        if let TransposeError::Step { span, .. } = self {
            d = d.with_label(*span, "this step has no transpose");
        }
        d.with_label(decl, "dual derived here")
            .with_help("declare the backward schedule by name instead (`dual NAME`)")
    }
}

/// The span of `fwd`'s `dual derived` clause, when it has one.
pub fn derived_span(fwd: &Program) -> Option<Span> {
    let name = derived_name(&fwd.schedule);
    fwd.duals.iter().find_map(|(d, span)| match d {
        DualDecl::Schedule { name: n, .. } if *n == name => Some(*span),
        _ => None,
    })
}

/// Build the derived dual of `fwd` (its `dual derived` clause at `decl`): the schedule
/// `F.dual` implementing the dual collective, with the dual params, ready to verify.
pub fn transpose(fwd: &Program, decl: Span) -> Result<Program, Diagnostic> {
    transpose_program(fwd, decl).map_err(|e| match e {
        Fail::Untransposable(e) => e.to_diagnostic(fwd, decl),
        Fail::Limit(d) => d,
    })
}

/// The two failure kinds of [`transpose_program`].
#[derive(Debug)]
enum Fail {
    Untransposable(TransposeError),
    /// The result exceeds a program limit (E031x).
    Limit(Diagnostic),
}

impl From<TransposeError> for Fail {
    fn from(e: TransposeError) -> Fail {
        Fail::Untransposable(e)
    }
}

fn transpose_program(fwd: &Program, decl: Span) -> Result<Program, Fail> {
    preflight(fwd)?;
    let g = graph::build(fwd);
    let hb = g.happens_before().ok_or(TransposeError::Cycle)?;
    let events: Vec<Event> = hb.events.iter().rev().copied().collect();
    let counted = Builder::new(fwd, Sync::Counted)?.run(&events)?;
    let mut prog = if counted.reads_follow_arrivals() {
        counted.prog
    } else {
        Builder::new(fwd, Sync::PerPut)?.run(&events)?.prog
    };
    prog.duals = vec![(
        DualDecl::Schedule {
            name: fwd.schedule.clone(),
            params: fwd.params.clone(),
        },
        decl,
    )];
    limits::check_locations(
        prog.group_size,
        &prog.buffers,
        &prog.buffer_spans,
        prog.header_span,
    )
    .map_err(Fail::Limit)?;
    limits::check_size_overflow(&prog).map_err(Fail::Limit)?;
    credits::insert_launch_credits(&mut prog);
    limits::check_signal_slots(&prog).map_err(Fail::Limit)?;
    prog.assign_epoch_strides();
    Ok(prog)
}

/// Refuse what has no transpose before building anything.
fn preflight(fwd: &Program) -> Result<(), TransposeError> {
    let kind = fwd.collective;
    if dual_collective(kind).is_none() || fwd.declared.is_some() {
        return Err(TransposeError::NoDualCollective(
            fwd.collective_name().to_string(),
        ));
    }
    if matches!(
        kind,
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter
    ) {
        return Err(TransposeError::Roles(format!(
            "{} multiplies by an operand role; its dual takes the operand transposed, which the transposition does not derive",
            fwd.collective_name()
        )));
    }
    if fwd
        .buffers
        .iter()
        .any(|b| matches!(b.extent, Extent::Counts { .. }))
    {
        return Err(TransposeError::Roles(
            "runtime-sized (alltoallv) chunks have no fixed extent for the landing slots".into(),
        ));
    }
    for (at, s) in fwd.steps() {
        let why = match &s.op {
            Op::Matmul { .. } => "`compute` (matmul) has no transpose here",
            Op::HostColl { .. } => "a `hostcoll` is not transposed (its dual is another host collective)",
            Op::Cast { .. } => "`cast` changes the element class; its transpose is not derived",
            Op::Copy { src, dst } if src.count != dst.count => {
                "a copy between regions of different chunk counts (a concatenation) is not transposed"
            }
            Op::Put { src, dst, .. } | Op::Get { src, dst, .. } if src.count != dst.count => {
                "a move between regions of different chunk counts is not transposed"
            }
            Op::Reduce { dst, srcs }
                if srcs
                    .iter()
                    .any(|s| s.count != dst.count && dst.count != 1) =>
            {
                "a reduce operand with another chunk count than its multi-chunk destination"
            }
            _ => continue,
        };
        return Err(TransposeError::Step {
            rank: at.rank,
            op: fwd.source_op_text(&s.op),
            why,
            span: s.span,
        });
    }
    Ok(())
}

/// How gradient puts are waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// One `arrived` counter per rank; a wait covers every put issued to the rank so far.
    Counted,
    /// One slot per incoming put (`arrived[j]`), each waited for on its own.
    PerPut,
}

/// A forward location.
type Loc = (Rank, BufferId, u32);

/// One chunk of a backward buffer, on the rank whose gradient holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Phys {
    buffer: BufferId,
    chunk: u32,
}

/// One term of a gradient: a physical chunk, with the rank whose output gradient it (first)
/// carries, so sums fold in rank order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Term {
    key: Rank,
    phys: Phys,
}

/// A landing slot: which put fills it (rank, index in its program) and its place among the
/// receiver's incoming puts.
#[derive(Debug, Clone, Copy)]
struct Landing {
    put: (Rank, usize),
    incoming: u32,
}

/// Kinds of clones of a forward buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CloneKind {
    /// A materialised gradient sum.
    Sum,
    /// A landing slot of gradient puts.
    Land,
}

struct Builder<'a> {
    fwd: &'a Program,
    sync: Sync,
    kind: CollectiveKind,
    buffers: Vec<BufferDecl>,
    buffer_spans: Vec<Span>,
    /// Forward role → backward role.
    role_map: HashMap<BufferId, BufferId>,
    /// (forward buffer, kind) → its clones, version by version.
    clones: HashMap<(BufferId, CloneKind), Vec<BufferId>>,
    /// Clone chunks already written, per rank.
    used: HashSet<(Rank, BufferId, u32)>,
    /// Lengths of forward chunks over sampled sizes ([`Builder::length_class`]).
    classes: HashMap<(BufferId, u32), Vec<u64>>,
    /// The sizes of [`samples`], computed on first use.
    samples: Vec<LaunchSizes>,
    /// Steps per rank; `None` once removed by the landing retarget.
    ranks: Vec<Vec<Option<Step>>>,
    grad: HashMap<Loc, Vec<Term>>,
    /// Landing slots by (receiving rank, chunk).
    landings: HashMap<(Rank, Phys), Landing>,
    /// Terms to add to a forward put's source when its issue is undone, by the put's step.
    at_issue: HashMap<StepRef, Vec<(Loc, Term)>>,
    /// Puts issued to each rank so far.
    issued: Vec<u32>,
    /// Counted: puts every earlier wait of the rank covers. PerPut: the incoming puts waited for.
    waited: Vec<u32>,
    waited_set: Vec<HashSet<u32>>,
    signals: Vec<SignalSlot>,
    signal_spans: Vec<Span>,
    /// The forward buffer each backward buffer stands for.
    origin: Vec<BufferId>,
    /// Materialised sums per rank.
    cache: HashMap<(Rank, Vec<Term>), Phys>,
    /// (landing put, step that reads the landing) pairs the counted waits must order.
    reads: Vec<((Rank, usize), (Rank, usize))>,
}

/// The outcome of one build.
struct Built {
    prog: Program,
    /// (put, reader) pairs, as step references of `prog` (before credits).
    reads: Vec<(StepRef, StepRef)>,
}

impl Built {
    /// Whether every landing read is ordered after its put's arrival.
    fn reads_follow_arrivals(&self) -> bool {
        let g = graph::build(&self.prog);
        let Some(hb) = g.happens_before() else {
            return false;
        };
        self.reads
            .iter()
            .all(|&(put, read)| hb.precedes(Event::Arrival(put), Event::Step(read)))
    }
}

/// Forward output roles that carry a gradient on rank `r` (the postcondition's specified
/// outputs: a reduce's root, a sendrecv's destination, every rank otherwise).
fn differentiated(fwd: &Program, r: Rank) -> bool {
    let is = |name: &str| fwd.params.get(name).copied() == Some(i64::from(r));
    match fwd.collective {
        CollectiveKind::Reduce => is("root"),
        CollectiveKind::Sendrecv => is("dst"),
        _ => true,
    }
}

impl<'a> Builder<'a> {
    fn new(fwd: &'a Program, sync: Sync) -> Result<Builder<'a>, TransposeError> {
        let kind = dual_collective(fwd.collective)
            .ok_or_else(|| TransposeError::NoDualCollective(fwd.collective_name().into()))?;
        let p = fwd.group_size;
        let (froles, broles) = (collectives::roles(fwd.collective), collectives::roles(kind));
        if froles.len() != broles.len() {
            return Err(TransposeError::Roles(format!(
                "{} has {} roles, its dual {} has {}",
                fwd.collective_name(),
                froles.len(),
                kind.name(),
                broles.len()
            )));
        }
        let reads = |a: BufferRole| matches!(a, BufferRole::Input | BufferRole::InOut);
        let writes = |a: BufferRole| matches!(a, BufferRole::Output | BufferRole::InOut);
        let pick = |roles: &[collectives::RoleSpec], f: &dyn Fn(BufferRole) -> bool| {
            (0..roles.len())
                .filter(|&i| f(roles[i].access))
                .collect::<Vec<_>>()
        };
        // Backward inputs are the gradients of forward outputs, backward outputs those of
        // forward inputs, positionally (as the adjoint check maps them).
        let (fi, fo) = (pick(froles, &reads), pick(froles, &writes));
        let (bi, bo) = (pick(broles, &reads), pick(broles, &writes));
        let mut role_map = HashMap::new();
        for (b, f) in bi.iter().zip(&fo).chain(bo.iter().zip(&fi)) {
            role_map.insert(*f as BufferId, *b as BufferId);
        }
        let mut buffers = Vec::with_capacity(broles.len());
        let mut buffer_spans = Vec::with_capacity(broles.len());
        let mut origin = Vec::with_capacity(broles.len());
        for (i, spec) in broles.iter().enumerate() {
            let Some((&f, _)) = role_map.iter().find(|(_, &b)| b as usize == i) else {
                return Err(TransposeError::Roles(format!(
                    "the role `{}` of {} has no forward counterpart",
                    spec.name,
                    kind.name()
                )));
            };
            let fb = &fwd.buffers[f as usize];
            // A forward role with a chunk factor (K chunks per block) has a gradient role of
            // the same chunking, which the dual collective's role allows where it holds one
            // block per rank.
            let extent = collectives::chunk_factor_block(kind, i, u64::from(p))
                .and_then(|(block, blocks)| collectives::blocked_extent(block, blocks, fb.chunks))
                .unwrap_or_else(|| collectives::role_extent(kind, i, u64::from(p)));
            if extent != fb.extent {
                return Err(TransposeError::Roles(format!(
                    "the role `{}` of {} has another extent than the forward's `{}`",
                    spec.name,
                    kind.name(),
                    fb.name
                )));
            }
            buffers.push(BufferDecl {
                name: spec.name.to_string(),
                role: spec.access,
                chunks: fb.chunks,
                extent,
                elem: fb.elem,
            });
            buffer_spans.push(
                fwd.buffer_spans
                    .get(f as usize)
                    .copied()
                    .unwrap_or_default(),
            );
            origin.push(f);
        }
        let mut grad: HashMap<Loc, Vec<Term>> = HashMap::new();
        for &f in &fo {
            let f = f as BufferId;
            let b = role_map[&f];
            for r in (0..p).filter(|&r| differentiated(fwd, r)) {
                for c in 0..fwd.buffers[f as usize].chunks {
                    grad.insert(
                        (r, f, c),
                        vec![Term {
                            key: r,
                            phys: Phys {
                                buffer: b,
                                chunk: c,
                            },
                        }],
                    );
                }
            }
        }
        let (signals, signal_spans) = match sync {
            Sync::Counted => (
                vec![SignalSlot {
                    name: "arrived".into(),
                    mode: SignalMode::Add,
                }],
                vec![fwd.header_span],
            ),
            Sync::PerPut => (Vec::new(), Vec::new()),
        };
        Ok(Builder {
            fwd,
            sync,
            kind,
            buffers,
            buffer_spans,
            role_map,
            clones: HashMap::new(),
            used: HashSet::new(),
            classes: HashMap::new(),
            samples: Vec::new(),
            ranks: vec![Vec::new(); p as usize],
            grad,
            landings: HashMap::new(),
            at_issue: HashMap::new(),
            issued: vec![0; p as usize],
            waited: vec![0; p as usize],
            waited_set: vec![HashSet::new(); p as usize],
            signals,
            signal_spans,
            origin,
            cache: HashMap::new(),
            reads: Vec::new(),
        })
    }

    fn region(phys: Phys) -> Region {
        Region {
            buffer: phys.buffer,
            first: phys.chunk,
            count: 1,
        }
    }

    fn emit(&mut self, r: Rank, op: Op, span: Span) -> usize {
        let steps = &mut self.ranks[r as usize];
        steps.push(Some(Step {
            op,
            span,
            inlined_from: Vec::new(),
            channel: 0,
        }));
        steps.len() - 1
    }

    fn take(&mut self, loc: Loc) -> Vec<Term> {
        self.grad.remove(&loc).unwrap_or_default()
    }

    fn add(&mut self, loc: Loc, terms: impl IntoIterator<Item = Term>) {
        let e = self.grad.entry(loc).or_default();
        e.extend(terms);
    }

    /// A chunk range of a clone of forward buffer `f` on rank `r` that nothing has used yet,
    /// as long as chunks `first..first + count` of `f`: for one chunk, any free chunk of an
    /// existing clone of the same length (landing slots of one rank are packed as a
    /// hand-written landing buffer is); otherwise the same chunks of the first clone where
    /// they are all free.
    fn fresh(&mut self, r: Rank, f: BufferId, kind: CloneKind, first: u32, count: u32) -> Region {
        let chunks = self.fwd.buffers[f as usize].chunks;
        let versions = self.clones.get(&(f, kind)).cloned().unwrap_or_default();
        let free = |b: &Builder, v: BufferId, c: u32| !b.used.contains(&(r, v, c));
        let mut pick = None;
        if count == 1 {
            let class = self.length_class(f, first);
            'search: for &v in &versions {
                if free(self, v, first) {
                    pick = Some((v, first));
                    break;
                }
                for c in 0..chunks {
                    if free(self, v, c) && self.length_class(f, c) == class {
                        pick = Some((v, c));
                        break 'search;
                    }
                }
            }
        } else {
            pick = versions
                .iter()
                .find(|&&v| (first..first + count).all(|c| free(self, v, c)))
                .map(|&v| (v, first));
        }
        let (buffer, at) = match pick {
            Some(x) => x,
            None => (self.new_clone(f, kind, versions.len()), first),
        };
        for c in at..at + count {
            self.used.insert((r, buffer, c));
        }
        Region {
            buffer,
            first: at,
            count,
        }
    }

    /// Chunk `c` of forward buffer `f`'s lengths over sampled sizes (chunks with equal ones
    /// are interchangeable).
    fn length_class(&mut self, f: BufferId, c: u32) -> Vec<u64> {
        if let Some(v) = self.classes.get(&(f, c)) {
            return v.clone();
        }
        if self.samples.is_empty() {
            self.samples = samples(self.fwd);
        }
        let d = &self.fwd.buffers[f as usize];
        let v: Vec<u64> = self
            .samples
            .iter()
            .map(|s| d.chunk_span(c, 0, s).map(|x| x.len).unwrap_or(u64::MAX))
            .collect();
        self.classes.insert((f, c), v.clone());
        v
    }

    /// Declare version `v` of a clone of forward buffer `f`.
    fn new_clone(&mut self, f: BufferId, kind: CloneKind, v: usize) -> BufferId {
        let fb = &self.fwd.buffers[f as usize];
        let prefix = match kind {
            CloneKind::Sum => "d_",
            CloneKind::Land => "land_",
        };
        let id = self.buffers.len() as BufferId;
        self.buffers.push(BufferDecl {
            name: format!("{prefix}{}#{v}", fb.name),
            role: BufferRole::Scratch,
            chunks: fb.chunks,
            extent: fb.extent.clone(),
            elem: fb.elem,
        });
        self.buffer_spans.push(
            self.fwd
                .buffer_spans
                .get(f as usize)
                .copied()
                .unwrap_or_default(),
        );
        self.origin.push(f);
        self.clones.entry((f, kind)).or_default().push(id);
        id
    }

    /// Counted sync: rank `r` waits until every put issued to it so far has landed.
    fn wait_for_every_issued_put(&mut self, r: Rank, span: Span) {
        let k = self.issued[r as usize];
        let wait = Op::Wait {
            slot: 0,
            cmp: Cmp::Ge,
            target: WaitTarget {
                stride: 0,
                offset: u64::from(k),
            },
        };
        self.emit(r, wait, span);
        self.waited[r as usize] = k;
    }

    /// Per-put sync: rank `r` waits for the put into landing slot `slot`, once.
    fn wait_for_put(&mut self, r: Rank, slot: u32, span: Span) {
        if self.waited_set[r as usize].insert(slot) {
            let wait = Op::Wait {
                slot,
                cmp: Cmp::Ge,
                target: WaitTarget {
                    stride: 0,
                    offset: 1,
                },
            };
            self.emit(r, wait, span);
        }
    }

    /// Before rank `r` reads `terms`: wait for the landing slots among them, and note the reads
    /// (made by the step `r` emits next).
    fn before_reading(&mut self, r: Rank, terms: &[Term], span: Span) {
        let lands: Vec<Landing> = terms
            .iter()
            .filter_map(|t| self.landings.get(&(r, t.phys)).copied())
            .collect();
        if lands.is_empty() {
            return;
        }
        match self.sync {
            Sync::Counted => {
                if lands.iter().any(|l| l.incoming >= self.waited[r as usize]) {
                    self.wait_for_every_issued_put(r, span);
                }
            }
            Sync::PerPut => {
                for l in &lands {
                    self.wait_for_put(r, l.incoming, span);
                }
            }
        }
        let next = self.ranks[r as usize].len();
        for l in lands {
            self.reads.push((l.put, (r, next)));
        }
    }

    /// The one physical chunk holding the sum `terms` on rank `r` (gradient of forward `loc`),
    /// materialised into a fresh clone chunk of `loc` when it has several terms.
    fn materialise(&mut self, r: Rank, loc: Loc, mut terms: Vec<Term>, span: Span) -> Phys {
        if let [one] = terms.as_slice() {
            return one.phys;
        }
        terms.sort();
        if let Some(&p) = self.cache.get(&(r, terms.clone())) {
            return p;
        }
        // The sum is as long as its shortest term (a reduce moves its destination's length):
        // a gradient that came through a short chunk into a longer slot is that short.
        let (_, f, c) = loc;
        let mut shape = (f, c);
        for t in &terms {
            let o = (self.origin[t.phys.buffer as usize], t.phys.chunk);
            if self.shorter(o, shape) {
                shape = o;
            }
        }
        let at = self.fresh(r, shape.0, CloneKind::Sum, shape.1, 1);
        let dst = Phys {
            buffer: at.buffer,
            chunk: at.first,
        };
        self.before_reading(r, &terms, span);
        let srcs = terms.iter().map(|t| Self::region(t.phys)).collect();
        self.emit(
            r,
            Op::Reduce {
                dst: Self::region(dst),
                srcs,
            },
            span,
        );
        self.cache.insert((r, terms), dst);
        dst
    }

    /// Rank `from` sends the gradients `terms[i]` of forward chunks `dst.first + i` (on `from`)
    /// to rank `to`; returns the landing term of each chunk on `to`, or `None` for an all-zero
    /// gradient (nothing is sent).
    fn send(
        &mut self,
        from: Rank,
        to: Rank,
        dst: Region,
        terms: Vec<Vec<Term>>,
        span: Span,
        at: StepRef,
    ) -> Result<Option<Vec<Term>>, TransposeError> {
        if terms.iter().all(Vec::is_empty) {
            return Ok(None);
        }
        if terms.iter().any(Vec::is_empty) {
            return Err(TransposeError::Step {
                rank: at.rank,
                op: self.fwd.source_op_text(&self.fwd.step(at).op),
                why: "only part of the moved region carries a gradient",
                span,
            });
        }
        let keys: Vec<Rank> = terms
            .iter()
            .map(|t| t.iter().map(|t| t.key).min().unwrap_or(from))
            .collect();
        let phys: Vec<Phys> = terms
            .into_iter()
            .enumerate()
            .map(|(i, t)| self.materialise(from, (from, dst.buffer, dst.first + i as u32), t, span))
            .collect();
        // One region: consecutive chunks of one buffer, or else copied together.
        let contiguous = phys
            .iter()
            .enumerate()
            .all(|(i, p)| p.buffer == phys[0].buffer && p.chunk == phys[0].chunk + i as u32);
        let src = if contiguous {
            Region {
                buffer: phys[0].buffer,
                first: phys[0].chunk,
                count: dst.count,
            }
        } else {
            let b = self.fresh(from, dst.buffer, CloneKind::Sum, dst.first, dst.count);
            for (i, p) in phys.iter().enumerate() {
                let one = Term {
                    key: keys[i],
                    phys: *p,
                };
                self.before_reading(from, &[one], span);
                self.emit(
                    from,
                    Op::Copy {
                        src: Self::region(*p),
                        dst: Region {
                            buffer: b.buffer,
                            first: b.first + i as u32,
                            count: 1,
                        },
                    },
                    span,
                );
            }
            b
        };
        let read: Vec<Term> = (0..src.count)
            .map(|i| Term {
                key: keys[i as usize],
                phys: Phys {
                    buffer: src.buffer,
                    chunk: src.first + i,
                },
            })
            .collect();
        self.before_reading(from, &read, span);
        let land = self.fresh(to, dst.buffer, CloneKind::Land, dst.first, dst.count);
        let incoming = self.issued[to as usize];
        self.issued[to as usize] += 1;
        let slot = match self.sync {
            Sync::Counted => 0,
            Sync::PerPut => {
                while self.signals.len() <= incoming as usize {
                    self.signals.push(SignalSlot {
                        name: format!("arrived[{}]", self.signals.len()),
                        mode: SignalMode::Add,
                    });
                    self.signal_spans.push(self.fwd.header_span);
                }
                incoming
            }
        };
        let idx = self.emit(
            from,
            Op::Put {
                src,
                dst: land,
                peer: to,
                signal: Some(SignalUpdate {
                    slot,
                    peer: to,
                    mode: SignalMode::Add,
                    value: 1,
                    stride: 0,
                }),
            },
            span,
        );
        let mut out = Vec::with_capacity(dst.count as usize);
        for i in 0..dst.count {
            let phys = Phys {
                buffer: land.buffer,
                chunk: land.first + i,
            };
            self.landings.insert(
                (to, phys),
                Landing {
                    put: (from, idx),
                    incoming,
                },
            );
            out.push(Term {
                key: keys[i as usize],
                phys,
            });
        }
        Ok(Some(out))
    }

    fn chunks(r: Rank, reg: &Region) -> impl Iterator<Item = Loc> + '_ {
        (reg.first..reg.first + reg.count).map(move |c| (r, reg.buffer, c))
    }

    /// Undo one forward event.
    fn undo(&mut self, ev: Event) -> Result<(), TransposeError> {
        let at = ev.step();
        let fwd = self.fwd;
        let step = fwd.step(at);
        let (r, span) = (at.rank, step.span);
        match (ev, &step.op) {
            (Event::Step(_), Op::Copy { src, dst }) => {
                let moved: Vec<Vec<Term>> = Self::chunks(r, dst)
                    .map(|l| self.take(l))
                    .collect::<Vec<_>>();
                for (l, t) in Self::chunks(r, src).zip(moved) {
                    self.add(l, t);
                }
            }
            (Event::Step(_), Op::Reduce { dst, srcs }) => {
                let moved: Vec<Vec<Term>> = Self::chunks(r, dst).map(|l| self.take(l)).collect();
                for s in srcs {
                    for (i, l) in Self::chunks(r, s).enumerate() {
                        let t = if s.count == dst.count {
                            moved[i].clone()
                        } else {
                            moved[0].clone()
                        };
                        self.add(l, t);
                    }
                }
            }
            (Event::Arrival(_), Op::Put { src, dst, peer, .. }) => {
                let moved: Vec<Vec<Term>> =
                    Self::chunks(*peer, dst).map(|l| self.take(l)).collect();
                if *peer == r {
                    for (l, t) in Self::chunks(r, src).zip(moved) {
                        self.add(l, t);
                    }
                } else if let Some(landed) = self.send(*peer, r, *dst, moved, span, at)? {
                    let adds = Self::chunks(r, src).zip(landed).collect();
                    self.at_issue.insert(at, adds);
                }
            }
            (Event::Step(_), Op::Put { .. }) => {
                for (l, t) in self.at_issue.remove(&at).unwrap_or_default() {
                    self.add(l, [t]);
                }
            }
            (Event::Step(_), Op::Get { src, dst, peer }) => {
                let moved: Vec<Vec<Term>> = Self::chunks(r, dst).map(|l| self.take(l)).collect();
                if *peer == r {
                    for (l, t) in Self::chunks(r, src).zip(moved) {
                        self.add(l, t);
                    }
                } else if let Some(landed) = self.send(r, *peer, *dst, moved, span, at)? {
                    for (l, t) in Self::chunks(*peer, src).zip(landed) {
                        self.add(l, [t]);
                    }
                }
            }
            (_, Op::Signal { .. } | Op::Wait { .. }) => {}
            (Event::Arrival(_), _) => {}
            (Event::Step(_), op) => {
                return Err(TransposeError::Step {
                    rank: r,
                    op: self.fwd.source_op_text(op),
                    why: "this step has no transpose",
                    span,
                })
            }
        }
        Ok(())
    }

    /// Write the gradient of every forward input chunk into the backward's output role.
    fn finish(&mut self) {
        let fwd = self.fwd;
        let span = fwd.header_span;
        let inputs: Vec<(BufferId, BufferId)> = collectives::roles(fwd.collective)
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.access, BufferRole::Input | BufferRole::InOut))
            .map(|(f, _)| (f as BufferId, self.role_map[&(f as BufferId)]))
            .collect();
        for r in 0..fwd.group_size {
            let mut finals: Vec<(Loc, Phys, Vec<Term>)> = Vec::new();
            for &(f, b) in &inputs {
                for c in 0..fwd.buffers[f as usize].chunks {
                    let mut terms = self.take((r, f, c));
                    terms.sort();
                    let out = Phys {
                        buffer: b,
                        chunk: c,
                    };
                    if terms.is_empty() || terms == [Term { key: r, phys: out }] {
                        continue;
                    }
                    finals.push(((r, f, c), out, terms));
                }
            }
            // Sums already materialised are copied, not recomputed; local work comes before
            // the first wait for a landing slot.
            for (_, _, ts) in finals.iter_mut() {
                if let Some(&phys) = self.cache.get(&(r, ts.clone())) {
                    let key = ts.iter().map(|t| t.key).min().unwrap_or(r);
                    *ts = vec![Term { key, phys }];
                }
            }
            let lands = &self.landings;
            finals.sort_by_key(|(_, _, ts)| ts.iter().any(|t| lands.contains_key(&(r, t.phys))));
            for i in 0..finals.len() {
                let (loc, out, terms) = finals[i].clone();
                // An in-out role chunk another pending sum still reads is saved first.
                if finals[i + 1..]
                    .iter()
                    .any(|(_, _, ts)| ts.iter().any(|t| t.phys == out))
                {
                    let at = self.fresh(r, loc.1, CloneKind::Sum, loc.2, 1);
                    let saved = Phys {
                        buffer: at.buffer,
                        chunk: at.first,
                    };
                    self.emit(
                        r,
                        Op::Copy {
                            src: Self::region(out),
                            dst: Self::region(saved),
                        },
                        span,
                    );
                    for (_, _, ts) in finals[i + 1..].iter_mut() {
                        for t in ts.iter_mut().filter(|t| t.phys == out) {
                            t.phys = saved;
                        }
                    }
                }
                self.before_reading(r, &terms, span);
                let op = match terms.as_slice() {
                    [one] if self.same_extent(one.phys, out) => Op::Copy {
                        src: Self::region(one.phys),
                        dst: Self::region(out),
                    },
                    _ => Op::Reduce {
                        dst: Self::region(out),
                        srcs: terms.iter().map(|t| Self::region(t.phys)).collect(),
                    },
                };
                self.emit(r, op, span);
            }
        }
        self.retarget();
        // Nothing may still be in flight to a rank when it returns.
        for r in 0..fwd.group_size {
            match self.sync {
                Sync::Counted => {
                    if self.issued[r as usize] > self.waited[r as usize] {
                        self.wait_for_every_issued_put(r, span);
                    }
                }
                Sync::PerPut => {
                    for j in 0..self.issued[r as usize] {
                        self.wait_for_put(r, j, span);
                    }
                }
            }
        }
        // Landing reads removed by the retarget are now covered by the final wait.
        let last: Vec<Option<usize>> = self
            .ranks
            .iter()
            .map(|steps| steps.iter().rposition(Option::is_some))
            .collect();
        for (_, read) in self.reads.iter_mut() {
            if self.ranks[read.0 as usize]
                .get(read.1)
                .is_none_or(Option::is_none)
            {
                // A rank that reads a landing slot has waited for it, so it has a step left.
                read.1 = last[read.0 as usize].unwrap_or(0);
            }
        }
    }

    /// Whether two physical chunks have the same length at every sampled size.
    fn same_extent(&mut self, a: Phys, b: Phys) -> bool {
        let oa = (self.origin[a.buffer as usize], a.chunk);
        let ob = (self.origin[b.buffer as usize], b.chunk);
        oa == ob || self.length_class(oa.0, oa.1) == self.length_class(ob.0, ob.1)
    }

    /// Whether forward chunk `a` is never longer than `b` and sometimes shorter.
    fn shorter(&mut self, (fa, ca): (BufferId, u32), (fb, cb): (BufferId, u32)) -> bool {
        if (fa, ca) == (fb, cb) {
            return false;
        }
        let (la, lb) = (self.length_class(fa, ca), self.length_class(fb, cb));
        la.iter().zip(&lb).all(|(x, y)| x <= y) && la != lb
    }

    /// A landing slot read only by the final copy into an output role chunk of the same extent,
    /// on a rank that touches that chunk nowhere else: the put goes straight into the chunk.
    fn retarget(&mut self) {
        let p = self.fwd.group_size;
        let mut readers: HashMap<(Rank, Phys), Vec<usize>> = HashMap::new();
        let mut touched: HashMap<(Rank, BufferId, u32), usize> = HashMap::new();
        for r in 0..p {
            for (i, s) in self.ranks[r as usize].iter().enumerate() {
                let Some(s) = s else { continue };
                for a in graph::accesses(&s.op, r) {
                    for c in a.first..a.first + a.count {
                        *touched.entry((a.rank, a.buffer, c)).or_default() += 1;
                        if !a.write && a.rank == r {
                            readers
                                .entry((
                                    r,
                                    Phys {
                                        buffer: a.buffer,
                                        chunk: c,
                                    },
                                ))
                                .or_default()
                                .push(i);
                        }
                    }
                }
            }
        }
        let roles = collectives::roles(self.kind).len() as BufferId;
        let lands: Vec<((Rank, Phys), Landing)> =
            self.landings.iter().map(|(k, v)| (*k, *v)).collect();
        for ((r, land), info) in lands {
            let Some([reader]) = readers.get(&(r, land)).map(Vec::as_slice) else {
                continue;
            };
            let Some(Some(Step {
                op: Op::Copy { src, dst },
                ..
            })) = self.ranks[r as usize].get(*reader).cloned()
            else {
                continue;
            };
            let out = Phys {
                buffer: dst.buffer,
                chunk: dst.first,
            };
            let (q, pi) = info.put;
            let single = matches!(
                &self.ranks[q as usize][pi],
                Some(Step { op: Op::Put { dst: d, .. }, .. }) if d.count == 1
            );
            if src.count != 1
                || dst.buffer >= roles
                || !single
                || touched.get(&(r, dst.buffer, dst.first)) != Some(&1)
                || !self.same_extent(land, out)
            {
                continue;
            }
            if let Some(Some(Step {
                op: Op::Put { dst: d, .. },
                ..
            })) = self.ranks[q as usize].get_mut(pi)
            {
                *d = dst;
            }
            self.ranks[r as usize][*reader] = None;
        }
    }

    fn run(mut self, events: &[Event]) -> Result<Built, TransposeError> {
        for &ev in events {
            self.undo(ev)?;
        }
        self.finish();
        // Drop removed steps, renumbering the recorded reads.
        let mut renumber: Vec<Vec<usize>> = Vec::with_capacity(self.ranks.len());
        let mut ranks: Vec<Vec<Step>> = Vec::with_capacity(self.ranks.len());
        for steps in self.ranks {
            let mut map = Vec::with_capacity(steps.len());
            let mut kept = Vec::with_capacity(steps.len());
            for s in steps {
                map.push(kept.len());
                if let Some(s) = s {
                    kept.push(s);
                }
            }
            renumber.push(map);
            ranks.push(kept);
        }
        let at = |(r, i): (Rank, usize)| StepRef {
            rank: r,
            index: renumber[r as usize][i] as u32,
        };
        let reads = self.reads.iter().map(|&(a, b)| (at(a), at(b))).collect();
        let (buffers, buffer_spans) = compact_buffers(
            &mut ranks,
            self.buffers,
            self.buffer_spans,
            collectives::roles(self.kind).len(),
        );
        let fwd = self.fwd;
        let p = fwd.group_size as usize;
        let prog = Program {
            schedule: derived_name(&fwd.schedule),
            collective: self.kind,
            group_size: fwd.group_size,
            params: dual_params(fwd.collective, &fwd.params),
            hierarchy: fwd.hierarchy,
            size_vars: collectives::size_vars(self.kind),
            buffers,
            buffer_spans,
            signals: self.signals,
            signal_spans: self.signal_spans,
            ranks,
            entry_signals: vec![Vec::new(); p],
            exit_signals: vec![Vec::new(); p],
            duals: Vec::new(),
            header_span: fwd.header_span,
            declared: None,
        };
        Ok(Built { prog, reads })
    }
}

/// Sizes chunk lengths are compared at: every size variable set to each value up to a bound
/// that covers every residue and the small sizes where chunks of a ceil split run empty (2·K²
/// for K chunks, at most 4096), and a few large ones. The comparison picks the form of the
/// derived program; the verifier proves its bounds for every size.
fn samples(fwd: &Program) -> Vec<LaunchSizes> {
    let k = fwd
        .buffers
        .iter()
        .map(|b| u64::from(b.chunks))
        .max()
        .unwrap_or(1);
    let dense = (2 * k * k + 64).min(4096);
    (1..=dense)
        .chain([10_007, 65_536, 1 << 20, (1 << 20) + 1, 1 << 30])
        .map(|n| LaunchSizes {
            vars: fwd.size_vars.iter().map(|v| (v.name.clone(), n)).collect(),
            counts: None,
        })
        .collect()
}

/// Drop the scratch buffers no step uses (landing slots replaced by direct puts), renumbering
/// the regions; the first `roles` buffers are kept.
fn compact_buffers(
    ranks: &mut [Vec<Step>],
    buffers: Vec<BufferDecl>,
    spans: Vec<Span>,
    roles: usize,
) -> (Vec<BufferDecl>, Vec<Span>) {
    let mut used = vec![false; buffers.len()];
    used.iter_mut().take(roles).for_each(|u| *u = true);
    for s in ranks.iter().flatten() {
        for a in graph::accesses(&s.op, 0) {
            used[a.buffer as usize] = true;
        }
    }
    let mut map = vec![0 as BufferId; buffers.len()];
    let (mut kept, mut kept_spans) = (Vec::new(), Vec::new());
    for (i, (b, sp)) in buffers.into_iter().zip(spans).enumerate() {
        if used[i] {
            map[i] = kept.len() as BufferId;
            kept.push(b);
            kept_spans.push(sp);
        }
    }
    let fix = |r: &mut Region| r.buffer = map[r.buffer as usize];
    for s in ranks.iter_mut().flatten() {
        match &mut s.op {
            Op::Put { src, dst, .. } | Op::Get { src, dst, .. } | Op::Copy { src, dst } => {
                fix(src);
                fix(dst);
            }
            Op::Reduce { dst, srcs } => {
                fix(dst);
                srcs.iter_mut().for_each(fix);
            }
            _ => {}
        }
    }
    (kept, kept_spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::library::Library;

    const ALLGATHER: &str = "
schedule ag implements allgather(in: [1], out: [P]) dual derived {
    signal done;
    out[rank] = copy(in);
    for i in 1..P {
        let p = (rank + i) % P;
        put in -> out[rank] @ p, signal done @ p += 1;
    }
    wait done >= P - 1;
}
schedule rd(root in 0..P) implements reduce(x: [1]) dual derived {
    scratch land: [P] of x;
    signal arrived;
    if rank == root {
        wait arrived >= P - 1;
        x = reduce(land[0..rank], x, land[rank + 1..P]);
    } else {
        put x -> land[rank] @ root, signal arrived @ root += 1;
    }
}
schedule mm implements allgather_matmul(a: [1], b: [1], g: [P], c: [P]) dual derived {
    g[rank] = copy(a);
    compute c[rank] = matmul(a, b);
}
";

    fn lib() -> Library {
        let mut lib = Library::new();
        lib.add_source("t.sched", ALLGATHER).expect("loads");
        lib
    }

    fn user_steps(prog: &Program, r: usize) -> Vec<&Op> {
        prog.ranks[r]
            .iter()
            .map(|s| &s.op)
            .filter(|op| match op {
                Op::Wait { slot, .. } => !graph::is_credit_slot(prog, *slot),
                _ => true,
            })
            .collect()
    }

    /// The gradient of a push all-gather is a push reduce-scatter: every rank sends block p of
    /// its input to rank p, waits once for all P - 1 arrivals and folds in rank order.
    #[test]
    fn a_push_allgather_transposes_to_a_push_reduce_scatter() {
        let lib = lib();
        let fwd = lib.instantiate("ag", 4, &BTreeMap::new()).expect("forward");
        assert_eq!(
            fwd.duals[0].0,
            DualDecl::Schedule {
                name: "ag.dual".into(),
                params: BTreeMap::new()
            }
        );
        let bwd = lib
            .instantiate("ag.dual", 4, &BTreeMap::new())
            .expect("derived");
        assert_eq!(bwd.collective, CollectiveKind::ReduceScatter);
        assert_eq!(bwd.schedule, "ag.dual");
        // Roles, then one landing buffer of P chunks (as a hand-written one).
        let names: Vec<&str> = bwd.buffers.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["in", "out", "land_out#0"]);
        for r in 0..4u32 {
            let steps = user_steps(&bwd, r as usize);
            let puts: Vec<(u32, Rank)> = steps
                .iter()
                .filter_map(|op| match op {
                    Op::Put { src, peer, .. } => Some((src.first, *peer)),
                    _ => None,
                })
                .collect();
            // Block p of the gradient goes to p: the forward's put p -> r reversed.
            let mut want: Vec<(u32, Rank)> = (1..4).map(|i| ((r + i) % 4, (r + i) % 4)).collect();
            let mut got = puts.clone();
            want.sort();
            got.sort();
            assert_eq!(got, want, "rank {r}");
            let waits = steps
                .iter()
                .filter(|op| matches!(op, Op::Wait { .. }))
                .count();
            assert_eq!(waits, 1, "rank {r}: one wait for every arrival");
            let Some(Op::Reduce { dst, srcs }) = steps.last() else {
                panic!("rank {r} ends with its fold: {steps:?}");
            };
            assert_eq!(dst.buffer, 1);
            assert_eq!(srcs.len(), 4);
            // Its own block (from `in`) is folded at its rank's place.
            let own = srcs.iter().position(|s| s.buffer == 0).expect("own block");
            assert_eq!(own, r as usize);
        }
        crate::verify::verify_program(&bwd).expect("the derived dual verifies");
        crate::verify::verify_dual(&fwd, &bwd, Span::default()).expect("it is the adjoint");
    }

    /// A reduce to the root transposes to a broadcast whose puts land straight in `x`.
    #[test]
    fn a_reduce_transposes_to_a_broadcast_without_landing_slots() {
        let lib = lib();
        let params = BTreeMap::from([("root".to_string(), 1)]);
        let bwd = lib.instantiate("rd.dual", 3, &params).expect("derived");
        assert_eq!(bwd.collective, CollectiveKind::Broadcast);
        assert_eq!(bwd.params, params);
        assert_eq!(bwd.buffers.len(), 1, "{:?}", bwd.buffers);
        let root = user_steps(&bwd, 1);
        assert_eq!(root.len(), 2, "{root:?}");
        assert!(root
            .iter()
            .all(|op| matches!(op, Op::Put { dst, .. } if dst.buffer == 0)));
        for r in [0, 2] {
            let steps = user_steps(&bwd, r);
            assert!(matches!(steps.as_slice(), [Op::Wait { .. }]), "{steps:?}");
        }
        crate::verify::verify_program(&bwd).expect("verifies");
    }

    /// A ring's rounds cannot share one counter: each incoming put gets its own slot.
    #[test]
    fn a_ring_gets_one_slot_per_incoming_put() {
        let lib = crate::pipeline::standard_library();
        let fwd = lib
            .instantiate("allreduce_ring", 4, &BTreeMap::new())
            .expect("forward");
        let bwd = transpose(&fwd, Span::default()).expect("derived");
        assert!(bwd.signals.iter().any(|s| s.name == "arrived[1]"));
        crate::verify::verify_program(&bwd).expect("verifies");
        crate::verify::verify_dual(&fwd, &bwd, Span::default()).expect("adjoint");
    }

    #[test]
    fn sendrecv_params_swap_and_swap_back() {
        let p = BTreeMap::from([("src".to_string(), 0), ("dst".to_string(), 3)]);
        let d = dual_params(CollectiveKind::Sendrecv, &p);
        assert_eq!(d["src"], 3);
        assert_eq!(d["dst"], 0);
        assert_eq!(dual_params(CollectiveKind::Sendrecv, &d), p);
        assert_eq!(forward_name("x.dual"), Some("x"));
        assert_eq!(forward_name(".dual"), None);
    }

    #[test]
    fn a_matmul_forward_is_refused_with_its_reason() {
        let lib = lib();
        let d = lib
            .instantiate("mm.dual", 2, &BTreeMap::new())
            .expect_err("matmul has no derived transpose");
        assert_eq!(d[0].code, E_UNTRANSPOSABLE);
        assert!(d[0].message.contains("operand"), "{}", d[0].message);
    }
}
