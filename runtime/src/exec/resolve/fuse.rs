//! Block fusion of a reduce with the steps that consume its result right after it.
//!
//! A two-shot allreduce reduces its chunk and then pushes that very chunk to every peer; the
//! wire variant also casts it to the wire type first. Run one after the other, each step streams
//! the whole chunk through memory again. Fused, the reduce hands every finished block (a few KiB,
//! still in L1) to the consumers, so the chunk is read from memory once.
//!
//! A step joins the chain of the reduce before it when it comes *immediately* after (no wait or
//! signal in between), moves exactly the reduce's element count, and reads a region the chain has
//! already produced in full (the reduce's destination or a fused copy's destination):
//! - a put to another rank (its signal is sent after the whole chain, still after its data);
//! - a local copy/cast whose destination overlaps neither an operand of the reduce, nor the
//!   reduce's destination, nor any region the chain reads or writes;
//! - a one-operand reduce (a conversion through the accumulator, as the wire schedules use to
//!   decode) whose destination either overlaps nothing the chain touches or is *exactly* a region
//!   the chain has produced: the owner's decode of its own reduced chunk back into `x` in
//!   `allreduce_two_shot_wire`. Every fused step maps element `i` of its source to element `i`
//!   of its destination, and identical regions keep that mapping, so running the steps block
//!   by block in step order gives every element the same sequence of writes as running them
//!   one after the other; a partial overlap would not, and stays unfused.
//!
//! Why this preserves the plan's meaning: the consumers would have started after the reduce with
//! no synchronisation in between, so every peer constraint that held for them (established by
//! waits before the reduce) holds equally when they start during it; every element they read is
//! final when they read it; and nothing they write is read by the reduce. Values are computed by
//! the same conversions, so results are bit-identical.

use crate::exec::resolved::{RReg, RStep};
use symsched_plan::Rank;

/// Half-open element range of a region in one buffer on this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    buf: u32,
    lo: u64,
    hi: u64,
}

impl Span {
    fn of(r: &RReg, n: u64) -> Span {
        Span {
            buf: r.buf,
            lo: r.elem,
            hi: r.elem + n,
        }
    }

    fn overlaps(&self, o: &Span) -> bool {
        self.buf == o.buf && self.lo < o.hi && o.lo < self.hi
    }
}

/// For every step, how many steps right after it run fused into it (non-zero only for reduces).
pub(crate) fn reduce_chains(steps: &[RStep], me: Rank) -> Vec<u32> {
    let mut chain = vec![0u32; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let RStep::Reduce { dst, srcs, n } = step else {
            continue;
        };
        if *n == 0 {
            continue;
        }
        // Regions the chain has produced in full, and every region it touches locally.
        let mut ready = vec![*dst];
        let mut touched: Vec<Span> = srcs.iter().map(|s| Span::of(s, *n)).collect();
        touched.push(Span::of(dst, *n));
        let mut len = 0u32;
        for next in &steps[i + 1..] {
            let ok = match next {
                RStep::Put {
                    src, peer, n: m, ..
                } => *m == *n && *peer != me && ready.contains(src),
                RStep::Copy { src, dst: d, n: m } => {
                    let out = Span::of(d, *m);
                    let ok = *m == *n
                        && ready.contains(src)
                        && !touched.iter().any(|t| t.overlaps(&out));
                    if ok {
                        ready.push(*d);
                        touched.push(out);
                    }
                    ok
                }
                RStep::Reduce {
                    srcs: one,
                    dst: d,
                    n: m,
                } if one.len() == 1 => {
                    let out = Span::of(d, *m);
                    let ok = *m == *n
                        && ready.contains(&one[0])
                        && touched.iter().all(|t| !t.overlaps(&out) || *t == out);
                    if ok {
                        ready.push(*d);
                        touched.push(out);
                    }
                    ok
                }
                _ => false,
            };
            if !ok {
                break;
            }
            len += 1;
        }
        chain[i] = len;
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(buf: u32, elem: u64) -> RReg {
        RReg { buf, elem }
    }

    fn reduce(dst: RReg, srcs: Vec<RReg>, n: u64) -> RStep {
        RStep::Reduce { dst, srcs, n }
    }

    fn put(src: RReg, peer: Rank, n: u64) -> RStep {
        RStep::Put {
            src,
            dst: src,
            peer,
            n,
            signal: None,
        }
    }

    #[test]
    fn two_shot_reduce_takes_its_pushes() {
        // x[1] = reduce(land[0], x[1]); put x[1] -> peers 0 and 2; then a wait ends the chain.
        let x1 = reg(0, 8);
        let steps = vec![
            reduce(x1, vec![reg(1, 0), x1], 8),
            put(x1, 0, 8),
            put(x1, 2, 8),
            RStep::Signal(symsched_plan::SignalUpdate {
                peer: 0,
                slot: 0,
                mode: symsched_plan::SignalMode::Add,
                value: 1,
                stride: 0,
            }),
            put(x1, 0, 8),
        ];
        assert_eq!(reduce_chains(&steps, 1), vec![2, 0, 0, 0, 0]);
    }

    #[test]
    fn wire_reduce_takes_cast_then_push_of_the_cast() {
        let (x1, g1) = (reg(0, 4), reg(2, 4));
        let steps = vec![
            reduce(x1, vec![reg(1, 0), reg(1, 4)], 4),
            RStep::Copy {
                src: x1,
                dst: g1,
                n: 4,
            },
            put(g1, 0, 4),
        ];
        assert_eq!(reduce_chains(&steps, 1), vec![2, 0, 0]);
    }

    #[test]
    fn wire_reduce_takes_the_decode_of_its_own_chunk_back_into_x() {
        // x[1] = reduce(land[0], land[1]); gath[1] = cast(x[1]); put gath[1]; x[1] = reduce(gath[1]).
        let (x1, g1) = (reg(0, 4), reg(2, 4));
        let decode = |dst: RReg, src: RReg| reduce(dst, vec![src], 4);
        let steps = vec![
            reduce(x1, vec![reg(1, 0), reg(1, 4)], 4),
            RStep::Copy {
                src: x1,
                dst: g1,
                n: 4,
            },
            put(g1, 0, 4),
            decode(x1, g1),
        ];
        assert_eq!(reduce_chains(&steps, 1), vec![3, 0, 0, 0]);
        // Partly overlapping the reduce's destination, decoding a region not produced yet, two
        // operands, or onto an operand region shifted by one: not fused.
        for next in [
            decode(reg(0, 5), g1),
            decode(x1, reg(2, 0)),
            reduce(x1, vec![g1, g1], 4),
            decode(reg(1, 1), g1),
        ] {
            let mut steps = steps[..3].to_vec();
            steps.push(next);
            assert_eq!(reduce_chains(&steps, 1), vec![2, 0, 0, 0]);
        }
    }

    #[test]
    fn unsafe_consumers_stay_alone() {
        let x1 = reg(0, 4);
        // A self-put, a different length, a copy into an operand, a source not yet produced.
        for next in [
            put(x1, 1, 4),
            put(x1, 0, 3),
            RStep::Copy {
                src: x1,
                dst: reg(1, 2),
                n: 4,
            },
            put(reg(0, 0), 0, 4),
        ] {
            let steps = vec![reduce(x1, vec![reg(1, 0), reg(1, 4)], 4), next];
            assert_eq!(reduce_chains(&steps, 1), vec![0, 0]);
        }
    }
}
