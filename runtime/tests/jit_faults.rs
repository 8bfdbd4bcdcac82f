//! The JIT-vs-interpreter comparison catches broken lowerings: a dropped wait, a reversed
//! fold order and a short blocked copy-out (test hooks of the LLVM back end) each make the
//! backends differ, while the correct lowering under the same conditions equals the
//! interpreter. One test, because the fault hook applies to the whole process.

mod jit_common;

use jit_common::{compare, instance, Case};
use std::time::Duration;
use symsched_plan::Op;
use symsched_runtime::exec::backend::jit::{compile_stats, set_test_fault, Fault};
use symsched_runtime::exec::{DType, ElemTypes, ReduceOp};

/// Tries of the broken kernel with a dropped wait (see below), each ~0.4 s.
const DROPPED_WAIT_TRIES: usize = 8;

#[test]
fn broken_lowerings_are_caught_and_the_correct_one_is_not() {
    // One-shot allreduce at P = 4: rank 0 reduces the landing slots after waiting for every
    // peer's put. Peers start each launch 200 ms late, so without the wait rank 0 folds slots
    // that hold no data yet. But the launch agreement holds rank 0 until every peer has entered,
    // and a peer puts right after entering: whether its puts land before rank 0's fold reads
    // the slots is a race (on a loaded host rank 0 may lose its core for milliseconds right
    // after the agreement, and the broken kernel then reads complete data). So the broken
    // kernel gets several tries and must be caught in at least one.
    let plan = instance("allreduce_one_shot", 4).expect("P = 4 instance");
    let wait = plan.ranks[0]
        .steps
        .iter()
        .rev()
        .find(|s| matches!(s.op, Op::Wait { .. }))
        .expect("rank 0 waits for the puts")
        .id;
    let late = Case {
        plan: &plan,
        types: ElemTypes::new(DType::F32, None).unwrap(),
        op: ReduceOp::Sum,
        count: 1000,
        staged: false,
        late: (1..4).map(|r| (r, Duration::from_millis(200))).collect(),
        nt_min_bytes: None,
    };
    let before = compile_stats().compiled;
    compare(&late).expect("the correct lowering equals the interpreter");
    assert!(
        compile_stats().compiled > before,
        "the JIT compiled kernels"
    );

    set_test_fault(Some(Fault::DropWait(wait)));
    let err = (0..DROPPED_WAIT_TRIES)
        .find_map(|_| compare(&late).err())
        .expect("a dropped wait must be caught");
    assert!(err.contains("rank 0"), "{err}");

    // The same one-shot allreduce on time, inexact f32 sums of four operands: the fold order
    // shows in the last bits (two operands would not: a + b is b + a).
    let fold = Case {
        late: Vec::new(),
        count: 999,
        ..late.clone()
    };
    set_test_fault(Some(Fault::ReverseFold));
    let err = compare(&fold).expect_err("a reversed fold order must be caught");
    assert!(err.contains("interp vs jit"), "{err}");

    // The two-shot allreduce's owner folds its chunk and copies it to every peer a block at
    // a time: one element short per block leaves peers with stale values.
    let two_shot = instance("allreduce_two_shot", 2).expect("P = 2 instance");
    let blocked = Case {
        plan: &two_shot,
        count: 5000,
        ..fold.clone()
    };
    set_test_fault(Some(Fault::ShortCopyOut));
    let err = compare(&blocked).expect_err("a short copy-out must be caught");
    assert!(err.contains("interp vs jit"), "{err}");

    // The wire two-shot's owner never stores its reduced chunk in its own `gath` slot (a dead
    // write; f32 on the wire here): the chunk is staged on the stack a block at a time and
    // copied out from there, with the same fault.
    let wire = instance("allreduce_two_shot_wire", 2).expect("P = 2 instance");
    let staged = Case {
        plan: &wire,
        count: 5000,
        ..fold.clone()
    };
    let err = compare(&staged).expect_err("a short staged copy-out must be caught");
    assert!(err.contains("interp vs jit"), "{err}");

    set_test_fault(None);
    compare(&fold).expect("the correct lowering equals the interpreter again");
    compare(&blocked).expect("the correct lowering equals the interpreter again");
    compare(&staged).expect("the correct lowering equals the interpreter again");
}
