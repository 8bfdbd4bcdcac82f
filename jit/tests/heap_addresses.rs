//! The kernel's own heap addressing ([`KernelArgs::offsets`](symsched_jit::abi::KernelArgs),
//! `heaps`): each rank's buffers laid out as one heap, every buffer at the same offset on every
//! rank, as the runtime's staging places them. A kernel body small enough to be optimised is
//! lowered with the check and forms every address inside the views itself; what the views
//! leave out (a buffer off the heap, a heap not mapped here, a range past a bound) goes through
//! the `region` intrinsic. Results equal the reference either way, and the counts of `region`
//! calls show which path each address took, so a check that is off by one byte or never taken
//! fails here.

mod common;

use common::{compare, plan, sizes_for, types, Harness, HeapLayout, Launch, Observed};
use std::sync::{Arc, Mutex};
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, ReduceOp};
use symsched_plan::Plan;

fn cache() -> KernelCache {
    KernelCache::new(None, CompileOptions::default()).expect("host target")
}

/// Two launches of `plan` at `n` elements under `heap`, compared with the reference; the
/// `region` calls of every rank and launch.
fn run(c: &KernelCache, plan: &Plan, n: u64, heap: Option<HeapLayout>) -> Result<Vec<u32>, String> {
    let sizes = sizes_for(plan, n, n ^ 0x3c);
    let l = Launch {
        plan,
        types: types(DType::F32, None),
        op: ReduceOp::Sum,
        sizes: &sizes,
    };
    let seen: Arc<Mutex<Vec<Observed>>> = Arc::default();
    let h = Harness {
        heap,
        observe: Some(seen.clone()),
        ..Harness::default()
    };
    compare(c, &h, &l, 2, n)?;
    let seen = seen.lock().unwrap();
    Ok(seen.iter().map(|o| o.region_calls).collect())
}

/// Schedules whose kernels at P = 2 are optimised (so carry the check) and whose addresses are
/// all on the heap: every byte of their buffers is read or written, so a view one byte short
/// leaves a range out.
const SMALL: [&str; 5] = [
    "allgather_push",
    "alltoall_push",
    "reduce_push",
    "sendrecv_pair",
    "reduce_scatter_push",
];

#[test]
fn every_schedule_equals_the_reference_with_heap_views() {
    let c = cache();
    for name in common::jit_schedules() {
        for p in [2, 3] {
            let Ok(compiled) = std::panic::catch_unwind(|| plan(&name, p)) else {
                continue; // no instance at this P (e.g. `L = 2` at odd P)
            };
            for n in [1, 7, 1000] {
                run(&c, &compiled, n, Some(HeapLayout::default()))
                    .unwrap_or_else(|e| panic!("{name} P={p} n={n}: {e}"));
            }
        }
    }
}

#[test]
fn optimised_kernels_ask_region_for_nothing_inside_the_views() {
    let c = cache();
    for name in SMALL {
        let plan = plan(name, 2);
        let inside = run(&c, &plan, 5, Some(HeapLayout::default())).unwrap();
        assert!(
            inside.iter().all(|&k| k == 0),
            "{name}: region calls per rank-launch with every range inside the views: {inside:?}"
        );
        // The count is real: without the tables every address is asked for.
        let asked = run(&c, &plan, 5, None).unwrap();
        assert!(
            asked.iter().sum::<u32>() > 0,
            "{name}: no region call without tables: {asked:?}"
        );
    }
}

#[test]
fn what_the_views_leave_out_goes_through_region() {
    let c = cache();
    for name in SMALL {
        let plan = plan(name, 2);
        let last = plan.buffers.len() as u32 - 1;
        let cases = [
            (
                "hi one byte short of the last buffer's end",
                HeapLayout {
                    short_by: 1,
                    ..HeapLayout::default()
                },
            ),
            (
                "lo one byte above the first buffer",
                HeapLayout {
                    lo: 1,
                    ..HeapLayout::default()
                },
            ),
            (
                "the last buffer off the heap",
                HeapLayout {
                    off_heap: vec![last],
                    ..HeapLayout::default()
                },
            ),
            (
                "every heap unmapped",
                HeapLayout {
                    unmapped: vec![0, 1],
                    ..HeapLayout::default()
                },
            ),
        ];
        for (what, layout) in cases {
            let calls =
                run(&c, &plan, 5, Some(layout)).unwrap_or_else(|e| panic!("{name}, {what}: {e}"));
            assert!(
                calls.iter().sum::<u32>() > 0,
                "{name}, {what}: the kernel formed every address itself ({calls:?})"
            );
        }
    }
}
