//! Fusion analysis: which steps run together as one pass over the data, derived from the
//! plan's dataflow.
//!
//! **Segments.** Waits, standalone signals, matmuls and host collectives are synchronisation
//! or opaque work; the element-wise steps between two of them (puts, gets, copies, casts,
//! reduces) form a *segment*. Nothing in a segment waits, and no peer is told anything until
//! the segment's signals go out, so within a segment only this rank's own dependencies order
//! its steps: the verifier proved every peer access race-free against them. Waits that nothing
//! of this rank's current launch can be needed for (the launch credits, exit and entry ones,
//! [`satisfied_at_entry`]) move to the kernel entry, right after its own entry signals, which
//! joins the segments they used to separate (the puts of one source to every peer, each behind
//! its own credit wait).
//!
//! **Passes.** Every element-wise step maps element `i` of each region it touches to element
//! `i` of the others and moves `n` elements. A *pass* runs several such steps as one loop over
//! `i`, all steps for element `i` in program order before element `i + 1`. That gives every
//! memory location the same sequence of accesses as running the steps one after the other
//! exactly when any two accesses of different steps that conflict (overlap, one writes) are of
//! the *same* place (rank, buffer, chunk range) and the steps move the same `n`: then element
//! `i` of one is element `i` of the other. Steps join a pass when they read a place the pass
//! already reads or writes (fusing unrelated streams saves nothing); a step that shares with
//! several earlier passes merges them. Joining moves a step (or a merged pass) earlier, past the
//! passes created in between; that is allowed only if it conflicts with none of them. The
//! element counts are compared symbolically ([`LenKey`]); a pass whose steps have different
//! keys runs fused only when the counts agree at run time, else step by step.
//!
//! **Signals** of fused puts go out after the pass; each one waits for every step before it in
//! program order (which may sit in a later pass), so nothing a peer may rely on is missing.
//!
//! **Private steps sink to their reader.** A copy, cast or reduce whose places no other rank
//! and no other channel of this rank ever touches (the owner's own wire slot, cast from its
//! own chunk) matters only to later steps of this channel. When the first such step that
//! touches what it writes reads exactly that place, and only waits, signals and steps
//! independent of it lie in between, it runs right before that reader instead: across the
//! wait, into the reader's pass. Nothing a peer sees changes (no peer touches those places, so
//! no signal or wait orders anything against them); on the host, where a rank's steps run one
//! after another anyway, the step costs no overlap, and its reader reads the value from a
//! register instead of memory (the wire all-reduce's own chunk: cast, then folded after the
//! wait).
//!
//! **Dead writes.** A write to scratch that no other rank accesses at that place and that no
//! later step of this rank touches is never read: the fused loop keeps its value in a register
//! for the steps in the pass and does not store it (a pulled chunk folded straight into its
//! reduce, a sunk cast of the rank's own chunk).

use super::dataflow::{
    accesses, data_region, is_elementwise, len_key, satisfied_at_entry, Access, LenKey,
};
use super::Fault;
use symsched_plan::{BufferRole, Op, Plan, Rank};

/// Switches of the analysis (all on by default; off to compare, and for tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FusionOptions {
    /// Form multi-step passes.
    pub fuse: bool,
    /// Move waits that earlier launches and the peers' entry signals satisfy to the kernel
    /// entry.
    pub hoist_waits: bool,
    /// Run a step on private places right before the step that reads its result, across waits
    /// and signals (only when `fuse` is on: it exists to join that reader's pass).
    pub sink_private: bool,
}

impl Default for FusionOptions {
    fn default() -> Self {
        FusionOptions {
            fuse: true,
            hoist_waits: true,
            sink_private: true,
        }
    }
}

/// Which places of rank `me`'s memory only `me`'s steps of one channel touch.
struct Privacy {
    me: Rank,
    /// Every access to `me`'s memory by another rank's step (puts into it, gets from it) or by
    /// a step of another channel of `me`.
    foreign: Vec<Access>,
    scratch: Vec<bool>,
}

impl Privacy {
    fn of(plan: &Plan, me: Rank, channel: u32) -> Privacy {
        let foreign = plan
            .ranks
            .iter()
            .flat_map(|prog| {
                prog.steps
                    .iter()
                    .filter(move |s| prog.rank != me || s.channel != channel)
                    .flat_map(|s| accesses(&s.op, prog.rank))
            })
            .filter(|a| a.rank == me)
            .collect();
        Privacy {
            me,
            foreign,
            scratch: plan
                .buffers
                .iter()
                .map(|b| b.role == BufferRole::Scratch)
                .collect(),
        }
    }

    /// No other rank and no other channel touches this memory.
    fn unshared(&self, a: &Access) -> bool {
        a.rank == self.me && !self.foreign.iter().any(|f| f.overlaps(a))
    }

    /// Scratch of this rank that no other rank or channel touches: what is written there
    /// matters only to this channel's later steps.
    fn private_scratch(&self, a: &Access) -> bool {
        self.unshared(a) && self.scratch.get(a.region.buffer as usize) == Some(&true)
    }
}

/// Per step of `channel`, the index of the step it runs right before: itself, or for a step
/// on private places the first later step that reads its result (see the module text). The
/// execution order is the steps sorted by (target, index). `shared_too` is
/// [`Fault::SinkShared`].
fn sink_targets(
    plan: &Plan,
    me: Rank,
    channel: u32,
    hoisted: &[bool],
    privacy: &Privacy,
    shared_too: bool,
) -> Vec<usize> {
    let steps = &plan.ranks[me as usize].steps;
    let mut at: Vec<usize> = (0..steps.len()).collect();
    let ours = |i: usize| steps[i].channel == channel && !hoisted[i];
    for s in (0..steps.len()).rev() {
        if !ours(s)
            || !matches!(
                steps[s].op,
                Op::Copy { .. } | Op::Cast { .. } | Op::Reduce { .. }
            )
        {
            continue;
        }
        let acc = accesses(&steps[s].op, me);
        if !(shared_too || acc.iter().all(|a| privacy.unshared(a))) {
            continue;
        }
        let mut crossed = false;
        for t in s + 1..steps.len() {
            if !ours(t) {
                continue;
            }
            let op = &steps[t].op;
            let later = accesses(op, me);
            let reads_result = is_elementwise(op)
                && later
                    .iter()
                    .any(|b| !b.write && acc.iter().any(|a| a.write && a.same_place(b)));
            if reads_result {
                if crossed && at[t] == t {
                    at[s] = t;
                }
                break;
            }
            if later.iter().any(|b| acc.iter().any(|a| a.conflicts(b))) {
                break;
            }
            crossed |= !is_elementwise(op);
        }
    }
    at
}

/// What the kernel does, in order. Indices are positions in the rank's step list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Wait(usize),
    Signal(usize),
    Matmul(usize),
    HostColl(usize),
    Pass(Pass),
    /// The signals of these puts (fused into earlier passes), in program order.
    PutSignals(Vec<usize>),
    /// The launch's agreement check ([`schedule_checked`]): the runtime's `agree` intrinsic.
    Agree,
}

/// Element-wise steps run as one loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Step indices, ascending (the order of the steps inside each element).
    pub steps: Vec<usize>,
    /// Written places nobody reads afterwards (not stored by the fused loop).
    pub dead: Vec<Access>,
    /// Whether the steps' element counts have different symbolic keys (checked at run time).
    pub guarded: bool,
    /// Whether two distinct places the pass touches may overlap (a step whose own regions
    /// partly overlap); the loop then gets no no-alias guarantees.
    pub may_alias: bool,
}

struct Building {
    steps: Vec<usize>,
    acc: Vec<(usize, Access)>,
    keys: Vec<LenKey>,
}

impl Building {
    fn shares(&self, reads: &[Access]) -> bool {
        reads
            .iter()
            .any(|r| r.region.count > 0 && self.acc.iter().any(|(_, a)| a.same_place(r)))
    }
}

/// Accesses of two groups may run interleaved element by element.
fn interleavable(a: &[(usize, Access)], b: &[(usize, Access)]) -> bool {
    a.iter()
        .all(|(_, x)| b.iter().all(|(_, y)| !x.conflicts(y) || x.same_place(y)))
}

/// Accesses of two groups may swap order.
fn independent(a: &[(usize, Access)], b: &[(usize, Access)]) -> bool {
    a.iter()
        .all(|(_, x)| b.iter().all(|(_, y)| !x.conflicts(y)))
}

/// The actions of `channel` of rank `me` (of the whole rank when it has one channel): only
/// that channel's steps, in plan order. Nothing is fused or moved across channels: the other
/// channels run concurrently, ordered against this one only by signals and waits.
#[cfg(test)]
pub(crate) fn schedule(
    plan: &Plan,
    me: Rank,
    channel: u32,
    opts: FusionOptions,
    fault: Option<Fault>,
) -> Vec<Action> {
    let len = plan.ranks[me as usize].steps.len();
    schedule_range(plan, me, channel, opts, fault, 0..len)
}

/// [`schedule`] with the launch's agreement check ([`Action::Agree`]) after the first
/// `check_after` steps of the list (`None`: no check, as [`schedule`]). The steps before and
/// after it are scheduled apart: nothing is fused, hoisted or sunk across the check, so every
/// step after it runs after it — the steps before it are a speculative prefix that may run
/// before the ranks agree, and what follows writes the caller's buffers.
pub(crate) fn schedule_checked(
    plan: &Plan,
    me: Rank,
    channel: u32,
    opts: FusionOptions,
    fault: Option<Fault>,
    check_after: Option<usize>,
) -> Vec<Action> {
    let len = plan.ranks[me as usize].steps.len();
    let Some(at) = check_after else {
        return schedule_range(plan, me, channel, opts, fault, 0..len);
    };
    let at = at.min(len);
    let mut actions = schedule_range(plan, me, channel, opts, fault, 0..at);
    actions.push(Action::Agree);
    actions.extend(schedule_range(plan, me, channel, opts, fault, at..len));
    actions
}

/// The actions of the steps in `range` of the list (of `channel`), as if they were the whole
/// list: waits satisfied at entry move to the start of the range, not before it.
fn schedule_range(
    plan: &Plan,
    me: Rank,
    channel: u32,
    opts: FusionOptions,
    fault: Option<Fault>,
    range: std::ops::Range<usize>,
) -> Vec<Action> {
    let steps = &plan.ranks[me as usize].steps;
    let mut actions = Vec::new();
    let ours = |i: usize| range.contains(&i) && steps[i].channel == channel;
    // A hoisted wait moves to the start of its own channel only: the runtime sends the entry
    // signals before any channel starts, so it is satisfiable there as in a one-channel rank.
    let hoisted: Vec<bool> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| ours(i) && opts.hoist_waits && satisfied_at_entry(plan, me, s))
        .collect();
    for (i, h) in hoisted.iter().enumerate() {
        if *h {
            actions.push(Action::Wait(i));
        }
    }
    let privacy = Privacy::of(plan, me, channel);
    let mut order: Vec<usize> = range.clone().collect();
    if opts.fuse && opts.sink_private {
        let shared_too = fault == Some(Fault::SinkShared);
        let at = sink_targets(plan, me, channel, &hoisted, &privacy, shared_too);
        // A step whose reader lies past the range runs last in it: it moves past only steps
        // `sink_targets` found it may cross.
        order.sort_by_key(|&i| (at[i], i));
    }
    let mut segment: Vec<usize> = Vec::new();
    for i in order {
        let step = &steps[i];
        if hoisted[i] || step.channel != channel {
            continue;
        }
        if is_elementwise(&step.op) {
            segment.push(i);
            continue;
        }
        flush(plan, me, opts, &privacy, &mut segment, &mut actions);
        actions.push(match &step.op {
            Op::Wait { .. } => Action::Wait(i),
            Op::Signal { .. } => Action::Signal(i),
            Op::Matmul { .. } => Action::Matmul(i),
            Op::HostColl { .. } => Action::HostColl(i),
            _ => unreachable!("element-wise steps are collected above"),
        });
    }
    flush(plan, me, opts, &privacy, &mut segment, &mut actions);
    actions
}

fn flush(
    plan: &Plan,
    me: Rank,
    opts: FusionOptions,
    privacy: &Privacy,
    segment: &mut Vec<usize>,
    actions: &mut Vec<Action>,
) {
    if segment.is_empty() {
        return;
    }
    let steps = &plan.ranks[me as usize].steps;
    let mut passes: Vec<Building> = Vec::new();
    for &s in segment.iter() {
        let op = &steps[s].op;
        let acc: Vec<(usize, Access)> = accesses(op, me).into_iter().map(|a| (s, a)).collect();
        let key = data_region(op, me)
            .map(|(r, reg)| len_key(plan, r, &reg))
            .unwrap_or(LenKey::Zero);
        let reads: Vec<Access> = acc
            .iter()
            .filter(|(_, a)| !a.write)
            .map(|(_, a)| *a)
            .collect();
        let sharing: Vec<usize> = if opts.fuse {
            (0..passes.len())
                .filter(|&q| passes[q].shares(&reads))
                .collect()
        } else {
            Vec::new()
        };
        let joined = !sharing.is_empty()
            && (try_merge(&mut passes, &sharing, s, &acc, &key)
                || try_merge(&mut passes, &sharing[sharing.len() - 1..], s, &acc, &key));
        if !joined {
            passes.push(Building {
                steps: vec![s],
                acc,
                keys: vec![key],
            });
        }
    }
    // Where each step ended up, to place the put signals.
    let mut pass_of = std::collections::HashMap::new();
    for (pi, p) in passes.iter().enumerate() {
        for s in &p.steps {
            pass_of.insert(*s, pi);
        }
    }
    let mut signals_after: Vec<Vec<usize>> = vec![Vec::new(); passes.len()];
    let mut latest = 0usize;
    for &s in segment.iter() {
        latest = latest.max(pass_of[&s]);
        if matches!(
            steps[s].op,
            Op::Put {
                signal: Some(_),
                ..
            }
        ) {
            signals_after[latest].push(s);
        }
    }
    for (pi, mut p) in passes.into_iter().enumerate() {
        p.steps.sort_unstable();
        let first = p.steps[0];
        let dead = dead_writes(plan, me, privacy, &p, first);
        let may_alias = p.steps.iter().any(|&s| {
            let a = accesses(&steps[s].op, me);
            a.iter().enumerate().any(|(i, x)| {
                a[i + 1..]
                    .iter()
                    .any(|y| x.conflicts(y) && !x.same_place(y))
            })
        });
        let guarded = p.keys.iter().any(|k| *k != p.keys[0]);
        actions.push(Action::Pass(Pass {
            steps: p.steps,
            dead,
            guarded,
            may_alias,
        }));
        let sig = std::mem::take(&mut signals_after[pi]);
        if !sig.is_empty() {
            actions.push(Action::PutSignals(sig));
        }
    }
    segment.clear();
}

/// Merge the passes `targets` (ascending) and step `s` into `targets[0]`, if the result may run
/// element by element and everything it moves earlier is independent of what it moves past.
fn try_merge(
    passes: &mut Vec<Building>,
    targets: &[usize],
    s: usize,
    acc: &[(usize, Access)],
    key: &LenKey,
) -> bool {
    let t0 = targets[0];
    let mut groups: Vec<&[(usize, Access)]> = targets.iter().map(|&t| &passes[t].acc[..]).collect();
    groups.push(acc);
    for i in 0..groups.len() {
        for j in i + 1..groups.len() {
            if !interleavable(groups[i], groups[j]) {
                return false;
            }
        }
    }
    // Passes not merged that the merged parts move past.
    for &t in targets.iter().skip(1) {
        for r in t0 + 1..t {
            if !targets.contains(&r) && !independent(&passes[t].acc, &passes[r].acc) {
                return false;
            }
        }
    }
    for (r, pass) in passes.iter().enumerate().skip(t0 + 1) {
        if !targets.contains(&r) && !independent(acc, &pass.acc) {
            return false;
        }
    }
    for &t in targets.iter().skip(1).rev() {
        let p = passes.remove(t);
        let target = &mut passes[t0];
        target.steps.extend(p.steps);
        target.acc.extend(p.acc);
        target.keys.extend(p.keys);
    }
    let target = &mut passes[t0];
    target.steps.push(s);
    target.acc.extend_from_slice(acc);
    target.keys.push(key.clone());
    true
}

/// Places the pass writes that nothing reads later: scratch on this rank that no other rank
/// and no other channel touches there (a step of another channel may run at any time relative
/// to this pass), and that no step outside the pass touches after the pass's first step (steps
/// before it run before the pass; a step sunk into the pass moved past only steps independent
/// of it).
fn dead_writes(
    plan: &Plan,
    me: Rank,
    privacy: &Privacy,
    p: &Building,
    first: usize,
) -> Vec<Access> {
    let steps = &plan.ranks[me as usize].steps;
    let mut dead: Vec<Access> = Vec::new();
    for (_, w) in p.acc.iter().filter(|(_, a)| a.write) {
        if !privacy.private_scratch(w) || dead.contains(w) {
            continue;
        }
        let touched_later = steps.iter().enumerate().any(|(i, st)| {
            i > first && !p.steps.contains(&i) && accesses(&st.op, me).iter().any(|a| a.overlaps(w))
        });
        if !touched_later {
            dead.push(*w);
        }
    }
    dead
}

#[cfg(test)]
mod tests {
    use super::*;
    use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};

    fn plan(name: &str, p: u32) -> Plan {
        let lib = standard_library();
        compile(
            &lib,
            name,
            p,
            &example_params(name),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|d| panic!("{name}: {d:?}"))
        .plan
    }

    /// Step indices an action runs.
    fn steps_of(a: &Action) -> Vec<usize> {
        match a {
            Action::Wait(i) | Action::Signal(i) | Action::Matmul(i) | Action::HostColl(i) => {
                vec![*i]
            }
            Action::Pass(p) => p.steps.clone(),
            Action::PutSignals(l) => l.clone(),
            Action::Agree => Vec::new(),
        }
    }

    /// `allgather_one_shot`'s put into the peer's landing scratch reads `in`, as does its copy
    /// of `in` into its own block of `out`: one pass. With the check after the put (its
    /// speculative prefix) they run apart, each step on its side of the check, every step
    /// once; the waits after the check stay after it.
    #[test]
    fn nothing_is_fused_or_hoisted_across_the_agreement_check() {
        let p = plan("allgather_one_shot", 2);
        let steps = &p.ranks[0].steps;
        let first_put = steps
            .iter()
            .position(|s| matches!(s.op, Op::Put { .. }))
            .expect("a put");
        let k = first_put + 1;
        let plain = schedule(&p, 0, 0, FusionOptions::default(), None);
        assert!(
            passes(&plain)
                .iter()
                .any(|ps| ps.iter().any(|&i| i < k) && ps.iter().any(|&i| i >= k)),
            "the put and the copy share a pass without the check: {plain:?}"
        );
        let checked = schedule_checked(&p, 0, 0, FusionOptions::default(), None, Some(k));
        let at = checked
            .iter()
            .position(|a| *a == Action::Agree)
            .expect("the check");
        assert_eq!(checked.iter().filter(|a| **a == Action::Agree).count(), 1);
        for (j, a) in checked.iter().enumerate() {
            for i in steps_of(a) {
                assert_eq!(i < k, j < at, "step {i} on the wrong side: {checked:?}");
            }
        }
        let mut all: Vec<usize> = checked
            .iter()
            .filter(|a| !matches!(a, Action::PutSignals(_)))
            .flat_map(steps_of)
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..steps.len()).collect::<Vec<_>>());
        // Without a check point the schedule is the plain one.
        assert_eq!(
            schedule_checked(&p, 0, 0, FusionOptions::default(), None, None),
            plain
        );
    }

    fn passes(actions: &[Action]) -> Vec<Vec<usize>> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Pass(p) => Some(p.steps.clone()),
                _ => None,
            })
            .collect()
    }

    fn pass_with(actions: &[Action], step: usize) -> Pass {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Pass(p) if p.steps.contains(&step) => Some(p.clone()),
                _ => None,
            })
            .expect("step is in a pass")
    }

    #[test]
    fn credit_waits_move_to_entry_and_one_source_feeds_every_peer() {
        // allgather_push rank 1: copy in[0] -> out[1], then a credit wait before each put.
        let p = plan("allgather_push", 4);
        let a = schedule(&p, 1, 0, FusionOptions::default(), None);
        assert_eq!(a[..3], [Action::Wait(1), Action::Wait(3), Action::Wait(5)]);
        // They are entry credits (the puts write the peers' `out`): `>= epoch + 1`, satisfied
        // by each peer's entry signal, not by earlier launches alone.
        for w in [1, 3, 5] {
            let Op::Wait { target, .. } = &p.ranks[1].steps[w].op else {
                panic!("step {w} is a wait")
            };
            assert_eq!((target.stride, target.offset), (1, 1), "step {w}");
        }
        assert_eq!(passes(&a), vec![vec![0, 2, 4, 6]]);
        assert!(matches!(&a[4], Action::PutSignals(s) if *s == vec![2, 4, 6]));
        assert_eq!(a[5], Action::Wait(7));
        // Without hoisting, each credit wait ends the segment.
        let a = schedule(
            &p,
            1,
            0,
            FusionOptions {
                hoist_waits: false,
                ..FusionOptions::default()
            },
            None,
        );
        assert_eq!(passes(&a), vec![vec![0], vec![2], vec![4], vec![6]]);
    }

    #[test]
    fn only_waits_the_entry_can_satisfy_move() {
        // A data wait (`>= P - 1` on an add slot only steps update) stays where it is; an
        // entry credit moves only while its peers' entry signals add enough.
        let mut p = plan("allgather_push", 4);
        let steps = &p.ranks[1].steps;
        assert!(satisfied_at_entry(&p, 1, &steps[1]));
        assert!(!satisfied_at_entry(&p, 1, &steps[7]));
        for prog in &mut p.ranks {
            prog.entry_signals.clear();
        }
        assert!(!satisfied_at_entry(&p, 1, &p.ranks[1].steps[1]));
        let a = schedule(&p, 1, 0, FusionOptions::default(), None);
        assert!(!matches!(a[0], Action::Wait(_)));
    }

    #[test]
    fn pulls_fold_into_their_reduce_and_its_pushes_follow() {
        // allreduce_two_shot_pull rank 1: gets into land[2], land[3], land[0]; x[1] = reduce;
        // puts x[1] to every peer. One pass; the landing slots are never stored.
        let p = plan("allreduce_two_shot_pull", 4);
        let a = schedule(&p, 1, 0, FusionOptions::default(), None);
        let pass = pass_with(&a, 10);
        assert_eq!(pass.steps, vec![7, 8, 9, 10, 11, 12, 13]);
        assert!(!pass.guarded && !pass.may_alias);
        let land = p.buffers.iter().position(|b| b.name == "land").unwrap() as u32;
        assert_eq!(pass.dead.len(), 3);
        assert!(pass
            .dead
            .iter()
            .all(|d| d.region.buffer == land && d.rank == 1));
    }

    #[test]
    fn wire_reduce_casts_pushes_and_decodes_in_one_guarded_pass() {
        // allreduce_two_shot_wire rank 1: 6 cast of its own chunk into land[1], 7 wait, 8 reduce,
        // 9 cast, 10-12 puts of the cast, 13 decode.
        let p = plan("allreduce_two_shot_wire", 4);
        let a = schedule(&p, 1, 0, FusionOptions::default(), None);
        let pass = pass_with(&a, 8);
        // The cast of 6 touches only x[1] and land[1] of rank 1, which no peer touches: it
        // sinks past the wait into its reader's pass.
        assert_eq!(pass.steps, vec![6, 8, 9, 10, 11, 12, 13]);
        let wait = a.iter().position(|x| *x == Action::Wait(7)).unwrap();
        let at = a
            .iter()
            .position(|x| matches!(x, Action::Pass(q) if q.steps.contains(&8)));
        assert!(at > Some(wait));
        // x[1] is split n over 4 chunks, gath[1] holds ceil(n/4): equal only when n allows.
        assert!(pass.guarded);
        // land[1] and gath[1] of rank 1: the peers put into their own slots (land[p], and
        // gath[1] in *their* memory), so rank 1's are read only inside this pass: not stored.
        let id = |n: &str| p.buffers.iter().position(|b| b.name == n).unwrap() as u32;
        let mut dead: Vec<(u32, u32)> = pass
            .dead
            .iter()
            .map(|d| (d.region.buffer, d.region.first))
            .collect();
        dead.sort_unstable();
        let mut want = vec![(id("land"), 1), (id("gath"), 1)];
        want.sort_unstable();
        assert_eq!(dead, want);
        assert!(pass.dead.iter().all(|d| d.rank == 1));
        // The decodes after the wait touch different chunks: one pass each.
        assert_eq!(pass_with(&a, 15).steps, vec![15]);
        // Without sinking the cast runs before the wait, alone, and its slot is stored.
        let a = schedule(
            &p,
            1,
            0,
            FusionOptions {
                sink_private: false,
                ..FusionOptions::default()
            },
            None,
        );
        assert_eq!(pass_with(&a, 6).steps, vec![6]);
        assert!(pass_with(&a, 6).dead.is_empty());
        assert_eq!(pass_with(&a, 8).steps, vec![8, 9, 10, 11, 12, 13]);
    }

    #[test]
    fn a_step_on_a_place_a_peer_overwrites_later_does_not_sink() {
        // sink_trap rank 0: 1 `keep[0] = copy(a[0])`, 5 `signal go` (the peer may now
        // overwrite `a`), 6 and 9 waits, 10 `x[0] = reduce(keep[0], a[0])`, its reader.
        let mut lib = symsched_compiler::library::Library::new();
        lib.add_source(
            "sink_trap.sched",
            include_str!("../../tests/schedules/sink_trap.sched"),
        )
        .expect("parses");
        let p = compile(
            &lib,
            "sink_trap",
            2,
            &Default::default(),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|d| panic!("{d:?}"))
        .plan;
        let steps = &p.ranks[0].steps;
        assert!(matches!(steps[1].op, Op::Copy { .. }));
        assert!(matches!(steps[5].op, Op::Signal { .. }));
        assert!(matches!(steps[10].op, Op::Reduce { .. }));
        let at = |a: &[Action], step: usize| {
            a.iter()
                .position(|x| matches!(x, Action::Pass(q) if q.steps.contains(&step)))
                .unwrap()
        };
        let signal = |a: &[Action]| a.iter().position(|x| *x == Action::Signal(5)).unwrap();
        let a = schedule(&p, 0, 0, FusionOptions::default(), None);
        assert!(at(&a, 1) < signal(&a));
        // Without the privacy check the copy would join its reader, after the signal.
        let a = schedule(&p, 0, 0, FusionOptions::default(), Some(Fault::SinkShared));
        assert!(at(&a, 1) > signal(&a));
        assert_eq!(at(&a, 1), at(&a, 10));
    }

    #[test]
    fn steps_on_places_a_peer_touches_stay_before_the_wait() {
        // Every step before a wait in these writes or
        // reads a place some peer touches, or nothing after the wait reads what it wrote, so
        // nothing moves: the order of the non-hoisted actions is the plan's.
        for name in [
            "allreduce_two_shot",
            "allreduce_ring",
            "allgather_push",
            "alltoall_push",
        ] {
            let p = plan(name, 4);
            for r in 0..4 {
                let a = schedule(&p, r, 0, FusionOptions::default(), None);
                let b = schedule(
                    &p,
                    r,
                    0,
                    FusionOptions {
                        sink_private: false,
                        ..FusionOptions::default()
                    },
                    None,
                );
                assert_eq!(passes(&a), passes(&b), "{name} rank {r}");
            }
        }
    }

    #[test]
    fn ring_reduce_takes_its_push_and_distinct_sources_stay_apart() {
        let p = plan("allreduce_ring", 4);
        let a = schedule(&p, 1, 0, FusionOptions::default(), None);
        assert_eq!(pass_with(&a, 1).steps, vec![1, 3]);
        let p = plan("alltoall_push", 4);
        let a = schedule(&p, 1, 0, FusionOptions::default(), None);
        assert_eq!(passes(&a), vec![vec![0], vec![2], vec![4], vec![6]]);
        // Fusion off: every step alone.
        let p = plan("allreduce_two_shot_pull", 4);
        let a = schedule(
            &p,
            1,
            0,
            FusionOptions {
                fuse: false,
                ..FusionOptions::default()
            },
            None,
        );
        assert!(passes(&a).iter().all(|s| s.len() == 1));
    }

    #[test]
    fn a_put_signal_waits_for_every_earlier_step() {
        // Every fused put's signal goes out after every element-wise step before it in program
        // order has run (whichever pass holds it).
        for name in [
            "allreduce_two_shot",
            "allreduce_two_shot_wire",
            "allreduce_two_shot_pull",
            "allgather_push",
            "reduce_scatter_push_wire",
        ] {
            let p = plan(name, 4);
            for r in 0..4 {
                let a = schedule(&p, r, 0, FusionOptions::default(), None);
                let steps = &p.ranks[r as usize].steps;
                let mut done: Vec<usize> = Vec::new();
                let mut signalled = 0;
                for act in &a {
                    match act {
                        Action::Pass(ps) => done.extend(&ps.steps),
                        Action::PutSignals(sig) => {
                            for s in sig {
                                signalled += 1;
                                for i in (0..*s).filter(|i| is_elementwise(&steps[*i].op)) {
                                    assert!(
                                        done.contains(&i),
                                        "{name} rank {r}: signal of {s} before step {i}"
                                    );
                                }
                            }
                        }
                        _ => {}
                    }
                }
                let puts = steps
                    .iter()
                    .filter(|s| {
                        matches!(
                            s.op,
                            Op::Put {
                                signal: Some(_),
                                ..
                            }
                        )
                    })
                    .count();
                assert_eq!(signalled, puts, "{name} rank {r}: every put signal once");
            }
        }
    }
}
