//! The part of the C device table every launcher fills in the same way: peer addresses by
//! offset into equally laid out heap segments, int32 signals as atomics on those segments, and
//! bounded waits. A launcher describes its segments with [`HeapView`] and takes the callbacks
//! from [`device_table`]; only the barrier and the host-collective hook differ between them.

use super::device::{cmp_i32, SimDevice, DEVICE_ABI};
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// One rank's view of the symmetric heap during a launch.
pub(crate) trait HeapView {
    /// Base address of every rank's segment, by PE.
    fn bases(&self) -> &[usize];
    /// Bytes of each segment the launch may address.
    fn seg_len(&self) -> usize;
    /// This rank's PE.
    fn me(&self) -> usize;
    /// Whether a wait should give up now (deadline passed, or the run was aborted).
    fn give_up(&self) -> bool;
    /// A core of this rank failed: make this rank's and its peers' waits give up.
    fn abort(&self);
}

/// The device table for the rank whose context is `ctx` (which must outlive every call
/// through the table).
pub(crate) fn device_table<C: HeapView>(
    ctx: &C,
    barrier: unsafe extern "C" fn(*mut c_void) -> i32,
    host_coll: Option<super::device::HostCollFn>,
) -> SimDevice {
    SimDevice {
        abi_version: DEVICE_ABI,
        ctx: ctx as *const C as *mut c_void,
        my_pe: ctx.me() as i32,
        n_pes: ctx.bases().len() as i32,
        peer_ptr: peer_ptr::<C>,
        addr_pe: addr_pe::<C>,
        signal_op: signal_op::<C>,
        signal_wait_until: signal_wait_until::<C>,
        quiet,
        barrier,
        host_coll,
        abort: Some(abort::<C>),
    }
}

unsafe extern "C" fn abort<C: HeapView>(ctx: *mut c_void) {
    // SAFETY: ctx is the `C` that `device_table` put in the table, alive for the launch.
    let c = unsafe { &*(ctx as *const C) };
    c.abort();
}

unsafe extern "C" fn peer_ptr<C: HeapView>(
    ctx: *mut c_void,
    local: *const c_void,
    pe: i32,
) -> *mut c_void {
    // SAFETY: ctx is the `C` that `device_table` put in the table, alive for the launch.
    let c = unsafe { &*(ctx as *const C) };
    let bases = c.bases();
    let off = (local as usize).wrapping_sub(bases[c.me()]);
    if off >= c.seg_len() || pe < 0 || pe as usize >= bases.len() {
        return std::ptr::null_mut();
    }
    (bases[pe as usize] + off) as *mut c_void
}

/// The PE whose segment holds `[addr, addr + len)`; -2 when it starts in a segment but runs
/// past its end, -1 when it is in none.
unsafe extern "C" fn addr_pe<C: HeapView>(ctx: *mut c_void, addr: *const c_void, len: u64) -> i32 {
    // SAFETY: as in `peer_ptr`.
    let c = unsafe { &*(ctx as *const C) };
    let (a, n) = (addr as usize, c.seg_len());
    for (pe, &b) in c.bases().iter().enumerate() {
        if a >= b && a < b + n {
            return if a.saturating_add(len as usize) <= b + n {
                pe as i32
            } else {
                -2
            };
        }
    }
    -1
}

unsafe extern "C" fn signal_op<C: HeapView>(
    ctx: *mut c_void,
    local: *mut i32,
    value: i32,
    op: i32,
    pe: i32,
) {
    // SAFETY: the simulation validated `local` as a symmetric address and `pe` before calling.
    let p = unsafe { peer_ptr::<C>(ctx, local as *const c_void, pe) } as *mut i32;
    if p.is_null() {
        return;
    }
    // SAFETY: p is a 4-byte aligned int32 inside a live segment, accessed only atomically.
    let a = unsafe { AtomicI32::from_ptr(p) };
    if op == 0 {
        a.store(value, Ordering::SeqCst);
    } else {
        a.fetch_add(value, Ordering::SeqCst);
    }
}

unsafe extern "C" fn signal_wait_until<C: HeapView>(
    ctx: *mut c_void,
    local: *mut i32,
    cmp: i32,
    value: i32,
    observed: *mut i32,
) -> i32 {
    // SAFETY: as in `peer_ptr`; `local` is this rank's signal word, `observed` a valid
    // out-pointer from the simulation.
    let c = unsafe { &*(ctx as *const C) };
    let a = unsafe { AtomicI32::from_ptr(local) };
    let mut spins = 0u32;
    loop {
        let v = a.load(Ordering::SeqCst);
        // SAFETY: see above.
        unsafe { *observed = v };
        if cmp_i32(v, cmp, value) {
            return 0;
        }
        if c.give_up() {
            return 1;
        }
        // Spin briefly, then yield, then sleep: peers are threads or processes on few cores.
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 4096 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

unsafe extern "C" fn quiet(_ctx: *mut c_void) {
    std::sync::atomic::fence(Ordering::SeqCst);
}
