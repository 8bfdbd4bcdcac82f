//! The JIT: runs one rank's steps as a native kernel that the LLVM back end (`symsched-jit`)
//! generated for the launch signature (plan, rank, dtypes, reduce op), compiled for the host
//! CPU and cached in memory and on disk.
//!
//! The kernel is lowered in the *steps* scope ([`KernelScope::Steps`]): the executor's phases
//! around the steps (check, resolve, stage in, entry signals, `avg`, stage out, exit signals)
//! are the same as for the interpreter, so the two backends differ only in how the steps run.
//! The kernel computes its extents from the size arguments itself and fuses passes over the
//! data where the dataflow allows (`jit/src/lower/fusion.rs`); everything that needs the
//! runtime goes through the intrinsics below, which are implemented over the same [`Fabric`]
//! calls the interpreter makes: bounds-checked addresses (the kernel forms a heap address
//! itself from the launch's heap offsets, `LaunchMemory::heap_offsets`, and the ranks' heap
//! mappings, [`abi::HeapView`], made once per resolution from the fabric's heap spans;
//! anything else asks `LaunchMemory::ptr`, for the address or the interpreter's error),
//! signals and bounded waits ([`LaunchSignals`], so the deadline, dead-peer detection, abort
//! check and the timeout message naming step, slot and signallers are the fabric's, as for the
//! interpreter), the matmul engine, the host collective library, non-temporal copies, the
//! step trace, and for a speculating launch the executor's agreement check (`agree`, called by
//! a kernel lowered with [`LowerOptions::check_after`] right after the speculative prefix).
//!
//! **Channels.** A rank whose steps run on several channels has one kernel per channel (each
//! with only its channel's steps; `symsched_jit::kernel_channels`), run concurrently on the
//! runner the interpreter uses ([`super::channels`]): a worker per further channel, each with
//! its own call context and matmul scratch. The launch's cancel word reaches the kernels
//! through the intrinsics: a blocking wait is cancellable ([`Fabric::wait_cancellable`]) and a
//! signal is not sent once a sibling failed, so a failing channel ends the others early.
//!
//! **Errors.** An intrinsic that fails keeps its [`ExecError`] in the call's context and
//! returns failure; the kernel stops and the launch returns that error. A kernel status of its
//! own (a region too small, a size overflow) becomes the interpreter's error for the same case.
//! A kernel that cannot be made is an [`ExecError::Jit`] ([`JitFailure`]: the back end's
//! [`symsched_jit::JitError`], with the schedule and rank when it was compiling one).
//!
//! **Caches.** Per loaded plan, the kernels of the launch signatures seen so far (a launch with
//! a known signature does no hashing); per process, one [`KernelCache`] per compile
//! configuration, which keys kernels by the SHA-256 of everything their code depends on and
//! keeps the objects under [`ExecOptions::jit_cache_dir`](crate::config::ExecOptions) when set.

use super::{channels, Check, LaunchSignals, StepContext, Steps};
use crate::exec::cancel::LaunchCancel;
use crate::exec::dtype::{DType, ElemTypes};
use crate::exec::error::ExecError;
use crate::exec::fabric::{Fabric, HeapSpan, WaitContext};
use crate::exec::hostcoll::HostCollRequest;
use crate::exec::matmul;
use crate::exec::reduce::ReduceOp;
use crate::exec::resolved::{ChannelSteps, RReg};
use crate::exec::staging::NOT_ON_HEAP;
use crate::exec::stream_copy;
use crate::exec::trace;
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use symsched_jit::abi::{self, HeapView, Intrinsics, KernelArgs, Status};
use symsched_jit::cache::{Kernel, KernelCache, Source};
use symsched_jit::compile::CompileOptions;
use symsched_jit::lower::fusion::FusionOptions;
use symsched_jit::{KernelScope, KernelSpec, LowerOptions};
use symsched_plan::{Cmp, Op, Plan, SignalMode, Step};

#[doc(hidden)]
pub use symsched_jit::lower::Fault;

/// The JIT backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Jit;

pub use crate::exec::error::JitFailure;

/// One launch signature's kernels, as a loaded plan remembers them: one for a rank with one
/// channel, one per channel ([`symsched_jit::kernel_channels`], the channel order of
/// [`Resolved::channels`](crate::exec::resolved::Resolved::channels)) for a rank with several.
struct Entry {
    sig: Signature,
    kernels: Vec<ChannelKernel>,
}

/// The kernel of one channel of the rank.
struct ChannelKernel {
    channel: u32,
    kernel: Arc<Kernel>,
}

/// What each channel of a multi-channel rank keeps between launches (its own, so no two
/// threads share it).
#[derive(Default)]
struct ChannelState {
    /// Accumulator rows of the built-in matmul.
    mm: Vec<f64>,
}

/// What selects a kernel for a loaded plan (the plan and rank are fixed by the plan state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Signature {
    types: ElemTypes,
    op: ReduceOp,
    fuse: bool,
    trace: bool,
    fault: Option<Fault>,
    /// The kernel checks the launch's agreement after this many steps (a speculating launch
    /// whose prefix is not its whole list; [`LowerOptions::check_after`]).
    check_after: Option<u32>,
}

/// Plan step id → position in one rank's step list, sorted by id: a binary search over a few
/// entries where a `HashMap<u32, usize>` hashed the id with SipHash (~90 instructions per
/// lookup: a host collective or matmul intrinsic looks its step up on every call).
#[derive(Default)]
struct StepIndex(Vec<(u32, usize)>);

impl StepIndex {
    fn of(steps: &[Step]) -> StepIndex {
        let mut v: Vec<(u32, usize)> = steps.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        v.sort_unstable();
        StepIndex(v)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[inline]
    fn get(&self, id: u32) -> Option<usize> {
        let at = self.0.binary_search_by_key(&id, |&(i, _)| i).ok()?;
        Some(self.0[at].1)
    }
}

/// What the JIT keeps per loaded plan.
#[derive(Default)]
pub struct JitState {
    kernels: Vec<Entry>,
    /// Plan step id → position in this rank's step list (for the matmul, host collective and
    /// trace intrinsics, which name steps by id).
    step_at: StepIndex,
    /// The kernel call's unchanging parts for the last launch's kernel and resolution.
    prepared: Option<Prepared>,
    sizes: Vec<u64>,
    counts: Vec<u64>,
    /// Accumulator rows of the built-in matmul (a one-channel rank).
    mm: Vec<f64>,
    /// Per channel of a multi-channel rank, in [`Entry::kernels`] order.
    channels: channels::Workers<ChannelState>,
}

/// What a kernel call needs besides the launch's epoch, worked out once per kernel signature,
/// resolution, signal block and reset generation: a repeated launch compares these and copies
/// the rest into its [`KernelArgs`], instead of finding its kernel and re-deriving the rest
/// from the plan and the fabric per launch.
struct Prepared {
    /// The kernel signature (the launch types, which fix the element sizes).
    sig: Signature,
    /// Index into [`JitState::kernels`] of the kernels for `sig`.
    at: usize,
    /// The kernel, when the rank has one channel (a multi-channel rank finds each channel's
    /// in `JitState::kernels[at]`).
    only: Option<Arc<Kernel>>,
    /// Address and length of the resolution's key (sizes, then counts): the pointers below
    /// read it in place, so the same address and length mean the same arguments.
    key: (*const u64, usize),
    slot_base: u32,
    generation: u64,
    /// The key serves as the kernel's sizes and counts; otherwise (a resolution without a key,
    /// never reused) they are marshalled per launch.
    keyed: bool,
    sizes: *const u64,
    counts: *const u64,
    nt_min_bytes: u64,
    signals: *const u64,
    signal_stride: u64,
    /// [`KernelArgs::heaps`]: per group rank, where its heap is mapped ([`HeapView::NONE`]:
    /// every address of it through [`Fabric::heap_ptr`]).
    heaps: Vec<HeapView>,
}

/// A fabric's heap span as the kernel ABI describes a heap: the same mapping and bounds, so
/// [`HeapView::address`] accepts what [`Fabric::heap_ptr`] does (`tests/fabric_conformance.rs`).
impl From<HeapSpan> for HeapView {
    fn from(h: HeapSpan) -> HeapView {
        HeapView {
            base: h.base,
            lo: h.lo,
            hi: h.hi,
        }
    }
}

// The kernel compares the staging's offsets against the heaps with the ABI's marker.
const _: () = assert!(NOT_ON_HEAP == abi::NOT_ON_HEAP);

// SAFETY: the pointers are into the resolution's key (owned by the same plan state, behind the
// same lock, and compared before every use), and into the fabric's counters and heap mappings,
// which live as long as the fabric; nothing is dereferenced outside a launch of that plan.
unsafe impl Send for Prepared {}

impl Prepared {
    #[inline]
    fn fits(
        &self,
        sig: Signature,
        key: (*const u64, usize),
        slot_base: u32,
        generation: u64,
    ) -> bool {
        self.sig == sig
            && self.key == key
            && self.slot_base == slot_base
            && self.generation == generation
    }

    #[cold]
    #[inline(never)]
    fn new<F: Fabric>(
        ctx: &StepContext<'_, F>,
        sig: Signature,
        at: usize,
        only: Option<Arc<Kernel>>,
        generation: u64,
    ) -> Prepared {
        let plan = ctx.plan;
        let key = ctx.resolved.key.as_deref();
        // The size variables in plan order, then the counts matrix row by row: what the
        // resolution is keyed by, so a launch passes that and looks nothing up by name.
        let nv = plan.size_vars.len();
        let pp = (plan.group_size as usize).pow(2);
        let (keyed, sizes, counts) = match key {
            Some(k) if k.len() == nv || (k.len() == nv + pp && ctx.sizes.counts.is_some()) => (
                true,
                k.as_ptr(),
                if k.len() > nv {
                    k[nv..].as_ptr()
                } else {
                    std::ptr::null()
                },
            ),
            _ => (false, std::ptr::null(), std::ptr::null()),
        };
        // The plan's counters on this rank, for the kernel's first look at a wait.
        let (signals, stride) = ctx
            .fabric
            .signal_words(ctx.signals.base, plan.signals.len() as u32)
            .unwrap_or((std::ptr::null(), 0));
        Prepared {
            sig,
            at,
            only,
            key: key.map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len())),
            slot_base: ctx.signals.base,
            generation,
            keyed,
            sizes,
            counts,
            nt_min_bytes: if ctx.opts.nt_copy {
                ctx.opts.nt_min_bytes as u64
            } else {
                abi::NT_NEVER
            },
            signals,
            signal_stride: stride as u64,
            heaps: (0..ctx.fabric.size())
                .map(|r| {
                    ctx.fabric
                        .heap_span(r)
                        .map_or(HeapView::NONE, HeapView::from)
                })
                .collect(),
        }
    }
}

/// Kernels compiled in this process and the time spent on them, and kernels found on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileStats {
    pub compiled: u64,
    pub from_disk: u64,
    pub compile_time: Duration,
}

static COMPILED: AtomicU64 = AtomicU64::new(0);
static FROM_DISK: AtomicU64 = AtomicU64::new(0);
static COMPILE_NANOS: AtomicU64 = AtomicU64::new(0);

/// What the JIT has compiled or loaded in this process so far (`symsched run` prints it).
pub fn compile_stats() -> CompileStats {
    CompileStats {
        compiled: COMPILED.load(Ordering::Relaxed),
        from_disk: FROM_DISK.load(Ordering::Relaxed),
        compile_time: Duration::from_nanos(COMPILE_NANOS.load(Ordering::Relaxed)),
    }
}

static FAULT: Mutex<Option<Fault>> = Mutex::new(None);
/// Whether [`FAULT`] may hold a fault: launches read this flag, not the lock.
static FAULT_SET: AtomicBool = AtomicBool::new(false);

/// Test hook: lower every kernel compiled from now on with a deliberately broken lowering (a
/// dropped wait, a reversed fold order), or correctly again with `None`. For the tests that
/// must see the comparison with the interpreter fail; it applies to the whole process.
#[doc(hidden)]
pub fn set_test_fault(fault: Option<Fault>) {
    let mut f = FAULT.lock().unwrap_or_else(|e| e.into_inner());
    *f = fault;
    FAULT_SET.store(fault.is_some(), Ordering::Release);
}

#[inline]
fn current_fault() -> Option<Fault> {
    if !FAULT_SET.load(Ordering::Acquire) {
        return None;
    }
    *FAULT.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's kernel cache for one compile configuration.
fn cache(dir: &Option<PathBuf>, opts: CompileOptions) -> Result<Arc<KernelCache>, ExecError> {
    type Caches = Mutex<HashMap<(Option<PathBuf>, CompileOptions), Arc<KernelCache>>>;
    static CACHES: OnceLock<Caches> = OnceLock::new();
    let mut all = CACHES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let key = (dir.clone(), opts);
    if let Some(c) = all.get(&key) {
        return Ok(c.clone());
    }
    let c = Arc::new(
        KernelCache::new(key.0.clone(), key.1.clone())
            .map_err(|error| JitFailure::Setup { error })?,
    );
    all.insert(key, c.clone());
    Ok(c)
}

/// Put into `slot` the kernel call for a launch with `sig` that the one there no longer
/// [`Prepared::fits`]: its kernels (remembered in `kernels`, else from the process cache:
/// memory, disk, or compiled now) and the call's unchanging parts. Out of line: a repeated
/// launch only compares.
#[cold]
#[inline(never)]
fn prepare<F: Fabric>(
    slot: &mut Option<Prepared>,
    kernels: &mut Vec<Entry>,
    step_at: &mut StepIndex,
    ctx: &StepContext<'_, F>,
    sig: Signature,
    generation: u64,
) -> Result<(), ExecError> {
    let at = match kernels.iter().position(|e| e.sig == sig) {
        Some(i) => i,
        None => {
            let (plan, rank) = (ctx.plan, ctx.fabric.rank());
            let channels = compile(plan, rank, sig, &ctx.opts.jit_cache_dir)?;
            if step_at.is_empty() {
                if let Some(prog) = plan.ranks.get(rank as usize) {
                    *step_at = StepIndex::of(&prog.steps);
                }
            }
            kernels.push(Entry {
                sig,
                kernels: channels,
            });
            kernels.len() - 1
        }
    };
    let only = match &kernels[at].kernels[..] {
        [one] => Some(one.kernel.clone()),
        _ => None,
    };
    *slot = Some(Prepared::new(ctx, sig, at, only, generation));
    Ok(())
}

/// The kernels of `rank` of `plan` for `sig`, one per channel, from the process cache.
fn compile(
    plan: &Plan,
    rank: u32,
    sig: Signature,
    dir: &Option<PathBuf>,
) -> Result<Vec<ChannelKernel>, ExecError> {
    let types = symsched_jit::ElemTypes {
        data: sig.types.data,
        wire: sig.types.wire,
        acc: sig.types.acc,
    };
    let opts = CompileOptions {
        lower: LowerOptions {
            fusion: FusionOptions {
                fuse: sig.fuse,
                ..FusionOptions::default()
            },
            scope: KernelScope::Steps,
            trace: sig.trace,
            check_after: sig.check_after,
            fault: sig.fault,
            ..LowerOptions::default()
        },
        ..CompileOptions::default()
    };
    let cache = cache(dir, opts)?;
    let mut kernels = Vec::new();
    for channel in symsched_jit::kernel_channels(plan, rank) {
        let spec = KernelSpec {
            plan,
            rank,
            channel,
            types,
            op: sig.op,
        };
        let (kernel, source) = cache.get(&spec).map_err(|error| JitFailure::Compile {
            schedule: plan.schedule.clone(),
            rank,
            error,
        })?;
        match source {
            Source::Compiled => {
                COMPILED.fetch_add(1, Ordering::Relaxed);
                COMPILE_NANOS.fetch_add(kernel.compile_time.as_nanos() as u64, Ordering::Relaxed);
            }
            Source::Disk => {
                FROM_DISK.fetch_add(1, Ordering::Relaxed);
            }
            Source::Memory => {}
        }
        kernels.push(ChannelKernel { channel, kernel });
    }
    Ok(kernels)
}

/// What every intrinsic of one kernel call gets (through the ABI's opaque context pointer).
struct CallCtx<'c, 'a, F: Fabric> {
    ctx: &'c StepContext<'a, F>,
    /// [`Prepared::heaps`], for [`region`].
    heaps: &'c [HeapView],
    step_at: &'c StepIndex,
    mm: &'c mut Vec<f64>,
    /// The launch's cancel word and this kernel's channel, for a multi-channel rank (`None`:
    /// the only channel, nothing extra on the hot path).
    cancel: Option<(&'c LaunchCancel, u32)>,
    /// Every wait is skipped: the call runs a speculative prefix ([`launch`]), until the
    /// `agree` intrinsic.
    skip_waits: bool,
    /// The launch's agreement check, for the `agree` intrinsic (a speculating launch).
    check: Option<Check<'c>>,
    /// The first error an intrinsic hit.
    error: Option<ExecError>,
    /// End of the last traced action (set when tracing: an untraced launch reads no clock).
    traced_until: Option<Instant>,
}

impl<'c, F: Fabric> CallCtx<'c, '_, F> {
    fn fail(&mut self, e: ExecError) -> i32 {
        if self.error.is_none() {
            self.error = Some(e);
        }
        1
    }

    /// This rank's plan steps (for the intrinsics that name a step by id; not per launch).
    fn steps(&self) -> &'c [Step] {
        self.ctx
            .plan
            .ranks
            .get(self.ctx.memory.rank() as usize)
            .map_or(&[][..], |r| r.steps.as_slice())
    }

    fn step(&self, id: u32) -> Result<&Step, ExecError> {
        self.step_at
            .get(id)
            .and_then(|i| self.steps().get(i))
            .ok_or_else(|| ExecError::Runtime(format!("jit: the kernel named unknown step {id}")))
    }

    fn region_dtype(&self, r: &symsched_plan::Region) -> Result<DType, ExecError> {
        let plan = self.ctx.plan;
        let b = plan.buffers.get(r.buffer as usize).ok_or_else(|| {
            ExecError::Runtime(format!("jit: step names unknown buffer {}", r.buffer))
        })?;
        Ok(self.ctx.types.of(b.elem))
    }
}

/// # Safety (of every intrinsic)
/// `c` is the `CallCtx` that [`Jit::run`] passed as the kernel's context, alive and not
/// otherwise borrowed for the whole kernel call; the kernel calls intrinsics one at a time
/// from the thread that called it (each channel of a multi-channel rank has its own kernel
/// call and its own `CallCtx`).
unsafe fn call<'x, F: Fabric>(c: *mut c_void) -> &'x mut CallCtx<'x, 'x, F> {
    // SAFETY: see above.
    unsafe { &mut *(c as *mut CallCtx<'x, 'x, F>) }
}

/// An address the kernel did not form itself: a heap range by the kernel's own rule
/// ([`HeapView::address`]) for a body lowered without it (too large to be optimised), else
/// (a role used in place from private memory, a peer on another node, a range outside: the
/// interpreter's address or error) through
/// [`LaunchMemory::ptr`](crate::exec::staging::LaunchMemory::ptr).
unsafe extern "C" fn region<F: Fabric>(
    c: *mut c_void,
    rank: u32,
    buf: u32,
    off: u64,
    len: u64,
) -> *mut u8 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    if let (Some(&o), Some(h)) = (
        c.ctx.memory.heap_offsets().get(buf as usize),
        c.heaps.get(rank as usize),
    ) {
        if let Some(p) = h.address(o, off, len) {
            return p;
        }
    }
    region_checked(c, rank, buf, off, len)
}

/// [`region`] through [`LaunchMemory::ptr`](crate::exec::staging::LaunchMemory::ptr).
#[cold]
#[inline(never)]
fn region_checked<F: Fabric>(
    c: &mut CallCtx<'_, '_, F>,
    rank: u32,
    buf: u32,
    off: u64,
    len: u64,
) -> *mut u8 {
    let plan = c.ctx.plan;
    let Some(b) = plan.buffers.get(buf as usize) else {
        c.fail(ExecError::Runtime(format!(
            "jit: the kernel asked for unknown buffer {buf}"
        )));
        return std::ptr::null_mut();
    };
    let shift = c.ctx.types.of(b.elem).size().trailing_zeros();
    let r = RReg {
        buf,
        elem: off >> shift,
    };
    match c.ctx.memory.ptr(rank, &r, len >> shift) {
        Ok((p, _)) => p,
        Err(e) => {
            c.fail(e);
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn signal<F: Fabric>(
    c: *mut c_void,
    peer: u32,
    slot: u32,
    mode: u32,
    value: u64,
    _step: u32,
) -> i32 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    // A channel whose sibling failed tells nobody anything more (as the interpreter, which
    // looks before every step).
    if let Some((cancel, channel)) = c.cancel {
        if let Err(e) = cancel.check(channel) {
            return c.fail(e);
        }
    }
    let mode = match mode {
        abi::SIGNAL_ADD => SignalMode::Add,
        abi::SIGNAL_SET => SignalMode::Set,
        m => return c.fail(ExecError::Runtime(format!("jit: unknown signal mode {m}"))),
    };
    let s: LaunchSignals<'_> = c.ctx.signals;
    match c.ctx.fabric.signal(peer, s.base + slot, mode, value) {
        Ok(()) => 0,
        Err(e) => c.fail(e),
    }
}

#[inline]
fn cmp_of(code: u32) -> Option<Cmp> {
    const ALL: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le];
    // The codes are small integers; look the likely slot up first, then search.
    match ALL.get(code as usize) {
        Some(c) if c.code() == code => Some(*c),
        _ => ALL.into_iter().find(|c| c.code() == code),
    }
}

unsafe extern "C" fn wait<F: Fabric>(
    c: *mut c_void,
    slot: u32,
    cmp: u32,
    target: u64,
    step: u32,
) -> i32 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    // The kernel looked at the counter inline and found it short: in a speculative prefix
    // that is an exit credit the agreement already implied (as the interpreter's prefix,
    // which skips its waits).
    if c.skip_waits {
        return 0;
    }
    let plan = c.ctx.plan;
    let (Some(cmp), Some(sig), Some(who)) = (
        cmp_of(cmp),
        plan.signals.get(slot as usize),
        c.ctx.signals.signallers.get(slot as usize),
    ) else {
        return c.fail(ExecError::Runtime(format!(
            "jit: the kernel waited on slot {slot} with comparison {cmp}"
        )));
    };
    let wc = WaitContext {
        schedule: &plan.schedule,
        step,
        slot_name: &sig.name,
        signallers: who,
    };
    let slot = c.ctx.signals.base + slot;
    // The same bounded wait as the interpreter's, and for a channel of a multi-channel rank
    // the same cancellable one: a sibling's failure ends it early.
    let r = match c.cancel {
        None => c.ctx.fabric.wait(slot, cmp, target, &wc),
        Some((cancel, channel)) => c
            .ctx
            .fabric
            .wait_cancellable(slot, cmp, target, &wc, cancel, channel),
    };
    match r {
        Ok(_) => 0,
        Err(e) => c.fail(e),
    }
}

#[allow(clippy::too_many_arguments)] // the ABI's signature
unsafe extern "C" fn matmul_step<F: Fabric>(
    c: *mut c_void,
    step: u32,
    cp: *mut u8,
    ap: *const u8,
    bp: *const u8,
    m: u64,
    k: u64,
    n: u64,
) -> i32 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    let dtypes = c.step(step).and_then(|s| match &s.op {
        Op::Matmul { c: rc, a, b } => {
            Ok((c.region_dtype(rc)?, c.region_dtype(a)?, c.region_dtype(b)?))
        }
        _ => Err(ExecError::Runtime(format!(
            "jit: step {step} is not a matmul"
        ))),
    });
    let (cd, ad, bd) = match dtypes {
        Ok(d) => d,
        Err(e) => return c.fail(e),
    };
    let mm = matmul::MatmulStep {
        c: (cp, cd),
        a: (ap, ad),
        b: (bp, bd),
        m: m as usize,
        k: k as usize,
        n: n as usize,
    };
    // SAFETY: the kernel obtained the three ranges from `region` for these element counts.
    match unsafe { matmul::run(&mm, c.mm) } {
        Ok(()) => 0,
        Err(e) => c.fail(e),
    }
}

unsafe extern "C" fn host_coll<F: Fabric>(
    c: *mut c_void,
    step: u32,
    ordinal: u32,
    data: *mut u8,
    elems: u64,
) -> i32 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    let found = c.step(step).and_then(|s| match &s.op {
        Op::HostColl {
            op,
            region,
            members,
        } => Ok((*op, c.region_dtype(region)?, members)),
        _ => Err(ExecError::Runtime(format!(
            "jit: step {step} is not a host collective"
        ))),
    });
    let (op, dtype, members) = match found {
        Ok(f) => f,
        Err(e) => return c.fail(e),
    };
    // SAFETY: a local heap range the kernel obtained from `region` for `elems` elements; no
    // peer touches it during a host collective (the verifier forbids shmem traffic on it).
    let data = unsafe { std::slice::from_raw_parts_mut(data, elems as usize * dtype.size()) };
    let req = HostCollRequest {
        op,
        data,
        dtype,
        wire: c.ctx.types.wire,
        acc: c.ctx.types.acc,
        reduce: c.ctx.op,
        members,
        key: c.ctx.key,
        ordinal,
    };
    match c.ctx.host_collective(req) {
        Ok(()) => 0,
        Err(e) => c.fail(e),
    }
}

/// The speculative prefix ran: check the launch's agreement, then wait for real.
unsafe extern "C" fn agree<F: Fabric>(c: *mut c_void) -> i32 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    c.skip_waits = false;
    let Some(check) = c.check.take() else {
        return c.fail(ExecError::Runtime(
            "jit: a kernel checked an agreement that its launch did not ask for".into(),
        ));
    };
    match check() {
        Ok(()) => 0,
        Err(e) => c.fail(e),
    }
}

/// Never called: a steps-scope kernel leaves stage-out to the executor.
unsafe extern "C" fn stage_out<F: Fabric>(c: *mut c_void) -> i32 {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    c.fail(ExecError::Runtime(
        "jit: a steps kernel called stage_out".into(),
    ))
}

unsafe extern "C" fn copy_nt(_c: *mut c_void, dst: *mut u8, src: *const u8, bytes: u64) {
    // SAFETY: disjoint ranges the kernel obtained from `region` for `bytes` bytes.
    unsafe { stream_copy::copy(dst, src, bytes as usize) }
}

unsafe extern "C" fn trace_step<F: Fabric>(c: *mut c_void, step: u32, flags: u32) {
    // SAFETY: the kernel's context (see `call`).
    let c = unsafe { call::<F>(c) };
    let Some(tr) = c.ctx.trace else { return };
    let Some(i) = c.step_at.get(step) else {
        return;
    };
    let res = c.ctx.resolved;
    let (Some(ps), Some(rs)) = (
        c.steps().get(i),
        res.position_of(i).and_then(|a| res.steps.get(a)),
    ) else {
        return;
    };
    let size = trace::written_buffer(&ps.op).map_or(0, |b| {
        c.ctx.types.of(c.ctx.plan.buffers[b as usize].elem).size() as u64
    });
    let bytes = if flags & abi::TRACE_SIGNAL != 0 {
        0
    } else {
        rs.elems() * size
    };
    let since = *c.traced_until.get_or_insert_with(Instant::now);
    tr.step(ps, bytes, since);
    if flags & abi::TRACE_LAST != 0 {
        c.traced_until = Some(Instant::now());
    }
}

/// The intrinsic table for a fabric type, one static per `F` (a launch passes its address).
struct Table<F>(std::marker::PhantomData<F>);

impl<F: Fabric> Table<F> {
    const INTRINSICS: Intrinsics = Intrinsics {
        region: region::<F>,
        signal: signal::<F>,
        wait: wait::<F>,
        matmul: matmul_step::<F>,
        host_coll: host_coll::<F>,
        stage_out: stage_out::<F>,
        copy_nt,
        trace: trace_step::<F>,
        agree: agree::<F>,
    };
}

/// The kernel's size and counts arguments built by name from the launch sizes, into the plan
/// state's vectors: for a resolution without a key (never reused), where the launch path
/// cannot pass the key instead.
#[cold]
#[inline(never)]
fn marshal<F: Fabric>(
    ctx: &StepContext<'_, F>,
    sizes: &mut Vec<u64>,
    counts: &mut Vec<u64>,
) -> Result<(*const u64, *const u64), ExecError> {
    sizes.clear();
    for v in &ctx.plan.size_vars {
        let x = ctx.sizes.vars.get(&v.name).copied().ok_or_else(|| {
            ExecError::from(symsched_plan::PlanError::UnboundSize(v.name.clone()))
        })?;
        sizes.push(x);
    }
    counts.clear();
    let Some(m) = &ctx.sizes.counts else {
        return Ok((sizes.as_ptr(), std::ptr::null()));
    };
    counts.extend(m.iter().flatten());
    Ok((sizes.as_ptr(), counts.as_ptr()))
}

impl super::Backend for Jit {
    type PlanState = JitState;

    #[inline]
    fn run<F: Fabric>(
        &self,
        ctx: &StepContext<'_, F>,
        state: &mut JitState,
        part: Steps<'_>,
    ) -> Result<(), ExecError> {
        let len = ctx.resolved.steps.len();
        match part {
            // A rank without steps has nothing for a kernel to do: no regions to check, no
            // waits, no data (the phases around the steps are the executor's). It neither
            // compiles nor calls one, and pays no call into the kernel path.
            Steps::All if len == 0 => Ok(()),
            Steps::All => launch(ctx, state, false, None),
            Steps::Speculating { .. } if ctx.resolved.multi_channel() => Err(ExecError::Runtime(
                "jit: a speculative launch on a rank with several channels".into(),
            )),
            // The prefix is the whole list: the kernel of every launch runs it with its waits
            // skipped, and the check follows the call.
            Steps::Speculating { prefix, check } if prefix >= len => {
                if len > 0 {
                    launch(ctx, state, true, None)?;
                }
                check()
            }
            // A kernel that checks after its prefix (compiled for that), in the same call.
            Steps::Speculating { prefix, check } => {
                launch(ctx, state, true, Some((prefix as u32, check)))
            }
        }
    }
}

/// One launch's kernel calls (a rank with steps): the kernel on the calling thread for a
/// one-channel rank; for a multi-channel rank each channel's kernel on the shared runner
/// ([`channels::run`], as the interpreter), each with its own call context.
///
/// `skip_waits`: the launch's speculative prefix runs first ("Speculative scratch puts" in
/// `crate::exec::loaded`): every wait in it is an exit credit that the check of the last agreed
/// launch already implied, so the wait intrinsic returns at once — until the kernel calls
/// `agree`, when `checked` gives the number of prefix steps (the kernel compiled for it) and the
/// check that `agree` calls (`None`: the prefix, if any, is the whole list, and the caller
/// checks after the call).
#[inline(never)]
fn launch<F: Fabric>(
    ctx: &StepContext<'_, F>,
    state: &mut JitState,
    skip_waits: bool,
    checked: Option<(u32, Check<'_>)>,
) -> Result<(), ExecError> {
    let (check_after, check) = checked.unzip();
    let sig = Signature {
        types: ctx.types,
        op: ctx.op,
        fuse: ctx.opts.fuse,
        trace: ctx.trace.is_some(),
        fault: current_fault(),
        check_after,
    };
    let generation = ctx.fabric.generation();
    let key = ctx
        .resolved
        .key
        .as_deref()
        .map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len()));
    let JitState {
        kernels,
        step_at,
        prepared,
        sizes,
        counts,
        mm,
        channels: channel_states,
        ..
    } = state;
    // Compare first, then borrow: a `match` on the slot with the insert in its other arm
    // measured ~30 instructions more per launch (callgrind, `reduce_push` at 8 B), on the
    // path that does not take that arm.
    if !prepared
        .as_ref()
        .is_some_and(|p| p.fits(sig, key, ctx.signals.base, generation))
    {
        prepare(prepared, kernels, step_at, ctx, sig, generation)?;
    }
    let Some(p) = prepared.as_ref() else {
        return Err(ExecError::Runtime("jit: no kernel call prepared".into()));
    };
    let (sizes, counts) = if p.keyed {
        (p.sizes, p.counts)
    } else {
        marshal(ctx, sizes, counts)?
    };
    let call = KernelCall {
        ctx,
        prepared: p,
        step_at,
        sizes,
        counts,
        skip_waits,
    };
    if let Some(kernel) = &p.only {
        return call.run(kernel, mm, None, check);
    }
    let entry = kernels
        .get(p.at)
        .ok_or_else(|| ExecError::Runtime("jit: the prepared kernel is gone".into()))?;
    channels::run(
        ctx.fabric.rank(),
        &ctx.resolved.channels,
        channel_states,
        |st: &mut ChannelState, c: &ChannelSteps, cancel: &LaunchCancel| {
            let k = entry
                .kernels
                .iter()
                .find(|k| k.channel == c.channel)
                .ok_or_else(|| {
                    ExecError::Runtime(format!("jit: no kernel for channel {}", c.channel))
                })?;
            call.run(&k.kernel, &mut st.mm, Some((cancel, c.channel)), None)
        },
    )
}

/// What every kernel call of one launch shares (read only while the launch runs).
struct KernelCall<'c, 'a, F: Fabric> {
    ctx: &'c StepContext<'a, F>,
    prepared: &'c Prepared,
    step_at: &'c StepIndex,
    sizes: *const u64,
    counts: *const u64,
    /// The wait intrinsic returns at once (a speculative prefix: see [`launch`]), until the
    /// `agree` intrinsic.
    skip_waits: bool,
}

// SAFETY: the channels of a launch read this concurrently and never write it: the step
// context is `Sync` (see the interpreter's channels), `Prepared` holds addresses into the
// resolution's key and the fabric's counters and heap mappings, and `sizes`/`counts` point into
// the key or the plan state's vectors, all of which outlive the launch and are not changed
// during it (the plan's state lock is held). Each call's mutable state is its own `CallCtx`.
unsafe impl<F: Fabric> Sync for KernelCall<'_, '_, F> {}

impl<F: Fabric> KernelCall<'_, '_, F> {
    /// Call `kernel` once, with `mm` as its matmul scratch, `cancel` for a channel of a
    /// multi-channel rank and `check` for a kernel that checks the agreement itself.
    #[inline]
    fn run(
        &self,
        kernel: &Kernel,
        mm: &mut Vec<f64>,
        cancel: Option<(&LaunchCancel, u32)>,
        check: Option<Check<'_>>,
    ) -> Result<(), ExecError> {
        let (ctx, p) = (self.ctx, self.prepared);
        let mut call = CallCtx {
            ctx,
            heaps: &p.heaps,
            step_at: self.step_at,
            mm,
            cancel,
            skip_waits: self.skip_waits,
            // Shortened to the call's lifetime (an unsizing coercion, which `Option` does not
            // pass through by itself).
            check: match check {
                Some(f) => Some(f),
                None => None,
            },
            error: None,
            traced_until: None,
        };
        let mut args = KernelArgs {
            ctx: &mut call as *mut CallCtx<'_, '_, F> as *mut c_void,
            intrinsics: &Table::<F>::INTRINSICS,
            sizes: self.sizes,
            counts: self.counts,
            epoch: ctx.signals.epoch,
            nt_min_bytes: p.nt_min_bytes,
            signals: p.signals,
            signal_stride: p.signal_stride,
            offsets: ctx.memory.heap_offsets().as_ptr(),
            heaps: p.heaps.as_ptr(),
            status: Default::default(),
        };
        // SAFETY: the table's functions honour the ABI for this call: `call` outlives it and
        // the intrinsics reach it only through `args.ctx`; `sizes` holds one value per size
        // variable, `counts` is P × P values when the plan takes counts (the executor checked
        // the matrix when it resolved the steps) or null; `offsets` holds one entry per plan
        // buffer (the launch's staging); `signals` and `heaps` (one entry per group rank) are the
        // fabric's for this generation and slot block (`Prepared::fits`).
        let status = unsafe { kernel.launch(&mut args) };
        if status.code == abi::STATUS_OK {
            // A kernel given the check must have called it: its launch is agreed only then.
            if call.check.is_some() {
                return Err(ExecError::Runtime(
                    "jit: the kernel ended without checking its launch's agreement".into(),
                ));
            }
            return Ok(());
        }
        Err(failure(ctx.plan, &status, call.error.take()))
    }
}

/// The launch's error for a kernel status other than OK: the failed intrinsic's own, or the
/// interpreter's for the same case.
#[cold]
#[inline(never)]
fn failure(plan: &Plan, status: &abi::KernelStatus, error: Option<ExecError>) -> ExecError {
    match Status::decode(status) {
        Status::Ok => {
            ExecError::Runtime("jit: a successful kernel status taken for a failure".into())
        }
        Status::Intrinsic { step } => error.unwrap_or_else(|| {
            ExecError::Runtime(format!(
                "jit: an intrinsic failed in step {step} without an error"
            ))
        }),
        Status::RegionTooSmall { step, need, have } => symsched_plan::PlanError::Inconsistent(
            format!("step {step} moves {need} elements into a region of {have}"),
        )
        .into(),
        Status::SizeOverflow { .. } => symsched_plan::PlanError::SizeOverflow.into(),
        Status::MissingCounts => ExecError::MissingCounts(plan.schedule.clone()),
        Status::Unknown { code, step } => ExecError::Runtime(format!(
            "jit: kernel status {code} (step {step}) is unknown to this build"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::StepIndex;
    use symsched_plan::{Op, SignalMode, SignalUpdate, Step};

    #[test]
    fn the_step_index_finds_each_position_by_id_and_nothing_else() {
        let step = |id| Step {
            id,
            span: (0, 0),
            op: Op::Signal {
                update: SignalUpdate {
                    peer: 0,
                    slot: 0,
                    mode: SignalMode::Add,
                    value: 1,
                    stride: 0,
                },
            },
            channel: 0,
        };
        // Plan ids of one rank: sparse and not in list order.
        let steps: Vec<Step> = [40, 7, 19, 3].into_iter().map(step).collect();
        let index = StepIndex::of(&steps);
        for (pos, s) in steps.iter().enumerate() {
            assert_eq!(index.get(s.id), Some(pos), "id {}", s.id);
        }
        for absent in [0, 8, 41, u32::MAX] {
            assert_eq!(index.get(absent), None, "id {absent}");
        }
        assert!(StepIndex::of(&[]).is_empty());
    }
}
