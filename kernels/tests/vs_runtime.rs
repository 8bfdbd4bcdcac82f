//! Generated kernels of the standard library, run on the host simulation, against the runtime's
//! plan interpreter (symsched_runtime::exec): role buffers must agree bit for bit.
//! Each kernel is compiled once with g++ -O2 and cached (target/tmp/kernel-cache).

mod common;
use common::*;
use symsched_kernels::{DType, ReduceOp};

/// n = 1000 spans several 256-element tiles (UB budget 4096 bytes) with ragged tails; n = 37
/// gives uneven and empty chunks at P = 8.
const SIZES: [u64; 2] = [1000, 37];
const UB: u32 = 4096;

fn check_all(p: u32, variants: &[(DType, DType, ReduceOp)], reducing_only: bool) -> Vec<String> {
    let mut ran = vec![];
    for plan in standard_plans(p) {
        let reduces = plan.collective.reduces();
        for &(dtype, wire, op) in variants {
            if (reducing_only || op != ReduceOp::Sum || wire != dtype) && !reduces {
                continue;
            }
            let o = opts(dtype, wire, op, UB);
            let k = build(&plan, &o);
            for n in SIZES {
                compare_with_runtime(&k, &plan, &o, n).unwrap_or_else(|e| panic!("{e}"));
            }
            ran.push(format!("{} P={p} {dtype}/{wire}/{op}", plan.schedule));
        }
    }
    ran
}

#[test]
fn every_standard_schedule_f32_sum_at_every_group_size() {
    let mut ran = vec![];
    for p in [1, 2, 3, 4, 8] {
        ran.extend(check_all(
            p,
            &[(DType::F32, DType::F32, ReduceOp::Sum)],
            false,
        ));
    }
    eprintln!("ran {} combinations:\n{}", ran.len(), ran.join("\n"));
    assert!(ran.len() >= 50, "{ran:?}");
}

#[test]
fn dtypes_ops_and_wire_at_p4() {
    let variants = [
        (DType::Bf16, DType::Bf16, ReduceOp::Sum),
        (DType::F16, DType::F16, ReduceOp::Sum),
        (DType::F32, DType::F32, ReduceOp::Max),
        (DType::F32, DType::F32, ReduceOp::Min),
        (DType::F32, DType::Bf16, ReduceOp::Sum),
    ];
    let mut ran = check_all(4, &variants, true);
    ran.extend(
        check_all(4, &[(DType::Bf16, DType::Bf16, ReduceOp::Sum)], false)
            .into_iter()
            .filter(|s| !s.contains("reduce") && !s.contains("allreduce")),
    );
    eprintln!("ran {} combinations:\n{}", ran.len(), ran.join("\n"));
}

#[test]
fn bf16_and_max_at_p3_and_p8() {
    let variants = [
        (DType::Bf16, DType::Bf16, ReduceOp::Max),
        (DType::F32, DType::Bf16, ReduceOp::Sum),
    ];
    let mut ran = vec![];
    for p in [3, 8] {
        ran.extend(check_all(p, &variants, true));
    }
    eprintln!("ran {} combinations:\n{}", ran.len(), ran.join("\n"));
}
