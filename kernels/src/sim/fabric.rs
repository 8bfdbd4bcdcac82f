//! [`SimBackend`]: run generated kernels on the runtime's own group memory, through its
//! [`Fabric`] trait — in-process (`LocalFabric`) or multi-process (`GroupFabric`, memfd heap).
//!
//! Every plan buffer and the kernel's int32 signal pad live in the fabric's symmetric heap at
//! offsets that are the same on every rank; the device table maps the kernel's shmem calls onto
//! the peers' mappings of that heap (`Fabric::heap_ptr`). The signal pad is separate from the
//! fabric's 64-bit slots because Ascend signals are int32 words in symmetric memory.
//!
//! Protocol for a caller (e.g. `symsched run --backend sim`): on every rank, [`SimBackend::new`],
//! then [`SimBackend::prepare`] (allocates scratch and the signal pad, zeroes the pad), then a
//! group barrier, then any number of [`SimBackend::launch`] calls (back to back; launch credits
//! make a trailing barrier unnecessary). Role buffers are bound in place by heap offset.

use super::device::{status, LaunchArgs, OverflowMode, DEVICE_ABI};
use super::heap::SIGNAL_LINE;
use super::hostcoll::{host_coll, HostCall, HostCollCtx};
use super::table::{device_table, HeapView};
use crate::sim_build::{self, SimKernel, SimSources};
use crate::{lower, KernelError, LowerOptions};
use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use symsched_plan::{BufferRole, ElemClass, LaunchSizes, Plan};
use symsched_runtime::exec::hostcoll::Exchanges;
use symsched_runtime::exec::{Fabric, HostCollRequest};

/// A generated kernel bound to one plan and launch types, ready to run on a fabric.
pub struct SimBackend {
    plan: Plan,
    opts: LowerOptions,
    kernel: SimKernel,
    timeout: Duration,
    seed: u64,
    overflow: OverflowMode,
    /// The runtime's heap exchanges behind the launch stub's host collectives, one per rank
    /// (their epochs persist across launches, like the executor's; ranks sharing one backend
    /// in a process must not wait on each other's lock).
    exchanges: Vec<Mutex<Exchanges>>,
    /// Launch groups of the bindings: a rank's k-th [`SimBackend::prepare`] binds to the k-th
    /// (taken by whichever rank gets there first), so the ranks sharing this backend launch in
    /// one group, and a new binding (whose epochs start at 0 again) never reuses a group.
    worlds: Mutex<Vec<u64>>,
    /// Bindings each rank prepared so far.
    prepared: Vec<AtomicUsize>,
}

/// One rank's binding: heap offsets of every plan buffer (roles first, then scratch) and of
/// the signal pad, and the epoch of its next launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimBinding {
    pub buffers: Vec<u64>,
    pub signals: u64,
    /// Heap offset and bytes of the matmul workspace (0 bytes without matmul steps).
    pub workspace: u64,
    pub workspace_bytes: u64,
    pub epoch: u64,
    /// The launch group (`symsched_launch_args::world`) whose puts the simulation checks
    /// against each other for GM races (`SYMSCHED_SIM_E_GM_RACE`).
    pub world: u64,
}

struct Ctx<'a> {
    bases: Vec<usize>,
    len: usize,
    me: usize,
    deadline: Instant,
    aborted: std::sync::atomic::AtomicBool,
    /// Runs one decoded host collective (see [`HostCollCtx`]).
    host: &'a dyn Fn(&mut HostCall) -> Result<(), String>,
}

impl SimBackend {
    /// Lower `plan`, compile it against the simulation (cached in `cache_dir`) and load it.
    pub fn new(
        plan: &Plan,
        opts: LowerOptions,
        cache_dir: &Path,
    ) -> Result<SimBackend, KernelError> {
        let lowered = lower(plan, &opts)?;
        let kernel = sim_build::build(&SimSources::from(&lowered), cache_dir)?;
        Ok(SimBackend {
            plan: plan.clone(),
            opts,
            kernel,
            timeout: Duration::from_secs(120),
            seed: 0,
            overflow: OverflowMode::default(),
            exchanges: (0..plan.group_size)
                .map(|_| Mutex::new(Exchanges::default()))
                .collect(),
            worlds: Mutex::new(Vec::new()),
            prepared: (0..plan.group_size).map(|_| AtomicUsize::new(0)).collect(),
        })
    }

    /// Deadline of one launch's waits (default 120 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Seed of the simulated engine interleaving (default 0).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The device's float overflow mode the kernel starts under (default: Inf/NaN, the A2
    /// default).
    pub fn with_overflow_mode(mut self, overflow: OverflowMode) -> Self {
        self.overflow = overflow;
        self
    }

    /// The launch types the kernel was generated for.
    pub fn options(&self) -> &LowerOptions {
        &self.opts
    }

    pub fn kernel(&self) -> &SimKernel {
        &self.kernel
    }

    fn elem_bytes(&self, c: ElemClass) -> u64 {
        match c {
            ElemClass::Data => self.opts.dtype.size(),
            ElemClass::Wire => self.opts.wire.size(),
            ElemClass::Acc => self.opts.dtype.accumulator().size(),
        }
    }

    /// Allocate scratch buffers and the signal pad for `sizes` next to the role buffers at
    /// `roles` (heap offsets, signature order) and zero this rank's signal pad. Every rank calls
    /// it with the same arguments (and as many times: a rank's k-th binding launches in the
    /// same GM-race group as the other ranks' k-th); barrier before the first launch.
    pub fn prepare<F: Fabric>(
        &self,
        fab: &F,
        sizes: &LaunchSizes,
        roles: &[u64],
    ) -> Result<SimBinding, KernelError> {
        let err = |e: symsched_runtime::exec::ExecError| KernelError::Run(e.to_string());
        let mut buffers = Vec::with_capacity(self.plan.buffers.len());
        let mut it = roles.iter();
        for (i, b) in self.plan.buffers.iter().enumerate() {
            if b.role == BufferRole::Scratch {
                let mut max = 0u64;
                for r in 0..self.plan.group_size {
                    max = max.max(b.total_len(r, sizes)?);
                }
                let bytes = (max * self.elem_bytes(b.elem)).max(1);
                let key = format!("sim/{}/buf{i}/{bytes}", self.kernel.name());
                buffers.push(fab.scratch(&key, bytes).map_err(err)?);
            } else {
                let off = it.next().ok_or_else(|| {
                    KernelError::Run(format!("no heap offset for role buffer `{}`", b.name))
                })?;
                buffers.push(*off);
            }
        }
        let pad = (self.plan.signals.len().max(1) * SIGNAL_LINE) as u64;
        let signals = fab
            .scratch(&format!("sim/{}/signals", self.kernel.name()), pad)
            .map_err(err)?;
        let p = fab.heap_ptr(fab.rank(), signals, pad).map_err(err)?;
        // SAFETY: `p` addresses `pad` bytes of this rank's heap; peers do not signal before the
        // caller's barrier.
        unsafe { std::ptr::write_bytes(p, 0, pad as usize) };
        let workspace_bytes = crate::lower::workspace_bytes(&self.plan, sizes)?;
        let workspace = if workspace_bytes > 0 {
            fab.scratch(
                &format!("sim/{}/workspace/{workspace_bytes}", self.kernel.name()),
                workspace_bytes,
            )
            .map_err(err)?
        } else {
            signals
        };
        let k = self
            .prepared
            .get(fab.rank() as usize)
            .ok_or_else(|| {
                KernelError::Run(format!("rank {} outside the plan's group", fab.rank()))
            })?
            .fetch_add(1, Ordering::Relaxed);
        let world = {
            let mut w = self.worlds.lock().unwrap_or_else(|e| e.into_inner());
            while w.len() <= k {
                w.push(super::device::new_world());
            }
            w[k]
        };
        Ok(SimBinding {
            buffers,
            signals,
            workspace,
            workspace_bytes,
            epoch: 0,
            world,
        })
    }

    /// Run one launch of the kernel on this rank.
    pub fn launch<F: Fabric>(
        &self,
        fab: &F,
        bind: &mut SimBinding,
        sizes: &LaunchSizes,
    ) -> Result<(), KernelError> {
        let err = |e: symsched_runtime::exec::ExecError| KernelError::Run(e.to_string());
        let p = fab.size() as usize;
        // The device table only needs the part of each segment this plan's buffers occupy.
        let mut len = bind.signals + (self.plan.signals.len().max(1) * SIGNAL_LINE) as u64;
        len = len.max(bind.workspace + bind.workspace_bytes);
        for (b, &off) in self.plan.buffers.iter().zip(&bind.buffers) {
            let mut max = 0u64;
            for r in 0..self.plan.group_size {
                max = max.max(b.total_len(r, sizes)?);
            }
            len = len.max(off + (max * self.elem_bytes(b.elem)).max(1));
        }
        // Ask the fabric only for the range the plan uses: below it a runtime may keep its own
        // reserved area that it refuses to hand out. The segment base is then recovered from
        // that pointer, since the kernel addresses buffers by heap offset.
        let lo = bind
            .buffers
            .iter()
            .copied()
            .chain([bind.signals, bind.workspace])
            .min()
            .unwrap_or(0);
        let mut bases = Vec::with_capacity(p);
        for r in 0..p {
            let at = fab.heap_ptr(r as u32, lo, len - lo).map_err(err)? as usize;
            bases.push(at - lo as usize);
        }
        let me = fab.rank() as usize;
        // The launch stub's host collectives go through the runtime's heap exchange, keyed by
        // this kernel so they never meet an executor's own exchanges.
        let key = format!("sim/{}", self.kernel.name());
        let host = |call: &mut HostCall| -> Result<(), String> {
            let slot = self
                .exchanges
                .get(me)
                .ok_or_else(|| format!("rank {me} outside the plan's group"))?;
            let mut ex = slot.lock().unwrap_or_else(|e| e.into_inner());
            let req = HostCollRequest {
                op: call.op,
                data: &mut *call.data,
                dtype: call.dtype,
                wire: call.dtype,
                acc: call.dtype.accumulator(),
                reduce: call.reduce,
                members: &call.members,
                key: &key,
                ordinal: call.ordinal,
            };
            ex.run(fab, req).map_err(|e| e.to_string())
        };
        let ctx = Ctx {
            bases,
            len: len as usize,
            me,
            deadline: Instant::now() + self.timeout,
            aborted: std::sync::atomic::AtomicBool::new(false),
            host: &host,
        };
        let mut size_vals: Vec<u64> = Vec::with_capacity(self.plan.size_vars.len() + 1);
        for v in &self.plan.size_vars {
            size_vals.push(*sizes.vars.get(&v.name).ok_or_else(|| {
                KernelError::Run(format!("size variable `{}` has no value", v.name))
            })?);
        }
        size_vals.push(0);
        let counts: Option<Vec<u64>> = sizes
            .counts
            .as_ref()
            .map(|m| m.iter().flatten().copied().collect());
        let base = ctx.bases[me] as *mut u8;
        // SAFETY: offsets were allocated in this heap by `prepare`.
        let bufs: Vec<*mut u8> = bind
            .buffers
            .iter()
            .map(|&o| unsafe { base.add(o as usize) })
            .collect();
        let dev = device_table(&ctx, barrier, Some(host_coll::<Ctx>));
        let epoch = bind.epoch;
        bind.epoch += 1;
        let mut args = LaunchArgs {
            abi_version: DEVICE_ABI,
            n_buffers: bufs.len() as u32,
            buffers: bufs.as_ptr(),
            // SAFETY: inside this rank's heap.
            signals: unsafe { base.add(bind.signals as usize) },
            sizes: size_vals.as_ptr(),
            counts: counts.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            epoch,
            send_exit_signals: 1,
            seed: self.seed ^ (me as u64) << 40,
            // SAFETY: inside this rank's heap (allocated by `prepare`).
            workspace: unsafe { base.add(bind.workspace as usize) },
            workspace_bytes: bind.workspace_bytes,
            world: bind.world,
            overflow_mode: self.overflow as u32,
            err_msg: std::ptr::null_mut(),
            err_cap: 0,
        };
        // SAFETY: the table describes this fabric's live heap mappings for the whole call.
        let (code, message) = unsafe { self.kernel.launch(&dev, &mut args) };
        if code != status::OK {
            return Err(KernelError::Launch {
                rank: me as u32,
                code,
                message,
            });
        }
        Ok(())
    }
}

impl HeapView for Ctx<'_> {
    fn bases(&self) -> &[usize] {
        &self.bases
    }
    fn seg_len(&self) -> usize {
        self.len
    }
    fn me(&self) -> usize {
        self.me
    }
    fn give_up(&self) -> bool {
        self.aborted.load(std::sync::atomic::Ordering::Relaxed) || Instant::now() > self.deadline
    }
    fn abort(&self) {
        self.aborted
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl HostCollCtx for Ctx<'_> {
    fn run_host_coll(&self, call: &mut HostCall) -> Result<(), String> {
        (self.host)(call)
    }
}

unsafe extern "C" fn barrier(_ctx: *mut c_void) -> i32 {
    // The generated kernels never call aclshmem_barrier; a fabric barrier needs the executor.
    1
}
