//! Symbolic execution over unit inputs, shared by the postcondition and the dual rule.
//!
//! Every chunk of every rank holds a [`Val`]: unspecified (never written, or scratch), a linear
//! combination of [`Term`]s with multiplicities (a unit input chunk `(rank, buffer, chunk)`
//! after a chain of matmul operators), or the concatenation of several such values (a
//! multi-chunk region copied into one chunk). Reduce adds its operands' combinations; copy, cast
//! and put move values (element classes do not change the value); matmul appends the operator
//! `matmul(·, b)` to every term of its left operand.

use crate::ir::graph::{accesses, hostcoll_instances, Event, HappensBefore};
use crate::ir::{Program, StepRef};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use symsched_plan::{BufferId, HostCollOp, Op, Rank, Region};

/// A unit input: chunk `chunk` of buffer `buffer` on rank `rank`.
pub type Atom = (Rank, BufferId, u32);

/// A linear operator applied to a term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpLabel {
    /// Right multiplication by `count` chunks of `buffer` of `rank` from `first`
    /// (`transposed`: by their transpose).
    RightMul {
        rank: Rank,
        buffer: BufferId,
        first: u32,
        count: u32,
        transposed: bool,
    },
    /// Right multiplication by something that is not a plain input (kept for messages).
    Opaque(String),
}

/// A unit input after a chain of operators (applied in order).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term {
    pub atom: Atom,
    pub ops: Vec<OpLabel>,
}

/// A linear combination: term → multiplicity.
pub type Lin = BTreeMap<Term, u32>;

/// How a linear value was combined, for W0404: the runtime promises reductions bit-identical
/// to the sequential fold `((x@0 ⊕ x@1) ⊕ x@2) ⊕ …`, which only a left-deep chain of single
/// contributions in ascending origin-rank order reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Not combined: one contribution (possibly after matmuls) from this origin rank.
    Leaf(Rank),
    /// A left-deep fold of single contributions in strictly ascending origin rank, the last
    /// from this rank.
    Ascending(Rank),
    /// Any other combination (a partial sum added to a partial sum, a descending or repeated
    /// origin, a framework reduction whose order is the library's).
    Other,
}

impl Fold {
    /// The fold of `acc ⊕ x`.
    fn then_add(self, x: Fold) -> Fold {
        match (self, x) {
            (Fold::Leaf(a) | Fold::Ascending(a), Fold::Leaf(b)) if b > a => Fold::Ascending(b),
            _ => Fold::Other,
        }
    }

    /// Whether the value is the sequential rank-order fold of its contributions.
    pub fn in_rank_order(self) -> bool {
        self != Fold::Other
    }
}

/// The symbolic contents of one chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Unspecified,
    /// Shared: moving a value (put, copy) must not copy its terms.
    Lin(Rc<Lin>, Fold),
    Concat(Vec<Val>),
}

impl Val {
    pub fn unit(atom: Atom) -> Val {
        Val::Lin(
            Rc::new(
                [(
                    Term {
                        atom,
                        ops: Vec::new(),
                    },
                    1,
                )]
                .into_iter()
                .collect(),
            ),
            Fold::Leaf(atom.0),
        )
    }

    /// The chunk-sized pieces, concatenations flattened; `None` for unspecified pieces.
    pub fn flatten(&self) -> Vec<Option<Rc<Lin>>> {
        match self {
            Val::Unspecified => vec![None],
            Val::Lin(l, _) => vec![Some(l.clone())],
            Val::Concat(v) => v.iter().flat_map(Val::flatten).collect(),
        }
    }

    /// Whether every chunk-sized piece was folded in ascending origin-rank order (unspecified
    /// pieces count as in order: the postcondition reports them).
    pub fn in_rank_order(&self) -> bool {
        match self {
            Val::Unspecified => true,
            Val::Lin(_, f) => f.in_rank_order(),
            Val::Concat(v) => v.iter().all(Val::in_rank_order),
        }
    }

    /// The same value, marked as combined in an order the verifier does not control.
    fn unordered(self) -> Val {
        match self {
            Val::Lin(l, _) => Val::Lin(l, Fold::Other),
            Val::Concat(v) => Val::Concat(v.into_iter().map(Val::unordered).collect()),
            Val::Unspecified => Val::Unspecified,
        }
    }

    fn add(&self, other: &Val) -> Val {
        match (self, other) {
            (Val::Lin(a, fa), Val::Lin(b, fb)) => {
                let mut s = Lin::clone(a);
                for (t, m) in b.iter() {
                    *s.entry(t.clone()).or_insert(0) += m;
                }
                Val::Lin(Rc::new(s), fa.then_add(*fb))
            }
            (Val::Concat(a), Val::Concat(b)) if a.len() == b.len() => {
                Val::Concat(a.iter().zip(b).map(|(x, y)| x.add(y)).collect())
            }
            _ => Val::Unspecified,
        }
    }

    fn then(&self, op: &OpLabel) -> Val {
        match self {
            Val::Unspecified => Val::Unspecified,
            Val::Lin(l, f) => Val::Lin(
                Rc::new(
                    l.iter()
                        .map(|(t, m)| {
                            let mut t = t.clone();
                            t.ops.push(op.clone());
                            (t, *m)
                        })
                        .collect(),
                ),
                *f,
            ),
            Val::Concat(v) => Val::Concat(v.iter().map(|x| x.then(op)).collect()),
        }
    }
}

/// The contents of every chunk of every rank: `state[rank][buffer][chunk]`.
pub type State = Vec<Vec<Vec<Val>>>;

/// Initial state: input and in-out roles hold their unit inputs, everything else unspecified.
pub fn initial(prog: &Program) -> State {
    use symsched_plan::BufferRole::*;
    (0..prog.ranks.len() as Rank)
        .map(|r| {
            prog.buffers
                .iter()
                .enumerate()
                .map(|(b, decl)| {
                    (0..decl.chunks)
                        .map(|c| match decl.role {
                            Input | InOut => Val::unit((r, b as BufferId, c)),
                            Output | Scratch => Val::Unspecified,
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

fn read(state: &State, rank: Rank, r: &Region) -> Vec<Val> {
    state[rank as usize][r.buffer as usize][r.first as usize..(r.first + r.count) as usize].to_vec()
}

/// Write `vals` into `r`: chunk by chunk when the counts match, otherwise a single destination
/// chunk receives the concatenation, or a single concatenated value is split again.
fn write(state: &mut State, rank: Rank, r: &Region, vals: Vec<Val>) {
    let n = r.count as usize;
    let vals = if vals.len() == n {
        vals
    } else if n == 1 {
        vec![Val::Concat(vals)]
    } else {
        match vals.as_slice() {
            [Val::Concat(parts)] if parts.len() == n => parts.clone(),
            _ => vec![Val::Unspecified; n],
        }
    };
    let dst = &mut state[rank as usize][r.buffer as usize];
    for (i, v) in vals.into_iter().enumerate() {
        dst[r.first as usize + i] = v;
    }
}

/// The operator label for right-multiplying by region `b` of `rank` given its contents.
fn right_mul_label(vals: &[Val]) -> OpLabel {
    let atoms: Option<Vec<Atom>> = vals
        .iter()
        .map(|v| match v {
            Val::Lin(l, _) if l.len() == 1 => {
                let (t, m) = l.iter().next().expect("one term");
                (*m == 1 && t.ops.is_empty()).then_some(t.atom)
            }
            _ => None,
        })
        .collect();
    if let Some(atoms) = atoms {
        if let Some(&(rank, buffer, first)) = atoms.first() {
            let contiguous = atoms
                .iter()
                .enumerate()
                .all(|(i, a)| *a == (rank, buffer, first + i as u32));
            if contiguous {
                return OpLabel::RightMul {
                    rank,
                    buffer,
                    first,
                    count: atoms.len() as u32,
                    transposed: false,
                };
            }
        }
    }
    OpLabel::Opaque(format!("{vals:?}").chars().take(60).collect())
}

/// The final state of an execution and, per location, the step that wrote it last.
pub struct Outcome {
    pub state: State,
    pub writer: HashMap<Atom, StepRef>,
}

/// Execute `prog` in the topological order of `hb`'s events: a put reads its source when it is
/// issued and writes its destination at its arrival.
pub fn execute(prog: &Program, hb: &HappensBefore) -> Outcome {
    let mut state = initial(prog);
    let mut writer = HashMap::new();
    let (instances, of_step) = hostcoll_instances(prog);
    // Results of each host collective, computed when its first member step runs (all members'
    // earlier steps happen before every member's hostcoll step).
    let mut pending: HashMap<usize, HashMap<Rank, Vec<Val>>> = HashMap::new();
    // Values of issued puts whose data has not arrived yet.
    let mut in_flight: HashMap<StepRef, Vec<Val>> = HashMap::new();
    for &ev in &hb.events {
        let at = ev.step();
        let me = at.rank;
        if let Event::Arrival(_) = ev {
            if let Op::Put { dst, peer, .. } = &prog.step(at).op {
                let v = in_flight
                    .remove(&at)
                    .unwrap_or_else(|| vec![Val::Unspecified; dst.count as usize]);
                write(&mut state, *peer, dst, v);
                for c in dst.first..dst.first + dst.count {
                    writer.insert((*peer, dst.buffer, c), at);
                }
            }
            continue;
        }
        match &prog.step(at).op {
            Op::Put { src, .. } => {
                in_flight.insert(at, read(&state, me, src));
            }
            Op::Get { src, dst, peer } => {
                let v = read(&state, *peer, src);
                write(&mut state, me, dst, v);
            }
            Op::Copy { src, dst } | Op::Cast { src, dst } => {
                let v = read(&state, me, src);
                write(&mut state, me, dst, v);
            }
            Op::Reduce { dst, srcs } => {
                let n = dst.count as usize;
                // A multi-chunk operand of a one-chunk reduce is the range's chunks in order.
                let ops: Vec<Vec<Val>> = srcs
                    .iter()
                    .flat_map(|s| {
                        let v = read(&state, me, s);
                        if n == 1 && v.len() > 1 {
                            v.into_iter().map(|x| vec![x]).collect()
                        } else {
                            vec![v]
                        }
                    })
                    .collect();
                let v = if ops.iter().all(|o| o.len() == n) && !ops.is_empty() {
                    (0..n)
                        .map(|i| {
                            ops[1..]
                                .iter()
                                .fold(ops[0][i].clone(), |acc, o| acc.add(&o[i]))
                        })
                        .collect()
                } else {
                    vec![Val::Unspecified; n]
                };
                write(&mut state, me, dst, v);
            }
            Op::Matmul { c, a, b } => {
                let label = right_mul_label(&read(&state, me, b));
                let v: Vec<Val> = read(&state, me, a).iter().map(|x| x.then(&label)).collect();
                write(&mut state, me, c, v);
            }
            Op::HostColl { op, region, .. } => {
                let id = of_step[&at];
                let results = pending.entry(id).or_insert_with(|| {
                    hostcoll_result(&state, &instances[id].members, *op, region)
                });
                if let Some(v) = results.remove(&me) {
                    write(&mut state, me, region, v);
                }
            }
            Op::Signal { .. } | Op::Wait { .. } => {}
        }
        for a in accesses(&prog.step(at).op, me)
            .iter()
            .filter(|a| a.write && !a.on_arrival)
        {
            for c in a.first..a.first + a.count {
                writer.insert((a.rank, a.buffer, c), at);
            }
        }
    }
    Outcome { state, writer }
}

/// What each member's region holds after a framework collective. Regions are split into one
/// part per member (in member order) for allgather and reduce_scatter; broadcast's root is the
/// first member.
fn hostcoll_result(
    state: &State,
    members: &[Rank],
    op: HostCollOp,
    region: &Region,
) -> HashMap<Rank, Vec<Val>> {
    let vals: Vec<Vec<Val>> = members.iter().map(|&m| read(state, m, region)).collect();
    let n = region.count as usize;
    let k = members.len().max(1);
    let part = n / k;
    let split_ok = part * k == n;
    // The library's reduction order is its own: a sum of several members is not a fold the
    // verifier can vouch for (W0404).
    let sum = |range: std::ops::Range<usize>| -> Vec<Val> {
        range
            .map(|i| {
                let v = vals[1..]
                    .iter()
                    .fold(vals[0][i].clone(), |a, v| a.add(&v[i]));
                if k > 1 {
                    v.unordered()
                } else {
                    v
                }
            })
            .collect()
    };
    members
        .iter()
        .enumerate()
        .map(|(mi, &m)| {
            let v = match op {
                HostCollOp::Allreduce => sum(0..n),
                HostCollOp::Broadcast => vals[0].clone(),
                HostCollOp::Allgather if split_ok => {
                    (0..n).map(|i| vals[i / part.max(1)][i].clone()).collect()
                }
                HostCollOp::ReduceScatter if split_ok => {
                    let mut v = vec![Val::Unspecified; n];
                    let mine = sum(mi * part..(mi + 1) * part);
                    for (j, x) in mine.into_iter().enumerate() {
                        v[mi * part + j] = x;
                    }
                    v
                }
                _ => vec![Val::Unspecified; n],
            };
            (m, v)
        })
        .collect()
}
