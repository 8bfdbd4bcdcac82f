//! `compute c = matmul(a, b)` steps: the pluggable matmul engine and the built-in deterministic
//! one.
//!
//! The interpreter hands every matmul step, in plan order and on the rank's own thread, to the
//! process's registered [`MatmulEngine`], or to [`Builtin`] when none is registered. So an MC2
//! plan still multiplies each block as soon as the schedule's waits let it; only the kernel
//! that multiplies changes. Frameworks register their own GEMM (the Python package registers
//! torch's, as real MC2 on Ascend fuses the communication with the framework's matmul kernel).
//!
//! [`Builtin`] is the reference numerics every other lowering must reproduce bit for bit (the
//! Ascend C host simulation compares against it), which is why its summation order below is part
//! of the contract. A registered engine trades that bit-exactness for speed; it is process-wide
//! (like the step trace) because a framework's kernel library is too.

use super::dtype::{Accum, DType};
use super::error::ExecError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// One matmul step's operands: `c (m×n) = a (m×k) × b (k×n)`, all row-major and contiguous
/// (from the interpreter: ranges of this rank's own symmetric heap, or of the caller's private
/// memory for role buffers it uses in place).
#[derive(Debug, Clone, Copy)]
pub struct MatmulStep {
    /// Output, `m·n` elements of `c.1`.
    pub c: (*mut u8, DType),
    /// Left operand, `m·k` elements of `a.1`.
    pub a: (*const u8, DType),
    /// Right operand, `k·n` elements of `b.1`.
    pub b: (*const u8, DType),
    /// Rows of `a` and `c`.
    pub m: usize,
    /// Columns of `a`, rows of `b`.
    pub k: usize,
    /// Columns of `b` and `c`.
    pub n: usize,
}

/// A GEMM the interpreter calls for every matmul step (see the module docs).
pub trait MatmulEngine: Send + Sync {
    /// Short name, for error messages.
    fn name(&self) -> &str;

    /// Compute `step.c = step.a × step.b`. Only float dtypes reach an engine. `scratch` is
    /// memory the interpreter keeps per plan and passes to every step; an engine may reuse it.
    ///
    /// # Safety
    /// The caller guarantees that each operand points to that many valid elements of its dtype
    /// (not necessarily aligned), that `c` does not overlap `a` or `b` (the interpreter sends
    /// such steps to [`Builtin`]), and that nothing else accesses these ranges during the call.
    unsafe fn matmul(&self, step: &MatmulStep, scratch: &mut Vec<f64>) -> Result<(), ExecError>;
}

/// The built-in deterministic engine (see [`MatmulEngine`] and the summation order below).
#[derive(Debug, Default, Clone, Copy)]
pub struct Builtin;

impl MatmulEngine for Builtin {
    fn name(&self) -> &str {
        "builtin"
    }

    unsafe fn matmul(&self, s: &MatmulStep, scratch: &mut Vec<f64>) -> Result<(), ExecError> {
        matmul(
            scratch,
            s.c,
            (s.a.0 as *mut u8, s.a.1),
            (s.b.0 as *mut u8, s.b.1),
            (s.m, s.k, s.n),
        )
    }
}

/// Whether an engine is registered: the common case (none) costs one relaxed load per step.
static CUSTOM: AtomicBool = AtomicBool::new(false);
static ENGINE: RwLock<Option<Arc<dyn MatmulEngine>>> = RwLock::new(None);

/// Register `engine` for every matmul step of this process from now on, or go back to
/// [`Builtin`] with `None`. Launches already running finish with the engine they started a
/// step with.
pub fn set_engine(engine: Option<Arc<dyn MatmulEngine>>) {
    let mut slot = ENGINE.write().unwrap_or_else(|e| e.into_inner());
    CUSTOM.store(engine.is_some(), Ordering::Release);
    *slot = engine;
}

/// Name of the engine matmul steps currently go to.
pub fn engine_name() -> String {
    current().map_or_else(|| Builtin.name().to_string(), |e| e.name().to_string())
}

fn current() -> Option<Arc<dyn MatmulEngine>> {
    if !CUSTOM.load(Ordering::Acquire) {
        return None;
    }
    ENGINE.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Run one matmul step on the registered engine (or [`Builtin`]): the interpreter's entry point.
/// Integer operands are refused before any engine sees them.
///
/// # Safety
/// As for [`MatmulEngine::matmul`], except that `c` may overlap `a` or `b`.
pub unsafe fn run(step: &MatmulStep, scratch: &mut Vec<f64>) -> Result<(), ExecError> {
    require_float([step.a.1, step.b.1, step.c.1])?;
    // Engines write `c` in place; the built-in one stages the product and so also serves the
    // (verifier-permitted but odd) steps whose output overlaps an operand.
    let span = |p: *const u8, dt: DType, elems: usize| {
        let start = p as usize;
        (start, start + elems * dt.size())
    };
    let c = span(step.c.0, step.c.1, step.m * step.n);
    let overlaps = |(s, e): (usize, usize)| s < c.1 && c.0 < e;
    let aliased = overlaps(span(step.a.0, step.a.1, step.m * step.k))
        || overlaps(span(step.b.0, step.b.1, step.k * step.n));
    match current() {
        Some(_) if aliased => Builtin.matmul(step, scratch),
        None => Builtin.matmul(step, scratch),
        Some(e) => e.matmul(step, scratch).map_err(|err| match err {
            ExecError::Runtime(msg) => {
                ExecError::Runtime(format!("matmul engine `{}`: {msg}", e.name()))
            }
            other => other,
        }),
    }
}

/// `c = a × b` (row-major), accumulated in f64 for f64 data and in f32 otherwise, then rounded
/// once into `c`'s type. `scratch` is reused across launches.
///
/// Summation order (part of the determinism contract, identical on every rank and run): each
/// output element starts at `0` and adds the products `a[i][t]·b[t][j]` for `t` ascending, each
/// product and partial sum rounded to the accumulator (no fused multiply-add). The loops run
/// i-k-j with cache blocking over `n` and `k` so the innermost loop is a contiguous, vectorisable
/// sweep over a row of `b`; blocking only regroups work and never reorders a single element's
/// sum, since `k` blocks are visited in ascending order and the accumulators persist across them.
fn matmul(
    scratch: &mut Vec<f64>,
    c: (*mut u8, DType),
    a: (*mut u8, DType),
    b: (*mut u8, DType),
    (m, k, n): (usize, usize, usize),
) -> Result<(), ExecError> {
    require_float([a.1, b.1, c.1])?;
    if a.1 == DType::F64 || b.1 == DType::F64 || c.1 == DType::F64 {
        scratch.clear();
        scratch.resize(m * k + k * n + m * n, 0.0);
        let (av, rest) = scratch.split_at_mut(m * k);
        let (bv, cv) = rest.split_at_mut(k * n);
        // SAFETY: the interpreter checked each range for m·k, k·n and m·n elements.
        unsafe {
            f64::load(a.1, a.0, av);
            f64::load(b.1, b.0, bv);
        }
        matmul_blocked(av, bv, cv, (m, k, n));
        // SAFETY: as above.
        unsafe { f64::store(c.1, cv, c.0) };
        return Ok(());
    }

    // f32 accumulation. Operands already in f32 and aligned are read in place; the rest are
    // widened (exactly: every non-f64 float fits f32) into the scratch, viewed as f32 storage.
    let in_place = |p: (*mut u8, DType)| {
        p.1 == DType::F32 && (p.0 as usize).is_multiple_of(std::mem::align_of::<f32>())
    };
    let (a_in, b_in) = (in_place(a), in_place(b));
    let need = if a_in { 0 } else { m * k } + if b_in { 0 } else { k * n } + m * n;
    scratch.clear();
    scratch.resize(need.div_ceil(2), 0.0);
    // SAFETY: f64 storage is at least as aligned as f32, every bit pattern is a valid f32, and
    // the view covers no more than the `scratch` allocation.
    let all: &mut [f32] =
        unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr() as *mut f32, need) };
    let (cv, rest) = all.split_at_mut(m * n);
    // SAFETY (operand views and loads): the interpreter checked each range for m·k, k·n and
    // m·n elements; in-place operands were checked f32-aligned above, and `c` is only written
    // after the products are complete.
    let (av, rest): (&[f32], &mut [f32]) = if a_in {
        (
            unsafe { std::slice::from_raw_parts(a.0 as *const f32, m * k) },
            rest,
        )
    } else {
        let (av, rest) = rest.split_at_mut(m * k);
        unsafe { f32::load(a.1, a.0, av) };
        (av, rest)
    };
    let bv: &[f32] = if b_in {
        unsafe { std::slice::from_raw_parts(b.0 as *const f32, k * n) }
    } else {
        let bv = &mut rest[..k * n];
        unsafe { f32::load(b.1, b.0, bv) };
        bv
    };
    matmul_blocked(av, bv, cv, (m, k, n));
    // SAFETY: as above; one rounding from the f32 sums into `c`'s type.
    unsafe { f32::store(c.1, cv, c.0) };
    Ok(())
}

/// What [`matmul_blocked`] computes in: f32 or f64, plain IEEE `+` and `×` (never contracted
/// into a fused multiply-add, so every vector width gives the same bits).
trait Field: Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {}

impl Field for f32 {}
impl Field for f64 {}

super::dtype::multiversion! {
    /// The blocked i-k-j kernel behind [`matmul`]: `c += a × b` with `c` zeroed by the caller,
    /// for each element summing over `k` ascending (see [`matmul`] for why blocking keeps that).
    /// The AVX2 copy only widens the vectorised sweep over `j`; each lane is one element's own
    /// sum, so the result is bit-identical to the baseline copy.
    fn matmul_blocked<T: Field>(a: &[T], b: &[T], c: &mut [T], dims: (usize, usize, usize)) {
        let (m, k, n) = dims;
        // A `KB × NB` tile of `b` (128 KiB in f32) stays in L2 while every row of `a` sweeps it;
        // a row of the `c` tile (1 KiB in f32) stays in L1 across the whole `k` block.
        const NB: usize = 256;
        const KB: usize = 128;
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        for j0 in (0..n).step_by(NB) {
            let nb = NB.min(n - j0);
            for t0 in (0..k).step_by(KB) {
                let kb = KB.min(k - t0);
                for i in 0..m {
                    let arow = &a[i * k + t0..i * k + t0 + kb];
                    let crow = &mut c[i * n + j0..i * n + j0 + nb];
                    let brow = |t: usize| &b[(t0 + t) * n + j0..(t0 + t) * n + j0 + nb];
                    let mut t = 0;
                    // Four rows of `b` per pass halve the loads and stores of `crow`; each element
                    // still adds its four products one after another, in ascending `t`.
                    while t + 4 <= kb {
                        let (x0, x1, x2, x3) = (arow[t], arow[t + 1], arow[t + 2], arow[t + 3]);
                        let (b0, b1, b2, b3) = (brow(t), brow(t + 1), brow(t + 2), brow(t + 3));
                        for j in 0..nb {
                            let mut s = crow[j];
                            s = s + x0 * b0[j];
                            s = s + x1 * b1[j];
                            s = s + x2 * b2[j];
                            s = s + x3 * b3[j];
                            crow[j] = s;
                        }
                        t += 4;
                    }
                    while t < kb {
                        let x = arow[t];
                        for (s, y) in crow.iter_mut().zip(brow(t)) {
                            *s = *s + x * *y;
                        }
                        t += 1;
                    }
                }
            }
        }
    }
}

/// Matmul is defined on floats only; integer operands are refused before any engine sees them.
fn require_float(dtypes: [DType; 3]) -> Result<(), ExecError> {
    match dtypes.into_iter().find(|d| !d.is_float()) {
        Some(d) => Err(ExecError::UnsupportedOp {
            op: "matmul".into(),
            dtype: d.to_string(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod matmul_tests {
    use super::*;
    use crate::exec::dtype::{convert, encode};
    use std::time::Instant;

    /// The previous unblocked implementation, kept as the oracle for bit-exact equality.
    fn matmul_old(
        scratch: &mut Vec<f64>,
        c: (*mut u8, DType),
        a: (*mut u8, DType),
        b: (*mut u8, DType),
        (m, k, n): (usize, usize, usize),
    ) -> Result<(), ExecError> {
        require_float([a.1, b.1, c.1])?;
        scratch.clear();
        scratch.resize(m * k + k * n + m * n, 0.0);
        let (av, rest) = scratch.split_at_mut(m * k);
        let (bv, cv) = rest.split_at_mut(k * n);
        let wide = a.1 == DType::F64 || b.1 == DType::F64 || c.1 == DType::F64;
        // SAFETY: the interpreter checked each range for m·k, k·n and m·n elements.
        unsafe {
            f64::load(a.1, a.0, av);
            f64::load(b.1, b.0, bv);
        }
        if wide {
            for i in 0..m {
                for t in 0..k {
                    let x = av[i * k + t];
                    for j in 0..n {
                        cv[i * n + j] += x * bv[t * n + j];
                    }
                }
            }
        } else {
            // f32 accumulation: every partial product and sum is rounded to f32.
            let mut acc = vec![0f32; n];
            for i in 0..m {
                acc.iter_mut().for_each(|v| *v = 0.0);
                for t in 0..k {
                    let x = av[i * k + t] as f32;
                    for (j, s) in acc.iter_mut().enumerate() {
                        *s += x * bv[t * n + j] as f32;
                    }
                }
                for (j, s) in acc.iter().enumerate() {
                    cv[i * n + j] = *s as f64;
                }
            }
        }
        // The one deliberate difference from the old code: f32 sums are narrowed from f32, not
        // from f64, because `half`'s f64 → bf16 drops the low 32 bits before rounding and so
        // is not round-to-nearest-even for every f32 value (see `bf16_output_rounds_once`).
        if wide {
            unsafe { convert(DType::F64, cv.as_ptr() as *const u8, c.1, c.0, m * n) };
        } else {
            let narrow: Vec<f32> = cv.iter().map(|v| *v as f32).collect();
            unsafe { convert(DType::F32, narrow.as_ptr() as *const u8, c.1, c.0, m * n) };
        }
        Ok(())
    }

    type MatmulFn = fn(
        &mut Vec<f64>,
        (*mut u8, DType),
        (*mut u8, DType),
        (*mut u8, DType),
        (usize, usize, usize),
    ) -> Result<(), ExecError>;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }

    fn run(
        f: MatmulFn,
        dts: (DType, DType, DType),
        a: &[f32],
        b: &[f32],
        dims: (usize, usize, usize),
    ) -> Vec<u8> {
        let (cd, ad, bd) = dts;
        // One spare leading byte makes the operands unaligned when `off` is odd.
        let mut ab = encode(a, ad);
        let mut bb = encode(b, bd);
        let mut cb = vec![0xAAu8; dims.0 * dims.2 * cd.size()];
        let mut scratch = Vec::new();
        f(
            &mut scratch,
            (cb.as_mut_ptr(), cd),
            (ab.as_mut_ptr(), ad),
            (bb.as_mut_ptr(), bd),
            dims,
        )
        .unwrap();
        cb
    }

    #[test]
    fn blocked_matmul_is_bit_identical_to_the_naive_one() {
        use DType::*;
        let mut seed = 7u64;
        // Sizes straddle the 4-way unroll and both block edges (NB = 256, KB = 128).
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 7),
            (17, 131, 259),
            (9, 257, 300),
            (4, 0, 3),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| lcg(&mut seed)).collect();
            for dts in [
                (F32, F32, F32),
                (Bf16, Bf16, Bf16),
                (F16, F16, F16),
                (F16, F32, Bf16),
                (F64, F64, F64),
                (F32, F64, F32),
                (F8E4M3, F32, F32),
            ] {
                let new = run(matmul, dts, &a, &b, (m, k, n));
                let old = run(matmul_old, dts, &a, &b, (m, k, n));
                let bad = new.iter().zip(&old).position(|(x, y)| x != y);
                assert!(
                    bad.is_none(),
                    "{dts:?} {m}x{k}x{n}: first differing byte {bad:?}"
                );
            }
        }
    }

    #[test]
    fn unaligned_f32_operands_match() {
        let (m, k, n) = (5, 9, 6);
        let mut seed = 3u64;
        let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| lcg(&mut seed)).collect();
        let mut ab = vec![0u8; 1 + a.len() * 4];
        ab[1..].copy_from_slice(&encode(&a, DType::F32));
        let mut bb = encode(&b, DType::F32);
        let mut cb = vec![0u8; m * n * 4];
        let mut s = Vec::new();
        matmul(
            &mut s,
            (cb.as_mut_ptr(), DType::F32),
            (ab[1..].as_mut_ptr(), DType::F32),
            (bb.as_mut_ptr(), DType::F32),
            (m, k, n),
        )
        .unwrap();
        assert_eq!(
            cb,
            run(
                matmul_old,
                (DType::F32, DType::F32, DType::F32),
                &a,
                &b,
                (m, k, n)
            )
        );
    }

    #[test]
    fn integer_operands_are_refused() {
        let mut s = Vec::new();
        let mut x = [0u8; 4];
        let p = x.as_mut_ptr();
        let r = matmul(
            &mut s,
            (p, DType::F32),
            (p, DType::I32),
            (p, DType::F32),
            (1, 1, 1),
        );
        assert!(matches!(r, Err(ExecError::UnsupportedOp { .. })));
    }

    #[test]
    fn bf16_output_rounds_once() {
        // Just above the tie between 1 and 1 + 2^-7: nearest-even rounding must go up.
        let x = 1.0f32 + 2f32.powi(-8) + 2f32.powi(-23);
        let (mut a, mut b, mut c) = (x.to_le_bytes(), 1.0f32.to_le_bytes(), [0u8; 2]);
        let mut s = Vec::new();
        matmul(
            &mut s,
            (c.as_mut_ptr(), DType::Bf16),
            (a.as_mut_ptr(), DType::F32),
            (b.as_mut_ptr(), DType::F32),
            (1, 1, 1),
        )
        .unwrap();
        assert_eq!(half::bf16::from_le_bytes(c).to_f32(), 1.0 + 2f32.powi(-7));
    }

    /// Reports old vs new time for 256×512×512 f32 (informational, not a timed assertion).
    #[test]
    fn matmul_timing_report() {
        let (m, k, n) = (256, 512, 512);
        let mut seed = 11u64;
        let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| lcg(&mut seed)).collect();
        let dts = (DType::F32, DType::F32, DType::F32);
        let t = Instant::now();
        let old = run(matmul_old, dts, &a, &b, (m, k, n));
        let t_old = t.elapsed();
        let t = Instant::now();
        let new = run(matmul, dts, &a, &b, (m, k, n));
        let t_new = t.elapsed();
        assert_eq!(old, new);
        eprintln!("matmul {m}x{k}x{n} f32: old {t_old:?}, new {t_new:?}");
    }
}
