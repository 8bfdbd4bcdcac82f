//! The fold table: how every reduced output chunk of a plan is computed, as the verifier proved
//! it — which contributions, folded in which order, rounded where.
//!
//! Floating-point reduction is not associative, so "the sum of every rank's chunk" does not
//! determine the bits of a result: the order of the fold and the points where partial sums are
//! rounded (to the data type after a ring hop, to the wire type before a low-precision put) do.
//! The verifier executes the schedule symbolically and knows exactly that expression for every
//! output chunk; the compiler writes it here, and a checking executor (`symsched run --check`)
//! computes its reference by the same expression, so a correct schedule whose order is not rank
//! order (a ring, a hierarchical fold) is compared bit for bit instead of failing, or needing a
//! tolerance.
//!
//! Outputs computed through a framework collective ([`FoldNode::Library`]: its order is the
//! library's) are listed too; a reference cannot reproduce them and falls back to its own order
//! with a tolerance. Outputs with matmul products are not listed.

use crate::ElemClass;
use serde::{Deserialize, Serialize};

/// One node of a fold expression. Nodes refer to earlier nodes of the same table by index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FoldNode {
    /// Chunk `chunk` of role buffer `buffer` on rank `rank`, as the launch found it (data
    /// class).
    Input { rank: u32, buffer: u32, chunk: u32 },
    /// One reduce: `operands` folded left in this order with the launch's reduce op,
    /// accumulated in the `acc` type and rounded once into `class`.
    Fold {
        class: ElemClass,
        operands: Vec<u32>,
    },
    /// A conversion into `class`, rounding to nearest even (a cast, or a move between classes).
    Convert { class: ElemClass, of: u32 },
    /// A reduction of `operands` by the framework's collective library, in its own order.
    Library { operands: Vec<u32> },
}

/// A reduced output chunk and the node that computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldOutput {
    pub rank: u32,
    pub buffer: u32,
    pub chunk: u32,
    pub node: u32,
}

/// The proved fold of every reduced output chunk (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FoldTable {
    /// Expression nodes; each refers only to nodes before it.
    pub nodes: Vec<FoldNode>,
    /// Output chunks, rank-major.
    pub outputs: Vec<FoldOutput>,
}

impl FoldTable {
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// The node computing chunk `chunk` of `buffer` on `rank`, if listed.
    pub fn output(&self, rank: u32, buffer: u32, chunk: u32) -> Option<u32> {
        self.outputs
            .binary_search_by(|o| (o.rank, o.buffer, o.chunk).cmp(&(rank, buffer, chunk)))
            .ok()
            .map(|i| self.outputs[i].node)
    }

    /// Whether `node` (and everything below it) can be recomputed: no framework reduction.
    pub fn reproducible(&self, node: u32) -> bool {
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            match self.nodes.get(n as usize) {
                None | Some(FoldNode::Library { .. }) => return false,
                Some(FoldNode::Input { .. }) => {}
                Some(FoldNode::Convert { of, .. }) => stack.push(*of),
                Some(FoldNode::Fold { operands, .. }) => stack.extend(operands),
            }
        }
        true
    }

    /// A node as text, e.g. `(x[1]@1 ⊕ x[1]@2 ⊕ x[1]@3) ⊕ x[1]@0` (`name(buffer)` names the
    /// buffers); shortened after `budget` nodes.
    pub fn describe(&self, node: u32, name: &dyn Fn(u32) -> String, budget: usize) -> String {
        fn go(
            t: &FoldTable,
            n: u32,
            top: bool,
            name: &dyn Fn(u32) -> String,
            budget: &mut usize,
        ) -> String {
            if *budget == 0 {
                return "…".into();
            }
            *budget -= 1;
            let list = |ops: &[u32], sep: &str, budget: &mut usize| {
                ops.iter()
                    .map(|&o| go(t, o, false, name, budget))
                    .collect::<Vec<_>>()
                    .join(sep)
            };
            match t.nodes.get(n as usize) {
                None => "?".into(),
                Some(FoldNode::Input {
                    rank,
                    buffer,
                    chunk,
                }) => format!("{}[{chunk}]@{rank}", name(*buffer)),
                Some(FoldNode::Convert { class, of }) => {
                    let c = match class {
                        ElemClass::Data => "data",
                        ElemClass::Wire => "wire",
                        ElemClass::Acc => "acc",
                    };
                    format!("{c}({})", go(t, *of, true, name, budget))
                }
                Some(FoldNode::Fold { operands, .. }) => {
                    let s = list(operands, " ⊕ ", budget);
                    if top {
                        s
                    } else {
                        format!("({s})")
                    }
                }
                Some(FoldNode::Library { operands }) => {
                    format!("library({})", list(operands, ", ", budget))
                }
            }
        }
        let mut b = budget.max(1);
        go(self, node, true, name, &mut b)
    }

    /// Structural checks: every node refers to earlier nodes only, outputs are sorted and
    /// point at existing nodes.
    pub fn check(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            let refs: Vec<u32> = match n {
                FoldNode::Input { .. } => Vec::new(),
                FoldNode::Convert { of, .. } => vec![*of],
                FoldNode::Fold { operands, .. } | FoldNode::Library { operands } => {
                    operands.clone()
                }
            };
            if let Some(bad) = refs.iter().find(|&&r| r as usize >= i) {
                return Err(format!(
                    "fold node {i} refers to node {bad}, not an earlier one"
                ));
            }
        }
        let sorted = self
            .outputs
            .windows(2)
            .all(|w| (w[0].rank, w[0].buffer, w[0].chunk) < (w[1].rank, w[1].buffer, w[1].chunk));
        if !sorted {
            return Err("fold outputs are not sorted by (rank, buffer, chunk)".into());
        }
        if let Some(o) = self
            .outputs
            .iter()
            .find(|o| o.node as usize >= self.nodes.len())
        {
            return Err(format!("fold output refers to missing node {}", o.node));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_of_three() -> FoldTable {
        let input = |rank| FoldNode::Input {
            rank,
            buffer: 0,
            chunk: 1,
        };
        FoldTable {
            nodes: vec![
                input(1),
                input(2),
                input(0),
                FoldNode::Fold {
                    class: ElemClass::Data,
                    operands: vec![0, 1],
                },
                FoldNode::Fold {
                    class: ElemClass::Data,
                    operands: vec![3, 2],
                },
            ],
            outputs: (0..3)
                .map(|rank| FoldOutput {
                    rank,
                    buffer: 0,
                    chunk: 1,
                    node: 4,
                })
                .collect(),
        }
    }

    #[test]
    fn describes_the_order_and_finds_outputs() {
        let t = ring_of_three();
        t.check().unwrap();
        let name = |_| "x".to_string();
        assert_eq!(t.describe(4, &name, 16), "(x[1]@1 ⊕ x[1]@2) ⊕ x[1]@0");
        assert_eq!(t.output(2, 0, 1), Some(4));
        assert_eq!(t.output(2, 0, 0), None);
        assert!(t.reproducible(4));
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<FoldTable>(&json).unwrap(), t);
    }

    #[test]
    fn forward_references_are_refused() {
        let mut t = ring_of_three();
        t.nodes.swap(3, 4);
        assert!(t.check().is_err());
    }
}
