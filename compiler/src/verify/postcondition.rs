//! Postcondition (E040x): execute the program symbolically ([`super::symbolic`]) and compare
//! every output role, block by block, with what the collective demands (the table in
//! `docs/language-spec.md`).
//!
//! - E0401: an output block holds the wrong combination of inputs (missing, extra or repeated
//!   contributions);
//! - E0402: an output block holds an unspecified value (never written, or computed from
//!   unspecified data);
//! - E0403: a role's chunking does not align with the collective's blocks;
//! - E0404: the program's buffers or params do not match the collective's signature.

use super::symbolic::{execute, Atom, Lin, OpLabel, Outcome, Val};
use super::{step_error, step_text};
use crate::diag::Diagnostic;
use crate::ir::graph::HappensBefore;
use crate::ir::Program;
use symsched_plan::{BufferRole, CollectiveKind, Rank};

/// Role access per collective, in signature order.
pub(super) fn role_access(kind: CollectiveKind) -> &'static [BufferRole] {
    use BufferRole::*;
    match kind {
        CollectiveKind::Allgather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::Alltoall
        | CollectiveKind::Alltoallv => &[Input, Output],
        CollectiveKind::Allreduce
        | CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::Sendrecv => &[InOut],
        CollectiveKind::AllgatherMatmul => &[Input, Input, Output, Output],
        CollectiveKind::MatmulReduceScatter => &[Input, Input, Output],
    }
}

/// Roles used only as the right operand of a matmul (not linear inputs).
pub(super) fn operand_roles(kind: CollectiveKind) -> &'static [usize] {
    match kind {
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter => &[1],
        _ => &[],
    }
}

/// Number of blocks of each role (P for the roles the table splits into per-rank blocks).
pub(super) fn role_blocks(kind: CollectiveKind, role: usize, p: u32) -> u32 {
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
        let k = prog.buffers[src].chunks;
        let range = if role_blocks(kind, src, p) == 1 {
            0..k
        } else {
            block..block + 1
        };
        range
            .map(|c| match Val::unit((q, src as u32, c)) {
                Val::Lin(l, _) => std::rc::Rc::unwrap_or_clone(l),
                _ => unreachable!("unit is linear"),
            })
            .collect()
    };
    let sum = |parts: Vec<Vec<Lin>>| -> Vec<Lin> {
        let mut out = parts[0].clone();
        for part in &parts[1..] {
            for (o, x) in out.iter_mut().zip(part) {
                for (t, m) in x {
                    *o.entry(t.clone()).or_insert(0) += m;
                }
            }
        }
        out
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
                l.into_iter()
                    .map(|(mut t, m)| {
                        t.ops.push(label.clone());
                        (t, m)
                    })
                    .collect()
            })
            .collect()
    };
    let all = |f: &dyn Fn(Rank) -> Vec<Lin>| sum((0..p).map(f).collect());
    let blocks = role_blocks(kind, role, p);
    Ok(match (kind, role) {
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

/// Whether output role `role` on rank `r` is specified for differentiation purposes (sendrecv:
/// only the destination's buffer is an output).
pub(super) fn is_output_role(kind: CollectiveKind, role: usize) -> bool {
    matches!(
        role_access(kind).get(role),
        Some(BufferRole::Output | BufferRole::InOut)
    )
}

/// Signature and chunking checks (E0403, E0404).
pub(super) fn shape_errors(prog: &Program) -> Vec<Diagnostic> {
    let kind = prog.collective;
    let access = role_access(kind);
    let mut out = Vec::new();
    for (i, want) in access.iter().enumerate() {
        match prog.buffers.get(i) {
            Some(b) if b.role == *want => {
                let blocks = role_blocks(kind, i, prog.group_size);
                if blocks > 1 && b.chunks != blocks {
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
                        .with_help(format!("declare it with {blocks} chunks (one per block)")),
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
    if role_blocks(prog.collective, role, prog.group_size) == 1 {
        0..k
    } else {
        j..j + 1
    }
}

/// The postcondition: refusals (E040x) and, when there are none, W0404 warnings for outputs
/// not folded in ascending origin-rank order.
pub(super) fn check(prog: &Program, hb: &HappensBefore) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
    let shape = shape_errors(prog);
    if !shape.is_empty() {
        return (shape, Vec::new());
    }
    let run = execute(prog, hb);
    let errors = contents(prog, &run);
    if !errors.is_empty() {
        return (errors, Vec::new());
    }
    (errors, fold_order(prog, &run))
}

/// W0404, one per output role: the first (rank, block) whose value is not the sequential
/// rank-order fold of its contributions.
fn fold_order(prog: &Program, run: &Outcome) -> Vec<Diagnostic> {
    let kind = prog.collective;
    let mut out = Vec::new();
    for role in (0..role_access(kind).len()).filter(|&i| is_output_role(kind, i)) {
        let blocks = role_blocks(kind, role, prog.group_size);
        let mut first: Option<(Rank, u32)> = None;
        let mut more = 0usize;
        for r in 0..prog.group_size {
            // Blocks the collective leaves unspecified (reduce's non-roots) may hold anything.
            let Ok(specified) = specified_blocks(prog, role, r) else {
                continue;
            };
            for (j, _) in (0..blocks).zip(specified).filter(|(_, s)| *s) {
                let ordered = block_chunks(prog, role, j)
                    .all(|c| run.state[r as usize][role][c as usize].in_rank_order());
                if !ordered {
                    if first.is_none() {
                        first = Some((r, j));
                    } else {
                        more += 1;
                    }
                }
            }
        }
        let Some((r, j)) = first else { continue };
        let name = &prog.buffers[role].name;
        let place = if blocks == 1 {
            format!("rank {r} `{name}`")
        } else {
            format!("rank {r} `{name}` block {j}")
        };
        let what = format!(
            "[postcondition] {place} holds the right contributions, but not combined as the sequential fold in ascending origin-rank order, so it may differ in the last bits from the rank-order reference"
        );
        let writer = run
            .writer
            .get(&(r, role as u32, block_chunks(prog, role, j).start))
            .copied();
        let mut d = match writer {
            Some(w) => step_error(
                prog,
                "W0404",
                w,
                format!("{what} (last written by {})", step_text(prog, w)),
                "last write of this output",
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
        if more > 0 {
            d.notes.push(format!(
                "{more} more output block(s) of `{name}` fold out of rank order"
            ));
        }
        out.push(d.with_help(
            "fold every contribution in one chain in rank order 0..P-1 (see W0404 in docs/verifier.md); a hierarchical fold is expected to warn",
        ));
    }
    out
}

/// E040x: every specified output block holds exactly the contributions the collective demands.
fn contents(prog: &Program, run: &Outcome) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let kind = prog.collective;
    for role in (0..role_access(kind).len()).filter(|&i| is_output_role(kind, i)) {
        // These postconditions do not depend on the rank: compute them once.
        let shared = matches!(
            kind,
            CollectiveKind::Allreduce | CollectiveKind::Allgather | CollectiveKind::Broadcast
        ) || (kind == CollectiveKind::AllgatherMatmul && role == 2);
        let mut cached: Option<Vec<Expected>> = None;
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
                let found: Vec<Option<std::rc::Rc<Lin>>> = chunks
                    .clone()
                    .flat_map(|c| run.state[r as usize][role][c as usize].flatten())
                    .collect();
                let first_chunk = chunks.start;
                let writer = run.writer.get(&(r, role as u32, first_chunk)).copied();
                if let Some(d) = compare(prog, role, r, j as u32, want, &found, writer) {
                    out.push(d);
                    break;
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

fn compare(
    prog: &Program,
    role: usize,
    r: Rank,
    block: u32,
    want: &[Lin],
    found: &[Option<std::rc::Rc<Lin>>],
    writer: Option<crate::ir::StepRef>,
) -> Option<Diagnostic> {
    let name = &prog.buffers[role].name;
    let blocks = role_blocks(prog.collective, role, prog.group_size);
    let place = if blocks == 1 {
        format!("rank {r} `{name}`")
    } else {
        format!("rank {r} `{name}` block {block}")
    };
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
        .with_note(format!(
            "{} requires: {}",
            prog.collective.name(),
            pieces_text(prog, want)
        ))
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
    for (i, (w, f)) in want.iter().zip(found).enumerate() {
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
        let mut terms: Vec<_> = w.keys().chain(f.keys()).collect();
        terms.sort();
        terms.dedup();
        for t in terms {
            let (a, b) = (
                w.get(t).copied().unwrap_or(0),
                f.get(t).copied().unwrap_or(0),
            );
            if a != b {
                return Some(diag(
                    "E0401",
                    format!(
                        "{at}holds {{{}}} {}, expected {}",
                        term_text(prog, &t.atom, &t.ops),
                        times(b),
                        times(a)
                    ),
                ));
            }
        }
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
        check(p, g.happens_before().expect("acyclic")).0
    }

    fn warned(p: &Program) -> Vec<Diagnostic> {
        let g = graph::build(p);
        let (errors, warnings) = check(p, g.happens_before().expect("acyclic"));
        assert!(errors.is_empty(), "{errors:?}");
        warnings
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
        assert_eq!(
            w[0].notes,
            vec!["1 more output block(s) of `x` fold out of rank order"]
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
