//! Optimise a lowered kernel for the host CPU and make it callable.
//!
//! - The target machine is the host's: its triple, CPU name and feature string
//!   (`TargetMachine::get_host_cpu_name/features`), so the loop vectoriser's cost model and the
//!   code generator use AVX2 or AVX-512 where the CPU has them. Nothing here uses fast-math,
//!   so vector code computes exactly what the scalar IR says (see [`crate::lower::numeric`]).
//! - The module runs LLVM's standard `default<O3>` (or `O2`) pipeline, then is emitted as a
//!   relocatable object in memory: that object is what [`crate::cache`] stores on disk.
//! - [`load`] links objects into the process with ORC's LLJIT (one per process; no external
//!   linker, no temporary files), resolving the few libc symbols LLVM may call (`memcpy`,
//!   `memset`) from the process itself, and returns the entry point.

use crate::abi::KernelFn;
use crate::lower::{self, F16Lowering, KernelSpec, LowerOptions};
use crate::JitError;
use inkwell::context::Context;
use inkwell::llvm_sys;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::values::FunctionValue;
use inkwell::OptimizationLevel;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Optimisation pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OptLevel {
    O2,
    #[default]
    O3,
}

impl OptLevel {
    fn pipeline(self) -> &'static str {
        match self {
            OptLevel::O2 => "default<O2>",
            OptLevel::O3 => "default<O3>",
        }
    }
}

/// How kernels are compiled.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CompileOptions {
    /// Fusion switches and test faults; `f16` is chosen from the target's features.
    pub lower: LowerOptions,
    pub opt: OptLevel,
    /// CPU name instead of the host's (tests, cross-checks).
    pub cpu: Option<String>,
    /// Feature string instead of the host's (e.g. the host's plus `,-f16c`).
    pub features: Option<String>,
}

/// The machine kernels are generated for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostTarget {
    pub triple: String,
    pub cpu: String,
    pub features: String,
}

fn init() -> Result<(), JitError> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| Target::initialize_native(&InitializationConfig::default()))
        .clone()
        .map_err(JitError::Llvm)
}

impl HostTarget {
    /// The host, or what `opts` says instead.
    pub fn of(opts: &CompileOptions) -> Result<HostTarget, JitError> {
        init()?;
        Ok(HostTarget {
            triple: TargetMachine::get_default_triple()
                .as_str()
                .to_string_lossy()
                .into_owned(),
            cpu: opts
                .cpu
                .clone()
                .unwrap_or_else(|| TargetMachine::get_host_cpu_name().to_string()),
            features: opts
                .features
                .clone()
                .unwrap_or_else(|| TargetMachine::get_host_cpu_features().to_string()),
        })
    }

    /// Hardware f16 conversions: F16C on x86-64 (the feature string's last word on it wins);
    /// every other 64-bit target LLVM supports here converts natively.
    pub fn f16(&self) -> F16Lowering {
        if !self.triple.starts_with("x86_64") {
            return F16Lowering::Native;
        }
        let on = self
            .features
            .split(',')
            .rev()
            .find_map(|f| match f {
                "+f16c" => Some(true),
                "-f16c" => Some(false),
                _ => None,
            })
            .unwrap_or(false);
        if on {
            F16Lowering::Native
        } else {
            F16Lowering::Emulated
        }
    }

    fn machine(&self, opt: OptLevel) -> Result<TargetMachine, JitError> {
        let triple = TargetTriple::create(&self.triple);
        let target = Target::from_triple(&triple).map_err(JitError::llvm)?;
        let level = match opt {
            OptLevel::O2 => OptimizationLevel::Default,
            OptLevel::O3 => OptimizationLevel::Aggressive,
        };
        target
            .create_target_machine(
                &triple,
                &self.cpu,
                &self.features,
                level,
                RelocMode::PIC,
                CodeModel::Default,
            )
            .ok_or_else(|| JitError::llvm(format!("no target machine for {}", self.triple)))
    }
}

/// A compiled kernel: a relocatable object defining `symbol`.
#[derive(Debug, Clone)]
pub struct Object {
    pub symbol: String,
    pub bytes: Vec<u8>,
    /// Time spent lowering, optimising and generating code.
    pub lower_time: Duration,
    pub opt_time: Duration,
    pub codegen_time: Duration,
}

impl Object {
    pub fn compile_time(&self) -> Duration {
        self.lower_time + self.opt_time + self.codegen_time
    }
}

/// The lowering options `opts` implies for `target` (f16 from its features).
pub fn lower_options(opts: &CompileOptions, target: &HostTarget) -> LowerOptions {
    LowerOptions {
        f16: target.f16(),
        ..opts.lower
    }
}

/// Lower, optimise for `target` and emit an object whose entry point is named `symbol`.
pub fn compile_object(
    spec: &KernelSpec<'_>,
    opts: &CompileOptions,
    target: &HostTarget,
    symbol: &str,
) -> Result<Object, JitError> {
    init()?;
    let t0 = Instant::now();
    let ctx = Context::create();
    let tm = target.machine(opts.opt)?;
    let (module, entry) = lower_for(&ctx, spec, &lower_options(opts, target), &tm)?;
    entry.as_global_value().set_name(symbol);
    let t1 = Instant::now();
    optimize(&module, &tm, opts.opt)?;
    let t2 = Instant::now();
    let buf = tm
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(JitError::llvm)?;
    let t3 = Instant::now();
    Ok(Object {
        symbol: symbol.to_string(),
        bytes: buf.as_slice().to_vec(),
        lower_time: t1 - t0,
        opt_time: t2 - t1,
        codegen_time: t3 - t2,
    })
}

/// Largest kernel body (IR instructions after early-cse and simplifycfg, with every address
/// through `region`) optimised with the element loops rather than left `optnone` (see
/// [`lower_for`]).
pub const SMALL_BODY: usize = 200;

/// `spec` lowered for `tm` and cleaned up, its body marked `optnone` when large.
///
/// The kernel body is straight-line code run once per launch: extents, intrinsic calls and
/// calls of the element loops. It gets only common-subexpression elimination and CFG clean-up
/// and is then marked `optnone` (so the code generator's fast path handles it); the element
/// loops, where the time of a large launch goes, get the full pipeline and vectorisation.
/// Measured on allreduce_two_shot rank 1 (thread CPU time, best of 5, load average 20–26 on
/// this 2-core machine): P = 64 took 405 ms with the whole module at O3, 121 ms this way
/// (212 ms with instcombine on the body as well); P = 8: 44 ms against 19 ms.
///
/// A body of at most [`SMALL_BODY`] instructions is optimised with the loops instead:
/// optimising it costs little, and unoptimised it keeps every value on the stack, which at
/// small message sizes is a visible part of a launch (`sendrecv_pair`'s sending rank: 78
/// instructions of body per launch, callgrind). Only such a body forms heap addresses itself
/// ([`LowerOptions::heap_addresses`]; it is lowered a second time for that): unoptimised, the
/// check costs about what the `region` call does, and its ~15 IR instructions per address
/// made large kernels slower to compile (the P = 8 wire two-shot 43 → 55 ms CPU, the P = 64
/// schedules 1.3–1.8×, `cargo bench -p symsched-jit --bench compile`). The size is taken
/// without the checks, so the same bodies are optimised as before them. A bound of 400 would
/// optimise more P = 2 bodies, but also P = 8 `allgather_push` (10 → 50 ms CPU to compile,
/// at the goal's limit).
fn lower_for<'ctx>(
    ctx: &'ctx Context,
    spec: &KernelSpec<'_>,
    lower: &LowerOptions,
    tm: &TargetMachine,
) -> Result<(Module<'ctx>, FunctionValue<'ctx>), JitError> {
    use inkwell::attributes::{Attribute, AttributeLoc};
    let calls = LowerOptions {
        heap_addresses: false,
        ..*lower
    };
    let (module, entry) = cleaned_up(ctx, spec, &calls, tm)?;
    let body: usize = entry
        .get_basic_blocks()
        .iter()
        .map(|b| b.get_instructions().count())
        .sum();
    if body <= SMALL_BODY {
        if lower.heap_addresses {
            return cleaned_up(ctx, spec, lower, tm);
        }
    } else {
        for a in ["optnone", "noinline"] {
            entry.add_attribute(
                AttributeLoc::Function,
                ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(a), 0),
            );
        }
    }
    Ok((module, entry))
}

/// `spec` lowered with `lower` for `tm`, after early-cse and simplifycfg.
fn cleaned_up<'ctx>(
    ctx: &'ctx Context,
    spec: &KernelSpec<'_>,
    lower: &LowerOptions,
    tm: &TargetMachine,
) -> Result<(Module<'ctx>, FunctionValue<'ctx>), JitError> {
    let module = lower::lower(ctx, spec, lower)?;
    let entry = module
        .get_function(&spec.name())
        .ok_or_else(|| JitError::llvm("the kernel function is missing"))?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    module
        .run_passes(
            "function(early-cse,simplifycfg)",
            tm,
            PassBuilderOptions::create(),
        )
        .map_err(JitError::llvm)?;
    Ok((module, entry))
}

/// The rest of the pipeline after [`lower_for`].
fn optimize(module: &Module<'_>, tm: &TargetMachine, opt: OptLevel) -> Result<(), JitError> {
    // The loop vectoriser does the work; straight-line SLP vectorisation finds nothing left
    // in the loops and costs ~7 % of the pipeline.
    let po = PassBuilderOptions::create();
    po.set_loop_slp_vectorization(false);
    module
        .run_passes(opt.pipeline(), tm, po)
        .map_err(JitError::llvm)
}

/// The optimised IR of a kernel for `target`, as text (what `compile_object` generates code
/// from).
pub fn optimized_ir(
    spec: &KernelSpec<'_>,
    opts: &CompileOptions,
    target: &HostTarget,
) -> Result<String, JitError> {
    init()?;
    let ctx = Context::create();
    let tm = target.machine(opts.opt)?;
    let (module, _) = lower_for(&ctx, spec, &lower_options(opts, target), &tm)?;
    optimize(&module, &tm, opts.opt)?;
    Ok(module.print_to_string().to_string())
}

/// The process's LLJIT and the entry points linked so far.
struct Linker {
    jit: llvm_sys::orc2::lljit::LLVMOrcLLJITRef,
    loaded: HashMap<String, usize>,
}

// SAFETY: the LLJIT handle is used only under the mutex below; ORC itself is thread-safe.
unsafe impl Send for Linker {}

/// The message of an LLVM error (consumed).
unsafe fn error_text(e: llvm_sys::error::LLVMErrorRef) -> String {
    let msg = llvm_sys::error::LLVMGetErrorMessage(e);
    let s = CStr::from_ptr(msg).to_string_lossy().into_owned();
    llvm_sys::error::LLVMDisposeErrorMessage(msg);
    s
}

fn linker() -> Result<&'static Mutex<Linker>, JitError> {
    static L: OnceLock<Result<Mutex<Linker>, String>> = OnceLock::new();
    L.get_or_init(|| {
        init().map_err(|e| e.to_string())?;
        // SAFETY: plain LLVM C API calls on fresh objects; errors are checked and consumed.
        unsafe {
            use llvm_sys::orc2::lljit::*;
            use llvm_sys::orc2::*;
            let mut jit = std::ptr::null_mut();
            let e = LLVMOrcCreateLLJIT(&mut jit, std::ptr::null_mut());
            if !e.is_null() {
                return Err(error_text(e));
            }
            let mut gen = std::ptr::null_mut();
            let prefix = LLVMOrcLLJITGetGlobalPrefix(jit);
            let e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                &mut gen,
                prefix,
                None,
                std::ptr::null_mut(),
            );
            if !e.is_null() {
                return Err(error_text(e));
            }
            LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit), gen);
            Ok(Mutex::new(Linker {
                jit,
                loaded: HashMap::new(),
            }))
        }
    })
    .as_ref()
    .map_err(|e| JitError::Llvm(format!("cannot create the JIT linker: {e}")))
}

/// Link `object` into the process (once per symbol) and return its entry point.
pub fn load(object: &Object) -> Result<KernelFn, JitError> {
    load_bytes(&object.bytes, &object.symbol)
}

/// [`load`] for object bytes read back from the cache.
pub fn load_bytes(bytes: &[u8], symbol: &str) -> Result<KernelFn, JitError> {
    let mut l = linker()?.lock().unwrap_or_else(|e| e.into_inner());
    let addr = match l.loaded.get(symbol) {
        Some(a) => *a,
        None => {
            let name = CString::new(symbol).map_err(JitError::llvm)?;
            // SAFETY: LLVM C API; the memory buffer is a copy owned (and freed) by LLJIT; the
            // object is one `compile_object` produced (the cache checks its key), whose only
            // external references are libc functions resolved from this process.
            let addr = unsafe {
                use llvm_sys::orc2::lljit::*;
                let mb = llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy(
                    bytes.as_ptr() as *const c_char,
                    bytes.len(),
                    name.as_ptr(),
                );
                let dylib = LLVMOrcLLJITGetMainJITDylib(l.jit);
                let e = LLVMOrcLLJITAddObjectFile(l.jit, dylib, mb);
                if !e.is_null() {
                    return Err(JitError::Llvm(format!(
                        "cannot link kernel object {symbol}: {}",
                        error_text(e)
                    )));
                }
                let mut addr = 0u64;
                let e = LLVMOrcLLJITLookup(l.jit, &mut addr, name.as_ptr());
                if !e.is_null() {
                    return Err(JitError::Llvm(format!(
                        "kernel object does not define {symbol}: {}",
                        error_text(e)
                    )));
                }
                addr as usize
            };
            if addr == 0 {
                return Err(JitError::Llvm(format!("{symbol} resolved to null")));
            }
            l.loaded.insert(symbol.to_string(), addr);
            addr
        }
    };
    // SAFETY: `addr` is the address of the kernel function `symbol`, generated with the
    // `KernelFn` signature (lower::lower), linked into this process for its lifetime.
    Ok(unsafe { std::mem::transmute::<usize, KernelFn>(addr) })
}
