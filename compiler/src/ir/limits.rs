//! What one instantiated program may need, so that `check` and `compile` stay bounded in time
//! and memory on any input, and refuse what the runtime cannot run.
//!
//! | limit | value | refused with | why |
//! |---|---|---|---|
//! | statements one rank executes while unrolling | 2^20 ([`super::instantiate::MAX_STATEMENTS_PER_RANK`]) | E0315 | a runaway loop |
//! | steps of the whole program (all ranks) | [`MAX_PROGRAM_STEPS`] | E0315 | graph, races and symbolic execution are linear in steps |
//! | steps × P | [`MAX_STEP_CLOCKS`] | E0315 | happens-before keeps one P-wide vector clock per step |
//! | memory locations: P × chunks of all buffers | [`MAX_LOCATIONS`] | E0315 | the races and the postcondition track every (rank, buffer, chunk) |
//! | signal slots of the plan, credits included | [`MAX_SIGNAL_SLOTS`] | E0316 | one group's signal pad in the host runtime |
//! | elements of any buffer, offset or byte count, for role buffers of up to [`MAX_ROLE_ELEMS`] elements | < 2^64 bytes | E0317 | the runtime computes them in u64 |
//!
//! The step limits are applied per rank while unrolling ([`steps_per_rank`]), so a program that
//! is too large is refused after at most that much work on its first rank, with a diagnostic
//! that names the loop nest and the size it would reach.
//!
//! Measured on this machine (release build, `cargo bench -p symsched-compiler --bench hostile`):
//! see `docs/verifier.md`, "Cost".

use super::Program;
use crate::diag::{Diagnostic, Span};
use crate::front::codes;
use std::collections::{BTreeMap, HashMap};
use symsched_plan::{BufferDecl, BufferRole, Extent, SizeExpr};

/// Steps of a whole program, all ranks together.
pub const MAX_PROGRAM_STEPS: u64 = 1 << 21;
/// Steps × group size: the happens-before clocks (4 bytes each), 128 MiB at the limit.
pub const MAX_STEP_CLOCKS: u64 = 1 << 25;
/// Memory locations the verifier tracks: P × the chunks of every buffer.
pub const MAX_LOCATIONS: u64 = 1 << 20;
/// Signal slots one plan may use. The host runtime's signal pad holds 4080 slots per group
/// (`symsched_runtime::group::SLOT_CAPACITY`, 4096 in the in-process fabric), shared with the
/// runtime's own exchanges (a barrier, host collectives, the eager all-to-all-v: 2 per key,
/// 2·P for the eager channel); this leaves 240 of them free.
pub const MAX_SIGNAL_SLOTS: usize = 3840;
/// Largest element count of one role buffer the size proof assumes: a tensor of more than
/// 2^47 elements does not fit any address space the runtime runs in.
pub const MAX_ROLE_ELEMS: u64 = 1 << 47;

/// Steps one rank may unroll to at group size `p`: the per-rank share of the program limits.
pub fn steps_per_rank(p: u32) -> u64 {
    let p = p.max(1) as u64;
    (MAX_PROGRAM_STEPS / p).min(MAX_STEP_CLOCKS / (p * p))
}

/// E0315 when P × the chunks of every buffer exceeds [`MAX_LOCATIONS`]; labelled at the
/// largest buffer's declaration. Takes the buffers alone so instantiation can ask before it
/// unrolls anything.
pub fn check_locations(
    p: u32,
    buffers: &[BufferDecl],
    spans: &[Span],
    header: Span,
) -> Result<(), Diagnostic> {
    let p = p as u64;
    let chunks: u64 = buffers.iter().map(|b| b.chunks as u64).sum();
    let locations = p.saturating_mul(chunks);
    if locations <= MAX_LOCATIONS {
        return Ok(());
    }
    let (big, decl) = buffers
        .iter()
        .enumerate()
        .max_by_key(|(_, b)| b.chunks)
        .expect("a program with chunks has a buffer");
    let span = spans.get(big).copied().unwrap_or(header);
    Err(Diagnostic::error(
        codes::E_TOO_LARGE,
        format!(
            "the program has {locations} memory locations to verify ({p} rank(s) × {chunks} chunk(s) of {} buffer(s)), more than {MAX_LOCATIONS}",
            buffers.len()
        ),
    )
    .with_label(span, format!("`{}` alone has {} chunks", decl.name, decl.chunks))
    .with_help("use fewer chunks: a chunk is a unit of synchronisation, a message of many elements is still one chunk"))
}

/// E0316 when the plan needs more signal slots than a group's signal pad has room for.
pub fn check_signal_slots(prog: &Program) -> Result<(), Diagnostic> {
    let n = prog.signals.len();
    if n <= MAX_SIGNAL_SLOTS {
        return Ok(());
    }
    // The declaration with the most slots: the slots of one array share its span.
    let mut per_span: HashMap<Span, usize> = HashMap::new();
    for s in &prog.signal_spans {
        *per_span.entry(*s).or_default() += 1;
    }
    let span = per_span
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(s.start)))
        .map(|(s, _)| *s)
        .unwrap_or(prog.header_span);
    Err(Diagnostic::error(
        codes::E_SIGNAL_SLOTS,
        format!(
            "the plan needs {n} signal slots (launch credits included), more than the {MAX_SIGNAL_SLOTS} a group's signal pad leaves to one plan"
        ),
    )
    .with_label(span, "most of them are declared here")
    .with_help("use fewer signals: one counter can count many updates (`wait s >= k`)"))
}

/// An upper bound of a size expression, in u128 (saturating): every monomial of its expansion
/// is bounded by covering its variables with role totals, each at most [`MAX_ROLE_ELEMS`].
struct Bound<'a> {
    /// Monomials (variable multisets) of the role buffers' totals.
    roles: &'a [Vec<&'a str>],
}

/// A polynomial: monomial (sorted variable names, with repeats) → coefficient.
type Poly<'a> = BTreeMap<Vec<&'a str>, u128>;

fn poly(e: &SizeExpr) -> Option<Poly<'_>> {
    Some(match e {
        SizeExpr::Const(c) => [(Vec::new(), *c as u128)].into_iter().collect(),
        SizeExpr::Var(v) => [(vec![v.as_str()], 1)].into_iter().collect(),
        SizeExpr::Add(a, b) => {
            let mut p = poly(a)?;
            for (m, c) in poly(b)? {
                let e = p.entry(m).or_insert(0);
                *e = e.saturating_add(c);
            }
            p
        }
        SizeExpr::Mul(a, b) => {
            let (pa, pb) = (poly(a)?, poly(b)?);
            let mut p = Poly::new();
            for (ma, ca) in &pa {
                for (mb, cb) in &pb {
                    let mut m: Vec<&str> = ma.iter().chain(mb).copied().collect();
                    m.sort_unstable();
                    let e = p.entry(m).or_insert(0);
                    *e = e.saturating_add(ca.saturating_mul(*cb));
                }
            }
            p
        }
        // ceil(a / c) ≤ a for a constant c ≥ 1 (bounded per monomial, rounded up).
        SizeExpr::CeilDiv(a, b) => match b.as_ref() {
            SizeExpr::Const(c) if *c >= 1 => poly(a)?
                .into_iter()
                .map(|(m, k)| (m, k.div_ceil(*c as u128)))
                .collect(),
            _ => return None,
        },
    })
}

impl Bound<'_> {
    /// Largest value of monomial `m`: greedily cover its variables with role monomials (each at
    /// most MAX_ROLE_ELEMS); a variable no role contains is unbounded.
    fn monomial(&self, m: &[&str]) -> u128 {
        let mut rest: Vec<&str> = m.to_vec();
        let mut bound: u128 = 1;
        while !rest.is_empty() {
            // The role monomial that covers most of what is left.
            let best = self
                .roles
                .iter()
                .map(|r| {
                    let mut left = rest.clone();
                    let mut hit = 0;
                    for v in r {
                        if let Some(i) = left.iter().position(|x| x == v) {
                            left.swap_remove(i);
                            hit += 1;
                        }
                    }
                    (hit, left)
                })
                .max_by_key(|(hit, _)| *hit);
            match best {
                Some((hit, left)) if hit > 0 => {
                    bound = bound.saturating_mul(MAX_ROLE_ELEMS as u128);
                    rest = left;
                }
                _ => return u128::MAX,
            }
        }
        bound
    }

    fn expr(&self, e: &SizeExpr) -> u128 {
        match poly(e) {
            Some(p) => p
                .iter()
                .map(|(m, c)| c.saturating_mul(self.monomial(m)))
                .fold(0u128, u128::saturating_add),
            None => u128::MAX,
        }
    }
}

/// Elements a buffer may hold on one rank, as a size expression (`None` for count-matrix
/// extents, whose entries are each bounded by the role they size).
fn total(b: &BufferDecl) -> Option<SizeExpr> {
    match &b.extent {
        Extent::Split { total } => Some(total.clone()),
        Extent::Uniform { chunk } => Some(chunk.clone().scaled(b.chunks as u64)),
        Extent::Blocks { block, blocks } => Some(block.clone().scaled(*blocks as u64)),
        Extent::Counts { .. } => None,
    }
}

/// E0317 when, for role buffers of up to [`MAX_ROLE_ELEMS`] elements, some buffer's size in
/// bytes (8 per element at most), or all of them together (the runtime lays them out in one
/// area), could reach 2^64. Labelled at the first buffer that could.
pub fn check_size_overflow(prog: &Program) -> Result<(), Diagnostic> {
    let role_polys: Vec<Poly<'_>> = prog
        .buffers
        .iter()
        .filter(|b| b.role != BufferRole::Scratch)
        .filter_map(|b| match &b.extent {
            Extent::Split { total } | Extent::Uniform { chunk: total } => poly(total),
            Extent::Blocks { block, .. } => poly(block),
            Extent::Counts { .. } => None,
        })
        .collect();
    let roles: Vec<Vec<&str>> = role_polys
        .iter()
        .flat_map(|p| p.keys().filter(|m| !m.is_empty()).cloned())
        .collect();
    let bound = Bound { roles: &roles };
    // A byte count must stay below 2^64 with 8-byte elements.
    let limit: u128 = 1u128 << 61;
    let mut sum: u128 = 0;
    for (i, b) in prog.buffers.iter().enumerate() {
        let Some(t) = total(b) else {
            // Count-matrix chunks: each entry is one role's, the whole at most P of them.
            sum = sum.saturating_add((prog.group_size as u128) * MAX_ROLE_ELEMS as u128);
            continue;
        };
        let elems = if b.role == BufferRole::Scratch {
            bound.expr(&t)
        } else {
            bound.expr(&t).min(MAX_ROLE_ELEMS as u128)
        };
        sum = sum.saturating_add(elems);
        if elems >= limit || sum >= limit {
            let span: Span = prog
                .buffer_spans
                .get(i)
                .copied()
                .unwrap_or(prog.header_span);
            let what = if elems >= limit {
                format!("`{}` could hold", b.name)
            } else {
                format!("the buffers up to `{}` could hold", b.name)
            };
            return Err(Diagnostic::error(
                codes::E_SIZE_OVERFLOW,
                format!(
                    "{what} {} elements on one rank for role buffers of up to 2^47 elements: its size in bytes could overflow 64 bits when the runtime lays it out",
                    if elems.max(sum) == u128::MAX {
                        "2^128 or more".to_string()
                    } else {
                        format!("about 2^{}", 127 - elems.max(sum).leading_zeros())
                    }
                ),
            )
            .with_label(span, format!("{} elements per rank", t))
            .with_help("size scratch by the roles (`of x`) or with smaller factors"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_per_rank_follows_the_program_and_clock_limits() {
        assert_eq!(steps_per_rank(1), MAX_PROGRAM_STEPS);
        assert_eq!(steps_per_rank(8), MAX_PROGRAM_STEPS / 8);
        assert_eq!(steps_per_rank(64), MAX_STEP_CLOCKS / 4096);
    }

    #[test]
    fn a_monomial_is_bounded_by_the_roles_that_cover_it() {
        let roles = vec![vec!["m", "n"], vec!["k", "m"], vec!["k", "n"]];
        let b = Bound { roles: &roles };
        let e = MAX_ROLE_ELEMS as u128;
        assert_eq!(b.monomial(&["m", "n"]), e);
        assert_eq!(b.monomial(&["k", "m", "n"]), e * e);
        assert_eq!(b.monomial(&["q"]), u128::MAX);
        let big = SizeExpr::var("n").scaled(1 << 40);
        assert_eq!(b.expr(&big), e << 40);
    }
}
