//! Signal lines: a 64-bit counter alone in its 64-byte cache line, next to a 32-bit futex word
//! that every update bumps (so sleepers in any process can be woken) and a mask of which
//! group-local ranks updated the counter since the last completed wait (for diagnostics).
//!
//! Updates use release ordering and waits acquire ordering, so data written before a signal
//! (a put) is visible to a rank that observed the signal, on weakly ordered CPUs too.
//!
//! Line layout: `[0..8)` counter, `[8..12)` futex sequence, `[12..16)` sleeping waiters,
//! `[16..24)` signaller mask.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use symsched_plan::SignalMode;

/// A view of one signal line in some rank's mapped segment.
#[derive(Debug, Clone, Copy)]
pub struct SignalLine {
    ptr: *mut u8,
}

// SAFETY: all access goes through atomics.
unsafe impl Send for SignalLine {}
// SAFETY: all access goes through atomics.
unsafe impl Sync for SignalLine {}

impl SignalLine {
    /// Wraps a 64-byte aligned line pointer.
    ///
    /// # Safety
    /// `ptr` must point to a 64-byte aligned line inside a shared mapping that outlives the view.
    pub(crate) unsafe fn new(ptr: *mut u8) -> Self {
        debug_assert_eq!(ptr as usize % 64, 0);
        SignalLine { ptr }
    }

    fn counter(&self) -> &AtomicU64 {
        // SAFETY: `new`'s contract.
        unsafe { &*(self.ptr as *const AtomicU64) }
    }

    pub(crate) fn futex_word(&self) -> &AtomicU32 {
        // SAFETY: `new`'s contract.
        unsafe { &*(self.ptr.add(8) as *const AtomicU32) }
    }

    pub(crate) fn waiters(&self) -> &AtomicU32 {
        // SAFETY: `new`'s contract.
        unsafe { &*(self.ptr.add(12) as *const AtomicU32) }
    }

    fn mask(&self) -> &AtomicU64 {
        // SAFETY: `new`'s contract.
        unsafe { &*(self.ptr.add(16) as *const AtomicU64) }
    }

    /// Current value (acquire: data published before the update is visible after this load).
    pub fn load(&self) -> u64 {
        self.counter().load(Ordering::Acquire)
    }

    /// Ranks (bit per group-local rank mod 64) that updated the line since the last clear.
    pub fn signallers(&self) -> u64 {
        self.mask().load(Ordering::Relaxed)
    }

    /// Forgets who signalled (after a completed wait).
    pub fn clear_signallers(&self) {
        self.mask().store(0, Ordering::Relaxed);
    }

    /// Applies an update from group-local rank `from` and wakes sleepers.
    pub fn update(&self, mode: SignalMode, value: u64, from: usize) {
        match mode {
            SignalMode::Set => self.counter().store(value, Ordering::Release),
            SignalMode::Add => {
                self.counter().fetch_add(value, Ordering::Release);
            }
        }
        self.mask().fetch_or(1u64 << (from % 64), Ordering::Relaxed);
        // SeqCst pairs with the waiter's increment of `waiters` then load of the sequence: either
        // the waiter sees this bump (and the new value) or we see the waiter and wake it.
        self.futex_word().fetch_add(1, Ordering::SeqCst);
        if self.waiters().load(Ordering::SeqCst) > 0 {
            futex_wake(self.futex_word());
        }
    }

    /// Resets the counter to `value` without waking anyone (pad initialisation).
    pub fn reset(&self, value: u64) {
        self.counter().store(value, Ordering::Release);
        self.mask().store(0, Ordering::Relaxed);
    }
}

/// Sleeps while `*word == expected`, at most `timeout` (cross-process futex).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the futex word lives in a shared mapping; FUTEX_WAIT (not PRIVATE) keys it by the
    // backing file page so waiters and wakers in different processes meet.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every sleeper on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: see `futex_wait`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(align(64))]
    struct Line([u8; 64]);

    #[test]
    fn set_add_and_mask() {
        let mut l = Line([0; 64]);
        let s = unsafe { SignalLine::new(l.0.as_mut_ptr()) };
        s.update(SignalMode::Add, 3, 1);
        s.update(SignalMode::Add, 4, 2);
        assert_eq!(s.load(), 7);
        assert_eq!(s.signallers(), 0b110);
        s.update(SignalMode::Set, 42, 0);
        assert_eq!(s.load(), 42);
        s.clear_signallers();
        assert_eq!(s.signallers(), 0);
    }
}
