//! Replica consistency (E0406): the collectives whose output every rank holds a copy of —
//! allreduce, allgather, broadcast (and allgather_matmul's gathered `g`) — must leave those
//! copies bit-identical on every rank. Data-parallel training relies on it: replicas that differ
//! in their last bits drift apart step after step without any error.
//!
//! The symbolic execution ([`super::symbolic`]) gives every chunk the expression that computed
//! it, hash-consed, so two copies are the same node exactly when they were computed by the same
//! operations in the same order with the same roundings. A copy that skipped a conversion the
//! others went through (an owner keeping its full-precision chunk while every peer holds the
//! wire-rounded one), or folded in another order, is a different node. The rule asks every
//! copy of every chunk to be the same node; when they differ, it names the copy held by the
//! fewest ranks.

use super::postcondition::{block_chunks, fold_text};
use super::symbolic::{NodeId, Outcome};
use super::{step_error, step_text, Findings};
use crate::diag::Diagnostic;
use crate::ir::Program;
use std::collections::BTreeMap;
use symsched_plan::{CollectiveKind, Rank};

/// Roles whose copies must agree on every rank.
fn replicated_roles(kind: CollectiveKind) -> &'static [usize] {
    match kind {
        CollectiveKind::Allreduce | CollectiveKind::Broadcast => &[0],
        CollectiveKind::Allgather => &[1],
        CollectiveKind::AllgatherMatmul => &[2],
        _ => &[],
    }
}

/// Every output chunk held by several ranks that must agree, with those ranks: the table's
/// replicated roles on all ranks; for a declared collective, each block the map specifies
/// identically (the same sources, copied or reduced) on several ranks.
fn replica_sets(prog: &Program) -> Vec<(usize, u32, Vec<Rank>)> {
    let mut out = Vec::new();
    let Some(d) = &prog.declared else {
        for &role in replicated_roles(prog.collective) {
            if let Some(b) = prog.buffers.get(role) {
                for c in 0..b.chunks {
                    out.push((role, c, (0..prog.group_size).collect()));
                }
            }
        }
        return out;
    };
    // (role, block, reduce, sources) → ranks, in rank order.
    let mut same: BTreeMap<(u32, u32, bool, &[symsched_plan::BlockRef]), Vec<Rank>> =
        BTreeMap::new();
    for b in &d.post {
        same.entry((b.at.role, b.at.block, b.reduce, &b.sources))
            .or_default()
            .push(b.at.rank);
    }
    for ((role, block, _, _), ranks) in same {
        if ranks.len() > 1 {
            for c in block_chunks(prog, role as usize, block) {
                out.push((role as usize, c, ranks.clone()));
            }
        }
    }
    out
}

pub(super) fn check(prog: &Program, run: &Outcome) -> Vec<Diagnostic> {
    let mut out = Findings::new("chunk(s) whose copies differ");
    for (role, c, ranks) in replica_sets(prog) {
        let Some(b) = prog.buffers.get(role) else {
            continue;
        };
        // Ranks per distinct value of this chunk.
        let mut holders: BTreeMap<NodeId, Vec<Rank>> = BTreeMap::new();
        for &r in &ranks {
            holders
                .entry(run.value(r, role as u32, c))
                .or_default()
                .push(r);
        }
        if holders.len() <= 1 {
            continue;
        }
        if out.full() {
            out.skip();
            continue;
        }
        // The most common value is taken as the intended one; the odd copy is reported.
        let mut groups: Vec<(NodeId, Vec<Rank>)> = holders.into_iter().collect();
        groups.sort_by_key(|(_, rs)| std::cmp::Reverse(rs.len()));
        let (common, common_ranks) = &groups[0];
        let (odd, odd_ranks) = &groups[groups.len() - 1];
        let (r, q) = (odd_ranks[0], common_ranks[0]);
        let loc = (r, role as u32, c);
        let name = format!("{}[{c}]", b.name);
        let ranks_text = |rs: &[Rank]| {
            if rs.len() == 1 {
                format!("rank {}", rs[0])
            } else {
                let v: Vec<String> = rs.iter().map(|x| x.to_string()).collect();
                format!("ranks {}", v.join(", "))
            }
        };
        let msg = format!(
                "[replicas] the copies of `{name}` are not bit-identical on every rank: {} hold{} {}, {} hold{} {}",
                ranks_text(odd_ranks),
                if odd_ranks.len() == 1 { "s" } else { "" },
                fold_text(prog, run, *odd),
                ranks_text(common_ranks),
                if common_ranks.len() == 1 { "s" } else { "" },
                fold_text(prog, run, *common),
            );
        let help = "every rank must end with the same value computed the same way: apply the same conversions (e.g. convert the owner's chunk back from the wire too) and fold in the same order";
        // A copy nobody wrote is the rank's own input: label the others' write instead.
        let (r, q, loc) = match run.writer(loc) {
            None if run.writer((q, role as u32, c)).is_some() => (q, r, (q, role as u32, c)),
            _ => (r, q, loc),
        };
        let d = match run.writer(loc) {
            Some(w) => {
                let mut d = step_error(
                    prog,
                    "E0406",
                    w,
                    format!(
                        "{msg} (rank {r}'s copy last written by {})",
                        step_text(prog, w)
                    ),
                    format!("rank {r}'s copy of `{name}` differs from rank {q}'s"),
                );
                if let Some(wq) = run.writer((q, role as u32, c)) {
                    d = d.with_label(prog.step(wq).span, format!("rank {q}'s copy"));
                }
                d
            }
            None => Diagnostic::error("E0406", format!("{msg} (rank {r}'s copy is never written)"))
                .with_label(
                    prog.buffer_spans
                        .get(role)
                        .copied()
                        .unwrap_or(prog.header_span),
                    "this output",
                ),
        };
        out.push(
            d.with_note(
                "data-parallel replicas that differ in their last bits drift apart silently",
            )
            .with_help(help),
        );
    }
    out.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::graph;
    use crate::verify::symbolic::execute;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, ElemClass, SignalMode};

    /// Broadcast from rank 0 through a wire slot: every receiver converts the wire copy back;
    /// with `root_converts`, the root does too.
    fn wire_broadcast(root_converts: bool) -> Program {
        let mut b = Builder::collective(CollectiveKind::Broadcast, 3, &[("x", 1), ("w", 1)]);
        b.signals(&[("ready", SignalMode::Add)]);
        b.elem(1, ElemClass::Wire).param("root", 0);
        b.copy(0, reg(0, 0, 1), reg(1, 0, 1));
        for q in 1..3 {
            b.put_sig(0, reg(1, 0, 1), reg(1, 0, 1), q, 0, 1);
            b.wait(q, 0, Cmp::Ge, 1);
            b.copy(q, reg(1, 0, 1), reg(0, 0, 1));
        }
        if root_converts {
            b.copy(0, reg(1, 0, 1), reg(0, 0, 1));
        }
        b.build()
    }

    fn run(p: &Program) -> Vec<Diagnostic> {
        let g = graph::build(p);
        let out = execute(p, g.happens_before().expect("acyclic"));
        check(p, &out)
    }

    #[test]
    fn a_root_that_keeps_full_precision_is_refused() {
        let prog = wire_broadcast(false);
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0406");
        assert!(
            d[0].message.contains("rank 0 holds x@0"),
            "{}",
            d[0].message
        );
        assert!(
            d[0].message.contains("ranks 1, 2 hold data(wire(x@0))"),
            "{}",
            d[0].message
        );
        assert!(run(&wire_broadcast(true)).is_empty());
    }
}
