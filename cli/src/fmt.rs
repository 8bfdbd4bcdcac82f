//! `symsched fmt FILE... [--check]`: rewrite files in canonical form, or with `--check` list the
//! ones that are not and fail.

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use symsched_compiler::diag::{render_all, SourceMap};
use symsched_compiler::front::fmt::format_source;

/// Format `.sched` files in place (canonical layout, idempotent).
#[derive(clap::Args)]
pub struct Args {
    /// Files to format.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Do not write; exit 1 if any file is not formatted.
    #[arg(long)]
    check: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut failed = false;
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let name = path.display().to_string();
        let formatted = match format_source(&name, &text) {
            Ok(f) => f,
            Err(diags) => {
                let mut sm = SourceMap::default();
                sm.add(name.clone(), text.clone());
                eprint!("{}", render_all(&diags, &sm));
                failed = true;
                continue;
            }
        };
        if formatted == text {
            continue;
        }
        if args.check {
            println!("not formatted: {name}");
            failed = true;
        } else {
            std::fs::write(path, &formatted)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("formatted {name}");
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
