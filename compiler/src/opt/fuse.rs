//! put + signal fusion: `put a -> b @ p; signal s @ p += v;` becomes
//! `put a -> b @ p, signal s @ p += v;`.
//!
//! Sound because the executor completes a put before starting the next step, so the separate
//! form already made the data visible before the signal; the fused form guarantees the same
//! ordering and saves a step (one remote operation instead of two on a real device).

use crate::ir::{Program, Step};
use symsched_plan::{Op, SignalMode};

/// Fuse every put without signal that is immediately followed, on the same rank, by an add-signal
/// to the same peer. Returns the number of fusions.
pub fn fuse_put_signal(prog: &mut Program) -> usize {
    let mut fused = 0;
    for steps in &mut prog.ranks {
        let mut out: Vec<Step> = Vec::with_capacity(steps.len());
        for step in steps.drain(..) {
            if let Op::Signal { update } = &step.op {
                if update.mode == SignalMode::Add {
                    if let Some(Step {
                        op:
                            Op::Put {
                                peer,
                                signal: signal @ None,
                                ..
                            },
                        span,
                        ..
                    }) = out.last_mut()
                    {
                        if *peer == update.peer {
                            *signal = Some(*update);
                            if span.file == step.span.file {
                                *span = span.join(step.span);
                            }
                            fused += 1;
                            continue;
                        }
                    }
                }
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
