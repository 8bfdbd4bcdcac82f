//! Compiled kernels executed on P threads over plain memory, compared byte for byte with the
//! reference simulator (tests/common/reference.rs) of the same plan.

mod common;

use common::{compare, plan, sizes_for, types, Harness, Launch};
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, ReduceOp};

fn cache() -> KernelCache {
    KernelCache::new(None, CompileOptions::default()).expect("host target")
}

#[test]
fn allreduce_two_shot_f32_sum_matches_the_reference() {
    let c = cache();
    let p = plan("allreduce_two_shot", 4);
    for n in [0, 1, 5, 4099] {
        let sizes = sizes_for(&p, n, 1);
        let l = Launch {
            plan: &p,
            types: types(DType::F32, None),
            op: ReduceOp::Sum,
            sizes: &sizes,
        };
        compare(&c, &Harness::default(), &l, 2, n).unwrap_or_else(|e| panic!("n = {n}: {e}"));
    }
}
