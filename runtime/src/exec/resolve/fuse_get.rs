//! Fusion of a `get` into the reduce that consumes its landing region.
//!
//! A pull reduce-scatter (`allreduce_two_shot_pull`) gets chunk `rank` of every peer into a
//! landing slot and then folds the slots. Run as written, every peer chunk is read from the peer,
//! written to the slot, and read back by the reduce. Fused, the reduce takes the peer's region as
//! its operand directly (it already streams its operands block by block), so the landing slot is
//! never written: per rank and peer chunk of `c` bytes that saves a write and a read of `c`.
//!
//! A get is folded into a reduce when all of these hold:
//! - only gets and waits stand between them, so no signal of this rank moves before the read:
//!   whatever the verifier ordered after the get through a later signal stays ordered after the
//!   (later) read, and a read that starts later than written is still after every earlier wait;
//! - the get's destination is exactly one operand region (same buffer and offset, the get moves
//!   the reduce's element count), overlaps no other operand, the reduce's destination, or the
//!   destination of another get in between;
//! - its source and destination have the same element class, so no conversion is skipped and
//!   the reduce reads the very values it would have read from the slot (bit-identical);
//! - the slot is dead afterwards: it is schedule scratch (never a role the caller sees), no later
//!   step of this rank touches it, and no rank accesses that scratch buffer remotely;
//! - a put fused into the reduce ([`super::fuse`]) that writes the peer's source region writes
//!   exactly that region. The pull two-shot pushes its result into the very chunk it pulled: the
//!   reduce consumes block `b` of every operand before its links write block `b`, so an identical
//!   region is overwritten only where it has been read, as in the unfused order; a shifted one
//!   could be overwritten ahead of the read, so it keeps the get.
//!
//! The plan is unchanged; only this rank's execution of it is. `SYMSCHED_FUSE=0` turns it off
//! ([`crate::config::ExecOptions::fuse`]).

use crate::exec::resolved::{GetFolds, Pull, RReg, RStep};
use symsched_plan::{BufferRole, Plan, Rank};

/// Element range of a region in one buffer.
fn overlaps(a: &RReg, an: u64, b: &RReg, bn: u64) -> bool {
    a.buf == b.buf && a.elem < b.elem + bn && b.elem < a.elem + an
}

/// Decide, for this rank's resolved steps of `plan`, which gets run inside a later reduce;
/// `chain` is [`super::fuse::reduce_chains`] of the same steps.
pub(crate) fn get_folds(plan: &Plan, steps: &[RStep], me: Rank, chain: &[u32]) -> GetFolds {
    get_folds_among(plan, steps, &[], me, chain)
}

/// [`get_folds`] for one channel's `steps` of a multi-channel rank: `concurrent` are the
/// other channels' steps, which may run at any point of this sequence, so a landing region
/// any of them touches is not dead and its get is kept.
pub(crate) fn get_folds_among(
    plan: &Plan,
    steps: &[RStep],
    concurrent: &[RStep],
    me: Rank,
    chain: &[u32],
) -> GetFolds {
    let mut out = GetFolds::default();
    let remote = plan.remote_buffers();
    let class = |b: u32| plan.buffers.get(b as usize).map(|d| d.elem);
    let dead_scratch = |b: u32| {
        plan.buffers
            .get(b as usize)
            .is_some_and(|d| d.role == BufferRole::Scratch)
            && !remote.get(b as usize).copied().unwrap_or(true)
    };
    for (j, step) in steps.iter().enumerate() {
        let RStep::Reduce { dst, srcs, n } = step else {
            continue;
        };
        if *n == 0 {
            continue;
        }
        // The run of gets and waits right before the reduce.
        let start = steps[..j]
            .iter()
            .rposition(|s| !matches!(s, RStep::Get { .. } | RStep::Wait { .. }))
            .map_or(0, |i| i + 1);
        let run = &steps[start..j];
        let later = &steps[j + 1..];
        let fused = &later[..(chain.get(j).copied().unwrap_or(0) as usize).min(later.len())];
        let mut pulls = Vec::new();
        for (gi, g) in run.iter().enumerate() {
            let RStep::Get {
                src,
                dst: land,
                peer,
                n: m,
            } = g
            else {
                continue;
            };
            let operand = srcs.iter().position(|s| s == land);
            let Some(operand) = operand else { continue };
            let ok = *m == *n
                && *peer != me
                && class(src.buf) == class(land.buf)
                && dead_scratch(land.buf)
                && !overlaps(land, *m, dst, *n)
                && srcs
                    .iter()
                    .enumerate()
                    .all(|(k, s)| k == operand || !overlaps(land, *m, s, *n))
                && run.iter().enumerate().all(|(k, o)| match o {
                    RStep::Get { dst: od, n: on, .. } if k != gi => !overlaps(land, *m, od, *on),
                    _ => true,
                })
                && later.iter().chain(concurrent).all(|s| {
                    s.local_regions(me)
                        .iter()
                        .all(|(r, rn)| !overlaps(land, *m, r, *rn))
                })
                && fused.iter().all(|s| match s {
                    RStep::Put {
                        dst: pd,
                        peer: pp,
                        n: pn,
                        ..
                    } if pp == peer => (pd == src && pn == m) || !overlaps(src, *m, pd, *pn),
                    _ => true,
                });
            if ok {
                out.folded.resize(steps.len(), false);
                out.folded[start + gi] = true;
                pulls.push(Pull {
                    operand,
                    peer: *peer,
                    src: *src,
                });
            }
        }
        if !pulls.is_empty() {
            out.pulls.resize(steps.len(), Vec::new());
            out.pulls[j] = pulls;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fuse;
    use super::*;
    use symsched_plan::{Cmp, WaitTarget};

    fn reg(buf: u32, elem: u64) -> RReg {
        RReg { buf, elem }
    }

    fn get(src: RReg, dst: RReg, peer: Rank, n: u64) -> RStep {
        RStep::Get { src, dst, peer, n }
    }

    fn wait() -> RStep {
        RStep::Wait {
            slot: 0,
            cmp: Cmp::Ge,
            target: WaitTarget {
                stride: 1,
                offset: 0,
            },
            id: 0,
        }
    }

    /// Rank 1 of `allreduce_two_shot_pull` at P = 3: buffer 0 is `x`, buffer 1 is `land`.
    fn pull_plan() -> Plan {
        crate::exec::test_plans::standard("allreduce_two_shot_pull", 3)
    }

    #[test]
    fn pull_gets_fold_into_their_reduce() {
        let plan = pull_plan();
        let (x1, l0, l2) = (reg(0, 4), reg(1, 0), reg(1, 8));
        let steps = vec![
            wait(),
            get(x1, l2, 2, 4),
            wait(),
            get(x1, l0, 0, 4),
            RStep::Reduce {
                dst: x1,
                srcs: vec![l0, x1, l2],
                n: 4,
            },
            get(reg(0, 0), reg(0, 0), 0, 4),
        ];
        let f = get_folds(&plan, &steps, 1, &fuse::reduce_chains(&steps, 1));
        let folded: Vec<bool> = (0..steps.len()).map(|i| f.folded(i)).collect();
        assert_eq!(folded, [false, true, false, true, false, false]);
        assert_eq!(
            f.pulls(4),
            [
                Pull {
                    operand: 2,
                    peer: 2,
                    src: x1
                },
                Pull {
                    operand: 0,
                    peer: 0,
                    src: x1
                }
            ]
        );
    }

    #[test]
    fn a_fused_push_may_overwrite_the_pulled_region_only_exactly() {
        // The pull two-shot at P = 2 on rank 1: get x[1] @ 0, reduce, put x[1] -> x[1] @ 0.
        let plan = pull_plan();
        let (x1, l0) = (reg(0, 4), reg(1, 0));
        let steps = |put_dst: RReg| {
            vec![
                get(x1, l0, 0, 4),
                RStep::Reduce {
                    dst: x1,
                    srcs: vec![l0, x1],
                    n: 4,
                },
                RStep::Put {
                    src: x1,
                    dst: put_dst,
                    peer: 0,
                    n: 4,
                    signal: None,
                },
            ]
        };
        let exact = steps(x1);
        let f = get_folds(&plan, &exact, 1, &fuse::reduce_chains(&exact, 1));
        assert_eq!(fuse::reduce_chains(&exact, 1), [0, 1, 0]);
        assert!(f.folded(0));
        // Shifted by two elements: block 0 of the put would overwrite elements not yet read.
        let shifted = steps(reg(0, 2));
        let f = get_folds(&plan, &shifted, 1, &fuse::reduce_chains(&shifted, 1));
        assert_eq!(fuse::reduce_chains(&shifted, 1), [0, 1, 0]);
        assert!(!f.folded(0) && f.pulls(1).is_empty());
    }

    #[test]
    fn live_or_visible_landings_are_not_folded() {
        let plan = pull_plan();
        let (x1, l0) = (reg(0, 4), reg(1, 0));
        let reduce = RStep::Reduce {
            dst: x1,
            srcs: vec![l0, x1],
            n: 4,
        };
        let cases = [
            // Read again later.
            vec![
                get(x1, l0, 0, 4),
                reduce.clone(),
                RStep::Copy {
                    src: reg(1, 2),
                    dst: reg(0, 0),
                    n: 4,
                },
            ],
            // A signal in between.
            vec![
                get(x1, l0, 0, 4),
                RStep::Signal(symsched_plan::SignalUpdate {
                    peer: 0,
                    slot: 0,
                    mode: symsched_plan::SignalMode::Add,
                    value: 1,
                    stride: 0,
                }),
                reduce.clone(),
            ],
            // A shorter get.
            vec![get(x1, l0, 0, 3), reduce.clone()],
            // A second get into the same slot.
            vec![
                get(x1, l0, 0, 4),
                get(reg(0, 0), reg(1, 2), 2, 4),
                reduce.clone(),
            ],
            // Landing in a role the caller sees.
            vec![
                get(x1, reg(0, 0), 0, 4),
                RStep::Reduce {
                    dst: x1,
                    srcs: vec![reg(0, 0), x1],
                    n: 4,
                },
            ],
        ];
        for steps in cases {
            let f = get_folds(&plan, &steps, 1, &fuse::reduce_chains(&steps, 1));
            assert!(
                (0..steps.len()).all(|i| !f.folded(i) && f.pulls(i).is_empty()),
                "{steps:?}"
            );
        }
    }
}

/// The MC2 pull reduce-scatter relies on the executor reading peers' partial products where
/// they were computed (`fuse_get`): its gets must fold into the reduce.
#[cfg(test)]
mod mc2_pull_tests {
    use super::super::fuse;
    use super::get_folds;
    use crate::exec::resolved::{RReg, RStep};
    use symsched_plan::{Cmp, WaitTarget};

    #[test]
    fn matmul_reduce_scatter_pull_reads_peer_products_in_place() {
        let plan = crate::exec::test_plans::standard("matmul_reduce_scatter_pull", 3);
        let names: Vec<&str> = plan.buffers.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "part", "land"]);
        // Rank 1, blocks of 4 elements (m = 2, k = 3, n = 2): after its products, it waits for
        // `ready`, gets part[1] of ranks 2 and 0 into land[2] and land[0], and folds them with its
        // own part[1] in rank order into `c`.
        let reg = |buf, elem| RReg { buf, elem };
        let wait = RStep::Wait {
            slot: 0,
            cmp: Cmp::Ge,
            target: WaitTarget {
                stride: 2,
                offset: 2,
            },
            id: 0,
        };
        let mm = |p: u64| RStep::Matmul {
            c: reg(3, 4 * p),
            a: reg(0, 6 * p),
            b: reg(1, 0),
            m: 2,
            k: 3,
            n: 2,
        };
        let get = |peer| RStep::Get {
            src: reg(3, 4),
            dst: reg(4, 4 * u64::from(peer)),
            peer,
            n: 4,
        };
        let steps = vec![
            mm(2),
            mm(0),
            mm(1),
            wait,
            get(2),
            get(0),
            RStep::Reduce {
                dst: reg(2, 0),
                srcs: vec![reg(4, 0), reg(3, 4), reg(4, 8)],
                n: 4,
            },
        ];
        let f = get_folds(&plan, &steps, 1, &fuse::reduce_chains(&steps, 1));
        let folded: Vec<bool> = (0..steps.len()).map(|i| f.folded(i)).collect();
        assert_eq!(folded, [false, false, false, false, true, true, false]);
        let mut pulls: Vec<(usize, u32)> = f.pulls(6).iter().map(|p| (p.operand, p.peer)).collect();
        pulls.sort();
        assert_eq!(pulls, [(0, 0), (2, 2)]);
        assert!(f.pulls(6).iter().all(|p| p.src == reg(3, 4)));
    }
}
