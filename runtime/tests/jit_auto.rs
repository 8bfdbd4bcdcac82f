//! `SYMSCHED_BACKEND=auto` end to end: a launch runs on the backend the rule in
//! `exec/backend/auto.rs` picks (seen in the JIT's compile counters, which only the JIT moves),
//! and its results equal the interpreter's. One test, because the counters are per process.

mod jit_common;

use jit_common::{difference, instance, run, Case};
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::backend::auto::JIT_MIN_BYTES;
use symsched_runtime::exec::backend::jit::compile_stats;
use symsched_runtime::exec::{DType, ElemTypes, ReduceOp};

/// Kernels the JIT compiled or loaded in this process so far.
fn kernels() -> u64 {
    let s = compile_stats();
    s.compiled + s.from_disk
}

/// Run `case` on `auto`; whether the JIT ran it, after checking it equals the interpreter.
fn auto_used_jit(case: &Case) -> bool {
    let before = kernels();
    let got = run(case, BackendKind::Auto);
    let used = kernels() > before;
    let want = run(case, BackendKind::Interp);
    if let Some(d) = difference(&want, &got) {
        panic!("{}: interp vs auto: {d}", case.name());
    }
    used
}

#[test]
fn auto_runs_reducing_plans_from_the_threshold_on_the_jit() {
    let allreduce = instance("allreduce_two_shot", 2).expect("P = 2 instance");
    let allgather = instance("allgather_push", 2).expect("P = 2 instance");
    let f32 = ElemTypes::new(DType::F32, None).unwrap();
    let at = |plan, bytes: u64, types: ElemTypes, op| Case {
        plan,
        types,
        op,
        count: bytes / types.data.size() as u64,
        staged: false,
        late: Vec::new(),
        nt_min_bytes: None,
    };
    let big = JIT_MIN_BYTES;
    assert!(
        auto_used_jit(&at(&allreduce, big, f32, ReduceOp::Sum)),
        "a reducing plan at {big} B, f32 sum: the JIT"
    );
    assert!(
        !auto_used_jit(&at(&allreduce, 4096, f32, ReduceOp::Sum)),
        "a reducing plan at 4 KiB: the interpreter"
    );
    assert!(
        !auto_used_jit(&at(&allgather, 4 * big, f32, ReduceOp::Sum)),
        "a plan without a reduce step: the interpreter"
    );
    // Channels do not enter the rule: a reducing channel plan at the threshold runs on the JIT
    // (a kernel per channel), below it on the interpreter.
    let channels = instance("reduce_scatter_push_channels", 2).expect("P = 2 instance");
    assert!(
        auto_used_jit(&at(&channels, big, f32, ReduceOp::Sum)),
        "a reducing channel plan at {big} B: the JIT"
    );
    assert!(
        !auto_used_jit(&at(&channels, 4096, f32, ReduceOp::Sum)),
        "a reducing channel plan at 4 KiB: the interpreter"
    );
    let bf16 = ElemTypes::new(DType::Bf16, None).unwrap();
    assert!(
        !auto_used_jit(&at(&allreduce, big, bf16, ReduceOp::Sum)),
        "an unmeasured data type: the interpreter"
    );
    assert!(
        !auto_used_jit(&at(&allreduce, big, f32, ReduceOp::Max)),
        "an unmeasured op: the interpreter"
    );
}
