//! Semantics-preserving rewrites of an instantiated program. Each pass edits the rank step lists
//! in place and returns how many rewrites it made; [`crate::pipeline::compile`] runs them after
//! verification and verifies the result again, so a wrong pass is caught rather than shipped.
//!
//! Passes never add or remove signal updates, so the epoch strides computed at instantiation stay
//! valid. Puts are non-blocking (docs/verifier.md): a pass may only strengthen or keep the
//! ordering of a put's data, never rely on a put having completed.

pub mod fuse;
pub mod noop_copy;
pub mod self_put;
pub mod waits;

use crate::ir::Program;

/// What [`optimize`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptStats {
    /// put + add-signal pairs fused into put_with_signal.
    pub fused_signals: usize,
    /// Puts to the executing rank turned into local copies / casts.
    pub self_puts: usize,
    /// Waits removed because an earlier wait on the same slot implies them.
    pub redundant_waits: usize,
    /// Copies of a region onto itself removed.
    pub noop_copies: usize,
}

/// Run every pass once, in an order where earlier passes expose work for later ones.
pub fn optimize(prog: &mut Program) -> OptStats {
    let self_puts = self_put::self_put_to_copy(prog);
    let fused_signals = fuse::fuse_put_signal(prog);
    let redundant_waits = waits::remove_redundant_waits(prog);
    let noop_copies = noop_copy::remove_noop_copies(prog);
    OptStats {
        fused_signals,
        self_puts,
        redundant_waits,
        noop_copies,
    }
}

#[cfg(test)]
mod tests {
    //! Round trips over the standard library: undo what a pass would do (split fused puts, turn
    //! copies into self-puts, duplicate waits), check the variant still verifies, run the pass,
    //! and require both that the result verifies and that it equals the original program.

    use super::*;
    use crate::ir::Step;
    use crate::pipeline::standard_library;
    use crate::verify::verify_program;
    use std::collections::BTreeMap;
    use symsched_plan::Op;

    /// Every standard schedule at `p`, with the first and last binding of its params.
    fn programs(p: u32) -> Vec<Program> {
        let lib = standard_library();
        let mut out = Vec::new();
        for s in lib.schedules() {
            let space = lib
                .param_space(&s.name, p, &BTreeMap::new())
                .unwrap_or_else(|d| panic!("{}: {d:?}", s.name));
            let mut picks: Vec<&BTreeMap<String, i64>> = space.first().into_iter().collect();
            picks.extend(space.last().filter(|_| space.len() > 1));
            for params in picks {
                out.push(
                    lib.instantiate(&s.name, p, params)
                        .unwrap_or_else(|d| panic!("{} does not instantiate: {d:?}", s.name)),
                );
            }
        }
        out
    }

    fn ops(prog: &Program) -> Vec<Vec<Op>> {
        prog.ranks
            .iter()
            .map(|r| r.iter().map(|s| s.op.clone()).collect())
            .collect()
    }

    fn must_verify(prog: &Program, what: &str) {
        if let Err(d) = verify_program(prog) {
            panic!("{} P={} {what}: {d:#?}", prog.schedule, prog.group_size);
        }
    }

    #[test]
    fn fusion_restores_split_puts_and_reverifies() {
        // Split each rank's last publishing step when it is a put with a signal to its own peer
        // and no plain put is pending: exactly the case fusion must recognise and undo.
        let mut split_any = false;
        for original in programs(4) {
            let mut prog = original.clone();
            let mut split = 0;
            for steps in &mut prog.ranks {
                let last = steps.iter().rposition(|s| {
                    matches!(
                        s.op,
                        Op::Signal { .. }
                            | Op::Put {
                                signal: Some(_),
                                ..
                            }
                            | Op::HostColl { .. }
                    )
                });
                let Some(i) = last else { continue };
                let plain_before = steps[..i].iter().any(|s| {
                    matches!(&s.op, Op::Put { peer, signal, .. }
                        if signal.is_none_or(|u| u.peer != *peer))
                });
                let s = steps[i].clone();
                if let Op::Put {
                    src,
                    dst,
                    peer,
                    signal: Some(update),
                } = s.op
                {
                    if update.peer != peer || plain_before {
                        continue;
                    }
                    steps[i].op = Op::Put {
                        src,
                        dst,
                        peer,
                        signal: None,
                    };
                    steps.insert(
                        i + 1,
                        Step {
                            op: Op::Signal { update },
                            ..s
                        },
                    );
                    split += 1;
                }
            }
            must_verify(&prog, "with split puts");
            split_any |= split > 0;
            assert_eq!(
                fuse::fuse_put_signal(&mut prog),
                split,
                "{}",
                original.schedule
            );
            must_verify(&prog, "after fusion");
            assert_eq!(ops(&prog), ops(&original), "{}", original.schedule);
        }
        assert!(split_any, "the standard library has fused puts to split");
    }

    #[test]
    fn self_puts_become_the_original_copies_and_reverify() {
        let mut any = false;
        for original in programs(4) {
            let mut prog = original.clone();
            let mut made = 0;
            for (r, steps) in prog.ranks.iter_mut().enumerate() {
                for s in steps.iter_mut() {
                    if let Op::Copy { src, dst } = s.op {
                        s.op = Op::Put {
                            src,
                            dst,
                            peer: r as u32,
                            signal: None,
                        };
                        made += 1;
                    }
                }
            }
            // The verifier models puts as asynchronous, so a self-put whose target a later step
            // of the same rank reads (inlined in-place copies) is a race; the copy was not.
            // Such variants are not valid inputs for this round trip.
            if verify_program(&prog).is_err() {
                continue;
            }
            any |= made > 0;
            assert_eq!(self_put::self_put_to_copy(&mut prog), made);
            must_verify(&prog, "after self-put rewriting");
            assert_eq!(ops(&prog), ops(&original), "{}", original.schedule);
        }
        assert!(any, "the standard library has local copies");
    }

    #[test]
    fn duplicated_waits_are_removed_and_the_result_reverifies() {
        for original in programs(5) {
            let mut prog = original.clone();
            let mut dups = 0;
            for steps in &mut prog.ranks {
                let mut out = Vec::new();
                for s in steps.drain(..) {
                    let dup = matches!(s.op, Op::Wait { .. }).then(|| s.clone());
                    out.push(s);
                    if let Some(d) = dup {
                        out.push(d);
                        dups += 1;
                    }
                }
                *steps = out;
            }
            must_verify(&prog, "with duplicated waits");
            let removed = waits::remove_redundant_waits(&mut prog);
            assert!(removed >= dups, "{}: {removed} < {dups}", original.schedule);
            must_verify(&prog, "after wait elimination");
        }
    }

    #[test]
    fn optimize_is_idempotent_on_the_standard_library() {
        for mut prog in programs(3) {
            optimize(&mut prog);
            must_verify(&prog, "optimised");
            assert_eq!(
                optimize(&mut prog),
                OptStats::default(),
                "{}",
                prog.schedule
            );
        }
    }
}
