//! `symsched compile FILE --ranks P --emit plan|ir|dot|llvm|ascendc [-o PATH] [--schedule NAME]
//! [--param k=v]... [--no-opt]`: compile one schedule for one group size.

use crate::common::{
    self, load, param_map, parse_param, pick_schedule, single_binding, write_output,
};
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;
use symsched_compiler::back::{emit_dot, emit_ir};
use symsched_compiler::pipeline::{compile, CompileOptions, Compiled};

/// What `compile` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Emit {
    /// The JSON plan the runtime executes (docs/plan-schema.md).
    Plan,
    /// The IR text dump.
    Ir,
    /// Graphviz DOT of the dataflow graph.
    Dot,
    /// Ascend C kernel, step table, launch stub and C header into the directory `-o DIR`.
    Ascendc,
    /// LLVM IR of the host kernels, one module per rank (types from --dtype, --wire, --op;
    /// see docs/llvm.md).
    Llvm,
}

/// Compile one schedule for one group size to a plan, IR text or DOT.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,
    /// Output format.
    #[arg(long, value_enum, default_value = "plan")]
    emit: Emit,
    /// Output file (default: stdout); a directory for `--emit ascendc`.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    #[command(flatten)]
    ascendc: crate::ascendc::AscendcArgs,
    #[command(flatten)]
    llvm: LlvmArgs,
}

/// Choices of `--emit llvm` (its types are the Ascend C flags: --dtype, --wire, --op).
#[derive(clap::Args)]
pub struct LlvmArgs {
    /// Only this rank's kernel (`--emit llvm`; default: every rank).
    #[arg(long)]
    rank: Option<u32>,
    /// The IR after optimisation for this machine's CPU (`--emit llvm`; default: as lowered).
    #[arg(long)]
    optimized: bool,
}

/// Which schedule to compile, for which group size and parameters (shared with `graph`).
#[derive(clap::Args)]
pub struct Target {
    /// The `.sched` file (its directory's other `.sched` files are loaded too).
    pub file: PathBuf,
    /// Group size (1..=64).
    #[arg(long, short = 'r', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub ranks: u32,
    /// Schedule to compile when the file defines several.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Bind a schedule parameter (repeatable); needed unless it has one admissible value.
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    pub params: Vec<(String, i64)>,
    /// Skip the optimiser.
    #[arg(long)]
    pub no_opt: bool,
}

/// Compile `target`, printing diagnostics; `Ok(None)` means they were printed and the command
/// should fail.
pub fn compile_target(target: &Target) -> Result<Option<(Compiled, common::Loaded)>> {
    let fixed = param_map(&target.params)?;
    let loaded = match load(std::slice::from_ref(&target.file)) {
        Ok(l) => l,
        Err(rendered) => {
            eprint!("{rendered}");
            return Ok(None);
        }
    };
    let name = pick_schedule(&loaded, target.schedule.as_deref())?;
    let binding = single_binding(&loaded.lib, &name, target.ranks, &fixed)?;
    let opts = CompileOptions {
        optimize: !target.no_opt,
    };
    match compile(&loaded.lib, &name, target.ranks, &binding, &opts) {
        Ok(c) => {
            common::print_diagnostics(&loaded.lib, &c.report.warnings);
            Ok(Some((c, loaded)))
        }
        Err(d) => {
            common::print_diagnostics(&loaded.lib, &d);
            Ok(None)
        }
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let Some((compiled, _)) = compile_target(&args.target)? else {
        return Ok(ExitCode::FAILURE);
    };
    let text = match args.emit {
        Emit::Plan => {
            let mut s = compiled.plan.to_json();
            s.push('\n');
            s
        }
        Emit::Ir => emit_ir(&compiled.program),
        Emit::Dot => emit_dot(&compiled.program),
        Emit::Llvm => emit_llvm(&compiled.plan, &args.ascendc, &args.llvm)?,
        Emit::Ascendc => {
            for path in crate::ascendc::emit(&compiled.plan, &args.ascendc, args.output.as_deref())?
            {
                eprintln!("wrote {}", path.display());
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    write_output(args.output.as_deref(), &text)?;
    Ok(ExitCode::SUCCESS)
}

/// The LLVM IR of the plan's host kernels (symsched-jit), rank by rank. A rank whose steps run
/// on several channels has one kernel per channel, printed channel by channel: those are
/// steps-scope kernels (the runtime sends the entry and exit signals around its channels), as
/// a launch-scope kernel cannot bracket concurrent channels.
fn emit_llvm(
    plan: &symsched_plan::Plan,
    kernel: &crate::ascendc::AscendcArgs,
    llvm: &LlvmArgs,
) -> Result<String> {
    use symsched_jit::compile::{optimized_ir, CompileOptions, HostTarget};
    use symsched_jit::{
        emit_llvm, kernel_channels, DType, ElemTypes, KernelSpec, LowerOptions, ReduceOp,
    };
    let data = DType::parse(kernel.dtype.name())?;
    let wire = kernel.wire.map(|w| DType::parse(w.name())).transpose()?;
    let types = ElemTypes::new(data, wire)?;
    let op = ReduceOp::parse(kernel.op.name())?;
    let ranks: Vec<u32> = match llvm.rank {
        Some(r) if r >= plan.group_size => {
            anyhow::bail!("--rank {r} is outside the group of {}", plan.group_size)
        }
        Some(r) => vec![r],
        None => (0..plan.group_size).collect(),
    };
    let opts = CompileOptions::default();
    let target = HostTarget::of(&opts)?;
    let lower = LowerOptions {
        f16: target.f16(),
        ..LowerOptions::default()
    };
    let mut out = String::new();
    for rank in ranks {
        for channel in kernel_channels(plan, rank) {
            let spec = KernelSpec {
                plan,
                rank,
                channel,
                types,
                op,
            };
            out.push_str(&if spec.multi_channel() {
                format!(
                    "; ==== rank {rank} channel {channel} (steps only: the runtime sends the \
                     entry and exit signals around the rank's channels)\n"
                )
            } else {
                format!("; ==== rank {rank}\n")
            });
            out.push_str(&if llvm.optimized {
                let opts = CompileOptions {
                    lower: opts.lower.for_kernel(&spec),
                    ..opts.clone()
                };
                optimized_ir(&spec, &opts, &target)?
            } else {
                emit_llvm(&spec, &lower.for_kernel(&spec))?
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use symsched_compiler::pipeline::{example_params, standard_library};

    fn args(rank: Option<u32>, optimized: bool) -> (crate::ascendc::AscendcArgs, LlvmArgs) {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            a: crate::ascendc::AscendcArgs,
        }
        let f = Flags::parse_from(["x", "--dtype", "bf16", "--wire", "e4m3", "--op", "max"]);
        (f.a, LlvmArgs { rank, optimized })
    }

    #[test]
    fn llvm_ir_names_every_rank_or_the_one_asked_for() {
        let lib = standard_library();
        let name = "allreduce_two_shot_wire";
        let c = compile(&lib, name, 3, &example_params(name), &CompileOptions::default())
            .expect("compiles");
        let (k, l) = args(None, false);
        let all = emit_llvm(&c.plan, &k, &l).expect("lowers");
        for r in 0..3 {
            assert!(all.contains(&format!("define i32 @{name}.r{r}.bf16.e4m3.max(")));
        }
        assert!(all.contains("@symsched.e4m3.encode"));
        let (k, l) = args(Some(2), true);
        let one = emit_llvm(&c.plan, &k, &l).expect("optimises");
        assert!(one.contains("; ==== rank 2") && !one.contains("; ==== rank 0"));
        let (k, l) = args(Some(3), false);
        assert!(emit_llvm(&c.plan, &k, &l).is_err());
    }

    /// A rank whose steps run on several channels prints one steps-scope kernel per channel
    /// (plain and optimised); the other ranks keep their single launch kernel.
    #[test]
    fn llvm_ir_of_a_multi_channel_plan_prints_every_channel() {
        let lib = standard_library();
        let name = "allreduce_two_shot";
        let mut plan = compile(&lib, name, 2, &example_params(name), &CompileOptions::default())
            .expect("compiles")
            .plan;
        let last = plan.ranks[1].steps.len() - 1;
        plan.ranks[1].steps[last].channel = 1;
        for optimized in [false, true] {
            let (k, l) = args(None, optimized);
            let text = emit_llvm(&plan, &k, &l).expect("lowers every channel");
            assert!(text.contains("; ==== rank 0\n"), "{optimized}");
            for c in [0, 1] {
                assert!(
                    text.contains(&format!("; ==== rank 1 channel {c} (steps only")),
                    "{optimized}"
                );
            }
            if !optimized {
                for c in [0, 1] {
                    assert!(text.contains(&format!("define i32 @{name}.r1.bf16.e4m3.max.c{c}(")));
                }
                assert!(text.contains(&format!("define i32 @{name}.r0.bf16.e4m3.max(")));
            }
        }
    }
}
