//! Symbolic execution over unit inputs, shared by the postcondition, the replica rule, the fold
//! order and the dual rule.
//!
//! Every chunk of every rank holds one expression node ([`Node`]) describing *how* its value was
//! computed: a unit input chunk `(rank, buffer, chunk)`, one reduce (a left fold of its operands,
//! accumulated in `acc` and rounded once into the destination's element class), a conversion
//! into another element class (a cast, or a put or copy between classes), a block matmul, a
//! framework reduction, or the concatenation of several values (a multi-chunk region moved into
//! one chunk). Nodes are hash-consed in an [`Exprs`] arena, so two chunks hold the same node id
//! exactly when their values were computed by the same expression — the same operands, in the
//! same order, rounded at the same points — which is what makes them bit-identical (the replica
//! rule, E0406) and what the fold order (W0404, the plan's fold table) is read from.
//!
//! The linear combination of unit inputs a node stands for ([`Exprs::lin`], multiplicities per
//! operator chain) is derived on demand for the postcondition and the dual rule.
//!
//! Cost: a chunk is one `u32` (plus the step that last wrote it, for messages); a value moved by
//! put or copy is the same node, so an all-gather of a reduced chunk stores it once.

use crate::ir::graph::{hostcoll_instances, Event, HappensBefore};
use crate::ir::{Program, StepRef};
use indexmap::IndexSet;
use std::collections::HashMap;
use std::rc::Rc;
use symsched_plan::{BufferId, ElemClass, HostCollOp, Op, Rank, Region};

/// A unit input: chunk `chunk` of buffer `buffer` on rank `rank`.
pub type Atom = (Rank, BufferId, u32);

/// Index of a node in an [`Exprs`] arena.
pub type NodeId = u32;

/// The node of a chunk whose value nothing specifies (never written, or computed from such).
pub const UNSPECIFIED: NodeId = 0;

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

/// A linear combination: each term once, sorted, with its multiplicity.
pub type Lin = Vec<(Term, u32)>;

/// How one value was computed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    Unspecified,
    /// A unit input, in the element class of its buffer.
    Atom(Atom),
    /// One reduce step: `ops` folded left in this order with the launch's reduce op,
    /// accumulated in `acc` and rounded once into `class`.
    Fold {
        class: ElemClass,
        ops: Box<[NodeId]>,
    },
    /// A conversion into `class` (round to nearest even).
    Convert {
        class: ElemClass,
        of: NodeId,
    },
    /// `of` right-multiplied by `by`, stored in `class`.
    MatMul {
        of: NodeId,
        by: OpLabel,
        class: ElemClass,
    },
    /// Several chunk-sized values in one chunk.
    Concat(Box<[NodeId]>),
    /// A reduction done by the framework's collective library (host collective) over its
    /// members' values; its order is the library's own, so it is no fold the verifier vouches for.
    Library {
        ops: Box<[NodeId]>,
    },
}

/// How a node combines its contributions, for the fold-order findings (W0404): the runtime's
/// reference is the sequential fold `((x@0 ⊕ x@1) ⊕ x@2) ⊕ …`, which only a left-deep chain of
/// single contributions in ascending origin rank reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// One contribution (possibly converted or multiplied) from this origin rank.
    Leaf(Rank),
    /// A left-deep fold of single contributions in strictly ascending origin rank, the last
    /// from this rank.
    Ascending(Rank),
    /// Any other combination.
    Other,
}

impl Order {
    fn then_add(self, x: Order) -> Order {
        match (self, x) {
            (Order::Leaf(a) | Order::Ascending(a), Order::Leaf(b)) if b > a => Order::Ascending(b),
            _ => Order::Other,
        }
    }
}

/// The hash-consed expression arena of one execution.
pub struct Exprs {
    nodes: IndexSet<Node>,
    class: Vec<ElemClass>,
    /// The step that first computed each node (inputs and unspecified: none).
    creator: Vec<Option<StepRef>>,
    /// Element class of each buffer, for atoms.
    buffer_class: Vec<ElemClass>,
    lin: Vec<Option<Rc<Lin>>>,
    order: Vec<Option<Order>>,
}

impl Exprs {
    fn new(buffer_class: Vec<ElemClass>) -> Exprs {
        let mut e = Exprs {
            nodes: IndexSet::new(),
            class: Vec::new(),
            creator: Vec::new(),
            buffer_class,
            lin: Vec::new(),
            order: Vec::new(),
        };
        let id = e.intern(Node::Unspecified, ElemClass::Data, None);
        debug_assert_eq!(id, UNSPECIFIED);
        e
    }

    fn intern(&mut self, n: Node, class: ElemClass, by: Option<StepRef>) -> NodeId {
        let (i, fresh) = self.nodes.insert_full(n);
        if fresh {
            self.class.push(class);
            self.creator.push(by);
        }
        i as NodeId
    }

    /// The node behind an id.
    pub fn node(&self, id: NodeId) -> &Node {
        self.nodes
            .get_index(id as usize)
            .unwrap_or(&Node::Unspecified)
    }

    /// The element class a node's value is stored in.
    pub fn class(&self, id: NodeId) -> ElemClass {
        self.class[id as usize]
    }

    /// The step that first computed this node (`None` for unit inputs).
    pub fn creator(&self, id: NodeId) -> Option<StepRef> {
        self.creator[id as usize]
    }

    /// Number of distinct nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    fn atom(&mut self, a: Atom) -> NodeId {
        let class = self
            .buffer_class
            .get(a.1 as usize)
            .copied()
            .unwrap_or(ElemClass::Data);
        self.intern(Node::Atom(a), class, None)
    }

    /// `v` stored into a location of `class`: converted when the classes differ.
    fn convert(&mut self, v: NodeId, class: ElemClass, by: StepRef) -> NodeId {
        if v == UNSPECIFIED || self.class(v) == class {
            return v;
        }
        if let Node::Concat(parts) = self.node(v) {
            let parts = parts.clone();
            let conv: Box<[NodeId]> = parts.iter().map(|&x| self.convert(x, class, by)).collect();
            return self.intern(Node::Concat(conv), class, Some(by));
        }
        self.intern(Node::Convert { class, of: v }, class, Some(by))
    }

    /// One reduce of `ops` (in order) into a location of `class`.
    fn fold(&mut self, class: ElemClass, ops: Vec<NodeId>, by: StepRef) -> NodeId {
        if ops.is_empty() || ops.contains(&UNSPECIFIED) {
            return UNSPECIFIED;
        }
        let concat_len = |e: &Exprs, x: NodeId| match e.node(x) {
            Node::Concat(p) => Some(p.len()),
            _ => None,
        };
        match concat_len(self, ops[0]) {
            Some(m) => {
                if ops.iter().any(|&x| concat_len(self, x) != Some(m)) {
                    return UNSPECIFIED;
                }
                let parts: Vec<Vec<NodeId>> = ops
                    .iter()
                    .map(|&x| match self.node(x) {
                        Node::Concat(p) => p.to_vec(),
                        _ => Vec::new(),
                    })
                    .collect();
                let folded: Box<[NodeId]> = (0..m)
                    .map(|i| self.fold(class, parts.iter().map(|p| p[i]).collect(), by))
                    .collect();
                self.intern(Node::Concat(folded), class, Some(by))
            }
            None if ops.iter().any(|&x| concat_len(self, x).is_some()) => UNSPECIFIED,
            // A one-operand reduce is a conversion (widening to `acc` is exact).
            None if ops.len() == 1 => self.convert(ops[0], class, by),
            None => self.intern(
                Node::Fold {
                    class,
                    ops: ops.into_boxed_slice(),
                },
                class,
                Some(by),
            ),
        }
    }

    fn matmul(&mut self, v: NodeId, by_op: &OpLabel, class: ElemClass, by: StepRef) -> NodeId {
        match self.node(v) {
            Node::Unspecified => UNSPECIFIED,
            Node::Concat(parts) => {
                let parts = parts.clone();
                let m: Box<[NodeId]> = parts
                    .iter()
                    .map(|&x| self.matmul(x, by_op, class, by))
                    .collect();
                self.intern(Node::Concat(m), class, Some(by))
            }
            _ => self.intern(
                Node::MatMul {
                    of: v,
                    by: by_op.clone(),
                    class,
                },
                class,
                Some(by),
            ),
        }
    }

    fn concat(&mut self, parts: Vec<NodeId>, by: StepRef) -> NodeId {
        let class = parts
            .first()
            .map(|&p| self.class(p))
            .unwrap_or(ElemClass::Data);
        self.intern(Node::Concat(parts.into_boxed_slice()), class, Some(by))
    }

    fn library(&mut self, ops: Vec<NodeId>, by: StepRef) -> NodeId {
        if ops.contains(&UNSPECIFIED) {
            return UNSPECIFIED;
        }
        let class = self.class(ops[0]);
        self.intern(
            Node::Library {
                ops: ops.into_boxed_slice(),
            },
            class,
            Some(by),
        )
    }

    /// The chunk-sized pieces of a value (a concatenation flattened), [`UNSPECIFIED`] for
    /// unspecified pieces.
    pub fn pieces(&self, id: NodeId) -> Vec<NodeId> {
        match self.node(id) {
            Node::Concat(parts) => parts.iter().flat_map(|&p| self.pieces(p)).collect(),
            _ => vec![id],
        }
    }

    /// Children of a node, in order.
    pub fn children(&self, id: NodeId) -> Vec<NodeId> {
        match self.node(id) {
            Node::Unspecified | Node::Atom(_) => Vec::new(),
            Node::Fold { ops, .. } | Node::Concat(ops) | Node::Library { ops } => ops.to_vec(),
            Node::Convert { of, .. } | Node::MatMul { of, .. } => vec![*of],
        }
    }

    /// Nodes reachable from `roots`, children before parents (each once).
    pub fn postorder(&self, roots: &[NodeId]) -> Vec<NodeId> {
        let mut seen = vec![false; self.len()];
        let mut out = Vec::new();
        // Explicit stack: a pipelined chain can be thousands of reduces deep.
        let mut stack: Vec<(NodeId, bool)> = roots.iter().rev().map(|&r| (r, false)).collect();
        while let Some((id, expanded)) = stack.pop() {
            if expanded {
                out.push(id);
                continue;
            }
            if seen[id as usize] {
                continue;
            }
            seen[id as usize] = true;
            stack.push((id, true));
            for c in self.children(id).into_iter().rev() {
                if !seen[c as usize] {
                    stack.push((c, false));
                }
            }
        }
        out
    }

    fn ensure_caches(&mut self) {
        self.lin.resize(self.len(), None);
        self.order.resize(self.len(), None);
    }

    /// The linear combination of unit inputs a single (non-concatenated) piece stands for;
    /// `None` for an unspecified value or a concatenation.
    pub fn lin(&mut self, id: NodeId) -> Option<Rc<Lin>> {
        self.ensure_caches();
        for n in self.postorder(&[id]) {
            if self.lin[n as usize].is_some() {
                continue;
            }
            let l = match self.node(n).clone() {
                Node::Unspecified | Node::Concat(_) => None,
                Node::Atom(a) => Some(vec![(
                    Term {
                        atom: a,
                        ops: Vec::new(),
                    },
                    1,
                )]),
                Node::Convert { of, .. } => self.lin[of as usize].as_deref().cloned(),
                Node::MatMul { of, by, .. } => self.lin[of as usize].as_ref().map(|l| {
                    let mut v: Lin = l
                        .iter()
                        .map(|(t, m)| {
                            let mut t = t.clone();
                            t.ops.push(by.clone());
                            (t, *m)
                        })
                        .collect();
                    v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                    v
                }),
                Node::Fold { ops, .. } | Node::Library { ops } => {
                    let parts: Option<Vec<Rc<Lin>>> =
                        ops.iter().map(|&o| self.lin[o as usize].clone()).collect();
                    parts.map(|p| sum(&p))
                }
            };
            // Non-linear nodes are cached as empty: only a concatenation has them as
            // children, and it is not linear itself.
            self.lin[n as usize] = Some(Rc::new(l.unwrap_or_default()));
        }
        match self.node(id) {
            Node::Unspecified | Node::Concat(_) => None,
            _ => self.lin[id as usize].clone(),
        }
    }

    /// How a node combines its contributions (conversions do not change the order).
    pub fn order(&mut self, id: NodeId) -> Order {
        self.ensure_caches();
        for n in self.postorder(&[id]) {
            if self.order[n as usize].is_some() {
                continue;
            }
            let o = match self.node(n) {
                Node::Unspecified => Order::Leaf(0),
                Node::Atom(a) => Order::Leaf(a.0),
                Node::Convert { of, .. } | Node::MatMul { of, .. } => {
                    self.order[*of as usize].unwrap_or(Order::Other)
                }
                Node::Fold { ops, .. } => {
                    let mut it = ops
                        .iter()
                        .map(|&o| self.order[o as usize].unwrap_or(Order::Other));
                    let first = it.next().unwrap_or(Order::Other);
                    it.fold(first, Order::then_add)
                }
                Node::Library { ops } if ops.len() == 1 => {
                    self.order[ops[0] as usize].unwrap_or(Order::Other)
                }
                Node::Library { .. } => Order::Other,
                Node::Concat(parts) => {
                    if parts
                        .iter()
                        .all(|&p| self.order[p as usize] != Some(Order::Other))
                    {
                        Order::Leaf(0)
                    } else {
                        Order::Other
                    }
                }
            };
            self.order[n as usize] = Some(o);
        }
        self.order[id as usize].unwrap_or(Order::Other)
    }

    /// The node below `id` where the fold order first leaves the sequential rank-order fold:
    /// the reduce (or framework reduction) whose operands are each in order but whose
    /// combination is not.
    pub fn first_out_of_order(&mut self, id: NodeId) -> Option<NodeId> {
        if self.order(id) != Order::Other {
            return None;
        }
        let mut at = id;
        loop {
            let next = self
                .children(at)
                .into_iter()
                .find(|&c| self.order(c) == Order::Other);
            match next {
                Some(c) => at = c,
                None => return Some(at),
            }
        }
    }
}

/// The sum of linear combinations.
fn sum(parts: &[Rc<Lin>]) -> Lin {
    let mut all: Lin = parts.iter().flat_map(|l| l.iter().cloned()).collect();
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut out: Lin = Vec::with_capacity(all.len());
    for (t, m) in all {
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 += m,
            _ => out.push((t, m)),
        }
    }
    out
}

/// A unit input as a linear combination.
pub fn unit(atom: Atom) -> Lin {
    vec![(
        Term {
            atom,
            ops: Vec::new(),
        },
        1,
    )]
}

/// The multiplicity of `t` in `l`.
pub fn count_of(l: &Lin, t: &Term) -> u32 {
    l.binary_search_by(|(x, _)| x.cmp(t))
        .map(|i| l[i].1)
        .unwrap_or(0)
}

/// The final state of an execution: every chunk's node, and the step that wrote it last.
pub struct Outcome {
    pub exprs: Exprs,
    /// First index of (rank, buffer) in `state`: `offsets[rank * buffers + buffer]`.
    offsets: Vec<usize>,
    buffers: usize,
    state: Vec<NodeId>,
    /// Last writer of each chunk, `u32::MAX` rank for none.
    writer: Vec<StepRef>,
}

const NO_WRITER: StepRef = StepRef {
    rank: u32::MAX,
    index: u32::MAX,
};

impl Outcome {
    fn new(prog: &Program) -> Outcome {
        let nb = prog.buffers.len();
        let mut offsets = Vec::with_capacity(prog.ranks.len() * nb);
        let mut total = 0usize;
        for _ in 0..prog.ranks.len() {
            for b in &prog.buffers {
                offsets.push(total);
                total += b.chunks as usize;
            }
        }
        let exprs = Exprs::new(prog.buffers.iter().map(|b| b.elem).collect());
        Outcome {
            exprs,
            offsets,
            buffers: nb,
            state: vec![UNSPECIFIED; total],
            writer: vec![NO_WRITER; total],
        }
    }

    fn index(&self, rank: Rank, buffer: BufferId, chunk: u32) -> usize {
        self.offsets[rank as usize * self.buffers + buffer as usize] + chunk as usize
    }

    /// The node chunk `chunk` of `buffer` holds on `rank` at the end.
    pub fn value(&self, rank: Rank, buffer: BufferId, chunk: u32) -> NodeId {
        self.state[self.index(rank, buffer, chunk)]
    }

    /// The step that wrote that chunk last, if any.
    pub fn writer(&self, (rank, buffer, chunk): Atom) -> Option<StepRef> {
        let w = self.writer[self.index(rank, buffer, chunk)];
        (w != NO_WRITER).then_some(w)
    }

    fn read(&self, rank: Rank, r: &Region) -> Vec<NodeId> {
        let i = self.index(rank, r.buffer, r.first);
        self.state[i..i + r.count as usize].to_vec()
    }

    /// Write `vals` into `r` (converted into the buffer's class): chunk by chunk when the
    /// counts match, otherwise a single destination chunk receives the concatenation, or a
    /// single concatenated value is split again.
    fn write(&mut self, prog: &Program, rank: Rank, r: &Region, vals: Vec<NodeId>, by: StepRef) {
        let n = r.count as usize;
        let vals = if vals.len() == n {
            vals
        } else if n == 1 {
            vec![self.exprs.concat(vals, by)]
        } else {
            match vals.as_slice() {
                [v] => match self.exprs.node(*v) {
                    Node::Concat(parts) if parts.len() == n => parts.to_vec(),
                    _ => vec![UNSPECIFIED; n],
                },
                _ => vec![UNSPECIFIED; n],
            }
        };
        let class = prog.buffers[r.buffer as usize].elem;
        let base = self.index(rank, r.buffer, r.first);
        for (i, v) in vals.into_iter().enumerate() {
            let v = self.exprs.convert(v, class, by);
            self.state[base + i] = v;
            self.writer[base + i] = by;
        }
    }
}

/// The operator label for right-multiplying by a region given its contents.
fn right_mul_label(ex: &Exprs, vals: &[NodeId]) -> OpLabel {
    let atoms: Option<Vec<Atom>> = vals
        .iter()
        .map(|&v| match ex.node(v) {
            Node::Atom(a) => Some(*a),
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
    OpLabel::Opaque(format!("{:?}", vals).chars().take(60).collect())
}

/// Execute `prog` in the topological order of `hb`'s events: a put reads its source when it is
/// issued and writes its destination at its arrival. Input and in-out roles start with their
/// unit inputs, everything else unspecified.
pub fn execute(prog: &Program, hb: &HappensBefore) -> Outcome {
    use symsched_plan::BufferRole::*;
    let mut out = Outcome::new(prog);
    for r in 0..prog.ranks.len() as Rank {
        for (b, decl) in prog.buffers.iter().enumerate() {
            if matches!(decl.role, Input | InOut) {
                for c in 0..decl.chunks {
                    let id = out.exprs.atom((r, b as BufferId, c));
                    let i = out.index(r, b as BufferId, c);
                    out.state[i] = id;
                }
            }
        }
    }
    let (instances, of_step) = hostcoll_instances(prog);
    // Results of each host collective, computed when its first member step runs (all members'
    // earlier steps happen before every member's hostcoll step).
    let mut pending: HashMap<usize, HashMap<Rank, Vec<NodeId>>> = HashMap::new();
    // Values of issued puts whose data has not arrived yet.
    let mut in_flight: HashMap<StepRef, Vec<NodeId>> = HashMap::new();
    for &ev in &hb.events {
        let at = ev.step();
        let me = at.rank;
        if let Event::Arrival(_) = ev {
            if let Op::Put { dst, peer, .. } = &prog.step(at).op {
                let v = in_flight
                    .remove(&at)
                    .unwrap_or_else(|| vec![UNSPECIFIED; dst.count as usize]);
                out.write(prog, *peer, dst, v, at);
            }
            continue;
        }
        match &prog.step(at).op {
            Op::Put { src, .. } => {
                let v = out.read(me, src);
                in_flight.insert(at, v);
            }
            Op::Get { src, dst, peer } => {
                let v = out.read(*peer, src);
                out.write(prog, me, dst, v, at);
            }
            Op::Copy { src, dst } | Op::Cast { src, dst } => {
                let v = out.read(me, src);
                out.write(prog, me, dst, v, at);
            }
            Op::Reduce { dst, srcs } => {
                let n = dst.count as usize;
                let class = prog.buffers[dst.buffer as usize].elem;
                // A multi-chunk operand of a one-chunk reduce is the range's chunks in order.
                let ops: Vec<Vec<NodeId>> = srcs
                    .iter()
                    .flat_map(|s| {
                        let v = out.read(me, s);
                        if n == 1 && v.len() > 1 {
                            v.into_iter().map(|x| vec![x]).collect()
                        } else {
                            vec![v]
                        }
                    })
                    .collect();
                let v = if !ops.is_empty() && ops.iter().all(|o| o.len() == n) {
                    (0..n)
                        .map(|i| {
                            out.exprs
                                .fold(class, ops.iter().map(|o| o[i]).collect(), at)
                        })
                        .collect()
                } else {
                    vec![UNSPECIFIED; n]
                };
                out.write(prog, me, dst, v, at);
            }
            Op::Matmul { c, a, b } => {
                let label = right_mul_label(&out.exprs, &out.read(me, b));
                let class = prog.buffers[c.buffer as usize].elem;
                let v: Vec<NodeId> = out
                    .read(me, a)
                    .into_iter()
                    .map(|x| out.exprs.matmul(x, &label, class, at))
                    .collect();
                out.write(prog, me, c, v, at);
            }
            Op::HostColl { op, region, .. } => {
                let id = of_step[&at];
                if let std::collections::hash_map::Entry::Vacant(e) = pending.entry(id) {
                    e.insert(hostcoll_result(
                        &mut out,
                        &instances[id].members,
                        *op,
                        region,
                        at,
                    ));
                }
                if let Some(v) = pending.get_mut(&id).and_then(|r| r.remove(&me)) {
                    out.write(prog, me, region, v, at);
                }
            }
            Op::Signal { .. } | Op::Wait { .. } => {}
        }
    }
    out
}

/// What each member's region holds after a framework collective. Regions are split into one
/// part per member (in member order) for allgather and reduce_scatter; broadcast's root is the
/// first member.
fn hostcoll_result(
    out: &mut Outcome,
    members: &[Rank],
    op: HostCollOp,
    region: &Region,
    by: StepRef,
) -> HashMap<Rank, Vec<NodeId>> {
    let vals: Vec<Vec<NodeId>> = members.iter().map(|&m| out.read(m, region)).collect();
    let n = region.count as usize;
    let k = members.len().max(1);
    let part = n / k;
    let split_ok = part * k == n;
    let sum = |out: &mut Outcome, range: std::ops::Range<usize>| -> Vec<NodeId> {
        range
            .map(|i| {
                if k > 1 {
                    out.exprs.library(vals.iter().map(|v| v[i]).collect(), by)
                } else {
                    vals[0][i]
                }
            })
            .collect()
    };
    let mut res = HashMap::new();
    // A framework all-reduce gives every member the same value.
    let all = matches!(op, HostCollOp::Allreduce).then(|| sum(out, 0..n));
    for (mi, &m) in members.iter().enumerate() {
        let v = match op {
            HostCollOp::Allreduce => all.clone().unwrap_or_default(),
            HostCollOp::Broadcast => vals[0].clone(),
            HostCollOp::Allgather if split_ok => (0..n).map(|i| vals[i / part.max(1)][i]).collect(),
            HostCollOp::ReduceScatter if split_ok => {
                let mut v = vec![UNSPECIFIED; n];
                let mine = sum(out, mi * part..(mi + 1) * part);
                for (j, x) in mine.into_iter().enumerate() {
                    v[mi * part + j] = x;
                }
                v
            }
            _ => vec![UNSPECIFIED; n],
        };
        res.insert(m, v);
    }
    res
}
