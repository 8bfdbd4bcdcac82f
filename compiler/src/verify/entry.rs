//! The entry rule (E0414, E0415): a rank's role buffers belong to the collective only from the
//! moment that rank has entered the launch — before that its caller may still be writing them
//! (filling an input, zeroing an output). So every remote access to a role buffer must happen
//! after its owner's entry:
//!
//! - E0414: a read by another rank (a get);
//! - E0415: a write by another rank (a put): a push that lands before the owner entered is
//!   overwritten by the caller's own write, or overwrites data the caller still uses.
//!
//! The owner's entry happens before its first step and before every wait that only its entry
//! credit can satisfy ([`credits::entry_waits`]); so an access is ordered after it when the
//! owner's first step, or one of those waits, happens before the access. The compiler inserts
//! entry credits exactly where the dataflow does not already give that order
//! (`compiler/src/ir/credits.rs`), so E0415 refuses hand-edited programs and compiler bugs; a
//! pull schedule must still announce its inputs before peers read them (E0414).

use super::race::{Loc, LocAccesses};
use super::{step_error, step_text, Findings};
use crate::diag::Diagnostic;
use crate::ir::credits::entry_waits;
use crate::ir::graph::{Event, HappensBefore};
use crate::ir::{Program, StepRef};
use std::collections::HashSet;
use symsched_plan::{BufferRole, Rank};

/// Whether rank `q`'s entry into the launch happens before event `ev`.
fn entered_before(hb: &HappensBefore, waits: &[Vec<StepRef>], q: Rank, ev: Event) -> bool {
    ev.step().rank == q
        || hb
            .chains()
            .firsts(q)
            .any(|first| hb.precedes(Event::Step(first), ev))
        || waits[q as usize]
            .iter()
            .any(|&w| w == ev.step() || hb.precedes(Event::Step(w), ev))
}

/// E0414 and E0415 over every role location's accesses.
pub(super) fn check(
    prog: &Program,
    hb: &HappensBefore,
    locs: &[(Loc, LocAccesses)],
) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
    let waits = entry_waits(prog);
    let unit = "step(s) accessing a role buffer before its owner entered";
    let (mut reads, mut writes) = (Findings::new(unit), Findings::new(unit));
    let mut reported: HashSet<StepRef> = HashSet::new();
    for &((r, buf, c), ref acc) in locs {
        if prog.buffers[buf as usize].role == BufferRole::Scratch {
            continue;
        }
        for &(ev, write) in acc {
            let s = ev.step();
            // A put is issued after its credit wait and lands later still: the issue is the
            // event the entry must precede.
            if s.rank == r || entered_before(hb, &waits, r, Event::Step(s)) || !reported.insert(s) {
                continue;
            }
            let name = &prog.buffers[buf as usize].name;
            let findings = if write { &mut writes } else { &mut reads };
            if findings.full() {
                findings.skip();
                continue;
            }
            if write {
                writes.push(
                    step_error(
                        prog,
                        "E0415",
                        s,
                        format!(
                            "[race] {} may write `{name}[{c}]` on rank {r} before rank {r} has entered the launch: its caller may still be writing that buffer, and would overwrite the push",
                            step_text(prog, s)
                        ),
                        format!("not ordered after rank {r}'s entry"),
                    )
                    .with_help(format!(
                        "rank {r} grants an entry credit (`__credit[{r}]`) when it enters; the push must wait for it (the compiler inserts it), or follow a signal rank {r} sends in this launch"
                    )),
                );
            } else {
                reads.push(
                    step_error(
                        prog,
                        "E0414",
                        s,
                        format!(
                            "[race] {} may read `{name}[{c}]` on rank {r} before rank {r} has entered the launch: its caller may still be writing it",
                            step_text(prog, s)
                        ),
                        "not ordered after the owner's first step",
                    )
                    .with_help(format!(
                        "make rank {r} signal that its input is ready, and wait for it before the read"
                    )),
                );
            }
        }
    }
    (reads.into_vec(), writes.into_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::credits::insert_launch_credits;
    use crate::ir::graph;
    use crate::verify::race::locations;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, CollectiveKind, SignalMode};

    fn run(p: &Program) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
        let g = graph::build(p);
        check(p, g.happens_before().expect("acyclic"), &locations(p))
    }

    /// Broadcast from 0 straight into rank 1's `x`.
    fn broadcast() -> Program {
        let mut b = Builder::collective(CollectiveKind::Broadcast, 2, &[("x", 1)]);
        b.signals(&[("ready", SignalMode::Add)]);
        b.put_sig(0, reg(0, 0, 1), reg(0, 0, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        b.build()
    }

    #[test]
    fn a_push_into_a_role_buffer_must_follow_the_owners_entry() {
        let prog = broadcast();
        let (reads, writes) = run(&prog);
        assert!(reads.is_empty(), "{reads:?}");
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert_eq!(writes[0].code, "E0415");
        assert_eq!(writes[0].span(), Some(prog.step(sr(0, 0)).span));
    }

    #[test]
    fn the_entry_credit_orders_the_push() {
        let mut prog = broadcast();
        insert_launch_credits(&mut prog);
        prog.assign_epoch_strides();
        let (reads, writes) = run(&prog);
        assert!(reads.is_empty() && writes.is_empty(), "{writes:?}");
        // Turned back into an exit credit, the same wait orders nothing within the launch.
        let credit: Vec<bool> = (0..prog.signals.len() as u32)
            .map(|s| graph::is_credit_slot(&prog, s))
            .collect();
        for s in prog.ranks.iter_mut().flatten() {
            if let symsched_plan::Op::Wait { slot, target, .. } = &mut s.op {
                if credit[*slot as usize] {
                    target.offset = 0;
                }
            }
        }
        let entries = std::mem::take(&mut prog.entry_signals);
        for (q, e) in entries.into_iter().enumerate() {
            prog.exit_signals[q].extend(e);
        }
        assert_eq!(run(&prog).1.len(), 1);
    }

    #[test]
    fn a_push_after_a_signal_of_the_owner_needs_no_credit() {
        let mut b = Builder::collective(CollectiveKind::Broadcast, 2, &[("x", 1)]);
        b.signals(&[("ready", SignalMode::Add), ("here", SignalMode::Add)]);
        b.signal(1, 1, 0, SignalMode::Add, 1);
        b.wait(0, 1, Cmp::Ge, 1);
        b.put_sig(0, reg(0, 0, 1), reg(0, 0, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        let (reads, writes) = run(&b.build());
        assert!(reads.is_empty() && writes.is_empty(), "{writes:?}");
    }

    #[test]
    fn a_get_from_a_role_buffer_must_follow_the_owners_entry() {
        // Rank 0 reads rank 1's `x` at once: rank 1's caller may still be writing it.
        let mut b = Builder::collective(CollectiveKind::Broadcast, 2, &[("x", 1)]);
        b.signals(&[("ready", SignalMode::Add), ("done", SignalMode::Add)]);
        let get = b.get(0, reg(0, 0, 1), reg(0, 0, 1), 1);
        b.signal(0, 1, 1, SignalMode::Add, 1);
        b.wait(1, 1, Cmp::Ge, 1);
        let prog = b.build();
        let (reads, writes) = run(&prog);
        assert!(writes.is_empty(), "{writes:?}");
        assert_eq!(reads.len(), 1, "{reads:?}");
        assert_eq!(reads[0].code, "E0414");
        assert_eq!(reads[0].span(), Some(prog.step(get).span));
        // Announced first: rank 1 signals `ready`, rank 0 waits for it before the get.
        let mut b = Builder::collective(CollectiveKind::Broadcast, 2, &[("x", 1)]);
        b.signals(&[("ready", SignalMode::Add), ("done", SignalMode::Add)]);
        b.signal(1, 0, 0, SignalMode::Add, 1);
        b.wait(0, 0, Cmp::Ge, 1);
        b.get(0, reg(0, 0, 1), reg(0, 0, 1), 1);
        b.signal(0, 1, 1, SignalMode::Add, 1);
        b.wait(1, 1, Cmp::Ge, 1);
        assert!(run(&b.build()).0.is_empty());
    }
}
