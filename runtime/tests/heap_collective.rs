//! `Runtime::empty_collective` / `free_collective` (what `symm.empty` and `symm.free` call) on
//! real processes (this test binary re-executed with `SYMSCHED_HEAP_TEST_ROLE`, running only
//! `rank_entry`). Bounded: 20 s signal timeout, 120 s launcher timeout; the launcher kills the
//! ranks when one fails and removes the rendezvous directory.
//!
//! - `different_sizes_fail_on_every_rank_and_the_heap_recovers`: one rank asks for another size;
//!   every rank gets the allocation mismatch from the call itself, and the next agreeing
//!   allocation returns the same offset everywhere;
//! - `a_freed_block_is_not_reused_before_every_rank_freed_it`: a fast rank frees a block, takes
//!   it again and writes into the slow rank's copy; the slow rank, still using its copy, must
//!   not see that write.

mod common;

use std::time::{Duration, Instant};
use symsched_runtime::error::RuntimeError;

const ROLE: &str = "SYMSCHED_HEAP_TEST_ROLE";

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
        "sizes" => sizes(&rt),
        "reuse" => reuse(&rt),
        r => panic!("unknown role {r}"),
    }
    rt.finalize().expect("finalize");
}

fn sizes(rt: &symsched_runtime::Runtime) {
    let me = rt.rank();
    let r = rt.empty_collective(if me == 0 { 1024 } else { 2048 }, 64);
    match r {
        Err(RuntimeError::AllocMismatch { .. }) => {}
        other => panic!("expected an allocation mismatch, got {other:?}"),
    }
    // The allocator was put back: the next agreeing allocation is symmetric.
    let a = rt
        .empty_collective(512, 64)
        .expect("an agreeing allocation");
    let world = rt.world().unwrap();
    let offs = symsched_runtime::exec::Executor::new(symsched_runtime::exec::GroupFabric::new(
        world.clone(),
    ))
    .allgather_u64("test/offsets", &[a.offset as u64])
    .unwrap();
    assert!(offs.iter().all(|o| o[0] == a.offset as u64), "{offs:?}");
    // A free of a block one rank does not free.
    let b = rt.empty_collective(256, 64).unwrap();
    let r = rt.free_collective(if me == 0 { b.offset } else { a.offset });
    assert!(
        matches!(r, Err(RuntimeError::AllocMismatch { .. })),
        "{r:?}"
    );
    rt.free_collective(b.offset).expect("agreeing free");
    rt.free_collective(a.offset).expect("agreeing free");
    world.barrier().expect("the heap agrees again");
}

fn reuse(rt: &symsched_runtime::Runtime) {
    let me = rt.rank();
    let world = rt.world().unwrap();
    let a = rt.empty_collective(4096, 64).unwrap();
    let mine = world.local_ptr(a.offset, 4096).unwrap();
    // SAFETY: this rank's own block, 4096 bytes.
    unsafe { std::ptr::write_bytes(mine, 0xAB, 4096) };
    world.barrier().unwrap();
    if me == 1 {
        // Slow: still using the block.
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: as above.
        let s = unsafe { std::slice::from_raw_parts(mine, 4096) };
        assert!(
            s.iter().all(|b| *b == 0xAB),
            "the block was reused while in use"
        );
        rt.free_collective(a.offset).unwrap();
        let c = rt.empty_collective(4096, 64).unwrap();
        assert_eq!(c.offset, a.offset, "first fit takes the freed block");
    } else {
        let t0 = Instant::now();
        rt.free_collective(a.offset).unwrap();
        let waited = t0.elapsed();
        let c = rt.empty_collective(4096, 64).unwrap();
        let peer = world.peer_ptr(1, c.offset, 4096).unwrap();
        // SAFETY: a checked range of the peer's block, which the peer allocated too.
        unsafe { std::ptr::write_bytes(peer, 0x11, 4096) };
        assert!(
            waited >= Duration::from_millis(200),
            "free returned after {waited:?}"
        );
    }
    world.barrier().unwrap();
}

#[test]
fn different_sizes_fail_on_every_rank_and_the_heap_recovers() {
    run_ranks(2, "sizes");
}

#[test]
fn a_freed_block_is_not_reused_before_every_rank_freed_it() {
    run_ranks(2, "reuse");
}
