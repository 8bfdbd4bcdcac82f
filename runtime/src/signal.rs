//! Signal lines: a 64-bit counter alone in its 64-byte cache line, next to a 32-bit futex word
//! that every update bumps (so sleepers in any process can be woken) and a *tally per sender*:
//! how much each group-local rank added to the counter (ADD) or the last value it stored (SET),
//! over the line's whole life. Counters are never reset between launches (epochs), so neither
//! are tallies, and a timeout can say exactly whose update is missing, however many launches
//! went before ([`crate::group_wait`]).
//!
//! Updates use release ordering and waits acquire ordering, so data written before a signal
//! (a put) is visible to a rank that observed the signal, on weakly ordered CPUs too.
//!
//! Line layout: `[0..8)` counter, `[8..12)` futex sequence, `[12..16)` sleeping waiters,
//! `[16..20)` update modes seen (bit 0 SET, bit 1 ADD), `[20..64)` tallies of senders 0–10
//! (`u32` each, wrapping). Senders 11–255 are tallied out of line, at a fixed distance from the
//! line in the segment's tally area ([`crate::heap::TALLY_BASE`]), 16 senders per 64-byte
//! line. Keeping the first eleven in the counter's own cache line makes the tally free for
//! them: the update has just taken that line exclusively anyway.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use symsched_plan::SignalMode;

use crate::heap::{PAD_BASE, PAD_REGION_BYTES, TALLY_BASE};

/// Senders tallied inside the line.
pub const INLINE_SENDERS: usize = 11;
/// Senders tallied at all (group-local ranks `0..TALLIED_SENDERS`).
pub const TALLIED_SENDERS: usize = INLINE_SENDERS + 16 * crate::heap::TALLY_COPIES;
/// Mode bit of SET updates in [`SignalLine::modes`].
pub const MODE_SET: u32 = 1;
/// Mode bit of ADD updates in [`SignalLine::modes`].
pub const MODE_ADD: u32 = 2;

/// A view of one signal line in some rank's mapped segment.
#[derive(Debug, Clone, Copy)]
pub struct SignalLine {
    ptr: *mut u8,
    in_pad: bool,
}

// SAFETY: all access goes through atomics.
unsafe impl Send for SignalLine {}
// SAFETY: all access goes through atomics.
unsafe impl Sync for SignalLine {}

impl SignalLine {
    /// Wraps a 64-byte aligned line of a signal pad inside a mapped heap segment.
    ///
    /// # Safety
    /// `ptr` must point to a 64-byte aligned line inside the signal pads of a mapped heap
    /// segment (so its out-of-line tallies are mapped too) that outlives the view.
    pub(crate) unsafe fn new(ptr: *mut u8) -> Self {
        debug_assert_eq!(ptr as usize % 64, 0);
        SignalLine { ptr, in_pad: true }
    }

    /// Wraps a 64-byte aligned line outside any segment: only senders below
    /// [`INLINE_SENDERS`] are tallied.
    ///
    /// # Safety
    /// `ptr` must point to a 64-byte aligned, 64-byte line that outlives the view.
    #[cfg(test)]
    pub(crate) unsafe fn standalone(ptr: *mut u8) -> Self {
        debug_assert_eq!(ptr as usize % 64, 0);
        SignalLine { ptr, in_pad: false }
    }

    /// Start of the line.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
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

    fn modes_word(&self) -> &AtomicU32 {
        // SAFETY: `new`'s contract.
        unsafe { &*(self.ptr.add(16) as *const AtomicU32) }
    }

    /// The tally word of group-local sender `from`, if tallied.
    fn tally_word(&self, from: usize) -> Option<&AtomicU32> {
        if from < INLINE_SENDERS {
            // SAFETY: `new`'s contract; 20 + 4 * 10 + 4 = 64.
            return Some(unsafe { &*(self.ptr.add(20 + 4 * from) as *const AtomicU32) });
        }
        if !self.in_pad || from >= TALLIED_SENDERS {
            return None;
        }
        let k = from - INLINE_SENDERS;
        let off = (TALLY_BASE - PAD_BASE) + (k / 16) * PAD_REGION_BYTES + (k % 16) * 4;
        // SAFETY: `new`'s contract: the line is in the pad region, so the same line of tally
        // copy k / 16 is mapped at this fixed distance (see crate::heap's layout).
        Some(unsafe { &*(self.ptr.add(off) as *const AtomicU32) })
    }

    /// Current value (acquire: data published before the update is visible after this load).
    pub fn load(&self) -> u64 {
        self.counter().load(Ordering::Acquire)
    }

    /// The update modes seen on this line ([`MODE_SET`], [`MODE_ADD`]).
    pub fn modes(&self) -> u32 {
        self.modes_word().load(Ordering::Relaxed)
    }

    /// What group-local rank `from` contributed over the line's life: the sum it added (ADD)
    /// or the last value it stored (SET), both modulo 2^32. `None` for senders not tallied.
    pub fn tally(&self, from: usize) -> Option<u32> {
        self.tally_word(from).map(|w| w.load(Ordering::Relaxed))
    }

    /// Applies an update from group-local rank `from` and wakes sleepers.
    pub fn update(&self, mode: SignalMode, value: u64, from: usize) {
        let bit = match mode {
            SignalMode::Set => MODE_SET,
            SignalMode::Add => MODE_ADD,
        };
        if self.modes_word().load(Ordering::Relaxed) & bit == 0 {
            self.modes_word().fetch_or(bit, Ordering::Relaxed);
        }
        // Tallied before the counter's release, so a waiter that sees the value sees the tally.
        if let Some(t) = self.tally_word(from) {
            match mode {
                SignalMode::Set => t.store(value as u32, Ordering::Relaxed),
                SignalMode::Add => {
                    t.fetch_add(value as u32, Ordering::Relaxed);
                }
            }
        }
        match mode {
            SignalMode::Set => self.counter().store(value, Ordering::Release),
            SignalMode::Add => {
                self.counter().fetch_add(value, Ordering::Release);
            }
        }
        self.nudge();
    }

    /// Bumps the futex word and wakes every sleeper (used by updates and by group aborts, which
    /// must wake waiters whatever they wait for).
    pub(crate) fn nudge(&self) {
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
    }

    /// Zeroes the counter, the modes and the tallies of senders `0..senders` (a group reset,
    /// when no member updates the line).
    pub(crate) fn clear(&self, senders: usize) {
        if self.modes() == 0 && self.counter().load(Ordering::Relaxed) == 0 {
            // Never updated: leave its page untouched.
            return;
        }
        self.modes_word().store(0, Ordering::Relaxed);
        for s in 0..senders.min(TALLIED_SENDERS) {
            if let Some(t) = self.tally_word(s) {
                // Only touch out-of-line pages that were ever written (reading a hole maps the
                // shared zero page, writing would allocate one).
                if t.load(Ordering::Relaxed) != 0 {
                    t.store(0, Ordering::Relaxed);
                }
            }
        }
        self.counter().store(0, Ordering::Release);
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
    fn set_add_and_tallies() {
        let mut l = Line([0; 64]);
        let s = unsafe { SignalLine::standalone(l.0.as_mut_ptr()) };
        assert_eq!(s.modes(), 0);
        s.update(SignalMode::Add, 3, 1);
        s.update(SignalMode::Add, 4, 2);
        s.update(SignalMode::Add, 4, 2);
        assert_eq!(s.load(), 11);
        assert_eq!(
            (s.tally(0), s.tally(1), s.tally(2)),
            (Some(0), Some(3), Some(8))
        );
        assert_eq!(s.tally(10), Some(0));
        assert_eq!(
            s.tally(11),
            None,
            "standalone lines tally in-line senders only"
        );
        assert_eq!(s.modes(), MODE_ADD);
        s.update(SignalMode::Set, 42, 0);
        assert_eq!(s.load(), 42);
        assert_eq!(s.tally(0), Some(42));
        assert_eq!(s.modes(), MODE_ADD | MODE_SET);
        // A sender outside the tallied range still updates the counter.
        s.update(SignalMode::Add, 1, 300);
        assert_eq!(s.load(), 43);
        s.clear(16);
        assert_eq!((s.load(), s.modes(), s.tally(2)), (0, 0, Some(0)));
    }

    #[test]
    fn out_of_line_tallies_sit_at_a_fixed_distance() {
        // A fake segment with the pad region and two tally copies: line 5 of pad 0.
        let len = PAD_BASE + PAD_REGION_BYTES * 3;
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size; freed below with the same layout.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!base.is_null());
        let line = unsafe { SignalLine::new(base.add(PAD_BASE + 5 * 64)) };
        line.update(SignalMode::Add, 7, 11);
        line.update(SignalMode::Add, 2, 26);
        line.update(SignalMode::Set, 9, 27);
        assert_eq!(line.tally(11), Some(7));
        assert_eq!(line.tally(26), Some(2));
        assert_eq!(line.tally(27), Some(9));
        let word = |off: usize| unsafe { *(base.add(off) as *const u32) };
        assert_eq!(word(TALLY_BASE + 5 * 64), 7);
        assert_eq!(word(TALLY_BASE + 5 * 64 + 15 * 4), 2);
        assert_eq!(word(TALLY_BASE + PAD_REGION_BYTES + 5 * 64), 9);
        assert_eq!(TALLIED_SENDERS, 267);
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(base, layout) };
    }
}
