//! `symsched compile FILE --ranks P --emit ascendc -o DIR`: write the Ascend C kernel, its step
//! table, the host launch stub, the C header and the CANN `CMakeLists.txt` for one compiled plan
//! (see docs/ascendc.md).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};
use symsched_plan::Plan;

/// Launch types of the generated kernel (flattened into `compile`'s arguments).
#[derive(clap::Args, Debug, Clone)]
pub struct AscendcArgs {
    /// Data dtype of the kernel (f32, f64, f16, bf16, i32, i64).
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    pub dtype: DType,
    /// Wire dtype for `wire` buffers (default: the data dtype; f16, bf16, e4m3, e5m2 for
    /// low-precision transport).
    #[arg(long, value_parser = parse_dtype)]
    pub wire: Option<DType>,
    /// Reduce op (sum, avg, max, min).
    #[arg(long, default_value = "sum", value_parser = parse_op)]
    pub op: ReduceOp,
    /// Unified-buffer bytes the kernel's tiles may use.
    #[arg(long, default_value_t = symsched_kernels::lower::DEFAULT_UB_BYTES)]
    pub ub_bytes: u32,
    /// blockDim: vector cores each step's data is split over; for kernels with matmul steps, AI
    /// Cores of one Cube core and two vector cores each (at most 8).
    #[arg(long, default_value_t = 1)]
    pub block_dim: u32,
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse()
}

fn parse_op(s: &str) -> Result<ReduceOp, String> {
    ReduceOp::parse(s).map_err(|e| format!("{e} (expected sum, avg, max or min)"))
}

/// Lower `plan` and write its files into `dir` (created if missing); returns the paths written.
pub fn emit(plan: &Plan, args: &AscendcArgs, dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    let Some(dir) = dir else {
        bail!("--emit ascendc writes several files: give a directory with -o DIR");
    };
    let opts = LowerOptions {
        dtype: args.dtype,
        wire: args.wire.unwrap_or(args.dtype),
        op: args.op,
        ub_bytes: args.ub_bytes,
        block_dim: args.block_dim,
    };
    let lowered = lower(plan, &opts)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (name, text) in lowered.project_files() {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
