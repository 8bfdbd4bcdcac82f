//! Signals on words of the symmetric heap, for the RFC primitives whose signal is a user tensor
//! (`shmem_signal_op`, `shmem_wait_for_signal`, `shmem_put_with_signal`).
//!
//! The executor's own plans use the runtime's per-group signal pads; user signal tensors live in
//! the heap instead, as with CANN (`aclshmemx_signal_op(int32* sig, …)`). Words are 32- or 64-bit
//! and naturally aligned (a tensor element of the heap). Updates are release operations and
//! waits acquire loads, so data put before a signal is visible to whoever observes the signal.
//! Waiting spins briefly, then yields, then sleeps with growing naps (ranks may outnumber cores),
//! bounded by a deadline.

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use symsched_plan::Cmp;

/// Signal update mode (CANN numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigOp {
    Set,
    Add,
}

impl SigOp {
    pub fn from_code(code: u32) -> Option<SigOp> {
        match code {
            0 => Some(SigOp::Set),
            1 => Some(SigOp::Add),
            _ => None,
        }
    }
}

/// Compare op from CANN's numbering.
pub fn cmp_from_code(code: u32) -> Option<Cmp> {
    Some(match code {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Ge,
        4 => Cmp::Lt,
        5 => Cmp::Le,
        _ => return None,
    })
}

fn holds(cmp: Cmp, observed: i64, target: i64) -> bool {
    match cmp {
        Cmp::Eq => observed == target,
        Cmp::Ne => observed != target,
        Cmp::Gt => observed > target,
        Cmp::Ge => observed >= target,
        Cmp::Lt => observed < target,
        Cmp::Le => observed <= target,
    }
}

/// Apply `op value` to the `width`-byte word at `ptr`.
///
/// # Safety
/// `ptr` must point into a mapped heap segment, aligned to `width` (4 or 8).
pub unsafe fn update(ptr: *mut u8, width: usize, op: SigOp, value: i64) {
    if width == 4 {
        // SAFETY: caller guarantees a live, aligned 4-byte word.
        let a = unsafe { AtomicI32::from_ptr(ptr as *mut i32) };
        match op {
            SigOp::Set => a.store(value as i32, Ordering::Release),
            SigOp::Add => {
                a.fetch_add(value as i32, Ordering::AcqRel);
            }
        }
    } else {
        // SAFETY: caller guarantees a live, aligned 8-byte word.
        let a = unsafe { AtomicI64::from_ptr(ptr as *mut i64) };
        match op {
            SigOp::Set => a.store(value, Ordering::Release),
            SigOp::Add => {
                a.fetch_add(value, Ordering::AcqRel);
            }
        }
    }
}

/// Read the `width`-byte word at `ptr` with acquire ordering.
///
/// # Safety
/// As for [`update`].
pub unsafe fn load(ptr: *mut u8, width: usize) -> i64 {
    if width == 4 {
        // SAFETY: see `update`.
        unsafe { AtomicI32::from_ptr(ptr as *mut i32) }.load(Ordering::Acquire) as i64
    } else {
        // SAFETY: see `update`.
        unsafe { AtomicI64::from_ptr(ptr as *mut i64) }.load(Ordering::Acquire)
    }
}

/// Wait until the word at `ptr` compares true against `target`; `Err(observed)` on timeout.
///
/// # Safety
/// As for [`update`].
pub unsafe fn wait(
    ptr: *mut u8,
    width: usize,
    cmp: Cmp,
    target: i64,
    timeout: Duration,
) -> Result<i64, i64> {
    let start = Instant::now();
    let mut spins = 0u32;
    let mut nap = Duration::from_micros(20);
    loop {
        // SAFETY: forwarded from the caller.
        let v = unsafe { load(ptr, width) };
        if holds(cmp, v, target) {
            return Ok(v);
        }
        if start.elapsed() >= timeout {
            return Err(v);
        }
        spins += 1;
        if spins < 256 {
            std::hint::spin_loop();
        } else if spins < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(2));
        }
    }
}
