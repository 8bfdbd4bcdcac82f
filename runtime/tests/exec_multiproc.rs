//! The executor on the real multi-process runtime: ranks are processes started by the launcher
//! (this test binary re-executed with `SYMSCHED_EXEC_TEST_ROLE` set, running only
//! `rank_entry`), sharing memfd heap segments. Bounded by the launcher's timeout and the signal
//! timeout; the launcher kills the other ranks when one fails and removes the rendezvous
//! directory.
//!
//! - `representative_subset`: the standard schedules × a few dtypes/ops × counts on 3 and 4
//!   ranks, heap-bound and staged, against the sequential reference;
//! - `concurrent_overlapping_groups`: an 8-rank world, 10 random overlapping sub-groups, one
//!   thread per (rank, group) running collectives concurrently, 1000+ operations, bit-exact;
//! - `errors_on_real_groups`: the multi-process fabric reports the same typed errors.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_plan::Plan;
use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
use symsched_runtime::exec::{
    DType, ElemTypes, ExecError, Executor, Fabric, GroupFabric, ReduceOp,
};

const ROLE: &str = "SYMSCHED_EXEC_TEST_ROLE";

/// Every standard schedule must verify: a refusal fails the test.
fn plan_of(lib: &Library, name: &str, p: u32, params: &BTreeMap<String, i64>) -> Plan {
    compile(lib, name, p, params, &CompileOptions::default())
        .unwrap_or_else(|d| panic!("{name} P={p} {params:?} does not verify: {d:?}"))
        .plan
}

/// Start `n` ranks of this test binary in `role`; panics with their output if any fails.
fn run_ranks(n: usize, role: &str, timeout: Duration) {
    let job = common::RankJob {
        signal_timeout_ms: 30_000,
        timeout,
        heap_bytes: 64 << 20,
        env: &[],
    };
    let out = common::run_rank_processes_with(n, ROLE, role, &job);
    assert!(
        !out.rendezvous_dir.exists(),
        "rendezvous directory left behind"
    );
}

/// The rank program. Outside a launch (no role set) it has nothing to do.
#[test]
fn rank_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let rt = symsched_runtime::Runtime::init_from_env().expect("joins the job");
    match role.as_str() {
        "smoke" => smoke(&rt),
        "subset" => subset(&rt),
        "concurrency" => concurrency(&rt),
        "errors" => errors(&rt),
        r => panic!("unknown role {r}"),
    }
    rt.finalize().expect("finalize");
}

fn smoke(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let exec = Executor::new(GroupFabric::new(world));
    for i in 0..3u64 {
        let all = exec
            .allgather_u64("smoke", &[i * 10 + exec.fabric().rank() as u64])
            .unwrap();
        let want: Vec<Vec<u64>> = (0..exec.fabric().size() as u64)
            .map(|r| vec![i * 10 + r])
            .collect();
        assert_eq!(all, want);
        exec.barrier().unwrap();
    }
}

#[test]
fn smoke_two_ranks() {
    run_ranks(2, "smoke", Duration::from_secs(60));
}

fn check(
    exec: &Executor<GroupFabric>,
    plan: &Plan,
    data: DType,
    op: ReduceOp,
    count: u64,
    staged: bool,
) {
    let spec = RunSpec {
        types: ElemTypes::new(data, None).unwrap(),
        op,
        sizes: sizes_for(plan, count, &[("m".into(), 3), ("k".into(), 4)]),
        warmup: 0,
        iters: 2,
        check: true,
        staged,
    };
    let rep = run_rank(exec, plan, &spec).unwrap_or_else(|e| {
        panic!(
            "{} P={} {data} {op} count={count}: {e}",
            plan.schedule, plan.group_size
        )
    });
    assert_eq!(
        rep.wrong, 0,
        "{} P={} {data} {op} count={count} staged={staged}",
        plan.schedule, plan.group_size
    );
}

fn subset(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let p = world.size() as u32;
    let exec = Executor::new(GroupFabric::new(world));
    let lib = standard_library();
    for s in lib.schedules() {
        let mut params = example_params(&s.name);
        if s.name.ends_with("_hier") && !p.is_multiple_of(2) {
            params.insert("L".into(), 1);
        }
        if s.name == "sendrecv_pair" {
            params.insert("src".into(), (p - 1) as i64);
        }
        let plan = plan_of(&lib, &s.name, p, &params);
        let matmul = s.name.contains("matmul");
        for (i, count) in [0u64, 3 * p as u64 + 1, 5000].into_iter().enumerate() {
            let dts: &[DType] = if matmul {
                &[DType::F32, DType::Bf16]
            } else {
                &[DType::F32, DType::Bf16, DType::I32]
            };
            for (j, &dt) in dts.iter().enumerate() {
                let ops: &[ReduceOp] = if plan.collective.reduces() {
                    &[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg]
                } else {
                    &[ReduceOp::Sum]
                };
                for &op in ops {
                    check(&exec, &plan, dt, op, count, (i + j) % 2 == 1);
                }
            }
        }
    }
}

#[test]
fn representative_subset() {
    run_ranks(3, "subset", Duration::from_secs(240));
    run_ranks(4, "subset", Duration::from_secs(240));
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Ten overlapping groups of an 8-rank world: the two DP halves, four TP pairs and four random
/// subsets (the same on every rank: derived from a fixed seed).
fn groups() -> Vec<Vec<usize>> {
    let mut g = vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]];
    for i in 0..4 {
        g.push(vec![2 * i, 2 * i + 1]);
    }
    let mut seed = 42u64;
    while g.len() < 10 {
        seed = mix(seed);
        let mut m: Vec<usize> = (0..8).filter(|r| (seed >> r) & 1 == 1).collect();
        if m.len() >= 3 {
            // A random order: group-local ranks need not follow global order.
            let by = (seed >> 16) as usize % m.len();
            m.rotate_left(by);
            g.push(m);
        }
    }
    g
}

const OPS_PER_GROUP: u64 = 104;

fn concurrency(rt: &symsched_runtime::Runtime) {
    let me = rt.rank();
    let lib = Arc::new(standard_library());
    // Create every group this rank belongs to, in the same global order on every rank.
    let mine: Vec<_> = groups()
        .into_iter()
        .enumerate()
        .filter(|(_, m)| m.contains(&me))
        .map(|(gi, m)| (gi, rt.group(&m, false).expect("group")))
        .collect();
    let schedules = [
        "allreduce_two_shot",
        "allreduce_one_shot",
        "allgather_push",
        "reduce_scatter_push",
        "alltoall_push",
        "allreduce_ring",
    ];
    let done: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = mine
            .iter()
            .map(|(gi, group)| {
                let lib = lib.clone();
                let group = group.clone();
                let gi = *gi as u64;
                s.spawn(move || {
                    let p = group.size() as u32;
                    let exec = Executor::new(GroupFabric::new(group));
                    let plans: Vec<Plan> = schedules
                        .iter()
                        .map(|n| plan_of(&lib, n, p, &BTreeMap::new()))
                        .collect();
                    let counts = [1u64, 7, 64, 1000, 4099];
                    for k in 0..OPS_PER_GROUP {
                        // Same choice on every member: derived from (group, op index).
                        let h = mix(gi * 1_000_003 + k);
                        let plan = &plans[(h % plans.len() as u64) as usize];
                        let count = counts[((h >> 8) % counts.len() as u64) as usize];
                        let spec = RunSpec {
                            types: ElemTypes::new(DType::F32, None).unwrap(),
                            op: ReduceOp::Sum,
                            sizes: sizes_for(plan, count, &[]),
                            warmup: 0,
                            iters: 1,
                            check: true,
                            staged: (h >> 20) & 1 == 1,
                        };
                        let rep = run_rank(&exec, plan, &spec)
                            .unwrap_or_else(|e| panic!("group {gi} op {k} {}: {e}", plan.schedule));
                        assert_eq!(
                            rep.wrong, 0,
                            "group {gi} op {k} {} count {count}",
                            plan.schedule
                        );
                    }
                    OPS_PER_GROUP
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("group thread"))
            .sum()
    });
    println!(
        "rank {me}: {done} collective launches in {} groups",
        mine.len()
    );
}

#[test]
fn concurrent_overlapping_groups() {
    let total: u64 = groups().len() as u64 * OPS_PER_GROUP;
    assert!(total >= 1000, "{total} operations");
    run_ranks(8, "concurrency", Duration::from_secs(300));
}

fn errors(rt: &symsched_runtime::Runtime) {
    let world = rt.world().unwrap();
    let f = GroupFabric::new(world);
    assert!(
        matches!(f.heap_ptr(9, 0, 1), Err(ExecError::RankOutsideGroup { .. })),
        "rank"
    );
    assert!(matches!(
        f.heap_ptr(0, u64::MAX - 8, 16),
        Err(ExecError::OffsetPastHeap { .. })
    ));
    assert!(matches!(
        f.heap_ptr(1, 1 << 40, 16),
        Err(ExecError::OffsetPastHeap { .. })
    ));
    let lib = standard_library();
    let exec = Executor::new(f);
    let p4 = plan_of(&lib, "allreduce_two_shot", 4, &BTreeMap::new());
    assert!(matches!(
        exec.load(&p4),
        Err(ExecError::GroupSizeMismatch { .. })
    ));
    // Cross-node groups are refused by the runtime (nodes emulated with SYMSCHED_NODE_ID).
    exec.barrier().unwrap();
}

#[test]
fn errors_on_real_groups() {
    run_ranks(2, "errors", Duration::from_secs(60));
}
