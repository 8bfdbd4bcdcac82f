//! The DOT back end (`--emit dot`, `symsched graph`): one cluster per rank, nodes labelled with
//! the step's `.sched`-like text, program-order edges solid, signal→wait edges dashed, data
//! edges dotted, and put-completion edges (a plain put's data ordered before the sender's next
//! standalone signal) bold green. A put's arrival is drawn as the put itself, so the put → arrival
//! half of a completion is a self-loop and is left out. A rank with entry signals (entry
//! credits) gets a note node `rR_entry` before its first step, with dashed edges to the waits
//! its entry releases. Output is deterministic (nodes in program order, edges sorted).

use super::text::sorted_edges;
use crate::ir::graph::{self, EdgeKind};
use crate::ir::{credits, Program, StepRef};
use std::fmt::Write;
use symsched_plan::Op;

fn node_id(s: StepRef) -> String {
    format!("r{}_{}", s.rank, s.index)
}

/// Quote a label for DOT: backslashes and double quotes escaped, no raw newlines.
fn quote(text: &str) -> String {
    let mut q = String::with_capacity(text.len() + 2);
    q.push('"');
    for c in text.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Render the dataflow graph of `prog` as a Graphviz digraph.
pub fn emit_dot(prog: &Program) -> String {
    let mut out = String::new();
    let title = format!("{} P={}", prog.schedule, prog.group_size);
    // `write!` into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(out, "digraph {} {{", quote(&title));
    let _ = writeln!(out, "  label={};", quote(&title));
    let _ = writeln!(out, "  rankdir=TB;");
    let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
    for (r, steps) in prog.ranks.iter().enumerate() {
        let _ = writeln!(out, "  subgraph cluster_r{r} {{");
        let _ = writeln!(out, "    label=\"rank {r}\";");
        let entries = prog.entry_signals.get(r).map_or(&[][..], Vec::as_slice);
        if !entries.is_empty() {
            let text: Vec<String> = entries
                .iter()
                .map(|u| format!("entry: {}", prog.op_text(&Op::Signal { update: *u })))
                .collect();
            let _ = writeln!(
                out,
                "    r{r}_entry [label={}, shape=note];",
                quote(&text.join("\n"))
            );
        }
        for (i, s) in steps.iter().enumerate() {
            let at = StepRef {
                rank: r as u32,
                index: i as u32,
            };
            let _ = writeln!(
                out,
                "    {} [label={}];",
                node_id(at),
                quote(&match s.channel {
                    0 => format!("{i}: {}", prog.op_text(&s.op)),
                    c => format!("{i} [ch {c}]: {}", prog.op_text(&s.op)),
                })
            );
        }
        let _ = writeln!(out, "  }}");
    }
    let kinds = [
        (EdgeKind::Program, ""),
        (EdgeKind::Sync, " [style=dashed, color=blue]"),
        (EdgeKind::Data, " [style=dotted, color=gray40]"),
        (EdgeKind::Completion, " [style=bold, color=darkgreen]"),
    ];
    let dg = graph::build(prog);
    for (kind, attrs) in kinds {
        for (a, b) in sorted_edges(&dg, kind).into_iter().filter(|(a, b)| a != b) {
            let _ = writeln!(out, "  {} -> {}{attrs};", node_id(a), node_id(b));
        }
    }
    // A rank's entry precedes its first step and releases the entry-credit waits on it.
    for (q, waits) in credits::entry_waits(prog).into_iter().enumerate() {
        if prog.entry_signals.get(q).is_none_or(Vec::is_empty) {
            continue;
        }
        if !prog.ranks[q].is_empty() {
            let _ = writeln!(out, "  r{q}_entry -> r{q}_0;");
        }
        for w in waits {
            let _ = writeln!(
                out,
                "  r{q}_entry -> {} [style=dashed, color=blue];",
                node_id(w)
            );
        }
    }
    let _ = writeln!(out, "}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::back::plan::tests::tiny_program;

    #[test]
    fn clusters_per_rank_and_dashed_sync_edge() {
        let dot = emit_dot(&tiny_program());
        assert!(dot.contains("subgraph cluster_r0"), "{dot}");
        assert!(dot.contains("subgraph cluster_r1"), "{dot}");
        assert!(dot.contains("r0_0 -> r0_1;"), "{dot}");
        // The signal (rank 0 step 1) releases the wait (rank 1 step 0).
        assert!(dot.contains("r0_1 -> r1_0 [style=dashed"), "{dot}");
        assert_eq!(dot, emit_dot(&tiny_program()));
        // The plain put's data is ordered before the standalone signal after it.
        assert!(dot.contains("r0_0 -> r0_1 [style=bold"), "{dot}");
        assert!(!dot.contains("r0_0 -> r0_0"), "{dot}");
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(quote(r#"a "b" \c"#), r#""a \"b\" \\c""#);
    }
}
