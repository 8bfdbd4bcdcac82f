//! Numerics at the edges (docs/ascendc.md, "Numerics as documented"): generated kernels fed NaN
//! (several payloads, both signs), ±0, ±inf, values that overflow f16/bf16 and int32 sums that
//! wrap must give the runtime interpreter's bits. The simulation does what the Atlas A2
//! boundary-value tables say (vector Max/Min: NaN from either side gives a NaN of unspecified
//! bits; int32 Add wraps in the default mode), so these pass only because the lowering does not
//! depend on what the documentation leaves open: float max/min fold through Compare/Select, the
//! avg division runs on the scalar unit. Every case also runs on a device in the saturation
//! overflow mode (`aclrtSetDeviceSatMode`, where a half/bf16 conversion turns inf into ±MAX and
//! NaN into 0): the kernels pin the Inf/NaN mode (CTRL[48]) for their own run.

mod common;
use common::*;
use symsched_kernels::sim_build::{self, OptLevel, SimSources};
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};
use symsched_plan::Plan;

const UB: u32 = 4096;
const N: u64 = 1000;

/// f32 values the boundary-value tables single out, as bits: quiet NaNs with different payloads
/// and signs, a signalling NaN pattern, ±0, ±inf, ±MAX, a subnormal.
const F32_SPECIALS: [u32; 12] = [
    0x7fc0_0000,
    0xffc0_0001,
    0x7fa0_0123,
    0x7f80_0001,
    0x0000_0000,
    0x8000_0000,
    0x7f80_0000,
    0xff80_0000,
    0x7f7f_ffff,
    0xff7f_ffff,
    0x0000_0001,
    0x4780_0000, // 65536: overflows f16 once summed with itself, rounds to f16 inf
];

/// Plant specials into every input of every rank: element i of rank r gets special
/// (i + 5r) mod k at every 7th position, so NaN meets NaN, NaN meets numbers on either side,
/// +0 meets -0, inf meets -inf.
fn plant(types: &[DType], mut roles: Vec<Vec<Vec<u8>>>) -> Vec<Vec<Vec<u8>>> {
    for (r, bufs) in roles.iter_mut().enumerate() {
        for (b, bytes) in bufs.iter_mut().enumerate() {
            let t = types[b];
            let e = t.size() as usize;
            for i in (0..bytes.len() / e).filter(|i| (i + r) % 7 == 0) {
                let k = (i / 7 + 5 * r) % F32_SPECIALS.len();
                let bits = F32_SPECIALS[k];
                match t {
                    DType::F32 => bytes[4 * i..4 * i + 4].copy_from_slice(&bits.to_le_bytes()),
                    DType::Bf16 => bytes[2 * i..2 * i + 2]
                        .copy_from_slice(&((bits >> 16) as u16).to_le_bytes()),
                    DType::F16 => {
                        let h = half::f16::from_f32(f32::from_bits(bits));
                        bytes[2 * i..2 * i + 2].copy_from_slice(&h.to_bits().to_le_bytes())
                    }
                    DType::I32 => {
                        // Extremes, so that sums wrap: MAX + MAX = -2, MIN + MIN = 0.
                        let v = [i32::MAX, i32::MIN, -1, 1][k % 4];
                        bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes())
                    }
                    _ => {}
                }
            }
        }
    }
    roles
}

fn plan(p: u32, schedule: &str) -> Plan {
    standard_plans(p)
        .into_iter()
        .find(|x| x.schedule == schedule)
        .unwrap_or_else(|| panic!("no standard schedule {schedule}"))
}

fn run(kernels: &[(Plan, LowerOptions)]) {
    let srcs: Vec<SimSources> = kernels
        .iter()
        .map(|(p, o)| SimSources::from(&lower(p, o).expect("lowering")))
        .collect();
    let built = sim_build::build_many(&srcs, &cache_dir(), OptLevel::O0, sim_build::default_jobs());
    let mut bad = vec![];
    for ((p, o), k) in kernels.iter().zip(built) {
        let k = k.unwrap_or_else(|e| panic!("{e}"));
        for (seed, mode) in [
            (0, OverflowMode::InfNan),
            (1, OverflowMode::InfNan),
            (0, OverflowMode::Saturation),
        ] {
            if let Err(e) = compare_under(&k, p, o, N, seed, mode, plant) {
                bad.push(format!(
                    "{} {}/{}/{} seed {seed} {mode:?}: {e}",
                    p.schedule, o.dtype, o.wire, o.op
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Max and min of NaNs (payloads, signs), ±0 and ±inf through the vector fold, reducing in
/// place and along a ring; sums that overflow to inf and inf - inf.
#[test]
fn nan_zero_and_inf_operands_give_the_runtime_bits() {
    let mut v = vec![];
    for s in ["allreduce_one_shot", "allreduce_ring", "reduce_push"] {
        for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum] {
            v.push((plan(3, s), opts(DType::F32, DType::F32, op, UB)));
        }
    }
    run(&v);
}

/// 16-bit data and wires: f32 sums past the f16 range round to inf in the Cast (CAST_RINT), NaN
/// payloads survive the widening Cast and the narrowing one, as the runtime's conversions do.
#[test]
fn sixteen_bit_overflow_and_nan_conversions_give_the_runtime_bits() {
    run(&[
        (
            plan(3, "allreduce_one_shot"),
            opts(DType::F16, DType::F16, ReduceOp::Sum, UB),
        ),
        (
            plan(3, "allreduce_one_shot"),
            opts(DType::Bf16, DType::Bf16, ReduceOp::Max, UB),
        ),
        (
            plan(3, "allreduce_two_shot_wire"),
            opts(DType::F32, DType::F16, ReduceOp::Sum, UB),
        ),
        (
            plan(3, "allreduce_two_shot_wire"),
            opts(DType::F32, DType::Bf16, ReduceOp::Min, UB),
        ),
    ]);
}

/// int32 sums of MAX/MIN wrap (the vector Add's default mode), avg divides the wrapped sum
/// truncating toward zero, max/min of the extremes.
#[test]
fn int32_overflow_wraps_as_the_runtime() {
    let mut v = vec![];
    for op in ReduceOp::ALL {
        v.push((
            plan(3, "allreduce_one_shot"),
            opts(DType::I32, DType::I32, op, UB),
        ));
    }
    v.push((
        plan(4, "allreduce_ring"),
        opts(DType::I32, DType::I32, ReduceOp::Sum, UB),
    ));
    run(&v);
}

/// avg of f32 with NaN, inf and values whose quotient by P is inexact: the scalar exact
/// division, not the vector Div (whose A2 accuracy is undocumented).
#[test]
fn avg_of_specials_divides_as_the_runtime() {
    run(&[
        (
            plan(3, "allreduce_one_shot"),
            opts(DType::F32, DType::F32, ReduceOp::Avg, UB),
        ),
        (
            plan(3, "allreduce_two_shot_wire"),
            opts(DType::Bf16, DType::Bf16, ReduceOp::Avg, UB),
        ),
    ]);
}

/// The planted values reach the fold: the same kernel with the plain vector Max instead of the
/// Compare/Select fold gives other bits (the quieted NaN of the boundary-value table, not the
/// runtime's first operand), and the comparison says so.
#[test]
fn the_plain_vector_max_would_not_give_the_runtime_bits() {
    let p = plan(3, "allreduce_one_shot");
    let o = opts(DType::F32, DType::F32, ReduceOp::Max, UB);
    let k = build_edited(
        &p,
        &o,
        |s| &mut s.kernel,
        "if constexpr (SymSame<AccT, float>::value && kFold != 0) {",
        "if constexpr (false) {",
    );
    match compare_with_runtime_from(&k, &p, &o, N, 0, plant) {
        Err(Mismatch::Wrong(msg)) => assert!(msg.contains("differs") || msg.contains("element")),
        other => panic!("expected a wrong result, got {other:?}"),
    }
}

/// The planted overflows and NaNs reach a narrowing conversion: without the kernel's pin of the
/// Inf/NaN mode, a device in the saturation mode gives 65504 where the runtime gives inf (or 0
/// for a NaN), and the comparison says so; the same kernel on a device in the Inf/NaN mode
/// still agrees, so only the pin makes the saturation run pass.
#[test]
fn without_the_ctrl_pin_a_saturating_device_would_not_give_the_runtime_bits() {
    let p = plan(3, "allreduce_one_shot");
    for o in [
        opts(DType::F16, DType::F16, ReduceOp::Sum, UB),
        opts(DType::Bf16, DType::Bf16, ReduceOp::Max, UB),
    ] {
        let k = build_edited(
            &p,
            &o,
            |s| &mut s.kernel,
            "_ns::kCtrlInfNan);",
            "_ns::kCtrlInfNan * 0);",
        );
        compare_under(&k, &p, &o, N, 0, OverflowMode::InfNan, plant)
            .unwrap_or_else(|e| panic!("{}: Inf/NaN device: {e}", o.dtype));
        match compare_under(&k, &p, &o, N, 0, OverflowMode::Saturation, plant) {
            Err(Mismatch::Wrong(msg)) => {
                eprintln!("{}: {msg}", o.dtype);
                assert!(msg.contains("element"), "{msg}")
            }
            other => panic!("{}: expected a wrong result, got {other:?}", o.dtype),
        }
    }
}

/// A CTRL write while an instruction issued before may still read it (here a rewrite of the
/// same value right after a narrowing Cast, before anything tells the scalar unit the Cast has
/// run) is a race the simulation names, whatever the interleaving; a kernel that returns with
/// CTRL changed (its restore deleted) is refused too.
#[test]
fn ctrl_writes_are_ordered_and_restored() {
    let p = plan(3, "allreduce_one_shot");
    let o = opts(DType::F16, DType::F16, ReduceOp::Sum, UB);
    let unordered = build_edited(
        &p,
        &o,
        |s| &mut s.kernel,
        "AscendC::RoundMode::CAST_RINT, len);",
        "AscendC::RoundMode::CAST_RINT, len); asc_set_ctrl(asc_get_ctrl());",
    );
    let leaked = build_edited(&p, &o, |s| &mut s.kernel, "    asc_set_ctrl(ctrl);\n}", "}");
    for (k, code, mode) in [
        (&unordered, "SYMSCHED_SIM_E_PIPE_RACE", OverflowMode::InfNan),
        (&leaked, "SYMSCHED_SIM_E_CTRL", OverflowMode::Saturation),
    ] {
        let got = [0, 1, 2, 3]
            .into_iter()
            .find_map(|seed| compare_under(k, &p, &o, N, seed, mode, plant).err());
        match got {
            Some(Mismatch::Sim(e)) => {
                eprintln!("{e}");
                assert!(e.to_string().contains(code), "{e}")
            }
            other => panic!("expected {code}, got {other:?}"),
        }
    }
}
