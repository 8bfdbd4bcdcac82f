//! put + signal fusion: `put a -> b @ p; signal s @ p += v;` becomes
//! `put a -> b @ p, signal s @ p += v;`.
//!
//! Memory model (docs/verifier.md, "Happens-before"): puts are non-blocking. A standalone signal
//! is preceded by a quiet: it orders the data of every earlier *plain* put of its rank before
//! the signal, and it is delivered before the rank's next step starts. A fused signal orders
//! only its own put's data and is delivered at an unknown time. So fusing is sound only when
//! nothing relied on the two extra guarantees of the standalone form:
//! - no other plain put is pending since the rank's previous standalone signal (the quiet also
//!   covered it);
//! - no later step of the rank can pass on "the signal was delivered" to another rank: no later
//!   signal, put with signal or host collective.
//!
//! Where it applies, the fused form saves a step and the quiet (one remote operation instead of
//! two on a real device).
//!
//! With channels, "the rank" above is the channel: its quiet, its pending puts and its later
//! steps; and the put must be the signal's predecessor in the same channel.

use crate::ir::{Program, Step};
use symsched_plan::{Op, SignalMode};

/// A plain put: its data is ordered only by a later standalone signal of its rank.
fn is_plain_put(op: &Op) -> bool {
    matches!(op, Op::Put { peer, signal, .. } if signal.is_none_or(|u| u.peer != *peer))
}

/// A step after which other ranks may learn what this rank did before it.
fn publishes(op: &Op) -> bool {
    matches!(
        op,
        Op::Signal { .. }
            | Op::Put {
                signal: Some(_),
                ..
            }
            | Op::HostColl { .. }
    )
}

/// Fuse every put without signal that is immediately followed, on the same rank, by an add-signal
/// to the same peer, where the conditions above hold. Returns the number of fusions.
pub fn fuse_put_signal(prog: &mut Program) -> usize {
    let mut fused = 0;
    let channels = prog.channel_count() as usize;
    for steps in &mut prog.ranks {
        // publishes_after[i]: some later step of step i's channel publishes.
        let mut publishes_after = vec![false; steps.len()];
        let mut seen = vec![false; channels];
        for (i, st) in steps.iter().enumerate().rev() {
            let seen = &mut seen[st.channel as usize];
            publishes_after[i] = *seen;
            *seen |= publishes(&st.op);
        }
        let mut out: Vec<Step> = Vec::with_capacity(steps.len());
        // Per channel: plain puts issued since its last standalone signal.
        let mut pending = vec![0usize; channels];
        for (i, step) in steps.drain(..).enumerate() {
            let ch = step.channel as usize;
            if let Op::Signal { update } = &step.op {
                let candidate =
                    update.mode == SignalMode::Add && pending[ch] == 1 && !publishes_after[i];
                if let (
                    true,
                    Some(Step {
                        op:
                            Op::Put {
                                peer,
                                signal: signal @ None,
                                ..
                            },
                        span,
                        channel,
                        ..
                    }),
                ) = (candidate, out.last_mut())
                {
                    if *peer == update.peer && *channel == step.channel {
                        *signal = Some(*update);
                        if span.file == step.span.file {
                            *span = span.join(step.span);
                        }
                        fused += 1;
                        pending[ch] = 0;
                        continue;
                    }
                }
                pending[ch] = 0;
            } else if is_plain_put(&step.op) {
                pending[ch] += 1;
            }
            out.push(step);
        }
        *steps = out;
    }
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::back::plan::tests::tiny_program;

    #[test]
    fn fuses_put_followed_by_signal_to_same_peer() {
        let mut prog = tiny_program();
        assert_eq!(fuse_put_signal(&mut prog), 1);
        assert_eq!(prog.ranks[0].len(), 1);
        match &prog.ranks[0][0].op {
            Op::Put {
                signal: Some(u), ..
            } => assert_eq!((u.slot, u.peer, u.value), (0, 1, 1)),
            other => panic!("expected a fused put, got {other:?}"),
        }
        assert_eq!(
            (prog.ranks[0][0].span.start, prog.ranks[0][0].span.end),
            (10, 30)
        );
        // Idempotent.
        assert_eq!(fuse_put_signal(&mut prog), 0);
    }

    #[test]
    fn keeps_the_quiet_when_an_earlier_put_needs_it() {
        // put x -> x @ 1; put x -> x @ 1; signal ready @ 1: the standalone signal also orders the
        // first put's data, which the fused form would not.
        let mut prog = tiny_program();
        let put = prog.ranks[0][0].clone();
        prog.ranks[0].insert(0, put);
        assert_eq!(fuse_put_signal(&mut prog), 0);
        assert_eq!(prog.ranks[0].len(), 3);
        // put; signal; put; signal: the first signal is delivered before the second pair
        // starts, which a waiter on the second signal may rely on; only the last pair fuses.
        let mut prog = tiny_program();
        let (put, sig) = (prog.ranks[0][0].clone(), prog.ranks[0][1].clone());
        prog.ranks[0].extend([put, sig]);
        assert_eq!(fuse_put_signal(&mut prog), 1);
        assert_eq!(prog.ranks[0].len(), 3);
        assert!(matches!(prog.ranks[0][0].op, Op::Put { signal: None, .. }));
        assert!(matches!(prog.ranks[0][1].op, Op::Signal { .. }));
        assert!(matches!(
            prog.ranks[0][2].op,
            Op::Put {
                signal: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn leaves_signal_to_another_peer_alone() {
        let mut prog = tiny_program();
        prog.group_size = 3;
        prog.ranks.push(vec![]);
        if let Op::Signal { update } = &mut prog.ranks[0][1].op {
            update.peer = 2;
        }
        assert_eq!(fuse_put_signal(&mut prog), 0);
        assert_eq!(prog.ranks[0].len(), 2);
    }
}
