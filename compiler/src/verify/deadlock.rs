//! Deadlock (E042x), by simulation: every chain (a channel of a rank; without channels, the rank)
//! advances while its next step is enabled (a wait whose comparison holds, a hostcoll all members
//! have reached, anything else), signal updates apply at once. With add-slots and `>=`/`>` waits
//! the outcome does not depend on the order chains are advanced in, so a chain left blocked is
//! blocked in every execution.
//!
//! - E0421: the wait cannot be satisfied by any combination of the updates the program sends
//!   to that slot (e.g. `wait s >= 3` with two `+= 1`).
//! - E0422: enough updates exist, but they come from ranks that are themselves blocked (a
//!   cycle: the wait needs an update that comes after it).
//! - E0423: a hostcoll some member never reaches.

use super::{span_of, step_error, step_text};
use crate::diag::Diagnostic;
use crate::ir::graph::{self, hostcoll_instances, DataflowGraph};
use crate::ir::{Program, StepRef};
use std::collections::BTreeSet;
use symsched_plan::{Cmp, Op, Rank, SignalMode};

/// The first blocked step of every rank that cannot finish.
pub(super) fn check(prog: &Program, _g: &DataflowGraph) -> Vec<Diagnostic> {
    let p = prog.ranks.len();
    let slots = prog.signals.len();
    let mut counter = vec![0u64; p * slots];
    // Entry signals are sent before any rank's first step; they satisfy the entry credits.
    // (Exit credits are `>= 0` within one launch.)
    for u in prog.entry_signals.iter().flatten() {
        let (q, sl) = (u.peer as usize, u.slot as usize);
        if q < p && sl < slots && u.mode == SignalMode::Add {
            counter[q * slots + sl] = counter[q * slots + sl].saturating_add(u.value);
        }
    }
    let chains = prog.chains();
    // Each chain's steps in order, and how many of them ran.
    let mut seq: Vec<Vec<StepRef>> = vec![Vec::new(); chains.count()];
    for (at, _) in prog.steps() {
        seq[chains.chain(at) as usize].push(at);
    }
    let mut done = vec![0usize; seq.len()];
    let ran =
        |done: &[usize], s: StepRef| (chains.pos(s) as usize) < done[chains.chain(s) as usize];
    let (instances, of_step) = hostcoll_instances(prog);
    loop {
        let mut progress = false;
        for ch in 0..seq.len() {
            while let Some(&here) = seq[ch].get(done[ch]) {
                let r = here.rank as usize;
                let step = prog.step(here);
                match &step.op {
                    Op::Wait { slot, cmp, target } => {
                        let sl = *slot as usize;
                        let ok = sl < slots && cmp.holds(counter[r * slots + sl], target.offset);
                        if !ok {
                            break;
                        }
                    }
                    Op::HostColl { .. } => {
                        let inst = &instances[of_step[&here]];
                        let next = |s: StepRef| {
                            seq[chains.chain(s) as usize]
                                .get(done[chains.chain(s) as usize])
                                .copied()
                        };
                        let all_here = inst
                            .steps
                            .iter()
                            .all(|s| s.is_some_and(|s| next(s) == Some(s)));
                        if !all_here {
                            break;
                        }
                        // The collective completes on every member together.
                        for s in inst.steps.iter().flatten() {
                            if *s != here {
                                done[chains.chain(*s) as usize] += 1;
                            }
                        }
                    }
                    Op::Signal { update }
                    | Op::Put {
                        signal: Some(update),
                        ..
                    } => {
                        let (q, sl) = (update.peer as usize, update.slot as usize);
                        if q < p && sl < slots {
                            let c = &mut counter[q * slots + sl];
                            *c = match update.mode {
                                SignalMode::Add => c.saturating_add(update.value),
                                SignalMode::Set => update.value,
                            };
                        }
                    }
                    _ => {}
                }
                done[ch] += 1;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    // Where the chain of `s` stopped (`None`: it finished).
    let blocked_at = |s: StepRef| {
        let ch = chains.chain(s) as usize;
        seq[ch].get(done[ch]).copied()
    };
    let updates = graph::updates_by_slot(prog);
    let mut hard = Vec::new();
    let mut cyclic = Vec::new();
    for ch in 0..seq.len() {
        let Some(&w) = seq[ch].get(done[ch]) else {
            continue;
        };
        let r = w.rank as usize;
        match &prog.step(w).op {
            Op::Wait { slot, cmp, target } => {
                let ups = updates.get(&(w.rank, *slot)).cloned().unwrap_or_default();
                let mode = prog.signals[*slot as usize].mode;
                let reachable = satisfiable(mode, *cmp, target.offset, &ups);
                let pending: Vec<StepRef> = ups
                    .iter()
                    .map(|u| u.at)
                    .filter(|u| !ran(&done, *u))
                    .collect();
                let total: u64 = ups.iter().map(|u| u.value).fold(0, u64::saturating_add);
                let slot_name = prog.slot_name(*slot).to_string();
                if !reachable {
                    let senders: BTreeSet<Rank> = ups.iter().map(|u| u.at.rank).collect();
                    let from = if senders.is_empty() {
                        "no rank signals it".to_string()
                    } else {
                        format!(
                            "from rank(s) {}",
                            senders
                                .iter()
                                .map(|q| q.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    };
                    let what = match (mode, graph::add_threshold(*cmp, target.offset)) {
                        (SignalMode::Add, Some(need)) if matches!(cmp, Cmp::Ge | Cmp::Gt) => format!(
                            "at most {total} can reach `{slot_name}` on rank {r} ({from}) but it needs {need}"
                        ),
                        (SignalMode::Add, _) => format!(
                            "no combination of the {} update(s) to `{slot_name}` on rank {r} ({from}, {total} in all) satisfies it",
                            ups.len()
                        ),
                        (SignalMode::Set, _) => format!(
                            "no update sets `{slot_name}` on rank {r} to a value that satisfies it"
                        ),
                    };
                    let mut d = step_error(
                        prog,
                        "E0421",
                        w,
                        format!(
                            "[deadlock] {} can never be satisfied: {what}",
                            step_text(prog, w)
                        ),
                        "this wait blocks forever",
                    )
                    .with_help(format!(
                        "add the missing `signal {slot_name} @ {r} ...` or lower the target"
                    ));
                    for u in ups.iter().take(3) {
                        d = d.with_label(
                            span_of(prog, u.at),
                            format!("an update from rank {}", u.at.rank),
                        );
                    }
                    hard.push(d);
                } else {
                    let senders: BTreeSet<Rank> = pending.iter().map(|u| u.rank).collect();
                    let list: Vec<String> = senders.iter().map(|q| q.to_string()).collect();
                    let mut d = step_error(
                        prog,
                        "E0422",
                        w,
                        format!(
                            "[deadlock] {} waits forever: `{slot_name}` reached {} but the updates that would satisfy it come from rank(s) {} which are blocked themselves (a cycle)",
                            step_text(prog, w),
                            counter_value(&ups, |s| ran(&done, s)),
                            list.join(", ")
                        ),
                        "blocked here",
                    );
                    for u in pending.iter().take(3) {
                        let q = u.rank as usize;
                        // Not run, so its chain stopped at or before it.
                        let blocked = blocked_at(*u).unwrap_or(*u);
                        let why = if chains.chain(*u) == chains.chain(w) {
                            format!("sent by this rank only after the wait (step {})", u.index)
                        } else if q == r {
                            format!(
                                "would be sent by channel {} of this rank, blocked at step {} `{}`",
                                prog.step(*u).channel,
                                blocked.index,
                                prog.source_op_text(&prog.step(blocked).op)
                            )
                        } else {
                            format!(
                                "would be sent by rank {q}, blocked at step {} `{}`",
                                blocked.index,
                                prog.source_op_text(&prog.step(blocked).op)
                            )
                        };
                        d = d.with_label(span_of(prog, *u), why);
                    }
                    cyclic.push(d);
                }
            }
            Op::HostColl { members, .. } => {
                let inst = &instances[of_step[&w]];
                let missing: Vec<String> = inst
                    .members
                    .iter()
                    .zip(&inst.steps)
                    .filter(|(_, s)| s.is_none_or(|s| blocked_at(s) != Some(s)))
                    .map(|(m, _)| m.to_string())
                    .collect();
                hard.push(step_error(
                    prog,
                    "E0423",
                    w,
                    format!(
                        "[deadlock] {} never completes: member(s) {} over {members:?} do not reach the matching hostcoll",
                        step_text(prog, w),
                        missing.join(", ")
                    ),
                    "this host collective blocks forever",
                ));
            }
            _ => {}
        }
    }
    hard.extend(cyclic);
    hard
}

/// The value the slot reached in the simulation (sum or last set of the delivered updates).
fn counter_value(ups: &[graph::Update], ran: impl Fn(StepRef) -> bool) -> u64 {
    let mut v = 0u64;
    for u in ups.iter().filter(|u| ran(u.at)) {
        v = match u.mode {
            SignalMode::Add => v.saturating_add(u.value),
            SignalMode::Set => u.value,
        };
    }
    v
}

/// Whether some combination of `ups` satisfies `cmp k` (ignoring order and blocking).
fn satisfiable(mode: SignalMode, cmp: Cmp, k: u64, ups: &[graph::Update]) -> bool {
    if cmp.holds(0, k) {
        return true;
    }
    match mode {
        SignalMode::Set => ups.iter().any(|u| cmp.holds(u.value, k)),
        SignalMode::Add => match cmp {
            Cmp::Ge | Cmp::Gt | Cmp::Ne => {
                let total: u64 = ups.iter().map(|u| u.value).fold(0, u64::saturating_add);
                cmp.holds(total, k) || (cmp == Cmp::Ne && total > 0)
            }
            // Subset sums up to the target (targets are small in practice; cap the table).
            Cmp::Eq | Cmp::Le | Cmp::Lt => {
                let cap = (k.min(1 << 16) + 1) as usize;
                let mut can = vec![false; cap];
                can[0] = true;
                for u in ups {
                    let v = u.value as usize;
                    for s in (0..cap).rev() {
                        if can[s] && s + v < cap {
                            can[s + v] = true;
                        }
                    }
                }
                (0..cap).any(|s| can[s] && cmp.holds(s as u64, k))
            }
        },
    }
}

/// A diagnostic for a sync cycle the simulation did not block on (defensive: the rules make
/// every sync edge an update the wait cannot do without, so a cycle blocks the simulation).
pub(super) fn cycle_error(prog: &Program, g: &DataflowGraph) -> Diagnostic {
    match g.cycle_step() {
        Some(at) => step_error(
            prog,
            "E0422",
            at,
            format!(
                "[deadlock] {} is on a cycle of signal→wait dependencies",
                step_text(prog, at)
            ),
            "on a cycle",
        ),
        None => Diagnostic::error("E0422", "[deadlock] the program cannot be ordered")
            .with_label(prog.header_span, "in this schedule"),
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::graph;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, SignalMode};

    fn run(p: &crate::ir::Program) -> Vec<crate::diag::Diagnostic> {
        super::check(p, &graph::build(p))
    }

    fn codes(p: &crate::ir::Program) -> Vec<&'static str> {
        run(p).iter().map(|d| d.code).collect()
    }

    #[test]
    fn wait_for_more_than_is_ever_sent() {
        let mut b = Builder::new(2, &[("x", 1)], &[("s", SignalMode::Add)]);
        b.signal(0, 0, 1, SignalMode::Add, 1);
        let w = b.wait(1, 0, Cmp::Ge, 2);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d[0].code, "E0421");
        assert_eq!(d[0].span(), Some(prog.step(w).span));
    }

    #[test]
    fn mutual_wait_is_a_cycle() {
        let mut b = Builder::new(2, &[("x", 1)], &[("s", SignalMode::Add)]);
        let w0 = b.wait(0, 0, Cmp::Ge, 1);
        let s0 = b.signal(0, 0, 1, SignalMode::Add, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        b.signal(1, 0, 0, SignalMode::Add, 1);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(codes(&prog), vec!["E0422", "E0422"]);
        assert_eq!(d[0].span(), Some(prog.step(w0).span));
        assert!(
            d[1].labels.iter().any(|(s, _)| *s == prog.step(s0).span),
            "{d:?}"
        );
    }

    #[test]
    fn signal_after_own_wait_is_a_self_cycle() {
        let mut b = Builder::new(1, &[("x", 1)], &[("s", SignalMode::Add)]);
        b.wait(0, 0, Cmp::Ge, 1);
        b.signal(0, 0, 0, SignalMode::Add, 1);
        assert_eq!(codes(&b.build()), vec!["E0422"]);
    }

    #[test]
    fn hostcoll_member_missing() {
        let mut b = Builder::new(2, &[("x", 1)], &[]);
        b.hostcoll(0, reg(0, 0, 1), &[0, 1]);
        assert_eq!(codes(&b.build()), vec!["E0423"]);
    }

    #[test]
    fn eq_wait_on_sum_that_skips_the_value() {
        let mut b = Builder::new(2, &[("x", 1)], &[("s", SignalMode::Add)]);
        b.signal(0, 0, 1, SignalMode::Add, 2);
        b.wait(1, 0, Cmp::Eq, 1);
        assert_eq!(codes(&b.build()), vec!["E0421"]);
    }

    #[test]
    fn ordered_handshake_completes_with_a_warning_for_eq() {
        let mut b = Builder::new(2, &[("x", 1)], &[("s", SignalMode::Add)]);
        b.signal(0, 0, 1, SignalMode::Add, 1);
        b.wait(1, 0, Cmp::Eq, 1);
        let prog = b.build();
        assert!(run(&prog).is_empty());
        let w = crate::verify::warnings(&prog);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].code, "W0422");
    }
}
