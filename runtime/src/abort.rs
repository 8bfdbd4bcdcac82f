//! Failure propagation within a group: one member's failure fails every member's wait at once,
//! with the failing rank and its error, instead of leaving the peers to their full signal
//! timeout.
//!
//! **The abort record.** Every member owns one record in its own copy of the group's signal pad
//! (pad lines [`ABORT_LINE`]..[`RESET_LINE`], see [`crate::heap`]): a state word, the message
//! length, the reset generation and the time of the abort, then up to [`MESSAGE_BYTES`] bytes of
//! error text. [`Group::abort`] writes the text *before* it publishes the state (release), so a
//! reader that sees the record aborted reads the whole message; only the owner writes its
//! record, so there is no race between several members aborting at once. Then it bumps the
//! futex word of every registered line of every member's pad, waking every sleeping waiter.
//!
//! **Every wait watches.** A wait on any slot of the group (and the group's barrier) probes the
//! members' records when it starts, every few polls while spinning and before every futex
//! sleep ([`crate::wait::wait_watching`]); an aborted record ends it with
//! [`RuntimeError::GroupAborted`] naming the rank that aborted and its message. The abort wakes
//! sleepers, so peers fail within milliseconds (well inside 100 ms), whatever their signal
//! timeout. A dead process is still detected by [`crate::monitor`] within about a second.
//!
//! **The group afterwards.** An aborted group refuses every wait and barrier — and
//! [`Group::check_usable`], which launch layers call before moving data — at once, with the
//! same "group aborted by rank R: …" error, until every member has called
//! [`Group::reset_after_abort`]. The reset is a collective with a bounded wait: each member
//! announces it, waits until every member has (so nobody still signals into the group), zeroes
//! its own counters and tallies, forgets the group's barrier epoch and [`Group::cached`]
//! values, clears its abort record, and waits until every member has done the same. Afterwards
//! the group works again and [`Group::generation`] is one higher: a layer that keeps its own
//! per-group launch state (epochs, caches) outside [`Group::cached`] must drop it when the
//! generation changes. If the reset cannot complete (a member does not call it in time, or
//! dies), the group is refused **for good**: every later operation fails with "group aborted by
//! rank R: reset_after_abort failed: …", and so does any further reset.
//!
//! One-sided puts and signals are not refused (they only write memory the reset clears);
//! anything that waits is.
//!
//! ```no_run
//! # fn f(g: &symsched_runtime::Group) -> Result<(), symsched_runtime::RuntimeError> {
//! // On the failing rank, inside a collective:
//! g.abort("IndexError: all_to_all got 0 rows");
//! // On every rank, once the error surfaced:
//! let generation = g.reset_after_abort()?;
//! g.barrier()?; // usable again
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{GroupAbortedError, RankList, RuntimeError};
use crate::group::{Group, SLOT_BASE};
use crate::heap::{atomic_u64, LINE};

/// Pad line of the abort record header.
pub const ABORT_LINE: usize = 4;
/// First pad line of the abort message.
const TEXT_LINE: usize = 5;
/// Longest recorded error text, in bytes (longer messages are cut at a character boundary).
pub const MESSAGE_BYTES: usize = 512;
/// Pad line of the reset words (`entered`, `done`, slot lines in use).
pub const RESET_LINE: usize = TEXT_LINE + MESSAGE_BYTES / LINE;

const _: () = assert!(
    RESET_LINE < SLOT_BASE,
    "the abort record must fit below the slots"
);

/// How long a reader waits for a record being written (the owner may be preempted in its few
/// microseconds of writing) before it reports the record as still being written.
const WRITING_PATIENCE: Duration = Duration::from_millis(100);
const STATE: usize = 0;
const LEN: usize = 8;
const GENERATION: usize = 16;
const STICKY: usize = 24;
const WHEN: usize = 32;

const CLEAR: u64 = 0;
const WRITING: u64 = 1;
const ABORTED: u64 = 2;

const ENTERED: usize = 0;
const DONE: usize = 8;
const SLOTS: usize = 16;

/// An abort as recorded by the member that aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortInfo {
    /// Global rank that aborted.
    pub rank: usize,
    /// Its group-local rank.
    pub local_rank: usize,
    /// Its error text (at most [`MESSAGE_BYTES`] bytes).
    pub message: String,
    /// The group's reset generation when it aborted.
    pub generation: u64,
    /// Whether a failed reset made the abort permanent.
    pub permanent: bool,
    /// When it aborted (`CLOCK_MONOTONIC`, nanoseconds; comparable across the ranks of a node).
    pub at_monotonic_ns: u64,
}

/// Nanoseconds of `CLOCK_MONOTONIC` (the same clock in every process of the machine).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The reachable members' abort records, probed by every wait (no allocation: a wait that is
/// satisfied at once must stay cheap).
pub(crate) struct AbortWatch<'g> {
    group: &'g Group,
}

impl<'g> AbortWatch<'g> {
    pub(crate) fn new(group: &'g Group) -> AbortWatch<'g> {
        AbortWatch { group }
    }

    /// Whether some member's record is not clear.
    pub(crate) fn probe(&self) -> bool {
        (0..self.group.size()).any(|p| {
            self.group
                .word(p, ABORT_LINE, STATE)
                .is_some_and(|s| s.load(Ordering::SeqCst) != CLEAR)
        })
    }
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Group {
    fn words(&self, peer: usize, line: usize) -> Option<*mut u8> {
        self.pad_line(peer, line).ok().map(|l| l.as_ptr())
    }

    pub(crate) fn word(&self, peer: usize, line: usize, off: usize) -> Option<&AtomicU64> {
        // SAFETY: a word of a pad line in a mapping the group keeps alive.
        self.words(peer, line)
            .map(|p| unsafe { atomic_u64(p, off) })
    }

    fn reachable(&self) -> Vec<usize> {
        (0..self.size()).filter(|&p| self.is_reachable(p)).collect()
    }

    fn read_record(&self, peer: usize) -> Option<AbortInfo> {
        let hdr = self.words(peer, ABORT_LINE)?;
        // SAFETY: words of the peer's header line.
        let state = unsafe { atomic_u64(hdr, STATE) };
        let t = Instant::now();
        // The owner writes the text (and, for a failed reset, the sticky flag) between WRITING
        // and ABORTED: a few microseconds, unless it is preempted there, so wait a little
        // longer before giving up; and read again when the owner rewrote the record while it
        // was being read (a failed reset replaces an earlier record), so a reader never takes
        // a record mixed from two writes.
        let (generation, sticky, when, message) = loop {
            let mut s = state.load(Ordering::SeqCst);
            while s == WRITING && t.elapsed() < WRITING_PATIENCE {
                if t.elapsed() < Duration::from_millis(5) {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                s = state.load(Ordering::SeqCst);
            }
            if s == CLEAR {
                return None;
            }
            // SAFETY: as above; the text lines follow the header in the same pad.
            let (len, generation, sticky, when) = unsafe {
                (
                    (atomic_u64(hdr, LEN).load(Ordering::Relaxed) as usize).min(MESSAGE_BYTES),
                    atomic_u64(hdr, GENERATION).load(Ordering::Relaxed),
                    atomic_u64(hdr, STICKY).load(Ordering::Relaxed),
                    atomic_u64(hdr, WHEN).load(Ordering::Relaxed),
                )
            };
            let message = if s == ABORTED {
                let text = self.words(peer, TEXT_LINE)?;
                let mut buf = vec![0u8; len];
                // SAFETY: `len` ≤ MESSAGE_BYTES bytes of the text lines, written before the
                // state was released; a rewrite meanwhile is detected below.
                unsafe { std::ptr::copy_nonoverlapping(text, buf.as_mut_ptr(), len) };
                String::from_utf8_lossy(&buf).into_owned()
            } else {
                "(the rank was still writing its error when this was read)".into()
            };
            // SAFETY: as above.
            let again = unsafe { atomic_u64(hdr, WHEN).load(Ordering::SeqCst) };
            if s != ABORTED
                || (state.load(Ordering::SeqCst) == s && again == when)
                || t.elapsed() >= WRITING_PATIENCE
            {
                break (generation, sticky, when, message);
            }
        };
        Some(AbortInfo {
            rank: self.members()[peer],
            local_rank: peer,
            message,
            generation,
            permanent: sticky != 0,
            at_monotonic_ns: when,
        })
    }

    /// Every member's abort, in group order (empty when the group is not aborted).
    pub fn aborts(&self) -> Vec<AbortInfo> {
        self.reachable()
            .into_iter()
            .filter_map(|p| self.read_record(p))
            .collect()
    }

    /// The abort this group reports: the first failed reset if any, else the first abort in
    /// group order; `None` when no member aborted the group.
    pub fn aborted(&self) -> Option<AbortInfo> {
        let all = self.aborts();
        let i = all.iter().position(|a| a.permanent).unwrap_or(0);
        all.into_iter().nth(i)
    }

    /// The [`RuntimeError::GroupAborted`] this rank reports, `noticed` saying where.
    pub(crate) fn aborted_error(&self, noticed: &str) -> Option<RuntimeError> {
        let all = self.aborts();
        // A failed reset is what matters most from then on: it is reported first.
        let first = all.iter().find(|a| a.permanent).or(all.first())?;
        let others: Vec<usize> = all
            .iter()
            .filter(|a| a.rank != first.rank)
            .map(|a| a.rank)
            .collect();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!("; ranks {} aborted too", RankList(others))
        };
        Some(RuntimeError::GroupAborted(Box::new(GroupAbortedError {
            rank: self.shared.cfg.rank,
            group: self.name().to_string(),
            by_rank: first.rank,
            by_local: first.local_rank,
            message: first.message.clone(),
            also,
            noticed: noticed.to_string(),
        })))
    }

    /// `Ok` unless the group is aborted; launch layers call it before they move any data.
    pub fn check_usable(&self) -> Result<(), RuntimeError> {
        if !AbortWatch::new(self).probe() {
            return Ok(());
        }
        match self.aborted_error("before starting an operation") {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Marks the group aborted by this rank with `message` (cut to [`MESSAGE_BYTES`] bytes) and
    /// wakes every member's waits, which then fail with [`RuntimeError::GroupAborted`]. Does
    /// nothing if some member already aborted the group (the first cause stays the one
    /// reported), so a rank that fails *because* of a peer's abort may call it too.
    pub fn abort(&self, message: &str) {
        if self.aborted().is_some() {
            return;
        }
        self.record(message, false);
        tracing::error!(
            rank = self.shared.cfg.rank,
            group = %self.name(),
            "group aborted: {}",
            truncate(message, MESSAGE_BYTES)
        );
    }

    /// Writes this rank's record and wakes everybody.
    fn record(&self, message: &str, permanent: bool) {
        let me = self.rank();
        let (Some(hdr), Some(text)) = (self.words(me, ABORT_LINE), self.words(me, TEXT_LINE))
        else {
            return;
        };
        // A failed reset replaces this rank's earlier message (which it names), so every
        // member reports the group as unusable for good.
        let message = match (permanent, self.read_record(me)) {
            (true, Some(old)) if !old.permanent => {
                format!("{message}; first error: {}", old.message)
            }
            _ => message.to_string(),
        };
        // SAFETY: this rank's own header and text lines; only this rank writes them.
        unsafe {
            let state = atomic_u64(hdr, STATE);
            if state.load(Ordering::SeqCst) == CLEAR || permanent {
                // The sticky flag goes with the new text, inside the WRITING window: a reader
                // never sees a permanent record carrying the earlier message.
                state.store(WRITING, Ordering::SeqCst);
                if permanent {
                    atomic_u64(hdr, STICKY).store(1, Ordering::SeqCst);
                }
                let t = truncate(&message, MESSAGE_BYTES).as_bytes();
                std::ptr::copy_nonoverlapping(t.as_ptr(), text, t.len());
                atomic_u64(hdr, LEN).store(t.len() as u64, Ordering::Relaxed);
                atomic_u64(hdr, GENERATION).store(self.generation(), Ordering::Relaxed);
                atomic_u64(hdr, WHEN).store(monotonic_ns(), Ordering::Relaxed);
                state.store(ABORTED, Ordering::SeqCst);
            }
        }
        self.wake_everyone();
    }

    /// Bumps the futex word of every line anybody may wait on — the barrier line and every
    /// registered slot — of every member's pad. (Only those: the other lines below
    /// [`SLOT_BASE`] are records, whose bytes are not futex words.)
    fn wake_everyone(&self) {
        let slots = SLOT_BASE..SLOT_BASE + self.registered_slots();
        for p in self.reachable() {
            for l in std::iter::once(0).chain(slots.clone()) {
                if let Ok(line) = self.pad_line(p, l) {
                    line.nudge();
                }
            }
        }
    }

    /// Completed resets of this group on this rank (0 until the first
    /// [`Group::reset_after_abort`]).
    pub fn generation(&self) -> u64 {
        self.word(self.rank(), RESET_LINE, DONE)
            .map_or(0, |w| w.load(Ordering::SeqCst))
    }

    /// [`Group::reset_after_abort_timeout`] bounded by the group's signal timeout.
    pub fn reset_after_abort(&self) -> Result<u64, RuntimeError> {
        self.reset_after_abort_timeout(self.signal_timeout())
    }

    /// Makes an aborted group usable again (see the module docs); collective over the members,
    /// bounded by `timeout`. Returns the new [`Group::generation`]. No other thread of this rank
    /// may use the group meanwhile. Also works on a group that is not aborted.
    pub fn reset_after_abort_timeout(&self, timeout: Duration) -> Result<u64, RuntimeError> {
        let me = self.rank();
        if let Some(a) = self.aborts().into_iter().find(|a| a.permanent) {
            return Err(self
                .aborted_error("at reset_after_abort, which a failed reset rules out")
                .unwrap_or(RuntimeError::InvalidArgument(a.message)));
        }
        let (Some(entered), Some(done), Some(slots)) = (
            self.word(me, RESET_LINE, ENTERED),
            self.word(me, RESET_LINE, DONE),
            self.word(me, RESET_LINE, SLOTS),
        ) else {
            return Err(RuntimeError::InvalidArgument("group has no pad".into()));
        };
        let g = done.load(Ordering::SeqCst) + 1;
        slots.store(self.registered_slots() as u64, Ordering::SeqCst);
        entered.store(g, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        self.reset_phase(
            ENTERED,
            g,
            deadline,
            timeout,
            "waiting for every member to call it",
        )?;
        // Nobody signals into the group now: zero this rank's lines.
        let senders = self.size();
        let lines = SLOT_BASE
            + self
                .reachable()
                .into_iter()
                .filter_map(|p| self.word(p, RESET_LINE, SLOTS))
                .map(|w| w.load(Ordering::SeqCst) as usize)
                .max()
                .unwrap_or(0)
                .min(crate::group::SLOT_CAPACITY);
        for l in std::iter::once(0).chain(SLOT_BASE..lines) {
            if let Ok(line) = self.pad_line(me, l) {
                line.clear(senders);
            }
        }
        // The barrier agreement records (lines 1 and 2) start again with the epoch.
        for l in 1..3 {
            for w in 0..LINE / 8 {
                if let Some(word) = self.word(me, l, 8 * w) {
                    word.store(0, Ordering::Relaxed);
                }
            }
        }
        self.reset_local_state();
        if let Some(state) = self.word(me, ABORT_LINE, STATE) {
            state.store(CLEAR, Ordering::SeqCst);
        }
        done.store(g, Ordering::SeqCst);
        self.reset_phase(
            DONE,
            g,
            deadline,
            timeout,
            "waiting for every member to finish it",
        )?;
        tracing::info!(rank = self.shared.cfg.rank, group = %self.name(), generation = g, "group reset");
        Ok(g)
    }

    /// Waits until every reachable member's reset word `which` reaches `g`.
    fn reset_phase(
        &self,
        which: usize,
        g: u64,
        deadline: Instant,
        timeout: Duration,
        phase: &'static str,
    ) -> Result<(), RuntimeError> {
        let members = self.reachable();
        let mut nap = Duration::from_micros(50);
        loop {
            let missing: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&p| {
                    self.word(p, RESET_LINE, which)
                        .is_some_and(|w| w.load(Ordering::SeqCst) < g)
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            let dead = self
                .shared
                .monitor
                .first_dead(missing.iter().map(|&p| self.members()[p]));
            let permanent = self.aborts().into_iter().find(|a| a.permanent);
            if dead.is_some() || permanent.is_some() || Instant::now() >= deadline {
                let globals = RankList(missing.iter().map(|&p| self.members()[p]).collect());
                let e = match (dead, permanent) {
                    (Some((peer, pid)), _) => {
                        RuntimeError::PeerDied(Box::new(crate::error::PeerDiedError {
                            rank: self.shared.cfg.rank,
                            group: self.name().to_string(),
                            peer,
                            pid,
                            schedule: "reset_after_abort".into(),
                            step: phase.into(),
                            signal: "reset".into(),
                        }))
                    }
                    (None, permanent) => permanent
                        .and_then(|_| self.aborted_error(&format!("at reset_after_abort, {phase}")))
                        .unwrap_or(RuntimeError::ResetTimeout {
                            rank: self.shared.cfg.rank,
                            group: self.name().to_string(),
                            phase,
                            timeout_ms: timeout.as_millis() as u64,
                            missing: globals,
                        }),
                };
                self.record(&format!("reset_after_abort failed: {e}"), true);
                tracing::error!("{e}");
                return Err(e);
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_truncation() {
        const { assert!(RESET_LINE == 13 && RESET_LINE < SLOT_BASE) };
        let s = "é".repeat(400);
        let t = truncate(&s, MESSAGE_BYTES);
        assert!(t.len() <= MESSAGE_BYTES && t.len() >= MESSAGE_BYTES - 1);
        assert_eq!(truncate("short", 512), "short");
    }
}
