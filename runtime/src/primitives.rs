//! One-sided primitives on a group with group-local ranks: raw pointers into the heaps, put,
//! get, signal, put-with-signal. Every offset and size is bounds-checked against the heap; the
//! runtime's reserved area (header and signal pads) is never handed out.

use crate::error::RuntimeError;
use crate::group::Group;
use crate::heap::{HeapAlloc, USER_BASE};
use crate::signal::SignalMode;

impl Group {
    fn check_range(&self, offset: usize, len: usize) -> Result<(), RuntimeError> {
        let heap_len = self.shared.heap.size();
        match offset.checked_add(len) {
            Some(end) if end <= heap_len => {}
            _ => {
                return Err(RuntimeError::OffsetPastHeap {
                    offset: offset as u64,
                    len: len as u64,
                    heap_len: heap_len as u64,
                })
            }
        }
        if offset < USER_BASE {
            return Err(RuntimeError::ReservedRange {
                offset: offset as u64,
                len: len as u64,
                user_base: USER_BASE as u64,
            });
        }
        Ok(())
    }

    /// Pointer to `len` bytes at `offset` of this rank's heap.
    ///
    /// ```no_run
    /// # fn f(rt: &symsched_runtime::Runtime, g: &symsched_runtime::Group) -> Result<(), symsched_runtime::RuntimeError> {
    /// let a = rt.malloc(1024)?;
    /// let p = g.local_ptr(a.offset, 1024)?;
    /// unsafe { p.write_bytes(0, 1024) };
    /// # Ok(()) }
    /// ```
    pub fn local_ptr(&self, offset: usize, len: usize) -> Result<*mut u8, RuntimeError> {
        self.check_range(offset, len)?;
        // SAFETY: in bounds of this rank's mapping (checked above).
        Ok(unsafe { self.shared.heap.base().add(offset) })
    }

    /// Pointer to `len` bytes at `offset` of group-local rank `peer`'s heap (this process's
    /// mapping of it). Fails for ranks outside the group or on another node.
    pub fn peer_ptr(
        &self,
        peer: usize,
        offset: usize,
        len: usize,
    ) -> Result<*mut u8, RuntimeError> {
        let m = self.mapping(peer)?;
        self.check_range(offset, len)?;
        // SAFETY: in bounds of the peer's mapping (same size as ours, checked at bootstrap).
        Ok(unsafe { m.base().add(offset) })
    }

    /// Where group-local rank `peer`'s heap is mapped in this process and the offsets
    /// `lo..hi` that [`Group::local_ptr`] (this rank) and [`Group::peer_ptr`] accept: a range
    /// inside is `base + offset`. `None` where `peer_ptr` fails whatever the range (outside
    /// the group, another node). The mappings live as long as the group.
    pub(crate) fn heap_span(&self, peer: usize) -> Option<(*mut u8, usize, usize)> {
        let base = if peer == self.rank() {
            self.shared.heap.base()
        } else {
            self.mapping(peer).ok()?.base()
        };
        Some((base, USER_BASE, self.shared.heap.size()))
    }

    /// Copies `len` bytes from this rank's heap at `src_offset` to `peer`'s heap at `dst_offset`.
    pub fn put(
        &self,
        peer: usize,
        dst_offset: usize,
        src_offset: usize,
        len: usize,
    ) -> Result<(), RuntimeError> {
        let dst = self.peer_ptr(peer, dst_offset, len)?;
        let src = self.local_ptr(src_offset, len)?;
        // SAFETY: both ranges checked; `copy` tolerates overlap (put to self).
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Copies the symmetric allocation `src` of this rank into `dst` on `peer`; the two must
    /// have the same length ([`RuntimeError::SizeMismatch`] otherwise).
    pub fn put_alloc(
        &self,
        peer: usize,
        dst: &HeapAlloc,
        src: &HeapAlloc,
    ) -> Result<(), RuntimeError> {
        same_len("put destination vs source", dst, src)?;
        self.put(peer, dst.offset, src.offset, src.len)
    }

    /// Copies the allocation `src` on `peer` into `dst` of this rank (same lengths required).
    pub fn get_alloc(
        &self,
        peer: usize,
        src: &HeapAlloc,
        dst: &HeapAlloc,
    ) -> Result<(), RuntimeError> {
        same_len("get destination vs source", dst, src)?;
        self.get(peer, src.offset, dst.offset, src.len)
    }

    /// Copies `src` (any memory) to `peer`'s heap at `dst_offset`.
    pub fn put_bytes(
        &self,
        peer: usize,
        dst_offset: usize,
        src: &[u8],
    ) -> Result<(), RuntimeError> {
        let dst = self.peer_ptr(peer, dst_offset, src.len())?;
        // SAFETY: destination checked; `copy` tolerates a source inside our own heap.
        unsafe { std::ptr::copy(src.as_ptr(), dst, src.len()) };
        Ok(())
    }

    /// Copies `len` bytes from `peer`'s heap at `src_offset` to this rank's heap at `dst_offset`.
    pub fn get(
        &self,
        peer: usize,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<(), RuntimeError> {
        let src = self.peer_ptr(peer, src_offset, len)?;
        let dst = self.local_ptr(dst_offset, len)?;
        // SAFETY: both ranges checked.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Copies `dst.len()` bytes from `peer`'s heap at `src_offset` into `dst`.
    pub fn get_bytes(
        &self,
        peer: usize,
        src_offset: usize,
        dst: &mut [u8],
    ) -> Result<(), RuntimeError> {
        let src = self.peer_ptr(peer, src_offset, dst.len())?;
        // SAFETY: source checked.
        unsafe { std::ptr::copy(src, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Updates signal slot `slot` on `peer` (SET stores `value`, ADD adds it) with release
    /// ordering: everything this rank wrote before is visible to a rank that observes the update.
    pub fn signal(
        &self,
        peer: usize,
        slot: usize,
        mode: SignalMode,
        value: u64,
    ) -> Result<(), RuntimeError> {
        self.slot_line(peer, slot)?.update(mode, value, self.rank());
        Ok(())
    }

    /// Alias of [`Group::signal`] under the RFC's name.
    pub fn signal_op(
        &self,
        peer: usize,
        slot: usize,
        mode: SignalMode,
        value: u64,
    ) -> Result<(), RuntimeError> {
        self.signal(peer, slot, mode, value)
    }

    /// [`Group::put`] then [`Group::signal`]: the data is visible before the signal.
    #[allow(clippy::too_many_arguments)]
    pub fn put_with_signal(
        &self,
        peer: usize,
        dst_offset: usize,
        src_offset: usize,
        len: usize,
        slot: usize,
        mode: SignalMode,
        value: u64,
    ) -> Result<(), RuntimeError> {
        let line = self.slot_line(peer, slot)?;
        self.put(peer, dst_offset, src_offset, len)?;
        line.update(mode, value, self.rank());
        Ok(())
    }

    /// [`Group::put_bytes`] then [`Group::signal`]: the data is visible before the signal.
    pub fn put_bytes_with_signal(
        &self,
        peer: usize,
        dst_offset: usize,
        src: &[u8],
        slot: usize,
        mode: SignalMode,
        value: u64,
    ) -> Result<(), RuntimeError> {
        let line = self.slot_line(peer, slot)?;
        self.put_bytes(peer, dst_offset, src)?;
        line.update(mode, value, self.rank());
        Ok(())
    }

    /// Alias of [`Group::wait`] under the RFC's name.
    pub fn wait_for_signal(
        &self,
        slot: usize,
        cmp: symsched_plan::Cmp,
        target: u64,
        ctx: &crate::WaitContext,
    ) -> Result<(), RuntimeError> {
        self.wait(slot, cmp, target, ctx)
    }
}

/// Whole-allocation copies need equal lengths: `dst` is what the caller expects to fill.
fn same_len(what: &str, dst: &HeapAlloc, src: &HeapAlloc) -> Result<(), RuntimeError> {
    if dst.len != src.len {
        return Err(RuntimeError::SizeMismatch {
            what: what.into(),
            expected: dst.len as u64,
            found: src.len as u64,
        });
    }
    Ok(())
}
