//! The streaming pass: which plain moves of a resolved step list may use non-temporal stores
//! ([`crate::exec::stream_copy`]).
//!
//! A large put of an alltoall writes up to tens of MiB that no step of the launch reads again;
//! streamed, its destination skips the read-for-ownership and the cache pollution. That only
//! pays off when the destination is not re-read soon, which is why a reduce's landing buffer
//! must keep ordinary stores (the reduce would re-read it from DRAM). A step may stream when:
//! - it is a plain put, get or copy (not fused into a reduce, not folded into one); whether the
//!   element types match (no conversion) is checked when it runs;
//! - no step of any rank reads its destination buffer (as a source of a move, a reduce or
//!   matmul operand, or a host collective's region: the plan's `Op::reads`).
//!
//! The byte threshold is checked when the step runs, where sizes are known.

use crate::exec::resolved::RStep;
use symsched_plan::Plan;

/// Per step of this rank's resolved list: whether it may be streamed. `chain` is
/// [`super::fuse::reduce_chains`] of the same steps (moves fused into a reduce never stream).
/// The byte threshold and the element types are checked at run time, where sizes are known.
pub(crate) fn nt_steps(plan: &Plan, steps: &[RStep], chain: &[u32]) -> Vec<bool> {
    let mut out = vec![false; steps.len()];
    let read = plan.read_buffers();
    let mut fused_until = 0usize;
    for (i, step) in steps.iter().enumerate() {
        if i < fused_until {
            continue;
        }
        fused_until = i + 1 + chain.get(i).copied().unwrap_or(0) as usize;
        let dst = match step {
            RStep::Put { dst, .. } | RStep::Get { dst, .. } | RStep::Copy { dst, .. } => dst,
            _ => continue,
        };
        out[i] = !read.get(dst.buf as usize).copied().unwrap_or(true);
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::exec::resolved::{RReg, RStep};
    use symsched_plan::{Op, Plan};

    fn plan(name: &str) -> Plan {
        crate::exec::test_plans::standard(name, 2)
    }

    fn reg(buf: u32) -> RReg {
        RReg { buf, elem: 0 }
    }

    /// Rank 0's moves as resolved steps (offsets do not matter to the decision).
    fn moves(plan: &Plan) -> Vec<RStep> {
        plan.ranks[0]
            .steps
            .iter()
            .map(|s| match &s.op {
                Op::Put { src, dst, peer, .. } => RStep::Put {
                    src: reg(src.buffer),
                    dst: reg(dst.buffer),
                    peer: *peer,
                    n: 1,
                    signal: None,
                },
                Op::Get { src, dst, peer } => RStep::Get {
                    src: reg(src.buffer),
                    dst: reg(dst.buffer),
                    peer: *peer,
                    n: 1,
                },
                Op::Copy { src, dst } | Op::Cast { src, dst } => RStep::Copy {
                    src: reg(src.buffer),
                    dst: reg(dst.buffer),
                    n: 1,
                },
                _ => RStep::Signal(symsched_plan::SignalUpdate {
                    peer: 0,
                    slot: 0,
                    mode: symsched_plan::SignalMode::Add,
                    value: 1,
                    stride: 0,
                }),
            })
            .collect()
    }

    fn streamed(name: &str) -> Vec<bool> {
        let p = plan(name);
        let steps = moves(&p);
        let nt = super::nt_steps(&p, &steps, &vec![0; steps.len()]);
        // Only the moves' answers, in step order.
        steps
            .iter()
            .zip(nt)
            .filter(|(s, _)| !matches!(s, RStep::Signal(_)))
            .map(|(_, b)| b)
            .collect()
    }

    #[test]
    fn alltoall_moves_stream_and_allreduce_moves_do_not() {
        // Own-block copy and the put into the peer's `out`.
        assert_eq!(streamed("alltoall_push"), [true, true]);
        // Every allreduce move lands where a reduce or a later move reads.
        for name in [
            "allreduce_two_shot",
            "allreduce_two_shot_pull",
            "allreduce_one_shot",
        ] {
            let s = streamed(name);
            assert!(!s.is_empty() && !s.contains(&true), "{name}: {s:?}");
        }
    }

    #[test]
    fn moves_fused_into_a_reduce_do_not_stream() {
        let p = plan("alltoall_push");
        // Buffer 1 is `out`, which no step reads.
        let steps = vec![
            RStep::Reduce {
                dst: reg(1),
                srcs: vec![reg(0)],
                n: 1,
            },
            RStep::Copy {
                src: reg(1),
                dst: reg(1),
                n: 1,
            },
        ];
        assert_eq!(super::nt_steps(&p, &steps, &[1, 0]), [false, false]);
        assert_eq!(super::nt_steps(&p, &steps, &[0, 0]), [false, true]);
    }
}
