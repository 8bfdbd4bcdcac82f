//! The IR text dump (`symsched compile --emit ir`): a deterministic, diff-friendly view of an
//! instantiated program for people and snapshot tests.
//!
//! Layout: a header (schedule, collective, group size, params, buffers with extents, signal
//! slots with their per-rank epoch strides, duals), then every rank's entry signals (`entry:`),
//! steps in program order (one `Program::op_text` line each, prefixed by the step index) and exit
//! signals (`exit:`), then the synchronisation edges
//! of the dataflow graph (which signal step releases which wait).

use crate::ir::graph::{self, DataflowGraph, EdgeKind};
use crate::ir::{Program, StepRef};
use std::fmt::Write;
use symsched_plan::{
    BufferRole, CountsMatrix, DualDecl, ElemClass, Extent, Op, SignalMode, SignalUpdate,
};

/// Render `prog` as text. The output ends with a newline and depends only on `prog`.
pub fn emit_ir(prog: &Program) -> String {
    let mut out = String::new();
    // `write!` into a String cannot fail; the results are ignored on purpose.
    let _ = writeln!(
        out,
        "schedule {} implements {}",
        prog.schedule,
        prog.collective_name()
    );
    let _ = writeln!(out, "group_size {}", prog.group_size);
    let params: Vec<String> = prog
        .params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(out, "params [{}]", params.join(", "));
    if let Some(h) = prog.hierarchy {
        let _ = writeln!(out, "over nodes({})", h.ranks_per_node);
    }
    for v in &prog.size_vars {
        let _ = writeln!(out, "size {}: {}", v.name, v.meaning);
    }
    let _ = writeln!(out, "buffers:");
    for (i, b) in prog.buffers.iter().enumerate() {
        let _ = writeln!(
            out,
            "  b{i} {}: {} {}, {} chunks, {}",
            b.name,
            role_text(b.role),
            elem_text(b.elem),
            b.chunks,
            extent_text(&b.extent)
        );
    }
    let _ = writeln!(out, "signals:");
    let strides = per_rank_strides(prog);
    for (i, s) in prog.signals.iter().enumerate() {
        let mode = match s.mode {
            SignalMode::Add => "add",
            SignalMode::Set => "set",
        };
        let per_rank: Vec<String> = strides.iter().map(|r| r[i].to_string()).collect();
        let _ = writeln!(
            out,
            "  s{i} {} ({mode}) stride per rank [{}]",
            s.name,
            per_rank.join(", ")
        );
    }
    let _ = writeln!(out, "duals:");
    for (d, _) in &prog.duals {
        let _ = writeln!(out, "  {}", dual_text(d));
    }
    for (r, steps) in prog.ranks.iter().enumerate() {
        let _ = writeln!(out, "rank {r}:");
        if let Some(entries) = prog.entry_signals.get(r) {
            for u in entries {
                let _ = writeln!(out, "  entry: {}", prog.op_text(&Op::Signal { update: *u }));
            }
        }
        for (i, s) in steps.iter().enumerate() {
            // Only steps off channel 0 say their channel, so dumps without channels read as
            // they always did.
            let ch = match s.channel {
                0 => String::new(),
                c => format!("[ch {c}] "),
            };
            let _ = writeln!(out, "  {i:>3}: {ch}{}", prog.op_text(&s.op));
        }
        if let Some(exits) = prog.exit_signals.get(r) {
            for u in exits {
                let _ = writeln!(out, "  exit: {}", prog.op_text(&Op::Signal { update: *u }));
            }
        }
    }
    let _ = writeln!(out, "sync edges:");
    for (a, b) in sync_edges(prog) {
        let _ = writeln!(out, "  r{}.{} -> r{}.{}", a.rank, a.index, b.rank, b.index);
    }
    out
}

/// The graph's signal→wait edges, sorted, as (signalling step, waiting step).
pub(crate) fn sync_edges(prog: &Program) -> Vec<(StepRef, StepRef)> {
    sorted_edges(&graph::build(prog), EdgeKind::Sync)
}

/// Every edge of the dataflow graph of one kind, sorted and deduplicated.
pub(crate) fn sorted_edges(dg: &DataflowGraph, kind: EdgeKind) -> Vec<(StepRef, StepRef)> {
    let mut edges = dg.edges_of(kind);
    edges.sort();
    edges.dedup();
    edges
}

/// Per rank, per slot: the epoch stride a wait on that rank's copy of the slot uses (what one
/// launch adds to it, or the set period), mirroring `Program::assign_epoch_strides` so slots no
/// rank waits on are shown too.
fn per_rank_strides(prog: &Program) -> Vec<Vec<u64>> {
    let p = prog.group_size as usize;
    let slots = prog.signals.len();
    let mut received = vec![vec![0u64; slots]; p];
    let updates = prog.ranks.iter().flatten().filter_map(|s| match &s.op {
        Op::Put {
            signal: Some(u), ..
        } => Some(*u),
        Op::Signal { update } => Some(*update),
        _ => None,
    });
    let exits = prog
        .entry_signals
        .iter()
        .chain(&prog.exit_signals)
        .flatten()
        .copied();
    for u in updates.chain(exits) {
        let SignalUpdate {
            slot, peer, value, ..
        } = u;
        let (r, sl) = (peer as usize, slot as usize);
        if r >= p || sl >= slots {
            continue;
        }
        match prog.signals[sl].mode {
            SignalMode::Add => received[r][sl] = received[r][sl].saturating_add(value),
            SignalMode::Set => received[r][sl] = received[r][sl].max(value.saturating_add(1)),
        }
    }
    for sl in 0..slots {
        if prog.signals[sl].mode == SignalMode::Set {
            let period = (0..p).map(|r| received[r][sl]).max().unwrap_or(1).max(1);
            for row in received.iter_mut() {
                row[sl] = period;
            }
        }
    }
    received
}

fn role_text(role: BufferRole) -> &'static str {
    match role {
        BufferRole::Input => "input",
        BufferRole::Output => "output",
        BufferRole::InOut => "inout",
        BufferRole::Scratch => "scratch",
    }
}

fn elem_text(elem: ElemClass) -> &'static str {
    match elem {
        ElemClass::Data => "data",
        ElemClass::Wire => "wire",
        ElemClass::Acc => "acc",
    }
}

fn extent_text(e: &Extent) -> String {
    match e {
        Extent::Split { total } => format!("split {total}"),
        Extent::Uniform { chunk } => format!("each {chunk}"),
        Extent::Blocks { block, blocks } => format!("{blocks} blocks of {block}, each split"),
        Extent::Counts { matrix } => match matrix {
            CountsMatrix::Send => "counts[rank][j]".to_string(),
            CountsMatrix::Recv => "counts[j][rank]".to_string(),
        },
    }
}

pub(crate) fn dual_text(d: &DualDecl) -> String {
    match d {
        DualDecl::IdentityAssumingReplicated => "identity assuming replicated".to_string(),
        DualDecl::Schedule { name, params } if params.is_empty() => name.clone(),
        DualDecl::Schedule { name, params } => {
            let ps: Vec<String> = params.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("{name}({})", ps.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::back::plan::tests::tiny_program;

    #[test]
    fn dump_has_header_steps_and_strides() {
        let text = emit_ir(&tiny_program());
        assert!(
            text.starts_with("schedule tiny implements broadcast\n"),
            "{text}"
        );
        assert!(text.contains("params [root=0]"), "{text}");
        assert!(
            text.contains("b0 x: inout data, 1 chunks, split n"),
            "{text}"
        );
        // Rank 1 receives one add per launch, rank 0 none.
        assert!(
            text.contains("s0 ready (add) stride per rank [0, 1]"),
            "{text}"
        );
        assert!(text.contains("    0: put x[0] -> x[0] @ 1"), "{text}");
        assert!(text.contains("    1: signal ready @ 1 += 1"), "{text}");
        assert!(text.contains("tiny_dual"), "{text}");
    }

    #[test]
    fn dump_is_deterministic() {
        assert_eq!(emit_ir(&tiny_program()), emit_ir(&tiny_program()));
    }
}
