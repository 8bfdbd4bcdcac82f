//! Channels on the multi-process fabric: ranks are processes started by the launcher (this
//! test binary re-executed with `SYMSCHED_CHANNELS_TEST_ROLE` set, running only `rank_entry`),
//! so a channel's waits go through the runtime core's wait in slices
//! ([`symsched_runtime::exec::Fabric::wait_cancellable`]). Every role runs on the interpreter
//! and, as `<role>-jit` in processes of its own, on the JIT (a kernel per channel, whose wait
//! intrinsic takes the same cancellable wait). Bounded by the launcher's timeout.
//!
//! The dead-peer tests start the ranks themselves ([`common::ranks`]: the launcher would stop
//! the survivors as soon as a rank dies), wait until every rank runs its channel-1 worker
//! inside the launch, SIGKILL the last rank by its pid and check that every other rank's launch
//! fails within seconds (the signal timeout is [`SIGNAL_TIMEOUT_MS`]) naming the killed rank
//! and its pid: with the typed dead-peer error, or (with several survivors) the group abort of
//! a survivor that failed first with it; never a timeout nor a cancellation. Every wait of the
//! test has a deadline; the ranks are killed and reaped whatever happens.

mod common;

use common::channels::{
    alltoall_waiting_on_a_later_channel, failing_channel_plan, two_shot_split,
    waiting_for_the_last_rank, FROM_LAST_RANK,
};
use common::ranks::{shm_entries, thread_names, RankProcesses};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::backend::{launches_on, overridden};
use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, Executor, Fabric, GroupFabric, LaunchArgs, ReduceOp,
};
use symsched_runtime::RuntimeError;

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
    // No finalize after the dead-peer roles: its world barrier cannot complete without the
    // killed rank.
    match role {
        "dead_both" => return dead_peer(rt, false, backend),
        "dead_chained" => return dead_peer(rt, true, backend),
        _ => {}
    }
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

/// The name of the worker of channel 1 (either backend: they share the channel runner).
const WORKER: &str = "symsched-ch1";

/// Milliseconds since the epoch: the ranks and the test share the clock, so rank 0 can say
/// when its launch ended relative to the kill.
fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
}

/// Every rank launches [`waiting_for_the_last_rank`] on `backend`. The last rank stalls in it until the test kills it; every other rank
/// checks the error its launch ends with and that no channel worker outlives the plan, then
/// reports `DEAD_PEER_OK ended_ms=<clock> took_ms=<launch> <error>`.
fn dead_peer(rt: symsched_runtime::Runtime, chained: bool, backend: BackendKind) {
    let fabric = GroupFabric::new(rt.world().expect("world"));
    let mut opts = fabric.exec_options().clone();
    opts.backend = backend;
    let exec = Executor::with_options(fabric, opts);
    let (me, p) = (exec.fabric().rank(), exec.fabric().size());
    let victim = p as usize - 1;
    let plan = waiting_for_the_last_rank(p, chained);
    let lp = exec.load(&plan).expect("loads");
    let sizes = sizes_for(&plan, p as u64 * 8, &[]);
    let types = ElemTypes::new(DType::F32, None).expect("f32");
    let lens = exec.role_lens(&lp, &sizes).expect("role lengths");
    let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n as usize * 4]).collect();
    let mut binds: Vec<Binding> = bufs.iter_mut().map(|b| Binding::Host(b)).collect();
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
    let (ended, took) = (now_ms(), t0.elapsed());
    assert_ne!(
        me as usize, victim,
        "the last rank's launch must not end (it is killed in it): {r:?}"
    );
    let e = r.expect_err("the last rank died inside the launch");
    let pid = rt.peer_pid(victim).expect("the pid of the last rank");
    match &e {
        ExecError::Core(c) => match &**c {
            RuntimeError::PeerDied(d) => {
                assert_eq!((d.rank, d.peer, d.pid), (me as usize, victim, pid), "{e}");
                assert_eq!(d.schedule, plan.schedule, "{e}");
                // The wait that noticed is one for the last rank (with channels chained,
                // channel 1's: channel 0 waits for channel 1 and is cancelled).
                let noticed: &[&str] = if chained {
                    &FROM_LAST_RANK[1..]
                } else {
                    &FROM_LAST_RANK
                };
                assert!(noticed.contains(&d.signal.as_str()), "{e}");
            }
            // Another survivor noticed first and aborted the group with its dead-peer error.
            RuntimeError::GroupAborted(a) if p > 2 => {
                assert!(a.by_rank != victim && a.by_rank != me as usize, "{e}");
                let named = format!("peer rank {victim} (pid {pid}) died");
                assert!(a.message.contains(&named), "{e}");
            }
            other => panic!("expected the dead-peer error, got {other:?}"),
        },
        other => panic!("expected the dead-peer error, got {other:?}"),
    }
    // The launch returned only after every channel's job had; the workers themselves belong to
    // the loaded plan (a pool kept between launches) and end when it is dropped. Their /proc
    // entries may outlive that by a moment.
    drop(lp);
    drop(exec);
    let deadline = Instant::now() + Duration::from_secs(2);
    let me_pid = std::process::id();
    while thread_names(me_pid)
        .iter()
        .any(|t| t.starts_with("symsched-ch"))
    {
        assert!(
            Instant::now() < deadline,
            "channel workers still run after the plan was dropped: {:?}",
            thread_names(me_pid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "DEAD_PEER_OK ended_ms={ended} took_ms={} {e}",
        took.as_millis()
    );
}

/// Runs [`dead_peer`] in `role` on `n` ranks started here, kills the last one while both
/// channels of every rank are inside the launch, and checks every other rank's report and the
/// cleanup.
fn survivors_name_the_killed_rank(role: &str, n: usize) {
    let before = shm_entries();
    let mut ranks = RankProcesses::start(n, ROLE, role, SIGNAL_TIMEOUT_MS);
    let pids: Vec<u32> = (0..n).map(|r| ranks.pid(r)).collect();
    let victim = n - 1;
    // A rank's channel-1 worker is started by its first multi-channel launch, once that launch
    // passed the agreement and runs the steps; then every channel of every rank can only wait.
    for r in 0..n {
        ranks.wait_for_thread(r, WORKER, Duration::from_secs(60));
    }
    // Long enough for the waits to leave their spinning phase and sleep.
    std::thread::sleep(Duration::from_millis(300));
    for (r, &pid) in pids.iter().enumerate() {
        assert!(
            thread_names(pid).iter().any(|t| t == WORKER),
            "rank {r}'s launch ended before the kill:\n{}",
            ranks.output()
        );
    }
    let killed = now_ms();
    ranks.kill(victim);
    let status = ranks.wait(victim, Duration::from_secs(10));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{}", ranks.output());
    for r in 0..victim {
        let st = ranks.wait(r, Duration::from_secs(30));
        assert!(st.success(), "rank {r} ({st}):\n{}", ranks.output());
    }
    let text = ranks.output();
    let named = format!("peer rank {victim} (pid {})", pids[victim]);
    let mut after = Vec::new();
    for r in 0..victim {
        let report = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[rank {r}] DEAD_PEER_OK ")))
            .unwrap_or_else(|| panic!("no report from rank {r}:\n{text}"));
        let ended: u128 = report
            .strip_prefix("ended_ms=")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("malformed report: {report}"));
        let ms = ended as i128 - killed as i128;
        assert!(
            (0..5_000).contains(&ms),
            "rank {r}'s launch ended {ms} ms after the kill (signal timeout \
             {SIGNAL_TIMEOUT_MS} ms):\n{text}"
        );
        assert!(report.contains(&named), "`{named}` missing: {report}");
        after.push(ms);
    }
    drop(ranks);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} left"
        );
    }
    let leaked: Vec<String> = shm_entries()
        .difference(&before)
        .filter(|e| e.contains("symsched"))
        .cloned()
        .collect();
    assert!(leaked.is_empty(), "/dev/shm entries left: {leaked:?}");
    println!("{role} on {n} ranks: the survivors failed {after:?} ms after the kill");
}

#[test]
fn a_peer_killed_while_both_channels_wait_for_it_is_named() {
    survivors_name_the_killed_rank("dead_both", 2);
}

#[test]
fn a_peer_killed_while_one_channel_waits_for_it_and_one_for_that_channel_is_named() {
    survivors_name_the_killed_rank("dead_chained", 2);
}

#[test]
fn a_peer_killed_while_two_ranks_wait_for_it_on_channels_is_named_on_both() {
    survivors_name_the_killed_rank("dead_both", 3);
}

#[test]
fn a_peer_killed_while_jit_channels_wait_for_it_is_named() {
    survivors_name_the_killed_rank("dead_both-jit", 2);
    survivors_name_the_killed_rank("dead_chained-jit", 2);
}
