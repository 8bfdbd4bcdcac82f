//! The petgraph view of a [`Program`]: one node per step plus one *arrival* node per put, edges
//! for program order, signal→wait synchronisation (and the implicit barrier of a host
//! collective), put completion and data flow.
//!
//! The graph is derived from [`Program::ranks`] and must be rebuilt after any edit. The memory
//! model (a put's remote write lands at an unknown time after the put is issued and is ordered
//! only by its own fused signal or by a later standalone signal of the sender) and the rules that
//! decide which updates are *guaranteed* to precede a wait are documented in `docs/verifier.md`
//! ("Happens-before"); [`HappensBefore`] answers ordering queries with vector clocks in
//! O(events · P) time and memory.

use super::chains::Chains;
use super::{Program, StepRef, CREDIT_SLOT_PREFIX};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::{BTreeMap, HashMap};
use symsched_plan::{BufferId, Cmp, Op, Owner, Rank, RegionAccess, SignalMode, SlotId};

/// Why one step is ordered before another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// Consecutive steps of one chain (a channel of a rank; without channels, the rank).
    Program,
    /// A signal update guaranteed to precede a wait's completion, or the implicit barrier of a
    /// host collective.
    Sync,
    /// A write whose data a later step reads (derived from happens-before; never adds order).
    Data,
    /// Put completion: from a put to the arrival of its data at the target, and, for a put
    /// without a fused signal to its own target, from that arrival to the sender's next
    /// standalone `Signal` step (which the lowering then precedes with a quiet). An arrival
    /// node is labelled with its put's step.
    Completion,
}

/// A point of an execution the verifier orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// A step: issued after its rank's previous step completed. Everything a step does is done
    /// when the rank moves on, except a put's write into the peer's memory.
    Step(StepRef),
    /// The arrival of the put at this step: its data lands in the target's memory, then (for a
    /// put with signal) its signal is delivered.
    Arrival(StepRef),
}

impl Event {
    /// The step this event belongs to.
    pub fn step(self) -> StepRef {
        match self {
            Event::Step(s) | Event::Arrival(s) => s,
        }
    }
}

/// The dataflow graph of one program.
#[derive(Debug, Clone)]
pub struct DataflowGraph {
    pub graph: DiGraph<StepRef, EdgeKind>,
    /// `base[r]` is the node index of rank r's first step; step nodes are rank-major and come
    /// before all arrival nodes.
    base: Vec<usize>,
    /// Number of step nodes (arrival nodes follow them).
    step_nodes: usize,
    /// The arrival node of each put.
    arrival: HashMap<StepRef, NodeIndex>,
    /// Happens-before, when the program-order and sync edges form no cycle.
    hb: Option<HappensBefore>,
    /// A node on a cycle of program-order and sync edges, when there is one.
    cycle: Option<NodeIndex>,
}

impl DataflowGraph {
    /// Node of a step.
    pub fn node(&self, at: StepRef) -> NodeIndex {
        NodeIndex::new(self.base[at.rank as usize] + at.index as usize)
    }

    /// Node of an event.
    pub fn event_node(&self, e: Event) -> Option<NodeIndex> {
        match e {
            Event::Step(s) => Some(self.node(s)),
            Event::Arrival(s) => self.arrival.get(&s).copied(),
        }
    }

    /// Step of a node (for an arrival node, its put).
    pub fn step_ref(&self, n: NodeIndex) -> StepRef {
        self.graph[n]
    }

    /// Happens-before, or `None` when the synchronisation edges form a cycle (a deadlock).
    pub fn happens_before(&self) -> Option<&HappensBefore> {
        self.hb.as_ref()
    }

    /// A step on a synchronisation cycle, if any.
    pub fn cycle_step(&self) -> Option<StepRef> {
        self.cycle.map(|n| self.graph[n])
    }

    /// Edges of one kind as step pairs.
    pub fn edges_of(&self, kind: EdgeKind) -> Vec<(StepRef, StepRef)> {
        use petgraph::visit::EdgeRef;
        self.graph
            .edge_references()
            .filter(|e| *e.weight() == kind)
            .map(|e| (self.graph[e.source()], self.graph[e.target()]))
            .collect()
    }
}

/// One memory access of a step: `count` chunks of `buffer` starting at `first`, in the memory of
/// `rank` (the peer's memory for a put destination or a get source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub rank: Rank,
    pub buffer: BufferId,
    pub first: u32,
    pub count: u32,
    pub write: bool,
    /// A put's destination: the write happens at the put's [`Event::Arrival`], not when the put
    /// is issued.
    pub on_arrival: bool,
}

impl Access {
    /// The event at which the step `at` performs this access.
    pub fn event(&self, at: StepRef) -> Event {
        if self.on_arrival {
            Event::Arrival(at)
        } else {
            Event::Step(at)
        }
    }
}

/// The memory accesses of `op` executed by rank `me`, reads before writes (the plan's
/// [`Op::reads`] and [`Op::writes`]). A write into a peer's memory is a put's destination: it
/// happens when the put arrives.
pub fn accesses(op: &Op, me: Rank) -> Vec<Access> {
    let acc = |a: RegionAccess, write: bool| Access {
        rank: a.rank(me),
        buffer: a.region.buffer,
        first: a.region.first,
        count: a.region.count,
        write,
        on_arrival: write && matches!(a.owner, Owner::Peer(_)),
    };
    op.reads()
        .map(|a| acc(a, false))
        .chain(op.writes().map(|a| acc(a, true)))
        .collect()
}

/// Whether a slot is an internal launch-credit slot (always satisfied within one launch).
pub fn is_credit_slot(prog: &Program, slot: SlotId) -> bool {
    prog.slot_name(slot).starts_with(CREDIT_SLOT_PREFIX)
}

/// One host collective: the k-th hostcoll over the same member set on every member.
#[derive(Debug, Clone)]
pub struct HostCollInstance {
    /// Sorted, deduplicated member ranks.
    pub members: Vec<Rank>,
    /// The step of each member that takes part, in member order; `None` when a member never
    /// reaches its k-th hostcoll over this set (a deadlock).
    pub steps: Vec<Option<StepRef>>,
}

/// Group hostcoll steps into collective instances; also returns, per hostcoll step, its
/// instance index.
pub fn hostcoll_instances(prog: &Program) -> (Vec<HostCollInstance>, HashMap<StepRef, usize>) {
    let mut by_key: BTreeMap<(Vec<Rank>, usize), usize> = BTreeMap::new();
    let mut instances: Vec<HostCollInstance> = Vec::new();
    let mut of_step = HashMap::new();
    for (r, steps) in prog.ranks.iter().enumerate() {
        let mut seen: HashMap<Vec<Rank>, usize> = HashMap::new();
        for (i, s) in steps.iter().enumerate() {
            if let Op::HostColl { members, .. } = &s.op {
                let mut m = members.clone();
                m.sort_unstable();
                m.dedup();
                let k = seen.entry(m.clone()).or_insert(0);
                let key = (m.clone(), *k);
                *k += 1;
                let id = *by_key.entry(key).or_insert_with(|| {
                    instances.push(HostCollInstance {
                        steps: vec![None; m.len()],
                        members: m.clone(),
                    });
                    instances.len() - 1
                });
                let at = StepRef {
                    rank: r as Rank,
                    index: i as u32,
                };
                if let Some(pos) = m.iter().position(|&x| x == r as Rank) {
                    instances[id].steps[pos] = Some(at);
                }
                of_step.insert(at, id);
            }
        }
    }
    (instances, of_step)
}

/// Happens-before as vector clocks: `clock(s)[q]` is how many of chain q's first steps precede
/// or equal step s (a chain is one channel of one rank, [`Chains`]; without channels, a rank).
///
/// Arrival events get no clock component of their own (they are not a chain: the arrivals of
/// one rank's puts are mutually unordered). An arrival has a single predecessor, its put, so
/// `x → Arrival(p)` iff `x → p`; and every path out of an arrival goes through one of its few
/// successors (the waits its fused signal releases, the sender's next standalone signal), so
/// `Arrival(p) → y` iff some successor is `y` or precedes it. Step-to-step queries stay O(1).
#[derive(Debug, Clone)]
pub struct HappensBefore {
    /// Number of chains (clock components).
    width: usize,
    chains: Chains,
    base: Vec<usize>,
    clocks: Vec<u32>,
    /// Successor steps of each put's arrival.
    arrival_succ: HashMap<StepRef, Vec<StepRef>>,
    /// Steps in a topological order of the program-order, sync and completion edges.
    pub topo: Vec<StepRef>,
    /// Steps and arrivals in a topological order (the order symbolic execution follows).
    pub events: Vec<Event>,
}

impl HappensBefore {
    fn clock(&self, s: StepRef) -> &[u32] {
        let n = self.base[s.rank as usize] + s.index as usize;
        &self.clocks[n * self.width..(n + 1) * self.width]
    }

    /// Whether step `a` is guaranteed to complete before step `b` starts (`a != b`). For a put,
    /// "complete" covers reading its source, not the arrival of its data (see [`Self::precedes`]).
    pub fn before(&self, a: StepRef, b: StepRef) -> bool {
        a != b && self.clock(b)[self.chains.chain(a) as usize] > self.chains.pos(a)
    }

    /// The program order the clocks follow.
    pub fn chains(&self) -> &Chains {
        &self.chains
    }

    /// Whether steps `a` and `b` are ordered either way (or equal).
    pub fn ordered(&self, a: StepRef, b: StepRef) -> bool {
        a == b || self.before(a, b) || self.before(b, a)
    }

    /// Whether event `a` is guaranteed to happen before event `b` (`a != b`).
    pub fn precedes(&self, a: Event, b: Event) -> bool {
        if a == b {
            return false;
        }
        match (a, b) {
            (Event::Step(x), Event::Step(y)) => self.before(x, y),
            (Event::Step(x), Event::Arrival(p)) => x == p || self.before(x, p),
            // A path into another arrival passes through that arrival's put.
            (Event::Arrival(p), b) => {
                let target = b.step();
                self.arrival_succ
                    .get(&p)
                    .is_some_and(|ss| ss.iter().any(|&s| s == target || self.before(s, target)))
            }
        }
    }

    /// Whether events `a` and `b` are ordered either way (or equal).
    pub fn events_ordered(&self, a: Event, b: Event) -> bool {
        a == b || self.precedes(a, b) || self.precedes(b, a)
    }
}

/// An update of a signal slot, as seen by the receiving rank.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Update {
    pub at: StepRef,
    pub mode: SignalMode,
    pub value: u64,
    /// The signal of a put with signal: delivered at the put's arrival, after its data.
    pub fused: bool,
}

impl Update {
    /// The event that delivers the update.
    pub fn event(&self) -> Event {
        if self.fused {
            Event::Arrival(self.at)
        } else {
            Event::Step(self.at)
        }
    }
}

/// Signal updates by (receiving rank, slot), from `Signal` steps and puts with signal.
pub(crate) fn updates_by_slot(prog: &Program) -> HashMap<(Rank, SlotId), Vec<Update>> {
    let mut out: HashMap<(Rank, SlotId), Vec<Update>> = HashMap::new();
    for (at, s) in prog.steps() {
        let (u, fused) = match &s.op {
            Op::Signal { update } => (update, false),
            Op::Put {
                signal: Some(u), ..
            } => (u, true),
            _ => continue,
        };
        out.entry((u.peer, u.slot)).or_default().push(Update {
            at,
            mode: u.mode,
            value: u.value,
            fused,
        });
    }
    out
}

/// The smallest counter value that satisfies an add-slot wait, if the wait needs any update.
pub(crate) fn add_threshold(cmp: Cmp, k: u64) -> Option<u64> {
    match cmp {
        Cmp::Ge | Cmp::Eq if k > 0 => Some(k),
        Cmp::Gt => Some(k.saturating_add(1)),
        Cmp::Ne if k == 0 => Some(1),
        _ => None,
    }
}

/// The sync edges (update → wait) guaranteed by the rules in `docs/verifier.md`. `hb`, when
/// given, excludes updates that happen after the wait.
fn sync_edges(
    prog: &Program,
    chains: &Chains,
    updates: &HashMap<(Rank, SlotId), Vec<Update>>,
    hb: Option<&HappensBefore>,
) -> Vec<(Event, StepRef)> {
    let mut edges = Vec::new();
    for (w, s) in prog.steps() {
        let Op::Wait { slot, cmp, target } = &s.op else {
            continue;
        };
        if is_credit_slot(prog, *slot) {
            continue;
        }
        let Some(cands) = updates.get(&(w.rank, *slot)) else {
            continue;
        };
        let can_contribute = |u: &&Update| match hb {
            Some(hb) => !hb.precedes(Event::Step(w), u.event()) && u.at != w,
            None => !chains.program_before(w, u.at),
        };
        let cands: Vec<&Update> = cands.iter().filter(can_contribute).collect();
        let k = target.offset;
        let mode = prog
            .signals
            .get(*slot as usize)
            .map(|x| x.mode)
            .unwrap_or(SignalMode::Add);
        match mode {
            SignalMode::Add => {
                let Some(need) = add_threshold(*cmp, k) else {
                    continue;
                };
                let total: u64 = cands.iter().map(|u| u.value).fold(0, u64::saturating_add);
                for u in &cands {
                    if total.saturating_sub(u.value) < need {
                        edges.push((u.event(), w));
                    }
                }
            }
            SignalMode::Set => {
                let sat: Vec<&&Update> = cands.iter().filter(|u| cmp.holds(u.value, k)).collect();
                // Only a unique satisfying update is guaranteed; an initial 0 that already
                // satisfies the wait needs no update at all.
                if sat.len() == 1 && !cmp.holds(0, k) {
                    edges.push((sat[0].event(), w));
                }
            }
        }
    }
    edges
}

/// Implicit barrier of each host collective: every member's earlier steps precede every other
/// member's hostcoll step, and every member's hostcoll step precedes the others' later steps.
fn hostcoll_edges(prog: &Program, chains: &Chains) -> Vec<(Event, StepRef)> {
    let (instances, _) = hostcoll_instances(prog);
    let mut edges = Vec::new();
    for inst in &instances {
        let steps: Vec<StepRef> = inst.steps.iter().flatten().copied().collect();
        for &a in &steps {
            for &b in &steps {
                if a.rank == b.rank {
                    continue;
                }
                if let Some(before) = chains.prev(a) {
                    edges.push((Event::Step(before), b));
                }
                if let Some(after) = chains.next(b) {
                    edges.push((Event::Step(a), after));
                }
            }
        }
    }
    edges
}

fn skeleton(prog: &Program, chains: &Chains, sync: &[(Event, StepRef)]) -> DataflowGraph {
    let puts = prog
        .steps()
        .filter(|(_, s)| matches!(s.op, Op::Put { .. }))
        .count();
    let mut graph = DiGraph::with_capacity(
        prog.step_count() + puts,
        prog.step_count() + 2 * puts + sync.len(),
    );
    let mut base = Vec::with_capacity(prog.ranks.len());
    for (r, steps) in prog.ranks.iter().enumerate() {
        base.push(graph.node_count());
        for i in 0..steps.len() {
            let at = StepRef {
                rank: r as Rank,
                index: i as u32,
            };
            let n = graph.add_node(at);
            if let Some(prev) = chains.prev(at) {
                let before = NodeIndex::new(base[r] + prev.index as usize);
                graph.add_edge(before, n, EdgeKind::Program);
            }
        }
    }
    let step_nodes = graph.node_count();
    // Arrivals: after the put is issued; a plain put's arrival also before the sender's next
    // standalone signal (the quiet the lowering emits before it completes every outstanding
    // put). A later put with signal does not order them: there is no fence between the two.
    let mut arrival = HashMap::with_capacity(puts);
    for (r, steps) in prog.ranks.iter().enumerate() {
        // Per channel: the quiet before a signal completes only its own channel's puts.
        let mut outstanding: Vec<Vec<NodeIndex>> = vec![Vec::new(); chains.width as usize];
        for (i, s) in steps.iter().enumerate() {
            let outstanding = &mut outstanding[s.channel as usize];
            let at = StepRef {
                rank: r as Rank,
                index: i as u32,
            };
            let n = NodeIndex::new(base[r] + i);
            match &s.op {
                Op::Put { peer, signal, .. } => {
                    let a = graph.add_node(at);
                    graph.add_edge(n, a, EdgeKind::Completion);
                    arrival.insert(at, a);
                    // The lowering quiets before a signal only while *plain* puts are
                    // outstanding (a put whose signal goes elsewhere counts as plain); a put
                    // with its own fused signal is left in flight.
                    if signal.is_none_or(|u| u.peer != *peer) {
                        outstanding.push(a);
                    }
                }
                Op::Signal { .. } => {
                    for a in outstanding.drain(..) {
                        graph.add_edge(a, n, EdgeKind::Completion);
                    }
                }
                _ => {}
            }
        }
    }
    let mut g = DataflowGraph {
        graph,
        base,
        step_nodes,
        arrival,
        hb: None,
        cycle: None,
    };
    for &(a, b) in sync {
        if let Some(na) = g.event_node(a) {
            let nb = g.node(b);
            g.graph.add_edge(na, nb, EdgeKind::Sync);
        }
    }
    g
}

fn compute_hb(g: &DataflowGraph, chains: &Chains) -> Result<HappensBefore, NodeIndex> {
    let p = chains.count().max(1);
    use petgraph::visit::EdgeRef;
    let order = petgraph::algo::toposort(&g.graph, None).map_err(|c| c.node_id())?;
    let steps = g.step_nodes;
    // Only steps store a clock: an arrival's clock is its put's (its only predecessor).
    let clock_row = |n: NodeIndex| -> usize {
        if n.index() < steps {
            n.index()
        } else {
            g.node(g.graph[n]).index()
        }
    };
    let mut clocks = vec![0u32; steps * p];
    let mut cur = vec![0u32; p];
    let mut arrival_succ: HashMap<StepRef, Vec<StepRef>> = HashMap::new();
    for &v in &order {
        let me = g.graph[v];
        if v.index() >= steps {
            continue;
        }
        cur.iter_mut().for_each(|c| *c = 0);
        for e in g.graph.edges_directed(v, petgraph::Direction::Incoming) {
            if *e.weight() == EdgeKind::Data {
                continue;
            }
            let ui = clock_row(e.source());
            for (c, x) in cur.iter_mut().zip(&clocks[ui * p..(ui + 1) * p]) {
                *c = (*c).max(*x);
            }
            if e.source().index() >= steps {
                arrival_succ
                    .entry(g.graph[e.source()])
                    .or_default()
                    .push(me);
            }
        }
        cur[chains.chain(me) as usize] = chains.pos(me) + 1;
        let vi = v.index();
        clocks[vi * p..(vi + 1) * p].copy_from_slice(&cur);
    }
    let event = |v: NodeIndex| {
        if v.index() < steps {
            Event::Step(g.graph[v])
        } else {
            Event::Arrival(g.graph[v])
        }
    };
    Ok(HappensBefore {
        width: p,
        chains: chains.clone(),
        base: g.base.clone(),
        clocks,
        arrival_succ,
        topo: order
            .iter()
            .filter(|v| v.index() < steps)
            .map(|&v| g.graph[v])
            .collect(),
        events: order.iter().map(|&v| event(v)).collect(),
    })
}

/// Data edges: each read gets an edge from the last write (in a topological order) of each
/// chunk it reads that happens before it. A put's write is its arrival.
fn data_edges(prog: &Program, hb: &HappensBefore) -> Vec<(Event, StepRef)> {
    let mut last: HashMap<(Rank, BufferId, u32), Event> = HashMap::new();
    let mut edges = Vec::new();
    for &ev in &hb.events {
        let at = ev.step();
        let acc: Vec<Access> = accesses(&prog.step(at).op, at.rank)
            .into_iter()
            .filter(|a| a.event(at) == ev)
            .collect();
        let mut from: Vec<Event> = Vec::new();
        for a in acc.iter().filter(|a| !a.write) {
            for c in a.first..a.first.saturating_add(a.count) {
                if let Some(&w) = last.get(&(a.rank, a.buffer, c)) {
                    if hb.precedes(w, ev) && !from.contains(&w) {
                        from.push(w);
                    }
                }
            }
        }
        edges.extend(from.into_iter().map(|w| (w, at)));
        for a in acc.iter().filter(|a| a.write) {
            for c in a.first..a.first.saturating_add(a.count) {
                last.insert((a.rank, a.buffer, c), ev);
            }
        }
    }
    edges
}

/// Build the dataflow graph of `prog`. Sync edges are computed to a fixpoint: each round's
/// happens-before excludes more updates (those after the wait), which can only add edges.
pub fn build(prog: &Program) -> DataflowGraph {
    build_with(prog, true)
}

/// Like [`build`]; without `hostcoll_barrier` the implicit barrier of host collectives adds no
/// edges. The interop rule uses that view: the framework's collective library does not complete
/// or order symmetric-memory traffic, so only signals and waits separate shmem stages.
pub fn build_with(prog: &Program, hostcoll_barrier: bool) -> DataflowGraph {
    let chains = prog.chains();
    let updates = updates_by_slot(prog);
    let barrier = if hostcoll_barrier {
        hostcoll_edges(prog, &chains)
    } else {
        Vec::new()
    };
    let mut sync = sync_edges(prog, &chains, &updates, None);
    sync.extend(barrier.iter().copied());
    let mut g = skeleton(prog, &chains, &sync);
    // Each round adds edges or stops; the bound only guards against a rule bug.
    for _ in 0..16 {
        match compute_hb(&g, &chains) {
            Err(n) => {
                g.cycle = Some(n);
                return g;
            }
            Ok(hb) => {
                let mut next = sync_edges(prog, &chains, &updates, Some(&hb));
                next.extend(barrier.iter().copied());
                if next.len() == sync.len() {
                    let data = data_edges(prog, &hb);
                    for (a, b) in data {
                        if let Some(na) = g.event_node(a) {
                            let nb = g.node(b);
                            g.graph.add_edge(na, nb, EdgeKind::Data);
                        }
                    }
                    g.hb = Some(hb);
                    return g;
                }
                sync = next;
                g = skeleton(prog, &chains, &sync);
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;

    #[test]
    fn put_signal_wait_orders_the_put_before_the_read() {
        // rank 0: put x[0] -> y[0] @ 1, signal s @ 1 += 1   rank 1: wait s >= 1; copy y -> x
        let mut b = Builder::new(2, &[("x", 1), ("y", 1)], &[("s", SignalMode::Add)]);
        b.put_sig(0, reg(0, 0, 1), reg(1, 0, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        let prog = b.build();
        let g = build(&prog);
        let hb = g.happens_before().expect("acyclic");
        assert!(hb.before(sr(0, 0), sr(1, 1)));
        assert!(!hb.before(sr(1, 0), sr(0, 0)));
        assert_eq!(g.edges_of(EdgeKind::Sync), vec![(sr(0, 0), sr(1, 0))]);
        assert_eq!(g.edges_of(EdgeKind::Data), vec![(sr(0, 0), sr(1, 1))]);
    }

    #[test]
    fn a_put_arrives_after_it_is_issued_and_before_its_own_signal_is_seen() {
        // rank 0: put x -> y @ 1 (plain); put x -> y @ 1, signal s @ 1 += 1; signal t @ 1 += 1
        // rank 1: wait s >= 1; wait t >= 1
        let mut b = Builder::new(
            2,
            &[("x", 1), ("y", 1)],
            &[("s", SignalMode::Add), ("t", SignalMode::Add)],
        );
        let plain = b.put(0, reg(0, 0, 1), reg(1, 0, 1), 1);
        let fused = b.put_sig(0, reg(0, 0, 1), reg(1, 0, 1), 1, 0, 1);
        let sig = b.signal(0, 1, 1, SignalMode::Add, 1);
        let ws = b.wait(1, 0, Cmp::Ge, 1);
        let wt = b.wait(1, 1, Cmp::Ge, 1);
        let g = build(&b.build());
        let hb = g.happens_before().expect("acyclic");
        let (s, a) = (Event::Step, Event::Arrival);
        assert!(hb.precedes(s(plain), a(plain)));
        assert!(!hb.precedes(a(plain), s(plain)));
        // Issued in program order, arriving in any order.
        assert!(hb.precedes(s(plain), a(fused)));
        assert!(!hb.events_ordered(a(plain), a(fused)));
        assert!(!hb.precedes(a(plain), s(fused)));
        // The fused signal is delivered after its data; the standalone signal follows a quiet.
        assert!(hb.precedes(a(fused), s(ws)));
        assert!(!hb.precedes(a(plain), s(ws)));
        assert!(hb.precedes(a(plain), s(sig)));
        assert!(hb.precedes(a(plain), s(wt)));
        // No quiet covers a put with its own signal: only that signal orders its arrival.
        assert!(!hb.precedes(a(fused), s(sig)));
        // Step order is unchanged: the put is issued before the wait on its signal.
        assert!(hb.before(fused, ws));
        // Each arrival comes after its put in the execution order.
        let pos = |e: Event| hb.events.iter().position(|&x| x == e).expect("listed");
        assert!(pos(s(plain)) < pos(a(plain)) && pos(s(fused)) < pos(a(fused)));
        assert_eq!(hb.topo.len(), 5);
        assert_eq!(hb.events.len(), 7);
        // The sync edge is still shown from the put.
        assert_eq!(g.edges_of(EdgeKind::Sync), vec![(fused, ws), (sig, wt)]);
    }

    #[test]
    fn only_updates_the_wait_cannot_do_without_get_edges() {
        // Three updates of 1 to rank 0's slot; `wait >= 2` is guaranteed by none alone,
        // `wait >= 3` by all three.
        let mut b = Builder::new(4, &[("x", 1)], &[("s", SignalMode::Add)]);
        for r in 1..4 {
            b.signal(r, 0, 0, SignalMode::Add, 1);
        }
        b.wait(0, 0, Cmp::Ge, 2);
        b.wait(0, 0, Cmp::Ge, 3);
        let g = build(&b.build());
        let sync = g.edges_of(EdgeKind::Sync);
        assert!(sync.iter().all(|(_, w)| *w == sr(0, 1)), "{sync:?}");
        assert_eq!(sync.len(), 3);
    }

    #[test]
    fn updates_after_the_wait_do_not_count() {
        // rank 1 signals only after it saw rank 0's signal, which comes after rank 0's wait:
        // so rank 0's `wait >= 1` can only be satisfied by rank 2.
        let mut b = Builder::new(
            3,
            &[("x", 1)],
            &[("s", SignalMode::Add), ("t", SignalMode::Add)],
        );
        b.wait(0, 0, Cmp::Ge, 1);
        b.signal(0, 1, 1, SignalMode::Add, 1);
        b.wait(1, 1, Cmp::Ge, 1);
        b.signal(1, 0, 0, SignalMode::Add, 1);
        b.signal(2, 0, 0, SignalMode::Add, 1);
        let g = build(&b.build());
        let hb = g.happens_before().expect("acyclic");
        assert!(hb.before(sr(2, 0), sr(0, 0)));
    }

    #[test]
    fn cycle_is_reported() {
        let mut b = Builder::new(2, &[("x", 1)], &[("s", SignalMode::Add)]);
        b.wait(0, 0, Cmp::Ge, 1);
        b.signal(0, 0, 1, SignalMode::Add, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        b.signal(1, 0, 0, SignalMode::Add, 1);
        let g = build(&b.build());
        assert!(g.happens_before().is_none());
        assert!(g.cycle_step().is_some());
    }

    #[test]
    fn hostcoll_is_a_barrier_among_members() {
        let mut b = Builder::new(2, &[("x", 2)], &[]);
        b.copy(0, reg(0, 0, 1), reg(0, 1, 1));
        b.hostcoll(0, reg(0, 0, 2), &[0, 1]);
        b.hostcoll(1, reg(0, 0, 2), &[0, 1]);
        b.copy(1, reg(0, 0, 1), reg(0, 1, 1));
        let g = build(&b.build());
        let hb = g.happens_before().expect("acyclic");
        assert!(hb.before(sr(0, 0), sr(1, 0)));
        assert!(hb.before(sr(0, 1), sr(1, 1)));
        assert!(!hb.before(sr(0, 1), sr(1, 0)));
    }

    #[test]
    fn set_slot_wait_is_ordered_after_the_unique_setter() {
        let mut b = Builder::new(2, &[("x", 1)], &[("f", SignalMode::Set)]);
        b.signal(0, 0, 1, SignalMode::Set, 1);
        b.signal(0, 0, 1, SignalMode::Set, 2);
        b.wait(1, 0, Cmp::Eq, 2);
        let g = build(&b.build());
        assert_eq!(g.edges_of(EdgeKind::Sync), vec![(sr(0, 1), sr(1, 0))]);
    }
}
