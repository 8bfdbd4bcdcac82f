//! SimBackend on the runtime's in-process fabric (symsched_runtime::exec::LocalWorld): generated
//! kernels run on the runtime's own symmetric heap, three launches back to back, and agree with
//! three launches of the runtime's interpreter.

#![allow(clippy::needless_range_loop)]

mod common;
use common::*;
use symsched_kernels::sim::fabric::SimBackend;
use symsched_kernels::sim::heap::HeapLayout;
use symsched_kernels::{DType, ReduceOp};
use symsched_runtime::exec::{Fabric, LocalWorld};

#[test]
fn generated_kernels_run_on_the_runtime_fabric() {
    for (name, p, dtype, wire) in [
        ("allreduce_two_shot_wire", 4u32, DType::F32, DType::Bf16),
        ("alltoallv_push", 3, DType::F32, DType::F32),
        ("reduce_scatter_push", 3, DType::Bf16, DType::Bf16),
    ] {
        let plan = standard_plans(p)
            .into_iter()
            .find(|pl| pl.schedule == name)
            .unwrap();
        let o = opts(dtype, wire, ReduceOp::Sum, 4096);
        let backend = SimBackend::new(&plan, o, &cache_dir()).unwrap();
        let sizes = sizes_for(&plan, 300);
        let layout = HeapLayout::new(&plan, dtype, wire, &sizes).unwrap();
        let roles = n_roles(&plan);
        let mut want = role_inputs(&plan, &layout, &sizes, 5);
        let start = want.clone();
        for _ in 0..3 {
            want = runtime_outputs(&plan, &o, &sizes, &want).unwrap();
        }
        let world = LocalWorld::new(p, 64 << 20).unwrap();
        let group = world.world_group().unwrap();
        let barrier = std::sync::Barrier::new(p as usize);
        let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..p)
                .map(|r| {
                    let (group, backend, sizes, start, layout, barrier) =
                        (&group, &backend, &sizes, &start, &layout, &barrier);
                    s.spawn(move || {
                        let fab = group.fabric(r).unwrap();
                        let mut offs = vec![];
                        for b in 0..roles {
                            let off = fab
                                .scratch(
                                    &format!("test/role{b}"),
                                    layout.buf_bytes[b].max(1) as u64,
                                )
                                .unwrap();
                            let bytes = &start[r as usize][b];
                            let dst = fab.heap_ptr(r, off, bytes.len() as u64).unwrap();
                            // SAFETY: checked heap range, private to this rank until the barrier.
                            unsafe {
                                std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len())
                            };
                            offs.push(off);
                        }
                        let mut bind = backend.prepare(&fab, sizes, &offs).unwrap();
                        barrier.wait();
                        for _ in 0..3 {
                            backend
                                .launch(&fab, &mut bind, sizes)
                                .unwrap_or_else(|e| panic!("{e}"));
                        }
                        barrier.wait();
                        (0..roles)
                            .map(|b| {
                                let len = start[r as usize][b].len();
                                let src = fab.heap_ptr(r, offs[b], len as u64).unwrap();
                                // SAFETY: checked range; all launches have finished.
                                unsafe { std::slice::from_raw_parts(src, len) }.to_vec()
                            })
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(got, want, "{name}");
    }
}

/// The `symsched run --backend sim` path: the runtime's harness conventions (fill, barriers,
/// sequential reference check) with launches by the generated kernel, on the in-process fabric.
#[test]
fn sim_harness_run_rank_checks_clean() {
    for (name, p) in [("allreduce_ring", 3u32), ("alltoallv_push", 4)] {
        let plan = standard_plans(p)
            .into_iter()
            .find(|pl| pl.schedule == name)
            .unwrap();
        check_sim_harness(&plan, opts(DType::F32, DType::F32, ReduceOp::Sum, 4096));
    }
}
