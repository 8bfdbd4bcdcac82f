//! What a step reads and writes, on which rank, and how long the data it moves is.
//!
//! A private helper of the lowering: "which regions does a step read and write" is being moved
//! into `plan/` as one shared definition; when it lands this module keeps only what is specific
//! to the back end (length keys).

use symsched_plan::{CountsMatrix, Extent, Op, Plan, Rank, Region, SignalMode, SizeExpr, Step};

/// One access of a step: a region on a rank, read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Access {
    pub rank: Rank,
    pub region: Region,
    pub write: bool,
}

impl Access {
    fn read(rank: Rank, region: Region) -> Access {
        Access {
            rank,
            region,
            write: false,
        }
    }

    fn write(rank: Rank, region: Region) -> Access {
        Access {
            rank,
            region,
            write: true,
        }
    }

    /// The same memory: rank, buffer and chunk range (under equal moved lengths, the same
    /// elements).
    pub fn same_place(&self, o: &Access) -> bool {
        self.rank == o.rank && self.region == o.region
    }

    /// Whether the chunk ranges share a chunk on the same rank's copy of the same buffer. Chunks
    /// are laid out in order without overlap, so disjoint chunk ranges are disjoint memory.
    pub fn overlaps(&self, o: &Access) -> bool {
        let (a, b) = (&self.region, &o.region);
        self.rank == o.rank
            && a.buffer == b.buffer
            && a.count > 0
            && b.count > 0
            && a.first < b.first + b.count
            && b.first < a.first + a.count
    }

    /// A read/write or write/write pair on overlapping memory.
    pub fn conflicts(&self, o: &Access) -> bool {
        (self.write || o.write) && self.overlaps(o)
    }
}

/// The regions `op` reads and writes when rank `me` runs it, reads first, in the order the
/// interpreter addresses them.
pub(crate) fn accesses(op: &Op, me: Rank) -> Vec<Access> {
    match op {
        Op::Put { src, dst, peer, .. } => vec![Access::read(me, *src), Access::write(*peer, *dst)],
        Op::Get { src, dst, peer } => vec![Access::read(*peer, *src), Access::write(me, *dst)],
        Op::Copy { src, dst } | Op::Cast { src, dst } => {
            vec![Access::read(me, *src), Access::write(me, *dst)]
        }
        Op::Reduce { dst, srcs } => {
            let mut v: Vec<Access> = srcs.iter().map(|s| Access::read(me, *s)).collect();
            v.push(Access::write(me, *dst));
            v
        }
        Op::Matmul { c, a, b } => vec![
            Access::read(me, *a),
            Access::read(me, *b),
            Access::write(me, *c),
        ],
        Op::HostColl { region, .. } => vec![Access::read(me, *region), Access::write(me, *region)],
        Op::Signal { .. } | Op::Wait { .. } => Vec::new(),
    }
}

/// Whether a step is an element-wise move or fold (element `i` of every region it touches
/// corresponds to element `i` of the others): the steps passes are made of.
pub(crate) fn is_elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Put { .. } | Op::Get { .. } | Op::Copy { .. } | Op::Cast { .. } | Op::Reduce { .. }
    )
}

/// The region whose length a data step moves, and the rank it is measured on: the source of a
/// put, get, copy or cast, the destination of a reduce.
pub(crate) fn data_region(op: &Op, me: Rank) -> Option<(Rank, Region)> {
    match op {
        Op::Put { src, .. } | Op::Copy { src, .. } | Op::Cast { src, .. } => Some((me, *src)),
        Op::Get { src, peer, .. } => Some((*peer, *src)),
        Op::Reduce { dst, .. } => Some((me, *dst)),
        _ => None,
    }
}

/// A symbolic element count: two steps with equal keys move the same number of elements for
/// every launch size. Steps with different keys may still move the same count at a given size;
/// a pass that mixes keys checks that at run time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum LenKey {
    Zero,
    Split {
        total: SizeExpr,
        chunks: u32,
        first: u32,
        count: u32,
    },
    Uniform {
        chunk: SizeExpr,
        count: u32,
    },
    /// A region of a per-block split crossing a block boundary, from its place in its block (a
    /// region inside one block has the `Split` key of that block's split).
    Blocks {
        block: SizeExpr,
        per: u32,
        first: u32,
        count: u32,
    },
    Counts {
        matrix: CountsMatrix,
        rank: Rank,
        first: u32,
        count: u32,
    },
}

pub(crate) fn len_key(plan: &Plan, rank: Rank, r: &Region) -> LenKey {
    if r.count == 0 {
        return LenKey::Zero;
    }
    let b = &plan.buffers[r.buffer as usize];
    match &b.extent {
        Extent::Split { total } => LenKey::Split {
            total: total.clone(),
            chunks: b.chunks,
            first: r.first,
            count: r.count,
        },
        Extent::Uniform { chunk } => LenKey::Uniform {
            chunk: chunk.clone(),
            count: r.count,
        },
        Extent::Blocks { block, .. } => {
            let per = b.extent.chunks_per_block(b.chunks).max(1);
            let first = r.first % per;
            if first + r.count <= per {
                LenKey::Split {
                    total: block.clone(),
                    chunks: per,
                    first,
                    count: r.count,
                }
            } else {
                LenKey::Blocks {
                    block: block.clone(),
                    per,
                    first,
                    count: r.count,
                }
            }
        }
        Extent::Counts { matrix } => LenKey::Counts {
            matrix: *matrix,
            rank,
            first: r.first,
            count: r.count,
        },
    }
}

/// A wait that is satisfied without anything this rank does in the current launch: `>=`
/// against `epoch·stride + offset` on an add slot, where the peers' *entry signals* to this rank
/// on that slot add at least `offset`. An add counter holds exactly `e·stride` after `e`
/// complete launches and only grows, and a rank's entry signals of launch `e` depend only on it
/// finishing launch `e − 1` (docs/plan-schema.md, "Entry rule", point 4), never on a step of
/// launch `e`. So such a wait may run right after this rank's own entry signals: it can only
/// add ordering, never deadlock. Exit credits (`offset` 0, satisfied by earlier launches
/// alone) and entry credits (`offset` 1, satisfied by the peer's entry) are such waits.
pub(crate) fn satisfied_at_entry(plan: &Plan, me: Rank, step: &Step) -> bool {
    let Op::Wait { slot, cmp, target } = &step.op else {
        return false;
    };
    if *cmp != symsched_plan::Cmp::Ge
        || !plan
            .signals
            .get(*slot as usize)
            .is_some_and(|s| s.mode == SignalMode::Add)
    {
        return false;
    }
    let at_entry: u64 = plan
        .ranks
        .iter()
        .flat_map(|r| &r.entry_signals)
        .filter(|u| u.peer == me && u.slot == *slot && u.mode == SignalMode::Add)
        .fold(0u64, |a, u| a.saturating_add(u.value));
    target.offset <= at_entry
}
