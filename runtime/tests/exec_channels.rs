//! Channels inside a rank (plan schema 3, `docs/plan-schema.md` "Channels"): a rank's channels
//! run concurrently on the interpreter and on the JIT (a kernel per channel), ordered only by
//! signals and waits; a failing channel fails the launch without leaving the others hanging, on
//! either backend. Plans are standard schedules whose steps the tests split into channels by
//! hand.

mod common;

use common::channels::{alltoall_waiting_on_a_later_channel, failing_channel_plan, two_shot_split};
use std::sync::Arc;
use std::time::{Duration, Instant};
use symsched_plan::{LaunchSizes, Plan, PlanError};
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::harness::{run_in_world, run_local, sizes_for, RankReport, RunSpec};
use symsched_runtime::exec::reference::fill;
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, ExecOptions, Executor, LaunchArgs, LocalWorld, ReduceOp,
};

/// Bound on every run here: a hang fails the test instead of stalling it.
const TIMEOUT: Duration = Duration::from_secs(10);

fn f32s() -> ElemTypes {
    ElemTypes::new(DType::F32, None).expect("f32")
}

/// [`run_local`] with every executor on `backend` (the ranks are threads, so the per-thread
/// override of `launches_on` would not reach them).
fn run_on(
    plan: &Plan,
    spec: &RunSpec,
    backend: BackendKind,
    heap: u64,
    timeout: Duration,
) -> Result<Vec<RankReport>, ExecError> {
    let opts = ExecOptions {
        backend,
        ..ExecOptions::default()
    };
    let world = LocalWorld::with_options(plan.group_size, heap, timeout, opts)?;
    run_in_world(plan, spec, &world)
}

#[test]
fn a_wait_on_a_later_channel_completes_with_correct_data() {
    let plan = alltoall_waiting_on_a_later_channel();
    plan.check_consistency().expect("consistent");
    assert_eq!(plan.channel_count(), 2);
    let spec = common::spec(f32s(), sizes_for(&plan, 2 * 1000, &[]), false);
    let t0 = Instant::now();
    for backend in [BackendKind::Interp, BackendKind::Jit, BackendKind::Auto] {
        let reports = run_on(&plan, &spec, backend, 1 << 20, TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        for (r, rep) in reports.iter().enumerate() {
            assert_eq!(rep.wrong, 0, "{backend:?} rank {r}");
        }
    }
    // Staged (private) buffers too: staging in before the channels, out after all of them.
    let staged = common::spec(f32s(), sizes_for(&plan, 2 * 1000, &[]), true);
    let reports = run_local(&plan, &staged, 1 << 20, TIMEOUT).expect("staged");
    assert!(reports.iter().all(|r| r.wrong == 0));
    assert!(t0.elapsed() < TIMEOUT, "no wait ran into its deadline");
}

/// The same plan run as one sequence (every step on channel 0) never finishes: the rank waits
/// for its own later step, and the launch fails with a timeout naming that wait.
#[test]
fn the_same_steps_as_one_sequence_deadlock() {
    let mut plan = alltoall_waiting_on_a_later_channel();
    for r in &mut plan.ranks {
        for s in &mut r.steps {
            s.channel = 0;
        }
    }
    let spec = common::spec(f32s(), sizes_for(&plan, 2 * 100, &[]), false);
    let r = run_local(&plan, &spec, 1 << 20, Duration::from_millis(300));
    assert!(
        matches!(&r, Err(ExecError::Timeout(t)) if t.slot == "own_copied"),
        "{:?}",
        r.err()
    );
}

/// Run `plan` once on its ranks (threads over a fresh in-process world), every role buffer
/// private (staged), inputs filled deterministically; returns every rank's role buffers after
/// the launch.
fn run_bytes(plan: &Plan, sizes: &LaunchSizes) -> Result<Vec<Vec<Vec<u8>>>, ExecError> {
    let world = LocalWorld::new(plan.group_size, 1 << 22)?.with_timeout(TIMEOUT);
    let group = world.world_group()?;
    let types = f32s();
    let results: Vec<Result<Vec<Vec<u8>>, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.group_size)
            .map(|r| {
                let group = Arc::clone(&group);
                s.spawn(move || {
                    let exec = Executor::new(group.fabric(r)?);
                    let lp = exec.load(plan)?;
                    let lens = symsched_runtime::exec::reference::role_lens(plan, r, sizes)?;
                    let mut bufs: Vec<Vec<u8>> = lens
                        .iter()
                        .enumerate()
                        .map(|(i, n)| fill(types.data, r, 0, i, *n as usize))
                        .collect();
                    {
                        let mut binds: Vec<Binding> = bufs
                            .iter_mut()
                            .map(|b| Binding::Host(b.as_mut_slice()))
                            .collect();
                        exec.launch(
                            &lp,
                            LaunchArgs {
                                types,
                                op: ReduceOp::Sum,
                                sizes,
                                buffers: &mut binds,
                            },
                        )?;
                    }
                    exec.barrier()?;
                    Ok(bufs)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ExecError::Runtime("rank thread panicked".into())))
            })
            .collect()
    });
    results.into_iter().collect()
}

#[test]
fn a_channel_split_reduce_and_push_gives_the_same_bytes() {
    let single = common::plan("allreduce_two_shot", 2);
    let split = two_shot_split();
    split.check_consistency().expect("consistent");
    assert_eq!(split.channel_count(), 2);
    for n in [1u64, 7, 4096, 100_003] {
        let sizes = sizes_for(&single, n, &[]);
        let want = run_bytes(&single, &sizes).expect("single channel");
        let got = run_bytes(&split, &sizes).expect("two channels");
        assert_eq!(got, want, "n = {n}");
    }
    // And against the sequential reference, repeated launches included.
    let spec = common::spec(f32s(), sizes_for(&split, 10_000, &[]), false);
    common::run_checked(&split, &spec, 1 << 22, "two-shot split");
}

fn launch_one(
    plan: &Plan,
    types: ElemTypes,
    backend: BackendKind,
    timeout: Duration,
) -> Result<(), ExecError> {
    let opts = ExecOptions {
        backend,
        ..ExecOptions::default()
    };
    let world = LocalWorld::with_options(1, 1 << 16, timeout, opts)?;
    let exec = Executor::new(world.world_group()?.fabric(0)?);
    let lp = exec.load(plan)?;
    let mut sizes = LaunchSizes::default();
    for (v, x) in [("n", 4), ("m", 1), ("k", 1)] {
        sizes.vars.insert(v.into(), x);
    }
    let mut x = vec![0u8; 4 * types.data.size()];
    let mut y = vec![0u8; 4 * types.data.size()];
    let mut binds = [Binding::Host(&mut x), Binding::Host(&mut y)];
    exec.launch(
        &lp,
        LaunchArgs {
            types,
            op: ReduceOp::Sum,
            sizes: &sizes,
            buffers: &mut binds,
        },
    )
}

/// The failing channel plan on `backend`: f32 runs through; with i32, channel 1 fails at its
/// first step while channel 0 sits in a wait whose deadline is far off, and must stop long
/// before it, the launch reporting channel 1's own error.
fn a_failing_channel_cancels_the_waiting_one(backend: BackendKind) {
    let plan = failing_channel_plan();
    plan.check_consistency().expect("consistent");
    // f32: the matmul runs, the signal comes, the copy completes.
    launch_one(&plan, f32s(), backend, TIMEOUT).expect("f32 launch");
    let i32s = ElemTypes::new(DType::I32, None).expect("i32");
    let t0 = Instant::now();
    let r = launch_one(&plan, i32s, backend, TIMEOUT);
    let took = t0.elapsed();
    assert!(
        matches!(&r, Err(ExecError::UnsupportedOp { .. })),
        "{backend:?}: the failing channel's own error: {r:?}"
    );
    assert!(
        took < TIMEOUT / 4,
        "{backend:?}: channel 0 was not cancelled: the launch took {took:?}"
    );
}

#[test]
fn a_failing_channel_fails_the_launch_and_cancels_the_others() {
    a_failing_channel_cancels_the_waiting_one(BackendKind::Interp);
}

/// The JIT's channel kernels: channel 0's kernel blocks in the wait intrinsic, which observes
/// the launch's cancel word once channel 1's kernel failed in its matmul.
#[test]
fn a_failing_channel_of_a_jit_launch_cancels_its_sibling_in_a_wait() {
    a_failing_channel_cancels_the_waiting_one(BackendKind::Jit);
}

/// The JIT runs channel plans (a kernel per channel) and `auto` keeps its size rule for them:
/// a big reducing split plan gives correct data on both.
#[test]
fn the_jit_and_auto_run_a_split_reducing_plan() {
    let split = two_shot_split();
    let big = common::spec(f32s(), sizes_for(&split, 1 << 18, &[]), false);
    for backend in [BackendKind::Jit, BackendKind::Auto] {
        let reports = run_on(&split, &big, backend, 1 << 23, TIMEOUT)
            .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
        assert!(reports.iter().all(|r| r.wrong == 0), "{backend:?}");
    }
}

#[test]
fn a_channel_past_the_limit_is_refused_at_load() {
    let mut plan = alltoall_waiting_on_a_later_channel();
    plan.ranks[0].steps[0].channel = symsched_plan::MAX_CHANNELS;
    let world = LocalWorld::new(2, 1 << 16).expect("world");
    let exec = Executor::new(
        world
            .world_group()
            .expect("group")
            .fabric(0)
            .expect("rank 0"),
    );
    let r = exec.load(&plan);
    assert!(
        matches!(&r, Err(ExecError::Plan(PlanError::Inconsistent(m))) if m.contains("channel")),
        "{:?}",
        r.err()
    );
}
