//! Compiled kernels executed on P threads over plain memory, compared byte for byte with the
//! reference simulator (tests/common/reference.rs) of the same plan, over two launches (epoch
//! rule), at sizes with and without remainders.

mod common;

use common::{compare, sizes_for, types, Harness, Launch};
use symsched_compiler::pipeline::{
    compile, example_params, standard_library, CompileOptions as PlanOptions,
};
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, ElemTypes, ReduceOp};
use symsched_plan::Plan;

fn cache() -> KernelCache {
    KernelCache::new(None, CompileOptions::default()).expect("host target")
}

use common::jit_schedules as names;

/// The plan of `name` at `p`, or `None` where the schedule has no instance (e.g. `L = 2` at
/// odd P).
fn instance(name: &str, p: u32) -> Option<Plan> {
    let lib = standard_library();
    compile(
        &lib,
        name,
        p,
        &example_params(name),
        &PlanOptions::default(),
    )
    .ok()
    .map(|c| c.plan)
}

fn check(c: &KernelCache, plan: &Plan, t: ElemTypes, op: ReduceOp, ns: &[u64]) {
    for &n in ns {
        let sizes = sizes_for(plan, n, n ^ 0x55);
        let l = Launch {
            plan,
            types: t,
            op,
            sizes: &sizes,
        };
        compare(c, &Harness::default(), &l, 2, n).unwrap_or_else(|e| {
            panic!(
                "{} P={} {}/{} {op} n={n}: {e}",
                plan.schedule, plan.group_size, t.data, t.wire
            )
        });
    }
}

#[test]
fn every_schedule_at_p4_f32_sum() {
    let c = cache();
    for name in names() {
        let p = instance(&name, 4).unwrap_or_else(|| panic!("{name} has a P = 4 instance"));
        check(
            &c,
            &p,
            types(DType::F32, None),
            ReduceOp::Sum,
            &[0, 5, 1001],
        );
    }
}

#[test]
fn every_schedule_at_p8_f32_sum_and_bf16_over_e4m3_max() {
    let c = cache();
    for name in names() {
        let p = instance(&name, 8).unwrap_or_else(|| panic!("{name} has a P = 8 instance"));
        check(&c, &p, types(DType::F32, None), ReduceOp::Sum, &[13, 4099]);
        check(
            &c,
            &p,
            types(DType::Bf16, Some(DType::F8E4M3)),
            ReduceOp::Max,
            &[16, 333],
        );
    }
}

#[test]
fn every_schedule_at_p1_to_p3() {
    let c = cache();
    let mut ran = 0;
    for name in names() {
        for p in 1..=3 {
            if let Some(plan) = instance(&name, p) {
                check(&c, &plan, types(DType::F32, None), ReduceOp::Sum, &[3, 130]);
                ran += 1;
            }
        }
    }
    assert!(ran >= 40, "only {ran} instances ran");
}

#[test]
fn reducing_schedules_every_dtype_and_op() {
    let c = cache();
    for name in [
        "allreduce_two_shot",
        "allreduce_ring",
        "allreduce_two_shot_pull",
        "allreduce_one_shot",
        "reduce_scatter_push",
        "reduce_push",
        "allreduce_hier",
        "matmul_reduce_scatter_pull",
    ] {
        let p = if name == "allreduce_hier" { 4 } else { 3 };
        let plan = instance(name, p).expect("instance");
        for data in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::Bf16,
            DType::I32,
            DType::I64,
            DType::U8,
        ] {
            for op in ReduceOp::ALL {
                check(&c, &plan, types(data, None), op, &[7, 515]);
            }
        }
    }
}

#[test]
fn wire_schedules_every_wire() {
    let c = cache();
    for name in ["allreduce_two_shot_wire", "reduce_scatter_push_wire"] {
        for p in [3, 4] {
            let plan = instance(name, p).expect("instance");
            for data in [DType::F32, DType::F64, DType::F16, DType::Bf16] {
                for wire in [
                    DType::F32,
                    DType::F64,
                    DType::F16,
                    DType::Bf16,
                    DType::F8E4M3,
                    DType::F8E5M2,
                ] {
                    // avg for one data type (its scaling pass is the same for every wire).
                    let ops: &[ReduceOp] = if data == DType::F32 {
                        &[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg]
                    } else {
                        &[ReduceOp::Sum, ReduceOp::Min]
                    };
                    for &op in ops {
                        // n = 8 and 1000: every chunk full at P = 4 (the fused pass); 7, 515:
                        // short chunks (the step-by-step fallback).
                        check(&c, &plan, types(data, Some(wire)), op, &[7, 8, 515, 1000]);
                    }
                }
            }
        }
    }
}

/// Every standard schedule × P ∈ {1, 2, 3, 4, 8} × every dtype, op and wire (a few minutes;
/// `cargo test -p symsched-jit --test exec -- --ignored`).
#[test]
#[ignore]
fn full_matrix() {
    let c = cache();
    let floats = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::F8E4M3,
        DType::F8E5M2,
    ];
    for name in names() {
        for p in [1, 2, 3, 4, 8] {
            let Some(plan) = instance(&name, p) else {
                continue;
            };
            for data in [
                DType::F32,
                DType::F64,
                DType::F16,
                DType::Bf16,
                DType::I32,
                DType::I64,
                DType::U8,
            ] {
                let wires: Vec<Option<DType>> = if data.is_float() {
                    std::iter::once(None)
                        .chain(floats.iter().map(|w| Some(*w)))
                        .collect()
                } else {
                    vec![None]
                };
                for wire in wires {
                    for op in ReduceOp::ALL {
                        check(&c, &plan, types(data, wire), op, &[5, 1003]);
                    }
                }
            }
        }
    }
}
