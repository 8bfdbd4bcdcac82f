//! Races (E041x): two accesses of one memory location (buffer, chunk, owning rank), at least one
//! a write, not ordered by happens-before.
//!
//! - E0410: a read not ordered after the put that fills the location (the read may see the old
//!   contents: typically a missing wait);
//! - E0411: two unordered writes;
//! - E0412: any other unordered read/write pair (e.g. a put that may overwrite a chunk before the
//!   owner has read it: a missing "slot free" handshake) — including a put unordered with a read
//!   when its sender wrote the location before: a later overwrite, not a read before arrival;
//! - E0413: a remote access to a role buffer (or to scratch its owner rewrites) that may still be
//!   in flight when the owner returns.
//!
//! Remote accesses to a role buffer before its owner entered the launch are the entry rule's
//! (E0414, E0415: [`super::entry`]).
//!
//! A put's write into the peer's memory is an access of the put's arrival event, which only the
//! put's own signal or a later standalone signal of the sender orders (`docs/verifier.md`).
//!
//! Pairs of a hostcoll and a shmem step are left to the interop rule (E045x).

use super::{span_of, step_error, step_text, Findings};
use crate::diag::Diagnostic;
use crate::ir::graph::{accesses, Event, HappensBefore};
use crate::ir::{Program, StepRef};
use std::collections::{HashMap, HashSet};
use symsched_plan::{BufferId, Op, Rank};

/// A memory location: (owning rank, buffer, chunk).
pub(super) type Loc = (Rank, BufferId, u32);

/// Accesses of one location: (event, is-write), in step order.
pub(super) type LocAccesses = Vec<(Event, bool)>;

/// Every location's accesses, locations sorted.
pub(super) fn locations(prog: &Program) -> Vec<(Loc, LocAccesses)> {
    let mut map: HashMap<Loc, LocAccesses> = HashMap::new();
    for (at, s) in prog.steps() {
        for a in accesses(&s.op, at.rank) {
            let ev = a.event(at);
            for c in a.first..a.first + a.count {
                let v = map.entry((a.rank, a.buffer, c)).or_default();
                // A step that reads and writes one location at one event (reduce in place,
                // hostcoll) is one access: a write. Steps come in order, so a repeat is the last
                // entry. A put onto its own source reads at issue and writes at arrival: two.
                match v.last_mut() {
                    Some(e) if e.0 == ev => e.1 |= a.write,
                    _ => v.push((ev, a.write)),
                }
            }
        }
    }
    let mut out: Vec<(Loc, LocAccesses)> = map.into_iter().collect();
    out.sort_unstable_by_key(|(l, _)| *l);
    out
}

/// Whether a step is a shmem step for the interop rule.
pub(super) fn is_shmem(op: &Op) -> bool {
    matches!(op, Op::Put { .. } | Op::Get { .. } | Op::Reduce { .. })
}

pub(super) fn check(
    prog: &Program,
    hb: &HappensBefore,
    locs: &[(Loc, LocAccesses)],
) -> Vec<Diagnostic> {
    // Once the shown findings are full, only locations are counted (a pair of steps may race
    // on many chunks, and remembering pairs would cost memory per pair).
    let mut out = Findings::new("location(s) with unordered accesses");
    let mut reported: HashSet<(StepRef, StepRef)> = HashSet::new();
    for (loc, acc) in locs {
        let (loc, acc) = (*loc, acc);
        let mut counted = false;
        for (i, &(ea, wa)) in acc.iter().enumerate() {
            for &(eb, wb) in &acc[i + 1..] {
                if !(wa || wb) || hb.events_ordered(ea, eb) {
                    continue;
                }
                let (a, b) = (ea.step(), eb.step());
                let (oa, ob) = (&prog.step(a).op, &prog.step(b).op);
                let hc = |o: &Op| matches!(o, Op::HostColl { .. });
                if (hc(oa) && is_shmem(ob)) || (hc(ob) && is_shmem(oa)) {
                    continue;
                }
                if out.full() {
                    if !counted {
                        out.skip();
                        counted = true;
                    }
                    continue;
                }
                if !reported.insert((a, b)) {
                    continue;
                }
                // A put whose sender issued another write of this location before it is a
                // later overwrite: against a read, the slip is the missing "slot free"
                // handshake (E0412), not a read before the data arrives (E0410).
                let write = if wa { ea } else { eb };
                let overwrite = (wa != wb)
                    && acc.iter().any(|&(e0, w0)| {
                        w0 && e0 != write
                            && hb.precedes(Event::Step(e0.step()), Event::Step(write.step()))
                    });
                let mut d = race(prog, loc, (a, wa), (b, wb), overwrite);
                if let Some(p) = issued_not_arrived(hb, (ea, eb)) {
                    let fused = matches!(
                        &prog.step(p).op,
                        Op::Put { peer, signal: Some(u), .. } if u.peer == *peer
                    );
                    let why = if fused {
                        "only a wait for its own signal orders its arrival".to_string()
                    } else {
                        format!(
                            "only its signal, or a standalone signal after it on rank {}, orders its arrival (a later put with signal does not)",
                            p.rank
                        )
                    };
                    d.notes.push(format!(
                        "{} is issued before the other access, but its data may still be in flight: {why}",
                        step_text(prog, p)
                    ));
                }
                out.push(d);
            }
        }
    }
    in_flight_at_return(prog, hb, locs, &mut out);
    out.into_vec()
}

/// The put of a pair whose arrival is unordered with the other access although the put itself
/// is issued before it: the typical slip under the non-blocking put model.
fn issued_not_arrived(hb: &HappensBefore, pair: (Event, Event)) -> Option<StepRef> {
    let (a, b) = pair;
    for (x, y) in [(a, b), (b, a)] {
        if let Event::Arrival(p) = x {
            if hb.precedes(Event::Step(p), y) {
                return Some(p);
            }
        }
    }
    None
}

/// E0413: the caller owns a rank's role buffers again once that rank's program returns, so
/// every access another rank makes to them must happen before the owner's last step.
///
/// Scratch is mostly exempt: launch credits make a peer's *next-launch* access to it wait
/// until the owner finished this launch. They do not gate the owner's own steps, though, so a
/// scratch location the owner itself writes (a pull schedule's staging slot) is checked like a
/// role buffer: the owner's next launch rewrites it as soon as it starts, while a peer's access
/// of this launch might still be in flight.
fn in_flight_at_return(
    prog: &Program,
    hb: &HappensBefore,
    locs: &[(Loc, LocAccesses)],
    out: &mut Findings,
) {
    let mut reported: HashSet<StepRef> = HashSet::new();
    for &((r, buf, c), ref acc) in locs {
        let scratch = prog.buffers[buf as usize].role == symsched_plan::BufferRole::Scratch;
        let owner_writes = acc.iter().any(|&(ev, write)| write && ev.step().rank == r);
        if scratch && !owner_writes {
            continue;
        }
        // The owner returns after the last step of every channel: an access ordered before any
        // of them is done by then. The last step of the rank's program is the one to show.
        let end = prog.ranks[r as usize]
            .len()
            .checked_sub(1)
            .map(|i| StepRef {
                rank: r,
                index: i as u32,
            });
        for &(ev, write) in acc {
            let s = ev.step();
            if s.rank == r
                || hb
                    .chains()
                    .lasts(r)
                    .any(|e| hb.precedes(ev, Event::Step(e)))
                || !reported.insert(s)
            {
                continue;
            }
            if out.full() {
                out.skip();
                continue;
            }
            let what = if write { "write into" } else { "read of" };
            let owner = if scratch {
                "which its next launch rewrites"
            } else {
                "which the caller owns after the launch"
            };
            let mut d = step_error(
                prog,
                "E0413",
                s,
                format!(
                    "[race] {} may still be in flight when rank {r} returns: {what} `{}[{c}]` on rank {r}, {owner}",
                    step_text(prog, s),
                    prog.buffers[buf as usize].name
                ),
                "not ordered before the owner's last step",
            )
            .with_help(format!("make rank {r} wait for it (signal + wait) before it finishes"));
            if let Some(e) = end {
                d = d.with_label(span_of(prog, e), format!("rank {r}'s last step"));
            }
            out.push(d);
        }
    }
}

fn race(
    prog: &Program,
    loc: Loc,
    a: (StepRef, bool),
    b: (StepRef, bool),
    overwrite: bool,
) -> Diagnostic {
    let (r, buf, c) = loc;
    let place = format!(
        "`{}[{c}]` on rank {r}",
        prog.buffers
            .get(buf as usize)
            .map(|b| b.name.as_str())
            .unwrap_or("?")
    );
    let is_put = |s: StepRef| matches!(prog.step(s).op, Op::Put { .. });
    let (code, primary, other, msg, plabel, olabel) = if a.1 && b.1 {
        (
            "E0411",
            b.0,
            a.0,
            "two unordered writes to",
            "writes here",
            "also writes, unordered",
        )
    } else {
        let (read, write) = if a.1 { (b.0, a.0) } else { (a.0, b.0) };
        if is_put(write) && overwrite {
            (
                "E0412",
                write,
                read,
                "a put may overwrite a value still being read in",
                "may overwrite the data before it is read",
                "the read",
            )
        } else if is_put(write) {
            (
                "E0410",
                read,
                write,
                "a read not ordered after the put that fills",
                "reads here, possibly before the data arrives",
                "the put that fills it",
            )
        } else {
            (
                "E0412",
                write,
                read,
                "a write unordered with a read of",
                "may overwrite the data before it is read",
                "the read",
            )
        }
    };
    step_error(
        prog,
        code,
        primary,
        format!(
            "[race] {msg} {place}: {} and {}",
            step_text(prog, primary),
            step_text(prog, other)
        ),
        plabel,
    )
    .with_label(span_of(prog, other), olabel)
    .with_help("order them with a signal and a wait")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::graph;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, SignalMode};

    fn run(p: &Program) -> Vec<Diagnostic> {
        let g = graph::build(p);
        check(p, g.happens_before().expect("acyclic"), &locations(p))
    }

    #[test]
    fn read_before_the_put_arrives() {
        let mut b = Builder::new(2, &[("x", 1), ("land", 1)], &[("s", SignalMode::Add)]);
        let put = b.put_sig(0, reg(0, 0, 1), reg(1, 0, 1), 1, 0, 1);
        let read = b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        b.wait(1, 0, Cmp::Ge, 1);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0410");
        assert_eq!(d[0].span(), Some(prog.step(read).span));
        assert_eq!(d[0].labels[1].0, prog.step(put).span);
    }

    #[test]
    fn waiting_first_is_fine() {
        let mut b = Builder::new(2, &[("x", 1), ("land", 1)], &[("s", SignalMode::Add)]);
        b.put_sig(0, reg(0, 0, 1), reg(1, 0, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        assert!(run(&b.build()).is_empty());
    }

    /// Rank 0 puts `x[0]` into rank 1's `land[0]` without a signal, then `x[1]` into `land[1]`
    /// with a fused signal; rank 1 waits for that signal and reads both slots. `between` runs
    /// on rank 0 between the two puts.
    fn plain_put_then_put_with_signal(between: impl FnOnce(&mut Builder)) -> (Program, StepRef) {
        let mut b = Builder::new(
            2,
            &[("x", 2), ("land", 2)],
            &[("s", SignalMode::Add), ("t", SignalMode::Add)],
        );
        b.put(0, reg(0, 0, 1), reg(1, 0, 1), 1);
        between(&mut b);
        b.put_sig(0, reg(0, 1, 1), reg(1, 1, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        let read = b.copy(1, reg(1, 0, 2), reg(0, 0, 2));
        (b.build(), read)
    }

    #[test]
    fn a_later_put_with_signal_does_not_order_an_earlier_put() {
        let (prog, read) = plain_put_then_put_with_signal(|_| {});
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0410");
        assert_eq!(d[0].span(), Some(prog.step(read).span));
        assert_eq!(d[0].labels[1].0, prog.step(sr(0, 0)).span);
        assert!(
            d[0].notes.iter().any(|n| n.contains("still be in flight")),
            "{d:?}"
        );
    }

    #[test]
    fn a_standalone_signal_after_the_put_orders_it() {
        // The standalone signal goes to another slot nobody waits for: the quiet before it
        // completes the plain put, and the fused signal after it carries that order.
        let (prog, _) = plain_put_then_put_with_signal(|b| {
            b.signal(0, 1, 1, SignalMode::Add, 1);
        });
        assert!(run(&prog).is_empty());
    }

    #[test]
    fn a_standalone_signal_does_not_cover_a_put_with_its_own_signal() {
        // The lowering quiets before a signal only while plain puts are outstanding, so the
        // data of a fused put may land after a later standalone signal.
        let mut b = Builder::new(
            2,
            &[("x", 1), ("land", 1)],
            &[("s", SignalMode::Add), ("t", SignalMode::Add)],
        );
        let put = b.put_sig(0, reg(0, 0, 1), reg(1, 0, 1), 1, 0, 1);
        b.signal(0, 1, 1, SignalMode::Add, 1);
        b.wait(1, 1, Cmp::Ge, 1);
        let read = b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        b.wait(1, 0, Cmp::Ge, 1);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].code, d[0].span()),
            ("E0410", Some(prog.step(read).span))
        );
        assert_eq!(d[0].labels[1].0, prog.step(put).span);
    }

    #[test]
    fn the_standalone_signal_must_come_after_the_put() {
        let mut b = Builder::new(2, &[("x", 1), ("land", 1)], &[("s", SignalMode::Add)]);
        b.signal(0, 0, 1, SignalMode::Add, 1);
        let put = b.put(0, reg(0, 0, 1), reg(1, 0, 1), 1);
        b.wait(1, 0, Cmp::Ge, 1);
        let read = b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].code, d[0].span()),
            ("E0410", Some(prog.step(read).span))
        );
        assert_eq!(d[0].labels[1].0, prog.step(put).span);
    }

    #[test]
    fn a_put_into_a_role_buffer_unordered_by_its_own_signal_is_in_flight_at_return() {
        // Broadcast of two chunks: the plain put of chunk 0 is not covered by the signal of the
        // put of chunk 1, so rank 1 may return while chunk 0 is still arriving.
        let mut b = Builder::collective(symsched_plan::CollectiveKind::Broadcast, 2, &[("x", 2)]);
        b.signals(&[("ready", SignalMode::Add)]);
        let first = b.put(0, reg(0, 0, 1), reg(0, 0, 1), 1);
        b.put_sig(0, reg(0, 1, 1), reg(0, 1, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            (d[0].code, d[0].span()),
            ("E0413", Some(prog.step(first).span))
        );
    }

    #[test]
    fn a_put_may_overwrite_what_it_is_issued_after_only_once_it_arrives() {
        // Rank 1 reads land[0] and then tells rank 0 the slot is free; rank 0's put after the
        // wait is ordered after the read even though its data lands later.
        let mut b = Builder::new(2, &[("x", 1), ("land", 1)], &[("free", SignalMode::Add)]);
        b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        b.signal(1, 0, 0, SignalMode::Add, 1);
        b.wait(0, 0, Cmp::Ge, 1);
        b.put(0, reg(0, 0, 1), reg(1, 0, 1), 1);
        let prog = b.build();
        // The arrival follows the put, which follows the read: no E0412. (`land` is scratch, so
        // the arrival may outlive rank 1's program.)
        assert!(run(&prog).is_empty());
    }

    #[test]
    fn two_puts_into_one_slot() {
        let mut b = Builder::new(3, &[("x", 1), ("land", 1)], &[]);
        b.put(0, reg(0, 0, 1), reg(1, 0, 1), 2);
        b.put(1, reg(0, 0, 1), reg(1, 0, 1), 2);
        let d = run(&b.build());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].code, "E0411");
    }

    #[test]
    fn overwrite_before_read() {
        let mut b = Builder::new(2, &[("x", 1), ("land", 1)], &[]);
        b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
        b.get(0, reg(0, 0, 1), reg(1, 0, 1), 1);
        let d = run(&b.build());
        assert_eq!(d[0].code, "E0412");
    }

    #[test]
    fn a_put_into_a_role_buffer_must_finish_before_the_owner_returns() {
        let mut b = Builder::collective(symsched_plan::CollectiveKind::Broadcast, 2, &[("x", 1)]);
        b.signals(&[("ready", SignalMode::Add)]);
        let put = b.put_sig(0, reg(0, 0, 1), reg(0, 0, 1), 1, 0, 1);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0413");
        assert_eq!(d[0].span(), Some(prog.step(put).span));
        b.wait(1, 0, Cmp::Ge, 1);
        assert!(run(&b.build()).is_empty());
    }

    #[test]
    fn a_peer_read_of_scratch_the_owner_rewrites_must_end_before_the_owner_returns() {
        // Pull all-gather shape: rank 1 fills its scratch `stage`, announces it, and rank 0 gets
        // it. Without a `done` round rank 1 may return (and refill `stage` in its next launch)
        // while rank 0 still reads: launch credits gate only rank 0's next access, not rank 1's.
        let build = |done: bool| {
            let mut b = Builder::new(
                2,
                &[("stage", 1), ("in", 1), ("out", 1)],
                &[("ready", SignalMode::Add), ("done", SignalMode::Add)],
            );
            b.copy(1, reg(1, 0, 1), reg(0, 0, 1));
            b.signal(1, 0, 0, SignalMode::Add, 1);
            b.wait(0, 0, Cmp::Ge, 1);
            let get = b.get(0, reg(0, 0, 1), reg(2, 0, 1), 1);
            if done {
                b.signal(0, 1, 1, SignalMode::Add, 1);
                b.wait(1, 1, Cmp::Ge, 1);
            }
            (b.build(), get)
        };
        let (prog, get) = build(false);
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0413");
        assert_eq!(d[0].span(), Some(prog.step(get).span));
        assert!(
            d[0].message.contains("next launch rewrites"),
            "{}",
            d[0].message
        );
        assert!(run(&build(true).0).is_empty());
    }

    #[test]
    fn alltoall_at_64_is_fast_enough() {
        // Every rank puts its chunk j to rank j with a signal, then waits for P updates.
        let p = 64;
        let mut b = Builder::new(p, &[("in", p), ("out", p)], &[("s", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, j, 1), reg(1, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            b.copy(r, reg(1, 0, p), reg(0, 0, p));
        }
        let prog = b.build();
        let t = std::time::Instant::now();
        let d = run(&prog);
        assert!(d.is_empty(), "{d:?}");
        // Generous bound for a debug build on a loaded machine; catches quadratic blow-ups.
        assert!(t.elapsed().as_secs() < 30);
    }
}
