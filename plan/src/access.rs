//! Which regions a step reads and writes, and in whose memory: the one answer the compiler's
//! dataflow graph and bounds checks, and the executors' loading, fusion, streaming and tracing
//! decisions all use.
//!
//! Every region of an op is in the memory of the rank that executes it, except a put's
//! destination and a get's source, which are in `peer`'s copy of the buffer.
//!
//! ```
//! use symsched_plan::{Op, Owner, Region};
//! let r = |buffer| Region { buffer, first: 0, count: 1 };
//! let put = Op::Put { src: r(0), dst: r(1), peer: 2, signal: None };
//! let w: Vec<_> = put.writes().collect();
//! assert_eq!((w[0].region, w[0].owner), (r(1), Owner::Peer(2)));
//! assert!(w[0].is_remote(0) && !w[0].is_remote(2));
//! assert_eq!(put.reads().map(|a| a.owner).collect::<Vec<_>>(), [Owner::Local]);
//! ```

use crate::{Op, Plan, Rank, Region};

/// Whose memory a region of a step is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The rank that executes the step.
    Local,
    /// `peer`'s copy of the buffer (a put's destination, a get's source). The peer may be the
    /// executing rank itself (a self-put), which [`RegionAccess::is_remote`] tells apart.
    Peer(Rank),
}

/// One region a step reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionAccess {
    pub region: Region,
    pub owner: Owner,
}

impl RegionAccess {
    fn local(region: Region) -> RegionAccess {
        RegionAccess {
            region,
            owner: Owner::Local,
        }
    }

    fn peer(region: Region, peer: Rank) -> RegionAccess {
        RegionAccess {
            region,
            owner: Owner::Peer(peer),
        }
    }

    /// The rank whose memory this is when `me` executes the step.
    pub fn rank(&self, me: Rank) -> Rank {
        match self.owner {
            Owner::Local => me,
            Owner::Peer(p) => p,
        }
    }

    /// Whether, executed by `me`, the step touches another rank's memory here.
    pub fn is_remote(&self, me: Rank) -> bool {
        self.rank(me) != me
    }
}

/// The regions of one step (see [`Op::reads`], [`Op::writes`], [`Op::regions`]): up to three
/// named ones, then the executing rank's regions of a list (a reduce's operands).
#[derive(Debug, Clone)]
pub struct Accesses<'a> {
    named: [Option<RegionAccess>; 3],
    next: usize,
    list: std::slice::Iter<'a, Region>,
}

impl<'a> Accesses<'a> {
    fn new(named: [Option<RegionAccess>; 3], list: &'a [Region]) -> Accesses<'a> {
        Accesses {
            named,
            next: 0,
            list: list.iter(),
        }
    }

    fn of(named: &[RegionAccess]) -> Accesses<'a> {
        let mut n = [None; 3];
        for (slot, a) in n.iter_mut().zip(named) {
            *slot = Some(*a);
        }
        Accesses::new(n, &[])
    }
}

impl Iterator for Accesses<'_> {
    type Item = RegionAccess;

    fn next(&mut self) -> Option<RegionAccess> {
        while let Some(slot) = self.named.get(self.next) {
            self.next += 1;
            if let Some(a) = slot {
                return Some(*a);
            }
        }
        self.list.next().map(|r| RegionAccess::local(*r))
    }
}

impl Op {
    /// The regions the step reads, in operand order (a reduce's operands in fold order, a
    /// matmul's `a` then `b`). A host collective reads and writes its region.
    pub fn reads(&self) -> Accesses<'_> {
        let l = RegionAccess::local;
        match self {
            Op::Put { src, .. } | Op::Copy { src, .. } | Op::Cast { src, .. } => {
                Accesses::of(&[l(*src)])
            }
            Op::Get { src, peer, .. } => Accesses::of(&[RegionAccess::peer(*src, *peer)]),
            Op::Reduce { srcs, .. } => Accesses::new([None; 3], srcs),
            Op::Matmul { a, b, .. } => Accesses::of(&[l(*a), l(*b)]),
            Op::HostColl { region, .. } => Accesses::of(&[l(*region)]),
            Op::Signal { .. } | Op::Wait { .. } => Accesses::of(&[]),
        }
    }

    /// The region the step writes (at most one; a put's lands in the peer's memory when the
    /// put arrives).
    pub fn writes(&self) -> Accesses<'_> {
        let l = RegionAccess::local;
        match self {
            Op::Put { dst, peer, .. } => Accesses::of(&[RegionAccess::peer(*dst, *peer)]),
            Op::Get { dst, .. }
            | Op::Reduce { dst, .. }
            | Op::Copy { dst, .. }
            | Op::Cast { dst, .. } => Accesses::of(&[l(*dst)]),
            Op::Matmul { c, .. } => Accesses::of(&[l(*c)]),
            Op::HostColl { region, .. } => Accesses::of(&[l(*region)]),
            Op::Signal { .. } | Op::Wait { .. } => Accesses::of(&[]),
        }
    }

    /// Every region the step names, once each, in the order of the op's fields (a reduce's
    /// `dst` before its operands, a matmul's `c`, `a`, `b`): for checks that report on each.
    pub fn regions(&self) -> Accesses<'_> {
        let l = |r: &Region| Some(RegionAccess::local(*r));
        match self {
            Op::Put { src, dst, peer, .. } => {
                Accesses::new([l(src), Some(RegionAccess::peer(*dst, *peer)), None], &[])
            }
            Op::Get { src, dst, peer } => {
                Accesses::new([Some(RegionAccess::peer(*src, *peer)), l(dst), None], &[])
            }
            Op::Reduce { dst, srcs } => Accesses::new([l(dst), None, None], srcs),
            Op::Copy { src, dst } | Op::Cast { src, dst } => {
                Accesses::new([l(src), l(dst), None], &[])
            }
            Op::Matmul { c, a, b } => Accesses::new([l(c), l(a), l(b)], &[]),
            Op::HostColl { region, .. } => Accesses::new([l(region), None, None], &[]),
            Op::Signal { .. } | Op::Wait { .. } => Accesses::of(&[]),
        }
    }
}

impl Plan {
    /// Per buffer: whether a step of some rank reads it (in any rank's memory).
    pub fn read_buffers(&self) -> Vec<bool> {
        self.buffers_where(|op, _| op.reads().map(|a| a.region.buffer).collect())
    }

    /// Per buffer: whether some rank reads or writes it in *another* rank's memory (a put into
    /// or a get from a peer). Only such buffers need symmetric addresses; the contents of any
    /// other buffer are seen by their owner alone.
    pub fn remote_buffers(&self) -> Vec<bool> {
        self.buffers_where(|op, me| {
            op.reads()
                .chain(op.writes())
                .filter(|a| a.is_remote(me))
                .map(|a| a.region.buffer)
                .collect()
        })
    }

    fn buffers_where(&self, of_step: impl Fn(&Op, Rank) -> Vec<u32>) -> Vec<bool> {
        let mut marked = vec![false; self.buffers.len()];
        for prog in &self.ranks {
            for s in &prog.steps {
                for b in of_step(&s.op, prog.rank) {
                    if let Some(m) = marked.get_mut(b as usize) {
                        *m = true;
                    }
                }
            }
        }
        marked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cmp, HostCollOp, WaitTarget};

    fn r(buffer: u32) -> Region {
        Region {
            buffer,
            first: 0,
            count: 1,
        }
    }

    fn bufs(a: Accesses<'_>) -> Vec<u32> {
        a.map(|a| a.region.buffer).collect()
    }

    #[test]
    fn every_op_reads_and_writes_its_regions() {
        let reduce = Op::Reduce {
            dst: r(0),
            srcs: vec![r(1), r(2), r(0)],
        };
        assert_eq!(bufs(reduce.reads()), [1, 2, 0]);
        assert_eq!(bufs(reduce.writes()), [0]);
        assert_eq!(bufs(reduce.regions()), [0, 1, 2, 0]);
        let mm = Op::Matmul {
            c: r(0),
            a: r(1),
            b: r(2),
        };
        assert_eq!(bufs(mm.reads()), [1, 2]);
        assert_eq!(bufs(mm.writes()), [0]);
        assert_eq!(bufs(mm.regions()), [0, 1, 2]);
        let get = Op::Get {
            src: r(3),
            dst: r(4),
            peer: 1,
        };
        let read: Vec<_> = get.reads().collect();
        assert_eq!(read[0].owner, Owner::Peer(1));
        assert_eq!(read[0].rank(0), 1);
        assert_eq!(bufs(get.writes()), [4]);
        assert_eq!(bufs(get.regions()), [3, 4]);
        let hc = Op::HostColl {
            op: HostCollOp::Allreduce,
            region: r(5),
            members: vec![0, 1],
        };
        assert_eq!((bufs(hc.reads()), bufs(hc.writes())), (vec![5], vec![5]));
        let wait = Op::Wait {
            slot: 0,
            cmp: Cmp::Ge,
            target: WaitTarget {
                stride: 1,
                offset: 0,
            },
        };
        assert_eq!(wait.reads().count() + wait.writes().count(), 0);
        assert_eq!(wait.regions().count(), 0);
    }

    #[test]
    fn a_self_put_is_not_remote() {
        let put = Op::Put {
            src: r(0),
            dst: r(1),
            peer: 3,
            signal: None,
        };
        let dst = put.writes().next().expect("a put writes");
        assert!(!dst.is_remote(3) && dst.is_remote(2));
    }
}
