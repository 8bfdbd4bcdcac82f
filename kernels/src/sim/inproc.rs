//! In-process launcher: every rank is a thread with its own heap segment; the device table is
//! implemented with atomics on those segments. Waits are bounded by a deadline, and one rank's
//! failure aborts the others' waits, so a broken kernel fails fast instead of hanging.

use super::device::{cmp_i32, status, LaunchArgs, SimDevice, DEVICE_ABI};
use super::heap::{HeapLayout, SIGNAL_LINE};
use crate::sim_build::SimKernel;
use crate::KernelError;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use symsched_plan::{LaunchSizes, Plan};

/// Contents of one rank's memory before or after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankState {
    /// One byte vector per plan buffer (at most the layout's size; shorter is zero-filled).
    pub buffers: Vec<Vec<u8>>,
    /// One int32 word per signal slot.
    pub signals: Vec<i32>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Launch epochs to run back to back on every rank (no barrier in between).
    pub epochs: Range<u64>,
    /// Deadline for the whole run; waits give up after it.
    pub timeout: Duration,
    /// Whether kernels send their launch credits (needed for back-to-back launches).
    pub send_exit_signals: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            epochs: 0..1,
            timeout: Duration::from_secs(60),
            send_exit_signals: true,
        }
    }
}

struct Segment {
    ptr: *mut u8,
    layout: Layout,
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: allocated in `Heap::new` with this layout and not freed elsewhere.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

struct Heap {
    segs: Vec<Segment>,
    len: usize,
}

impl Heap {
    fn new(p: usize, len: usize) -> Result<Heap, KernelError> {
        let layout = Layout::from_size_align(len.max(64), 64)
            .map_err(|e| KernelError::Run(e.to_string()))?;
        let mut segs = Vec::with_capacity(p);
        for _ in 0..p {
            // SAFETY: the layout has non-zero size.
            let ptr = unsafe { alloc_zeroed(layout) };
            if ptr.is_null() {
                return Err(KernelError::Run(format!(
                    "cannot allocate {len} bytes of heap"
                )));
            }
            segs.push(Segment { ptr, layout });
        }
        Ok(Heap { segs, len })
    }
}

struct Shared {
    bases: Vec<usize>,
    len: usize,
    abort: AtomicBool,
    deadline: Instant,
    barrier_count: AtomicU64,
    n: usize,
}

struct Ctx<'a> {
    me: usize,
    shared: &'a Shared,
    barrier_gen: std::cell::Cell<u64>,
}

impl Shared {
    fn owner(&self, addr: usize, len: usize) -> i32 {
        for (pe, &b) in self.bases.iter().enumerate() {
            if addr >= b && addr < b + self.len {
                return if addr + len <= b + self.len {
                    pe as i32
                } else {
                    -2
                };
            }
        }
        -1
    }
}

unsafe extern "C" fn peer_ptr(ctx: *mut c_void, local: *const c_void, pe: i32) -> *mut c_void {
    // SAFETY: ctx is the `Ctx` this module put in the table for this thread.
    let c = unsafe { &*(ctx as *const Ctx) };
    let s = c.shared;
    let off = (local as usize).wrapping_sub(s.bases[c.me]);
    if off >= s.len || pe < 0 || pe as usize >= s.n {
        return std::ptr::null_mut();
    }
    (s.bases[pe as usize] + off) as *mut c_void
}

unsafe extern "C" fn addr_pe(ctx: *mut c_void, addr: *const c_void, len: u64) -> i32 {
    // SAFETY: as in `peer_ptr`.
    let c = unsafe { &*(ctx as *const Ctx) };
    c.shared.owner(addr as usize, len as usize)
}

unsafe extern "C" fn signal_op(ctx: *mut c_void, local: *mut i32, value: i32, op: i32, pe: i32) {
    // SAFETY: the simulation validated `local` as a symmetric address and `pe` before calling.
    let p = unsafe { peer_ptr(ctx, local as *const c_void, pe) } as *mut i32;
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

unsafe extern "C" fn signal_wait_until(
    ctx: *mut c_void,
    local: *mut i32,
    cmp: i32,
    value: i32,
    observed: *mut i32,
) -> i32 {
    // SAFETY: as in `peer_ptr`; `local` is this rank's signal word, `observed` a valid out-pointer.
    let c = unsafe { &*(ctx as *const Ctx) };
    let a = unsafe { AtomicI32::from_ptr(local) };
    let mut spins = 0u32;
    loop {
        let v = a.load(Ordering::SeqCst);
        // SAFETY: see above.
        unsafe { *observed = v };
        if cmp_i32(v, cmp, value) {
            return 0;
        }
        if c.shared.abort.load(Ordering::Relaxed) || Instant::now() > c.shared.deadline {
            return 1;
        }
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

unsafe extern "C" fn barrier(ctx: *mut c_void) -> i32 {
    // SAFETY: as in `peer_ptr`.
    let c = unsafe { &*(ctx as *const Ctx) };
    let s = c.shared;
    let gen = c.barrier_gen.get() + 1;
    c.barrier_gen.set(gen);
    s.barrier_count.fetch_add(1, Ordering::SeqCst);
    let goal = gen * s.n as u64;
    while s.barrier_count.load(Ordering::SeqCst) < goal {
        if s.abort.load(Ordering::Relaxed) || Instant::now() > s.deadline {
            return 1;
        }
        std::thread::yield_now();
    }
    0
}

/// Run `kernel` (generated from `plan`) on `init.len() == P` ranks for the epochs in `cfg`,
/// starting from `init`, and return every rank's memory afterwards.
pub fn run(
    kernel: &SimKernel,
    plan: &Plan,
    layout: &HeapLayout,
    sizes: &LaunchSizes,
    init: &[RankState],
    cfg: &RunConfig,
) -> Result<Vec<RankState>, KernelError> {
    let p = plan.group_size as usize;
    if init.len() != p {
        return Err(KernelError::Run(format!(
            "{} initial states for P = {p}",
            init.len()
        )));
    }
    let mut size_vals = Vec::with_capacity(plan.size_vars.len());
    for v in &plan.size_vars {
        size_vals.push(
            *sizes.vars.get(&v.name).ok_or_else(|| {
                KernelError::Run(format!("size variable `{}` has no value", v.name))
            })?,
        );
    }
    size_vals.push(0);
    let counts: Option<Vec<u64>> = sizes
        .counts
        .as_ref()
        .map(|m| m.iter().flatten().copied().collect());
    if let Some(c) = &counts {
        if c.len() != p * p {
            return Err(KernelError::Run(format!(
                "counts matrix has {} entries for P = {p}",
                c.len()
            )));
        }
    }
    let heap = Heap::new(p, layout.total)?;
    for (r, st) in init.iter().enumerate() {
        let base = heap.segs[r].ptr;
        for (i, bytes) in st.buffers.iter().enumerate() {
            if i >= layout.buf_bytes.len() || bytes.len() > layout.buf_bytes[i] {
                return Err(KernelError::Run(format!(
                    "rank {r} buffer {i}: {} bytes do not fit",
                    bytes.len()
                )));
            }
            // SAFETY: the destination range lies inside the segment (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    base.add(layout.buf_offset[i]),
                    bytes.len(),
                )
            };
        }
        for (s, v) in st.signals.iter().enumerate().take(layout.n_signals) {
            // SAFETY: signal lines are inside the segment and 4-byte aligned.
            unsafe { *(base.add(layout.signal_offset + s * SIGNAL_LINE) as *mut i32) = *v };
        }
    }
    let shared = Shared {
        bases: heap.segs.iter().map(|s| s.ptr as usize).collect(),
        len: heap.len,
        abort: AtomicBool::new(false),
        deadline: Instant::now() + cfg.timeout,
        barrier_count: AtomicU64::new(0),
        n: p,
    };
    let results: Vec<Result<(), KernelError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p)
            .map(|r| {
                let shared = &shared;
                let size_vals = &size_vals;
                let counts = &counts;
                std::thread::Builder::new()
                    .name(format!("sim-rank-{r}"))
                    .spawn_scoped(scope, move || {
                        let ctx = Ctx {
                            me: r,
                            shared,
                            barrier_gen: std::cell::Cell::new(0),
                        };
                        let dev = SimDevice {
                            abi_version: DEVICE_ABI,
                            ctx: &ctx as *const Ctx as *mut c_void,
                            my_pe: r as i32,
                            n_pes: p as i32,
                            peer_ptr,
                            addr_pe,
                            signal_op,
                            signal_wait_until,
                            quiet,
                            barrier,
                        };
                        let base = shared.bases[r] as *mut u8;
                        // SAFETY: offsets come from the layout the heap was sized by.
                        let bufs: Vec<*mut u8> = layout
                            .buf_offset
                            .iter()
                            .map(|&o| unsafe { base.add(o) })
                            .collect();
                        for epoch in cfg.epochs.clone() {
                            let mut args = LaunchArgs {
                                abi_version: DEVICE_ABI,
                                n_buffers: bufs.len() as u32,
                                buffers: bufs.as_ptr(),
                                // SAFETY: inside the segment.
                                signals: unsafe { base.add(layout.signal_offset) },
                                sizes: size_vals.as_ptr(),
                                counts: counts.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                                epoch,
                                send_exit_signals: cfg.send_exit_signals as i32,
                                err_msg: std::ptr::null_mut(),
                                err_cap: 0,
                            };
                            // SAFETY: the device table and arguments describe the live heap.
                            let (code, message) = unsafe { kernel.launch(&dev, &mut args) };
                            if code != status::OK {
                                shared.abort.store(true, Ordering::SeqCst);
                                return Err(KernelError::Launch {
                                    rank: r as u32,
                                    code,
                                    message: format!("{message} (epoch {epoch})"),
                                });
                            }
                        }
                        Ok(())
                    })
                    .expect("spawning a simulation thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(KernelError::Run("a rank thread panicked".into())))
            })
            .collect()
    });
    // Report the root cause: a rank's own misuse before the waits it made others give up.
    let mut first_wait: Option<KernelError> = None;
    for r in results {
        match r {
            Ok(()) => {}
            Err(
                e @ KernelError::Launch {
                    code: status::WAIT_FAILED,
                    ..
                },
            ) => {
                first_wait.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(e) = first_wait {
        return Err(e);
    }
    let mut out = Vec::with_capacity(p);
    for seg in &heap.segs {
        let mut buffers = Vec::with_capacity(layout.buf_offset.len());
        for (i, &o) in layout.buf_offset.iter().enumerate() {
            // SAFETY: the range lies inside the segment; all writer threads have joined.
            buffers.push(
                unsafe { std::slice::from_raw_parts(seg.ptr.add(o), layout.buf_bytes[i]) }.to_vec(),
            );
        }
        let signals = (0..layout.n_signals)
            // SAFETY: as above.
            .map(|s| unsafe {
                *(seg.ptr.add(layout.signal_offset + s * SIGNAL_LINE) as *const i32)
            })
            .collect();
        out.push(RankState { buffers, signals });
    }
    Ok(out)
}
