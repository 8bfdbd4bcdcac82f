//! The collective table of `docs/language-spec.md`: role order and access, totals, size
//! variables and required params per collective.

use symsched_plan::{BufferRole, CollectiveKind, CountsMatrix, Extent, SizeExpr, SizeVar};

/// One role of a collective's signature.
#[derive(Debug, Clone, Copy)]
pub struct RoleSpec {
    /// The name used in the spec's table (roles are positional; this is for messages).
    pub name: &'static str,
    pub access: BufferRole,
}

/// Roles in signature order.
pub fn roles(kind: CollectiveKind) -> &'static [RoleSpec] {
    use BufferRole::*;
    const fn r(name: &'static str, access: BufferRole) -> RoleSpec {
        RoleSpec { name, access }
    }
    const IN_OUT: &[RoleSpec] = &[r("in", Input), r("out", Output)];
    const X: &[RoleSpec] = &[r("x", InOut)];
    const AGMM: &[RoleSpec] = &[r("a", Input), r("b", Input), r("g", Output), r("c", Output)];
    const MMRS: &[RoleSpec] = &[r("a", Input), r("b", Input), r("c", Output)];
    match kind {
        CollectiveKind::Allgather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::Alltoall
        | CollectiveKind::Alltoallv => IN_OUT,
        CollectiveKind::Allreduce
        | CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::Sendrecv => X,
        CollectiveKind::AllgatherMatmul => AGMM,
        CollectiveKind::MatmulReduceScatter => MMRS,
        // Its roles are the declaration's (`super::declared`).
        CollectiveKind::Declared { .. } => &[],
    }
}

/// Params the collective's postcondition needs; the schedule must declare them.
pub fn required_params(kind: CollectiveKind) -> &'static [&'static str] {
    match kind {
        CollectiveKind::Broadcast | CollectiveKind::Reduce => &["root"],
        CollectiveKind::Sendrecv => &["src", "dst"],
        _ => &[],
    }
}

/// Size variables of the collective with their meaning.
pub fn size_vars(kind: CollectiveKind) -> Vec<SizeVar> {
    let v = |name: &str, meaning: &str| SizeVar {
        name: name.into(),
        meaning: meaning.into(),
    };
    match kind {
        CollectiveKind::Allgather => {
            vec![v("n", "elements each rank contributes (length of `in`)")]
        }
        CollectiveKind::ReduceScatter => vec![v(
            "n",
            "elements of each rank's result block (length of `out`)",
        )],
        CollectiveKind::Alltoall => vec![v("n", "elements each rank sends to each peer")],
        CollectiveKind::Alltoallv => Vec::new(),
        CollectiveKind::Allreduce
        | CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::Sendrecv => vec![v("n", "elements of the buffer `x`")],
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter => vec![
            v("m", "rows of each rank's block of `a`"),
            v("k", "inner dimension (columns of `a`, rows of `b`)"),
            v("n", "columns of `b`"),
        ],
        CollectiveKind::Declared { .. } => super::declared::size_vars(),
    }
}

/// Extent of role `index` for group size `p` (P folded into constants).
pub fn role_extent(kind: CollectiveKind, index: usize, p: u64) -> Extent {
    let n = || SizeExpr::var("n");
    let mul = |a: SizeExpr, b: SizeExpr| SizeExpr::Mul(Box::new(a), Box::new(b));
    let mk = || mul(SizeExpr::var("m"), SizeExpr::var("k"));
    let kn = || mul(SizeExpr::var("k"), SizeExpr::var("n"));
    let mn = || mul(SizeExpr::var("m"), SizeExpr::var("n"));
    let split = |total: SizeExpr| Extent::Split { total };
    match (kind, index) {
        (CollectiveKind::Allgather, 0) => split(n()),
        (CollectiveKind::Allgather, _) => split(n().scaled(p)),
        (CollectiveKind::ReduceScatter, 0) => split(n().scaled(p)),
        (CollectiveKind::ReduceScatter, _) => split(n()),
        (CollectiveKind::Alltoall, _) => split(n().scaled(p)),
        (CollectiveKind::Alltoallv, 0) => Extent::Counts {
            matrix: CountsMatrix::Send,
        },
        (CollectiveKind::Alltoallv, _) => Extent::Counts {
            matrix: CountsMatrix::Recv,
        },
        (CollectiveKind::AllgatherMatmul, 0) => split(mk()),
        (CollectiveKind::AllgatherMatmul, 1) => split(kn()),
        (CollectiveKind::AllgatherMatmul, 2) => split(mk().scaled(p)),
        (CollectiveKind::AllgatherMatmul, _) => split(mn().scaled(p)),
        (CollectiveKind::MatmulReduceScatter, 0) => split(mk().scaled(p)),
        (CollectiveKind::MatmulReduceScatter, 1) => split(kn()),
        (CollectiveKind::MatmulReduceScatter, _) => split(mn()),
        _ => split(n()),
    }
}

/// The block size and block count of role `index` when it holds one block per rank and may have
/// a chunk factor (`[P*K]`, K chunks per block): all-gather `out`, reduce-scatter `in`,
/// all-to-all `in` and `out`. The matmul collectives' per-rank blocks are matrices whose rows a
/// chunk factor would cut, and alltoallv's chunks are its count matrix: `None`.
pub fn chunk_factor_block(kind: CollectiveKind, index: usize, p: u64) -> Option<(SizeExpr, u64)> {
    let per_rank = match kind {
        CollectiveKind::Allgather => index == 1,
        CollectiveKind::ReduceScatter => index == 0,
        CollectiveKind::Alltoall => true,
        _ => false,
    };
    per_rank.then(|| (SizeExpr::var("n"), p))
}

/// The extent of a role of `chunks` chunks over `blocks` blocks of `block` elements: a split of
/// the whole when there is one chunk per block or one block (the two rules then coincide), else
/// the per-block split of the plan's remainder rule (`Extent::Blocks`). `None` when `chunks` is
/// not a multiple of `blocks`.
pub fn blocked_extent(block: SizeExpr, blocks: u64, chunks: u32) -> Option<Extent> {
    let chunks = u64::from(chunks);
    if blocks == 0 || chunks % blocks != 0 || chunks < blocks {
        return None;
    }
    Some(if chunks == blocks || blocks == 1 {
        Extent::Split {
            total: block.scaled(blocks),
        }
    } else {
        Extent::Blocks {
            block,
            blocks: u32::try_from(blocks).ok()?,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_factor_splits_per_block() {
        let n = || SizeExpr::var("n");
        assert_eq!(
            blocked_extent(n(), 4, 4),
            Some(Extent::Split {
                total: n().scaled(4)
            })
        );
        assert_eq!(
            blocked_extent(n(), 1, 2),
            Some(Extent::Split { total: n() })
        );
        assert_eq!(
            blocked_extent(n(), 4, 8),
            Some(Extent::Blocks {
                block: n(),
                blocks: 4
            })
        );
        assert_eq!(blocked_extent(n(), 4, 9), None);
        assert_eq!(blocked_extent(n(), 4, 2), None);
        assert!(chunk_factor_block(CollectiveKind::Allgather, 1, 4).is_some());
        assert!(chunk_factor_block(CollectiveKind::Allgather, 0, 4).is_none());
        assert!(chunk_factor_block(CollectiveKind::AllgatherMatmul, 2, 4).is_none());
        assert!(chunk_factor_block(CollectiveKind::Alltoallv, 1, 4).is_none());
    }

    #[test]
    fn every_collective_has_roles_and_extents() {
        for k in CollectiveKind::ALL {
            let rs = roles(k);
            assert!(!rs.is_empty());
            for i in 0..rs.len() {
                let e = role_extent(k, i, 4);
                if let Extent::Split { total } = e {
                    for v in total.vars() {
                        assert!(size_vars(k).iter().any(|s| s.name == v), "{k:?} uses {v}");
                    }
                }
            }
        }
        assert_eq!(
            role_extent(CollectiveKind::Allgather, 1, 4),
            Extent::Split {
                total: SizeExpr::var("n").scaled(4)
            }
        );
    }
}
