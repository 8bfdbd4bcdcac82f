//! Launch agreement and failure propagation on the real multi-process runtime (ranks are
//! processes of this test binary, re-executed with `SYMSCHED_AGREE_TEST_ROLE` set, running only
//! `rank_entry`). Every wait is bounded: the signal timeout is 20 s, the launcher's 120 s, and
//! the launcher kills the other ranks when one fails and removes the rendezvous directory.
//!
//! - `disagreements_fail_on_every_rank`: element counts, dtype, op and binding pattern that
//!   differ between ranks fail with `ExecError::Disagreement` on every rank, naming each rank's
//!   values, leave the peer's buffer untouched, and the next agreeing launch works;
//! - `a_local_refusal_fails_the_peers`: a rank whose own arguments are refused returns its
//!   error, and its peer fails at once with a disagreement quoting it (no timeout);
//! - `abort_fails_peers_fast_and_reset_restores`: a rank that aborts the group fails its peer's
//!   launch within a second naming it; after `reset_after_abort` launches work again;
//! - `registries_realign_after_reset`: a rank fails before loading a plan its peer loaded (so
//!   their signal-slot and scratch registries differ); after the reset every plan, old and
//!   new, runs with the right sums and the barrier's registry check passes;
//! - `exchanges_restart_after_reset`: the executor's own exchanges (allgather, barrier) and the
//!   eager alltoallv channel, interrupted by an abort, give the new call's bytes after the
//!   reset, not the aborted call's.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_plan::{LaunchSizes, Plan};
use symsched_runtime::error::RuntimeError;
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, Executor, Fabric, GroupFabric, LaunchArgs, ReduceOp,
};

const ROLE: &str = "SYMSCHED_AGREE_TEST_ROLE";

fn plan(name: &str, p: u32) -> Plan {
    compile(
        &standard_library(),
        name,
        p,
        &BTreeMap::new(),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|d| panic!("{name} does not verify: {d:?}"))
    .plan
}

fn run_ranks(n: usize, role: &str) {
    let out = common::run_rank_processes(n, ROLE, role, 20_000, Duration::from_secs(120));
    assert!(!out.rendezvous_dir.exists(), "rendezvous directory left");
}

#[test]
fn rank_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let rt = symsched_runtime::Runtime::init_from_env().expect("joins the job");
    match role.as_str() {
        "disagree" => disagree(&rt),
        "refusal" => refusal(&rt),
        "abort" => abort(&rt),
        "realign" => realign(&rt),
        "exchanges" => exchanges(&rt),
        r => panic!("unknown role {r}"),
    }
    rt.finalize().expect("finalize");
}

fn sizes(n: u64) -> LaunchSizes {
    let mut s = LaunchSizes::default();
    s.vars.insert("n".into(), n);
    s
}

/// One allreduce launch of `n` elements of `dtype` with `op`, heap-bound at `offset` or
/// staged from private memory; the buffer holds `rank + 1` everywhere.
fn allreduce(
    exec: &Executor<GroupFabric>,
    plan: &Plan,
    dtype: DType,
    op: ReduceOp,
    n: u64,
    heap: Option<u64>,
) -> (Result<(), ExecError>, Vec<u8>) {
    let lp = exec.load(plan).expect("loads");
    let types = ElemTypes::new(dtype, None).unwrap();
    let bytes = n * dtype.size() as u64;
    let me = exec.fabric().rank();
    let fill = |b: &mut [u8]| match dtype {
        DType::F64 => b
            .chunks_mut(8)
            .for_each(|c| c.copy_from_slice(&f64::from(me + 1).to_le_bytes())),
        _ => b
            .chunks_mut(4)
            .for_each(|c| c.copy_from_slice(&(me as f32 + 1.0).to_le_bytes())),
    };
    let sizes = sizes(n);
    let mut private = vec![0u8; bytes as usize];
    let r = match heap {
        Some(offset) => {
            let p = exec.fabric().heap_ptr(me, offset, bytes).unwrap();
            // SAFETY: a checked range of this rank's heap, nobody else writes it before the
            // launch's entry.
            let s = unsafe { std::slice::from_raw_parts_mut(p, bytes as usize) };
            fill(s);
            let r = exec.launch(
                &lp,
                LaunchArgs {
                    types,
                    op,
                    sizes: &sizes,
                    buffers: &mut [Binding::Heap { offset, bytes }],
                },
            );
            private.copy_from_slice(s);
            r
        }
        None => {
            fill(&mut private);
            exec.launch(
                &lp,
                LaunchArgs {
                    types,
                    op,
                    sizes: &sizes,
                    buffers: &mut [Binding::Host(&mut private)],
                },
            )
        }
    };
    (r, private)
}

fn expect_disagreement(r: Result<(), ExecError>, parts: &[&str], what: &str) {
    match r {
        Err(ExecError::Disagreement(d)) => {
            let msg = d.to_string();
            for p in parts {
                assert!(msg.contains(p), "{what}: `{p}` not in: {msg}");
            }
            assert_eq!(d.per_rank.len(), 2, "{what}: {msg}");
        }
        other => panic!("{what}: expected a disagreement, got {other:?}"),
    }
}

fn disagree(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let exec = Executor::new(GroupFabric::new(world.clone()));
    let me = exec.fabric().rank();
    let one_shot = plan("allreduce_one_shot", 2);
    let two_shot = plan("allreduce_two_shot", 2);
    let sym = exec.fabric().scratch("test/x", 4096).unwrap();
    let ones = |v: &[u8]| v.chunks(4).all(|c| c == (me as f32 + 1.0).to_le_bytes());
    for pl in [&one_shot, &two_shot] {
        // element counts
        let n = if me == 0 { 100 } else { 120 };
        let (r, buf) = allreduce(&exec, pl, DType::F32, ReduceOp::Sum, n, Some(sym));
        expect_disagreement(
            r,
            &[
                "rank 0: 100 elements f32 sum",
                "rank 1: 120 elements f32 sum",
            ],
            "counts",
        );
        assert!(
            ones(&buf),
            "a disagreeing launch wrote into rank {me}'s buffer"
        );
        // dtype
        let dt = if me == 0 { DType::F64 } else { DType::F32 };
        let (r, _) = allreduce(&exec, pl, dt, ReduceOp::Sum, 16, None);
        expect_disagreement(
            r,
            &["rank 0: 16 elements f64", "rank 1: 16 elements f32"],
            "dtype",
        );
        // op
        let op = if me == 0 {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        let (r, _) = allreduce(&exec, pl, DType::F32, op, 16, None);
        expect_disagreement(r, &["f32 max", "f32 sum"], "op");
        // binding pattern: symmetric on one rank, ordinary on the other
        let heap = (me == 0).then_some(sym);
        let (r, _) = allreduce(&exec, pl, DType::F32, ReduceOp::Sum, 16, heap);
        expect_disagreement(
            r,
            &[
                "symmetric at heap offset",
                "ordinary (staged)",
                "bound differently",
            ],
            "binding",
        );
        // and the group still works
        let (r, buf) = allreduce(&exec, pl, DType::F32, ReduceOp::Sum, 16, None);
        r.expect("an agreeing launch after disagreements");
        assert!(buf.chunks(4).all(|c| c == 3.0f32.to_le_bytes()), "sum");
        // a launch that repeats the last agreed one exactly on rank 0 (its word and check take
        // the common-case path) while rank 1 changes its count
        for _ in 0..3 {
            allreduce(&exec, pl, DType::F32, ReduceOp::Sum, 16, None)
                .0
                .expect("repeated agreeing launches");
        }
        let n = if me == 0 { 16 } else { 17 };
        let (r, _) = allreduce(&exec, pl, DType::F32, ReduceOp::Sum, n, None);
        expect_disagreement(
            r,
            &["rank 0: 16 elements f32 sum", "rank 1: 17 elements f32 sum"],
            "a count changed on one rank after repeated launches",
        );
        let (r, buf) = allreduce(&exec, pl, DType::F32, ReduceOp::Sum, 16, None);
        r.expect("an agreeing launch after it");
        assert!(buf.chunks(4).all(|c| c == 3.0f32.to_le_bytes()), "sum");
    }
    world.barrier().unwrap();
}

fn refusal(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let exec = Executor::new(GroupFabric::new(world.clone()));
    let me = exec.fabric().rank();
    let pl = plan("allreduce_one_shot", 2);
    let lp = exec.load(&pl).unwrap();
    let types = ElemTypes::new(DType::F32, None).unwrap();
    // rank 1 binds 12 bytes for 4 elements: refused locally
    let mut buf = vec![0u8; if me == 0 { 16 } else { 12 }];
    let t0 = Instant::now();
    let r = exec.launch(
        &lp,
        LaunchArgs {
            types,
            op: ReduceOp::Sum,
            sizes: &sizes(4),
            buffers: &mut [Binding::Host(&mut buf)],
        },
    );
    if me == 1 {
        assert!(matches!(r, Err(ExecError::SizeMismatch { .. })), "{r:?}");
    } else {
        expect_disagreement(
            r,
            &["rank 1: refused its own arguments", "needs 16 bytes but 12"],
            "refusal",
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let (r, _) = allreduce(&exec, &pl, DType::F32, ReduceOp::Sum, 4, None);
    r.expect("the next launch agrees");
    world.barrier().unwrap();
}

fn abort(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let exec = Executor::new(GroupFabric::new(world.clone()));
    let me = exec.fabric().rank();
    let pl = plan("allreduce_one_shot", 2);
    let (r, _) = allreduce(&exec, &pl, DType::F32, ReduceOp::Sum, 4, None);
    r.expect("first launch");
    if me == 0 {
        // Fails "inside" a collective its peer already entered.
        std::thread::sleep(Duration::from_millis(200));
        world.abort("IndexError: 0 rows on rank 0");
    } else {
        let t0 = Instant::now();
        let (r, _) = allreduce(&exec, &pl, DType::F32, ReduceOp::Sum, 4, None);
        let waited = t0.elapsed();
        match r {
            Err(ExecError::Core(e)) => match *e {
                RuntimeError::GroupAborted(a) => {
                    assert_eq!(a.by_local, 0);
                    assert!(a.message.contains("IndexError"), "{}", a.message);
                }
                e => panic!("expected an abort, got {e}"),
            },
            other => panic!("expected an abort, got {other:?}"),
        }
        assert!(waited < Duration::from_secs(2), "noticed after {waited:?}");
    }
    // Refused until reset, on every rank.
    let (r, _) = allreduce(&exec, &pl, DType::F32, ReduceOp::Sum, 4, None);
    assert!(
        matches!(&r, Err(ExecError::Core(e)) if matches!(**e, RuntimeError::GroupAborted(_))),
        "{r:?}"
    );
    let g0 = world.generation();
    world.reset_after_abort().expect("reset");
    assert_eq!(world.generation(), g0 + 1);
    for _ in 0..3 {
        let (r, buf) = allreduce(&exec, &pl, DType::F32, ReduceOp::Sum, 4, None);
        r.expect("a launch after the reset");
        assert!(buf.chunks(4).all(|c| c == 3.0f32.to_le_bytes()), "sum");
    }
    world.barrier().unwrap();
}

fn expect_aborted_by(r: Result<impl std::fmt::Debug, ExecError>, by: usize, what: &str) {
    match r {
        Err(ExecError::Core(e)) => match *e {
            RuntimeError::GroupAborted(a) => assert_eq!(a.by_local, by, "{what}"),
            e => panic!("{what}: expected an abort, got {e}"),
        },
        other => panic!("{what}: expected an abort, got {other:?}"),
    }
}

fn realign(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let exec = Executor::new(GroupFabric::new(world.clone()));
    let me = exec.fabric().rank();
    let one = plan("allreduce_one_shot", 2);
    let two = plan("allreduce_two_shot", 2);
    let ring = plan("allreduce_ring", 2);
    let (r, _) = allreduce(&exec, &one, DType::F32, ReduceOp::Sum, 4, None);
    r.expect("first launch");
    if me == 0 {
        // Fails before it ever loads `two` (a bad argument seen only here).
        std::thread::sleep(Duration::from_millis(200));
        world.abort("ValueError: bad argument on rank 0");
    } else {
        // Loads `two` (its slots and scratch) and waits in its launch until the abort.
        let (r, _) = allreduce(&exec, &two, DType::F32, ReduceOp::Sum, 4, None);
        expect_aborted_by(r, 0, "the launch rank 0 never entered");
    }
    world.reset_after_abort().expect("reset");
    // A plan new to both ranks: before the reset forgot the registries, rank 1 would put its
    // slots after `two`'s and rank 0 where `two`'s are on rank 1.
    exec.load(&ring).expect("loads");
    world
        .barrier()
        .expect("the slot and scratch registries agree after the reset");
    for (name, pl) in [("ring", &ring), ("two_shot", &two), ("one_shot", &one)] {
        for round in 0..2 {
            let (r, buf) = allreduce(&exec, pl, DType::F32, ReduceOp::Sum, 6, None);
            r.unwrap_or_else(|e| panic!("{name} #{round} after the reset: {e}"));
            assert!(
                buf.chunks(4).all(|c| c == 3.0f32.to_le_bytes()),
                "{name} #{round}: sum"
            );
        }
    }
    world.barrier().expect("registries still agree");
}

/// Rank r's alltoallv chunk for rank j in call `k`: `[1000 k + 10 r + j; j + 1]`.
fn chunk(k: u32, r: u32, j: u32) -> Vec<i32> {
    vec![(1000 * k + 10 * r + j) as i32; j as usize + 1]
}

/// One eager alltoallv of call `k` on 2 ranks; returns the received elements.
fn eager_call(exec: &Executor<GroupFabric>, k: u32) -> Result<Vec<i32>, ExecError> {
    let me = exec.fabric().rank();
    let send: Vec<u8> = (0..2)
        .flat_map(|j| chunk(k, me, j))
        .flat_map(i32::to_le_bytes)
        .collect();
    let sc: Vec<u64> = (0..2).map(|j| j + 1).collect();
    let rc = vec![u64::from(me) + 1; 2];
    let mut recv = vec![0u8; 4 * 2 * (me as usize + 1)];
    match exec.alltoallv_eager(DType::I32, &sc, &rc, &send, None, &mut recv)? {
        symsched_runtime::exec::AlltoallvOutcome::Done => {}
        other => panic!("small chunks go eagerly, got {other:?}"),
    }
    Ok(recv
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

fn exchanges(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let exec = Executor::new(GroupFabric::new(world.clone()));
    let me = exec.fabric().rank();
    let expect_eager = |k: u32, got: Vec<i32>| {
        let want: Vec<i32> = (0..2).flat_map(|r| chunk(k, r, me)).collect();
        assert_eq!(got, want, "alltoallv call {k}");
    };
    for k in 0..3 {
        expect_eager(k, eager_call(&exec, k).expect("eager alltoallv"));
        let all = exec.allgather_u64("test", &[u64::from(me) + 10 * u64::from(k)]);
        assert_eq!(
            all.expect("allgather"),
            vec![vec![10 * u64::from(k)], vec![1 + 10 * u64::from(k)]]
        );
    }
    exec.barrier().expect("barrier");
    if me == 0 {
        std::thread::sleep(Duration::from_millis(200));
        world.abort("RuntimeError: failed between two collectives on rank 0");
    } else {
        // Rank 1 enters both and leaves its bytes in rank 0's areas before the abort.
        expect_aborted_by(eager_call(&exec, 3), 0, "eager alltoallv");
        expect_aborted_by(exec.allgather_u64("test", &[99]), 0, "allgather");
    }
    world.reset_after_abort().expect("reset");
    for k in 4..7 {
        expect_eager(
            k,
            eager_call(&exec, k).expect("eager alltoallv after the reset"),
        );
        let all = exec.allgather_u64("test", &[u64::from(me) + 10 * u64::from(k)]);
        assert_eq!(
            all.expect("allgather after the reset"),
            vec![vec![10 * u64::from(k)], vec![1 + 10 * u64::from(k)]]
        );
        exec.barrier().expect("barrier after the reset");
    }
    world.barrier().unwrap();
}

#[test]
fn registries_realign_after_reset() {
    run_ranks(2, "realign");
}

#[test]
fn exchanges_restart_after_reset() {
    run_ranks(2, "exchanges");
}

#[test]
fn disagreements_fail_on_every_rank() {
    run_ranks(2, "disagree");
}

#[test]
fn a_local_refusal_fails_the_peers() {
    run_ranks(2, "refusal");
}

#[test]
fn abort_fails_peers_fast_and_reset_restores() {
    run_ranks(2, "abort");
}
