//! Duals (E044x): a declared backward schedule must compute the adjoint (transpose) of the
//! forward's linear map.
//!
//! Both programs are executed symbolically over unit inputs ([`super::symbolic`]); each gives a
//! sparse matrix, rows = specified output chunks `(rank, role, chunk)`, columns = linear input
//! chunks, entries = multiplicities per operator chain (matmul by an operand role). Roles are
//! mapped positionally: the backward's linear inputs are the gradients of the forward's outputs,
//! its outputs the gradients of the forward's linear inputs, and its matmul operand roles are
//! the forward's operands *transposed* (the caller passes `bᵀ`). Then `M_bwd = M_fwdᵀ` is
//! required entry by entry. Outputs the postconditions leave unspecified (non-root ranks of
//! reduce) are excluded on both sides.
//!
//! - E0441: the first differing entry;
//! - E0442: the role shapes do not correspond (role count, chunk counts, group size);
//! - E0443: `identity assuming replicated` declared for a collective other than allreduce;
//! - E0444: the dual cannot be checked (it fails to instantiate or to verify).

use super::postcondition::{
    is_output_role, lin_text, operand_roles, role_access, specified_blocks, term_text,
};
use super::symbolic::{execute, Lin, OpLabel, Outcome};
use crate::diag::{Diagnostic, Span};
use crate::ir::{graph, Program};
use std::collections::{BTreeMap, BTreeSet};
use symsched_plan::{BufferRole, CollectiveKind, Rank};

/// `(rank, role, chunk)` in the forward's coordinates.
type Coord = (Rank, usize, u32);
/// Operator chain → multiplicity.
type Entry = BTreeMap<Vec<OpLabel>, u32>;
/// One nonzero of a matrix: (key, operator chain, multiplicity); the key packs (row, col) as
/// [`CoordSet::key`] does, rows are forward inputs, columns forward outputs.
type Nonzero = (u64, Vec<OpLabel>, u32);

/// A sparse matrix as its nonzeros sorted by (row, col, chain), one per key. Allreduce has P³
/// of them: a flat sorted vector is an order of magnitude cheaper than nested maps.
fn matrix(mut nz: Vec<Nonzero>) -> Vec<Nonzero> {
    // Chains are almost always empty: sort by the packed key, then each (short) run by chain.
    nz.sort_unstable_by_key(|e| e.0);
    for run in nz.chunk_by_mut(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
        run.sort_unstable_by(|a, b| a.1.cmp(&b.1));
    }
    let mut out: Vec<Nonzero> = Vec::with_capacity(nz.len());
    for e in nz {
        match out.last_mut() {
            Some(last) if last.0 == e.0 && last.1 == e.1 => last.2 += e.2,
            _ => out.push(e),
        }
    }
    out
}

/// The entry of `m` (a [`matrix`]) at each key, in key order.
fn entries(m: &[Nonzero]) -> impl Iterator<Item = (u64, Entry)> + '_ {
    m.chunk_by(|a, b| a.0 == b.0).map(|run| {
        (
            run[0].0,
            run.iter().map(|(_, ops, n)| (ops.clone(), *n)).collect(),
        )
    })
}

/// A set of coordinates of one program, dense over (rank, role, chunk): the dual rule looks
/// up P³ terms.
struct CoordSet {
    /// First index of each role within a rank.
    offset: Vec<usize>,
    chunks: Vec<u32>,
    per_rank: usize,
    member: Vec<bool>,
}

impl CoordSet {
    fn new(prog: &Program, coords: &BTreeSet<Coord>) -> CoordSet {
        let chunks: Vec<u32> = prog.buffers.iter().map(|b| b.chunks).collect();
        let mut offset = Vec::with_capacity(chunks.len());
        let mut per_rank = 0usize;
        for &k in &chunks {
            offset.push(per_rank);
            per_rank += k as usize;
        }
        let mut set = CoordSet {
            offset,
            chunks,
            per_rank,
            member: vec![false; per_rank * prog.group_size as usize],
        };
        for &c in coords {
            if let Some(i) = set.index(c) {
                set.member[i] = true;
            }
        }
        set
    }

    fn index(&self, (r, role, c): Coord) -> Option<usize> {
        let k = *self.chunks.get(role)?;
        (c < k).then(|| r as usize * self.per_rank + self.offset[role] + c as usize)
    }

    fn contains(&self, c: Coord) -> bool {
        self.index(c)
            .and_then(|i| self.member.get(i).copied())
            .unwrap_or(false)
    }

    /// (row, col) packed into one integer ordered as the pair is (indices are lexicographic
    /// in (rank, role, chunk)); both must be in range.
    fn key(&self, row: Coord, col: Coord) -> u64 {
        let (i, j) = (self.index(row), self.index(col));
        let (i, j) = (i.expect("row in range"), j.expect("col in range"));
        i as u64 * self.member.len() as u64 + j as u64
    }

    fn coord(&self, i: usize) -> Coord {
        let (r, rem) = (i / self.per_rank, i % self.per_rank);
        let role = self.offset.partition_point(|&o| o <= rem) - 1;
        (r as Rank, role, (rem - self.offset[role]) as u32)
    }

    fn unkey(&self, k: u64) -> (Coord, Coord) {
        let n = self.member.len() as u64;
        (self.coord((k / n) as usize), self.coord((k % n) as usize))
    }
}

fn linear_inputs(prog: &Program) -> Vec<usize> {
    let kind = prog.collective;
    role_access(prog)
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            matches!(a, BufferRole::Input | BufferRole::InOut) && !operand_roles(kind).contains(i)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Outputs that carry gradients: every output role, except allgather_matmul's `g` (the gathered
/// copy of `a`, an auxiliary result whose gradient the MC2 backward does not take).
fn outputs(prog: &Program) -> Vec<usize> {
    let kind = prog.collective;
    (0..role_access(prog).len())
        .filter(|&i| is_output_role(prog, i))
        .filter(|&i| !(kind == CollectiveKind::AllgatherMatmul && i == 2))
        .collect()
}

/// Whether rank `r`'s output is differentiated: for sendrecv only the destination's buffer is
/// an output (the others' "unchanged" buffers are the caller's own tensors).
fn differentiated_rank(prog: &Program, r: Rank) -> bool {
    match prog.collective {
        CollectiveKind::Sendrecv => prog.params.get("dst").copied() == Some(i64::from(r)),
        _ => true,
    }
}

/// Specified output chunks of `prog`, in its own coordinates.
fn specified(prog: &Program) -> Result<BTreeSet<Coord>, Diagnostic> {
    let mut out = BTreeSet::new();
    for role in outputs(prog) {
        for r in (0..prog.group_size).filter(|&r| differentiated_rank(prog, r)) {
            for (j, e) in specified_blocks(prog, role, r)?.into_iter().enumerate() {
                if e {
                    for c in super::postcondition::block_chunks(prog, role, j as u32) {
                        out.insert((r, role, c));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn transpose_chain(ops: &[OpLabel]) -> Vec<OpLabel> {
    ops.iter()
        .rev()
        .map(|o| match o {
            OpLabel::RightMul {
                rank,
                buffer,
                first,
                count,
                transposed,
            } => OpLabel::RightMul {
                rank: *rank,
                buffer: *buffer,
                first: *first,
                count: *count,
                transposed: !transposed,
            },
            x => x.clone(),
        })
        .collect()
}

fn shape_error(fwd: &Program, bwd: &Program, decl_span: Span, why: String) -> Diagnostic {
    Diagnostic::error(
        "E0442",
        format!(
            "[dual] `{}` ({}) cannot be the adjoint of `{}` ({}): {why}",
            bwd.schedule,
            bwd.collective_name(),
            fwd.schedule,
            fwd.collective_name()
        ),
    )
    .with_label(decl_span, "dual declared here")
    .with_label(bwd.header_span, "the backward schedule")
}

/// Check that `bwd` computes the transpose of `fwd`'s linear map (both instantiated at the
/// same group size). `decl_span` is the `dual` clause.
pub fn verify_dual(fwd: &Program, bwd: &Program, decl_span: Span) -> Result<(), Diagnostic> {
    if fwd.group_size != bwd.group_size {
        return Err(shape_error(
            fwd,
            bwd,
            decl_span,
            format!("group sizes {} and {}", fwd.group_size, bwd.group_size),
        ));
    }
    // Both programs are indexed by role, region and peer below: refuse malformed ones first
    // (extent findings do not matter here).
    for p in [fwd, bwd] {
        let bad = super::bounds::check(p)
            .into_iter()
            .filter(|d| d.code != "E0432")
            .chain(super::postcondition::shape_errors(p))
            .next();
        if let Some(d) = bad {
            return Err(Diagnostic::error(
                "E0444",
                format!("[dual] `{}` cannot be checked: {}", p.schedule, d.message),
            )
            .with_label(decl_span, "dual declared here"));
        }
    }
    let (fi, fo) = (linear_inputs(fwd), outputs(fwd));
    let (bi, bo) = (linear_inputs(bwd), outputs(bwd));
    if fo.len() != bi.len() || fi.len() != bo.len() {
        return Err(shape_error(
            fwd,
            bwd,
            decl_span,
            format!(
                "{} output(s) and {} input(s) forward, {} input(s) and {} output(s) backward",
                fo.len(),
                fi.len(),
                bi.len(),
                bo.len()
            ),
        ));
    }
    // Backward role → forward role.
    let mut role_map: BTreeMap<usize, usize> = BTreeMap::new();
    for (b, f) in bi.iter().zip(&fo).chain(bo.iter().zip(&fi)) {
        let (kb, kf) = (bwd.buffers[*b].chunks, fwd.buffers[*f].chunks);
        if kb != kf {
            return Err(shape_error(
                fwd,
                bwd,
                decl_span,
                format!(
                    "`{}` has {kb} chunk(s) but corresponds to `{}` with {kf}",
                    bwd.buffers[*b].name, fwd.buffers[*f].name
                ),
            ));
        }
        role_map.insert(*b, *f);
    }
    let operand_map: BTreeMap<u32, u32> = operand_roles(bwd.collective)
        .iter()
        .zip(operand_roles(fwd.collective))
        .map(|(b, f)| (*b as u32, *f as u32))
        .collect();
    let unverified = |p: &Program| {
        Diagnostic::error(
            "E0444",
            format!(
                "[dual] `{}` cannot be executed (it has a deadlock)",
                p.schedule
            ),
        )
        .with_label(decl_span, "dual declared here")
    };
    // A schedule that is its own dual (two-shot allreduce) is executed once.
    let same = std::ptr::eq(fwd, bwd);
    let gf = graph::build(fwd);
    let hf = gf.happens_before().ok_or_else(|| unverified(fwd))?;
    let mut sf = execute(fwd, hf);
    let mut sb_own = if same {
        None
    } else {
        let gb = graph::build(bwd);
        let hbw = gb.happens_before().ok_or_else(|| unverified(bwd))?;
        Some(execute(bwd, hbw))
    };
    let spec_f = specified(fwd).map_err(|d| d.with_label(decl_span, "dual declared here"))?;
    let spec_b_own = specified(bwd).map_err(|d| d.with_label(decl_span, "dual declared here"))?;
    let spec_b: BTreeSet<Coord> = spec_b_own
        .iter()
        .map(|&(r, role, c)| (r, role_map[&role], c))
        .collect();
    let (in_f, in_b) = (CoordSet::new(fwd, &spec_f), CoordSet::new(fwd, &spec_b));
    let granularity = |p: &Program, (r, role, c): Coord| {
        shape_error(
            fwd,
            bwd,
            decl_span,
            format!(
                "`{}[{c}]` on rank {r} of `{}` is not one linear piece",
                p.buffers[role].name, p.schedule
            ),
        )
    };
    // The one linear piece a chunk holds.
    let piece = |run: &mut Outcome, (r, role, c): Coord| -> Option<std::rc::Rc<Lin>> {
        let v = run.value(r, role as u32, c);
        match run.exprs.pieces(v).as_slice() {
            [one] => run.exprs.lin(*one),
            _ => None,
        }
    };

    // Transpose of the forward.
    let mut want: Vec<Nonzero> = Vec::new();
    for &(r, o, c) in &spec_f {
        let Some(lin) = piece(&mut sf, (r, o, c)) else {
            return Err(granularity(fwd, (r, o, c)));
        };
        for (t, m) in lin.iter() {
            let (q, i, ci) = t.atom;
            let row = (q, i as usize, ci);
            if !in_b.contains(row) {
                continue;
            }
            want.push((in_f.key(row, (r, o, c)), transpose_chain(&t.ops), *m));
        }
    }
    let want = matrix(want);
    // The backward, in forward coordinates.
    let sb = sb_own.as_mut().unwrap_or(&mut sf);
    let mut got: Vec<Nonzero> = Vec::new();
    for &(r, role, c) in &spec_b_own {
        let Some(lin) = piece(sb, (r, role, c)) else {
            return Err(granularity(bwd, (r, role, c)));
        };
        let row = (r, role_map[&role], c);
        for (t, m) in lin.iter() {
            let (q, i, ci) = t.atom;
            let Some(&fi_role) = role_map.get(&(i as usize)) else {
                continue;
            };
            let col = (q, fi_role, ci);
            if !in_f.contains(col) {
                continue;
            }
            let ops: Vec<OpLabel> = t
                .ops
                .iter()
                .map(|o| match o {
                    OpLabel::RightMul {
                        rank,
                        buffer,
                        first,
                        count,
                        transposed,
                    } => match operand_map.get(buffer) {
                        Some(fb) => OpLabel::RightMul {
                            rank: *rank,
                            buffer: *fb,
                            first: *first,
                            count: *count,
                            transposed: !transposed,
                        },
                        None => OpLabel::Opaque(format!("{o:?}")),
                    },
                    x => x.clone(),
                })
                .collect();
            got.push((in_f.key(row, col), ops, *m));
        }
    }
    let got = matrix(got);
    if want == got {
        return Ok(());
    }
    // The first key (in order) whose entries differ.
    let (mut ws, mut gs) = (entries(&want).peekable(), entries(&got).peekable());
    let empty = Entry::new();
    loop {
        let (key, w, g) = match (ws.peek(), gs.peek()) {
            (None, None) => break,
            (Some((kw, _)), Some((kg, _))) if kw == kg => {
                let (k, w) = ws.next().expect("peeked");
                let (_, g) = gs.next().expect("peeked");
                (k, w, g)
            }
            (Some((kw, _)), Some((kg, _))) if kg < kw => {
                let (k, g) = gs.next().expect("peeked");
                (k, empty.clone(), g)
            }
            (Some(_), _) => {
                let (k, w) = ws.next().expect("peeked");
                (k, w, empty.clone())
            }
            (None, Some(_)) => {
                let (k, g) = gs.next().expect("peeked");
                (k, empty.clone(), g)
            }
        };
        if w == g {
            continue;
        }
        let ((r, i, ci), (q, o, co)) = in_f.unkey(key);
        let describe = |e: &Entry| {
            if e.is_empty() {
                return "nothing".to_string();
            }
            e.iter()
                .map(|(ops, m)| {
                    let lin = vec![(
                        super::symbolic::Term {
                            atom: (q, o as u32, co),
                            ops: ops.clone(),
                        },
                        *m,
                    )];
                    lin_text(fwd, &lin)
                })
                .collect::<Vec<_>>()
                .join(" + ")
        };
        return Err(Diagnostic::error(
            "E0441",
            format!(
                "[dual] `{}` is not the adjoint of `{}` at P = {}: the gradient of {} should receive {} (from the gradient of {}) but the dual gives {}",
                bwd.schedule,
                fwd.schedule,
                fwd.group_size,
                term_text(fwd, &(r, i as u32, ci), &[]),
                describe(&w),
                term_text(fwd, &(q, o as u32, co), &[]),
                describe(&g),
            ),
        )
        .with_label(decl_span, "dual declared here")
        .with_label(bwd.header_span, "the backward schedule")
        .with_note("duals are checked as M_bwd = M_fwdᵀ over unit inputs; see docs/verifier.md"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, CollectiveKind, SignalMode};

    fn allgather(p: u32) -> Program {
        let mut b = Builder::collective(CollectiveKind::Allgather, p, &[("in", 1), ("out", p)]);
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, 0, 1), reg(1, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
        }
        b.build()
    }

    /// Push reduce_scatter: rank r puts in[j] into land[r] of rank j, then reduces land.
    /// `drop` skips one operand on rank 0.
    fn reduce_scatter(p: u32, drop: bool) -> Program {
        let mut b = Builder::collective(
            CollectiveKind::ReduceScatter,
            p,
            &[("in", p), ("out", 1), ("land", p)],
        );
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                b.put_sig(r, reg(0, j, 1), reg(2, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            let srcs: Vec<_> = (0..p)
                .filter(|&j| !(drop && r == 0 && j == p - 1))
                .map(|j| reg(2, j, 1))
                .collect();
            b.reduce(r, reg(1, 0, 1), &srcs);
        }
        b.build()
    }

    #[test]
    fn allgather_and_reduce_scatter_are_adjoint() {
        for p in [1, 2, 3, 4] {
            verify_dual(&allgather(p), &reduce_scatter(p, false), Span::default())
                .unwrap_or_else(|d| panic!("P={p}: {d}"));
            verify_dual(&reduce_scatter(p, false), &allgather(p), Span::default())
                .unwrap_or_else(|d| panic!("P={p}: {d}"));
        }
    }

    #[test]
    fn a_missing_operand_breaks_the_adjoint() {
        let d =
            verify_dual(&allgather(3), &reduce_scatter(3, true), Span::new(0, 5, 9)).unwrap_err();
        assert_eq!(d.code, "E0441");
        assert_eq!(d.span(), Some(Span::new(0, 5, 9)));
        assert!(d.message.contains("r0:in[0]"), "{}", d.message);
    }

    fn allgather_matmul(p: u32) -> Program {
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
        b.build()
    }

    /// Rank r multiplies block j of `a` by its `b` and pushes it to rank j, which sums.
    fn matmul_reduce_scatter(p: u32, wrong_operand: bool) -> Program {
        let mut b = Builder::collective(
            CollectiveKind::MatmulReduceScatter,
            p,
            &[("a", p), ("b", 1), ("c", 1), ("part", p), ("land", p)],
        );
        b.signals(&[("ready", SignalMode::Add)]);
        for r in 0..p {
            for j in 0..p {
                let blk = if wrong_operand && r == 0 {
                    (j + 1) % p
                } else {
                    j
                };
                b.matmul(r, reg(3, j, 1), reg(0, blk, 1), reg(1, 0, 1));
                b.put_sig(r, reg(3, j, 1), reg(4, r, 1), j, 0, 1);
            }
            b.wait(r, 0, Cmp::Ge, p as u64);
            let srcs: Vec<_> = (0..p).map(|j| reg(4, j, 1)).collect();
            b.reduce(r, reg(2, 0, 1), &srcs);
        }
        b.build()
    }

    #[test]
    fn allgather_matmul_and_matmul_reduce_scatter_are_adjoint() {
        for p in [1, 2, 3] {
            verify_dual(
                &allgather_matmul(p),
                &matmul_reduce_scatter(p, false),
                Span::default(),
            )
            .unwrap_or_else(|d| panic!("P={p}: {d}"));
            verify_dual(
                &matmul_reduce_scatter(p, false),
                &allgather_matmul(p),
                Span::default(),
            )
            .unwrap_or_else(|d| panic!("P={p}: {d}"));
        }
        let d = verify_dual(
            &allgather_matmul(2),
            &matmul_reduce_scatter(2, true),
            Span::default(),
        )
        .unwrap_err();
        assert_eq!(d.code, "E0441");
        assert!(d.message.contains("matmul("), "{}", d.message);
    }

    #[test]
    fn allgather_is_not_its_own_adjoint() {
        let d = verify_dual(&allgather(2), &allgather(2), Span::default()).unwrap_err();
        assert_eq!(d.code, "E0442");
    }
}
