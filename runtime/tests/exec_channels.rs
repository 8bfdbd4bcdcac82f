//! Channels inside a rank (plan schema 3, `docs/plan-schema.md` "Channels"): a rank's channels
//! run concurrently on the interpreter, ordered only by signals and waits; a failing channel
//! fails the launch without leaving the others hanging; the JIT refuses such plans with a typed
//! error and `auto` runs them on the interpreter. Plans are standard schedules whose steps the
//! tests split into channels by hand (the `.sched` syntax for channels is not here yet).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};
use symsched_plan::{
    BufferDecl, BufferRole, Cmp, CollectiveKind, ElemClass, Extent, LaunchSizes, Op, Plan,
    PlanError, RankProgram, Region, SignalMode, SignalSlot, SignalUpdate, SizeExpr, SizeVar, Step,
    WaitTarget, PLAN_SCHEMA_VERSION,
};
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::error::JitFailure;
use symsched_runtime::exec::harness::{run_local, run_rank, sizes_for, RankReport, RunSpec};
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
    let group = world.world_group()?;
    let results: Vec<Result<RankReport, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.group_size)
            .map(|r| {
                let group = Arc::clone(&group);
                s.spawn(move || run_rank(&Executor::new(group.fabric(r)?), plan, spec))
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
    // The root cause rather than the peers' timeouts it caused.
    if let Some(i) = results
        .iter()
        .position(|r| matches!(r, Err(e) if !matches!(e, ExecError::Timeout(_))))
    {
        return Err(results
            .into_iter()
            .nth(i)
            .and_then(|r| r.err())
            .expect("an error"));
    }
    results.into_iter().collect()
}

/// A new slot named `name` in `plan`; returns its index.
fn add_slot(plan: &mut Plan, name: &str) -> u32 {
    plan.signals.push(SignalSlot {
        name: name.into(),
        mode: SignalMode::Add,
    });
    plan.signals.len() as u32 - 1
}

/// `slot @ peer += 1` (once per launch).
fn signal(slot: u32, peer: u32) -> Op {
    Op::Signal {
        update: SignalUpdate {
            slot,
            peer,
            mode: SignalMode::Add,
            value: 1,
            stride: 0,
        },
    }
}

/// Wait until `slot` has had its one update of this launch (the `+= 1` of [`signal`]).
fn wait(slot: u32) -> Op {
    Op::Wait {
        slot,
        cmp: Cmp::Ge,
        target: WaitTarget {
            stride: 1,
            offset: 1,
        },
    }
}

/// Replace rank `r`'s steps with `steps` (channel, op), then number every step of the plan
/// afresh (ids are unique over the plan).
fn set_steps(plan: &mut Plan, r: usize, steps: Vec<(u32, Op)>) {
    plan.ranks[r].steps = steps
        .into_iter()
        .map(|(channel, op)| Step {
            id: 0,
            span: (0, 0),
            op,
            channel,
        })
        .collect();
    let mut id = 0;
    for rank in &mut plan.ranks {
        for s in &mut rank.steps {
            s.id = id;
            id += 1;
        }
    }
}

/// The ops of rank `r`, in plan order.
fn ops(plan: &Plan, r: usize) -> Vec<Op> {
    plan.ranks[r].steps.iter().map(|s| s.op.clone()).collect()
}

/// `alltoall_push` at P = 2 with every rank's own-block copy moved to channel 1, placed *after*
/// channel 0's steps, and channel 0 first waiting for a signal channel 1 sends only after that
/// copy: as one sequence the rank waits for its own last step (deadlock); as channels it runs.
fn alltoall_waiting_on_a_later_channel() -> Plan {
    let mut plan = common::plan("alltoall_push", 2);
    let own = add_slot(&mut plan, "own_copied");
    for r in 0..2 {
        let all = ops(&plan, r);
        let (copies, rest): (Vec<Op>, Vec<Op>) =
            all.into_iter().partition(|o| matches!(o, Op::Copy { .. }));
        assert_eq!(copies.len(), 1, "alltoall_push copies its own block once");
        let mut steps = vec![(0, wait(own))];
        steps.extend(rest.into_iter().map(|o| (0, o)));
        steps.extend(copies.into_iter().map(|o| (1, o)));
        steps.push((1, signal(own, r as u32)));
        set_steps(&mut plan, r, steps);
    }
    plan
}

#[test]
fn a_wait_on_a_later_channel_completes_with_correct_data() {
    let plan = alltoall_waiting_on_a_later_channel();
    plan.check_consistency().expect("consistent");
    assert_eq!(plan.channel_count(), 2);
    let spec = common::spec(f32s(), sizes_for(&plan, 2 * 1000, &[]), false);
    let t0 = Instant::now();
    for backend in [BackendKind::Interp, BackendKind::Auto] {
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

/// `allreduce_two_shot` at P = 2 with each rank's reduce-scatter half on channel 0 and its
/// allgather half (the push of the reduced chunk and the wait for the peer's) on channel 1,
/// which waits for a signal channel 0 sends after its reduce.
fn two_shot_split() -> Plan {
    let mut plan = common::plan("allreduce_two_shot", 2);
    let reduced = add_slot(&mut plan, "reduced");
    for r in 0..2 {
        let all = ops(&plan, r);
        let at = all
            .iter()
            .position(|o| matches!(o, Op::Reduce { .. }))
            .expect("two-shot reduces");
        let mut steps: Vec<(u32, Op)> = all[..=at].iter().map(|o| (0, o.clone())).collect();
        steps.push((0, signal(reduced, r as u32)));
        steps.push((1, wait(reduced)));
        steps.extend(all[at + 1..].iter().map(|o| (1, o.clone())));
        set_steps(&mut plan, r, steps);
    }
    plan
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

/// One rank, two channels, i32 data: channel 1's matmul fails at once (matmul is defined for
/// floats only, and is refused when the step runs), so the signal channel 0 waits for never
/// comes.
fn failing_channel_plan() -> Plan {
    let split_n = Extent::Split {
        total: SizeExpr::var("n"),
    };
    let buf = |name: &str, role| BufferDecl {
        name: name.into(),
        role,
        chunks: 1,
        extent: split_n.clone(),
        elem: ElemClass::Data,
    };
    let whole = |buffer| Region {
        buffer,
        first: 0,
        count: 1,
    };
    let mut plan = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        schedule: "failing_channel".into(),
        collective: CollectiveKind::Allgather,
        group_size: 1,
        params: Default::default(),
        hierarchy: None,
        size_vars: ["n", "m", "k"]
            .iter()
            .map(|v| SizeVar {
                name: (*v).into(),
                meaning: "elements".into(),
            })
            .collect(),
        buffers: vec![buf("x", BufferRole::Input), buf("y", BufferRole::Output)],
        signals: vec![],
        ranks: vec![RankProgram {
            rank: 0,
            steps: vec![],
            entry_signals: vec![],
            exit_signals: vec![],
        }],
        duals: vec![],
        source_hash: "0".repeat(64),
        folds: Default::default(),
        declared: None,
    };
    let go = add_slot(&mut plan, "go");
    set_steps(
        &mut plan,
        0,
        vec![
            (0, wait(go)),
            (
                0,
                Op::Copy {
                    src: whole(0),
                    dst: whole(1),
                },
            ),
            (
                1,
                Op::Matmul {
                    c: whole(1),
                    a: whole(0),
                    b: whole(0),
                },
            ),
            (1, signal(go, 0)),
        ],
    );
    plan
}

fn launch_one(plan: &Plan, types: ElemTypes, timeout: Duration) -> Result<(), ExecError> {
    let world = LocalWorld::new(1, 1 << 16)?.with_timeout(timeout);
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

#[test]
fn a_failing_channel_fails_the_launch_and_cancels_the_others() {
    let plan = failing_channel_plan();
    plan.check_consistency().expect("consistent");
    // f32: the matmul runs, the signal comes, the copy completes.
    launch_one(&plan, f32s(), TIMEOUT).expect("f32 launch");
    // i32: channel 1 fails at its first step; channel 0 sits in a wait whose deadline is far
    // off, and must stop long before it.
    let i32s = ElemTypes::new(DType::I32, None).expect("i32");
    let t0 = Instant::now();
    let r = launch_one(&plan, i32s, TIMEOUT);
    let took = t0.elapsed();
    assert!(
        matches!(&r, Err(ExecError::UnsupportedOp { .. })),
        "the failing channel's own error: {r:?}"
    );
    assert!(
        took < TIMEOUT / 4,
        "channel 0 was not cancelled: the launch took {took:?}"
    );
}

#[test]
fn the_jit_refuses_channels_and_auto_runs_them_on_the_interpreter() {
    let plan = alltoall_waiting_on_a_later_channel();
    let spec = common::spec(f32s(), sizes_for(&plan, 2 * 64, &[]), false);
    let r = run_on(
        &plan,
        &spec,
        BackendKind::Jit,
        1 << 20,
        Duration::from_secs(2),
    );
    match r {
        Err(ExecError::Jit(f)) => {
            let JitFailure::Compile { error, .. } = *f else {
                panic!("a compile failure, not {f}");
            };
            assert!(
                matches!(error, symsched_jit::JitError::Channels { channels: 2, .. }),
                "{error}"
            );
            assert!(error.to_string().contains("channels"), "{error}");
        }
        other => panic!(
            "the JIT must refuse a multi-channel plan: {:?}",
            other.err()
        ),
    }
    // `auto` does not even try the JIT for it (covered with data above): a big reducing split
    // plan runs too.
    let split = two_shot_split();
    let big = common::spec(f32s(), sizes_for(&split, 1 << 18, &[]), false);
    let reports = run_on(&split, &big, BackendKind::Auto, 1 << 23, TIMEOUT).expect("auto");
    assert!(reports.iter().all(|r| r.wrong == 0));
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
