//! Element numerics in LLVM IR, bit for bit as the interpreter's `dtype.rs` and `reduce.rs`.
//!
//! - Values are held in their storage type: `float`/`double` for f32/f64, the integer of their
//!   width for everything else (f16 and bf16 as `i16`, fp8 as `i8`), so no LLVM floating-point
//!   type with target-dependent lowering (`bfloat`, `half` without F16C) is ever stored.
//! - `convert` is the interpreter's `convert`: identical types copy the bits; otherwise through
//!   f64 when either side is f64, else through f32. Every narrowing rounds once, to nearest
//!   even: bf16 and fp8 by the interpreter's branch-free integer formulas, f16 by the F16C
//!   instruction (`fptrunc`, what `half` uses on such CPUs) or, without F16C, by the same
//!   rounding in integer arithmetic; f64 → 16/8-bit through round-to-odd f32
//!   (`f64_to_f32_odd`), which keeps the single rounding; fp8 NaNs from f64 keep the f64 payload
//!   bits, as the `float8` crate does.
//! - A reduce loads every operand into the accumulator (the same conversions), folds left in
//!   operand order with IEEE operations only (no fast-math flags, so LLVM neither reassociates
//!   nor contracts), and rounds once into the destination. `max`/`min` keep the accumulated
//!   value when it is NaN or when it wins or ties, else take the operand (NaN operands win),
//!   exactly `if a.is_nan() || a >= b { a } else { b }`. Integer sums wrap.
//! - Each conversion is an internal `alwaysinline` function of the module, defined on first
//!   use, so the IR reads as calls to `@symsched.bf16.encode` and the optimised code has none.

use super::Types;
use crate::{DType, JitError, ReduceOp};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicType, BasicTypeEnum};
use inkwell::values::{BasicValueEnum, FloatValue, FunctionValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

/// How f16 is converted: F16C when the target has it, integer arithmetic otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum F16Lowering {
    /// `fptrunc`/`fpext` to `half` (F16C `vcvtps2ph`/`vcvtph2ps` on x86-64).
    Native,
    /// Integer arithmetic (for targets without hardware f16 conversions).
    Emulated,
}

/// The numeric helpers of one module.
pub(crate) struct Numeric<'a, 'ctx> {
    pub ctx: &'ctx Context,
    pub module: &'a Module<'ctx>,
    pub t: &'a Types<'ctx>,
    pub f16: F16Lowering,
}

type R<T> = Result<T, JitError>;

/// The IR storage type of a dtype.
pub(crate) fn storage<'ctx>(t: &Types<'ctx>, d: DType) -> BasicTypeEnum<'ctx> {
    match d {
        DType::F32 => t.f32.into(),
        DType::F64 => t.f64.into(),
        DType::F16 | DType::Bf16 => t.i16.into(),
        DType::I32 => t.i32.into(),
        DType::I64 => t.i64.into(),
        DType::U8 | DType::F8E4M3 | DType::F8E5M2 => t.i8.into(),
    }
}

impl<'a, 'ctx> Numeric<'a, 'ctx> {
    /// The helper `name`, built by `body` the first time it is asked for.
    fn helper(
        &self,
        name: &str,
        ret: BasicTypeEnum<'ctx>,
        param: BasicTypeEnum<'ctx>,
        body: impl FnOnce(&Builder<'ctx>, BasicValueEnum<'ctx>) -> R<BasicValueEnum<'ctx>>,
    ) -> R<FunctionValue<'ctx>> {
        if let Some(f) = self.module.get_function(name) {
            return Ok(f);
        }
        let f = self.module.add_function(
            name,
            ret.fn_type(&[param.into()], false),
            Some(Linkage::Internal),
        );
        let inline = self
            .ctx
            .create_enum_attribute(Attribute::get_named_enum_kind_id("alwaysinline"), 0);
        f.add_attribute(AttributeLoc::Function, inline);
        let b = self.ctx.create_builder();
        b.position_at_end(self.ctx.append_basic_block(f, "entry"));
        let arg = f.get_nth_param(0).expect("one parameter");
        let v = body(&b, arg)?;
        b.build_return(Some(&v))?;
        Ok(f)
    }

    fn call(
        &self,
        b: &Builder<'ctx>,
        f: FunctionValue<'ctx>,
        v: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        Ok(b.build_call(f, &[v.into()], "")?
            .try_as_basic_value()
            .basic()
            .expect("conversion helpers return a value"))
    }

    fn c32(&self, v: u64) -> IntValue<'ctx> {
        self.t.i32.const_int(v, false)
    }

    fn c64(&self, v: u64) -> IntValue<'ctx> {
        self.t.i64.const_int(v, false)
    }

    fn f32_bits(&self, bits: u32) -> FloatValue<'ctx> {
        self.t.f32.const_float(f32::from_bits(bits) as f64)
    }

    /// `x` (f32 bits as i32) → bf16 bits, as `half::bf16::from_f32`: nearest even; NaN quieted
    /// with the payload's top kept.
    fn bf16_encode(&self) -> R<FunctionValue<'ctx>> {
        self.helper(
            "symsched.bf16.encode",
            self.t.i16.into(),
            self.t.f32.into(),
            |b, v| {
                let x = b.build_bit_cast(v, self.t.i32, "x")?.into_int_value();
                let lsb = b.build_and(
                    b.build_right_shift(x, self.c32(16), false, "")?,
                    self.c32(1),
                    "",
                )?;
                let bias = b.build_int_add(self.c32(0x7fff), lsb, "")?;
                let rounded = b.build_right_shift(
                    b.build_int_add(x, bias, "")?,
                    self.c32(16),
                    false,
                    "rounded",
                )?;
                let nan = b.build_or(
                    b.build_right_shift(x, self.c32(16), false, "")?,
                    self.c32(0x40),
                    "nan",
                )?;
                let abs = b.build_and(x, self.c32(0x7fff_ffff), "abs")?;
                let is_nan =
                    b.build_int_compare(IntPredicate::UGT, abs, self.c32(0x7f80_0000), "is_nan")?;
                let r = b.build_select(is_nan, nan, rounded, "")?.into_int_value();
                Ok(b.build_int_truncate(r, self.t.i16, "")?.into())
            },
        )
    }

    /// bf16 bits → f32, as `half::bf16::to_f32` (NaN quieted).
    fn bf16_decode(&self) -> R<FunctionValue<'ctx>> {
        self.helper(
            "symsched.bf16.decode",
            self.t.f32.into(),
            self.t.i16.into(),
            |b, v| {
                let x = b.build_int_z_extend(v.into_int_value(), self.t.i32, "x")?;
                let mag = b.build_and(x, self.c32(0x7fff), "")?;
                let is_nan =
                    b.build_int_compare(IntPredicate::UGT, mag, self.c32(0x7f80), "is_nan")?;
                let quiet = b.build_or(x, self.c32(0x40), "")?;
                let x = b.build_select(is_nan, quiet, x, "")?.into_int_value();
                let bits = b.build_left_shift(x, self.c32(16), "")?;
                Ok(b.build_bit_cast(bits, self.t.f32, "")?)
            },
        )
    }

    /// f32 → f16 bits, nearest even, NaN quieted with the payload's top kept (`half`).
    fn f16_encode(&self) -> R<FunctionValue<'ctx>> {
        match self.f16 {
            F16Lowering::Native => self.helper(
                "symsched.f16.encode",
                self.t.i16.into(),
                self.t.f32.into(),
                |b, v| {
                    let h = b.build_float_trunc(v.into_float_value(), self.t.f16, "h")?;
                    Ok(b.build_bit_cast(h, self.t.i16, "")?)
                },
            ),
            F16Lowering::Emulated => self.helper(
                "symsched.f16.encode",
                self.t.i16.into(),
                self.t.f32.into(),
                |b, v| {
                    let x = b.build_bit_cast(v, self.t.i32, "x")?.into_int_value();
                    let sign = b.build_and(
                        b.build_right_shift(x, self.c32(16), false, "")?,
                        self.c32(0x8000),
                        "sign",
                    )?;
                    let abs = b.build_and(x, self.c32(0x7fff_ffff), "abs")?;
                    // NaN and infinity: the top ten payload bits, quiet bit set for NaN.
                    let man = b.build_and(x, self.c32(0x007f_ffff), "")?;
                    let is_nan =
                        b.build_int_compare(IntPredicate::UGT, abs, self.c32(0x7f80_0000), "")?;
                    let quiet = b
                        .build_select(is_nan, self.c32(0x0200), self.c32(0), "")?
                        .into_int_value();
                    let special = b.build_or(
                        b.build_or(self.c32(0x7c00), quiet, "")?,
                        b.build_right_shift(man, self.c32(13), false, "")?,
                        "special",
                    )?;
                    // Normal: rebias by 112 << 23 and round off 13 bits to nearest even (the
                    // carry may step into the exponent, up to infinity).
                    let lsb = b.build_and(
                        b.build_right_shift(abs, self.c32(13), false, "")?,
                        self.c32(1),
                        "",
                    )?;
                    let rebased = b.build_int_sub(abs, self.c32(0x3800_0000), "")?;
                    let rounded = b.build_right_shift(
                        b.build_int_add(b.build_int_add(rebased, self.c32(0xfff), "")?, lsb, "")?,
                        self.c32(13),
                        false,
                        "",
                    )?;
                    let huge =
                        b.build_int_compare(IntPredicate::UGE, abs, self.c32(0x4780_0000), "")?;
                    let normal = b
                        .build_select(huge, self.c32(0x7c00), rounded, "normal")?
                        .into_int_value();
                    // Subnormal: |x| + 0.5 rounds |x| to a multiple of 2^-24 (nearest even).
                    let af = b.build_bit_cast(abs, self.t.f32, "")?.into_float_value();
                    let s = b.build_float_add(af, self.t.f32.const_float(0.5), "")?;
                    let sub = b.build_int_sub(
                        b.build_bit_cast(s, self.t.i32, "")?.into_int_value(),
                        self.c32(0x3f00_0000),
                        "subnormal",
                    )?;
                    let is_normal =
                        b.build_int_compare(IntPredicate::UGE, abs, self.c32(0x3880_0000), "")?;
                    let finite = b.build_select(is_normal, normal, sub, "")?.into_int_value();
                    let is_special =
                        b.build_int_compare(IntPredicate::UGE, abs, self.c32(0x7f80_0000), "")?;
                    let code = b
                        .build_select(is_special, special, finite, "")?
                        .into_int_value();
                    let code = b.build_or(code, sign, "")?;
                    Ok(b.build_int_truncate(code, self.t.i16, "")?.into())
                },
            ),
        }
    }

    /// f16 bits → f32 (exact; NaN quieted, as `half`).
    fn f16_decode(&self) -> R<FunctionValue<'ctx>> {
        match self.f16 {
            F16Lowering::Native => self.helper(
                "symsched.f16.decode",
                self.t.f32.into(),
                self.t.i16.into(),
                |b, v| {
                    let h = b.build_bit_cast(v, self.t.f16, "h")?.into_float_value();
                    Ok(b.build_float_ext(h, self.t.f32, "")?.into())
                },
            ),
            F16Lowering::Emulated => self.helper(
                "symsched.f16.decode",
                self.t.f32.into(),
                self.t.i16.into(),
                |b, v| {
                    let c = b.build_int_z_extend(v.into_int_value(), self.t.i32, "c")?;
                    let mag = b.build_and(c, self.c32(0x7fff), "mag")?;
                    let sign = b.build_left_shift(
                        b.build_and(c, self.c32(0x8000), "")?,
                        self.c32(16),
                        "sign",
                    )?;
                    // Finite: the magnitude placed in an f32's fields reads 2^112 too small
                    // (bias 127 against 15), subnormals included; the power-of-two product is exact.
                    let placed = b
                        .build_bit_cast(b.build_left_shift(mag, self.c32(13), "")?, self.t.f32, "")?
                        .into_float_value();
                    let scaled = b.build_float_mul(placed, self.f32_bits((127 + 112) << 23), "")?;
                    let finite = b.build_bit_cast(scaled, self.t.i32, "")?.into_int_value();
                    let man =
                        b.build_left_shift(b.build_and(c, self.c32(0x3ff), "")?, self.c32(13), "")?;
                    let nan = b.build_or(man, self.c32(0x7fc0_0000), "")?;
                    let is_inf =
                        b.build_int_compare(IntPredicate::EQ, mag, self.c32(0x7c00), "")?;
                    let special = b
                        .build_select(is_inf, self.c32(0x7f80_0000), nan, "")?
                        .into_int_value();
                    let is_special =
                        b.build_int_compare(IntPredicate::UGE, mag, self.c32(0x7c00), "")?;
                    let bits = b
                        .build_select(is_special, special, finite, "")?
                        .into_int_value();
                    let bits = b.build_or(bits, sign, "")?;
                    Ok(b.build_bit_cast(bits, self.t.f32, "")?)
                },
            ),
        }
    }

    /// f32 → fp8 exactly as the interpreter's `encode_fp8::<MAN, BIAS, MAXNORM, E5M2>` (the
    /// `float8` crate's satfinite rounding).
    fn fp8_encode(&self, d: DType) -> R<FunctionValue<'ctx>> {
        let (name, man, bias, maxnorm, e5m2) = match d {
            DType::F8E5M2 => ("symsched.e5m2.encode", 2u64, 15u64, 0x7bu64, true),
            _ => ("symsched.e4m3.encode", 3, 7, 0x7e, false),
        };
        self.helper(name, self.t.i8.into(), self.t.f32.into(), |b, v| {
            let bits = b.build_bit_cast(v, self.t.i32, "bits")?.into_int_value();
            let sign = b.build_and(
                b.build_right_shift(bits, self.c32(24), false, "")?,
                self.c32(0x80),
                "sign",
            )?;
            let abs = b.build_and(bits, self.c32(0x7fff_ffff), "abs")?;
            let shift = 23 - man;
            let lsb = b.build_and(
                b.build_right_shift(abs, self.c32(shift), false, "")?,
                self.c32(1),
                "",
            )?;
            let sum = b.build_int_add(
                b.build_int_add(abs, self.c32((1 << (shift - 1)) - 1), "")?,
                lsb,
                "",
            )?;
            let rounded = b.build_right_shift(sum, self.c32(shift), false, "rounded")?;
            let rebias = self.c32((127 - bias) << man);
            let above = b.build_int_compare(IntPredicate::UGT, rounded, rebias, "")?;
            let diff = b.build_int_sub(rounded, rebias, "")?;
            let sat = b
                .build_select(above, diff, self.c32(0), "")?
                .into_int_value();
            let big = b.build_int_compare(IntPredicate::UGT, sat, self.c32(maxnorm), "")?;
            let normal = b
                .build_select(big, self.c32(maxnorm), sat, "normal")?
                .into_int_value();
            let af = b.build_bit_cast(abs, self.t.f32, "")?.into_float_value();
            let scaled =
                b.build_float_mul(af, self.f32_bits(((127 + bias - 1 + man) << 23) as u32), "")?;
            let shifted = b.build_float_add(scaled, self.t.f32.const_float(8_388_608.0), "")?;
            let sub = b.build_int_sub(
                b.build_bit_cast(shifted, self.t.i32, "")?.into_int_value(),
                self.c32(0x4b00_0000),
                "subnormal",
            )?;
            let is_normal =
                b.build_int_compare(IntPredicate::UGE, abs, self.c32((127 + 1 - bias) << 23), "")?;
            let code = b.build_select(is_normal, normal, sub, "")?.into_int_value();
            let nan = if e5m2 {
                b.build_or(
                    b.build_and(
                        b.build_right_shift(bits, self.c32(21), false, "")?,
                        self.c32(3),
                        "",
                    )?,
                    self.c32(0x7e),
                    "nan",
                )?
            } else {
                self.c32(0x7f)
            };
            let is_nan = b.build_int_compare(IntPredicate::UGT, abs, self.c32(0x7f80_0000), "")?;
            let code = b.build_select(is_nan, nan, code, "")?.into_int_value();
            let code = b.build_or(code, sign, "")?;
            Ok(b.build_int_truncate(code, self.t.i8, "")?.into())
        })
    }

    /// fp8 code → f32 exactly as the `float8` crate's table, by the interpreter's arithmetic
    /// (magnitude placed into an f32, scaled by a power of two; both NaN encodings give the
    /// table's NaN, `float8` decodes through a canonical f16 NaN: 0x7fffe000, sign dropped).
    fn fp8_decode(&self, d: DType) -> R<FunctionValue<'ctx>> {
        const NAN: u64 = 0x7fff_e000;
        let e5m2 = d == DType::F8E5M2;
        let name = if e5m2 {
            "symsched.e5m2.decode"
        } else {
            "symsched.e4m3.decode"
        };
        self.helper(name, self.t.f32.into(), self.t.i8.into(), |b, v| {
            let c = b.build_int_z_extend(v.into_int_value(), self.t.i32, "c")?;
            let mag = b.build_and(c, self.c32(0x7f), "mag")?;
            let sign =
                b.build_left_shift(b.build_and(c, self.c32(0x80), "")?, self.c32(24), "sign")?;
            let (place, scale) = if e5m2 {
                (21, 127 + 112)
            } else {
                (20, 127 + 120)
            };
            let placed = b
                .build_bit_cast(
                    b.build_left_shift(mag, self.c32(place), "")?,
                    self.t.f32,
                    "",
                )?
                .into_float_value();
            let scaled = b.build_float_mul(placed, self.f32_bits(scale << 23), "")?;
            let val = b.build_bit_cast(scaled, self.t.i32, "")?.into_int_value();
            let signed = b.build_or(val, sign, "")?;
            let bits = if e5m2 {
                let is_inf = b.build_int_compare(IntPredicate::EQ, mag, self.c32(0x7c), "")?;
                let inf = b.build_or(sign, self.c32(0x7f80_0000), "")?;
                let special = b
                    .build_select(is_inf, inf, self.c32(NAN), "")?
                    .into_int_value();
                let is_special = b.build_int_compare(IntPredicate::UGE, mag, self.c32(0x7c), "")?;
                b.build_select(is_special, special, signed, "")?
                    .into_int_value()
            } else {
                let is_nan = b.build_int_compare(IntPredicate::EQ, mag, self.c32(0x7f), "")?;
                b.build_select(is_nan, self.c32(NAN), signed, "")?
                    .into_int_value()
            };
            Ok(b.build_bit_cast(bits, self.t.f32, "")?)
        })
    }

    /// f64 → f32 rounded to odd (the interpreter's `f64_to_f32_odd`): truncated toward zero,
    /// last bit set when anything was dropped; NaN and exact values as `as f32`.
    fn f64_to_f32_odd(&self) -> R<FunctionValue<'ctx>> {
        self.helper(
            "symsched.f64.to_f32_odd",
            self.t.f32.into(),
            self.t.f64.into(),
            |b, v| {
                let x = v.into_float_value();
                let r = b.build_float_trunc(x, self.t.f32, "r")?;
                let back = b.build_float_ext(r, self.t.f64, "")?;
                let exact = b.build_float_compare(FloatPredicate::OEQ, back, x, "")?;
                let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "")?;
                let keep = b.build_or(exact, nan, "keep")?;
                let bits = b.build_bit_cast(r, self.t.i32, "")?.into_int_value();
                let fabs = |f: FloatValue<'ctx>| -> R<FloatValue<'ctx>> {
                    let i = b.build_bit_cast(f, self.t.i64, "")?.into_int_value();
                    let m = b.build_and(i, self.c64(0x7fff_ffff_ffff_ffff), "")?;
                    Ok(b.build_bit_cast(m, self.t.f64, "")?.into_float_value())
                };
                let away =
                    b.build_float_compare(FloatPredicate::OGT, fabs(back)?, fabs(x)?, "away")?;
                let stepped = b.build_int_sub(bits, self.c32(1), "")?;
                let toward = b.build_select(away, stepped, bits, "")?.into_int_value();
                let odd = b.build_or(toward, self.c32(1), "")?;
                let odd = b.build_bit_cast(odd, self.t.f32, "")?.into_float_value();
                Ok(b.build_select(keep, r, odd, "")?)
            },
        )
    }

    /// f64 → fp8 as `float8`'s `from_f64`: through round-to-odd f32 (exact for every finite
    /// value and infinity: f32 keeps ≥ 2 more bits than fp8 wherever fp8 is non-zero, and the
    /// saturation thresholds are f32 values), NaN from the f64 bits (e5m2 keeps the payload's
    /// top two bits).
    fn fp8_encode_f64(&self, d: DType) -> R<FunctionValue<'ctx>> {
        let e5m2 = d == DType::F8E5M2;
        let name = if e5m2 {
            "symsched.e5m2.encode_f64"
        } else {
            "symsched.e4m3.encode_f64"
        };
        let via = self.fp8_encode(d)?;
        let odd = self.f64_to_f32_odd()?;
        self.helper(name, self.t.i8.into(), self.t.f64.into(), |b, v| {
            let x = v.into_float_value();
            let f = self.call(b, odd, x.into())?;
            let code = self.call(b, via, f)?.into_int_value();
            let bits = b.build_bit_cast(x, self.t.i64, "")?.into_int_value();
            let sign = b.build_and(
                b.build_right_shift(bits, self.c64(56), false, "")?,
                self.c64(0x80),
                "",
            )?;
            let nan = if e5m2 {
                let top = b.build_and(
                    b.build_right_shift(bits, self.c64(50), false, "")?,
                    self.c64(3),
                    "",
                )?;
                b.build_or(b.build_or(top, self.c64(0x7e), "")?, sign, "")?
            } else {
                b.build_or(sign, self.c64(0x7f), "")?
            };
            let nan = b.build_int_truncate(nan, self.t.i8, "")?;
            let is_nan = b.build_float_compare(FloatPredicate::UNO, x, x, "")?;
            Ok(b.build_select(is_nan, nan, code, "")?)
        })
    }

    /// A value of `d` as f32, as the interpreter's `f32::load`.
    pub fn to_f32(
        &self,
        b: &Builder<'ctx>,
        v: BasicValueEnum<'ctx>,
        d: DType,
    ) -> R<FloatValue<'ctx>> {
        Ok(match d {
            DType::F32 => v.into_float_value(),
            DType::F64 => b.build_float_trunc(v.into_float_value(), self.t.f32, "")?,
            DType::F16 => self.call(b, self.f16_decode()?, v)?.into_float_value(),
            DType::Bf16 => self.call(b, self.bf16_decode()?, v)?.into_float_value(),
            DType::F8E4M3 | DType::F8E5M2 => {
                self.call(b, self.fp8_decode(d)?, v)?.into_float_value()
            }
            // Integers never meet a float accumulator (`ElemTypes::new` refuses the mix).
            DType::I32 | DType::I64 | DType::U8 => self.t.f32.const_zero(),
        })
    }

    /// An f32 rounded into `d`, as the interpreter's `f32::store`.
    pub fn round_f32(
        &self,
        b: &Builder<'ctx>,
        x: FloatValue<'ctx>,
        d: DType,
    ) -> R<BasicValueEnum<'ctx>> {
        Ok(match d {
            DType::F32 => x.into(),
            DType::F64 => b.build_float_ext(x, self.t.f64, "")?.into(),
            DType::F16 => self.call(b, self.f16_encode()?, x.into())?,
            DType::Bf16 => self.call(b, self.bf16_encode()?, x.into())?,
            DType::F8E4M3 | DType::F8E5M2 => self.call(b, self.fp8_encode(d)?, x.into())?,
            DType::I32 | DType::I64 | DType::U8 => storage(self.t, d).const_zero(),
        })
    }

    /// A value of `d` as f64, as `f64::load` (every other float widens exactly through f32).
    pub fn to_f64(
        &self,
        b: &Builder<'ctx>,
        v: BasicValueEnum<'ctx>,
        d: DType,
    ) -> R<FloatValue<'ctx>> {
        Ok(match d {
            DType::F64 => v.into_float_value(),
            _ => {
                let f = self.to_f32(b, v, d)?;
                b.build_float_ext(f, self.t.f64, "")?
            }
        })
    }

    /// An f64 rounded once into `d`, as `f64::store`.
    pub fn round_f64(
        &self,
        b: &Builder<'ctx>,
        x: FloatValue<'ctx>,
        d: DType,
    ) -> R<BasicValueEnum<'ctx>> {
        Ok(match d {
            DType::F64 => x.into(),
            DType::F32 => b.build_float_trunc(x, self.t.f32, "")?.into(),
            DType::F16 | DType::Bf16 => {
                let f = self
                    .call(b, self.f64_to_f32_odd()?, x.into())?
                    .into_float_value();
                self.round_f32(b, f, d)?
            }
            DType::F8E4M3 | DType::F8E5M2 => self.call(b, self.fp8_encode_f64(d)?, x.into())?,
            DType::I32 | DType::I64 | DType::U8 => storage(self.t, d).const_zero(),
        })
    }

    /// The interpreter's `convert` of one element.
    pub fn convert(
        &self,
        b: &Builder<'ctx>,
        v: BasicValueEnum<'ctx>,
        from: DType,
        to: DType,
    ) -> R<BasicValueEnum<'ctx>> {
        if from == to {
            return Ok(v);
        }
        if from == DType::F64 || to == DType::F64 {
            let x = self.to_f64(b, v, from)?;
            return self.round_f64(b, x, to);
        }
        if !from.is_float() || !to.is_float() {
            // Integers travel as themselves; `ElemTypes::new` refuses every other mix.
            return Ok(storage(self.t, to).const_zero());
        }
        let x = self.to_f32(b, v, from)?;
        self.round_f32(b, x, to)
    }

    /// An operand loaded into the accumulator `acc` (`Accum::load`).
    pub fn acc_load(
        &self,
        b: &Builder<'ctx>,
        v: BasicValueEnum<'ctx>,
        d: DType,
        acc: DType,
    ) -> R<BasicValueEnum<'ctx>> {
        Ok(match acc {
            DType::F32 => self.to_f32(b, v, d)?.into(),
            DType::F64 => self.to_f64(b, v, d)?.into(),
            // Integer accumulators copy their own type's bits.
            _ => v,
        })
    }

    /// The accumulator rounded into `d` (`Accum::store`).
    pub fn acc_store(
        &self,
        b: &Builder<'ctx>,
        a: BasicValueEnum<'ctx>,
        acc: DType,
        d: DType,
    ) -> R<BasicValueEnum<'ctx>> {
        Ok(match acc {
            DType::F32 => self.round_f32(b, a.into_float_value(), d)?,
            DType::F64 => self.round_f64(b, a.into_float_value(), d)?,
            _ => a,
        })
    }

    /// `a ⊕ x` in the accumulator.
    pub fn fold(
        &self,
        b: &Builder<'ctx>,
        op: ReduceOp,
        acc: DType,
        a: BasicValueEnum<'ctx>,
        x: BasicValueEnum<'ctx>,
    ) -> R<BasicValueEnum<'ctx>> {
        if acc.is_float() {
            let (a, x) = (a.into_float_value(), x.into_float_value());
            return Ok(match op {
                ReduceOp::Sum | ReduceOp::Avg => b.build_float_add(a, x, "")?.into(),
                ReduceOp::Max | ReduceOp::Min => {
                    let pred = if op == ReduceOp::Max {
                        FloatPredicate::OGE
                    } else {
                        FloatPredicate::OLE
                    };
                    let nan = b.build_float_compare(FloatPredicate::UNO, a, a, "")?;
                    let wins = b.build_float_compare(pred, a, x, "")?;
                    let keep = b.build_or(nan, wins, "")?;
                    b.build_select(keep, a, x, "")?
                }
            });
        }
        let (a, x) = (a.into_int_value(), x.into_int_value());
        let unsigned = acc == DType::U8;
        Ok(match op {
            ReduceOp::Sum | ReduceOp::Avg => b.build_int_add(a, x, "")?.into(),
            ReduceOp::Max | ReduceOp::Min => {
                let pred = match (op == ReduceOp::Max, unsigned) {
                    (true, true) => IntPredicate::UGE,
                    (true, false) => IntPredicate::SGE,
                    (false, true) => IntPredicate::ULE,
                    (false, false) => IntPredicate::SLE,
                };
                let keep = b.build_int_compare(pred, a, x, "")?;
                b.build_select(keep, a, x, "")?
            }
        })
    }

    /// `a / p` in the accumulator (the `avg` post-pass; integers truncate toward zero).
    pub fn div_by(
        &self,
        b: &Builder<'ctx>,
        acc: DType,
        a: BasicValueEnum<'ctx>,
        p: u32,
    ) -> R<BasicValueEnum<'ctx>> {
        Ok(match acc {
            DType::F32 => b
                .build_float_div(a.into_float_value(), self.t.f32.const_float(p as f64), "")?
                .into(),
            DType::F64 => b
                .build_float_div(a.into_float_value(), self.t.f64.const_float(p as f64), "")?
                .into(),
            DType::U8 => {
                let a = a.into_int_value();
                b.build_int_unsigned_div(a, a.get_type().const_int(p as u64, false), "")?
                    .into()
            }
            _ => {
                let a = a.into_int_value();
                b.build_int_signed_div(a, a.get_type().const_int(p as u64, false), "")?
                    .into()
            }
        })
    }
}
