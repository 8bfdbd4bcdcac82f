//! Hand-built plans of every collective shape (push, pull, converting put/get, set and add
//! signals, counts extents) run back to back on the simulation against a sequential reference
//! interpreter with 64-bit signals: every buffer (scratch included) and every signal word must
//! agree — the latter checks the int32 mapping of epochs, including across the wrap.

mod common;
use common::*;
use symsched_kernels::{lower, DType, KernelError, LowerOptions, ReduceOp};
use symsched_plan::{Cmp, Op, WaitTarget};

#[test]
fn hand_built_plans_three_launches_back_to_back() {
    let mut combos = vec![];
    for p in [3u32, 4] {
        for plan in all_plans(p) {
            let o = opts(
                DType::F32,
                if plan.schedule.ends_with("wire") {
                    DType::Bf16
                } else {
                    DType::F32
                },
                ReduceOp::Sum,
                4096,
            );
            combos.push((plan, o));
        }
    }
    for ((plan, o), k) in combos.iter().zip(build_all(&combos)) {
        for n in [700, 5] {
            compare(&k, plan, o, n, 0..3).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Epochs where `epoch × stride` crosses 2^31 (int32 sign) and 2^32 (wrap to zero): the
/// kernels keep running with no reset, and their int32 words equal the 64-bit counters mod 2^32.
#[test]
fn int32_signal_wrap_boundary() {
    let p = 3u32;
    let plans = [
        allgather_direct(p),
        allreduce_rs_ag(p, false),
        broadcast_push(p, 0),
        reduce_to_root(p, 1, true),
    ];
    for plan in &plans {
        let o = opts(DType::F32, DType::Bf16, ReduceOp::Sum, 4096);
        let k = build(plan, &o);
        // Largest per-launch stride of the plan's waits.
        let stride = plan
            .ranks
            .iter()
            .flat_map(|r| r.steps.iter())
            .filter_map(|s| match s.op {
                Op::Wait { target, .. } => Some(target.stride),
                _ => None,
            })
            .max()
            .unwrap();
        for boundary in [1u64 << 31, 1u64 << 32, 5u64 << 32] {
            let e0 = boundary / stride - 1;
            compare(&k, plan, &o, 19, e0..e0 + 3)
                .unwrap_or_else(|e| panic!("{} at epoch {e0}: {e}", plan.schedule));
        }
    }
}

#[test]
fn strides_beyond_the_int32_bound_are_refused() {
    let mut plan = allgather_direct(2);
    for r in &mut plan.ranks {
        for s in &mut r.steps {
            if let Op::Wait {
                cmp: Cmp::Ge,
                target,
                slot,
            } = &mut s.op
            {
                if *slot == 0 {
                    *target = WaitTarget {
                        stride: 1 << 29,
                        offset: 1,
                    };
                }
            }
        }
    }
    match lower(&plan, &LowerOptions::default()) {
        Err(KernelError::SignalRange { stride, .. }) => assert_eq!(stride, 1 << 29),
        other => panic!("expected SignalRange, got {other:?}"),
    }
}
