//! The symmetric heap of one rank: segment layout, the symmetric allocator, signal pads
//! and the header through which peers check that allocations agree.
//!
//! Segment layout (every rank's segment has the same layout):
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 64 KiB | header: identity line, allocator state line, ring of the last 64 allocator ops |
//! | [`PAD_BASE`] | [`PAD_COUNT`] × [`PAD_BYTES`] | signal pads, one per group this rank is in |
//! | [`TALLY_BASE`] | [`TALLY_COPIES`] × [`PAD_REGION_BYTES`] | per-sender update tallies of senders ≥ 11 (see [`crate::signal`]) |
//! | [`USER_BASE`] | `SYMMETRIC_MEMORY_HEAP_SIZE` | user heap (symmetric allocator) |
//! | [`Layout::arena_base`] | [`PAD_COUNT`] × arena | group scratch arenas, one per signal pad index |
//!
//! The whole segment is virtual (sparse memfd): pages cost memory only once touched.
//!
//! Lines of one group's signal pad:
//!
//! | line | content |
//! |---|---|
//! | 0 | barrier counter |
//! | 1, 2 | barrier agreement records (by epoch parity) |
//! | 3 | free |
//! | [`crate::abort::ABORT_LINE`] (4) | abort record header |
//! | 5–12 | abort message (512 bytes) |
//! | [`crate::abort::RESET_LINE`] (13) | reset generation words |
//! | 14, 15 | free |
//! | 16.. ([`crate::group::SLOT_BASE`]) | signal slots |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::allocator::{AllocOp, Allocator, HeapStats, OpRecord};
use crate::error::RuntimeError;
use crate::shm::Mapping;

/// Bytes per signal line (one counter per cache line).
pub const LINE: usize = 64;
/// Size of the header.
pub const HEADER_BYTES: usize = 64 << 10;
/// Start of the signal pads.
pub const PAD_BASE: usize = HEADER_BYTES;
/// Lines in one group's signal pad.
pub const PAD_LINES: usize = 4096;
/// Bytes in one group's signal pad.
pub const PAD_BYTES: usize = PAD_LINES * LINE;
/// Maximum number of groups a rank can be a member of.
pub const PAD_COUNT: usize = 256;
/// Bytes of all signal pads together.
pub const PAD_REGION_BYTES: usize = PAD_COUNT * PAD_BYTES;
/// Start of the out-of-line sender tallies: copy `c` of the pad region holds, for every pad
/// line, the tallies of senders `11 + 16c .. 11 + 16(c + 1)` (4 bytes each), so a line's
/// tally of a sender is at a fixed distance from the line itself.
pub const TALLY_BASE: usize = PAD_BASE + PAD_REGION_BYTES;
/// Copies of the pad region in the tally area (senders up to 255 are tallied).
pub const TALLY_COPIES: usize = 16;
/// First byte of the user heap.
pub const USER_BASE: usize = TALLY_BASE + TALLY_COPIES * PAD_REGION_BYTES;
/// Smallest accepted `SYMMETRIC_MEMORY_HEAP_SIZE`.
pub const MIN_HEAP_BYTES: u64 = 1 << 20;
/// Scratch arena per group: `SYMSCHED_SCRATCH_SIZE` (bytes), default [`DEFAULT_ARENA_BYTES`].
pub const ENV_SCRATCH_SIZE: &str = "SYMSCHED_SCRATCH_SIZE";
/// Default scratch arena per group (virtual).
pub const DEFAULT_ARENA_BYTES: u64 = 256 << 20;
const ARENA_ALIGN: u64 = 2 << 20;

/// Where things are in a segment, from the heap and arena sizes (identical on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// User heap bytes.
    pub heap_bytes: u64,
    /// Scratch arena bytes per group.
    pub arena_bytes: u64,
    /// First byte of the arenas.
    pub arena_base: u64,
    /// Total segment size.
    pub segment_bytes: u64,
}

impl Layout {
    /// Computes the layout; `None` on overflow.
    pub fn new(heap_bytes: u64, arena_bytes: u64) -> Option<Layout> {
        let arena_bytes = arena_bytes.checked_next_multiple_of(4096)?;
        let arena_base = (USER_BASE as u64)
            .checked_add(heap_bytes)?
            .checked_next_multiple_of(ARENA_ALIGN)?;
        let segment_bytes = arena_base.checked_add(arena_bytes.checked_mul(PAD_COUNT as u64)?)?;
        Some(Layout {
            heap_bytes,
            arena_bytes,
            arena_base,
            segment_bytes,
        })
    }

    /// Byte range of the scratch arena of pad index `pad`.
    pub fn arena(&self, pad: usize) -> (u64, u64) {
        let start = self.arena_base + pad as u64 * self.arena_bytes;
        (start, start + self.arena_bytes)
    }
}

const MAGIC: u64 = 0x5359_4d53_4348_4450; // "SYMSCHDP"
const LAYOUT_VERSION: u64 = 2;
const ALLOC_LINE: usize = LINE;
const OPLOG_OFF: usize = 2 * LINE;
const OPLOG_LEN: u64 = 64;
const OPLOG_ENTRY: usize = 32;

/// Returns the atomic u64 at `base + off`.
///
/// # Safety
/// `base + off` must be 8-aligned and inside a live shared mapping that outlives the reference.
pub(crate) unsafe fn atomic_u64<'a>(base: *mut u8, off: usize) -> &'a AtomicU64 {
    &*(base.add(off) as *const AtomicU64)
}

/// A set of signal-pad indices (`0..PAD_COUNT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PadSet(pub [u64; PAD_COUNT / 64]);

impl PadSet {
    /// Whether `idx` is in the set.
    pub fn contains(&self, idx: usize) -> bool {
        idx < PAD_COUNT && self.0[idx / 64] & (1u64 << (idx % 64)) != 0
    }

    /// Adds `idx`.
    pub fn insert(&mut self, idx: usize) {
        self.0[idx / 64] |= 1u64 << (idx % 64);
    }

    /// Removes `idx`.
    pub fn remove(&mut self, idx: usize) {
        self.0[idx / 64] &= !(1u64 << (idx % 64));
    }

    /// Union with `other`.
    pub fn union(&self, other: &PadSet) -> PadSet {
        let mut out = *self;
        for (o, x) in out.0.iter_mut().zip(other.0) {
            *o |= x;
        }
        out
    }

    /// The lowest index not in the set.
    pub fn first_free(&self) -> Option<usize> {
        (0..PAD_COUNT).find(|&i| !self.contains(i))
    }
}

/// What a peer's header says about its allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocState {
    /// Operations made.
    pub ops: u64,
    /// Running hash.
    pub hash: u64,
}

/// Reads the identity line of a segment: (magic ok, rank, pid).
pub(crate) fn read_identity(base: *mut u8) -> (bool, u64, u64) {
    // SAFETY: the header is inside every mapped segment (size ≥ MIN_HEAP_BYTES).
    unsafe {
        (
            atomic_u64(base, 0).load(Ordering::Acquire) == MAGIC
                && atomic_u64(base, 8).load(Ordering::Relaxed) == LAYOUT_VERSION,
            atomic_u64(base, 16).load(Ordering::Relaxed),
            atomic_u64(base, 24).load(Ordering::Relaxed),
        )
    }
}

/// Reads a segment's allocator state consistently (seqlock).
pub(crate) fn read_alloc_state(base: *mut u8) -> AllocState {
    // SAFETY: header lines are inside every mapped segment.
    unsafe {
        let seq = atomic_u64(base, ALLOC_LINE);
        loop {
            let s1 = seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let ops = atomic_u64(base, ALLOC_LINE + 8).load(Ordering::Acquire);
            let hash = atomic_u64(base, ALLOC_LINE + 16).load(Ordering::Acquire);
            if seq.load(Ordering::Acquire) == s1 {
                return AllocState { ops, hash };
            }
        }
    }
}

/// Reads op `index` from a segment's op ring if it is still there.
pub(crate) fn read_op(base: *mut u8, index: u64) -> Option<OpRecord> {
    let slot = OPLOG_OFF + (index % OPLOG_LEN) as usize * OPLOG_ENTRY;
    // SAFETY: the ring is inside the header.
    unsafe {
        let idx = atomic_u64(base, slot).load(Ordering::Acquire);
        if idx != index + 1 {
            return None;
        }
        let op = atomic_u64(base, slot + 8).load(Ordering::Relaxed);
        Some(OpRecord {
            index,
            op: if op == AllocOp::Free as u64 {
                AllocOp::Free
            } else {
                AllocOp::Malloc
            },
            size: atomic_u64(base, slot + 16).load(Ordering::Relaxed),
            offset: atomic_u64(base, slot + 24).load(Ordering::Relaxed),
        })
    }
}

/// A symmetric allocation: the same offset on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeapAlloc {
    /// Offset from the segment start (valid in every rank's segment).
    pub offset: usize,
    /// Requested length in bytes.
    pub len: usize,
}

/// This rank's heap: its mapped segment, the symmetric allocator and the signal-pad registry.
#[derive(Debug)]
pub struct Heap {
    rank: usize,
    map: Arc<Mapping>,
    layout: Layout,
    group_seq: std::sync::atomic::AtomicUsize,
    alloc: Mutex<Allocator>,
    pads: Mutex<PadSet>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Heap {
    /// Wraps this rank's freshly mapped segment and writes its header.
    pub(crate) fn new(
        rank: usize,
        map: Arc<Mapping>,
        layout: Layout,
    ) -> Result<Self, RuntimeError> {
        let size = map.len() as u64;
        if size != layout.segment_bytes || layout.heap_bytes < MIN_HEAP_BYTES {
            return Err(RuntimeError::Unavailable(format!(
                "heap size {} is below the minimum {MIN_HEAP_BYTES} bytes or the segment is not {} bytes",
                layout.heap_bytes, layout.segment_bytes
            )));
        }
        let base = map.base();
        // SAFETY: the header is inside the segment.
        unsafe {
            atomic_u64(base, 8).store(LAYOUT_VERSION, Ordering::Relaxed);
            atomic_u64(base, 16).store(rank as u64, Ordering::Relaxed);
            atomic_u64(base, 24).store(std::process::id() as u64, Ordering::Relaxed);
            atomic_u64(base, 32).store(size, Ordering::Relaxed);
            atomic_u64(base, 0).store(MAGIC, Ordering::Release);
        }
        let alloc = Allocator::new(USER_BASE as u64, USER_BASE as u64 + layout.heap_bytes);
        let heap = Heap {
            rank,
            map,
            layout,
            group_seq: std::sync::atomic::AtomicUsize::new(0),
            alloc: Mutex::new(alloc),
            pads: Mutex::new(PadSet::default()),
        };
        heap.publish(&lock(&heap.alloc), None);
        Ok(heap)
    }

    /// Segment size in bytes (every valid offset is below it).
    pub fn size(&self) -> usize {
        self.map.len()
    }

    /// The segment layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Start of this rank's mapping.
    pub fn base(&self) -> *mut u8 {
        self.map.base()
    }

    fn publish(&self, a: &Allocator, rec: Option<OpRecord>) {
        let base = self.map.base();
        // SAFETY: header lines inside the segment; only this rank writes them (under the lock).
        unsafe {
            if let Some(r) = rec {
                let slot = OPLOG_OFF + (r.index % OPLOG_LEN) as usize * OPLOG_ENTRY;
                atomic_u64(base, slot).store(0, Ordering::Release);
                atomic_u64(base, slot + 8).store(r.op as u64, Ordering::Relaxed);
                atomic_u64(base, slot + 16).store(r.size, Ordering::Relaxed);
                atomic_u64(base, slot + 24).store(r.offset, Ordering::Relaxed);
                atomic_u64(base, slot).store(r.index + 1, Ordering::Release);
            }
            let seq = atomic_u64(base, ALLOC_LINE);
            seq.fetch_add(1, Ordering::AcqRel);
            atomic_u64(base, ALLOC_LINE + 8).store(a.ops(), Ordering::Release);
            atomic_u64(base, ALLOC_LINE + 16).store(a.hash(), Ordering::Release);
            seq.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Allocates `size` bytes on the symmetric heap, 64-byte aligned. Every rank must make the
    /// same calls in the same order; the runtime checks this at group creation and barriers.
    pub fn malloc(&self, size: usize) -> Result<HeapAlloc, RuntimeError> {
        self.empty(size, crate::allocator::MIN_ALIGN as usize)
    }

    /// Like [`Heap::malloc`] with an explicit alignment (a power of two). The memory is not
    /// cleared (fresh pages read as zero; reused blocks keep old contents).
    pub fn empty(&self, size: usize, align: usize) -> Result<HeapAlloc, RuntimeError> {
        let mut a = lock(&self.alloc);
        let (off, rec) = a.malloc(self.rank, size as u64, align as u64)?;
        self.publish(&a, Some(rec));
        tracing::debug!(rank = self.rank, size, offset = off, "symmetric malloc");
        Ok(HeapAlloc {
            offset: off as usize,
            len: size,
        })
    }

    /// Frees a symmetric allocation (by offset).
    pub fn free(&self, offset: usize) -> Result<(), RuntimeError> {
        let mut a = lock(&self.alloc);
        let rec = a.free(self.rank, offset as u64)?;
        self.publish(&a, Some(rec));
        tracing::debug!(rank = self.rank, offset, "symmetric free");
        Ok(())
    }

    /// Runs `f` (a collective agreement on the allocation just made, e.g. a barrier that
    /// compares allocator states) after `op` and, if `f` fails, puts the allocator back as it
    /// was before `op`, so ranks that made different calls are equal again. `op`'s own error
    /// is returned after `f` ran (a rank whose request failed still takes part).
    pub(crate) fn agreed<T>(
        &self,
        op: impl FnOnce(&Heap) -> Result<T, RuntimeError>,
        f: impl FnOnce() -> Result<(), RuntimeError>,
    ) -> Result<T, RuntimeError> {
        let before = lock(&self.alloc).clone();
        let r = op(self);
        if let Err(e) = f() {
            let mut a = lock(&self.alloc);
            *a = before;
            self.publish(&a, None);
            return Err(e);
        }
        r
    }

    /// Symmetric heap accounting.
    pub fn stats(&self) -> HeapStats {
        lock(&self.alloc).stats()
    }

    /// This rank's allocator state as peers see it.
    pub fn alloc_state(&self) -> AllocState {
        let a = lock(&self.alloc);
        AllocState {
            ops: a.ops(),
            hash: a.hash(),
        }
    }

    /// First byte of the user heap and one past the last byte of the symmetric part.
    pub fn user_range(&self) -> (usize, usize) {
        let a = lock(&self.alloc);
        (a.base() as usize, a.end() as usize)
    }

    /// Sequence number of the next group creation on this rank (its mailbox entry).
    pub(crate) fn next_group_seq(&self) -> usize {
        self.group_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Bitmap of the signal pads in use on this rank.
    pub(crate) fn used_pads(&self) -> PadSet {
        *lock(&self.pads)
    }

    /// Reserves signal pad `idx` (zeroed); returns its byte offset.
    pub(crate) fn pad_alloc_at(&self, idx: usize) -> Result<usize, RuntimeError> {
        let mut used = lock(&self.pads);
        if idx >= PAD_COUNT || used.contains(idx) {
            return Err(RuntimeError::TooManyGroups(PAD_COUNT));
        }
        used.insert(idx);
        // Not cleared here: peers that finished creating the group may already be signalling
        // into it. Pads start zeroed (fresh memfd) and are used by one group only.
        Ok(PAD_BASE + idx * PAD_BYTES)
    }

    /// Returns a pad reserved by [`Heap::pad_alloc_at`].
    pub(crate) fn pad_release(&self, off: usize) {
        let idx = (off - PAD_BASE) / PAD_BYTES;
        // Not cleared: peers may still read this rank's last barrier record (a rank that
        // finished its final barrier tears down while slower peers check it). Groups are cached
        // for the runtime's lifetime, so a released pad is never handed out again anyway.
        lock(&self.pads).remove(idx);
    }
}

/// Explains how two ranks' allocation histories diverge, from their op rings.
pub(crate) fn describe_divergence(
    mine: *mut u8,
    theirs: *mut u8,
    ops: u64,
    peer_ops: u64,
) -> String {
    let upto = ops.min(peer_ops);
    let from = upto.saturating_sub(OPLOG_LEN);
    for i in from..upto {
        match (read_op(mine, i), read_op(theirs, i)) {
            (Some(a), Some(b)) if a != b => {
                return format!(
                    "; first difference at op #{i}: {:?}(size {}) -> offset {} vs {:?}(size {}) -> offset {}",
                    a.op, a.size, a.offset, b.op, b.size, b.offset
                )
            }
            _ => {}
        }
    }
    if ops != peer_ops {
        let (longer, n) = if ops > peer_ops {
            (mine, ops)
        } else {
            (theirs, peer_ops)
        };
        if let Some(r) = read_op(longer, upto) {
            return format!(
                "; op #{upto} ({:?} size {} -> offset {}) was made by one rank only (op counts {ops} vs {peer_ops}, last {n})",
                r.op, r.size, r.offset
            );
        }
    }
    String::new()
}
