//! Bounds and extents (E043x).
//!
//! Instantiation already refuses out-of-range indices (E03xx); E0431/E0433 re-check the IR so
//! every later rule can index without panicking (the IR may also come from an edit). E0432
//! proves, for every message size, that each step's other regions are at least as long as its
//! data region, by reasoning on the extent kinds (see `docs/verifier.md`, "Bounds").

use super::{step_error, step_text};
use crate::diag::Diagnostic;
use crate::ir::{Program, StepRef};
use std::collections::BTreeSet;
use symsched_plan::{BufferDecl, CountsMatrix, Extent, LaunchSizes, Op, Rank, Region, SizeExpr};

/// All bounds and extent findings.
pub(super) fn check(prog: &Program) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let p = prog.group_size;
    if prog.ranks.len() != p as usize {
        out.push(
            Diagnostic::error(
                "E0433",
                format!(
                    "[bounds] the program has {} rank programs for group size {p}",
                    prog.ranks.len()
                ),
            )
            .with_label(prog.header_span, "instantiated here"),
        );
        return out;
    }
    for (at, s) in prog.steps() {
        let mut bad = Vec::new();
        for region in s.op.regions().map(|a| a.region) {
            match prog.buffers.get(region.buffer as usize) {
                None => bad.push(format!("buffer #{} does not exist", region.buffer)),
                Some(b) if region.first as u64 + region.count as u64 > b.chunks as u64 => {
                    bad.push(format!(
                        "`{}` covers chunks {}..{} but `{}` has {} chunk(s)",
                        prog.region_text(&region, None),
                        region.first,
                        region.first as u64 + region.count as u64,
                        b.name,
                        b.chunks
                    ))
                }
                _ => {}
            }
        }
        if !bad.is_empty() {
            out.push(step_error(
                prog,
                "E0431",
                at,
                format!("[bounds] {}: {}", step_text(prog, at), bad.join("; ")),
                "region outside its buffer",
            ));
            continue;
        }
        if let Some(msg) = peer_or_slot_problem(prog, &s.op) {
            out.push(step_error(
                prog,
                "E0433",
                at,
                format!("[bounds] {}: {msg}", step_text(prog, at)),
                "outside the group or the signal table",
            ));
            continue;
        }
        if let Some(d) = extent_problem(prog, at) {
            out.push(d);
        }
    }
    out
}

fn peer_or_slot_problem(prog: &Program, op: &Op) -> Option<String> {
    let p = prog.group_size;
    let slots = prog.signals.len() as u32;
    let peer_ok = |q: Rank| q < p;
    match op {
        Op::Put { peer, signal, .. } => {
            if !peer_ok(*peer) {
                return Some(format!("peer {peer} is outside the group of {p}"));
            }
            if let Some(u) = signal {
                if !peer_ok(u.peer) || u.slot >= slots {
                    return Some(format!(
                        "signal slot #{} @ {} does not exist",
                        u.slot, u.peer
                    ));
                }
            }
        }
        Op::Get { peer, .. } if !peer_ok(*peer) => {
            return Some(format!("peer {peer} is outside the group of {p}"))
        }
        Op::Signal { update } if !peer_ok(update.peer) || update.slot >= slots => {
            return Some(format!(
                "signal slot #{} @ {} does not exist",
                update.slot, update.peer
            ))
        }
        Op::Wait { slot, .. } if *slot >= slots => {
            return Some(format!("signal slot #{slot} does not exist"))
        }
        Op::HostColl { members, .. } if members.iter().any(|m| !peer_ok(*m)) => {
            return Some(format!(
                "hostcoll members {members:?} leave the group of {p}"
            ))
        }
        _ => {}
    }
    None
}

/// A region with the rank whose memory it is in.
type Located = (Region, Rank);

/// The data region and the regions that must be at least as long, with their ranks.
fn data_and_others(op: &Op, me: Rank) -> Option<(Located, Vec<Located>)> {
    match op {
        Op::Put { src, dst, peer, .. } => Some(((*src, me), vec![(*dst, *peer)])),
        Op::Get { src, dst, peer } => Some(((*src, *peer), vec![(*dst, me)])),
        Op::Copy { src, dst } | Op::Cast { src, dst } => Some(((*src, me), vec![(*dst, me)])),
        Op::Reduce { dst, srcs } => Some(((*dst, me), srcs.iter().map(|s| (*s, me)).collect())),
        // Matmul operands have different shapes (m×k, k×n, m×n); a hostcoll has one region.
        _ => None,
    }
}

fn extent_problem(prog: &Program, at: StepRef) -> Option<Diagnostic> {
    let op = &prog.step(at).op;
    let (data, others) = data_and_others(op, at.rank)?;
    for other in others {
        match covers(prog, other, data) {
            Proof::Holds => {}
            verdict => {
                let text = |(r, q): (Region, Rank)| prog.region_text(&r, Some(q));
                let mut d = step_error(
                    prog,
                    "E0432",
                    at,
                    format!(
                        "[bounds] {}: `{}` may be shorter than the data region `{}`",
                        step_text(prog, at),
                        text(other),
                        text(data)
                    ),
                    "extents not provably compatible",
                )
                .with_note(format!(
                    "extents: `{}` is {}, `{}` is {}",
                    prog.buffers[data.0.buffer as usize].name,
                    extent_text(&prog.buffers[data.0.buffer as usize]),
                    prog.buffers[other.0.buffer as usize].name,
                    extent_text(&prog.buffers[other.0.buffer as usize]),
                ));
                d = match verdict {
                    Proof::Fails(ce) => d.with_note(format!("counterexample: {ce}")),
                    _ => d.with_note(
                        "no counterexample was found by sampling, but the extents cannot be proved compatible for every size",
                    ),
                };
                return Some(d.with_help(
                    "give the destination the same chunking as the source, or a scratch slot declared `of` the source buffer",
                ));
            }
        }
    }
    None
}

fn extent_text(b: &BufferDecl) -> String {
    match &b.extent {
        Extent::Split { total } => format!("{total} split into {} chunk(s)", b.chunks),
        Extent::Uniform { chunk } => format!("{} chunk(s) of {chunk}", b.chunks),
        Extent::Blocks { block, blocks } => format!(
            "{blocks} block(s) of {block}, each split into {} chunk(s)",
            b.extent.chunks_per_block(b.chunks)
        ),
        Extent::Counts { matrix } => format!("alltoallv counts ({matrix:?})").to_lowercase(),
    }
}

#[derive(Debug, PartialEq)]
enum Proof {
    Holds,
    Fails(String),
    Unknown,
}

/// Algebraic simplification enough for the shapes the front end builds: `ceil(a·X / b)` with
/// b dividing a, `ceil(X / 1)`, `1·X`.
fn simplify(e: &SizeExpr) -> SizeExpr {
    match e {
        SizeExpr::Mul(x, y) => match (simplify(x), simplify(y)) {
            (SizeExpr::Const(1), z) | (z, SizeExpr::Const(1)) => z,
            (SizeExpr::Const(a), SizeExpr::Const(b)) => SizeExpr::Const(a.saturating_mul(b)),
            (x, y) => SizeExpr::Mul(Box::new(x), Box::new(y)),
        },
        SizeExpr::Add(x, y) => SizeExpr::Add(Box::new(simplify(x)), Box::new(simplify(y))),
        SizeExpr::CeilDiv(x, y) => match (simplify(x), simplify(y)) {
            (z, SizeExpr::Const(1)) => z,
            (SizeExpr::Mul(a, z), SizeExpr::Const(b)) if b != 0 => match *a {
                SizeExpr::Const(a) if a.is_multiple_of(b) => simplify(&z.scaled(a / b)),
                a => SizeExpr::CeilDiv(
                    Box::new(SizeExpr::Mul(Box::new(a), z)),
                    Box::new(SizeExpr::Const(b)),
                ),
            },
            (x, y) => SizeExpr::CeilDiv(Box::new(x), Box::new(y)),
        },
        e => e.clone(),
    }
}

/// The exact length of every chunk, when all chunks of the buffer have the same length for
/// every size: uniform extents, and splits whose total is a multiple of the chunk count.
fn uniform_chunk(b: &BufferDecl) -> Option<SizeExpr> {
    match &b.extent {
        Extent::Uniform { chunk } => Some(simplify(chunk)),
        Extent::Split { .. } | Extent::Blocks { .. } => {
            let (t, k) = period(b)?;
            let k = k as u64;
            if k == 1 {
                return Some(t);
            }
            match t {
                SizeExpr::Mul(a, x) => match *a {
                    SizeExpr::Const(a) if k != 0 && a.is_multiple_of(k) => {
                        Some(simplify(&x.scaled(a / k)))
                    }
                    _ => None,
                },
                SizeExpr::Const(c) if k != 0 && c.is_multiple_of(k) => Some(SizeExpr::Const(c / k)),
                _ => None,
            }
        }
        Extent::Counts { .. } => None,
    }
}

/// Capacity of one chunk: ceil(total / K) for splits (every chunk fits), ceil(block / K) for
/// K chunks per block, the chunk for uniform.
fn capacity(b: &BufferDecl) -> Option<SizeExpr> {
    match &b.extent {
        Extent::Split { .. } | Extent::Blocks { .. } => {
            let (t, k) = period(b)?;
            Some(simplify(&t.ceil_div(k as u64)))
        }
        Extent::Uniform { chunk } => Some(simplify(chunk)),
        Extent::Counts { .. } => None,
    }
}

/// The ceil split whose chunk lengths a split buffer repeats: `(T, K)` when chunk `i` has the
/// length of chunk `i mod K` of `T` ceil-split over `K` chunks — a split of its total over its
/// chunks, or one block of a per-block split.
fn period(b: &BufferDecl) -> Option<(SizeExpr, u32)> {
    match &b.extent {
        Extent::Split { total } => Some((simplify(total), b.chunks)),
        Extent::Blocks { block, .. } => {
            Some((simplify(block), b.extent.chunks_per_block(b.chunks)))
        }
        _ => None,
    }
}

/// Whether `other` is at least as long as `data` for every size binding.
fn covers(prog: &Program, other: (Region, Rank), data: (Region, Rank)) -> Proof {
    let (d, dr) = data;
    let (o, or) = other;
    if d.count == 0 {
        return Proof::Holds;
    }
    let bd = &prog.buffers[d.buffer as usize];
    let bo = &prog.buffers[o.buffer as usize];
    let same_shape = bd.extent == bo.extent && bd.chunks == bo.chunks;
    let (ud, uo) = (uniform_chunk(bd), uniform_chunk(bo));
    // Exact length of the data region and a lower bound of the other, as multiples of a base
    // size, where the extents give one: whole splits are their total, uniform chunks add up.
    let as_multiple = |b: &BufferDecl, r: Region, u: &Option<SizeExpr>| match (&b.extent, u) {
        (_, Some(u)) => Some((r.count as u64, u.clone())),
        (Extent::Split { total }, None) if r.first == 0 && r.count == b.chunks => {
            Some((1, simplify(total)))
        }
        // Whole blocks of a per-block split.
        (Extent::Blocks { block, .. }, None) => {
            let per = b.extent.chunks_per_block(b.chunks).max(1);
            (r.first.is_multiple_of(per) && r.count.is_multiple_of(per))
                .then(|| ((r.count / per) as u64, simplify(block)))
        }
        _ => None,
    };
    if let (Some((md, bdd)), Some((mo, boo))) = (as_multiple(bd, d, &ud), as_multiple(bo, o, &uo)) {
        if bdd == boo && mo >= md {
            return Proof::Holds;
        }
    }
    // Both repeat one ceil split and the regions start at the same place in it: chunk by chunk
    // the lengths are equal (a rank's `[K]` role against its block of a `[P*K]` one).
    if let (Some((td, kd)), Some((to, ko))) = (period(bd), period(bo)) {
        if td == to && kd == ko && kd > 0 && d.first % kd == o.first % kd && o.count >= d.count {
            return Proof::Holds;
        }
    }
    let by_rule = match (&bd.extent, &bo.extent) {
        (Extent::Counts { matrix: md }, Extent::Counts { matrix: mo }) => {
            Some(count_entries(*mo, or, o).is_superset_of(&count_entries(*md, dr, d)))
        }
        // Ceil-split chunk lengths never grow with the index, and any shortfall shows at
        // T = first + count of the data region with capacity 1.
        (Extent::Split { .. }, Extent::Split { .. }) if same_shape && ud.is_none() => {
            Some(o.count >= d.count && o.first <= d.first)
        }
        // Every chunk has the same exact length on both sides.
        _ if ud.is_some() && ud == uo => Some(o.count >= d.count),
        // Any chunk of a split fits in a slot of the split's capacity.
        (Extent::Split { .. } | Extent::Blocks { .. }, _) if uo.is_some() && uo == capacity(bd) => {
            Some(o.count >= d.count)
        }
        (_, Extent::Split { total: to }) if o.first == 0 && o.count >= 1 => {
            let whole = o.count == bo.chunks;
            match &bd.extent {
                Extent::Split { total: td } if whole && simplify(td) == simplify(to) => Some(true),
                // Chunk 0 of a ceil split is always full (capacity ≤ total).
                _ if d.count == 1 && ud.is_some() && ud == capacity(bo) => Some(true),
                _ => None,
            }
        }
        _ => None,
    };
    match by_rule {
        Some(true) => Proof::Holds,
        _ => match sample(bd, dr, d, bo, or, o) {
            Some(ce) => Proof::Fails(ce),
            None if by_rule == Some(false) => {
                Proof::Fails("a size where the destination's chunks are shorter".into())
            }
            None => Proof::Unknown,
        },
    }
}

/// Count-matrix entries (sender, receiver) a Counts region covers.
struct Entries(Vec<(u32, u32)>);

impl Entries {
    fn is_superset_of(&self, other: &Entries) -> bool {
        let mut mine = self.0.clone();
        for e in &other.0 {
            match mine.iter().position(|x| x == e) {
                Some(i) => {
                    mine.swap_remove(i);
                }
                None => return false,
            }
        }
        true
    }
}

fn count_entries(m: CountsMatrix, rank: Rank, r: Region) -> Entries {
    Entries(
        (r.first..r.first + r.count)
            .map(|j| match m {
                CountsMatrix::Send => (rank, j),
                CountsMatrix::Recv => (j, rank),
            })
            .collect(),
    )
}

/// Look for sizes where `other` is shorter than `data`; returns a description of one.
fn sample(
    bd: &BufferDecl,
    dr: Rank,
    d: Region,
    bo: &BufferDecl,
    or: Rank,
    o: Region,
) -> Option<String> {
    let mut vars: BTreeSet<String> = BTreeSet::new();
    for b in [bd, bo] {
        match &b.extent {
            Extent::Split { total: e }
            | Extent::Uniform { chunk: e }
            | Extent::Blocks { block: e, .. } => vars.extend(e.vars()),
            // No symbolic reasoning about runtime counts beyond the entry rule.
            Extent::Counts { .. } => return None,
        }
    }
    let vars: Vec<String> = vars.into_iter().collect();
    let values: Vec<u64> = (0..=24).chain([31, 63, 64, 100, 127, 1000]).collect();
    // Every variable gets the same value, then each variable in turn varies against 1s.
    let mut bindings: Vec<Vec<u64>> = values.iter().map(|&v| vec![v; vars.len()]).collect();
    for i in 0..vars.len() {
        for &v in &values {
            let mut b = vec![1; vars.len()];
            b[i] = v;
            bindings.push(b);
        }
    }
    for vals in bindings {
        let sizes = LaunchSizes {
            vars: vars.iter().cloned().zip(vals.iter().copied()).collect(),
            counts: None,
        };
        let (Ok(ld), Ok(lo)) = (
            bd.region_span(d.first, d.count, dr, &sizes),
            bo.region_span(o.first, o.count, or, &sizes),
        ) else {
            continue;
        };
        if lo.len < ld.len {
            let at: Vec<String> = vars
                .iter()
                .zip(&vals)
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            return Some(format!(
                "at {} the data region holds {} element(s) but the other only {}",
                at.join(", "),
                ld.len,
                lo.len
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;
    use symsched_plan::SignalMode;

    fn scratch_of(b: &mut Builder, buffer: u32, k: u64) {
        b.extent(
            buffer,
            Extent::Uniform {
                chunk: SizeExpr::var("n").ceil_div(k),
            },
        );
    }

    fn blocks(b: &mut Builder, buffer: u32, blocks: u32) {
        b.extent(
            buffer,
            Extent::Blocks {
                block: SizeExpr::var("n"),
                blocks,
            },
        );
    }

    #[test]
    fn a_chunk_into_the_same_place_of_a_block_is_fine() {
        // `in: [2]` (n split in two) into block 1 of `out: [2 * P]` (two blocks of n, each
        // split in two): chunk c goes to chunk 2 + c, a whole `in` to the whole block.
        let mut b = Builder::new(2, &[("in", 2), ("out", 4)], &[]);
        blocks(&mut b, 1, 2);
        b.put(0, reg(0, 0, 1), reg(1, 2, 1), 1);
        b.put(0, reg(0, 1, 1), reg(1, 3, 1), 1);
        b.put(1, reg(0, 0, 2), reg(1, 2, 2), 0);
        b.put(1, reg(1, 2, 1), reg(1, 0, 1), 0);
        assert!(check(&b.build()).is_empty());
    }

    #[test]
    fn a_first_half_into_a_second_half_may_not_fit() {
        let mut b = Builder::new(2, &[("in", 2), ("out", 4)], &[]);
        blocks(&mut b, 1, 2);
        let bad = b.put(0, reg(0, 0, 1), reg(1, 3, 1), 1);
        let d = check(&b.build());
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0432");
        assert_eq!(d[0].span(), Some(b.build().step(bad).span));
        assert!(
            d[0].notes.iter().any(|n| n.contains("at n = 1")),
            "{:?}",
            d[0].notes
        );
    }

    #[test]
    fn a_block_chunk_fits_a_slot_of_its_capacity() {
        let mut b = Builder::new(2, &[("in", 4), ("land", 4)], &[]);
        blocks(&mut b, 0, 2);
        scratch_of(&mut b, 1, 2);
        b.put(0, reg(0, 3, 1), reg(1, 0, 1), 1);
        assert!(check(&b.build()).is_empty());
    }

    #[test]
    fn split_chunk_into_slot_of_capacity_is_fine() {
        let mut b = Builder::new(2, &[("x", 4), ("land", 4)], &[]);
        scratch_of(&mut b, 1, 4);
        b.put(0, reg(0, 3, 1), reg(1, 0, 1), 1);
        assert!(check(&b.build()).is_empty());
    }

    #[test]
    fn split_chunk_into_a_later_chunk_may_not_fit() {
        let mut b = Builder::new(2, &[("x", 4)], &[]);
        let bad = b.put(0, reg(0, 1, 1), reg(0, 2, 1), 1);
        b.put(1, reg(0, 2, 1), reg(0, 1, 1), 0);
        let d = check(&b.build());
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0432");
        assert_eq!(d[0].span(), Some(b.build().step(bad).span));
        assert!(
            d[0].notes.iter().any(|n| n.contains("counterexample")),
            "{d:?}"
        );
    }

    #[test]
    fn two_chunks_into_one_slot_do_not_fit() {
        let mut b = Builder::new(2, &[("x", 4), ("land", 4)], &[]);
        scratch_of(&mut b, 1, 4);
        b.put(0, reg(0, 0, 2), reg(1, 0, 1), 1);
        let d = check(&b.build());
        assert_eq!(d[0].code, "E0432");
    }

    #[test]
    fn alltoallv_counts_match_across_the_transpose() {
        let mut b = Builder::collective(
            symsched_plan::CollectiveKind::Alltoallv,
            3,
            &[("in", 3), ("out", 3)],
        );
        b.put(0, reg(0, 2, 1), reg(1, 0, 1), 2);
        assert!(check(&b.build()).is_empty());
        let mut b = Builder::collective(
            symsched_plan::CollectiveKind::Alltoallv,
            3,
            &[("in", 3), ("out", 3)],
        );
        b.put(0, reg(0, 2, 1), reg(1, 1, 1), 2);
        assert_eq!(check(&b.build())[0].code, "E0432");
    }

    #[test]
    fn region_past_the_end_and_bad_peer() {
        let mut b = Builder::new(2, &[("x", 2)], &[("s", SignalMode::Add)]);
        b.copy(0, reg(0, 1, 2), reg(0, 0, 1));
        b.signal(1, 0, 5, SignalMode::Add, 1);
        let d = check(&b.build());
        let codes: Vec<&str> = d.iter().map(|d| d.code).collect();
        assert_eq!(codes, vec!["E0431", "E0433"]);
    }

    #[test]
    fn reduce_operands_must_cover_the_destination() {
        let mut b = Builder::new(1, &[("x", 2), ("y", 1)], &[]);
        b.reduce(0, reg(0, 0, 2), &[reg(0, 0, 2), reg(0, 0, 1)]);
        let d = check(&b.build());
        assert_eq!(d[0].code, "E0432");
    }
}
