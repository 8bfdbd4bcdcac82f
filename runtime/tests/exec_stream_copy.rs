//! Moves of at least 4 MiB (the default threshold) into buffers no step reads are copied with streaming stores
//! (`exec::stream_copy`); the collectives that have them must still match the reference.

mod common;

use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::{DType, ElemTypes};

/// Runs `name` on 2 ranks with blocks of `block` elements of `data`, heap-bound and staged.
fn checked(name: &str, data: DType, block: u64) {
    let plan = common::plan(name, 2);
    let types = ElemTypes::new(data, None).unwrap();
    let heap = 8 * block * data.size() as u64 + (1 << 20);
    for staged in [false, true] {
        let spec = common::spec(types, sizes_for(&plan, 2 * block, &[]), staged);
        common::run_checked(
            &plan,
            &spec,
            heap,
            &format!("{name} {data:?}, {block}-element blocks, staged {staged}"),
        );
    }
}

#[test]
fn large_alltoall_and_allgather_match_the_reference() {
    // Just over the 4 MiB threshold per block, and an odd byte count that leaves an unaligned
    // tail.
    for name in ["alltoall_push", "allgather_push", "allgather_pull"] {
        checked(name, DType::F32, (1 << 20) + 3);
        checked(name, DType::U8, (4 << 20) + 7);
    }
}
