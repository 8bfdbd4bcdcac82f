//! The compiler's plan limits (`compiler/src/ir/limits.rs`) fit the runtime that runs the
//! plans: a plan `check` accepts is never refused for lack of signal slots.

use std::collections::BTreeMap;
use std::time::Duration;
use symsched_compiler::ir::limits::MAX_SIGNAL_SLOTS;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, CompileOptions};
use symsched_plan::LaunchSizes;
use symsched_runtime::exec::{
    fabric::local::DEFAULT_SLOTS, Binding, DType, ElemTypes, Executor, Fabric, LaunchArgs,
    LocalWorld, ReduceOp,
};

/// What the runtime's own exchanges on one group may take from its pad besides the plan: the
/// eager all-to-all-v channel (2·P at P = 64), a barrier and a host-collective exchange (2
/// each), with room to spare.
const RUNTIME_SLOTS: usize = 2 * 64 + 2 * 8;

// The plan slot limit leaves room for the runtime in every fabric (checked when this compiles).
const _: () = {
    assert!(MAX_SIGNAL_SLOTS + RUNTIME_SLOTS <= symsched_runtime::group::SLOT_CAPACITY);
    assert!(MAX_SIGNAL_SLOTS + RUNTIME_SLOTS <= DEFAULT_SLOTS as usize);
};

/// A correct one-shot all-reduce padded with unused signals to exactly the limit loads and runs
/// on a group that also takes a barrier.
#[test]
fn a_plan_at_the_slot_limit_runs() {
    let p = 2u32;
    // `arrived`, the padding and P credit slots.
    let unused = MAX_SIGNAL_SLOTS - 1 - p as usize;
    let src = format!(
        "schedule padded implements allreduce(x: [1]) {{
    scratch land: [P] of x;
    signal arrived;
    signal unused[{unused}];
    for i in 1..P {{
        let q = (rank + i) % P;
        put x -> land[rank] @ q, signal arrived @ q += 1;
    }}
    wait arrived >= P - 1;
    x = reduce(land[0..rank], x, land[rank + 1..P]);
}}
"
    );
    let mut lib = Library::new();
    lib.add_source("padded.sched", &src).expect("parses");
    let plan = compile(
        &lib,
        "padded",
        p,
        &BTreeMap::new(),
        &CompileOptions::default(),
    )
    .expect("at the limit it verifies")
    .plan;
    assert_eq!(plan.signals.len(), MAX_SIGNAL_SLOTS);
    let world = LocalWorld::new(p, 1 << 20)
        .expect("world")
        .with_timeout(Duration::from_secs(30));
    let group = world.world_group().expect("group");
    let sums: Vec<f32> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p)
            .map(|r| {
                let (group, plan) = (group.clone(), &plan);
                s.spawn(move || {
                    let exec = Executor::new(group.fabric(r).expect("fabric"));
                    exec.barrier().expect("a barrier before");
                    let lp = exec.load(plan).expect("the plan's slots fit");
                    let mut x = (r as f32 + 1.0).to_le_bytes().to_vec();
                    let mut sizes = LaunchSizes::default();
                    sizes.vars.insert("n".into(), 1);
                    exec.launch(
                        &lp,
                        LaunchArgs {
                            types: ElemTypes::new(DType::F32, None).expect("f32"),
                            op: ReduceOp::Sum,
                            sizes: &sizes,
                            buffers: &mut [Binding::Host(&mut x)],
                        },
                    )
                    .expect("launch");
                    exec.barrier().expect("a barrier after");
                    assert_eq!(exec.fabric().rank(), r);
                    f32::from_le_bytes(x.try_into().expect("4 bytes"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    assert_eq!(sums, vec![3.0, 3.0]);
}
