//! A collective declared in a `.sched` source by its chunk map (`collective NAME(…) { … }`),
//! instantiated for one group size: which role blocks every rank starts with (every block of an
//! input role, its own) and which combination of them every specified output block must hold
//! after the call.
//!
//! The verifier proves a plan against this map; a checking executor derives its reference from
//! it. A block is `n` elements (the size variable of every declared collective).

use crate::{BufferRole, Rank};
use serde::{Deserialize, Serialize};

/// One role of a declared collective, in signature order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredRole {
    /// `Input` when the map only reads it, `Output` when it only writes it, `InOut` for both.
    pub access: BufferRole,
    /// Number of blocks of the role on every rank.
    pub blocks: u32,
}

/// Block `block` of role `role` on rank `rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockRef {
    pub rank: Rank,
    pub role: u32,
    pub block: u32,
}

/// A specified output block and what it holds after the call: the one input block of
/// `sources`, or the reduction of all of them with the launch's op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostBlock {
    pub at: BlockRef,
    /// Written with `+=`: the launch's reduce op over `sources` (a reduction of one block is
    /// that block, and `avg` divides it by P like every output of a reducing collective).
    pub reduce: bool,
    /// Input blocks (as they were before the call), ascending; never empty.
    pub sources: Vec<BlockRef>,
}

/// The instantiated chunk map of a declared collective.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeclaredCollective {
    /// The name the source declares (`implements NAME(…)`).
    pub name: String,
    pub roles: Vec<DeclaredRole>,
    /// Every specified output block, sorted by `at` as (role, rank, block); blocks not listed
    /// are unspecified after the call.
    pub post: Vec<PostBlock>,
}

impl DeclaredCollective {
    /// Whether some output block is a reduction.
    pub fn reduces(&self) -> bool {
        self.post.iter().any(|b| b.reduce)
    }

    /// The specified blocks of role `role` on rank `rank`, ascending by block.
    pub fn post_of(&self, role: u32, rank: Rank) -> &[PostBlock] {
        let key = |b: &PostBlock| (b.at.role, b.at.rank);
        let lo = self.post.partition_point(|b| key(b) < (role, rank));
        let hi = self.post.partition_point(|b| key(b) <= (role, rank));
        &self.post[lo..hi]
    }

    /// Sort key of [`Self::post`].
    pub fn order(b: &BlockRef) -> (u32, Rank, u32) {
        (b.role, b.rank, b.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_of_finds_one_rank_of_one_role() {
        let at = |role, rank, block| BlockRef { rank, role, block };
        let d = DeclaredCollective {
            name: "next".into(),
            roles: vec![
                DeclaredRole {
                    access: BufferRole::Input,
                    blocks: 1,
                },
                DeclaredRole {
                    access: BufferRole::Output,
                    blocks: 2,
                },
            ],
            post: vec![
                PostBlock {
                    at: at(1, 0, 1),
                    reduce: false,
                    sources: vec![at(0, 1, 0)],
                },
                PostBlock {
                    at: at(1, 1, 0),
                    reduce: true,
                    sources: vec![at(0, 0, 0), at(0, 1, 0)],
                },
                PostBlock {
                    at: at(1, 1, 1),
                    reduce: false,
                    sources: vec![at(0, 0, 0)],
                },
            ],
        };
        assert_eq!(d.post_of(1, 1).len(), 2);
        assert_eq!(d.post_of(1, 0)[0].at.block, 1);
        assert!(d.post_of(0, 0).is_empty());
        assert!(d.reduces());
    }
}
