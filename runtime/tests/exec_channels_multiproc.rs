//! Channels on the multi-process fabric: ranks are processes started by the launcher (this
//! test binary re-executed with `SYMSCHED_CHANNELS_TEST_ROLE` set, running only `rank_entry`),
//! so a channel's waits go through the runtime core's wait in slices
//! ([`symsched_runtime::exec::Fabric::wait_cancellable`]). Every role runs on the interpreter
//! and, as `<role>-jit` in processes of its own, on the JIT (a kernel per channel, whose wait
//! intrinsic takes the same cancellable wait). Bounded by the launcher's timeout.

mod common;

use common::channels::{alltoall_waiting_on_a_later_channel, failing_channel_plan, two_shot_split};
use std::time::{Duration, Instant};
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::backend::{launches_on, overridden};
use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, Executor, GroupFabric, LaunchArgs, ReduceOp,
};

const ROLE: &str = "SYMSCHED_CHANNELS_TEST_ROLE";

/// The signal timeout of the ranks: a cancelled channel must stop long before it.
const SIGNAL_TIMEOUT_MS: u64 = 20_000;

fn run_ranks(n: usize, role: &str) {
    common::run_rank_processes(n, ROLE, role, SIGNAL_TIMEOUT_MS, Duration::from_secs(60));
}

/// The rank program. Outside a launch (no role set) it has nothing to do.
#[test]
fn rank_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let rt = symsched_runtime::Runtime::init_from_env().expect("joins the job");
    let (role, backend) = match role.strip_suffix("-jit") {
        Some(r) => (r, BackendKind::Jit),
        None => (role.as_str(), BackendKind::Interp),
    };
    // The launches of this thread run on `backend` (the choice is made on the calling thread,
    // before any channel's worker starts).
    launches_on(Some(backend), || match role {
        "data" => data(&rt),
        "cancel" => cancel(&rt),
        r => panic!("unknown role {r}"),
    });
    rt.finalize().expect("finalize");
}

fn data(rt: &symsched_runtime::Runtime) {
    let exec = Executor::new(GroupFabric::new(rt.world().expect("world")));
    let types = ElemTypes::new(DType::F32, None).expect("f32");
    for plan in [alltoall_waiting_on_a_later_channel(), two_shot_split()] {
        for (count, staged) in [(2 * 1000, false), (2 * 4097, true)] {
            let spec = RunSpec {
                types,
                op: ReduceOp::Sum,
                sizes: sizes_for(&plan, count, &[]),
                warmup: 0,
                iters: 3,
                check: true,
                staged,
            };
            let rep = run_rank(&exec, &plan, &spec).unwrap_or_else(|e| {
                panic!("{:?}: {} count={count}: {e}", overridden(), plan.schedule)
            });
            assert_eq!(rep.wrong, 0, "{} count={count}", plan.schedule);
        }
    }
}

/// Every process runs the one-rank failing plan on a group of its own: channel 1 fails at once
/// (an i32 matmul), channel 0 sits in the core's wait and must be cancelled.
fn cancel(rt: &symsched_runtime::Runtime) {
    let me = rt.world().expect("world").rank();
    let solo = rt.group(&[me], false).expect("a group of one");
    let exec = Executor::new(GroupFabric::new(solo));
    let plan = failing_channel_plan();
    let lp = exec.load(&plan).expect("loads");
    let mut sizes = symsched_plan::LaunchSizes::default();
    for (v, x) in [("n", 4), ("m", 1), ("k", 1)] {
        sizes.vars.insert(v.into(), x);
    }
    let types = ElemTypes::new(DType::I32, None).expect("i32");
    let (mut x, mut y) = (vec![0u8; 16], vec![0u8; 16]);
    let mut binds = [Binding::Host(&mut x), Binding::Host(&mut y)];
    let t0 = Instant::now();
    let r = exec.launch(
        &lp,
        LaunchArgs {
            types,
            op: ReduceOp::Sum,
            sizes: &sizes,
            buffers: &mut binds,
        },
    );
    let took = t0.elapsed();
    assert!(
        matches!(&r, Err(ExecError::UnsupportedOp { .. })),
        "{:?}: the failing channel's own error: {r:?}",
        overridden()
    );
    assert!(
        took < Duration::from_millis(SIGNAL_TIMEOUT_MS / 4),
        "{:?}: channel 0 was not cancelled: the launch took {took:?}",
        overridden()
    );
}

#[test]
fn channels_on_processes_give_correct_data() {
    run_ranks(2, "data");
}

#[test]
fn a_failing_channel_cancels_a_wait_in_the_core() {
    run_ranks(2, "cancel");
}

#[test]
fn channels_on_processes_give_correct_data_on_the_jit() {
    run_ranks(2, "data-jit");
}

#[test]
fn a_failing_jit_channel_cancels_a_wait_in_the_core() {
    run_ranks(2, "cancel-jit");
}
