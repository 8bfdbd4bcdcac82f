//! Launch credits: the mechanism that makes back-to-back launches safe without a trailing
//! barrier, and that keeps a peer from writing into a rank's role buffers before that rank has
//! entered the launch.
//!
//! Within one launch the verifier proves every access is ordered. Across launches a fast rank
//! could start launch e+1 and write into a peer's scratch (or staged output) while that peer is
//! still reading it for launch e. So for every ordered pair (r, q) where r touches q's memory or
//! signals remotely, r waits before its first remote access to q for one credit per launch from
//! q on slot `__credit[q]`, an epoch-relative add-slot with stride 1 (with channels, every
//! channel of r waits before its own first access to q):
//!
//! - an **exit credit** (`wait __credit[q] >= e`, offset 0): q sends it when it has fully
//!   finished a launch (after the runtime copied staged outputs out: the plan's *exit
//!   signals*). Vacuous in the first launch, so the single-launch verification is unaffected.
//! - an **entry credit** (`wait __credit[q] >= e + 1`, offset 1): q sends it when it *enters*
//!   launch e (after the runtime copied staged inputs in: the plan's *entry signals*). Used when
//!   some put of r writes one of q's **role** buffers and happens-before does not already order
//!   that put after one of q's steps of this launch: the caller hands a role buffer to the
//!   collective only when it calls it, so a push that lands earlier would be overwritten by (or
//!   overwrite) the caller's own writes. Entering launch e implies q finished launch e − 1 and
//!   copied its outputs out, so the entry credit also does the exit credit's job and the number
//!   of signals per launch stays one per pair.
//!
//! In the steady state the credit arrived long before it is checked, so the cost is one flag
//! read per peer and one remote add per peer per launch. The verifier's entry rule (E0415) proves
//! every remote write into a role buffer is ordered after the owner's entry
//! (`docs/plan-schema.md`, "Entry rule").

use super::graph::{self, add_threshold};
use super::{Program, Step, StepRef, CREDIT_SLOT_PREFIX};
use symsched_plan::{BufferRole, Cmp, Op, Rank, SignalMode, SignalSlot, SignalUpdate, WaitTarget};

/// The peer a step accesses remotely, if any (put/get target, signal target other than self).
pub fn remote_peer(op: &Op, me: Rank) -> Option<Rank> {
    let peer = match op {
        Op::Put { peer, .. } | Op::Get { peer, .. } => *peer,
        Op::Signal { update } => update.peer,
        _ => return None,
    };
    (peer != me).then_some(peer)
}

/// The owner of the role buffer a step writes remotely: a put into a peer's role buffer.
pub fn remote_role_write(prog: &Program, op: &Op, me: Rank) -> Option<Rank> {
    match op {
        Op::Put { dst, peer, .. }
            if *peer != me
                && prog
                    .buffers
                    .get(dst.buffer as usize)
                    .is_some_and(|b| b.role != BufferRole::Scratch) =>
        {
            Some(*peer)
        }
        _ => None,
    }
}

/// `need[r][q]`: rank r writes one of q's role buffers in a put that happens-before does not
/// order after one of q's steps, so the pair needs an entry credit. Without a happens-before
/// (a synchronisation cycle, which the verifier refuses anyway) every such pair needs one.
fn entry_pairs(prog: &Program) -> Vec<Vec<bool>> {
    let p = prog.ranks.len();
    let mut need = vec![vec![false; p]; p];
    let writes: Vec<(StepRef, Rank)> = prog
        .steps()
        .filter_map(|(at, s)| remote_role_write(prog, &s.op, at.rank).map(|q| (at, q)))
        .filter(|(_, q)| (*q as usize) < p)
        .collect();
    if writes.is_empty() {
        return need;
    }
    let g = graph::build(prog);
    let hb = g.happens_before();
    for (at, q) in writes {
        let entered = hb.is_some_and(|hb| hb.chains().firsts(q).any(|first| hb.before(first, at)));
        if !entered {
            need[at.rank as usize][q as usize] = true;
        }
    }
    need
}

/// Insert credit waits, entry signals and exit signals. Call once, after instantiation and
/// before [`Program::assign_epoch_strides`].
pub fn insert_launch_credits(prog: &mut Program) {
    let p = prog.group_size as usize;
    let need_entry = entry_pairs(prog);
    // One slot per source rank: slot `__credit[q]` on rank r counts q's credits to r.
    let base = prog.signals.len() as u32;
    let mut used = vec![false; p];
    let mut accessors: Vec<Vec<Rank>> = vec![Vec::new(); p];
    let channels = prog.channel_count() as usize;
    for (r, steps) in prog.ranks.iter_mut().enumerate() {
        let me = r as Rank;
        // Per channel: each channel is ordered only by its own waits, so each waits for the
        // credit before its own first access to a peer (waits do not consume: one credit per
        // pair and launch still serves them all).
        let mut seen = vec![vec![false; p]; channels];
        let mut out = Vec::with_capacity(steps.len());
        for step in steps.drain(..) {
            if let Some(peer) = remote_peer(&step.op, me) {
                let seen = &mut seen[step.channel as usize];
                if !seen[peer as usize] {
                    seen[peer as usize] = true;
                    if !accessors[peer as usize].contains(&me) {
                        accessors[peer as usize].push(me);
                    }
                    used[peer as usize] = true;
                    out.push(Step {
                        op: Op::Wait {
                            slot: base + peer,
                            cmp: Cmp::Ge,
                            target: WaitTarget {
                                stride: 1,
                                offset: need_entry[r][peer as usize] as u64,
                            },
                        },
                        span: step.span,
                        inlined_from: step.inlined_from.clone(),
                        channel: step.channel,
                    });
                }
            }
            out.push(step);
        }
        *steps = out;
    }
    if !used.iter().any(|u| *u) {
        return;
    }
    for q in 0..p {
        prog.signals.push(SignalSlot {
            name: format!("{CREDIT_SLOT_PREFIX}[{q}]"),
            mode: SignalMode::Add,
        });
        prog.signal_spans.push(prog.header_span);
    }
    prog.entry_signals = vec![Vec::new(); p];
    prog.exit_signals = vec![Vec::new(); p];
    for (q, readers) in accessors.iter().enumerate() {
        for &r in readers {
            let credit = SignalUpdate {
                slot: base + q as u32,
                peer: r,
                mode: SignalMode::Add,
                value: 1,
                stride: 0,
            };
            if need_entry[r as usize][q] {
                prog.entry_signals[q].push(credit);
            } else {
                prog.exit_signals[q].push(credit);
            }
        }
    }
}

/// Per rank q, the waits (on any rank) that can complete only after q has entered the launch:
/// `>=`/`>` waits on a credit slot with a threshold of at least 1 whose only updates on the
/// waiting rank are entry signals of q. A step after one of them in program order, or ordered
/// after one by happens-before, runs after q's entry.
pub fn entry_waits(prog: &Program) -> Vec<Vec<StepRef>> {
    let p = prog.ranks.len();
    let mut out = vec![Vec::new(); p];
    if prog.entry_signals.iter().all(Vec::is_empty) {
        return out;
    }
    // (receiving rank, slot) -> the one sender of entry updates and their total, or None once
    // a second sender, an exit signal or a step's update also reaches it.
    use std::collections::HashMap;
    let mut by: HashMap<(Rank, u32), Option<(Rank, u64)>> = HashMap::new();
    for (q, ups) in prog.entry_signals.iter().enumerate() {
        for u in ups.iter().filter(|u| u.mode == SignalMode::Add) {
            let e = by.entry((u.peer, u.slot)).or_insert(Some((q as Rank, 0)));
            *e = match *e {
                Some((s, total)) if s == q as Rank => Some((s, total.saturating_add(u.value))),
                _ => None,
            };
        }
    }
    let others =
        prog.exit_signals
            .iter()
            .flatten()
            .copied()
            .chain(prog.ranks.iter().flatten().filter_map(|s| match &s.op {
                Op::Signal { update } => Some(*update),
                Op::Put {
                    signal: Some(u), ..
                } => Some(*u),
                _ => None,
            }));
    for u in others {
        if let Some(e) = by.get_mut(&(u.peer, u.slot)) {
            *e = None;
        }
    }
    for (at, s) in prog.steps() {
        let Op::Wait { slot, cmp, target } = &s.op else {
            continue;
        };
        if !graph::is_credit_slot(prog, *slot)
            || !matches!(cmp, Cmp::Ge | Cmp::Gt)
            || prog
                .signals
                .get(*slot as usize)
                .is_none_or(|x| x.mode != SignalMode::Add)
        {
            continue;
        }
        let Some(need) = add_threshold(*cmp, target.offset) else {
            continue;
        };
        if let Some(Some((q, total))) = by.get(&(at.rank, *slot)) {
            if need >= 1 && *total >= need && (*q as usize) < p {
                out[*q as usize].push(at);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;
    use symsched_plan::CollectiveKind;

    /// Broadcast from 0 pushing straight into the receivers' `x`: each pair needs an entry
    /// credit. Once rank 1 announces itself first (signal, wait), the dataflow orders the push
    /// after rank 1's entry and the pair keeps its exit credit.
    #[test]
    fn role_pushes_get_entry_credits_unless_already_ordered() {
        let build = |announce: bool| {
            let mut b = Builder::collective(CollectiveKind::Broadcast, 3, &[("x", 1)]);
            b.signals(&[("ready", SignalMode::Add), ("here", SignalMode::Add)]);
            if announce {
                b.signal(1, 1, 0, SignalMode::Add, 1);
                b.wait(0, 1, Cmp::Ge, 1);
            }
            b.put_sig(0, reg(0, 0, 1), reg(0, 0, 1), 1, 0, 1);
            b.put_sig(0, reg(0, 0, 1), reg(0, 0, 1), 2, 0, 1);
            b.wait(1, 0, Cmp::Ge, 1);
            b.wait(2, 0, Cmp::Ge, 1);
            let mut prog = b.build();
            insert_launch_credits(&mut prog);
            prog.assign_epoch_strides();
            prog
        };
        let prog = build(false);
        let credit = |q: u32| {
            prog.signals
                .iter()
                .position(|s| s.name == format!("__credit[{q}]"))
        };
        let c1 = credit(1).expect("credit slot") as u32;
        assert_eq!(
            prog.ranks[0][0].op,
            Op::Wait {
                slot: c1,
                cmp: Cmp::Ge,
                target: WaitTarget {
                    stride: 1,
                    offset: 1
                }
            }
        );
        assert_eq!(prog.entry_signals[1].len(), 1);
        assert_eq!(prog.entry_signals[2].len(), 1);
        assert!(prog.exit_signals.iter().all(Vec::is_empty));
        let waits = entry_waits(&prog);
        assert_eq!(waits[1], vec![sr(0, 0)]);
        assert_eq!(waits[2], vec![sr(0, 2)]);

        let prog = build(true);
        // Rank 0 signals nobody and rank 1 is only signalled by rank 0: rank 1's entry credit
        // is not needed (its push follows rank 1's `signal here`), rank 2's is.
        assert_eq!(prog.entry_signals[1], vec![]);
        assert_eq!(prog.exit_signals[1].len(), 1);
        assert_eq!(prog.entry_signals[2].len(), 1);
        assert!(entry_waits(&prog)[1].is_empty());
    }

    #[test]
    fn scratch_pushes_keep_exit_credits() {
        let mut b = Builder::new(2, &[("x", 1), ("land", 1)], &[("s", SignalMode::Add)]);
        b.put_sig(0, reg(0, 0, 1), reg(1, 0, 1), 1, 0, 1);
        b.wait(1, 0, Cmp::Ge, 1);
        let mut prog = b.build();
        insert_launch_credits(&mut prog);
        assert!(prog.entry_signals.iter().all(Vec::is_empty));
        assert_eq!(prog.exit_signals[1].len(), 1);
    }
}
