//! The C ABI between a generated kernel and the runtime that calls it.
//!
//! A kernel is one function per (plan, rank, dtypes, reduce op):
//!
//! ```c
//! uint32_t kernel(symsched_jit_args *args);   // returns args->status.code
//! ```
//!
//! The runtime fills a [`KernelArgs`] per launch: its own context pointer (opaque to the kernel,
//! handed back to every intrinsic), the [`Intrinsics`] table, the size variables in
//! `plan.size_vars` order, the alltoallv count matrix (or null), the launch epoch, the
//! streaming threshold, the signal counters for a wait's first look, and the buffers' heap
//! offsets and the ranks' heap mappings for the kernel's own addressing (each may be null). The runtime has copied staged inputs in before the call. The kernel
//! computes every extent from those at entry, then — in the *launch* scope
//! ([`crate::lower::KernelScope::Launch`]) — sends the plan's entry signals (entry credits),
//! runs the rank's steps, scales `avg` outputs, calls [`Intrinsics::stage_out`] (the runtime
//! copies staged outputs out there), sends the plan's exit signals (exit credits); in the
//! *steps* scope ([`crate::lower::KernelScope::Steps`], for an executor that does the entry,
//! `avg`, stage-out and exit itself, as for its other backends) it runs the steps only. It
//! returns [`STATUS_OK`]; on failure it stores the code, the failing step id and, for a
//! too-small region, the two lengths in [`KernelArgs::status`] and returns the code. The
//! runtime turns a status into the interpreter's `ExecError` ([`Status::decode`] names the
//! cases).
//!
//! **Intrinsics** do what needs the runtime: symmetric addresses the kernel cannot form from a
//! [`KernelArgs::offsets`] and [`KernelArgs::heaps`] (bounds-checked, so the kernel never forms an address outside a binding), signals, waits (bounded, with dead-peer detection
//! and the interpreter's timeout message: the kernel passes the step id), matmul and host
//! collectives; non-temporal copies and step trace events. An intrinsic that fails keeps its error in the runtime's context and returns
//! non-zero (null for [`Intrinsics::region`]); the kernel then stops with [`STATUS_INTRINSIC`].
//! Data itself is moved by the kernel, inline, through the addresses it formed from a view or
//! `region` returned (a peer's for puts and gets), so a put is ordinary stores into the peer's mapping, ordered
//! before the put's signal because `signal` is an opaque call that publishes with release
//! semantics.
//!
//! Every multi-byte integer is native-endian; pointers are the host's. Field offsets are what
//! `#[repr(C)]` gives; the generated code reads them with [`std::mem::offset_of!`] values, so the
//! two cannot drift apart.

use std::ffi::c_void;

/// Status: the launch completed.
pub const STATUS_OK: u32 = 0;
/// Status: an intrinsic failed; the runtime's context holds the error.
pub const STATUS_INTRINSIC: u32 = 1;
/// Status: step `step` moves `need` elements into (or out of) a region of `have`.
pub const STATUS_REGION_TOO_SMALL: u32 = 2;
/// Status: evaluating an extent overflowed 64 bits (or divided by zero).
pub const STATUS_SIZE_OVERFLOW: u32 = 3;
/// Status: the plan has alltoallv count extents but `counts` was null.
pub const STATUS_MISSING_COUNTS: u32 = 4;

/// Step id passed and reported outside any step: the entry signals, the `avg` pass,
/// stage-out and the exit signals.
pub const NO_STEP: u32 = u32::MAX;

/// Signal modes as the kernel passes them to [`Intrinsics::signal`].
pub const SIGNAL_ADD: u32 = 0;
pub const SIGNAL_SET: u32 = 1;

/// What the kernel reports.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStatus {
    pub code: u32,
    /// Plan step id of the failing step, or [`NO_STEP`].
    pub step: u32,
    /// For [`STATUS_REGION_TOO_SMALL`]: elements the step moves.
    pub need: u64,
    /// For [`STATUS_REGION_TOO_SMALL`]: elements the region holds.
    pub have: u64,
}

/// A kernel's status, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// An intrinsic failed during step `step`; the runtime has the error.
    Intrinsic {
        step: u32,
    },
    /// The interpreter's `step {step} moves {need} elements into a region of {have}`.
    RegionTooSmall {
        step: u32,
        need: u64,
        have: u64,
    },
    /// The interpreter's `PlanError::SizeOverflow`.
    SizeOverflow {
        step: u32,
    },
    /// The interpreter's `ExecError::MissingCounts`.
    MissingCounts,
    /// A code this build does not know (a kernel from another version).
    Unknown {
        code: u32,
        step: u32,
    },
}

impl Status {
    pub fn decode(s: &KernelStatus) -> Status {
        match s.code {
            STATUS_OK => Status::Ok,
            STATUS_INTRINSIC => Status::Intrinsic { step: s.step },
            STATUS_REGION_TOO_SMALL => Status::RegionTooSmall {
                step: s.step,
                need: s.need,
                have: s.have,
            },
            STATUS_SIZE_OVERFLOW => Status::SizeOverflow { step: s.step },
            STATUS_MISSING_COUNTS => Status::MissingCounts,
            code => Status::Unknown { code, step: s.step },
        }
    }
}

/// `region(ctx, rank, buffer, byte_offset, byte_len)`: the address of `byte_len` bytes at
/// `byte_offset` of `buffer` on `rank` (the caller's own copy when `rank` is the kernel's
/// rank), or null when the range is outside the binding or the rank outside the group.
pub type RegionFn = unsafe extern "C" fn(*mut c_void, u32, u32, u64, u64) -> *mut u8;
/// `signal(ctx, peer, slot, mode, value, step)`: apply a signal update to `peer`'s copy of
/// plan slot `slot` (mode [`SIGNAL_ADD`] adds `value`, [`SIGNAL_SET`] stores it; the kernel has
/// already applied the epoch rule). Release: every store the kernel made before the call is
/// visible to whoever observes the update. Returns 0 or non-zero on error.
pub type SignalFn = unsafe extern "C" fn(*mut c_void, u32, u32, u32, u64, u32) -> i32;
/// `wait(ctx, slot, cmp, target, step)`: block until this rank's counter of plan slot `slot`
/// compares true (`cmp` is the CANN code, `Cmp::code`) against `target` (already
/// `target.at(epoch)`), with acquire semantics; the runtime bounds the wait and builds its
/// timeout message from `step` (slot name, signallers). Returns 0 or non-zero on error. When
/// [`KernelArgs::signals`] is set the kernel loads the counter itself first (acquire) and calls
/// `wait` only when the comparison fails, so a satisfied wait costs one load.
pub type WaitFn = unsafe extern "C" fn(*mut c_void, u32, u32, u64, u32) -> i32;
/// `matmul(ctx, step, c, a, b, m, k, n)`: `c = a × b` for step `step` (row-major, dtypes from
/// the plan's buffers and the launch types). Returns 0 or non-zero on error.
pub type MatmulFn =
    unsafe extern "C" fn(*mut c_void, u32, *mut u8, *const u8, *const u8, u64, u64, u64) -> i32;
/// `host_coll(ctx, step, ordinal, data, elems)`: run host collective step `step` (op and
/// members from the plan; `ordinal` is its position among this rank's host collectives) in
/// place on `elems` elements at `data`. Returns 0 or non-zero on error.
pub type HostCollFn = unsafe extern "C" fn(*mut c_void, u32, u32, *mut u8, u64) -> i32;
/// `stage_out(ctx)`: called once after the last step and the `avg` pass, before the exit
/// signals: the runtime copies staged outputs to the caller's memory here. Returns 0 or
/// non-zero on error.
pub type StageOutFn = unsafe extern "C" fn(*mut c_void) -> i32;

/// `copy_nt(ctx, dst, src, bytes)`: copy `bytes` from `src` to `dst` (disjoint) with
/// non-temporal stores, fenced so that a later signal is seen after the data. The kernel calls
/// it for passes of plain moves into buffers no step reads, when every move is at least
/// [`KernelArgs::nt_min_bytes`] long (the interpreter's streaming rule).
pub type CopyNtFn = unsafe extern "C" fn(*mut c_void, *mut u8, *const u8, u64);
/// `trace(ctx, step, flags)`: step `step` has run (flags [`TRACE_LAST`]: the last step of what
/// ran together — a fused pass names each of its steps, then sets it on the last; the runtime
/// times each group from the previous one's end). [`TRACE_SIGNAL`]: the signal of a fused put
/// went out. Only kernels lowered with [`crate::LowerOptions::trace`] call it.
pub type TraceFn = unsafe extern "C" fn(*mut c_void, u32, u32);

/// `agree(ctx)`: the launch's speculative prefix has run (a kernel lowered with
/// [`crate::LowerOptions::check_after`]); the runtime checks the ranks' agreement on this
/// launch now, and from here on waits for real. Returns 0, or non-zero when the launch is
/// refused or the check failed (the kernel stops before any later step).
pub type AgreeFn = unsafe extern "C" fn(*mut c_void) -> i32;

/// [`TraceFn`] flag: the last step of an action.
pub const TRACE_LAST: u32 = 1;
/// [`TraceFn`] flag: the step is a put whose data ran in an earlier pass; now its signal went
/// out.
pub const TRACE_SIGNAL: u32 = 2;

/// The table of runtime functions a kernel calls.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Intrinsics {
    pub region: RegionFn,
    pub signal: SignalFn,
    pub wait: WaitFn,
    pub matmul: MatmulFn,
    pub host_coll: HostCollFn,
    pub stage_out: StageOutFn,
    pub copy_nt: CopyNtFn,
    pub trace: TraceFn,
    pub agree: AgreeFn,
}

/// Everything one launch passes to a kernel.
#[repr(C)]
pub struct KernelArgs {
    /// The runtime's context, handed back to every intrinsic.
    pub ctx: *mut c_void,
    pub intrinsics: *const Intrinsics,
    /// The size variables, in `plan.size_vars` order.
    pub sizes: *const u64,
    /// `counts[sender * P + receiver]` for plans with alltoallv count extents, else null.
    pub counts: *const u64,
    /// Launches of this plan on this group instance before this one.
    pub epoch: u64,
    /// Smallest plain move, in bytes, that goes through [`Intrinsics::copy_nt`]
    /// ([`NT_NEVER`]: none).
    pub nt_min_bytes: u64,
    /// This rank's counter of plan slot 0, the others at [`KernelArgs::signal_stride`] bytes
    /// apart, for a wait's first look (an acquire load, then the `wait` intrinsic only when
    /// the comparison fails); null: every wait calls the intrinsic.
    pub signals: *const u64,
    /// Bytes between the counters of consecutive plan slots (when `signals` is not null).
    pub signal_stride: u64,
    /// Per plan buffer: its symmetric byte offset in the heap this launch ([`NOT_ON_HEAP`]:
    /// somewhere else, as a role used in place from private memory). With [`KernelArgs::heaps`]
    /// the kernel forms a heap address itself; either null: every address through
    /// [`Intrinsics::region`].
    pub offsets: *const u64,
    /// Per group rank: where its heap is mapped in this process ([`HeapView`]).
    pub heaps: *const HeapView,
    /// Written by the kernel.
    pub status: KernelStatus,
}

/// [`KernelArgs::offsets`]: the buffer is not in the heap this launch.
pub const NOT_ON_HEAP: u64 = u64::MAX;

/// One entry of [`KernelArgs::heaps`]: a rank's heap as mapped in this process.
///
/// Byte `off` of a buffer at heap offset `o` ([`KernelArgs::offsets`]) is `base + o + off`
/// when `base` is not null and `lo <= o` and `o + off + len <= hi` for the `len` bytes used;
/// anything else (a buffer not on the heap, a heap not mapped here, a range outside) goes
/// through [`Intrinsics::region`], which gives the address or the error. The runtime
/// describes only what `region` would accept, so the two give the same address.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapView {
    pub base: *mut u8,
    pub lo: u64,
    pub hi: u64,
}

impl HeapView {
    /// Not mapped here: the kernel asks [`Intrinsics::region`].
    pub const NONE: HeapView = HeapView {
        base: std::ptr::null_mut(),
        lo: 0,
        hi: 0,
    };

    /// The address of `len` bytes at byte `off` of a buffer at heap offset `o`, when inside
    /// this mapping: the rule a kernel applies in its own code, for a runtime that applies it
    /// for kernels that call [`Intrinsics::region`] for every address.
    #[inline]
    pub fn address(&self, o: u64, off: u64, len: u64) -> Option<*mut u8> {
        let fits = !self.base.is_null()
            && self.lo <= o
            && o <= self.hi
            && off <= self.hi - o
            && len <= self.hi - o - off;
        // In bounds of the mapping the runtime described (checked just above).
        fits.then(|| self.base.wrapping_add((o + off) as usize))
    }
}

/// [`KernelArgs::nt_min_bytes`]: never stream.
pub const NT_NEVER: u64 = u64::MAX;

/// The kernel entry point.
pub type KernelFn = unsafe extern "C" fn(*mut KernelArgs) -> u32;

/// Byte offsets the generated code reads (one place, derived from the Rust layout).
pub(crate) mod offsets {
    use super::{HeapView, Intrinsics, KernelArgs, KernelStatus};
    use std::mem::offset_of;

    pub const CTX: u64 = offset_of!(KernelArgs, ctx) as u64;
    pub const INTRINSICS: u64 = offset_of!(KernelArgs, intrinsics) as u64;
    pub const SIZES: u64 = offset_of!(KernelArgs, sizes) as u64;
    pub const COUNTS: u64 = offset_of!(KernelArgs, counts) as u64;
    pub const EPOCH: u64 = offset_of!(KernelArgs, epoch) as u64;
    pub const NT_MIN_BYTES: u64 = offset_of!(KernelArgs, nt_min_bytes) as u64;
    pub const SIGNALS: u64 = offset_of!(KernelArgs, signals) as u64;
    pub const SIGNAL_STRIDE: u64 = offset_of!(KernelArgs, signal_stride) as u64;
    pub const OFFSETS: u64 = offset_of!(KernelArgs, offsets) as u64;
    pub const HEAPS: u64 = offset_of!(KernelArgs, heaps) as u64;
    pub const HEAP_SIZE: u64 = size_of::<HeapView>() as u64;
    pub const HEAP_BASE: u64 = offset_of!(HeapView, base) as u64;
    pub const HEAP_LO: u64 = offset_of!(HeapView, lo) as u64;
    pub const HEAP_HI: u64 = offset_of!(HeapView, hi) as u64;
    pub const STATUS_CODE: u64 =
        (offset_of!(KernelArgs, status) + offset_of!(KernelStatus, code)) as u64;
    pub const STATUS_STEP: u64 =
        (offset_of!(KernelArgs, status) + offset_of!(KernelStatus, step)) as u64;
    pub const STATUS_NEED: u64 =
        (offset_of!(KernelArgs, status) + offset_of!(KernelStatus, need)) as u64;
    pub const STATUS_HAVE: u64 =
        (offset_of!(KernelArgs, status) + offset_of!(KernelStatus, have)) as u64;

    pub const REGION: u64 = offset_of!(Intrinsics, region) as u64;
    pub const SIGNAL: u64 = offset_of!(Intrinsics, signal) as u64;
    pub const WAIT: u64 = offset_of!(Intrinsics, wait) as u64;
    pub const MATMUL: u64 = offset_of!(Intrinsics, matmul) as u64;
    pub const HOST_COLL: u64 = offset_of!(Intrinsics, host_coll) as u64;
    pub const STAGE_OUT: u64 = offset_of!(Intrinsics, stage_out) as u64;
    pub const COPY_NT: u64 = offset_of!(Intrinsics, copy_nt) as u64;
    pub const TRACE: u64 = offset_of!(Intrinsics, trace) as u64;
    pub const AGREE: u64 = offset_of!(Intrinsics, agree) as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_decode() {
        let mut s = KernelStatus {
            code: STATUS_REGION_TOO_SMALL,
            step: 7,
            need: 10,
            have: 3,
        };
        assert_eq!(
            Status::decode(&s),
            Status::RegionTooSmall {
                step: 7,
                need: 10,
                have: 3
            }
        );
        s.code = 99;
        assert_eq!(Status::decode(&s), Status::Unknown { code: 99, step: 7 });
    }

    #[test]
    fn layout_is_pointer_sized_fields_then_status() {
        // The generated code addresses fields by these offsets; a 64-bit host lays them out
        // without padding.
        assert_eq!(offsets::CTX, 0);
        assert_eq!(offsets::EPOCH, 32);
        assert_eq!(offsets::NT_MIN_BYTES, 40);
        assert_eq!(offsets::SIGNALS, 48);
        assert_eq!(offsets::SIGNAL_STRIDE, 56);
        assert_eq!(offsets::OFFSETS, 64);
        assert_eq!(offsets::HEAPS, 72);
        assert_eq!(offsets::STATUS_CODE, 80);
        assert_eq!(offsets::STATUS_HAVE, 96);
        assert_eq!(
            (
                offsets::HEAP_SIZE,
                offsets::HEAP_BASE,
                offsets::HEAP_LO,
                offsets::HEAP_HI
            ),
            (24, 0, 8, 16)
        );
        assert_eq!(offsets::STAGE_OUT, 40);
        assert_eq!(offsets::TRACE, 56);
        assert_eq!(offsets::AGREE, 64);
    }

    #[test]
    fn heap_view_addresses_exactly_its_bounds_and_never_wraps() {
        let mut heap = [0u8; 64];
        let base = heap.as_mut_ptr();
        let v = HeapView {
            base,
            lo: 16,
            hi: 48,
        };
        let at = |o: u64, off: u64, len: u64| v.address(o, off, len).map(|p| p as usize);
        let b = base as usize;
        // Inside, up to the last byte of the view.
        assert_eq!(at(16, 0, 32), Some(b + 16));
        assert_eq!(at(20, 4, 24), Some(b + 24));
        assert_eq!(at(48, 0, 0), Some(b + 48));
        // One byte past either bound.
        assert_eq!(at(15, 0, 1), None);
        assert_eq!(at(16, 0, 33), None);
        assert_eq!(at(20, 4, 25), None);
        assert_eq!(at(49, 0, 0), None);
        // Sums that would wrap to a small number.
        assert_eq!(at(NOT_ON_HEAP, 0, 0), None);
        assert_eq!(at(16, u64::MAX, 2), None);
        assert_eq!(at(16, 1, u64::MAX), None);
        assert_eq!(at(16, u64::MAX - 15, 32), None);
        // Not mapped here.
        assert_eq!(HeapView::NONE.address(0, 0, 0), None);
    }
}
