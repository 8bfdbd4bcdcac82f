//! Element types and block conversions between them.
//!
//! Data types are what users hand us; fp8 (e4m3fn, e5m2) exists only as a *wire* format. The
//! accumulator is f32 for every 16- and 8-bit float, otherwise the data type itself. All
//! narrowing conversions round to nearest even, once: `half` for f32 → f16/bf16 (f64 goes
//! through [`f64_to_f32_odd`] first, which keeps that single rounding), the `float8` crate (a port
//! of NVIDIA's `cuda_fp8.hpp` conversion, saturating to the largest finite value, NaN kept) for
//! fp8, and Rust's `as` casts (IEEE RNE) for f64 → f32.
//!
//! Conversions work on blocks of at most [`BLOCK`] elements through stack buffers, so they never
//! allocate and never need the source or destination to be aligned (staged user memory may not
//! be).

use super::error::ExecError;
use float8::{F8E4M3, F8E5M2};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::sync::OnceLock;

/// Elements processed per inner block of a conversion or reduction.
pub const BLOCK: usize = 1024;

/// The element types (vocabulary shared with the compiler and the kernels).
pub use symsched_plan::DType;

/// The three dtypes of one launch, one per [`symsched_plan::ElemClass`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ElemTypes {
    pub data: DType,
    pub wire: DType,
    pub acc: DType,
}

impl ElemTypes {
    /// Checks that `data` is a user type and that `wire` can carry it: integers travel as
    /// themselves, floats may use any float wire.
    pub fn new(data: DType, wire: Option<DType>) -> Result<ElemTypes, ExecError> {
        if !data.is_data() {
            return Err(ExecError::DtypeMismatch(format!(
                "{data} is a wire format only, not a data type"
            )));
        }
        let wire = wire.unwrap_or(data);
        if data.is_float() != wire.is_float() || (!data.is_float() && wire != data) {
            return Err(ExecError::DtypeMismatch(format!(
                "data type {data} cannot travel as {wire}"
            )));
        }
        Ok(ElemTypes {
            data,
            wire,
            acc: data.accumulator(),
        })
    }

    pub fn of(&self, class: symsched_plan::ElemClass) -> DType {
        match class {
            symsched_plan::ElemClass::Data => self.data,
            symsched_plan::ElemClass::Wire => self.wire,
            symsched_plan::ElemClass::Acc => self.acc,
        }
    }
}

fn e4m3_table() -> &'static [f32; 256] {
    static T: OnceLock<[f32; 256]> = OnceLock::new();
    T.get_or_init(|| std::array::from_fn(|b| F8E4M3::from_bits(b as u8).to_f32()))
}

fn e5m2_table() -> &'static [f32; 256] {
    static T: OnceLock<[f32; 256]> = OnceLock::new();
    T.get_or_init(|| std::array::from_fn(|b| F8E5M2::from_bits(b as u8).to_f32()))
}

/// Decode one fp8 code.
pub fn fp8_to_f32(dtype: DType, code: u8) -> f32 {
    match dtype {
        DType::F8E5M2 => e5m2_table()[code as usize],
        _ => e4m3_table()[code as usize],
    }
}

/// Encode one value as fp8 (round to nearest even, saturating, NaN kept).
pub fn f64_to_fp8(dtype: DType, x: f64) -> u8 {
    match dtype {
        DType::F8E5M2 => F8E5M2::from_f64(x).to_bits(),
        _ => F8E4M3::from_f64(x).to_bits(),
    }
}

/// Defines `fn $name` whose body is compiled twice, for the baseline target and with AVX2, and
/// picks the AVX2 copy at run time when the CPU has it. The hot block loops (conversions and
/// folds) are written as plain slice loops; AVX2 doubles the vector width the compiler gives
/// them without changing a single result (integer and IEEE operations only, no FMA contraction).
///
/// With a leading `avx512`, a third copy for AVX-512 F/BW/VL is tried first. Only the
/// conversion kernels ask for it: their narrowing stores become single truncating packs
/// (`vpmovdw`/`vpmovdb`) where AVX2 needs pack-and-permute sequences, which measured 1.5–2×
/// faster on L1-resident blocks; the folds stay at AVX2 because they are memory-bound already.
macro_rules! multiversion {
    (@impl $wide:tt, $(#[$m:meta])* $vis:vis fn $name:ident$(<$g:ident: $bound:path>)?($($a:ident: $t:ty),*) $body:block) => {
        $(#[$m])*
        #[inline]
        $vis fn $name$(<$g: $bound>)?($($a: $t),*) {
            #[inline(always)]
            fn body$(<$g: $bound>)?($($a: $t),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                $crate::exec::dtype::multiversion!(@avx512 $wide, body$(<$g>)?, ($($a: $t),*));
                #[target_feature(enable = "avx2")]
                unsafe fn avx2$(<$g: $bound>)?($($a: $t),*) {
                    body($($a),*)
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2 (checked just above).
                    return unsafe { avx2($($a),*) };
                }
            }
            body($($a),*)
        }
    };
    (@avx512 false, $($rest:tt)*) => {};
    (@avx512 true, $body:ident, ($($a:ident: $t:ty),*)) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        unsafe fn avx512($($a: $t),*) {
            $body($($a),*)
        }
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU supports AVX-512 F, BW and VL (checked just above).
            return unsafe { avx512($($a),*) };
        }
    };
    (avx512 $($rest:tt)*) => {
        $crate::exec::dtype::multiversion!(@impl true, $($rest)*);
    };
    ($($rest:tt)*) => {
        $crate::exec::dtype::multiversion!(@impl false, $($rest)*);
    };
}
pub(crate) use multiversion;

multiversion! {
    avx512
    /// f32 → bf16 bits exactly as `half::bf16::from_f32` (nearest even; NaN quieted, payload
    /// top kept), written branch-free: adding `0x7fff` plus the kept lsb carries into bit 16
    /// exactly when the dropped half is above the tie, or at it with an odd lsb.
    fn encode_bf16_block(vals: &[f32], out: &mut [u16]) {
        for (o, v) in out.iter_mut().zip(vals) {
            let x = v.to_bits();
            let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
            let nan = (x >> 16) | 0x40;
            *o = if x & 0x7fff_ffff > 0x7f80_0000 { nan } else { rounded } as u16;
        }
    }
}

multiversion! {
    avx512
    /// bf16 bits → f32 exactly as `half::bf16::to_f32` (NaN quieted).
    fn decode_bf16_block(codes: &[u16], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(codes) {
            let x = *c as u32;
            let x = if x & 0x7fff > 0x7f80 { x | 0x40 } else { x };
            *o = f32::from_bits(x << 16);
        }
    }
}

multiversion! {
    avx512
    fn encode_e4m3_block(vals: &[f32], out: &mut [u8]) {
        for (o, v) in out.iter_mut().zip(vals) {
            *o = encode_e4m3(*v);
        }
    }
}

multiversion! {
    avx512
    fn encode_e5m2_block(vals: &[f32], out: &mut [u8]) {
        for (o, v) in out.iter_mut().zip(vals) {
            *o = encode_e5m2(*v);
        }
    }
}

multiversion! {
    avx512
    /// e4m3 codes → f32 exactly as the `float8` crate (the 256-entry table): the seven magnitude
    /// bits shifted into an f32's exponent and mantissa fields read as a value 2^120 too small
    /// (bias 127 against 7), subnormal codes included as f32 subnormals, and the exact
    /// power-of-two product fixes the scale. Arithmetic instead of a table lookup so the loop
    /// vectorises (a lookup is a gather). `nan` is the table's value for both NaN codes.
    fn decode_e4m3_block(nan: u32, codes: &[u8], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(codes) {
            let c = *c as u32;
            let mag = c & 0x7f;
            let v = (f32::from_bits(mag << 20) * f32::from_bits((127 + 120) << 23)).to_bits();
            *o = f32::from_bits(if mag == 0x7f { nan } else { v | (c & 0x80) << 24 });
        }
    }
}

multiversion! {
    avx512
    /// e5m2 codes → f32 exactly as the `float8` crate, by the same scaling as
    /// [`decode_e4m3_block`] (bias 15: a factor 2^112); the top exponent holds ±infinity and
    /// the NaN codes, which all decode to the table's `nan`.
    fn decode_e5m2_block(nan: u32, codes: &[u8], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(codes) {
            let c = *c as u32;
            let mag = c & 0x7f;
            let sign = (c & 0x80) << 24;
            let v = (f32::from_bits(mag << 21) * f32::from_bits((127 + 112) << 23)).to_bits();
            let special = if mag == 0x7c { 0x7f80_0000 | sign } else { nan };
            *o = f32::from_bits(if mag >= 0x7c { special } else { v | sign });
        }
    }
}

/// f32 → f16 bits for a block: F16C's `vcvtps2ph` with round-to-nearest-even when the CPU has
/// it (the instruction `half` itself uses, per element, on such CPUs: 3× faster in blocks of
/// eight), else `half`'s slice conversion.
fn encode_f16_block(vals: &[f32], out: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("f16c") && std::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU supports F16C and AVX (checked just above).
        return unsafe { f16c::encode(vals, out) };
    }
    use half::slice::HalfBitsSliceExt;
    let n = out.len();
    out.reinterpret_cast_mut::<f16>()
        .convert_from_f32_slice(&vals[..n]);
}

/// f16 bits → f32 for a block, as [`encode_f16_block`] chooses (`vcvtph2ps` is exact).
fn decode_f16_block(codes: &[u16], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("f16c") && std::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU supports F16C and AVX (checked just above).
        return unsafe { f16c::decode(codes, out) };
    }
    use half::slice::HalfBitsSliceExt;
    codes[..out.len()]
        .reinterpret_cast::<f16>()
        .convert_to_f32_slice(out);
}

/// The F16C block loops behind [`encode_f16_block`] and [`decode_f16_block`].
#[cfg(target_arch = "x86_64")]
mod f16c {
    use half::f16;
    use std::arch::x86_64::{
        __m128i, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps,
        _mm_loadu_si128, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
    };

    /// # Safety
    /// The CPU must support F16C and AVX.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn encode(vals: &[f32], out: &mut [u16]) {
        let n = out.len().min(vals.len());
        let body = n & !7;
        for i in (0..body).step_by(8) {
            // SAFETY: i + 8 <= body <= both lengths; unaligned loads and stores.
            let x = _mm256_loadu_ps(vals.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            _mm_storeu_si128(out.as_mut_ptr().add(i) as *mut __m128i, h);
        }
        for i in body..n {
            out[i] = f16::from_f32(vals[i]).to_bits();
        }
    }

    /// # Safety
    /// The CPU must support F16C and AVX.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn decode(codes: &[u16], out: &mut [f32]) {
        let n = out.len().min(codes.len());
        let body = n & !7;
        for i in (0..body).step_by(8) {
            // SAFETY: i + 8 <= body <= both lengths; unaligned loads and stores.
            let h = _mm_loadu_si128(codes.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        for i in body..n {
            out[i] = f16::from_bits(codes[i]).to_f32();
        }
    }
}

/// Encode one f32 as fp8: the same codes as [`f64_to_fp8`] (round to nearest even, saturating,
/// NaN kept), computed branch-free on the f32 bits so that block stores vectorise.
pub fn f32_to_fp8(dtype: DType, x: f32) -> u8 {
    match dtype {
        DType::F8E5M2 => encode_e5m2(x),
        _ => encode_e4m3(x),
    }
}

#[inline(always)]
fn encode_e4m3(x: f32) -> u8 {
    encode_fp8::<3, 7, 0x7e, false>(x)
}

#[inline(always)]
fn encode_e5m2(x: f32) -> u8 {
    encode_fp8::<2, 15, 0x7b, true>(x)
}

/// fp8 with `MAN` mantissa bits and exponent bias `BIAS`, largest finite code `MAXNORM`.
///
/// Matches the `float8` crate (NVIDIA's satfinite conversion) bit for bit: magnitudes at or
/// above the smallest normal round their f32 significand at the fp8 precision, the carry
/// walking into the exponent, and clamp to `MAXNORM` (infinities included); smaller ones are
/// scaled so the smallest subnormal is 1 (exact: a power of two) and rounded to an integer by
/// adding 2^23; NaN becomes 0x7f (e4m3) or 0x7e plus the top two payload bits (e5m2).
#[inline(always)]
fn encode_fp8<const MAN: u32, const BIAS: u32, const MAXNORM: u32, const E5M2: bool>(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7fff_ffff;
    let shift = 23 - MAN;
    let rounded = (abs + ((1 << (shift - 1)) - 1) + ((abs >> shift) & 1)) >> shift;
    let normal = rounded.saturating_sub((127 - BIAS) << MAN).min(MAXNORM);
    let scale = f32::from_bits((127 + BIAS - 1 + MAN) << 23);
    let subnormal = ((f32::from_bits(abs) * scale) + 8_388_608.0)
        .to_bits()
        .wrapping_sub(0x4b00_0000);
    let code = if abs >= (127 + 1 - BIAS) << 23 {
        normal
    } else {
        subnormal
    };
    let nan = if E5M2 {
        0x7e | ((bits >> 21) & 3)
    } else {
        0x7f
    };
    let code = if abs > 0x7f80_0000 { nan } else { code };
    sign | code as u8
}

/// f64 → f32 rounded *to odd*: truncated toward zero, with the last bit set when anything was
/// dropped. f32 keeps at least two more significand bits than f16 and bf16 over their whole
/// range (subnormals included), so rounding this value to nearest even in f16/bf16 gives exactly
/// the nearest-even rounding of the original f64 (the sticky bit remembers what the truncation
/// dropped, so no tie is created or destroyed). NaN passes through as `as` converts it.
pub fn f64_to_f32_odd(x: f64) -> f32 {
    let r = x as f32;
    if x.is_nan() || r as f64 == x {
        return r;
    }
    let mut bits = r.to_bits();
    // `as` rounded away from zero: step back one code toward zero (sign-magnitude encoding);
    // an overflow to infinity steps back to the largest finite value.
    if (r as f64).abs() > x.abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

/// An accumulator element type: loads blocks from, and stores blocks into, raw bytes of a dtype.
///
/// # Safety contract of the raw-pointer methods
/// `src`/`dst` must be valid for `out.len() * dtype.size()` bytes; no alignment is needed.
pub trait Accum: Copy + Default + Send + Sync + 'static {
    /// The dtype this accumulator is.
    const DTYPE: DType;
    /// Convert `out.len()` elements of `dtype` at `src` into `out`.
    ///
    /// # Safety
    /// See the trait docs.
    unsafe fn load(dtype: DType, src: *const u8, out: &mut [Self]);
    /// Round `vals` into `dtype` at `dst`.
    ///
    /// # Safety
    /// See the trait docs.
    unsafe fn store(dtype: DType, vals: &[Self], dst: *mut u8);
}

/// Whether `p` may be viewed as a slice of `T` (staged user memory may be unaligned).
fn is_aligned<T>(p: *const u8) -> bool {
    (p as usize).is_multiple_of(std::mem::align_of::<T>())
}

/// Copy raw bytes into a typed stack buffer (alignment-agnostic).
unsafe fn raw_into<T: Copy>(src: *const u8, out: &mut [T]) {
    std::ptr::copy_nonoverlapping(src, out.as_mut_ptr() as *mut u8, std::mem::size_of_val(out));
}

unsafe fn raw_from<T: Copy>(vals: &[T], dst: *mut u8) {
    std::ptr::copy_nonoverlapping(vals.as_ptr() as *const u8, dst, std::mem::size_of_val(vals));
}

impl Accum for f32 {
    const DTYPE: DType = DType::F32;
    unsafe fn load(dtype: DType, src: *const u8, out: &mut [f32]) {
        let n = out.len();
        match dtype {
            DType::F32 => raw_into(src, out),
            DType::F16 | DType::Bf16 => {
                let decode = if dtype == DType::F16 {
                    decode_f16_block
                } else {
                    decode_bf16_block
                };
                if is_aligned::<u16>(src) {
                    decode(std::slice::from_raw_parts(src as *const u16, n), out);
                } else {
                    let mut tmp = [0u16; BLOCK];
                    for (o, t) in out.chunks_mut(BLOCK).zip((0..).step_by(BLOCK)) {
                        let k = o.len();
                        raw_into(src.add(t * 2), &mut tmp[..k]);
                        decode(&tmp[..k], o);
                    }
                }
            }
            DType::F8E4M3 => {
                let nan = e4m3_table()[0x7f].to_bits();
                decode_e4m3_block(nan, std::slice::from_raw_parts(src, n), out);
            }
            DType::F8E5M2 => {
                let nan = e5m2_table()[0x7f].to_bits();
                decode_e5m2_block(nan, std::slice::from_raw_parts(src, n), out);
            }
            DType::F64 => {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = (src.add(i * 8) as *const f64).read_unaligned() as f32;
                }
            }
            // Integer classes never meet a float accumulator: `ElemTypes::new` refuses the mix.
            DType::I32 | DType::I64 | DType::U8 => out[..n].fill(0.0),
        }
    }

    unsafe fn store(dtype: DType, vals: &[f32], dst: *mut u8) {
        match dtype {
            DType::F32 => raw_from(vals, dst),
            DType::F16 | DType::Bf16 => {
                let encode = if dtype == DType::F16 {
                    encode_f16_block
                } else {
                    encode_bf16_block
                };
                if is_aligned::<u16>(dst) {
                    encode(
                        vals,
                        std::slice::from_raw_parts_mut(dst as *mut u16, vals.len()),
                    );
                } else {
                    let mut tmp = [0u16; BLOCK];
                    for (v, t) in vals.chunks(BLOCK).zip((0..).step_by(BLOCK)) {
                        let k = v.len();
                        encode(v, &mut tmp[..k]);
                        raw_from(&tmp[..k], dst.add(t * 2));
                    }
                }
            }
            DType::F8E4M3 => {
                encode_e4m3_block(vals, std::slice::from_raw_parts_mut(dst, vals.len()))
            }
            DType::F8E5M2 => {
                encode_e5m2_block(vals, std::slice::from_raw_parts_mut(dst, vals.len()))
            }
            DType::F64 => {
                for (i, v) in vals.iter().enumerate() {
                    (dst.add(i * 8) as *mut f64).write_unaligned(*v as f64);
                }
            }
            DType::I32 | DType::I64 | DType::U8 => {}
        }
    }
}

impl Accum for f64 {
    const DTYPE: DType = DType::F64;
    unsafe fn load(dtype: DType, src: *const u8, out: &mut [f64]) {
        match dtype {
            DType::F64 => raw_into(src, out),
            _ => {
                let mut tmp = [0f32; BLOCK];
                for (o, t) in out.chunks_mut(BLOCK).zip((0..).step_by(BLOCK)) {
                    let k = o.len();
                    // Every non-f64 float widens exactly into f32, so going through it is exact.
                    f32::load(dtype, src.add(t * dtype.size()), &mut tmp[..k]);
                    for (d, s) in o.iter_mut().zip(&tmp[..k]) {
                        *d = *s as f64;
                    }
                }
            }
        }
    }

    unsafe fn store(dtype: DType, vals: &[f64], dst: *mut u8) {
        match dtype {
            DType::F64 => raw_from(vals, dst),
            DType::F32 => {
                for (i, v) in vals.iter().enumerate() {
                    (dst.add(i * 4) as *mut f32).write_unaligned(*v as f32);
                }
            }
            // Round once: `half`'s f64 conversions drop the low 32 bits (or go through an RNE
            // f32) before rounding, so they are not nearest-even; see [`f64_to_f32_odd`].
            DType::F16 => {
                for (i, v) in vals.iter().enumerate() {
                    let h = f16::from_f32(f64_to_f32_odd(*v));
                    (dst.add(i * 2) as *mut u16).write_unaligned(h.to_bits());
                }
            }
            DType::Bf16 => {
                for (i, v) in vals.iter().enumerate() {
                    let h = bf16::from_f32(f64_to_f32_odd(*v));
                    (dst.add(i * 2) as *mut u16).write_unaligned(h.to_bits());
                }
            }
            DType::F8E4M3 | DType::F8E5M2 => {
                for (i, v) in vals.iter().enumerate() {
                    *dst.add(i) = f64_to_fp8(dtype, *v);
                }
            }
            DType::I32 | DType::I64 | DType::U8 => {}
        }
    }
}

macro_rules! int_accum {
    ($t:ty, $d:expr) => {
        impl Accum for $t {
            const DTYPE: DType = $d;
            unsafe fn load(_dtype: DType, src: *const u8, out: &mut [$t]) {
                raw_into(src, out)
            }
            unsafe fn store(_dtype: DType, vals: &[$t], dst: *mut u8) {
                raw_from(vals, dst)
            }
        }
    };
}
int_accum!(i32, DType::I32);
int_accum!(i64, DType::I64);
int_accum!(u8, DType::U8);

/// Convert `n` elements from `src` (of `from`) to `dst` (of `to`), rounding to nearest even.
/// Same-type conversions are a plain copy.
///
/// # Safety
/// `src` must be valid for reading `n * from.size()` bytes and `dst` for writing
/// `n * to.size()` bytes; the ranges must not overlap unless `from == to` and `src == dst`.
pub unsafe fn convert(from: DType, src: *const u8, to: DType, dst: *mut u8, n: usize) {
    if from == to {
        if !std::ptr::eq(src, dst) {
            std::ptr::copy_nonoverlapping(src, dst, n * from.size());
        }
        return;
    }
    if from == DType::F64 || to == DType::F64 {
        let mut tmp = [0f64; BLOCK];
        for i in (0..n).step_by(BLOCK) {
            let k = BLOCK.min(n - i);
            f64::load(from, src.add(i * from.size()), &mut tmp[..k]);
            f64::store(to, &tmp[..k], dst.add(i * to.size()));
        }
    } else if from == DType::F32 && is_aligned::<f32>(src) {
        // Aligned f32 is narrowed, and aligned f32 destinations widened into, in place: no
        // copy through a buffer, nor the zeroing of one, which a reduce's fused links would
        // otherwise pay for every block.
        f32::store(to, std::slice::from_raw_parts(src as *const f32, n), dst);
    } else if to == DType::F32 && is_aligned::<f32>(dst) {
        f32::load(
            from,
            src,
            std::slice::from_raw_parts_mut(dst as *mut f32, n),
        );
    } else {
        let mut tmp = [0f32; BLOCK];
        for i in (0..n).step_by(BLOCK) {
            let k = BLOCK.min(n - i);
            f32::load(from, src.add(i * from.size()), &mut tmp[..k]);
            f32::store(to, &tmp[..k], dst.add(i * to.size()));
        }
    }
}

/// `vals` rounded into a new buffer of `to` elements, as [`convert`] does.
pub fn encode<T: Accum>(vals: &[T], to: DType) -> Vec<u8> {
    let mut out = vec![0u8; vals.len() * to.size()];
    // SAFETY: `vals` holds `vals.len()` elements of `T::DTYPE` and `out` as many of `to`.
    unsafe {
        convert(
            T::DTYPE,
            vals.as_ptr() as *const u8,
            to,
            out.as_mut_ptr(),
            vals.len(),
        )
    };
    out
}

/// The first `out.len()` elements of `bytes` (of `from`) converted into `out`, as [`convert`]
/// does.
///
/// # Panics
/// If `bytes` holds fewer than `out.len()` elements of `from`: callers size both from the same
/// element count, so a short buffer is a bug, not an input error.
pub fn decode<T: Accum>(from: DType, bytes: &[u8], out: &mut [T]) {
    assert!(
        bytes.len() >= out.len() * from.size(),
        "decode: {} bytes hold fewer than {} {from} elements",
        bytes.len(),
        out.len()
    );
    // SAFETY: checked just above; `out` is a live slice of `T::DTYPE`.
    unsafe {
        convert(
            from,
            bytes.as_ptr(),
            T::DTYPE,
            out.as_mut_ptr() as *mut u8,
            out.len(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference decoding straight from the format definition.
    fn reference_decode(code: u8, exp_bits: u32, man_bits: u32, bias: i32, fnuz_e4m3: bool) -> f32 {
        let sign = if code & 0x80 != 0 { -1.0f64 } else { 1.0 };
        let e = ((code >> man_bits) as u32) & ((1 << exp_bits) - 1);
        let m = (code as u32) & ((1 << man_bits) - 1);
        let emax = (1 << exp_bits) - 1;
        if fnuz_e4m3 {
            // e4m3fn: only S.1111.111 is NaN, no infinities.
            if e == emax && m == (1 << man_bits) - 1 {
                return f32::NAN;
            }
        } else if e == emax {
            return if m == 0 {
                (sign * f64::INFINITY) as f32
            } else {
                f32::NAN
            };
        }
        let v = if e == 0 {
            (m as f64) / (1u32 << man_bits) as f64 * 2f64.powi(1 - bias)
        } else {
            (1.0 + (m as f64) / (1u32 << man_bits) as f64) * 2f64.powi(e as i32 - bias)
        };
        (sign * v) as f32
    }

    fn check_format(dtype: DType, exp_bits: u32, man_bits: u32, bias: i32) {
        let fn_e4m3 = dtype == DType::F8E4M3;
        let mut finite: Vec<(f64, u8)> = Vec::new();
        for code in 0..=255u8 {
            let want = reference_decode(code, exp_bits, man_bits, bias, fn_e4m3);
            let got = fp8_to_f32(dtype, code);
            if want.is_nan() {
                assert!(got.is_nan(), "{dtype} code {code:#04x}: want NaN got {got}");
                continue;
            }
            assert_eq!(got, want, "{dtype} decode of {code:#04x}");
            if want.is_finite() {
                // Every finite code encodes back to itself (zeros keep their sign).
                assert_eq!(
                    f64_to_fp8(dtype, want as f64),
                    code,
                    "{dtype} roundtrip of {want}"
                );
                if code & 0x80 == 0 {
                    finite.push((want as f64, code));
                }
            }
        }
        finite.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        // Ties go to the even code; values off the midpoint go to the nearer code.
        for w in finite.windows(2) {
            let ((lo, lc), (hi, hc)) = (w[0], w[1]);
            let mid = (lo + hi) / 2.0;
            let even = if lc % 2 == 0 { lc } else { hc };
            assert_eq!(
                f64_to_fp8(dtype, mid),
                even,
                "{dtype} tie between {lo} and {hi}"
            );
            assert_eq!(f64_to_fp8(dtype, -mid), even | 0x80, "{dtype} negative tie");
            assert_eq!(
                f32_to_fp8(dtype, mid as f32),
                even,
                "{dtype} f32 tie {lo}..{hi}"
            );
            assert_eq!(
                f32_to_fp8(dtype, -mid as f32),
                even | 0x80,
                "{dtype} f32 tie"
            );
            let eps = (hi - lo) / 8.0;
            assert_eq!(f64_to_fp8(dtype, mid - eps), lc, "{dtype} below mid {mid}");
            assert_eq!(f64_to_fp8(dtype, mid + eps), hc, "{dtype} above mid {mid}");
        }
        // Beyond the largest finite value the wire saturates instead of overflowing.
        let max = finite.last().unwrap();
        assert_eq!(f64_to_fp8(dtype, max.0 * 4.0), max.1);
        assert!(fp8_to_f32(dtype, f64_to_fp8(dtype, f64::NAN)).is_nan());
    }

    /// The fast f32 encoder against the `float8` crate on a dense sample of all f32 bit
    /// patterns: every top-16-bit prefix (each sign, exponent and the mantissa bits that decide
    /// rounding in either format) with low halves that make exact ties, just-off ties and
    /// sticky-only patterns, plus pseudo-random low halves.
    #[test]
    fn fast_fp8_encode_matches_float8_bit_for_bit() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for hi in 0..=0xffffu32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            for lo in [
                0u32,
                1,
                0x7fff,
                0x8000,
                0x8001,
                0xffff,
                seed as u32 & 0xffff,
            ] {
                let x = f32::from_bits(hi << 16 | lo);
                for dtype in [DType::F8E4M3, DType::F8E5M2] {
                    assert_eq!(
                        f32_to_fp8(dtype, x),
                        f64_to_fp8(dtype, x as f64),
                        "{dtype} encode of {x:e} ({:#010x})",
                        x.to_bits()
                    );
                }
            }
        }
        for x in [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN_POSITIVE,
            0.0,
            -0.0,
        ] {
            for dtype in [DType::F8E4M3, DType::F8E5M2] {
                assert_eq!(
                    f32_to_fp8(dtype, x),
                    f64_to_fp8(dtype, x as f64),
                    "{dtype} {x}"
                );
            }
        }
    }

    /// Every f32 bit pattern, both formats (about a minute in release; run with `--ignored`).
    #[test]
    #[ignore]
    fn fast_fp8_encode_exhaustive() {
        for bits in 0..=u32::MAX {
            let x = f32::from_bits(bits);
            for dtype in [DType::F8E4M3, DType::F8E5M2] {
                assert_eq!(
                    f32_to_fp8(dtype, x),
                    f64_to_fp8(dtype, x as f64),
                    "{bits:#010x}"
                );
            }
        }
    }

    /// Throughput of the block conversions over 4 Mi elements (informational; `--ignored`).
    #[test]
    #[ignore]
    fn conversion_throughput_report() {
        let n = 4 << 20;
        let vals: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) * 0.01).collect();
        let mut wire = vec![0u8; n * 2];
        let mut back = vec![0f32; n];
        let mut copy = vec![0f32; n];
        for _ in 0..2 {
            let t = std::time::Instant::now();
            copy.copy_from_slice(std::hint::black_box(&vals));
            std::hint::black_box(&copy);
            let gbs = (n * 4) as f64 / t.elapsed().as_secs_f64() / 1e9;
            eprintln!("f32 copy (baseline): {gbs:.2} GB/s");
        }
        // The per-element `float8` encoder the block store used before, for comparison.
        let t = std::time::Instant::now();
        for (o, v) in wire.iter_mut().zip(std::hint::black_box(&vals)) {
            *o = f64_to_fp8(DType::F8E4M3, *v as f64);
        }
        std::hint::black_box(&wire);
        let gbs = (n * 4) as f64 / t.elapsed().as_secs_f64() / 1e9;
        eprintln!("e4m3 via float8 per element (old path): encode {gbs:.2} GB/s of f32");
        // The first round also pays the page faults of `wire` and `back`.
        for dtype in [
            DType::Bf16,
            DType::Bf16,
            DType::F16,
            DType::F8E4M3,
            DType::F8E5M2,
        ] {
            let t = std::time::Instant::now();
            unsafe {
                convert(
                    DType::F32,
                    vals.as_ptr() as *const u8,
                    dtype,
                    wire.as_mut_ptr(),
                    n,
                )
            };
            let enc = t.elapsed();
            let t = std::time::Instant::now();
            unsafe {
                convert(
                    dtype,
                    wire.as_ptr(),
                    DType::F32,
                    back.as_mut_ptr() as *mut u8,
                    n,
                )
            };
            let dec = t.elapsed();
            let gbs = |d: std::time::Duration| (n * 4) as f64 / d.as_secs_f64() / 1e9;
            eprintln!(
                "{dtype}: encode {:.2} GB/s of f32, decode {:.2} GB/s of f32",
                gbs(enc),
                gbs(dec)
            );
        }
    }

    /// The branch-free bf16 kernels against `half` on the same dense sample of f32 patterns
    /// (and every bf16 code for decoding), NaN payloads included.
    #[test]
    fn bf16_kernels_match_half_bit_for_bit() {
        let mut vals = Vec::new();
        for hi in 0..=0xffffu32 {
            for lo in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
                vals.push(f32::from_bits(hi << 16 | lo));
            }
        }
        let mut out = vec![0u16; vals.len()];
        encode_bf16_block(&vals, &mut out);
        for (v, o) in vals.iter().zip(&out) {
            assert_eq!(
                *o,
                bf16::from_f32(*v).to_bits(),
                "encode {:#010x}",
                v.to_bits()
            );
        }
        let codes: Vec<u16> = (0..=u16::MAX).collect();
        let mut back = vec![0f32; codes.len()];
        decode_bf16_block(&codes, &mut back);
        for (c, b) in codes.iter().zip(&back) {
            assert_eq!(
                b.to_bits(),
                bf16::from_bits(*c).to_f32().to_bits(),
                "decode {c:#06x}"
            );
        }
    }

    /// f32 bit patterns that decide rounding in every wire format: each top-16-bit prefix
    /// (sign, exponent, the mantissa bits where bf16 and fp8 round) with low halves that make
    /// exact ties, just-off ties and sticky-only patterns for bf16 (bit 15) and f16 (bit 12),
    /// plus a pseudo-random low half. NaN, ±inf, subnormals, zeros and values past every
    /// format's largest finite value are among the prefixes. The odd length leaves a tail
    /// that no vector loop covers.
    fn dense_f32_sample() -> Vec<f32> {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut vals = Vec::new();
        for hi in 0..=0xffffu32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            for lo in [
                0u32,
                1,
                0x0fff,
                0x1000,
                0x1001,
                0x2000,
                0x3000,
                0x7fff,
                0x8000,
                0x8001,
                0xffff,
                seed as u32 & 0xffff,
            ] {
                vals.push(f32::from_bits(hi << 16 | lo));
            }
        }
        vals.push(f32::MIN_POSITIVE);
        vals
    }

    /// Scalar reference encoding of one f32 (the per-element code the block kernels replace).
    fn scalar_encode(dtype: DType, x: f32) -> u16 {
        match dtype {
            DType::F16 => f16::from_f32(x).to_bits(),
            DType::Bf16 => bf16::from_f32(x).to_bits(),
            _ => f64_to_fp8(dtype, x as f64) as u16,
        }
    }

    /// The block encoders (`convert`, i.e. whichever of the F16C / AVX-512 / AVX2 / baseline
    /// copies this CPU picks) give the scalar codes bit for bit on the dense sample, from
    /// aligned and unaligned destinations.
    #[test]
    fn block_encoders_match_the_scalar_conversions() {
        let vals = dense_f32_sample();
        for dtype in [DType::F16, DType::Bf16, DType::F8E4M3, DType::F8E5M2] {
            let w = dtype.size();
            for off in [0, 1] {
                let mut bytes = vec![0u8; vals.len() * w + 1];
                // SAFETY: `bytes` holds `vals.len()` elements of `dtype` after `off`.
                unsafe {
                    convert(
                        DType::F32,
                        vals.as_ptr() as *const u8,
                        dtype,
                        bytes.as_mut_ptr().add(off),
                        vals.len(),
                    )
                };
                for (i, x) in vals.iter().enumerate() {
                    let at = off + i * w;
                    let got = if w == 2 {
                        u16::from_le_bytes([bytes[at], bytes[at + 1]])
                    } else {
                        bytes[at] as u16
                    };
                    assert_eq!(
                        got,
                        scalar_encode(dtype, *x),
                        "{dtype} off {off}: encode of {x:e} ({:#010x})",
                        x.to_bits()
                    );
                }
            }
        }
    }

    /// Every code of every wire format decodes, through the block kernels (aligned and not),
    /// to the scalar value bit for bit: `half` for the 16-bit formats, the `float8` table for
    /// fp8 (NaN bit patterns included).
    #[test]
    fn block_decoders_match_the_scalar_conversions_for_every_code() {
        for dtype in [DType::F16, DType::Bf16, DType::F8E4M3, DType::F8E5M2] {
            let w = dtype.size();
            let codes: Vec<u16> = (0..=if w == 2 { u16::MAX } else { 0xff }).collect();
            let want: Vec<u32> = codes
                .iter()
                .map(|c| match dtype {
                    DType::F16 => f16::from_bits(*c).to_f32().to_bits(),
                    DType::Bf16 => bf16::from_bits(*c).to_f32().to_bits(),
                    _ => fp8_to_f32(dtype, *c as u8).to_bits(),
                })
                .collect();
            for off in [0, 1] {
                let mut bytes = vec![0u8; off];
                for c in &codes {
                    bytes.extend_from_slice(&c.to_le_bytes()[..w]);
                }
                let mut out = vec![0u8; codes.len() * 4 + off];
                // SAFETY: both buffers hold `codes.len()` elements of their type after `off`.
                unsafe {
                    convert(
                        dtype,
                        bytes.as_ptr().add(off),
                        DType::F32,
                        out.as_mut_ptr().add(off),
                        codes.len(),
                    )
                };
                for (i, c) in codes.iter().enumerate() {
                    let at = off + 4 * i;
                    let got = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
                    assert_eq!(got, want[i], "{dtype} off {off}: decode of {c:#06x}");
                }
            }
        }
    }

    /// The block encoders against the scalar ones for every f32 bit pattern (about 1.5 minutes
    /// in release; run with `--ignored`).
    #[test]
    #[ignore]
    fn block_encoders_exhaustive() {
        let mut vals = vec![0f32; 1 << 16];
        let mut out = vec![0u8; 2 << 16];
        for dtype in [DType::F16, DType::Bf16, DType::F8E4M3, DType::F8E5M2] {
            let w = dtype.size();
            for hi in 0..=0xffffu32 {
                for (lo, v) in vals.iter_mut().enumerate() {
                    *v = f32::from_bits(hi << 16 | lo as u32);
                }
                let bytes = encode(&vals, dtype);
                out[..bytes.len()].copy_from_slice(&bytes);
                for (i, x) in vals.iter().enumerate() {
                    let got = if w == 2 {
                        u16::from_le_bytes([out[2 * i], out[2 * i + 1]])
                    } else {
                        out[i] as u16
                    };
                    assert_eq!(
                        got,
                        scalar_encode(dtype, *x),
                        "{dtype} {:#010x}",
                        x.to_bits()
                    );
                }
            }
        }
    }

    #[test]
    fn fp8_block_store_uses_the_same_codes() {
        let vals: Vec<f32> = (0..3000).map(|i| (i as f32 - 1500.0) * 0.37).collect();
        for dtype in [DType::F8E4M3, DType::F8E5M2] {
            let out = encode(&vals, dtype);
            for (v, o) in vals.iter().zip(&out) {
                assert_eq!(*o, f64_to_fp8(dtype, *v as f64), "{dtype} {v}");
            }
        }
    }

    #[test]
    fn e4m3_all_codes_and_ties() {
        check_format(DType::F8E4M3, 4, 3, 7);
        assert_eq!(fp8_to_f32(DType::F8E4M3, 0x7e), 448.0);
    }

    #[test]
    fn e5m2_all_codes_and_ties() {
        check_format(DType::F8E5M2, 5, 2, 15);
        assert_eq!(fp8_to_f32(DType::F8E5M2, 0x7b), 57344.0);
    }

    #[test]
    fn conversions_round_to_nearest_even() {
        // 1 + 2^-11 is exactly between two f16 values: ties to even (1.0).
        let x = [1.0f32 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11)];
        let mut out = [0u8; 4];
        unsafe {
            convert(
                DType::F32,
                x.as_ptr() as *const u8,
                DType::F16,
                out.as_mut_ptr(),
                2,
            )
        };
        let h0 = f16::from_bits(u16::from_le_bytes([out[0], out[1]]));
        let h1 = f16::from_bits(u16::from_le_bytes([out[2], out[3]]));
        assert_eq!(h0.to_f32(), 1.0);
        assert_eq!(h1.to_f32(), 1.0 + 2.0 * 2f32.powi(-10));
    }

    #[test]
    fn unaligned_blocks_convert() {
        let vals: Vec<f32> = (0..3000).map(|i| i as f32 * 0.25 - 100.3).collect();
        // Offset 0 takes the in-place paths, offset 1 the copies through stack buffers.
        for off in [0, 1] {
            for dtype in [DType::Bf16, DType::F16] {
                let mut bytes = vec![0u16; 1 + vals.len()];
                let base = bytes.as_mut_ptr() as *mut u8;
                let mut back = vec![0f32; vals.len() + 1];
                unsafe {
                    let wire = base.add(off);
                    convert(
                        DType::F32,
                        vals.as_ptr() as *const u8,
                        dtype,
                        wire,
                        vals.len(),
                    );
                    let out = (back.as_mut_ptr() as *mut u8).add(off);
                    convert(dtype, wire, DType::F32, out, vals.len());
                    for (i, a) in vals.iter().enumerate() {
                        let want = match dtype {
                            DType::Bf16 => bf16::from_f32(*a).to_f32(),
                            _ => f16::from_f32(*a).to_f32(),
                        };
                        let got = (out.add(i * 4) as *const f32).read_unaligned();
                        assert_eq!(want.to_bits(), got.to_bits(), "{dtype} off {off} at {i}");
                    }
                }
            }
        }
    }

    /// Nearest-even rounding of `x` among the positive finite values `table` (ascending, with
    /// their codes), decided by exact f64 distances; `x` must lie between the first and last.
    fn nearest_even(table: &[(f64, u16)], x: f64) -> u16 {
        let i = table.partition_point(|(v, _)| *v <= x);
        let (lo, lc) = table[i - 1];
        if lo == x {
            return lc;
        }
        let (hi, hc) = table[i];
        // Sterbenz: both differences are exact because lo ≤ x ≤ hi are within a factor of 2.
        match (x - lo).partial_cmp(&(hi - x)) {
            Some(std::cmp::Ordering::Less) => lc,
            Some(std::cmp::Ordering::Greater) => hc,
            _ if lc % 2 == 0 => lc,
            _ => hc,
        }
    }

    /// f64 data on a 16-bit wire rounds once, to nearest even, straight from the f64 value
    /// (`half` drops the low 32 bits first, so values just above a tie used to round down).
    #[test]
    fn f64_to_16_bit_rounds_once() {
        for dtype in [DType::Bf16, DType::F16] {
            let decode = |c: u16| match dtype {
                DType::Bf16 => bf16::from_bits(c).to_f64(),
                _ => f16::from_bits(c).to_f64(),
            };
            let table: Vec<(f64, u16)> = (0..0x7c00u16)
                .map(|c| (decode(c), c))
                .filter(|(v, _)| v.is_finite())
                .collect();
            let mut xs = vec![
                1.0 + 2f64.powi(-8) + 2f64.powi(-40),
                1.0 + 2f64.powi(-11) + 2f64.powi(-45),
            ];
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..20_000 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let c = 1 + (seed % (table.len() as u64 - 2)) as usize;
                let (lo, hi) = (table[c].0, table[c + 1].0);
                let mid = (lo + hi) / 2.0;
                let eps = (hi - lo) * 2f64.powi(-(20 + (seed >> 58) as i32));
                xs.extend([mid, mid - eps, mid + eps, lo + eps, hi - eps]);
            }
            let vals: Vec<f64> = xs.iter().flat_map(|x| [*x, -*x]).collect();
            let out = encode(&vals, dtype);
            for (x, o) in vals.iter().zip(out.chunks(2)) {
                let got = u16::from_le_bytes([o[0], o[1]]);
                let want = nearest_even(&table, x.abs()) | if *x < 0.0 { 0x8000 } else { 0 };
                assert_eq!(got, want, "{dtype} of {x:e} ({:#018x})", x.to_bits());
            }
        }
        // Specials keep their meaning.
        for (x, want) in [
            (f64::INFINITY, 0x7f80u16),
            (f64::MAX, 0x7f80),
            (-0.0, 0x8000),
            (1e-300, 0),
        ] {
            assert_eq!(bf16::from_f32(f64_to_f32_odd(x)).to_bits(), want, "{x:e}");
        }
        assert!(bf16::from_f32(f64_to_f32_odd(f64::NAN)).is_nan());
    }

    #[test]
    fn wire_rules() {
        assert!(ElemTypes::new(DType::F8E4M3, None).is_err());
        assert!(ElemTypes::new(DType::I32, Some(DType::F16)).is_err());
        let t = ElemTypes::new(DType::Bf16, Some(DType::F8E5M2)).unwrap();
        assert_eq!(t.acc, DType::F32);
        assert!(DType::parse("nope").is_err());
    }
}
