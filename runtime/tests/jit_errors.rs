//! A kernel the JIT cannot make is a typed error: `ExecError::Jit` naming the schedule and
//! rank, with the back end's own error inside.

mod jit_common;

use jit_common::instance;
use std::time::Duration;
use symsched_runtime::config::{BackendKind, ExecOptions};
use symsched_runtime::exec::backend::jit::JitFailure;
use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
use symsched_runtime::exec::{DType, ElemTypes, ExecError, Executor, LocalWorld, ReduceOp};

#[test]
fn a_kernel_cache_that_cannot_be_written_is_a_typed_jit_error() {
    // The disk cache lives under a regular file, so storing the compiled kernel fails.
    let file = std::env::temp_dir().join(format!("symsched-jit-errors-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let plan = instance("allreduce_two_shot", 1).expect("P = 1 instance");
    let world = LocalWorld::new(1, 1 << 20)
        .unwrap()
        .with_timeout(Duration::from_secs(20));
    let group = world.world_group().unwrap();
    let opts = ExecOptions {
        backend: BackendKind::Jit,
        jit_cache_dir: Some(file.join("jit")),
        ..ExecOptions::default()
    };
    let exec = Executor::with_options(group.fabric(0).unwrap(), opts);
    let spec = RunSpec {
        types: ElemTypes::new(DType::F32, None).unwrap(),
        op: ReduceOp::Sum,
        sizes: sizes_for(&plan, 64, &[]),
        warmup: 0,
        iters: 1,
        check: false,
        staged: false,
    };
    let err = run_rank(&exec, &plan, &spec).expect_err("the kernel cannot be stored");
    std::fs::remove_file(&file).unwrap();
    let msg = err.to_string();
    match err {
        ExecError::Jit(f) => match *f {
            JitFailure::Compile {
                schedule,
                rank,
                error: symsched_jit::JitError::Io { path, .. },
            } => {
                assert_eq!((schedule.as_str(), rank), ("allreduce_two_shot", 0));
                assert!(path.contains("symsched-jit-errors"), "{path}");
                assert!(
                    msg.starts_with("jit: cannot compile schedule `allreduce_two_shot` for rank 0"),
                    "{msg}"
                );
            }
            other => panic!("not a compile failure with an i/o error: {other:?}"),
        },
        other => panic!("not ExecError::Jit: {other:?}"),
    }
}

#[test]
fn auto_falls_back_to_the_interpreter_when_no_kernel_can_be_made() {
    // The same unwritable cache, under `auto` (the default) and at a size where its rule picks
    // the JIT: the launch runs on the interpreter instead, with the right sums, and so does the
    // next one without trying to compile again.
    use symsched_runtime::exec::backend::auto::{message_bytes, prefers_jit, PlanTraits};
    let file = std::env::temp_dir().join(format!("symsched-jit-auto-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let plan = instance("allreduce_two_shot", 2).expect("P = 2 instance");
    let world = LocalWorld::new(2, 16 << 20)
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    let group = world.world_group().unwrap();
    let types = ElemTypes::new(DType::F32, None).unwrap();
    let sizes = sizes_for(&plan, 1 << 17, &[]);
    let reports: Vec<_> = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let (group, plan, file, sizes) = (group.clone(), &plan, &file, &sizes);
                s.spawn(move || {
                    let opts = ExecOptions {
                        backend: BackendKind::Auto,
                        jit_cache_dir: Some(file.join("jit")),
                        ..ExecOptions::default()
                    };
                    let exec = Executor::with_options(group.fabric(r).unwrap(), opts);
                    let lp = exec.load(plan).unwrap();
                    let res = exec.role_lens(&lp, sizes).unwrap();
                    let spec = RunSpec {
                        types,
                        op: ReduceOp::Sum,
                        sizes: sizes.clone(),
                        warmup: 1,
                        iters: 2,
                        check: true,
                        staged: false,
                    };
                    (res, run_rank(&exec, plan, &spec))
                })
            })
            .collect();
        ranks.into_iter().map(|h| h.join().unwrap()).collect()
    });
    std::fs::remove_file(&file).unwrap();
    let lens: Vec<u64> = reports[0].0.clone();
    let bytes = message_bytes(&plan, &lens, types);
    assert!(
        prefers_jit(PlanTraits::of(&plan), bytes, types, ReduceOp::Sum),
        "the rule must pick the JIT here ({bytes} bytes), or this tests nothing"
    );
    for (r, (_, rep)) in reports.into_iter().enumerate() {
        let rep = rep.unwrap_or_else(|e| panic!("rank {r}: auto did not fall back: {e}"));
        assert_eq!(rep.wrong, 0, "rank {r}: wrong sums on the fallback");
    }
}
