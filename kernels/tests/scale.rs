//! The table-driven kernel at the largest group size the language allows (P = 64): the source
//! stays the same size, only the step table grows, and the kernel still matches the runtime's
//! interpreter.

mod common;
use common::*;
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};

#[test]
fn p64_alltoall_and_allreduce_match_the_runtime_interpreter() {
    for name in ["alltoall_push", "allreduce_two_shot"] {
        let plan = standard_plans(64)
            .into_iter()
            .find(|p| p.schedule == name)
            .unwrap();
        let small = lower(
            &standard_plans(2)
                .into_iter()
                .find(|p| p.schedule == name)
                .unwrap(),
            &LowerOptions::default(),
        )
        .unwrap();
        let big = lower(&plan, &LowerOptions::default()).unwrap();
        // The device code differs only in constants and extent expressions, not in length.
        assert!(
            big.kernel.lines().count() <= small.kernel.lines().count() + 8,
            "{name}"
        );
        let o = opts(DType::F32, DType::F32, ReduceOp::Sum, 4096);
        let k = build(&plan, &o);
        compare_with_runtime(&k, &plan, &o, 130).unwrap_or_else(|e| panic!("{e}"));
    }
}
