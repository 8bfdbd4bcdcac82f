//! The JIT over the multi-process fabric ([`GroupFabric`], here with its ranks as threads of
//! one process, each with its own `Runtime`: the same memfd heap and signal pad code as
//! processes). Its kernels look at the pad's counters themselves (`Fabric::signal_words`), so
//! this checks that the results are right (against the sequential reference) and that a wait
//! nobody satisfies fails exactly as on the interpreter: within the deadline, with the same
//! error message naming the schedule, step, slot and the silent peer.

mod jit_common;

use jit_common::instance;
use std::time::{Duration, Instant};
use symsched_runtime::config::{BackendKind, ExecOptions};
use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
use symsched_runtime::exec::{
    DType, ElemTypes, ExecError, Executor, Fabric, GroupFabric, ReduceOp,
};
use symsched_runtime::{Runtime, RuntimeConfig};

const P: usize = 3;
/// Signal deadline of the run whose waits must succeed (never reached unless broken).
const LONG: Duration = Duration::from_secs(20);
/// Signal deadline of the run with a silent rank.
const SHORT: Duration = Duration::from_millis(400);

/// `body(rank, fabric)` on `P` rank threads, each with its own runtime; their results. With
/// `strict`, the closing barrier and finalize must succeed (a run with a silent rank leaves
/// the group aborted, so there they may fail).
fn on_group<T: Send>(
    timeout: Duration,
    strict: bool,
    body: impl Fn(usize, GroupFabric) -> T + Sync,
) -> Vec<T> {
    let dir = symsched_runtime::bootstrap::make_private_dir(std::path::Path::new("/tmp"))
        .expect("rendezvous dir");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..P)
                .map(|r| {
                    let (dir, body) = (dir.clone(), &body);
                    sc.spawn(move || {
                        let mut cfg = RuntimeConfig::local(r, P, dir).expect("config");
                        cfg.heap_size = 8 << 20;
                        cfg.scratch_size = 4 << 20;
                        cfg.signal_timeout = timeout;
                        cfg.rendezvous_timeout = Duration::from_secs(60);
                        let rt = Runtime::init(cfg).expect("runtime");
                        let world = rt.world().expect("world");
                        let out = body(r, GroupFabric::new(world.clone()));
                        let closed = world.barrier().and_then(|()| rt.finalize());
                        assert!(!strict || closed.is_ok(), "closing: {closed:?}");
                        out
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("rank thread"))
                .collect::<Vec<T>>()
        })
    }));
    let _ = std::fs::remove_dir_all(&dir);
    outcome.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn executor(f: GroupFabric, backend: BackendKind) -> Executor<GroupFabric> {
    let opts = ExecOptions {
        backend,
        ..f.exec_options().clone()
    };
    Executor::with_options(f, opts)
}

fn spec(plan: &symsched_plan::Plan, count: u64, iters: u32) -> RunSpec {
    RunSpec {
        types: ElemTypes::new(DType::F32, None).expect("types"),
        op: ReduceOp::Sum,
        sizes: sizes_for(plan, count, &[]),
        warmup: 1,
        iters,
        check: true,
        staged: false,
    }
}

#[test]
fn jit_kernels_over_the_group_fabric_compute_the_reference() {
    let names = [
        "allreduce_two_shot",
        "allreduce_ring",
        "allgather_push",
        "reduce_scatter_push",
        "sendrecv_pair",
    ];
    let plans: Vec<_> = names
        .iter()
        .map(|n| instance(n, P as u32).unwrap_or_else(|| panic!("{n} at P = {P}")))
        .collect();
    let reports = on_group(LONG, true, |_, f| {
        let exec = executor(f, BackendKind::Jit);
        plans
            .iter()
            .map(|pl| {
                run_rank(&exec, pl, &spec(pl, 3 * 1001, 3))
                    .map(|r| (r.wrong, r.first_wrong))
                    .map_err(|e| e.to_string())
            })
            .collect::<Vec<_>>()
    });
    for (r, rep) in reports.iter().enumerate() {
        for (name, got) in names.iter().zip(rep) {
            assert_eq!(got, &Ok((0, None)), "{name}, rank {r}");
        }
    }
}

/// The first launch's error on every rank when the last rank never launches `plan`.
fn with_silent_rank(backend: BackendKind, plan: &symsched_plan::Plan) -> Vec<Option<String>> {
    on_group(SHORT, false, |r, f| {
        if r == P - 1 {
            // Silent until the others have given up (their waits expire after `SHORT`).
            std::thread::sleep(SHORT * 4);
            return None;
        }
        let exec = executor(f, backend);
        let t0 = Instant::now();
        let err = run_rank(&exec, plan, &spec(plan, 3 * 64, 1)).expect_err("a rank is silent");
        let waited = t0.elapsed();
        assert!(waited < SHORT + Duration::from_secs(10), "took {waited:?}");
        assert!(
            matches!(err, ExecError::Core(_) | ExecError::Timeout(_)),
            "not a timeout: {err}"
        );
        Some(err.to_string())
    })
}

#[test]
fn a_stuck_jit_wait_fails_as_the_interpreters() {
    let plan = instance("allreduce_two_shot", P as u32).expect("plan");
    let interp = with_silent_rank(BackendKind::Interp, &plan);
    let jit = with_silent_rank(BackendKind::Jit, &plan);
    for r in 0..P - 1 {
        let (i, j) = (interp[r].as_deref(), jit[r].as_deref());
        assert!(
            i.is_some_and(|m| m.contains(&format!("rank {}", P - 1))),
            "rank {r}: {i:?}"
        );
        assert_eq!(i, j, "rank {r}: the backends' errors differ");
    }
}
