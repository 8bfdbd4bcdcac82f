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
