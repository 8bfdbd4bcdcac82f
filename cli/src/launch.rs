//! `symsched launch -n N [--] CMD ARGS...`: run N ranks of a command on this node with the
//! torchrun variables and a directory-free rendezvous; forward their output with a `[rank k]`
//! prefix; if one rank fails, stop the others and exit non-zero naming it.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use symsched_runtime::launcher::{launch, FailureCause, LaunchSpec};

/// Run N ranks of a command on this node with the torchrun environment (RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and a directory-free rendezvous;
/// output is prefixed with `[rank k]`; if a rank fails the others are stopped. Exit status: 0
/// when every rank succeeded, 1 when a rank failed, 124 on --timeout, 128+N when the launcher
/// was interrupted by signal N (the ranks are stopped: SIGTERM, then SIGKILL after 1 s).
#[derive(clap::Args)]
pub struct Args {
    /// Number of ranks to start (may exceed the number of cores).
    #[arg(short = 'n', long = "nranks", value_parser = clap::value_parser!(u32).range(1..=250))]
    nranks: u32,
    /// Kill every rank and fail after this many seconds.
    #[arg(long)]
    timeout: Option<u64>,
    /// The command to run (use `--` before it when it has options of its own).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// Runs the launch; exit code 0 only when every rank exited with status 0.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (program, rest) = args.command.split_first().context("no command given")?;
    let mut spec = LaunchSpec::new(args.nranks as usize, program.clone(), rest.iter().cloned());
    spec.timeout = args.timeout.map(Duration::from_secs);
    let outcome =
        launch(&spec).with_context(|| format!("launching {}", program.to_string_lossy()))?;
    let Some(f) = outcome.failure else {
        return Ok(ExitCode::SUCCESS);
    };
    let stopped = if outcome.stopped.is_empty() {
        "no rank was still running".to_string()
    } else {
        format!("stopped ranks {:?}", outcome.stopped)
    };
    eprintln!("symsched launch: {f}; {stopped}");
    Ok(ExitCode::from(match f.cause {
        FailureCause::RankFailed => 1,
        FailureCause::TimedOut => 124,
        FailureCause::Interrupted { signal } => (128 + signal).clamp(129, 255) as u8,
    }))
}
