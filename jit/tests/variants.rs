//! The kernel variants the runtime's executor uses, against the reference: the *steps* scope
//! (the executor sends the entry signals, divides `avg` and sends the exit signals itself),
//! non-temporal copies for plain moves into buffers no step reads, and trace calls.

mod common;

use common::{compare, plan, sizes_for, types, Harness, Launch, Observed};
use std::sync::{Arc, Mutex};
use symsched_jit::abi::{TRACE_LAST, TRACE_SIGNAL};
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, KernelScope, LowerOptions, ReduceOp};
use symsched_plan::{ElemClass, Op, Plan};

use common::jit_schedules as names;

fn harness(lower: LowerOptions) -> Harness {
    Harness {
        compile: CompileOptions {
            lower,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn run(h: &Harness, plan: &Plan, data: DType, wire: Option<DType>, op: ReduceOp, n: u64) {
    let c = KernelCache::new(None, h.compile.clone()).expect("host target");
    let sizes = sizes_for(plan, n, n ^ 0x33);
    let l = Launch {
        plan,
        types: types(data, wire),
        op,
        sizes: &sizes,
    };
    compare(&c, h, &l, 2, n).unwrap_or_else(|e| {
        panic!(
            "{} P={} {data}/{wire:?} {op} n={n}: {e}",
            plan.schedule, plan.group_size
        )
    });
}

fn observed(h: &mut Harness) -> Arc<Mutex<Vec<Observed>>> {
    let o = Arc::new(Mutex::new(Vec::new()));
    h.observe = Some(o.clone());
    o
}

#[test]
fn steps_scope_matches_for_every_schedule() {
    let h = harness(LowerOptions {
        scope: KernelScope::Steps,
        ..Default::default()
    });
    for name in names() {
        let p = plan(&name, 4);
        for op in [ReduceOp::Sum, ReduceOp::Avg] {
            run(&h, &p, DType::F32, None, op, 1001);
        }
        if p.buffers.iter().any(|b| b.elem == ElemClass::Wire) {
            run(
                &h,
                &p,
                DType::Bf16,
                Some(DType::F8E5M2),
                ReduceOp::Avg,
                1000,
            );
        }
    }
}

#[test]
fn plain_moves_into_unread_buffers_stream_and_nothing_else_does() {
    // Threshold 0: every eligible pass takes the copy_nt path.
    let mut h = harness(LowerOptions::default());
    h.nt_min_bytes = Some(0);
    for name in names() {
        let p = plan(&name, 4);
        let seen = observed(&mut h);
        run(&h, &p, DType::F32, None, ReduceOp::Sum, 1001);
        let calls: u32 = seen.lock().unwrap().iter().map(|o| o.nt_calls).sum();
        match name.as_str() {
            // Their puts and own-block copies write `out`, which no step reads.
            "alltoall_push" | "allgather_push" | "alltoallv_push" => {
                assert!(calls > 0, "{name}: nothing streamed")
            }
            // Every move lands where a reduce or a later step reads it.
            n if n.starts_with("allreduce") || n.starts_with("reduce") => {
                assert_eq!(calls, 0, "{name}: {calls} streamed moves")
            }
            _ => {}
        }
    }
    // Threshold above the moves: nothing streams.
    h.nt_min_bytes = Some(1 << 30);
    let seen = observed(&mut h);
    run(
        &h,
        &plan("alltoall_push", 4),
        DType::F32,
        None,
        ReduceOp::Sum,
        1001,
    );
    assert!(seen.lock().unwrap().iter().all(|o| o.nt_calls == 0));
}

#[test]
fn a_traced_kernel_names_every_step_once_in_action_order() {
    let mut h = harness(LowerOptions {
        trace: true,
        ..Default::default()
    });
    for name in names() {
        let p = plan(&name, 4);
        let seen = observed(&mut h);
        run(&h, &p, DType::F32, None, ReduceOp::Sum, 130);
        for o in seen.lock().unwrap().iter() {
            let steps = &p.ranks[o.rank as usize].steps;
            let mut ran: Vec<u32> = o
                .traced
                .iter()
                .filter(|(_, f)| f & TRACE_SIGNAL == 0)
                .map(|(s, _)| *s)
                .collect();
            ran.sort_unstable();
            let all: Vec<u32> = steps.iter().map(|s| s.id).collect();
            assert_eq!(ran, all, "{name} rank {}: every step once", o.rank);
            // A fused put's signal is reported after the put itself ran.
            for (k, (s, f)) in o.traced.iter().enumerate() {
                if f & TRACE_SIGNAL != 0 {
                    let step = steps.iter().find(|x| x.id == *s).expect("own step");
                    assert!(matches!(
                        step.op,
                        Op::Put {
                            signal: Some(_),
                            ..
                        }
                    ));
                    assert!(o.traced[..k]
                        .iter()
                        .any(|(x, g)| x == s && g & TRACE_SIGNAL == 0));
                }
            }
            if let Some((_, f)) = o.traced.last() {
                assert!(f & TRACE_LAST != 0, "{name}: the last group is closed");
            }
        }
    }
}

#[test]
fn waits_match_with_and_without_the_inline_look_at_the_counter() {
    // By default the harness passes the counters, so a satisfied wait is one load in the
    // kernel; without them every wait goes through the intrinsic. Both equal the reference.
    for call_every_wait in [false, true] {
        let mut h = harness(LowerOptions::default());
        h.call_every_wait = call_every_wait;
        for name in ["allreduce_ring", "allreduce_two_shot", "alltoall_push"] {
            run(&h, &plan(name, 3), DType::F32, None, ReduceOp::Sum, 1001);
        }
    }
}
