//! Launch credits: the mechanism that makes back-to-back launches safe without a trailing
//! barrier.
//!
//! Within one launch the verifier proves every access is ordered. Across launches a fast rank
//! could start launch e+1 and write into a peer's scratch (or staged output) while that peer is
//! still reading it for launch e. So for every ordered pair (r, p) where r touches p's memory or
//! signals remotely, p sends r one credit when it has fully finished a launch (after the runtime
//! copied staged outputs out: these are the plan's *exit signals*), and r waits, before its first
//! remote access to p in launch e, until p has finished e launches: `wait __credit[p] >= e`, an
//! epoch-relative target with stride 1 and offset 0, so it is vacuous in the first launch and the
//! single-launch verification is unaffected. In the steady state the credit arrived long before
//! it is checked, so the cost is one flag read per peer and one remote add per peer per launch.

use super::{Program, Step};
use symsched_plan::{Cmp, Op, Rank, SignalMode, SignalSlot, SignalUpdate, WaitTarget};

/// Prefix of the internal credit slots; tools that reason about user-written waits skip them.
pub const CREDIT_SLOT_PREFIX: &str = "__credit";

/// The peer a step accesses remotely, if any (put/get target, signal target other than self).
pub fn remote_peer(op: &Op, me: Rank) -> Option<Rank> {
    let peer = match op {
        Op::Put { peer, .. } | Op::Get { peer, .. } => *peer,
        Op::Signal { update } => update.peer,
        _ => return None,
    };
    (peer != me).then_some(peer)
}

/// Insert credit waits and exit signals. Call once, after instantiation and before
/// [`Program::assign_epoch_strides`].
pub fn insert_launch_credits(prog: &mut Program) {
    let p = prog.group_size as usize;
    // One slot per source rank: slot `__credit[q]` on rank r counts q's finished launches.
    let base = prog.signals.len() as u32;
    let mut used = vec![false; p];
    let mut accessors: Vec<Vec<Rank>> = vec![Vec::new(); p];
    for (r, steps) in prog.ranks.iter_mut().enumerate() {
        let me = r as Rank;
        let mut seen = vec![false; p];
        let mut out = Vec::with_capacity(steps.len());
        for step in steps.drain(..) {
            if let Some(peer) = remote_peer(&step.op, me) {
                if !seen[peer as usize] {
                    seen[peer as usize] = true;
                    used[peer as usize] = true;
                    accessors[peer as usize].push(me);
                    out.push(Step {
                        op: Op::Wait {
                            slot: base + peer,
                            cmp: Cmp::Ge,
                            target: WaitTarget {
                                stride: 1,
                                offset: 0,
                            },
                        },
                        span: step.span,
                        inlined_from: step.inlined_from.clone(),
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
    prog.exit_signals = vec![Vec::new(); p];
    for (q, readers) in accessors.iter().enumerate() {
        for &r in readers {
            prog.exit_signals[q].push(SignalUpdate {
                slot: base + q as u32,
                peer: r,
                mode: SignalMode::Add,
                value: 1,
                stride: 0,
            });
        }
    }
}
