//! The pull all-gather (`examples/allgather_pull.sched`) with private (non-heap) role buffers:
//! its `out` is used in place, never staged, and back-to-back launches with no barrier between
//! them (as the Python layer issues them) stay correct, which depends on the schedule's `done`
//! round keeping a rank from refilling its `stage` while a peer still reads it.

mod common;

use symsched_plan::LaunchSizes;
use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, Executor, LaunchArgs, LocalWorld, ReduceOp,
};

/// Runs `name` on 2 ranks with both roles private, `count` output elements (f32), in a
/// `heap`-byte heap per rank.
fn run_private(name: &str, count: u64, heap: u64) -> Result<(), String> {
    let plan = common::plan(name, 2);
    let types = ElemTypes::new(DType::F32, None).unwrap();
    let spec = common::spec(types, sizes_for(&plan, count, &[]), true);
    symsched_runtime::exec::harness::run_local(&plan, &spec, heap, common::TIMEOUT)
        .map_err(|e| e.to_string())
        .and_then(|reports| match reports.iter().position(|r| r.wrong != 0) {
            Some(r) => Err(format!("rank {r} has wrong elements")),
            None => Ok(()),
        })
}

#[test]
fn private_output_is_not_staged() {
    // 2 MiB of output, 1 MiB of input per rank: the pull schedule's only heap memory is its
    // 1 MiB `stage`. Staging `out` (2 MiB) cannot fit in 1.5 MiB, so a pass here means `out`
    // was written in place, with no copy-in or copy-out.
    let (count, heap) = (1 << 19, 3 << 19);
    run_private("allgather_pull", count, heap).expect("pull all-gather in a 1.5 MiB heap");
    // The push all-gather stages `out` (peers put into it): the same heap is too small, which
    // shows the bound above is tight enough to notice a staged `out`.
    let push = run_private("allgather_push", count, heap);
    assert!(
        push.is_err(),
        "push all-gather unexpectedly fit in the heap"
    );
}

/// Value of element `i` of rank `r`'s input in launch `it` (exact in f32).
fn value(r: u32, it: u32, i: usize) -> f32 {
    ((r as usize * 7919 + it as usize * 104_729 + i) % (1 << 20)) as f32
}

/// `launches` back-to-back launches on `p` ranks with fresh private inputs each time and no
/// barrier in between; every rank checks every launch's output.
fn back_to_back(p: u32, n: usize, launches: u32) {
    let plan = common::plan("allgather_pull", p);
    let world = LocalWorld::new(p, 64 << 20)
        .unwrap()
        .with_timeout(common::TIMEOUT);
    let group = world.world_group().unwrap();
    let mut sizes = LaunchSizes::default();
    sizes.vars.insert("n".into(), n as u64);
    let wrong: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p)
            .map(|r| {
                let (group, plan, sizes) = (group.clone(), &plan, &sizes);
                s.spawn(move || -> Result<usize, String> {
                    let exec = Executor::new(group.fabric(r).map_err(|e| e.to_string())?);
                    let lp = exec.load(plan).map_err(|e| e.to_string())?;
                    let mut input = vec![0f32; n];
                    let mut out = vec![0f32; n * p as usize];
                    let mut wrong = 0;
                    for it in 0..launches {
                        for (i, x) in input.iter_mut().enumerate() {
                            *x = value(r, it, i);
                        }
                        out.fill(-1.0);
                        let mut binds = [
                            Binding::HostRead(bytes(&input)),
                            Binding::Host(bytes_mut(&mut out)),
                        ];
                        exec.launch(
                            &lp,
                            LaunchArgs {
                                types: ElemTypes::new(DType::F32, None).unwrap(),
                                op: ReduceOp::Sum,
                                sizes,
                                buffers: &mut binds,
                            },
                        )
                        .map_err(|e| format!("rank {r} launch {it}: {e}"))?;
                        for (j, x) in out.iter().enumerate() {
                            if *x != value(j as u32 / n as u32, it, j % n) {
                                wrong += 1;
                            }
                        }
                    }
                    Ok(wrong)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("rank panicked".into())))
            .collect()
    });
    for (r, w) in wrong.into_iter().enumerate() {
        assert_eq!(
            w,
            Ok(0),
            "P={p} rank {r}: wrong elements over {launches} launches"
        );
    }
}

fn bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as in `bytes`; every byte pattern written back is a valid f32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

#[test]
fn back_to_back_launches_without_barriers() {
    back_to_back(2, 4096, 300);
    back_to_back(3, 1001, 200);
    back_to_back(4, 257, 200);
}
