//! Waiting on a signal line: spin with `pause`, then `sched_yield`, then sleep on the line's
//! futex, so that oversubscribed ranks (8 ranks on 2 cores) still progress. Every wait has a
//! deadline; a cheap `abort` probe (the group's abort records, [`crate::abort`]) runs every few
//! polls and before every sleep, and an aborting rank wakes every sleeper of the group, so an
//! abort ends the wait within milliseconds; peer liveness is checked about every 100 ms so a
//! dead peer is reported within about a second.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use symsched_plan::Cmp;

use crate::signal::{futex_wait, SignalLine};

/// Polls spent spinning before yielding.
const SPIN_POLLS: u32 = 256;
/// Polls spent yielding before sleeping.
const YIELD_POLLS: u32 = 64;
/// Spin polls between two abort probes.
const ABORT_PROBE_EVERY: u32 = 32;
/// Longest single futex sleep (bounds the liveness-check period).
const SLEEP_SLICE: Duration = Duration::from_millis(50);
/// Liveness-check period.
const LIVENESS_PERIOD: Duration = Duration::from_millis(100);

/// Why a wait did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFailure<E> {
    /// The deadline passed; the last observed value.
    Timeout {
        /// Value seen last.
        observed: u64,
    },
    /// The liveness check reported a problem.
    Aborted(E),
}

/// Waits until `cmp.holds(line, target)`, until `deadline`, calling `check` about every 100 ms
/// (it returns `Some(reason)` to abort, e.g. when a peer died). Returns the observed value.
pub fn wait_until<E>(
    line: &SignalLine,
    cmp: Cmp,
    target: u64,
    deadline: Instant,
    check: impl FnMut() -> Option<E>,
) -> Result<u64, WaitFailure<E>> {
    wait_watching(line, cmp, target, deadline, || None, check)
}

/// Like [`wait_until`], also calling the cheap `abort` probe every few polls and right before
/// every futex sleep (after announcing the sleeper, so a concurrent abort that bumps the line's
/// futex word either is seen by the probe or cuts the sleep short).
pub fn wait_watching<E>(
    line: &SignalLine,
    cmp: Cmp,
    target: u64,
    deadline: Instant,
    mut abort: impl FnMut() -> Option<E>,
    mut check: impl FnMut() -> Option<E>,
) -> Result<u64, WaitFailure<E>> {
    let v = line.load();
    if cmp.holds(v, target) {
        return Ok(v);
    }
    for i in 0..SPIN_POLLS {
        std::hint::spin_loop();
        let v = line.load();
        if cmp.holds(v, target) {
            return Ok(v);
        }
        if i % ABORT_PROBE_EVERY == 0 {
            if let Some(e) = abort() {
                return Err(WaitFailure::Aborted(e));
            }
        }
    }
    let mut last_check = Instant::now();
    for _ in 0..YIELD_POLLS {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
        let v = line.load();
        if cmp.holds(v, target) {
            return Ok(v);
        }
        if let Some(e) = abort() {
            return Err(WaitFailure::Aborted(e));
        }
    }
    loop {
        let now = Instant::now();
        if now.duration_since(last_check) >= LIVENESS_PERIOD {
            last_check = now;
            if let Some(e) = check() {
                // The peer may have delivered its part before dying: the value decides.
                let v = line.load();
                if cmp.holds(v, target) {
                    return Ok(v);
                }
                return Err(WaitFailure::Aborted(e));
            }
        }
        if now >= deadline {
            let v = line.load();
            if cmp.holds(v, target) {
                return Ok(v);
            }
            return Err(WaitFailure::Timeout { observed: v });
        }
        let word = line.futex_word();
        line.waiters().fetch_add(1, Ordering::SeqCst);
        let seq = word.load(Ordering::SeqCst);
        let v = line.load();
        if cmp.holds(v, target) {
            line.waiters().fetch_sub(1, Ordering::SeqCst);
            return Ok(v);
        }
        if let Some(e) = abort() {
            line.waiters().fetch_sub(1, Ordering::SeqCst);
            return Err(WaitFailure::Aborted(e));
        }
        let slice = SLEEP_SLICE
            .min(deadline.saturating_duration_since(now))
            .min(LIVENESS_PERIOD.saturating_sub(now.duration_since(last_check)));
        futex_wait(word, seq, slice.max(Duration::from_micros(100)));
        line.waiters().fetch_sub(1, Ordering::SeqCst);
        let v = line.load();
        if cmp.holds(v, target) {
            return Ok(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symsched_plan::SignalMode;

    #[repr(align(64))]
    struct Line([u8; 64]);

    #[test]
    fn every_cmp_and_timeout() {
        let mut l = Line([0; 64]);
        let s = unsafe { SignalLine::standalone(l.0.as_mut_ptr()) };
        s.update(SignalMode::Set, 5, 0);
        let far = Instant::now() + Duration::from_secs(5);
        let none = || None::<()>;
        for (cmp, t) in [
            (Cmp::Eq, 5),
            (Cmp::Ne, 4),
            (Cmp::Gt, 4),
            (Cmp::Ge, 5),
            (Cmp::Lt, 6),
            (Cmp::Le, 5),
        ] {
            assert_eq!(wait_until(&s, cmp, t, far, none), Ok(5), "{cmp:?}");
        }
        let soon = Instant::now() + Duration::from_millis(150);
        assert_eq!(
            wait_until(&s, Cmp::Gt, 5, soon, none),
            Err(WaitFailure::Timeout { observed: 5 })
        );
        assert_eq!(
            wait_until(&s, Cmp::Eq, 9, far, || Some("dead")),
            Err(WaitFailure::Aborted("dead"))
        );
    }

    #[test]
    fn an_abort_probe_ends_a_sleeping_wait_as_soon_as_the_line_is_nudged() {
        let l = Box::new(Line([0; 64]));
        let p = Box::into_raw(l);
        let s = unsafe { SignalLine::standalone((*p).0.as_mut_ptr()) };
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f2 = flag.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            f2.store(true, Ordering::SeqCst);
            s.nudge();
            Instant::now()
        });
        let far = Instant::now() + Duration::from_secs(10);
        let r = wait_watching(
            &s,
            Cmp::Ge,
            1,
            far,
            || flag.load(Ordering::SeqCst).then_some("aborted"),
            || None,
        );
        let set = t.join().unwrap();
        assert_eq!(r, Err(WaitFailure::Aborted("aborted")));
        assert!(Instant::now() >= set);
        drop(unsafe { Box::from_raw(p) });
    }

    #[test]
    fn wakes_a_sleeper_from_another_thread() {
        let l = Box::new(Line([0; 64]));
        let p = Box::into_raw(l);
        let s = unsafe { SignalLine::standalone((*p).0.as_mut_ptr()) };
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            s.update(SignalMode::Add, 1, 1);
        });
        let start = Instant::now();
        let far = Instant::now() + Duration::from_secs(10);
        assert_eq!(wait_until(&s, Cmp::Ge, 1, far, || None::<()>), Ok(1));
        assert!(start.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
        drop(unsafe { Box::from_raw(p) });
    }
}
