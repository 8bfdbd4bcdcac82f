//! Symbolic chunk extents and the remainder rule.
//!
//! **Remainder rule (ceil split).** A buffer of `K` chunks over a total of `T` elements has chunk
//! capacity `c = ceil(T / K)`; chunk `i` covers `[min(i·c, T), min((i+1)·c, T))`. So the last
//! chunks may be short or empty (T = 10, K = 4 → 3, 3, 3, 1; T = 5, K = 4 → 2, 2, 1, 0), and
//! every chunk fits in a slot of capacity `c`, which is what scratch buffers declared `of x` get.
//!
//! **Blocks (a chunk factor).** A role of a collective that holds one block per rank (all-gather
//! `out`, reduce-scatter `in`, all-to-all `in` and `out`) may have `K` chunks per block: `B`
//! blocks of `b` elements each, back to back, and each block ceil-split over its own `K` chunks
//! (chunk `i` is chunk `i mod K` of block `i div K`). So block `j` always starts at element `j·b`
//! whatever the remainder, and chunk `j·K + c` has the length of chunk `c` of a `K`-chunk split of
//! `b` (b = 5, B = 2, K = 2 → 3, 2, 3, 2).
//!
//! A step moves as many elements as its *data* region holds: the source for put / get / copy /
//! cast, the destination for reduce. Its other regions must be at least that long.

use crate::{BufferDecl, PlanError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Values of the size variables at launch (`n`, `m`, `k`, …).
pub type Bindings = BTreeMap<String, u64>;

/// A size expression over the launch's size variables. Group size and integer parameters are
/// already folded into constants when a plan is made.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeExpr {
    Const(u64),
    Var(String),
    Add(Box<SizeExpr>, Box<SizeExpr>),
    Mul(Box<SizeExpr>, Box<SizeExpr>),
    /// Ceiling division; division by zero is an error at evaluation.
    CeilDiv(Box<SizeExpr>, Box<SizeExpr>),
}

impl SizeExpr {
    pub fn var(name: &str) -> SizeExpr {
        SizeExpr::Var(name.to_string())
    }

    pub fn scaled(self, k: u64) -> SizeExpr {
        match self {
            SizeExpr::Const(c) => SizeExpr::Const(c.saturating_mul(k)),
            e if k == 1 => e,
            e => SizeExpr::Mul(Box::new(SizeExpr::Const(k)), Box::new(e)),
        }
    }

    pub fn ceil_div(self, k: u64) -> SizeExpr {
        match self {
            e if k == 1 => e,
            SizeExpr::Const(c) if k != 0 => SizeExpr::Const(c.div_ceil(k)),
            e => SizeExpr::CeilDiv(Box::new(e), Box::new(SizeExpr::Const(k))),
        }
    }

    pub fn eval(&self, b: &Bindings) -> Result<u64, PlanError> {
        Ok(match self {
            SizeExpr::Const(c) => *c,
            SizeExpr::Var(v) => *b.get(v).ok_or_else(|| PlanError::UnboundSize(v.clone()))?,
            SizeExpr::Add(x, y) => x
                .eval(b)?
                .checked_add(y.eval(b)?)
                .ok_or(PlanError::SizeOverflow)?,
            SizeExpr::Mul(x, y) => x
                .eval(b)?
                .checked_mul(y.eval(b)?)
                .ok_or(PlanError::SizeOverflow)?,
            SizeExpr::CeilDiv(x, y) => {
                let d = y.eval(b)?;
                if d == 0 {
                    return Err(PlanError::SizeOverflow);
                }
                x.eval(b)?.div_ceil(d)
            }
        })
    }

    /// Names of the variables the expression uses, sorted and deduplicated.
    pub fn vars(&self) -> Vec<String> {
        fn walk(e: &SizeExpr, out: &mut Vec<String>) {
            match e {
                SizeExpr::Const(_) => {}
                SizeExpr::Var(v) => out.push(v.clone()),
                SizeExpr::Add(x, y) | SizeExpr::Mul(x, y) | SizeExpr::CeilDiv(x, y) => {
                    walk(x, out);
                    walk(y, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out.sort();
        out.dedup();
        out
    }
}

impl fmt::Display for SizeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeExpr::Const(c) => write!(f, "{c}"),
            SizeExpr::Var(v) => write!(f, "{v}"),
            SizeExpr::Add(x, y) => write!(f, "({x} + {y})"),
            SizeExpr::Mul(x, y) => write!(f, "{x}*{y}"),
            SizeExpr::CeilDiv(x, y) => write!(f, "ceil({x} / {y})"),
        }
    }
}

/// Which per-pair count matrix gives an alltoallv buffer's chunk extents. The runtime gathers
/// the full matrix `counts[sender][receiver]` before executing the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountsMatrix {
    /// Chunk `j` on rank `r` holds `counts[r][j]` elements (what r sends to j).
    Send,
    /// Chunk `j` on rank `r` holds `counts[j][r]` elements (what r receives from j).
    Recv,
}

/// How a buffer's chunks get their element extents.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Extent {
    /// `total` elements split over the chunks by the ceil-split remainder rule.
    Split { total: SizeExpr },
    /// Every chunk holds exactly `chunk` elements.
    Uniform { chunk: SizeExpr },
    /// Runtime-sized chunks from the alltoallv count matrix.
    Counts { matrix: CountsMatrix },
    /// `blocks` blocks of `block` elements, back to back; the chunks are split evenly over the
    /// blocks (`chunks / blocks` per block, which the producer guarantees divides) and each
    /// block is ceil-split over its own chunks.
    Blocks { block: SizeExpr, blocks: u32 },
}

impl Extent {
    /// Chunks per block of a [`Extent::Blocks`] extent over `chunks` chunks; 1 block otherwise.
    pub fn chunks_per_block(&self, chunks: u32) -> u32 {
        match self {
            Extent::Blocks { blocks, .. } => chunks / (*blocks).max(1),
            _ => chunks,
        }
    }
}

/// Runtime values extents are evaluated against.
#[derive(Debug, Clone, Default)]
pub struct LaunchSizes {
    pub vars: Bindings,
    /// `counts[sender][receiver]`, only for plans with `Counts` extents.
    pub counts: Option<Vec<Vec<u64>>>,
}

/// Element offset and length of one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    pub offset: u64,
    pub len: u64,
}

impl BufferDecl {
    /// Offset and length (in elements) of chunk `index` of this buffer on `rank`.
    pub fn chunk_span(
        &self,
        index: u32,
        rank: u32,
        sizes: &LaunchSizes,
    ) -> Result<ChunkSpan, PlanError> {
        if index >= self.chunks {
            return Err(PlanError::Inconsistent(format!(
                "chunk {index} of `{}` which has {}",
                self.name, self.chunks
            )));
        }
        let k = self.chunks as u64;
        let i = index as u64;
        match &self.extent {
            Extent::Split { total } => {
                let t = total.eval(&sizes.vars)?;
                let c = t.div_ceil(k.max(1));
                let start = (i * c).min(t);
                let end = ((i + 1) * c).min(t);
                Ok(ChunkSpan {
                    offset: start,
                    len: end - start,
                })
            }
            Extent::Uniform { chunk } => {
                let c = chunk.eval(&sizes.vars)?;
                Ok(ChunkSpan {
                    offset: i.checked_mul(c).ok_or(PlanError::SizeOverflow)?,
                    len: c,
                })
            }
            Extent::Blocks { block, .. } => {
                let b = block.eval(&sizes.vars)?;
                let per = (self.extent.chunks_per_block(self.chunks) as u64).max(1);
                let (j, w) = (i / per, i % per);
                let c = b.div_ceil(per);
                let start = (w * c).min(b);
                let end = ((w + 1) * c).min(b);
                let base = j.checked_mul(b).ok_or(PlanError::SizeOverflow)?;
                Ok(ChunkSpan {
                    offset: base + start,
                    len: end - start,
                })
            }
            Extent::Counts { matrix } => {
                let counts = sizes
                    .counts
                    .as_ref()
                    .ok_or_else(|| PlanError::UnboundSize("alltoallv counts".into()))?;
                let at = |j: u64| -> Result<u64, PlanError> {
                    let (s, r) = match matrix {
                        CountsMatrix::Send => (rank as usize, j as usize),
                        CountsMatrix::Recv => (j as usize, rank as usize),
                    };
                    counts
                        .get(s)
                        .and_then(|row| row.get(r))
                        .copied()
                        .ok_or_else(|| PlanError::UnboundSize(format!("counts[{s}][{r}]")))
                };
                let mut offset = 0u64;
                for j in 0..i {
                    offset = offset.checked_add(at(j)?).ok_or(PlanError::SizeOverflow)?;
                }
                Ok(ChunkSpan {
                    offset,
                    len: at(i)?,
                })
            }
        }
    }

    /// Total elements of this buffer on `rank`.
    pub fn total_len(&self, rank: u32, sizes: &LaunchSizes) -> Result<u64, PlanError> {
        if self.chunks == 0 {
            return Ok(0);
        }
        let last = self.chunk_span(self.chunks - 1, rank, sizes)?;
        match &self.extent {
            // Split totals are exact even when trailing chunks are empty.
            Extent::Split { total } => total.eval(&sizes.vars),
            Extent::Blocks { block, blocks } => block
                .eval(&sizes.vars)?
                .checked_mul(*blocks as u64)
                .ok_or(PlanError::SizeOverflow),
            _ => Ok(last.offset + last.len),
        }
    }

    /// Offset and length of a chunk range on `rank`: the covered elements, contiguous.
    pub fn region_span(
        &self,
        first: u32,
        count: u32,
        rank: u32,
        sizes: &LaunchSizes,
    ) -> Result<ChunkSpan, PlanError> {
        if count == 0 {
            let offset = if first < self.chunks {
                self.chunk_span(first, rank, sizes)?.offset
            } else {
                self.total_len(rank, sizes)?
            };
            return Ok(ChunkSpan { offset, len: 0 });
        }
        let a = self.chunk_span(first, rank, sizes)?;
        let b = self.chunk_span(first + count - 1, rank, sizes)?;
        Ok(ChunkSpan {
            offset: a.offset,
            len: b.offset + b.len - a.offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BufferRole, ElemClass};

    fn split(k: u32) -> BufferDecl {
        BufferDecl {
            name: "x".into(),
            role: BufferRole::InOut,
            chunks: k,
            extent: Extent::Split {
                total: SizeExpr::var("n"),
            },
            elem: ElemClass::Data,
        }
    }

    fn sizes(n: u64) -> LaunchSizes {
        LaunchSizes {
            vars: [("n".to_string(), n)].into_iter().collect(),
            counts: None,
        }
    }

    #[test]
    fn ceil_split_remainder_rule() {
        let b = split(4);
        let lens: Vec<u64> = (0..4)
            .map(|i| b.chunk_span(i, 0, &sizes(10)).unwrap().len)
            .collect();
        assert_eq!(lens, vec![3, 3, 3, 1]);
        let lens: Vec<u64> = (0..4)
            .map(|i| b.chunk_span(i, 0, &sizes(5)).unwrap().len)
            .collect();
        assert_eq!(lens, vec![2, 2, 1, 0]);
        assert_eq!(b.total_len(0, &sizes(5)).unwrap(), 5);
        let r = b.region_span(1, 3, 0, &sizes(5)).unwrap();
        assert_eq!((r.offset, r.len), (2, 3));
    }

    #[test]
    fn blocks_split_each_block_on_its_own() {
        let mut b = split(4);
        b.extent = Extent::Blocks {
            block: SizeExpr::var("n"),
            blocks: 2,
        };
        assert_eq!(b.extent.chunks_per_block(b.chunks), 2);
        let spans = |n: u64| -> Vec<(u64, u64)> {
            (0..4)
                .map(|i| {
                    let c = b.chunk_span(i, 0, &sizes(n)).unwrap();
                    (c.offset, c.len)
                })
                .collect()
        };
        // Block 1 starts at n whatever the remainder.
        assert_eq!(spans(5), vec![(0, 3), (3, 2), (5, 3), (8, 2)]);
        assert_eq!(spans(1), vec![(0, 1), (1, 0), (1, 1), (2, 0)]);
        assert_eq!(spans(0), vec![(0, 0), (0, 0), (0, 0), (0, 0)]);
        assert_eq!(b.total_len(0, &sizes(5)).unwrap(), 10);
        let r = b.region_span(1, 2, 0, &sizes(5)).unwrap();
        assert_eq!((r.offset, r.len), (3, 5));
        let r = b.region_span(4, 0, 0, &sizes(5)).unwrap();
        assert_eq!((r.offset, r.len), (10, 0));
    }

    #[test]
    fn counts_extents_follow_the_matrix() {
        let mut b = split(3);
        b.extent = Extent::Counts {
            matrix: CountsMatrix::Recv,
        };
        let s = LaunchSizes {
            vars: Bindings::new(),
            counts: Some(vec![vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]),
        };
        // rank 1 receives counts[0][1], counts[1][1], counts[2][1]
        let spans: Vec<(u64, u64)> = (0..3)
            .map(|j| {
                let c = b.chunk_span(j, 1, &s).unwrap();
                (c.offset, c.len)
            })
            .collect();
        assert_eq!(spans, vec![(0, 2), (2, 5), (7, 8)]);
    }

    #[test]
    fn unbound_variable_is_an_error() {
        assert!(matches!(
            SizeExpr::var("m").eval(&Bindings::new()),
            Err(PlanError::UnboundSize(_))
        ));
    }
}
