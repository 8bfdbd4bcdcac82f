//! `symsched compile FILE --ranks P --emit plan|ir|dot [-o PATH] [--schedule NAME]
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
