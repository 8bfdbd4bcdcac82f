//! Reduction numerics: a strict left fold in the accumulator type, rounded once into the
//! destination.
//!
//! Order is part of the contract: `dst = ((s0 ⊕ s1) ⊕ s2) ⊕ …` for every element, in operand
//! order, so every rank that folds the same operands gets bit-identical results, and a schedule
//! that folds rank contributions in rank order matches the sequential reference bit-exactly.
//! `avg` folds as `sum` and is divided by the group size in a separate pass over the output
//! ([`scale_avg`]); integers divide truncating toward zero. Integer sums wrap. `max`/`min`
//! propagate NaN.

use super::dtype::{convert, multiversion, Accum, DType, BLOCK};
use super::error::ExecError;
use std::mem::MaybeUninit;

/// The reduce ops (vocabulary shared with the compiler and the kernels).
pub use symsched_plan::ReduceOp;

/// Arithmetic of an accumulator type.
pub trait Combine: Accum + PartialOrd {
    fn add(a: Self, b: Self) -> Self;
    fn div_by(a: Self, p: u32) -> Self;
    fn is_nan(a: Self) -> bool;
}

impl Combine for f32 {
    #[inline(always)]
    fn add(a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn div_by(a: f32, p: u32) -> f32 {
        a / p as f32
    }
    #[inline(always)]
    fn is_nan(a: f32) -> bool {
        a.is_nan()
    }
}

impl Combine for f64 {
    #[inline(always)]
    fn add(a: f64, b: f64) -> f64 {
        a + b
    }
    #[inline(always)]
    fn div_by(a: f64, p: u32) -> f64 {
        a / p as f64
    }
    #[inline(always)]
    fn is_nan(a: f64) -> bool {
        a.is_nan()
    }
}

macro_rules! int_combine {
    ($t:ty) => {
        impl Combine for $t {
            #[inline(always)]
            fn add(a: $t, b: $t) -> $t {
                a.wrapping_add(b)
            }
            #[inline(always)]
            fn div_by(a: $t, p: u32) -> $t {
                // Group sizes are at most 64 so `p` fits every integer type.
                a / (p as $t)
            }
            #[inline(always)]
            fn is_nan(_a: $t) -> bool {
                false
            }
        }
    };
}
int_combine!(i32);
int_combine!(i64);
int_combine!(u8);

#[inline(always)]
fn max_of<A: Combine>(a: A, b: A) -> A {
    if A::is_nan(a) || a >= b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn min_of<A: Combine>(a: A, b: A) -> A {
    if A::is_nan(a) || a <= b {
        a
    } else {
        b
    }
}

// One straight loop per op (the op is chosen once per block, outside), compiled also for AVX2.
multiversion! {
    fn fold_sum<A: Combine>(acc: &mut [A], x: &[A]) {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = A::add(*a, *b);
        }
    }
}

multiversion! {
    fn fold_max<A: Combine>(acc: &mut [A], x: &[A]) {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = max_of(*a, *b);
        }
    }
}

multiversion! {
    fn fold_min<A: Combine>(acc: &mut [A], x: &[A]) {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = min_of(*a, *b);
        }
    }
}

/// One operand of a reduction: raw bytes and their dtype.
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub ptr: *const u8,
    pub dtype: DType,
}

/// Operands borrowed from symmetric memory are shared between threads by design.
unsafe impl Send for Operand {}

/// A stack block of accumulator values whose elements are initialised on first use: a call
/// touches only as many as its longest block, so a reduce of a few elements does not zero
/// (`memset`) a whole [`BLOCK`] per buffer, which for the 8-byte all-reduce was most of the
/// interpreter's per-launch work. Every element handed out is initialised, so the buffers'
/// contents before a load are never observable: a load overwrites every element it is given.
struct BlockBuf<A> {
    buf: MaybeUninit<[A; BLOCK]>,
    /// Elements `..init` are initialised.
    init: usize,
}

impl<A: Accum> BlockBuf<A> {
    #[inline(always)]
    fn new() -> Self {
        BlockBuf {
            buf: MaybeUninit::uninit(),
            init: 0,
        }
    }

    /// The first `k` (at most [`BLOCK`]) elements, initialising those not yet initialised.
    #[inline(always)]
    fn prefix(&mut self, k: usize) -> &mut [A] {
        let k = k.min(BLOCK);
        let base = self.buf.as_mut_ptr() as *mut A;
        if k > self.init {
            for i in self.init..k {
                // SAFETY: `i < BLOCK`, inside the buffer.
                unsafe { base.add(i).write(A::default()) };
            }
            self.init = k;
        }
        // SAFETY: elements `..k` are initialised (`k <= init`) and borrowed through `self`.
        unsafe { std::slice::from_raw_parts_mut(base, k) }
    }
}

/// Borrow `n` elements of `A` at `ptr` in place when they need no conversion, else convert them
/// into `tmp`.
#[inline(always)]
unsafe fn view<A: Accum>(op: Operand, n: usize, tmp: &mut BlockBuf<A>) -> &[A] {
    if op.dtype == A::DTYPE && (op.ptr as usize).is_multiple_of(std::mem::align_of::<A>()) {
        std::slice::from_raw_parts(op.ptr as *const A, n)
    } else {
        let t = tmp.prefix(n);
        A::load(op.dtype, op.ptr, t);
        t
    }
}

unsafe fn reduce_typed<A: Combine>(
    op: ReduceOp,
    dst: *mut u8,
    dst_dtype: DType,
    srcs: &[Operand],
    n: usize,
) {
    reduce_typed_then::<A>(op, dst, dst_dtype, srcs, n, &mut |_, _| {});
}

unsafe fn reduce_typed_then<A: Combine>(
    op: ReduceOp,
    dst: *mut u8,
    dst_dtype: DType,
    srcs: &[Operand],
    n: usize,
    after: &mut dyn FnMut(usize, usize),
) {
    // Initialised on first use, as far as the blocks reach (the first block is the longest).
    let mut acc = BlockBuf::<A>::new();
    let mut tmp = BlockBuf::<A>::new();
    let mut i = 0;
    while i < n {
        let k = BLOCK.min(n - i);
        let at = |o: &Operand| Operand {
            ptr: o.ptr.add(i * o.dtype.size()),
            dtype: o.dtype,
        };
        let acc = acc.prefix(k);
        A::load(srcs[0].dtype, at(&srcs[0]).ptr, acc);
        for s in &srcs[1..] {
            let x = view(at(s), k, &mut tmp);
            match op {
                ReduceOp::Sum | ReduceOp::Avg => fold_sum(acc, x),
                ReduceOp::Max => fold_max(acc, x),
                ReduceOp::Min => fold_min(acc, x),
            }
        }
        A::store(dst_dtype, acc, dst.add(i * dst_dtype.size()));
        after(i, k);
        i += k;
    }
}

/// `dst = srcs[0] ⊕ srcs[1] ⊕ …` over `n` elements, folded in `acc`.
///
/// # Safety
/// Every operand must be valid for `n` elements of its dtype and `dst` for `n` elements of
/// `dst_dtype`. `dst` may be exactly one of the operands (same pointer and dtype) but must not
/// partially overlap any.
pub unsafe fn reduce_raw(
    acc: DType,
    op: ReduceOp,
    dst: *mut u8,
    dst_dtype: DType,
    srcs: &[Operand],
    n: usize,
) -> Result<(), ExecError> {
    reduce_raw_then(acc, op, dst, dst_dtype, srcs, n, &mut |_, _| {})
}

/// [`reduce_raw`], calling `after(first, len)` once each block of elements
/// `first..first + len` of `dst` is final, while it is still in cache: the interpreter forwards
/// the block to the steps that consume it (puts, casts) without re-reading it from memory.
///
/// # Safety
/// As for [`reduce_raw`]; `after` must not write to `dst` or to any operand, except that
/// `after(first, len)` may write elements `first..first + len` of an operand (those of this
/// block, already folded): every operand of a block is read before `after` runs for it.
pub unsafe fn reduce_raw_then(
    acc: DType,
    op: ReduceOp,
    dst: *mut u8,
    dst_dtype: DType,
    srcs: &[Operand],
    n: usize,
    after: &mut dyn FnMut(usize, usize),
) -> Result<(), ExecError> {
    if srcs.is_empty() || n == 0 {
        return Ok(());
    }
    match acc {
        DType::F32 => reduce_typed_then::<f32>(op, dst, dst_dtype, srcs, n, after),
        DType::F64 => reduce_typed_then::<f64>(op, dst, dst_dtype, srcs, n, after),
        DType::I32 => reduce_typed_then::<i32>(op, dst, dst_dtype, srcs, n, after),
        DType::I64 => reduce_typed_then::<i64>(op, dst, dst_dtype, srcs, n, after),
        DType::U8 => reduce_typed_then::<u8>(op, dst, dst_dtype, srcs, n, after),
        d => {
            return Err(ExecError::UnsupportedOp {
                op: format!("reduce with accumulator {d}"),
                dtype: d.to_string(),
            })
        }
    }
    Ok(())
}

/// A one-operand reduce of `n` elements: `src` loaded into the accumulator `acc` and rounded
/// into `dst`, exactly as [`reduce_raw`] with the single operand computes it (a fused decode
/// runs it per block). An accumulator no reduce accepts does nothing: the reduce the link is
/// fused into has already refused it.
///
/// # Safety
/// `src` must be valid for `n` elements of `src_dtype`, `dst` for `n` of `dst_dtype`; they may
/// be identical but must not partially overlap.
pub unsafe fn convert_via_acc(
    acc: DType,
    src: *const u8,
    src_dtype: DType,
    dst: *mut u8,
    dst_dtype: DType,
    n: usize,
) {
    if dst_dtype == acc {
        // Loading into the accumulator type is the whole computation, and `convert` does
        // exactly that load straight into `dst`, without the reduce's block buffers (whose
        // zeroing a per-block link would pay every time).
        convert(src_dtype, src, dst_dtype, dst, n);
        return;
    }
    let srcs = [Operand {
        ptr: src,
        dtype: src_dtype,
    }];
    // The op does not matter with one operand (nothing is folded), nor does `avg` (its scaling
    // is a separate pass over the output).
    let _ = reduce_raw(acc, ReduceOp::Sum, dst, dst_dtype, &srcs, n);
}

unsafe fn scale_typed<A: Combine>(ptr: *mut u8, dtype: DType, n: usize, p: u32) {
    let mut tmp = BlockBuf::<A>::new();
    let mut i = 0;
    while i < n {
        let k = BLOCK.min(n - i);
        let at = ptr.add(i * dtype.size());
        let t = tmp.prefix(k);
        A::load(dtype, at, t);
        for v in t.iter_mut() {
            *v = A::div_by(*v, p);
        }
        A::store(dtype, t, at);
        i += k;
    }
}

/// The `avg` post-pass: divide `n` elements of `dtype` at `ptr` by `p` in the accumulator type.
///
/// # Safety
/// `ptr` must be valid for `n` elements of `dtype`.
pub unsafe fn scale_avg(acc: DType, ptr: *mut u8, dtype: DType, n: usize, p: u32) {
    match acc {
        DType::F32 => scale_typed::<f32>(ptr, dtype, n, p),
        DType::F64 => scale_typed::<f64>(ptr, dtype, n, p),
        DType::I32 => scale_typed::<i32>(ptr, dtype, n, p),
        DType::I64 => scale_typed::<i64>(ptr, dtype, n, p),
        DType::U8 => scale_typed::<u8>(ptr, dtype, n, p),
        _ => {}
    }
}

/// Fold typed slices (the sequential reference and tests use this).
pub fn reduce_slices<A: Combine>(op: ReduceOp, operands: &[&[A]], out: &mut [A]) {
    let srcs: Vec<Operand> = operands
        .iter()
        .map(|s| Operand {
            ptr: s.as_ptr() as *const u8,
            dtype: A::DTYPE,
        })
        .collect();
    // SAFETY: each operand is a live slice at least `out.len()` long (checked below).
    assert!(operands.iter().all(|s| s.len() >= out.len()));
    unsafe {
        reduce_typed::<A>(op, out.as_mut_ptr() as *mut u8, A::DTYPE, &srcs, out.len());
    }
}

/// Whether `op` is defined for `dtype` (every op is, for every data type; kept as the one place
/// that decides).
pub fn check_op(op: ReduceOp, dtype: DType) -> Result<(), ExecError> {
    if !dtype.is_data() {
        return Err(ExecError::UnsupportedOp {
            op: op.to_string(),
            dtype: dtype.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_sum_is_a_strict_left_fold() {
        let ops: Vec<Vec<f32>> = (0..5)
            .map(|r| {
                (0..2500)
                    .map(|i| ((i * 7 + r * 13) % 97) as f32 * 0.1 + 1e7 * (r % 2) as f32)
                    .collect()
            })
            .collect();
        let refs: Vec<&[f32]> = ops.iter().map(|v| v.as_slice()).collect();
        let mut out = vec![0f32; 2500];
        reduce_slices(ReduceOp::Sum, &refs, &mut out);
        for i in 0..2500 {
            let mut want = ops[0][i];
            for o in &ops[1..] {
                want += o[i];
            }
            assert_eq!(out[i].to_bits(), want.to_bits());
        }
    }

    #[test]
    fn max_min_propagate_nan_and_ints_wrap() {
        let a = [1.0f32, f32::NAN, 3.0];
        let b = [2.0f32, 0.0, f32::NAN];
        let mut out = [0f32; 3];
        reduce_slices(ReduceOp::Max, &[&a, &b], &mut out);
        assert_eq!(out[0], 2.0);
        assert!(out[1].is_nan() && out[2].is_nan());
        let x = [250u8, 3];
        let y = [10u8, 4];
        let mut o = [0u8; 2];
        reduce_slices(ReduceOp::Sum, &[&x, &y], &mut o);
        assert_eq!(o, [4, 7]);
    }

    #[test]
    fn bf16_accumulates_in_f32_and_rounds_once() {
        use half::bf16;
        // 1 + 2^-8 + 2^-8: each addend alone is a tie lost in bf16, together they survive.
        let v = [
            bf16::from_f32(1.0),
            bf16::from_f32(2f32.powi(-8)),
            bf16::from_f32(2f32.powi(-8)),
        ];
        let mut out = bf16::ZERO;
        let srcs: Vec<Operand> = v
            .iter()
            .map(|x| Operand {
                ptr: x as *const bf16 as *const u8,
                dtype: DType::Bf16,
            })
            .collect();
        unsafe {
            reduce_raw(
                DType::F32,
                ReduceOp::Sum,
                &mut out as *mut bf16 as *mut u8,
                DType::Bf16,
                &srcs,
                1,
            )
            .unwrap();
        }
        assert_eq!(out.to_f32(), 1.0 + 2f32.powi(-7));
    }

    /// The fused decode link computes what a one-operand reduce computes, byte for byte, for
    /// every wire → data pair (NaN payloads, subnormals and infinities among the inputs).
    #[test]
    fn convert_via_acc_is_a_one_operand_reduce() {
        let codes: Vec<u8> = (0..=255u8).cycle().take(4099 * 2).collect();
        for wire in [
            DType::F16,
            DType::Bf16,
            DType::F8E4M3,
            DType::F8E5M2,
            DType::F32,
        ] {
            for data in [DType::F32, DType::F64, DType::F16, DType::Bf16] {
                let n = codes.len() / wire.size();
                let acc = data.accumulator();
                let mut want = vec![0u8; n * data.size()];
                let mut got = vec![0u8; n * data.size()];
                let srcs = [Operand {
                    ptr: codes.as_ptr(),
                    dtype: wire,
                }];
                // SAFETY: `codes` holds `n` elements of `wire`, the outputs `n` of `data`.
                unsafe {
                    reduce_raw(acc, ReduceOp::Sum, want.as_mut_ptr(), data, &srcs, n).unwrap();
                    convert_via_acc(acc, codes.as_ptr(), wire, got.as_mut_ptr(), data, n);
                }
                assert!(want == got, "{wire} -> {data}");
            }
        }
    }

    #[test]
    fn avg_divides_after_the_sum() {
        let mut v = [9i32, -9, 10];
        unsafe { scale_avg(DType::I32, v.as_mut_ptr() as *mut u8, DType::I32, 3, 2) };
        assert_eq!(v, [4, -4, 5]);
    }
}
