//! Plan → LLVM IR: one module with one kernel function per (plan, rank, dtypes, reduce op), and
//! for a rank whose steps run on several channels, one per channel ([`kernel_channels`]).
//!
//! - [`dataflow`]: what each step reads and writes, on which rank, and how much it moves;
//! - [`fusion`]: which steps run as one pass over the data (derived from the dataflow);
//! - [`extents`]: chunk offsets and lengths from the size arguments, at entry, checked;
//! - [`numeric`]: conversions and folds, bit for bit as the interpreter;
//! - [`elements`]: the element loops of passes (one internal function per pass shape);
//! - [`sync`]: waits, signals, matmul, host collectives and the exit through the intrinsics.
//!
//! The kernel: load the arguments; evaluate every step's extents in step order, checking that
//! each region holds what the step moves (the interpreter's resolve, same errors in the same
//! order); send the entry signals; run the waits that earlier launches and the peers' entry
//! signals satisfy; run the actions of
//! [`fusion::schedule`] in order; divide `avg` outputs by P; `stage_out`; exit signals.
//!
//! **Channels.** A channel kernel holds only its channel's steps, in plan order, and is
//! lowered in the steps scope: the runtime runs a rank's channel kernels concurrently and sends
//! the entry and exit signals around all of them. Analyses stay within the channel (nothing is
//! fused or moved across channels); steps keep their plan indices and ids (traces, errors).

pub(crate) mod dataflow;
pub(crate) mod elements;
pub(crate) mod extents;
pub mod fusion;
pub mod numeric;
pub(crate) mod sync;

use crate::abi::{self, offsets};
use crate::{ElemTypes, JitError, ReduceOp};
use fusion::{Action, FusionOptions};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{FloatType, FunctionType, IntType, PointerType};
use inkwell::values::{BasicMetadataValueEnum, FunctionValue, IntValue, PhiValue, PointerValue};
use inkwell::AddressSpace;
pub use numeric::F16Lowering;
use symsched_plan::{BufferRole, Plan, Rank};

/// Which kernel to generate.
#[derive(Debug, Clone, Copy)]
pub struct KernelSpec<'p> {
    pub plan: &'p Plan,
    pub rank: Rank,
    /// The channel of the rank whose steps the kernel runs ([`symsched_plan::Step::channel`]):
    /// 0 for a rank with one channel (the kernel runs all its steps); for a rank with several,
    /// one kernel per channel, each with only that channel's steps ([`kernel_channels`]).
    pub channel: u32,
    pub types: ElemTypes,
    pub op: ReduceOp,
}

impl KernelSpec<'_> {
    /// `<schedule>.r<rank>.<data>.<wire>.<op>`: the kernel's name in the printed IR; a rank with
    /// several channels adds `.c<channel>` (so a one-channel rank keeps its name).
    pub fn name(&self) -> String {
        let mut name = format!(
            "{}.r{}.{}.{}.{}",
            self.plan.schedule, self.rank, self.types.data, self.types.wire, self.op
        );
        if self.multi_channel() {
            name.push_str(&format!(".c{}", self.channel));
        }
        name
    }

    /// Whether the spec's rank splits its steps into several channels (one kernel each).
    pub fn multi_channel(&self) -> bool {
        self.plan
            .ranks
            .get(self.rank as usize)
            .is_some_and(|r| r.channel_count() > 1)
    }
}

/// The channels of `rank` that have steps, ascending: one kernel each ([`KernelSpec::channel`]).
/// `[0]` for a rank with one channel or none (its kernel runs every step); otherwise the
/// non-empty channels, in the order the runtime lists them (`Resolved::channels`).
pub fn kernel_channels(plan: &Plan, rank: Rank) -> Vec<u32> {
    let Some(prog) = plan.ranks.get(rank as usize) else {
        return vec![0];
    };
    if prog.channel_count() <= 1 {
        return vec![0];
    }
    let mut used: Vec<u32> = prog.steps.iter().map(|s| s.channel).collect();
    used.sort_unstable();
    used.dedup();
    used
}

/// A deliberately broken lowering, for tests that must see the comparison against the
/// interpreter fail.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Leave out the wait with this plan step id.
    DropWait(u32),
    /// Fold every reduce's operands right to left.
    ReverseFold,
    /// Copy one element less in every block of a blocked copy-out (`elements.rs`).
    ShortCopyOut,
    /// Sink steps into their reader's pass even when a peer touches their places (`fusion.rs`
    /// without its privacy check).
    SinkShared,
}

/// How much of a launch the kernel does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KernelScope {
    /// The whole launch after the stage-in: entry signals, the steps, `avg`, `stage_out`, exit
    /// signals (a kernel that stands alone; what `--emit llvm` prints).
    #[default]
    Launch,
    /// The steps only: the caller sends the entry signals before the call and does `avg`,
    /// stage-out and the exit signals after it (the runtime's executor, whose phases around
    /// the steps are the same for every backend).
    Steps,
}

/// Choices of the lowering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LowerOptions {
    pub fusion: FusionOptions,
    pub f16: F16Lowering,
    pub scope: KernelScope,
    /// Call the `trace` intrinsic after every action (for the step trace).
    pub trace: bool,
    /// Form heap addresses in the kernel from [`abi::KernelArgs::offsets`] and
    /// [`abi::KernelArgs::heaps`] when the launch passes them (else every address through the
    /// `region` intrinsic). The compiler turns it off for bodies it leaves unoptimised
    /// ([`crate::compile::SMALL_BODY`]).
    pub heap_addresses: bool,
    /// Call the `agree` intrinsic after the first `n` steps of the rank's list (the launch's
    /// speculative prefix, which may run before the ranks agree: the runtime checks the
    /// agreement in that call); nothing is fused or moved across it. Steps scope and a rank
    /// with one channel only. `None`: no such call (the runtime checks before the kernel).
    pub check_after: Option<u32>,
    #[doc(hidden)]
    pub fault: Option<Fault>,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            fusion: FusionOptions::default(),
            f16: F16Lowering::Native,
            scope: KernelScope::Launch,
            trace: false,
            heap_addresses: true,
            check_after: None,
            fault: None,
        }
    }
}

impl LowerOptions {
    /// These options for `spec`'s kernel: a channel kernel of a rank with several channels is
    /// lowered in the steps scope (only the runtime that starts the channels can send the
    /// entry and exit signals around them); any other kernel keeps `self.scope`.
    pub fn for_kernel(self, spec: &KernelSpec<'_>) -> LowerOptions {
        if spec.multi_channel() {
            LowerOptions {
                scope: KernelScope::Steps,
                ..self
            }
        } else {
            self
        }
    }
}

/// The LLVM types the lowering uses.
pub(crate) struct Types<'ctx> {
    pub i1: IntType<'ctx>,
    pub i8: IntType<'ctx>,
    pub i16: IntType<'ctx>,
    pub i32: IntType<'ctx>,
    pub i64: IntType<'ctx>,
    pub f16: FloatType<'ctx>,
    pub f32: FloatType<'ctx>,
    pub f64: FloatType<'ctx>,
    pub ptr: PointerType<'ctx>,
}

impl<'ctx> Types<'ctx> {
    fn new(ctx: &'ctx Context) -> Self {
        Types {
            i1: ctx.bool_type(),
            i8: ctx.i8_type(),
            i16: ctx.i16_type(),
            i32: ctx.i32_type(),
            i64: ctx.i64_type(),
            f16: ctx.f16_type(),
            f32: ctx.f32_type(),
            f64: ctx.f64_type(),
            ptr: ctx.ptr_type(AddressSpace::default()),
        }
    }
}

/// The shared failure exit: every check branches here with its status.
struct Fail<'ctx> {
    block: BasicBlock<'ctx>,
    code: PhiValue<'ctx>,
    step: PhiValue<'ctx>,
    need: PhiValue<'ctx>,
    have: PhiValue<'ctx>,
}

/// The first failure among the checks since the last flush.
#[derive(Clone, Copy)]
struct Pending<'ctx> {
    failed: IntValue<'ctx>,
    code: IntValue<'ctx>,
    step: IntValue<'ctx>,
    need: IntValue<'ctx>,
    have: IntValue<'ctx>,
}

/// An intrinsic: its function type and the pointer loaded from the table at entry.
#[derive(Clone, Copy)]
pub(crate) struct Intrinsic<'ctx> {
    ty: FunctionType<'ctx>,
    ptr: PointerValue<'ctx>,
}

pub(crate) struct Intrinsics<'ctx> {
    pub region: Intrinsic<'ctx>,
    pub signal: Intrinsic<'ctx>,
    pub wait: Intrinsic<'ctx>,
    pub matmul: Intrinsic<'ctx>,
    pub host_coll: Intrinsic<'ctx>,
    pub stage_out: Intrinsic<'ctx>,
    pub copy_nt: Intrinsic<'ctx>,
    pub trace: Intrinsic<'ctx>,
    pub agree: Intrinsic<'ctx>,
}

/// Code generation state of one kernel.
pub(crate) struct Cg<'ctx, 'p> {
    pub ctx: &'ctx Context,
    pub module: Module<'ctx>,
    pub b: Builder<'ctx>,
    pub t: Types<'ctx>,
    pub spec: KernelSpec<'p>,
    pub opts: LowerOptions,
    pub func: FunctionValue<'ctx>,
    fail: Fail<'ctx>,
    pub rt: PointerValue<'ctx>,
    pub sizes: PointerValue<'ctx>,
    pub counts: PointerValue<'ctx>,
    pub epoch: IntValue<'ctx>,
    /// [`abi::KernelArgs::nt_min_bytes`].
    pub nt_min_bytes: IntValue<'ctx>,
    /// [`abi::KernelArgs::signals`] and [`abi::KernelArgs::signal_stride`].
    pub signals: PointerValue<'ctx>,
    pub signal_stride: IntValue<'ctx>,
    /// [`abi::KernelArgs::offsets`] and [`abi::KernelArgs::heaps`].
    pub offsets: PointerValue<'ctx>,
    pub heaps: PointerValue<'ctx>,
    pub intr: Intrinsics<'ctx>,
    pending: std::cell::RefCell<Option<Pending<'ctx>>>,
    /// Addresses formed from a view or returned by the `region` intrinsic, by (rank, region,
    /// count).
    regions: std::cell::RefCell<
        std::collections::HashMap<
            (Rank, symsched_plan::Region, IntValue<'ctx>),
            PointerValue<'ctx>,
        >,
    >,
    /// Element-loop functions by shape ([`elements`]).
    pub helpers: std::cell::RefCell<std::collections::HashMap<String, FunctionValue<'ctx>>>,
    /// Per buffer: whether some step of some rank reads it ([`Plan::read_buffers`]; a move
    /// into any other buffer may be streamed).
    pub read_buffers: Vec<bool>,
}

type R<T> = Result<T, JitError>;

impl<'ctx, 'p> Cg<'ctx, 'p> {
    pub fn plan(&self) -> &'p Plan {
        self.spec.plan
    }

    pub fn me(&self) -> Rank {
        self.spec.rank
    }

    /// Whether step `i` of the rank's list is one this kernel runs (its channel's).
    pub fn runs(&self, i: usize) -> bool {
        self.plan().ranks[self.me() as usize]
            .steps
            .get(i)
            .is_some_and(|s| s.channel == self.spec.channel)
    }

    pub fn numeric(&self) -> numeric::Numeric<'_, 'ctx> {
        numeric::Numeric {
            ctx: self.ctx,
            module: &self.module,
            t: &self.t,
            f16: self.opts.f16,
        }
    }

    pub fn i32c(&self, v: u32) -> IntValue<'ctx> {
        self.t.i32.const_int(v as u64, false)
    }

    pub fn i64c(&self, v: u64) -> IntValue<'ctx> {
        self.t.i64.const_int(v, false)
    }

    /// `x · k`, with the identities folded (the IR stays readable for constant sizes).
    pub fn mul_k(&self, x: IntValue<'ctx>, k: u64) -> R<IntValue<'ctx>> {
        Ok(match k {
            0 => self.i64c(0),
            1 => x,
            _ => self.b.build_int_mul(x, self.i64c(k), "")?,
        })
    }

    /// `x + k`, with the identity folded.
    pub fn add_k(&self, x: IntValue<'ctx>, k: u64) -> R<IntValue<'ctx>> {
        Ok(match k {
            0 => x,
            _ => self.b.build_int_add(x, self.i64c(k), "")?,
        })
    }

    /// A new block placed before the failure exit.
    pub fn block(&self, name: &str) -> BasicBlock<'ctx> {
        self.ctx.prepend_basic_block(self.fail.block, name)
    }

    /// Remember a check: when `bad` is true and no earlier pending check failed, the kernel
    /// will leave with `code` for `step` (and the two lengths) at the next [`Cg::flush`].
    /// Checks are folded into one first-failure record with selects, so a kernel with
    /// hundreds of steps has a handful of branches (a branch per check made code generation
    /// of large plans several times slower), and the first failure in program order wins, as
    /// in the interpreter. Nothing between a check and its flush may depend on it.
    pub fn defer_failure(
        &self,
        bad: IntValue<'ctx>,
        code: u32,
        step: u32,
        need: IntValue<'ctx>,
        have: IntValue<'ctx>,
    ) -> R<()> {
        if bad.get_zero_extended_constant() == Some(0) {
            return Ok(());
        }
        let b = &self.b;
        let mut pending = self.pending.borrow_mut();
        let next = match *pending {
            None => Pending {
                failed: bad,
                code: self.i32c(code),
                step: self.i32c(step),
                need,
                have,
            },
            Some(p) => {
                let first = b.build_and(bad, b.build_not(p.failed, "")?, "")?;
                let sel = |now: IntValue<'ctx>, before: IntValue<'ctx>| -> R<IntValue<'ctx>> {
                    if now == before {
                        return Ok(now);
                    }
                    Ok(b.build_select(first, now, before, "")?.into_int_value())
                };
                Pending {
                    failed: b.build_or(p.failed, bad, "failed")?,
                    code: sel(self.i32c(code), p.code)?,
                    step: sel(self.i32c(step), p.step)?,
                    need: sel(need, p.need)?,
                    have: sel(have, p.have)?,
                }
            }
        };
        *pending = Some(next);
        Ok(())
    }

    /// Leave with the first pending failure, if any.
    pub fn flush(&self) -> R<()> {
        let Some(p) = self.pending.borrow_mut().take() else {
            return Ok(());
        };
        if p.failed.get_zero_extended_constant() == Some(0) {
            return Ok(());
        }
        let here = self.b.get_insert_block().expect("positioned");
        let next = self.block("ok");
        self.b
            .build_conditional_branch(p.failed, self.fail.block, next)?;
        self.fail.code.add_incoming(&[(&p.code, here)]);
        self.fail.step.add_incoming(&[(&p.step, here)]);
        self.fail.need.add_incoming(&[(&p.need, here)]);
        self.fail.have.add_incoming(&[(&p.have, here)]);
        self.b.position_at_end(next);
        Ok(())
    }
    /// Leave at once if `bad` (for checks that guard what follows directly).
    pub fn fail_if(
        &self,
        bad: IntValue<'ctx>,
        code: u32,
        step: u32,
        need: IntValue<'ctx>,
        have: IntValue<'ctx>,
    ) -> R<()> {
        self.defer_failure(bad, code, step, need, have)?;
        self.flush()
    }

    /// Remember that an intrinsic returned status `st` (non-zero is a failure).
    pub fn check_status(&self, st: IntValue<'ctx>, step: u32) -> R<()> {
        let bad = self.b.build_int_compare(
            inkwell::IntPredicate::NE,
            st,
            self.t.i32.const_zero(),
            "failed",
        )?;
        self.defer_failure(bad, abi::STATUS_INTRINSIC, step, self.i64c(0), self.i64c(0))
    }

    /// Call an intrinsic through the table.
    pub fn call(
        &self,
        f: Intrinsic<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
        name: &str,
    ) -> R<inkwell::values::BasicValueEnum<'ctx>> {
        let mut all: Vec<BasicMetadataValueEnum<'ctx>> = vec![self.rt.into()];
        all.extend_from_slice(args);
        Ok(self
            .b
            .build_indirect_call(f.ty, f.ptr, &all, name)?
            .try_as_basic_value()
            .basic()
            .expect("every intrinsic returns a value"))
    }

    /// Call an intrinsic that returns nothing.
    pub fn call_void(&self, f: Intrinsic<'ctx>, args: &[BasicMetadataValueEnum<'ctx>]) -> R<()> {
        let mut all: Vec<BasicMetadataValueEnum<'ctx>> = vec![self.rt.into()];
        all.extend_from_slice(args);
        self.b.build_indirect_call(f.ty, f.ptr, &all, "")?;
        Ok(())
    }

    /// Report steps to the `trace` intrinsic (kernels lowered with tracing only): `steps` ran
    /// together; `flags` is added to each ([`abi::TRACE_SIGNAL`]), the last gets
    /// [`abi::TRACE_LAST`] too.
    pub fn trace(&self, steps: &[u32], flags: u32) -> R<()> {
        if !self.opts.trace {
            return Ok(());
        }
        for (k, id) in steps.iter().enumerate() {
            let last = if k + 1 == steps.len() {
                abi::TRACE_LAST
            } else {
                0
            };
            self.call_void(
                self.intr.trace,
                &[self.i32c(*id).into(), self.i32c(flags | last).into()],
            )?;
        }
        Ok(())
    }

    /// Load a field of the argument block at `offset`.
    fn field(
        b: &Builder<'ctx>,
        args: PointerValue<'ctx>,
        ty: inkwell::types::BasicTypeEnum<'ctx>,
        t: &Types<'ctx>,
        offset: u64,
        name: &str,
    ) -> R<inkwell::values::BasicValueEnum<'ctx>> {
        // SAFETY (of the generated code): `offset` is a field offset of the #[repr(C)] block.
        let at =
            unsafe { b.build_in_bounds_gep(t.i8, args, &[t.i64.const_int(offset, false)], "")? };
        Ok(b.build_load(ty, at, name)?)
    }
}

/// Lower one kernel into a fresh module of `ctx`.
pub fn lower<'ctx>(
    ctx: &'ctx Context,
    spec: &KernelSpec<'_>,
    opts: &LowerOptions,
) -> Result<Module<'ctx>, JitError> {
    let plan = spec.plan;
    if spec.rank >= plan.group_size {
        return Err(JitError::Rank {
            rank: spec.rank,
            size: plan.group_size,
        });
    }
    plan.check_consistency()?;
    let channels = plan.ranks[spec.rank as usize].channel_count();
    if spec.channel >= channels {
        return Err(JitError::Channel {
            rank: spec.rank,
            channel: spec.channel,
            channels,
        });
    }
    // A launch kernel would have to send the entry signals before every channel starts and the
    // exit signals after every channel ended, across functions that run concurrently: only the
    // runtime, which starts the channels, can. A channel kernel runs its steps only.
    if channels > 1 && opts.scope == KernelScope::Launch {
        return Err(JitError::Channels {
            rank: spec.rank,
            channels,
        });
    }
    // The check splits one sequence of steps: only an executor that runs the steps (and sends
    // the signals around them) can check between them.
    if let Some(at) = opts.check_after {
        let steps = plan.ranks[spec.rank as usize].steps.len();
        if channels > 1 || opts.scope != KernelScope::Steps || at as usize > steps {
            return Err(JitError::CheckAfter {
                rank: spec.rank,
                at,
                steps,
                channels,
            });
        }
    }
    for b in &plan.buffers {
        if let symsched_plan::Extent::Split { total: e }
        | symsched_plan::Extent::Uniform { chunk: e }
        | symsched_plan::Extent::Blocks { block: e, .. } = &b.extent
        {
            for v in e.vars() {
                if !plan.size_vars.iter().any(|s| s.name == v) {
                    return Err(JitError::UnknownSizeVar(v));
                }
            }
        }
    }
    let name = spec.name();
    let module = ctx.create_module(&name);
    let t = Types::new(ctx);
    let fn_ty = t.i32.fn_type(&[t.ptr.into()], false);
    let func = module.add_function(&name, fn_ty, Some(Linkage::External));
    let b = ctx.create_builder();
    let entry = ctx.append_basic_block(func, "entry");
    let fail_block = ctx.append_basic_block(func, "fail");
    let args = func
        .get_nth_param(0)
        .expect("one parameter")
        .into_pointer_value();
    args.set_name("args");

    // The failure exit.
    b.position_at_end(fail_block);
    let code = b.build_phi(t.i32, "code")?;
    let step = b.build_phi(t.i32, "step")?;
    let need = b.build_phi(t.i64, "need")?;
    let have = b.build_phi(t.i64, "have")?;
    for (off, v) in [
        (offsets::STATUS_CODE, code.as_basic_value()),
        (offsets::STATUS_STEP, step.as_basic_value()),
        (offsets::STATUS_NEED, need.as_basic_value()),
        (offsets::STATUS_HAVE, have.as_basic_value()),
    ] {
        // SAFETY (of the generated code): a field offset of the status block.
        let at = unsafe { b.build_in_bounds_gep(t.i8, args, &[t.i64.const_int(off, false)], "")? };
        b.build_store(at, v)?;
    }
    b.build_return(Some(&code.as_basic_value()))?;

    // Arguments and the intrinsic table.
    b.position_at_end(entry);
    let rt = Cg::field(&b, args, t.ptr.into(), &t, offsets::CTX, "ctx")?.into_pointer_value();
    let table = Cg::field(
        &b,
        args,
        t.ptr.into(),
        &t,
        offsets::INTRINSICS,
        "intrinsics",
    )?
    .into_pointer_value();
    let sizes =
        Cg::field(&b, args, t.ptr.into(), &t, offsets::SIZES, "sizes")?.into_pointer_value();
    let counts =
        Cg::field(&b, args, t.ptr.into(), &t, offsets::COUNTS, "counts")?.into_pointer_value();
    let epoch = Cg::field(&b, args, t.i64.into(), &t, offsets::EPOCH, "epoch")?.into_int_value();
    let nt_min_bytes = Cg::field(
        &b,
        args,
        t.i64.into(),
        &t,
        offsets::NT_MIN_BYTES,
        "nt_min_bytes",
    )?
    .into_int_value();
    let signals =
        Cg::field(&b, args, t.ptr.into(), &t, offsets::SIGNALS, "signals")?.into_pointer_value();
    let signal_stride = Cg::field(
        &b,
        args,
        t.i64.into(),
        &t,
        offsets::SIGNAL_STRIDE,
        "signal_stride",
    )?
    .into_int_value();
    let heap_offsets =
        Cg::field(&b, args, t.ptr.into(), &t, offsets::OFFSETS, "offsets")?.into_pointer_value();
    let heaps =
        Cg::field(&b, args, t.ptr.into(), &t, offsets::HEAPS, "heaps")?.into_pointer_value();
    let p = t.ptr;
    let (i32t, i64t) = (t.i32, t.i64);
    let void = ctx.void_type();
    let fns: [(u64, &str, FunctionType); 8] = [
        (
            offsets::REGION,
            "region",
            p.fn_type(
                &[p.into(), i32t.into(), i32t.into(), i64t.into(), i64t.into()],
                false,
            ),
        ),
        (
            offsets::SIGNAL,
            "signal",
            i32t.fn_type(
                &[
                    p.into(),
                    i32t.into(),
                    i32t.into(),
                    i32t.into(),
                    i64t.into(),
                    i32t.into(),
                ],
                false,
            ),
        ),
        (
            offsets::WAIT,
            "wait",
            i32t.fn_type(
                &[p.into(), i32t.into(), i32t.into(), i64t.into(), i32t.into()],
                false,
            ),
        ),
        (
            offsets::MATMUL,
            "matmul",
            i32t.fn_type(
                &[
                    p.into(),
                    i32t.into(),
                    p.into(),
                    p.into(),
                    p.into(),
                    i64t.into(),
                    i64t.into(),
                    i64t.into(),
                ],
                false,
            ),
        ),
        (
            offsets::HOST_COLL,
            "host_coll",
            i32t.fn_type(
                &[p.into(), i32t.into(), i32t.into(), p.into(), i64t.into()],
                false,
            ),
        ),
        (
            offsets::STAGE_OUT,
            "stage_out",
            i32t.fn_type(&[p.into()], false),
        ),
        (
            offsets::COPY_NT,
            "copy_nt",
            void.fn_type(&[p.into(), p.into(), p.into(), i64t.into()], false),
        ),
        (
            offsets::TRACE,
            "trace",
            void.fn_type(&[p.into(), i32t.into(), i32t.into()], false),
        ),
    ];
    let mut loaded = Vec::new();
    for (off, name, ty) in fns {
        let ptr = Cg::field(&b, table, t.ptr.into(), &t, off, name)?.into_pointer_value();
        loaded.push(Intrinsic { ty, ptr });
    }
    let intr = Intrinsics {
        region: loaded[0],
        signal: loaded[1],
        wait: loaded[2],
        matmul: loaded[3],
        host_coll: loaded[4],
        stage_out: loaded[5],
        copy_nt: loaded[6],
        trace: loaded[7],
        // Loaded only by a kernel that calls it (every other kernel's IR stays as it was).
        agree: Intrinsic {
            ty: i32t.fn_type(&[p.into()], false),
            ptr: match opts.check_after {
                Some(_) => Cg::field(&b, table, t.ptr.into(), &t, offsets::AGREE, "agree")?
                    .into_pointer_value(),
                None => p.const_null(),
            },
        },
    };
    let mut cg = Cg {
        ctx,
        module,
        b,
        t,
        spec: *spec,
        opts: *opts,
        func,
        fail: Fail {
            block: fail_block,
            code,
            step,
            need,
            have,
        },
        rt,
        sizes,
        counts,
        epoch,
        nt_min_bytes,
        signals,
        signal_stride,
        offsets: heap_offsets,
        heaps,
        intr,
        pending: Default::default(),
        regions: Default::default(),
        helpers: Default::default(),
        read_buffers: plan.read_buffers(),
    };
    let mut ext = extents::Extents::default();
    ext.resolve_all(&mut cg)?;
    cg.flush()?;
    let launch = opts.scope == KernelScope::Launch;
    if launch {
        sync::enter(&cg)?;
    }
    let actions = fusion::schedule_checked(
        plan,
        spec.rank,
        spec.channel,
        opts.fusion,
        opts.fault,
        opts.check_after.map(|n| n as usize),
    );
    let mut host_ordinal = 0u32;
    let steps = &plan.ranks[spec.rank as usize].steps;
    for action in &actions {
        // Only signal statuses are ever pending here (every other action flushes after
        // itself): consecutive signals go out before their statuses are looked at; everything
        // else needs every earlier step to have succeeded.
        if !matches!(action, Action::Signal(_) | Action::PutSignals(_)) {
            cg.flush()?;
        }
        match action {
            Action::Wait(i) => {
                if opts.fault == Some(Fault::DropWait(steps[*i].id)) {
                    continue;
                }
                sync::wait(&cg, &steps[*i])?;
                cg.trace(&[steps[*i].id], 0)?;
            }
            Action::Signal(i) => {
                sync::signal_step(&cg, &steps[*i])?;
                cg.trace(&[steps[*i].id], 0)?;
            }
            Action::Matmul(i) => {
                sync::matmul(&cg, &ext, &steps[*i])?;
                cg.trace(&[steps[*i].id], 0)?;
            }
            Action::HostColl(i) => {
                sync::host_coll(&cg, &ext, &steps[*i], host_ordinal)?;
                host_ordinal += 1;
                cg.trace(&[steps[*i].id], 0)?;
            }
            Action::Pass(pass) => {
                elements::pass(&cg, &ext, pass)?;
                let ids: Vec<u32> = pass.steps.iter().map(|i| steps[*i].id).collect();
                cg.trace(&ids, 0)?;
            }
            Action::PutSignals(list) => {
                for i in list {
                    sync::put_signal(&cg, &steps[*i])?;
                }
                let ids: Vec<u32> = list.iter().map(|i| steps[*i].id).collect();
                cg.trace(&ids, abi::TRACE_SIGNAL)?;
            }
            Action::Agree => sync::agree(&cg)?,
        }
        // A failed wait, matmul, host collective or agreement must stop the kernel before it
        // tells a peer anything more.
        if matches!(
            action,
            Action::Wait(_) | Action::Matmul(_) | Action::HostColl(_) | Action::Agree
        ) {
            cg.flush()?;
        }
    }
    // avg = sum, then one division by P over every written role.
    if launch && spec.op == ReduceOp::Avg && plan.collective.reduces() {
        for (i, buf) in plan.buffers.iter().enumerate() {
            if matches!(buf.role, BufferRole::Output | BufferRole::InOut) {
                elements::scale_avg(&cg, &ext, i as u32)?;
            }
        }
    }
    if launch {
        sync::finish(&cg)?;
    }
    cg.flush()?;
    cg.b.build_return(Some(&cg.t.i32.const_zero()))?;
    // The failure exit last, for reading.
    if let Some(last) = cg.func.get_last_basic_block() {
        if last != cg.fail.block {
            cg.fail
                .block
                .move_after(last)
                .map_err(|_| JitError::llvm("block order"))?;
        }
    }
    if cg.fail.code.count_incoming() == 0 {
        // Nothing can fail: drop the exit.
        // SAFETY: the block has no predecessors.
        unsafe { cg.fail.block.delete() }.map_err(|_| JitError::llvm("delete fail block"))?;
    }
    cg.module
        .verify()
        .map_err(|e| JitError::llvm(format!("generated IR does not verify: {e}")))?;
    Ok(cg.module)
}

/// The unoptimised IR of one kernel, as text.
pub fn emit_llvm(spec: &KernelSpec<'_>, opts: &LowerOptions) -> Result<String, JitError> {
    let ctx = Context::create();
    let m = lower(&ctx, spec, opts)?;
    Ok(m.print_to_string().to_string())
}
