//! In-process launcher: every rank is a thread with its own heap segment; the device table is
//! implemented with atomics on those segments. Waits are bounded by a deadline, and one rank's
//! failure aborts the others' waits, so a broken kernel fails fast instead of hanging.

use super::device::{status, LaunchArgs, OverflowMode, DEVICE_ABI};
use super::heap::{HeapLayout, SIGNAL_LINE};
use super::hostcoll::{self, host_coll, HostCall, HostCollCtx, Rendezvous};
use super::table::{device_table, HeapView};
use crate::sim_build::SimKernel;
use crate::KernelError;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Seed of the simulated engine interleaving (each rank, epoch and core derives its own).
    pub seed: u64,
    /// The device's float overflow mode the kernels start under.
    pub overflow: OverflowMode,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            epochs: 0..1,
            timeout: Duration::from_secs(60),
            send_exit_signals: true,
            seed: 0,
            overflow: OverflowMode::default(),
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
    host: Rendezvous,
}

struct Ctx<'a> {
    me: usize,
    shared: &'a Shared,
    barrier_gen: std::cell::Cell<u64>,
    /// Epoch of the running launch (names its host collectives).
    epoch: std::cell::Cell<u64>,
}

impl HeapView for Ctx<'_> {
    fn bases(&self) -> &[usize] {
        &self.shared.bases
    }
    fn seg_len(&self) -> usize {
        self.shared.len
    }
    fn me(&self) -> usize {
        self.me
    }
    fn give_up(&self) -> bool {
        self.shared.abort.load(Ordering::Relaxed) || Instant::now() > self.shared.deadline
    }
    fn abort(&self) {
        self.shared.abort.store(true, Ordering::SeqCst);
    }
}

unsafe extern "C" fn barrier(ctx: *mut c_void) -> i32 {
    // SAFETY: ctx is the `Ctx` this module put in the table for this thread.
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

impl HostCollCtx for Ctx<'_> {
    fn run_host_coll(&self, call: &mut HostCall) -> Result<(), String> {
        let s = self.shared;
        let me = self.me as u32;
        let idx = call
            .members
            .iter()
            .position(|m| *m == me)
            .ok_or("not a member")?;
        let key = format!("{}/{}/{:?}", self.epoch.get(), call.ordinal, call.members);
        let all = s.host.meet(
            &key,
            idx,
            call.members.len(),
            call.data,
            s.deadline,
            &|| s.abort.load(Ordering::Relaxed),
        )?;
        hostcoll::apply(call, me, &all)
    }
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
    // A fresh launch group: the simulation checks the run's puts against each other
    // (`SYMSCHED_SIM_E_GM_RACE`) and against no other run's.
    let world = super::device::new_world();
    let shared = Shared {
        bases: heap.segs.iter().map(|s| s.ptr as usize).collect(),
        len: heap.len,
        abort: AtomicBool::new(false),
        deadline: Instant::now() + cfg.timeout,
        barrier_count: AtomicU64::new(0),
        n: p,
        host: Rendezvous::default(),
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
                            epoch: std::cell::Cell::new(0),
                        };
                        let dev = device_table(&ctx, barrier, Some(host_coll::<Ctx>));
                        let base = shared.bases[r] as *mut u8;
                        // SAFETY: offsets come from the layout the heap was sized by.
                        let bufs: Vec<*mut u8> = layout
                            .buf_offset
                            .iter()
                            .map(|&o| unsafe { base.add(o) })
                            .collect();
                        for epoch in cfg.epochs.clone() {
                            ctx.epoch.set(epoch);
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
                                seed: cfg.seed ^ ((r as u64) << 40),
                                // SAFETY: inside the segment (the layout reserves it).
                                workspace: unsafe { base.add(layout.workspace_offset) },
                                workspace_bytes: layout.workspace_bytes as u64,
                                world,
                                overflow_mode: cfg.overflow as u32,
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
