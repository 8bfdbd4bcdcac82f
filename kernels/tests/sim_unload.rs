//! Kernel libraries of one process must not share the simulation's state: unloading one kernel
//! (dropping its `SimKernel`) while another stays loaded must leave the other's registry and
//! launches intact. Its own test binary, so that no other test loads a kernel first: the
//! failure needs the first kernel loaded to be the last one to run.
//!
//! g++ emits the function-local statics of the simulation headers (the sync-site registry,
//! the current core, the launch context) as STB_GNU_UNIQUE symbols, which the dynamic loader
//! binds to ONE instance process-wide, however the libraries are opened. The registry's
//! destructor is registered by the library whose code first initialises it; when that library
//! was unloaded, every other kernel library went on using a destroyed `std::set` — the
//! SIGSEGV and `malloc_consolidate(): unaligned fastbin chunk detected` crashes of the
//! simulation tests whenever a test's kernel was dropped while another test's kernel ran.

mod common;
use common::*;
use std::time::Duration;
use symsched_kernels::{DType, LowerOptions, ReduceOp};

fn o() -> LowerOptions {
    opts(DType::F32, DType::F32, ReduceOp::Sum, 4096)
}

#[test]
fn unloading_one_kernel_leaves_the_others_state_intact() {
    let plan_a = allgather_direct(2);
    let plan_b = reduce_scatter_direct(2, false);
    // `a` is loaded first and never run before `b`: with shared statics, `a` would own the
    // registry's storage and `b` its destructor.
    let a = build(&plan_a, &o());
    let mut sites_a: Option<Vec<u32>> = None;
    for round in 0..12 {
        let b = build(&plan_b, &o());
        run_fresh(&b, &plan_b, &o(), 300, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("round {round}: kernel b: {e}"));
        let sites_b = b.sync_sites();
        assert!(!sites_b.is_empty(), "round {round}: b ran sync calls");
        drop(b);
        // Launches of `a` after `b` is unloaded: they register sync sites in the registry
        // (the crash happened there) and must still compute and report the same.
        for _ in 0..3 {
            run_fresh(&a, &plan_a, &o(), 300, Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("round {round}: kernel a: {e}"));
        }
        let now = a.sync_sites();
        assert!(!now.is_empty(), "round {round}: a ran sync calls");
        match &sites_a {
            None => sites_a = Some(now),
            Some(first) => assert_eq!(&now, first, "round {round}: a's sync sites changed"),
        }
    }
}
