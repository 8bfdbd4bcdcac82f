//! Postcondition (E040x): execute the program symbolically ([`super::symbolic`]) and compare
//! every output role, block by block, with what the collective demands (the table in
//! `docs/language-spec.md`).
//!
//! - E0401: an output block holds the wrong combination of inputs (missing, extra or repeated
//!   contributions); the primary label is the put or get that carried an extra contribution
//!   (without one, the step that took it out of its input), the last write a secondary label;
//! - E0402: an output block holds an unspecified value (never written, or computed from
//!   unspecified data);
//! - E0403: a role's chunking does not align with the collective's blocks;
//! - E0404: the program's buffers or params do not match the collective's signature.
//!
//! And W0404 (a warning): an output holds the right contributions, not combined as the
//! sequential fold in rank order; it labels the reduce where the order is first left.

use super::symbolic::{count_of, execute, unit, Atom, Lin, Node, NodeId, OpLabel, Outcome, Term};
use super::{step_error, step_text};
use crate::diag::Diagnostic;
use crate::ir::graph::HappensBefore;
use crate::ir::{Program, StepRef};
use std::collections::HashSet;
use std::rc::Rc;
use symsched_plan::{BufferRole, CollectiveKind, Op, Rank};

/// Role access per collective, in signature order (a role declared `inout` is `InOut` in the
/// program instead of `Input`); a declared collective's come from its chunk map.
pub(super) fn role_access(prog: &Program) -> Vec<BufferRole> {
    use BufferRole::*;
    match prog.collective {
        CollectiveKind::Allgather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::Alltoall
        | CollectiveKind::Alltoallv => vec![Input, Output],
        CollectiveKind::Allreduce
        | CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::Sendrecv => vec![InOut],
        CollectiveKind::AllgatherMatmul => vec![Input, Input, Output, Output],
        CollectiveKind::MatmulReduceScatter => vec![Input, Input, Output],
        CollectiveKind::Declared { .. } => prog
            .declared
            .iter()
            .flat_map(|d| d.roles.iter().map(|r| r.access))
            .collect(),
    }
}

/// Roles used only as the right operand of a matmul (not linear inputs).
pub(super) fn operand_roles(kind: CollectiveKind) -> &'static [usize] {
    match kind {
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter => &[1],
        _ => &[],
    }
}

/// Number of blocks of each role (P for the roles the table splits into per-rank blocks; a
/// declared collective's from its declaration).
pub(super) fn role_blocks(prog: &Program, role: usize) -> u32 {
    let kind = prog.collective;
    let p = prog.group_size;
    if let CollectiveKind::Declared { .. } = kind {
        return prog
            .declared
            .as_ref()
            .and_then(|d| d.roles.get(role))
            .map_or(1, |r| r.blocks);
    }
    let per_rank = match kind {
        CollectiveKind::Allgather => role == 1,
        CollectiveKind::ReduceScatter => role == 0,
        CollectiveKind::Alltoall | CollectiveKind::Alltoallv => true,
        CollectiveKind::AllgatherMatmul => role >= 2,
        CollectiveKind::MatmulReduceScatter => role == 0,
        _ => false,
    };
    if per_rank {
        p
    } else {
        1
    }
}

/// Whether role `role` may have K chunks per block (a chunk factor), for the help of E0403:
/// every per-rank-block role but the matmul collectives' (whose blocks are matrices) and
/// alltoallv's (whose chunks are its counts). Instantiation gives exactly these roles a
/// per-block extent.
fn chunk_factor_allowed(prog: &Program, role: usize) -> bool {
    role_blocks(prog, role) > 1
        && !matches!(
            prog.collective,
            CollectiveKind::AllgatherMatmul
                | CollectiveKind::MatmulReduceScatter
                | CollectiveKind::Alltoallv
        )
}

/// Expected contents of one output block: `None` when the collective leaves it unspecified.
pub(super) type Expected = Option<Vec<Lin>>;

/// The spec's postcondition: for output role `role` on rank `r`, each block's expected pieces.
pub(super) fn expected(prog: &Program, role: usize, r: Rank) -> Result<Vec<Expected>, Diagnostic> {
    expected_with(prog, role, r, false)
}

/// Which blocks of output role `role` on rank `r` the postcondition specifies (the `Some`s of
/// [`expected`], with the same errors), without building their contents: the dual rule needs
/// only the shape, and the contents cost O(P²) per rank for the reducing collectives.
pub(super) fn specified_blocks(
    prog: &Program,
    role: usize,
    r: Rank,
) -> Result<Vec<bool>, Diagnostic> {
    Ok(expected_with(prog, role, r, true)?
        .iter()
        .map(Option::is_some)
        .collect())
}

/// Elementwise sum of blocks of linear combinations.
fn sum_blocks(parts: Vec<Vec<Lin>>) -> Vec<Lin> {
    let mut it = parts.into_iter();
    let Some(first) = it.next() else {
        return Vec::new();
    };
    let mut out = first;
    for part in it {
        for (o, x) in out.iter_mut().zip(part) {
            o.extend(x);
        }
    }
    for o in out.iter_mut() {
        o.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut merged: Lin = Vec::with_capacity(o.len());
        for (t, m) in o.drain(..) {
            match merged.last_mut() {
                Some(last) if last.0 == t => last.1 += m,
                _ => merged.push((t, m)),
            }
        }
        *o = merged;
    }
    out
}

/// [`expected`]; with `shape_only` every specified block is `Some` of an empty list.
fn expected_with(
    prog: &Program,
    role: usize,
    r: Rank,
    shape_only: bool,
) -> Result<Vec<Expected>, Diagnostic> {
    let kind = prog.collective;
    let p = prog.group_size;
    let param = |name: &str| -> Result<Rank, Diagnostic> {
        prog.params
            .get(name)
            .and_then(|v| u32::try_from(*v).ok())
            .filter(|v| *v < p)
            .ok_or_else(|| {
                Diagnostic::error(
                    "E0404",
                    format!(
                        "[postcondition] {} needs param `{name}` in 0..{p}",
                        kind.name()
                    ),
                )
                .with_label(prog.header_span, "in this schedule")
            })
    };
    let units = |q: Rank, src: usize, block: u32| -> Vec<Lin> {
        if shape_only {
            return Vec::new();
        }
        block_chunks(prog, src, block)
            .map(|c| unit((q, src as u32, c)))
            .collect()
    };
    let times = |lins: Vec<Lin>, q: Rank| -> Vec<Lin> {
        let b = &prog.buffers[1];
        let label = OpLabel::RightMul {
            rank: q,
            buffer: 1,
            first: 0,
            count: b.chunks,
            transposed: false,
        };
        lins.into_iter()
            .map(|l| {
                let mut v: Lin = l
                    .into_iter()
                    .map(|(mut t, m)| {
                        t.ops.push(label.clone());
                        (t, m)
                    })
                    .collect();
                v.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                v
            })
            .collect()
    };
    let all = |f: &dyn Fn(Rank) -> Vec<Lin>| sum_blocks((0..p).map(f).collect());
    let blocks = role_blocks(prog, role);
    Ok(match (kind, role) {
        (CollectiveKind::Declared { .. }, _) => {
            let mut v: Vec<Expected> = vec![None; blocks as usize];
            if let Some(d) = &prog.declared {
                for b in d.post_of(role as u32, r) {
                    let parts = b
                        .sources
                        .iter()
                        .map(|s| units(s.rank, s.role as usize, s.block))
                        .collect();
                    if let Some(slot) = v.get_mut(b.at.block as usize) {
                        *slot = Some(sum_blocks(parts));
                    }
                }
            }
            v
        }
        (CollectiveKind::Allgather, 1) => (0..p).map(|j| Some(units(j, 0, 0))).collect(),
        (CollectiveKind::ReduceScatter, 1) => vec![Some(all(&|j| units(j, 0, r)))],
        (CollectiveKind::Allreduce, 0) => vec![Some(all(&|j| units(j, 0, 0)))],
        (CollectiveKind::Alltoall | CollectiveKind::Alltoallv, 1) => {
            (0..p).map(|j| Some(units(j, 0, r))).collect()
        }
        (CollectiveKind::Broadcast, 0) => vec![Some(units(param("root")?, 0, 0))],
        (CollectiveKind::Reduce, 0) => {
            if r == param("root")? {
                vec![Some(all(&|j| units(j, 0, 0)))]
            } else {
                vec![None]
            }
        }
        (CollectiveKind::Sendrecv, 0) => {
            let (src, dst) = (param("src")?, param("dst")?);
            vec![Some(units(if r == dst { src } else { r }, 0, 0))]
        }
        (CollectiveKind::AllgatherMatmul, 2) => (0..p).map(|j| Some(units(j, 0, 0))).collect(),
        (CollectiveKind::AllgatherMatmul, 3) => {
            (0..p).map(|j| Some(times(units(j, 0, 0), r))).collect()
        }
        (CollectiveKind::MatmulReduceScatter, 2) => {
            vec![Some(all(&|j| times(units(j, 0, r), j)))]
        }
        _ => vec![None; blocks as usize],
    })
}

/// Whether role `role` is an output of the collective (written, its final contents specified).
pub(super) fn is_output_role(prog: &Program, role: usize) -> bool {
    matches!(
        role_access(prog).get(role),
        Some(BufferRole::Output | BufferRole::InOut)
    )
}

/// Signature and chunking checks (E0403, E0404).
pub(super) fn shape_errors(prog: &Program) -> Vec<Diagnostic> {
    let kind = prog.collective;
    let access = role_access(prog);
    let mut out = Vec::new();
    for (i, want) in access.iter().enumerate() {
        let matches =
            |b: BufferRole| b == *want || (*want == BufferRole::Input && b == BufferRole::InOut);
        match prog.buffers.get(i) {
            Some(b) if matches(b.role) => {
                let blocks = role_blocks(prog, i);
                // K chunks per block (a chunk factor) align when the instantiation gave the
                // role the per-block split of the remainder rule.
                let chunk_factor = matches!(&b.extent, symsched_plan::Extent::Blocks { blocks: j, .. } if *j == blocks)
                    && b.chunks.is_multiple_of(blocks);
                if blocks > 1 && b.chunks != blocks && !chunk_factor {
                    let span = prog
                        .buffer_spans
                        .get(i)
                        .copied()
                        .unwrap_or(prog.header_span);
                    out.push(
                        Diagnostic::error(
                            "E0403",
                            format!(
                                "[postcondition] role `{}` of {} has {} chunk(s), which do not align with its {blocks} per-rank blocks for every message size",
                                b.name,
                                kind.name(),
                                b.chunks
                            ),
                        )
                        .with_label(span, "declared here")
                        .with_help(if chunk_factor_allowed(prog, i) {
                            format!("declare it with a multiple of {blocks} chunks: `[P]` (one per block) or `[P*K]` (K per block, a chunk factor)")
                        } else {
                            format!("declare it with {blocks} chunks (one per block); this role takes no chunk factor")
                        }),
                    );
                }
            }
            _ => out.push(
                Diagnostic::error(
                    "E0404",
                    format!(
                        "[postcondition] buffer #{i} should be a {want:?} role of {}",
                        kind.name()
                    ),
                )
                .with_label(prog.header_span, "in this schedule"),
            ),
        }
    }
    out
}

/// The chunks of block `j` of role `role`.
pub(super) fn block_chunks(prog: &Program, role: usize, j: u32) -> std::ops::Range<u32> {
    let k = prog.buffers[role].chunks;
    let blocks = role_blocks(prog, role);
    if blocks == 1 {
        0..k
    } else {
        let per = (k / blocks).max(1);
        j * per..(j + 1) * per
    }
}

/// What the postcondition rule found.
pub(super) struct Proved {
    /// E040x refusals.
    pub errors: Vec<Diagnostic>,
    /// W0404 warnings (only when there are no errors).
    pub warnings: Vec<Diagnostic>,
    /// The symbolic execution, for the rules that read its values.
    pub run: Option<Outcome>,
}

/// The postcondition: refusals (E040x) and, when there are none, W0404 warnings for outputs
/// not folded in ascending origin-rank order.
pub(super) fn check(prog: &Program, hb: &HappensBefore) -> Proved {
    let shape = shape_errors(prog);
    if !shape.is_empty() {
        return Proved {
            errors: shape,
            warnings: Vec::new(),
            run: None,
        };
    }
    let mut run = execute(prog, hb);
    let errors = contents(prog, &mut run);
    let warnings = if errors.is_empty() {
        fold_order(prog, &mut run)
    } else {
        Vec::new()
    };
    Proved {
        errors,
        warnings,
        run: Some(run),
    }
}

/// Every (rank, role, chunk) an output role's postcondition specifies, in order.
pub(super) fn specified_outputs(prog: &Program) -> Vec<(Rank, usize, u32)> {
    let mut out = Vec::new();
    for role in (0..role_access(prog).len()).filter(|&i| is_output_role(prog, i)) {
        for r in 0..prog.group_size {
            let Ok(specified) = specified_blocks(prog, role, r) else {
                continue;
            };
            for (j, s) in specified.into_iter().enumerate() {
                if s {
                    for c in block_chunks(prog, role, j as u32) {
                        out.push((r, role, c));
                    }
                }
            }
        }
    }
    out
}

/// W0404, one per output role: the first (rank, block) whose value is not the sequential
/// rank-order fold of its contributions, labelled at the step where that order is first left.
fn fold_order(prog: &Program, run: &mut Outcome) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for role in (0..role_access(prog).len()).filter(|&i| is_output_role(prog, i)) {
        let blocks = role_blocks(prog, role);
        let mut first: Option<(Rank, u32, NodeId)> = None;
        let (mut bad_chunks, mut all_chunks) = (0usize, 0usize);
        let mut distinct: HashSet<NodeId> = HashSet::new();
        for r in 0..prog.group_size {
            // Blocks the collective leaves unspecified (reduce's non-roots) may hold anything.
            let Ok(specified) = specified_blocks(prog, role, r) else {
                continue;
            };
            for (j, _) in (0..blocks).zip(specified).filter(|(_, s)| *s) {
                for c in block_chunks(prog, role, j) {
                    all_chunks += 1;
                    let v = run.value(r, role as u32, c);
                    let bad = run
                        .exprs
                        .pieces(v)
                        .into_iter()
                        .find_map(|piece| run.exprs.first_out_of_order(piece));
                    if let Some(node) = bad {
                        bad_chunks += 1;
                        distinct.insert(v);
                        first.get_or_insert((r, j, node));
                    }
                }
            }
        }
        let Some((r, j, node)) = first else { continue };
        let name = &prog.buffers[role].name;
        let place = if blocks == 1 {
            format!("rank {r} `{name}`")
        } else {
            format!("rank {r} `{name}` block {j}")
        };
        let how = fold_text(prog, run, node);
        let what = format!(
            "[postcondition] {place} holds the right contributions, but not combined as the sequential fold in ascending origin-rank order, so it may differ in the last bits from a rank-order fold: it is {how}"
        );
        let mut d = match run.exprs.creator(node) {
            Some(w) => step_error(
                prog,
                "W0404",
                w,
                format!(
                    "{what} (folded out of rank order by {})",
                    step_text(prog, w)
                ),
                "folds out of rank order here",
            ),
            None => Diagnostic::warning("W0404", what).with_label(
                prog.buffer_spans
                    .get(role)
                    .copied()
                    .unwrap_or(prog.header_span),
                "this output",
            ),
        };
        d.severity = crate::diag::Severity::Warning;
        d.notes.push(format!(
            "{bad_chunks} of the {all_chunks} output chunk(s) of `{name}` on all ranks fold out of rank order ({} distinct value(s))",
            distinct.len()
        ));
        d.notes.push(
            "`symsched run --check` compares against the order the verifier proved (the plan's fold table), so this is no failure there".into(),
        );
        out.push(d.with_help(
            "fold every contribution in one chain in rank order 0..P-1 (see W0404 in docs/verifier.md); a ring or hierarchical fold is expected to warn",
        ));
    }
    out
}

/// A fold as text, e.g. `((x@1 ⊕ x@2) ⊕ x@3) ⊕ x@0`; long folds are shortened.
pub(super) fn fold_text(prog: &Program, run: &Outcome, node: NodeId) -> String {
    fn go(prog: &Program, run: &Outcome, n: NodeId, top: bool, budget: &mut usize) -> String {
        if *budget == 0 {
            return "…".into();
        }
        *budget -= 1;
        let list = |ops: &[NodeId], sep: &str, budget: &mut usize| -> String {
            ops.iter()
                .map(|&o| go(prog, run, o, false, budget))
                .collect::<Vec<_>>()
                .join(sep)
        };
        match run.exprs.node(n) {
            Node::Unspecified => "?".into(),
            Node::Atom((q, b, c)) => {
                let buf = &prog.buffers[*b as usize];
                if buf.chunks == 1 {
                    format!("{}@{q}", buf.name)
                } else {
                    format!("{}[{c}]@{q}", buf.name)
                }
            }
            Node::Convert { class, of } => {
                format!(
                    "{}({})",
                    class_name(*class),
                    go(prog, run, *of, true, budget)
                )
            }
            Node::MatMul { of, .. } => {
                format!("matmul({}, …)", go(prog, run, *of, true, budget))
            }
            Node::Fold { ops, .. } => {
                let s = list(ops, " ⊕ ", budget);
                if top {
                    s
                } else {
                    format!("({s})")
                }
            }
            Node::Library { ops } => format!("library({})", list(ops, ", ", budget)),
            Node::Concat(parts) => format!("[{}]", list(parts, " ++ ", budget)),
        }
    }
    let mut budget = 16usize.max(prog.group_size as usize * 3);
    go(prog, run, node, true, &mut budget)
}

fn class_name(c: symsched_plan::ElemClass) -> &'static str {
    match c {
        symsched_plan::ElemClass::Data => "data",
        symsched_plan::ElemClass::Wire => "wire",
        symsched_plan::ElemClass::Acc => "acc",
    }
}

/// E040x: every specified output block holds exactly the contributions the collective demands.
fn contents(prog: &Program, run: &mut Outcome) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let kind = prog.collective;
    for role in (0..role_access(prog).len()).filter(|&i| is_output_role(prog, i)) {
        // These postconditions do not depend on the rank: compute them once, and compare each
        // distinct value once (replicas of one value are one node).
        let shared = matches!(
            kind,
            CollectiveKind::Allreduce | CollectiveKind::Allgather | CollectiveKind::Broadcast
        ) || (kind == CollectiveKind::AllgatherMatmul && role == 2);
        let mut cached: Option<Vec<Expected>> = None;
        let mut proved: HashSet<(u32, Vec<NodeId>)> = HashSet::new();
        for r in 0..prog.group_size {
            let fresh;
            let exp = match &cached {
                Some(e) => e,
                None => {
                    fresh = match expected(prog, role, r) {
                        Ok(e) => e,
                        Err(d) => return vec![d],
                    };
                    if shared {
                        cached = Some(fresh);
                        cached.as_ref().expect("just set")
                    } else {
                        &fresh
                    }
                }
            };
            for (j, want) in exp.iter().enumerate() {
                let Some(want) = want else { continue };
                let chunks = block_chunks(prog, role, j as u32);
                let nodes: Vec<NodeId> = chunks
                    .clone()
                    .map(|c| run.value(r, role as u32, c))
                    .collect();
                if shared && proved.contains(&(j as u32, nodes.clone())) {
                    continue;
                }
                let pieces: Vec<NodeId> = nodes.iter().flat_map(|&v| run.exprs.pieces(v)).collect();
                let found: Vec<(NodeId, Option<Rc<Lin>>)> = pieces
                    .into_iter()
                    .map(|piece| (piece, run.exprs.lin(piece)))
                    .collect();
                let first_chunk = chunks.start;
                let at = (r, role as u32, first_chunk);
                match compare(prog, run, role, r, j as u32, want, &found, at) {
                    Some(d) => {
                        out.push(d);
                        break;
                    }
                    None if shared => {
                        proved.insert((j as u32, nodes));
                    }
                    None => {}
                }
            }
        }
    }
    out
}

/// Pieces shown in a "requires" note; a block of a million chunks would otherwise print a
/// million pieces per diagnostic.
const SHOWN_PIECES: usize = 4;

/// `a ++ b ++ …`, at most [`SHOWN_PIECES`] pieces, then how many more.
fn pieces_text(prog: &Program, want: &[Lin]) -> String {
    let mut text = want
        .iter()
        .take(SHOWN_PIECES)
        .map(|l| lin_text(prog, l))
        .collect::<Vec<_>>()
        .join(" ++ ");
    if want.len() > SHOWN_PIECES {
        text.push_str(&format!(
            " ++ … ({} more pieces)",
            want.len() - SHOWN_PIECES
        ));
    }
    text
}

/// The chain of steps that moved the value `node` (holding `atom`) into `loc`, last first:
/// from `loc`'s last writer back through the locations it read, as long as each still holds the
/// value the step consumed. The last entry is the step that took `atom` out of the location it
/// started in (an input role chunk), when the chain reaches it.
fn carriers(prog: &Program, run: &mut Outcome, loc: Atom, atom: Atom) -> Vec<StepRef> {
    let mut chain = Vec::new();
    let mut at = loc;
    let holds = |run: &mut Outcome, l: Atom| -> bool {
        let v = run.value(l.0, l.1, l.2);
        run.exprs.pieces(v).into_iter().any(|p| {
            run.exprs
                .lin(p)
                .is_some_and(|lin| lin.iter().any(|(t, _)| t.atom == atom))
        })
    };
    while let Some(w) = run.writer(at) {
        if chain.contains(&w) || chain.len() > 64 {
            break;
        }
        chain.push(w);
        let me = w.rank;
        let sources: Vec<Atom> = match &prog.step(w).op {
            Op::Put { src, .. } | Op::Copy { src, .. } | Op::Cast { src, .. } => (src.first
                ..src.first + src.count)
                .map(|c| (me, src.buffer, c))
                .collect(),
            Op::Get { src, peer, .. } => (src.first..src.first + src.count)
                .map(|c| (*peer, src.buffer, c))
                .collect(),
            Op::Reduce { srcs, .. } => srcs
                .iter()
                .flat_map(|s| (s.first..s.first + s.count).map(move |c| (me, s.buffer, c)))
                .collect(),
            _ => Vec::new(),
        };
        match sources.into_iter().find(|&l| holds(run, l)) {
            Some(next) => at = next,
            None => break,
        }
    }
    chain
}

#[allow(clippy::too_many_arguments)]
fn compare(
    prog: &Program,
    run: &mut Outcome,
    role: usize,
    r: Rank,
    block: u32,
    want: &[Lin],
    found: &[(NodeId, Option<Rc<Lin>>)],
    loc: Atom,
) -> Option<Diagnostic> {
    let name = &prog.buffers[role].name;
    let blocks = role_blocks(prog, role);
    let place = if blocks == 1 {
        format!("rank {r} `{name}`")
    } else {
        format!("rank {r} `{name}` block {block}")
    };
    let writer = run.writer(loc);
    let requires = format!(
        "{} requires: {}",
        prog.collective_name(),
        pieces_text(prog, want)
    );
    let diag = |code: &'static str, what: String| {
        let msg = match writer {
            Some(w) => format!(
                "[postcondition] {place} {what} (last written by {})",
                step_text(prog, w)
            ),
            None => format!("[postcondition] {place} {what} (never written)"),
        };
        match writer {
            Some(w) => step_error(prog, code, w, msg, "last write of this output"),
            None => Diagnostic::error(code, msg).with_label(
                prog.buffer_spans
                    .get(role)
                    .copied()
                    .unwrap_or(prog.header_span),
                "this output role",
            ),
        }
        .with_note(requires.clone())
    };
    if want.len() != found.len() {
        return Some(diag(
            "E0403",
            format!(
                "is made of {} chunk piece(s) but must hold {} (chunkings of the roles do not correspond)",
                found.len(),
                want.len()
            ),
        ));
    }
    for (i, (w, (_, f))) in want.iter().zip(found).enumerate() {
        let at = if want.len() > 1 {
            format!("piece {i} ")
        } else {
            String::new()
        };
        let Some(f) = f else {
            return Some(diag("E0402", format!("{at}holds an unspecified value")));
        };
        if w == f.as_ref() {
            continue;
        }
        let mut terms: Vec<&Term> = w
            .iter()
            .map(|(t, _)| t)
            .chain(f.iter().map(|(t, _)| t))
            .collect();
        terms.sort();
        terms.dedup();
        // (term, expected count, found count) of every term that differs.
        let wrong: Vec<(&Term, u32, u32)> = terms
            .into_iter()
            .map(|t| (t, count_of(w, t), count_of(f, t)))
            .filter(|(_, a, b)| a != b)
            .collect();
        let what = |(t, a, b): (&Term, u32, u32)| {
            format!(
                "holds {{{}}} {}, expected {}",
                term_text(prog, &t.atom, &t.ops),
                times(b),
                times(a)
            )
        };
        // A contribution that is there too often (or should not be there at all) was carried by
        // some step: name it, rather than a missing one, which no step points at.
        let Some(&extra) = wrong.iter().find(|(_, a, b)| b > a) else {
            let Some(&first) = wrong.first() else {
                continue;
            };
            return Some(diag("E0401", format!("{at}{}", what(first))));
        };
        let t = extra.0;
        let chain = carriers(prog, run, loc, t.atom);
        // The transfer nearest the output that moved it (the put or get that carried the wrong
        // chunk); without one, the step that took it out of its input.
        let culprit = chain
            .iter()
            .copied()
            .find(|s| matches!(prog.step(*s).op, Op::Put { .. } | Op::Get { .. }))
            .or_else(|| chain.last().copied());
        let Some(culprit) = culprit else {
            return Some(diag("E0401", format!("{at}{}", what(extra))));
        };
        let atom = term_text(prog, &t.atom, &[]);
        let (verb, label) = match prog.step(culprit).op {
            Op::Put { .. } | Op::Get { .. } => ("carries it there", format!("carries {atom} here")),
            Op::Reduce { .. } => ("folds it in", format!("folds {atom} in here")),
            _ => ("copies it there", format!("copies {atom} here")),
        };
        let mut d = step_error(
            prog,
            "E0401",
            culprit,
            format!(
                "[postcondition] {place} {at}{}: {} {verb}",
                what(extra),
                step_text(prog, culprit)
            ),
            label,
        );
        match writer {
            Some(wr) if wr != culprit => {
                d = d.with_label(prog.step(wr).span, "last write of this output");
                // The steps between them, in the order they ran.
                if let Some(k) = chain.iter().position(|s| *s == culprit) {
                    if k > 1 {
                        let via: Vec<String> = chain[1..k]
                            .iter()
                            .rev()
                            .map(|s| step_text(prog, *s))
                            .collect();
                        d = d.with_note(format!("then moved by {}", via.join(", then ")));
                    }
                }
            }
            _ => {}
        }
        let missing: Vec<String> = wrong
            .iter()
            .filter(|(_, a, b)| a > b)
            .take(SHOWN_PIECES)
            .map(|&(t, a, b)| {
                format!(
                    "{{{}}} {} (expected {})",
                    term_text(prog, &t.atom, &t.ops),
                    times(b),
                    times(a)
                )
            })
            .collect();
        if !missing.is_empty() {
            d = d.with_note(format!("it also holds {}", missing.join(", ")));
        }
        return Some(d.with_note(requires.clone()));
    }
    None
}

fn times(n: u32) -> String {
    match n {
        0 => "never".into(),
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

pub(super) fn term_text(prog: &Program, atom: &Atom, ops: &[OpLabel]) -> String {
    let (r, b, c) = *atom;
    let buf = |b: u32| {
        prog.buffers
            .get(b as usize)
            .map(|x| x.name.as_str())
            .unwrap_or("?")
    };
    let mut s = format!("r{r}:{}[{c}]", buf(b));
    for op in ops {
        s = match op {
            OpLabel::RightMul {
                rank,
                buffer,
                first,
                count,
                transposed,
            } => {
                let t = if *transposed { "ᵀ" } else { "" };
                let whole = *first == 0
                    && prog.buffers.get(*buffer as usize).map(|x| x.chunks) == Some(*count);
                if whole {
                    format!("matmul({s}, {}@{rank}{t})", buf(*buffer))
                } else {
                    format!(
                        "matmul({s}, {}[{first}..{}]@{rank}{t})",
                        buf(*buffer),
                        first + count
                    )
                }
            }
            OpLabel::Opaque(x) => format!("matmul({s}, {x})"),
        };
    }
    s
}

pub(super) fn lin_text(prog: &Program, l: &Lin) -> String {
    let parts: Vec<String> = l
        .iter()
        .map(|(t, m)| {
            let s = term_text(prog, &t.atom, &t.ops);
            if *m == 1 {
                s
            } else {
                format!("{m}×{s}")
            }
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::graph;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, SignalMode};

    fn run(p: &Program) -> Vec<Diagnostic> {
        let g = graph::build(p);
        check(p, g.happens_before().expect("acyclic")).errors
    }

    fn warned(p: &Program) -> Vec<Diagnostic> {
        let g = graph::build(p);
        let proved = check(p, g.happens_before().expect("acyclic"));
        assert!(proved.errors.is_empty(), "{:?}", proved.errors);
        proved.warnings
    }

    /// One-shot allreduce folding `land` in the order `order` gives for each rank.
    fn one_shot_folding(p: u32, order: impl Fn(Rank) -> Vec<u32>) -> Program {
        let mut b = Builder::collective(CollectiveKind::Allreduce, p, &[("x", 1), ("land", p)]);
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, 0, 1), reg(1, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            let srcs: Vec<_> = order(r).into_iter().map(|j| reg(1, j, 1)).collect();
            b.reduce(r, reg(0, 0, 1), &srcs);
        }
        b.build()
    }

    #[test]
    fn a_fold_out_of_rank_order_warns_once_per_output() {
        let w = warned(&one_shot_folding(3, |_| vec![0, 1, 2]));
        assert!(w.is_empty(), "{w:?}");
        // Rank 1 starts its fold at itself: right multiset, wrong order.
        let w = warned(&one_shot_folding(3, |r| {
            (0..3).map(|i| (r + i) % 3).collect::<Vec<_>>()
        }));
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].code, "W0404");
        assert_eq!(w[0].severity, crate::diag::Severity::Warning);
        assert!(w[0].message.contains("rank 1 `x`"), "{}", w[0].message);
        assert!(
            w[0].notes[0].starts_with("2 of the 3 output chunk(s) of `x` on all ranks fold out of rank order (2 distinct value(s))"),
            "{:?}",
            w[0].notes
        );
        // The label is the reduce that folds out of order, and the message shows its order.
        let prog = one_shot_folding(3, |r| (0..3).map(|i| (r + i) % 3).collect::<Vec<_>>());
        assert_eq!(w[0].span(), Some(prog.step(sr(1, 4)).span));
        assert!(
            w[0].message.contains("it is x@1 ⊕ x@2 ⊕ x@0"),
            "{}",
            w[0].message
        );
    }

    #[test]
    fn a_framework_reduction_is_not_a_rank_order_fold() {
        let mut b = Builder::collective(CollectiveKind::Allreduce, 2, &[("x", 1)]);
        for r in 0..2 {
            b.hostcoll(r, reg(0, 0, 1), &[0, 1]);
        }
        let w = warned(&b.build());
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].code, "W0404");
    }

    /// Push allgather: every rank puts `in` into `out[rank]` of every peer, then waits.
    fn allgather(p: u32, skip: Option<(u32, u32)>, twice: bool) -> Program {
        let mut b = Builder::collective(CollectiveKind::Allgather, p, &[("in", 1), ("out", p)]);
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                if skip == Some((r, j)) {
                    continue;
                }
                b.put_sig(r, reg(0, 0, 1), reg(1, r, 1), j, 0, 1);
            }
            if twice {
                b.reduce(r, reg(1, r, 1), &[reg(1, r, 1), reg(0, 0, 1)]);
            }
            b.wait(
                r,
                0,
                Cmp::Ge,
                p as u64 - u64::from(skip.is_some_and(|s| s.1 == r)),
            );
        }
        b.build()
    }

    #[test]
    fn a_wrong_chunk_is_blamed_on_the_put_that_carried_it() {
        // All-to-all through a landing scratch: each rank sends its peer its own block instead
        // of the peer's, and the peer copies what landed into `out`. The copy is the last write
        // of the wrong output block; the put carried the wrong chunk.
        let p = 2;
        let mut b = Builder::collective(
            CollectiveKind::Alltoall,
            p,
            &[("in", p), ("out", p), ("land", p)],
        );
        b.signals(&[("ready", SignalMode::Add)]);
        let mut puts = Vec::new();
        for r in 0..p {
            b.copy(r, reg(0, r, 1), reg(1, r, 1));
            puts.push(b.put_sig(r, reg(0, r, 1), reg(2, r, 1), 1 - r, 0, 1));
        }
        let mut copies = Vec::new();
        for r in 0..p {
            b.wait(r, 0, Cmp::Ge, 1);
            copies.push(b.copy(r, reg(2, 1 - r, 1), reg(1, 1 - r, 1)));
        }
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d[0].code, "E0401", "{d:?}");
        assert!(
            d[0].message
                .contains("rank 0 `out` block 1 holds {r1:in[1]} once, expected never"),
            "{}",
            d[0].message
        );
        assert_eq!(
            d[0].labels[0].0,
            prog.step(puts[1]).span,
            "{:?}",
            d[0].labels
        );
        assert_eq!(d[0].labels[0].1, "carries r1:in[1] here");
        assert_eq!(
            d[0].labels[1].0,
            prog.step(copies[0]).span,
            "{:?}",
            d[0].labels
        );
        assert_eq!(d[0].labels[1].1, "last write of this output");
        assert!(
            d[0].notes
                .iter()
                .any(|n| n == "it also holds {r1:in[0]} never (expected once)"),
            "{:?}",
            d[0].notes
        );
    }

    #[test]
    fn push_allgather_is_correct() {
        for p in [1, 2, 3, 5] {
            assert!(run(&allgather(p, None, false)).is_empty(), "P={p}");
        }
    }

    #[test]
    fn a_missing_put_leaves_a_block_unspecified() {
        let d = run(&allgather(3, Some((1, 2)), false));
        assert_eq!(d[0].code, "E0402", "{d:?}");
        assert!(
            d[0].message.contains("rank 2 `out` block 1"),
            "{}",
            d[0].message
        );
    }

    #[test]
    fn a_doubled_contribution_is_reported_with_counts() {
        let d = run(&allgather(2, None, true));
        assert_eq!(d[0].code, "E0401", "{d:?}");
        assert!(
            d[0].message
                .contains("holds {r0:in[0]} twice, expected once"),
            "{}",
            d[0].message
        );
    }

    #[test]
    fn one_shot_allreduce() {
        let p = 3;
        let mut b = Builder::collective(CollectiveKind::Allreduce, p, &[("x", 1), ("land", p)]);
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, 0, 1), reg(1, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            b.reduce(r, reg(0, 0, 1), &[reg(1, 0, p)]);
        }
        // `reduce(land[0..P])` into one chunk folds the range's chunks in order.
        assert!(run(&b.build()).is_empty());
        let mut b = Builder::collective(CollectiveKind::Allreduce, p, &[("x", 1), ("land", p)]);
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, 0, 1), reg(1, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            let srcs: Vec<_> = (0..p).map(|j| reg(1, j, 1)).collect();
            b.reduce(r, reg(0, 0, 1), &srcs);
        }
        assert!(run(&b.build()).is_empty());
    }

    #[test]
    fn hostcoll_allreduce_across_blocks() {
        // Ranks {0, 1} and {2, 3} each all-reduce over the framework: x holds a partial sum.
        let p = 4;
        let mut b = Builder::collective(CollectiveKind::Allreduce, p, &[("x", 1)]);
        for r in 0..p {
            b.hostcoll(r, reg(0, 0, 1), &[r - r % 2, r - r % 2 + 1]);
        }
        let d = run(&b.build());
        assert_eq!(d[0].code, "E0401", "{d:?}");
        let mut b = Builder::collective(CollectiveKind::Allreduce, p, &[("x", 1)]);
        for r in 0..p {
            b.hostcoll(r, reg(0, 0, 1), &[0, 1, 2, 3]);
        }
        assert!(run(&b.build()).is_empty());
    }

    #[test]
    fn hostcoll_allgather_fills_every_members_part() {
        let p = 3;
        let mut b = Builder::collective(CollectiveKind::Allgather, p, &[("in", 1), ("out", p)]);
        for r in 0..p {
            b.copy(r, reg(0, 0, 1), reg(1, r, 1));
            b.hostcoll_op(
                r,
                symsched_plan::HostCollOp::Allgather,
                reg(1, 0, p),
                &[0, 1, 2],
            );
        }
        assert!(run(&b.build()).is_empty());
    }

    #[test]
    fn misaligned_blocks() {
        let mut b = Builder::collective(CollectiveKind::Allgather, 2, &[("in", 1), ("out", 4)]);
        b.put(0, reg(0, 0, 1), reg(1, 0, 1), 0);
        let d = run(&b.build());
        assert_eq!(d[0].code, "E0403");
    }

    #[test]
    fn allgather_matmul_terms() {
        let p = 2;
        let mut b = Builder::collective(
            CollectiveKind::AllgatherMatmul,
            p,
            &[("a", 1), ("b", 1), ("g", p), ("c", p)],
        );
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, 0, 1), reg(2, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            for j in 0..p {
                b.matmul(r, reg(3, j, 1), reg(2, j, 1), reg(1, 0, 1));
            }
        }
        assert!(run(&b.build()).is_empty());
    }
}
