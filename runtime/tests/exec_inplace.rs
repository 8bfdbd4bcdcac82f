//! Private memory bound to a role that no rank puts into or gets from is used in place: it takes
//! no room in the heap and is not copied in and out.

mod common;

use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::{DType, ElemTypes};

/// Runs `name` on 2 ranks with every role bound to private memory, in a heap that holds the
/// schedule's scratch but not also staged copies of its roles.
fn fits_without_staging(name: &str, wire: Option<DType>, count: u64, heap: u64) {
    let plan = common::plan(name, 2);
    let types = ElemTypes::new(DType::F32, wire).unwrap();
    let spec = common::spec(types, sizes_for(&plan, count, &[]), true);
    common::run_checked(&plan, &spec, heap, &format!("{name} in a {heap}-byte heap"));
}

#[test]
fn reduce_scatter_roles_are_not_staged() {
    // 1 MiB of input per rank: the landing scratch is 1 MiB; staging `in` and `out` as well
    // would need 2.5 MiB.
    fits_without_staging("reduce_scatter_push", None, 1 << 18, 3 << 19);
}

#[test]
fn wire_allreduce_x_is_not_staged() {
    // 1 MiB of f32 per rank travels as bf16: `land` and `gath` are 512 KiB each; staging `x`
    // as well would need 2 MiB.
    fits_without_staging(
        "allreduce_two_shot_wire",
        Some(DType::Bf16),
        1 << 18,
        3 << 19,
    );
}
