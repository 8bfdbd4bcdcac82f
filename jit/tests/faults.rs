//! The comparison catches broken lowerings: a dropped wait, a reversed fold and a step sunk
//! past the signal that frees its source each make the kernels differ from the reference,
//! while the correct lowering under the same conditions matches it. And the reference itself
//! computes the collectives.

mod common;

use common::{compare, plan, sizes_for, types, Harness, Launch};
use std::time::Duration;
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::lower::Fault;
use symsched_jit::{DType, LowerOptions, ReduceOp};
use symsched_plan::{LaunchSizes, Op, Plan};

fn harness(fault: Option<Fault>) -> Harness {
    Harness {
        compile: CompileOptions {
            lower: LowerOptions {
                fault,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A launch of `p` over f32 data, summed.
fn f32_sum<'a>(p: &'a Plan, sizes: &'a LaunchSizes) -> Launch<'a> {
    Launch {
        plan: p,
        types: types(DType::F32, None),
        op: ReduceOp::Sum,
        sizes,
    }
}

fn cache(h: &Harness) -> KernelCache {
    KernelCache::new(None, h.compile.clone()).expect("host target")
}

#[test]
fn a_dropped_wait_is_caught() {
    // One-shot allreduce at P = 4: rank 0 reduces the landing slots after waiting for every
    // peer's put. Peers start 200 ms late (their first wait sleeps), so without the wait rank
    // 0 folds slots that hold no data yet.
    let p = plan("allreduce_one_shot", 4);
    let wait = p.ranks[0]
        .steps
        .iter()
        .rev()
        .find(|s| matches!(s.op, Op::Wait { .. }))
        .expect("rank 0 waits for the puts")
        .id;
    let sizes = sizes_for(&p, 1000, 0);
    let l = f32_sum(&p, &sizes);
    let late: Vec<(u32, Duration)> = (1..4).map(|r| (r, Duration::from_millis(200))).collect();
    let mut good = harness(None);
    good.delay_first_wait = late.clone();
    compare(&cache(&good), &good, &l, 1, 7).expect("the correct lowering matches");
    let mut bad = harness(Some(Fault::DropWait(wait)));
    bad.delay_first_wait = late;
    let err = compare(&cache(&bad), &bad, &l, 1, 7).expect_err("a dropped wait must be caught");
    assert!(err.contains("rank 0"), "{err}");
}

#[test]
fn a_late_entrant_keeps_what_peers_push_and_a_dropped_entry_credit_is_caught() {
    // broadcast_push and allgather_push push straight into the peers' role buffers, behind
    // entry credits. Rank 2 enters 150 ms late and its caller writes its buffers just before:
    // a push that landed earlier would be lost.
    for (name, pusher) in [("broadcast_push", 0), ("allgather_push", 1)] {
        let p = plan(name, 4);
        let steps = &p.ranks[pusher as usize].steps;
        let put = steps
            .iter()
            .position(|s| matches!(s.op, Op::Put { peer: 2, .. }))
            .expect("a put to rank 2");
        let credit = steps[..put]
            .iter()
            .rev()
            .find(|s| matches!(s.op, Op::Wait { .. }))
            .expect("an entry credit before the put")
            .id;
        let sizes = sizes_for(&p, 1000, 0);
        let l = f32_sum(&p, &sizes);
        let late = vec![(2, Duration::from_millis(150))];
        let mut good = harness(None);
        good.late_entry = late.clone();
        compare(&cache(&good), &good, &l, 2, 11)
            .unwrap_or_else(|e| panic!("{name}: the correct lowering matches: {e}"));
        let mut bad = harness(Some(Fault::DropWait(credit)));
        bad.late_entry = late;
        let err = compare(&cache(&bad), &bad, &l, 1, 11)
            .expect_err("a push before the peer entered must be caught");
        assert!(err.contains("rank 2"), "{name}: {err}");
    }
}

#[test]
fn a_reversed_fold_is_caught() {
    // Folds of three or more operands (a two-operand sum is commutative in IEEE arithmetic, so
    // the ring's reversed folds compute the same bits).
    for name in [
        "allreduce_two_shot",
        "reduce_scatter_push_wire",
        "allreduce_one_shot",
    ] {
        let p = plan(name, 4);
        let sizes = sizes_for(&p, 1000, 0);
        let l = f32_sum(&p, &sizes);
        let good = harness(None);
        compare(&cache(&good), &good, &l, 1, 3).expect("the correct lowering matches");
        let bad = harness(Some(Fault::ReverseFold));
        let err = compare(&cache(&bad), &bad, &l, 1, 3);
        assert!(err.is_err(), "{name}: a reversed fold must be caught");
    }
}

#[test]
fn a_step_sunk_past_the_signal_that_frees_its_source_is_caught() {
    // sink_trap at P = 2: each rank copies its slot `a` into `keep`, signals the peer, which
    // then overwrites `a`; `keep` is read after the waits. Sunk to its reader (the fault
    // leaves out the check that no peer touches its places), the copy reads the peer's data:
    // every rank ends with twice the peer's values, whatever the timing.
    let mut lib = symsched_compiler::library::Library::new();
    lib.add_source("sink_trap.sched", include_str!("schedules/sink_trap.sched"))
        .expect("parses");
    let p = symsched_compiler::pipeline::compile(
        &lib,
        "sink_trap",
        2,
        &Default::default(),
        &Default::default(),
    )
    .unwrap_or_else(|d| panic!("{d:?}"))
    .plan;
    let sizes = sizes_for(&p, 1000, 0);
    let l = f32_sum(&p, &sizes);
    let good = harness(None);
    compare(&cache(&good), &good, &l, 2, 11).expect("the correct lowering matches");
    let bad = harness(Some(Fault::SinkShared));
    let err = compare(&cache(&bad), &bad, &l, 2, 11).expect_err("a wrong sink must be caught");
    assert!(err.contains("rank"), "{err}");
}

/// The reference simulator against the collective's definition: allreduce of integer-valued
/// f32 (exact in any order) is the sum over ranks; allgather concatenates.
#[test]
fn the_reference_computes_the_collectives() {
    use common::reference::{simulate, Memory};
    let t = types(DType::F32, None);
    for (name, p) in [
        ("allreduce_two_shot", 3),
        ("allreduce_ring", 4),
        ("allreduce_hier", 4),
    ] {
        let plan = plan(name, p);
        let sizes = sizes_for(&plan, 10, 0);
        let mut mem = Memory::new(&plan, t, &sizes);
        for r in 0..p as usize {
            let x: Vec<u8> = (0..10)
                .flat_map(|i| ((r * 100 + i) as f32).to_le_bytes())
                .collect();
            mem.bufs[r][0] = x;
        }
        let mut sig = vec![vec![0u64; plan.signals.len()]; p as usize];
        simulate(&plan, t, ReduceOp::Sum, &sizes, &mut mem, &mut sig, 0);
        let want: Vec<u8> = (0..10)
            .flat_map(|i| {
                ((0..p as usize).map(|r| (r * 100 + i) as f32).sum::<f32>()).to_le_bytes()
            })
            .collect();
        for r in 0..p as usize {
            assert_eq!(mem.bufs[r][0], want, "{name} rank {r}");
        }
    }
    let plan = plan("allgather_push", 3);
    let sizes = sizes_for(&plan, 4, 0);
    let mut mem = Memory::new(&plan, t, &sizes);
    for r in 0..3usize {
        mem.bufs[r][0] = (0..4)
            .flat_map(|i| ((r * 10 + i) as f32).to_le_bytes())
            .collect();
    }
    let mut sig = vec![vec![0u64; plan.signals.len()]; 3];
    simulate(&plan, t, ReduceOp::Sum, &sizes, &mut mem, &mut sig, 0);
    let want: Vec<u8> = (0..3usize)
        .flat_map(|r| (0..4).flat_map(move |i| ((r * 10 + i) as f32).to_le_bytes()))
        .collect();
    for r in 0..3 {
        assert_eq!(mem.bufs[r][1], want, "allgather rank {r}");
    }
}
