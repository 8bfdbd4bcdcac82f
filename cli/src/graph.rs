//! `symsched graph FILE --ranks P`: the dataflow graph as DOT on stdout.

use crate::common::write_output;
use crate::compile::{compile_target, Target};
use anyhow::Result;
use std::process::ExitCode;
use symsched_compiler::back::emit_dot;

/// Print the dataflow graph of one schedule as Graphviz DOT.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let Some((compiled, _)) = compile_target(&args.target)? else {
        return Ok(ExitCode::FAILURE);
    };
    write_output(None, &emit_dot(&compiled.program))?;
    Ok(ExitCode::SUCCESS)
}
