//! `symsched`: check, compile, visualise and format `.sched` schedules.
//!
//! One module per subcommand, each with `Args` (clap derive) and `run(Args) -> Result<ExitCode>`;
//! the [`commands!`] list below is the only place that names them, so adding a subcommand is one
//! line there plus its module file.

use clap::Parser;
use std::process::ExitCode;

mod ascendc;
mod common;

/// Declares the subcommand modules, the clap enum and its dispatch from one list of
/// `module => Variant` pairs.
macro_rules! commands {
    ($($module:ident => $variant:ident),* $(,)?) => {
        $(mod $module;)*

        #[derive(clap::Subcommand)]
        enum Command {
            $($variant($module::Args),)*
        }

        impl Command {
            fn run(self) -> anyhow::Result<ExitCode> {
                match self {
                    $(Command::$variant(args) => $module::run(args),)*
                }
            }
        }
    };
}

commands! {
    check => Check,
    compile => Compile,
    graph => Graph,
    fmt => Fmt,
    launch => Launch,
    run => Run,
}

/// Compiler for collective-communication schedules over symmetric memory.
#[derive(Parser)]
#[command(name = "symsched", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
