//! The fold table of a verified program (`symsched_plan::FoldTable`): for every reduced output
//! chunk, the expression the symbolic execution proved computes it, so a checking executor's
//! reference can fold in the same order and round at the same points (`docs/plan-schema.md`,
//! "Fold table"). Outputs whose expression contains a matmul or a concatenation are left out
//! (their references keep a tolerance).

use super::postcondition::specified_outputs;
use super::symbolic::{Node, NodeId, Outcome};
use crate::ir::Program;
use std::collections::HashMap;
use symsched_plan::{FoldNode, FoldOutput, FoldTable};

pub(super) fn table(prog: &Program, run: &Outcome) -> FoldTable {
    let mut t = FoldTable::default();
    if !prog.collective.reduces() {
        return t;
    }
    let mut ids: HashMap<NodeId, u32> = HashMap::new();
    let mut outputs = specified_outputs(prog);
    outputs.sort_unstable();
    'outputs: for (r, role, c) in outputs {
        let root = run.value(r, role as u32, c);
        let order = run.exprs.postorder(&[root]);
        let mut fresh: Vec<(NodeId, FoldNode)> = Vec::new();
        for &n in &order {
            if ids.contains_key(&n) || fresh.iter().any(|(x, _)| *x == n) {
                continue;
            }
            let id = |x: &NodeId, fresh: &[(NodeId, FoldNode)]| -> u32 {
                ids.get(x).copied().unwrap_or_else(|| {
                    let pos = fresh.iter().position(|(y, _)| y == x).unwrap_or(0);
                    (t.nodes.len() + pos) as u32
                })
            };
            let node = match run.exprs.node(n) {
                Node::Atom((q, b, ch)) => FoldNode::Input {
                    rank: *q,
                    buffer: *b,
                    chunk: *ch,
                },
                Node::Fold { class, ops } => FoldNode::Fold {
                    class: *class,
                    operands: ops.iter().map(|o| id(o, &fresh)).collect(),
                },
                Node::Convert { class, of } => FoldNode::Convert {
                    class: *class,
                    of: id(of, &fresh),
                },
                Node::Library { ops } => FoldNode::Library {
                    operands: ops.iter().map(|o| id(o, &fresh)).collect(),
                },
                Node::Unspecified | Node::MatMul { .. } | Node::Concat(_) => continue 'outputs,
            };
            fresh.push((n, node));
        }
        for (n, node) in fresh {
            ids.insert(n, t.nodes.len() as u32);
            t.nodes.push(node);
        }
        t.outputs.push(FoldOutput {
            rank: r,
            buffer: role as u32,
            chunk: c,
            node: ids[&root],
        });
    }
    t
}
