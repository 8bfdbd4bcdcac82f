//! The in-process fabric: every rank is a thread, every rank's heap segment is a separate
//! 64-byte-aligned allocation of one [`LocalWorld`], signals are real atomics with the same
//! release/acquire and spin → yield → sleep wait as the multi-process runtime.
//!
//! Used by the fast test sweep and as an engine for single-process runs. Sub-groups of a world
//! ([`LocalWorld::group`]) have their own signal pads, so overlapping groups can run concurrently.

use super::{Fabric, HeapSpan, WaitContext};
use crate::config::{signal_timeout_from_env, ExecOptions};
use crate::exec::cancel::LaunchCancel;
use crate::exec::error::{ExecError, WaitTimeout};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use symsched_plan::{Cmp, SignalMode};

const ALIGN: usize = 64;

/// Default number of signal slots per rank and group.
pub const DEFAULT_SLOTS: u32 = 4096;

#[repr(align(64))]
#[derive(Default)]
struct Slot(AtomicU64);

struct Segment {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the segment is plain shared memory; all synchronisation goes through signal slots.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `LocalWorld::new` with this layout.
            unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, ALIGN).unwrap()) }
        }
    }
}

/// Bump pointer and key → (offset, length) of a symmetric allocator.
type KeyedAllocs<T> = Mutex<(T, HashMap<String, (T, T)>)>;

/// The ranks of one simulated node: one heap segment per rank and a symmetric allocator.
pub struct LocalWorld {
    segments: Vec<Segment>,
    heap_len: u64,
    allocs: KeyedAllocs<u64>,
    next_group: AtomicU32,
    timeout: Duration,
    exec: ExecOptions,
}

impl LocalWorld {
    /// `size` ranks with `heap_len` bytes each (zeroed; the OS only backs touched pages), with
    /// the wait deadline and executor knobs of the environment (read by [`crate::config`]:
    /// `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`, [`ExecOptions::from_env`]); a malformed value is
    /// an error.
    pub fn new(size: u32, heap_len: u64) -> Result<Arc<LocalWorld>, ExecError> {
        LocalWorld::with_options(
            size,
            heap_len,
            signal_timeout_from_env()?,
            ExecOptions::from_env()?,
        )
    }

    /// `size` ranks with `heap_len` bytes each, waits that give up after `timeout`, and
    /// executors that run with `exec`.
    pub fn with_options(
        size: u32,
        heap_len: u64,
        timeout: Duration,
        exec: ExecOptions,
    ) -> Result<Arc<LocalWorld>, ExecError> {
        let mut segments = Vec::with_capacity(size as usize);
        for _ in 0..size {
            let len = heap_len as usize;
            let ptr = if len == 0 {
                std::ptr::NonNull::<u8>::dangling().as_ptr()
            } else {
                let layout = Layout::from_size_align(len, ALIGN)
                    .map_err(|e| ExecError::Exhausted(format!("heap of {len} bytes: {e}")))?;
                // SAFETY: non-zero size layout.
                let p = unsafe { alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(ExecError::Exhausted(format!("heap of {len} bytes")));
                }
                p
            };
            segments.push(Segment { ptr, len });
        }
        Ok(Arc::new(LocalWorld {
            segments,
            heap_len,
            allocs: Mutex::new((0, HashMap::new())),
            next_group: AtomicU32::new(0),
            timeout,
            exec,
        }))
    }

    /// Same world with another wait deadline (tests use short ones).
    pub fn with_timeout(mut self: Arc<Self>, timeout: Duration) -> Arc<Self> {
        if let Some(w) = Arc::get_mut(&mut self) {
            w.timeout = timeout;
        }
        self
    }

    pub fn size(&self) -> u32 {
        self.segments.len() as u32
    }

    /// Symmetric allocation: the same offset on every rank; the same `key` returns the same
    /// allocation as long as it is large enough.
    pub fn alloc(&self, key: &str, bytes: u64) -> Result<u64, ExecError> {
        let mut g = self.allocs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(off, len)) = g.1.get(key) {
            if len >= bytes {
                return Ok(off);
            }
        }
        let off = g.0.next_multiple_of(ALIGN as u64);
        let end = off.checked_add(bytes).filter(|e| *e <= self.heap_len);
        let Some(end) = end else {
            return Err(ExecError::Exhausted(format!(
                "symmetric heap of {} bytes cannot fit {bytes} more bytes for `{key}`",
                self.heap_len
            )));
        };
        g.0 = end;
        g.1.insert(key.to_string(), (off, bytes));
        Ok(off)
    }

    /// Pointer into global rank `rank`'s segment (bounds-checked).
    pub fn ptr(&self, rank: u32, offset: u64, len: u64) -> Result<*mut u8, ExecError> {
        let seg = self
            .segments
            .get(rank as usize)
            .ok_or_else(|| ExecError::RankOutsideGroup {
                peer: rank,
                size: self.size(),
            })?;
        match offset.checked_add(len) {
            Some(end) if end <= self.heap_len => {
                // SAFETY: in bounds of the segment just checked.
                Ok(unsafe { seg.ptr.add(offset as usize) })
            }
            _ => Err(ExecError::OffsetPastHeap {
                offset,
                len,
                heap_len: self.heap_len,
            }),
        }
    }

    /// A group over the given global ranks (in group-rank order) with its own signal pad.
    pub fn group(self: &Arc<Self>, members: &[u32]) -> Result<Arc<LocalGroup>, ExecError> {
        for &m in members {
            if m >= self.size() {
                return Err(ExecError::RankOutsideGroup {
                    peer: m,
                    size: self.size(),
                });
            }
        }
        let id = self.next_group.fetch_add(1, Ordering::Relaxed);
        let slots = members
            .iter()
            .map(|_| (0..DEFAULT_SLOTS).map(|_| Slot::default()).collect())
            .collect();
        Ok(Arc::new(LocalGroup {
            world: self.clone(),
            members: members.to_vec(),
            label: format!("local#{id}{members:?}"),
            slots,
            slot_alloc: Mutex::new((0, HashMap::new())),
        }))
    }

    /// The whole world as one group.
    pub fn world_group(self: &Arc<Self>) -> Result<Arc<LocalGroup>, ExecError> {
        let all: Vec<u32> = (0..self.size()).collect();
        self.group(&all)
    }
}

/// A group of a [`LocalWorld`]: member list and signal pads.
pub struct LocalGroup {
    world: Arc<LocalWorld>,
    members: Vec<u32>,
    label: String,
    slots: Vec<Box<[Slot]>>,
    slot_alloc: KeyedAllocs<u32>,
}

impl LocalGroup {
    /// The fabric of group-local rank `rank`.
    pub fn fabric(self: &Arc<Self>, rank: u32) -> Result<LocalFabric, ExecError> {
        if rank as usize >= self.members.len() {
            return Err(ExecError::RankOutsideGroup {
                peer: rank,
                size: self.members.len() as u32,
            });
        }
        Ok(LocalFabric {
            group: self.clone(),
            rank,
        })
    }

    pub fn world(&self) -> &Arc<LocalWorld> {
        &self.world
    }

    pub fn members(&self) -> &[u32] {
        &self.members
    }
}

/// One rank's handle on a [`LocalGroup`].
#[derive(Clone)]
pub struct LocalFabric {
    group: Arc<LocalGroup>,
    rank: u32,
}

impl LocalFabric {
    fn size_u32(&self) -> u32 {
        self.group.members.len() as u32
    }

    fn slot(&self, rank: u32, slot: u32) -> Result<&AtomicU64, ExecError> {
        let pad =
            self.group
                .slots
                .get(rank as usize)
                .ok_or_else(|| ExecError::RankOutsideGroup {
                    peer: rank,
                    size: self.size_u32(),
                })?;
        pad.get(slot as usize)
            .map(|s| &s.0)
            .ok_or_else(|| ExecError::Exhausted(format!("signal slot {slot} of {}", pad.len())))
    }
}

impl Fabric for LocalFabric {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size_u32()
    }

    fn label(&self) -> &str {
        &self.group.label
    }

    fn exec_options(&self) -> &ExecOptions {
        &self.group.world.exec
    }

    fn heap_ptr(&self, peer: u32, offset: u64, len: u64) -> Result<*mut u8, ExecError> {
        let global =
            *self
                .group
                .members
                .get(peer as usize)
                .ok_or_else(|| ExecError::RankOutsideGroup {
                    peer,
                    size: self.size_u32(),
                })?;
        self.group.world.ptr(global, offset, len)
    }

    fn heap_span(&self, peer: u32) -> Option<HeapSpan> {
        let global = *self.group.members.get(peer as usize)?;
        let seg = self.group.world.segments.get(global as usize)?;
        Some(HeapSpan {
            base: seg.ptr,
            lo: 0,
            hi: self.group.world.heap_len,
        })
    }

    fn scratch(&self, key: &str, bytes: u64) -> Result<u64, ExecError> {
        // Offsets are world-wide, so a group-qualified key keeps groups apart.
        let k = format!("{}/{key}", self.group.label);
        self.group.world.alloc(&k, bytes)
    }

    fn signal_slots(&self, key: &str, count: u32) -> Result<u32, ExecError> {
        let mut g = self
            .group
            .slot_alloc
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(&(base, n)) = g.1.get(key) {
            if n >= count {
                return Ok(base);
            }
        }
        let base = g.0;
        let end = base
            .checked_add(count)
            .filter(|e| *e <= DEFAULT_SLOTS)
            .ok_or_else(|| {
                ExecError::Exhausted(format!(
                    "{count} signal slots for `{key}` ({DEFAULT_SLOTS} per group)"
                ))
            })?;
        g.0 = end;
        g.1.insert(key.to_string(), (base, count));
        Ok(base)
    }

    fn signal(&self, peer: u32, slot: u32, mode: SignalMode, value: u64) -> Result<(), ExecError> {
        let s = self.slot(peer, slot)?;
        match mode {
            SignalMode::Add => {
                s.fetch_add(value, Ordering::Release);
            }
            SignalMode::Set => s.store(value, Ordering::Release),
        }
        Ok(())
    }

    fn signal_words(&self, first: u32, count: u32) -> Option<(*const u64, usize)> {
        let pad = self.group.slots.get(self.rank as usize)?;
        let end = first.checked_add(count)?;
        if count == 0 || end as usize > pad.len() {
            return None;
        }
        // One `Slot` per counter, contiguous: the counters lie a slot's size apart.
        Some((
            pad[first as usize].0.as_ptr() as *const u64,
            std::mem::size_of::<Slot>(),
        ))
    }

    fn wait(&self, slot: u32, cmp: Cmp, target: u64, ctx: &WaitContext) -> Result<u64, ExecError> {
        self.wait_until(slot, cmp, target, ctx, None)
    }

    fn wait_cancellable(
        &self,
        slot: u32,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
        cancel: &LaunchCancel,
        channel: u32,
    ) -> Result<u64, ExecError> {
        self.wait_until(slot, cmp, target, ctx, Some((cancel, channel)))
    }
}

impl LocalFabric {
    /// The wait loop of [`Fabric::wait`]; `cancel` (a multi-channel launch's cancel word and
    /// this worker's channel) is looked at on the slow path only, next to the deadline.
    #[inline]
    fn wait_until(
        &self,
        slot: u32,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
        cancel: Option<(&LaunchCancel, u32)>,
    ) -> Result<u64, ExecError> {
        let s = self.slot(self.rank, slot)?;
        let v = s.load(Ordering::Acquire);
        if cmp.holds(v, target) {
            return Ok(v);
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let v = s.load(Ordering::Acquire);
            if cmp.holds(v, target) {
                return Ok(v);
            }
            spins = spins.wrapping_add(1);
            if spins < 256 {
                std::hint::spin_loop();
                continue;
            }
            if spins.is_multiple_of(64) {
                if let Some((c, channel)) = cancel {
                    c.check(channel)?;
                }
                let waited = start.elapsed();
                if waited > self.group.world.timeout {
                    return Err(ExecError::Timeout(Box::new(WaitTimeout {
                        rank: self.rank,
                        group: self.group.label.clone(),
                        schedule: ctx.schedule.to_string(),
                        step: ctx.step,
                        slot: ctx.slot_name.to_string(),
                        cmp,
                        expected: target,
                        observed: v,
                        timeout_ms: self.group.world.timeout.as_millis() as u64,
                        signallers: ctx.signallers.to_vec(),
                    })));
                }
                // Threads may outnumber cores: after a while stop burning the peer's time slice.
                if waited > Duration::from_millis(2) {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
            }
            std::thread::yield_now();
        }
    }
}
