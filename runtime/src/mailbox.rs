//! Group-creation mailboxes in the segment headers. Each rank posts one 64-byte entry per group
//! it creates (group id, allocator state, signal-pad occupancy) into its own header; members
//! read each other's entries through their mappings. A rank creates at most [`MAILBOX_ENTRIES`]
//! groups (one per signal pad), so entries are never overwritten and no file or socket is
//! needed after bootstrap.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::{PeerDiedError, RankList, RuntimeError};
use crate::heap::{atomic_u64, PadSet, PAD_COUNT};
use crate::monitor::Monitor;

/// Offset of the first entry in the header.
const MAILBOX_OFF: usize = 4096;
/// Entries per rank.
pub const MAILBOX_ENTRIES: usize = PAD_COUNT;
const ENTRY: usize = 64;

/// What a member posts when creating a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupRecord {
    /// Allocator operations made.
    pub ops: u64,
    /// Allocator hash.
    pub hash: u64,
    /// Signal pads in use.
    pub used_pads: PadSet,
}

/// Posts `rec` for group `gid` as entry `seq` of the segment at `base` (this rank's own).
///
/// # Safety
/// `base` must be this rank's mapped segment.
pub(crate) unsafe fn post(
    base: *mut u8,
    seq: usize,
    gid: u64,
    rec: GroupRecord,
) -> Result<(), RuntimeError> {
    if seq >= MAILBOX_ENTRIES {
        return Err(RuntimeError::TooManyGroups(MAILBOX_ENTRIES));
    }
    let at = MAILBOX_OFF + seq * ENTRY;
    atomic_u64(base, at + 8).store(rec.ops, Ordering::Relaxed);
    atomic_u64(base, at + 16).store(rec.hash, Ordering::Relaxed);
    for (i, w) in rec.used_pads.0.iter().enumerate() {
        atomic_u64(base, at + 24 + 8 * i).store(*w, Ordering::Relaxed);
    }
    // The id is published last (release) so a reader that matches it sees the whole entry.
    atomic_u64(base, at).store(gid, Ordering::Release);
    Ok(())
}

/// Finds the entry for `gid` in the segment at `base`.
///
/// # Safety
/// `base` must be a mapped segment.
pub(crate) unsafe fn find(base: *mut u8, gid: u64) -> Option<GroupRecord> {
    (0..MAILBOX_ENTRIES).find_map(|i| {
        let at = MAILBOX_OFF + i * ENTRY;
        if atomic_u64(base, at).load(Ordering::Acquire) != gid {
            return None;
        }
        Some(GroupRecord {
            ops: atomic_u64(base, at + 8).load(Ordering::Relaxed),
            hash: atomic_u64(base, at + 16).load(Ordering::Relaxed),
            used_pads: PadSet(std::array::from_fn(|i| {
                atomic_u64(base, at + 24 + 8 * i).load(Ordering::Relaxed)
            })),
        })
    })
}

/// Collects the entries for `gid` of every `(global rank, segment base)` in `peers`, waiting
/// up to `timeout`; names missing ranks on timeout and dead ones as soon as they are seen.
pub(crate) fn collect(
    peers: &[(usize, *mut u8)],
    gid: u64,
    me: usize,
    monitor: &Monitor,
    timeout: Duration,
    step: &str,
) -> Result<Vec<GroupRecord>, RuntimeError> {
    let deadline = Instant::now() + timeout;
    let mut out: Vec<Option<GroupRecord>> = vec![None; peers.len()];
    let mut nap = Duration::from_micros(20);
    let mut last_check = Instant::now();
    loop {
        for (i, &(_, base)) in peers.iter().enumerate() {
            if out[i].is_none() {
                // SAFETY: every base is a mapped segment of the caller's runtime.
                out[i] = unsafe { find(base, gid) };
            }
        }
        if out.iter().all(Option::is_some) {
            return Ok(out.into_iter().flatten().collect());
        }
        let missing: Vec<usize> = peers
            .iter()
            .zip(&out)
            .filter(|(_, o)| o.is_none())
            .map(|(&(r, _), _)| r)
            .collect();
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            if let Some((peer, pid)) = monitor.first_dead(missing.iter().copied()) {
                return Err(RuntimeError::PeerDied(Box::new(PeerDiedError {
                    rank: me,
                    group: step.to_string(),
                    peer,
                    pid,
                    schedule: String::new(),
                    step: step.to_string(),
                    signal: String::new(),
                })));
            }
        }
        if Instant::now() >= deadline {
            return Err(RuntimeError::RendezvousTimeout {
                rank: me,
                step: step.to_string(),
                dir: "(segment headers)".into(),
                timeout_ms: timeout.as_millis() as u64,
                missing: RankList(missing),
            });
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(2));
    }
}
