//! `symsched check FILE... --ranks P[,P..] [--param k=v]...`: verify every schedule defined in
//! the given files for every group size and every admissible parameter binding.
//!
//! Output volume is bounded: per schedule, the diagnostics of the first [`SHOWN`] refused
//! instantiations (and of the first [`SHOWN`] with warnings) are printed in full; the others
//! are counted in one line naming their codes and instantiations. Each instantiation's
//! diagnostics are already capped per rule by the verifier, and every instantiation is bounded
//! in time and memory (`compiler/src/ir/limits.rs`).

use crate::common::{self, describe_binding, load, param_map, parse_param};
use anyhow::Result;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use symsched_compiler::diag::Diagnostic;
use symsched_compiler::library::Library;
use symsched_compiler::verify;

/// Instantiations of one schedule whose diagnostics are printed in full, per kind (refusals,
/// warnings).
const SHOWN: usize = 3;

/// Instantiations not printed in full, per kind: how many, their codes and the first few
/// bindings.
#[derive(Default)]
struct Unshown {
    count: usize,
    codes: BTreeSet<&'static str>,
    first: Vec<String>,
}

impl Unshown {
    /// Print `diags` for `binding` in full while fewer than [`SHOWN`] were, else count them.
    fn report(&mut self, shown: &mut usize, lib: &Library, header: String, diags: &[Diagnostic]) {
        if *shown < SHOWN {
            *shown += 1;
            eprintln!("{header}");
            common::print_diagnostics(lib, diags);
            return;
        }
        self.count += 1;
        self.codes.extend(diags.iter().map(|d| d.code));
        if self.first.len() < 4 {
            self.first.push(header);
        }
    }

    /// The summary line, if anything was left unshown.
    fn summary(&self, what: &str) -> Option<String> {
        (self.count > 0).then(|| {
            let codes: Vec<&str> = self.codes.iter().copied().collect();
            let more = if self.count > self.first.len() {
                ", …"
            } else {
                ""
            };
            format!(
                "… {} more instantiation(s) {what} not shown ({}): {}{more}",
                self.count,
                codes.join(", "),
                self.first.join("; ")
            )
        })
    }
}

/// Verify schedules for the given group sizes (exit 0 only if all verify).
#[derive(clap::Args)]
pub struct Args {
    /// `.sched` files; the other `.sched` files in their directories are loaded too, so duals
    /// and `use` across files resolve.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Group sizes to verify, comma-separated (1..=64).
    #[arg(long, short = 'r', value_delimiter = ',', required = true,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    ranks: Vec<u32>,
    /// Fix a schedule parameter instead of checking all its values (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, i64)>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let fixed = param_map(&args.params)?;
    let loaded = match load(&args.files) {
        Ok(l) => l,
        Err(rendered) => {
            eprint!("{rendered}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let lib = &loaded.lib;
    let schedules: Vec<_> = lib
        .schedules()
        .into_iter()
        .filter(|s| loaded.named.contains(&s.file))
        .collect();
    if schedules.is_empty() {
        eprintln!("error: the given files define no schedule");
        return Ok(ExitCode::FAILURE);
    }
    let mut all_ok = true;
    for sched in &schedules {
        let (mut verified, mut refused, mut warnings) = (0usize, 0usize, 0usize);
        let (mut shown_refused, mut shown_warned) = (0usize, 0usize);
        let (mut unshown_refused, mut unshown_warned) = (Unshown::default(), Unshown::default());
        // Only the parameters this schedule declares are fixed for it.
        let mine: std::collections::BTreeMap<String, i64> = fixed
            .iter()
            .filter(|(k, _)| sched.params.iter().any(|p| &p.name == *k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for &p in &args.ranks {
            let space = match lib.param_space(&sched.name, p, &mine) {
                Ok(s) => s,
                Err(d) => {
                    let header = format!("{}: {}", sched.name, describe_binding(p, &mine));
                    unshown_refused.report(&mut shown_refused, lib, header, &d);
                    refused += 1;
                    continue;
                }
            };
            for binding in space {
                match verify::check(lib, &sched.name, p, &binding) {
                    Ok(report) => {
                        verified += 1;
                        if !report.warnings.is_empty() {
                            warnings += report.warnings.len();
                            let header =
                                format!("{}: {}", sched.name, describe_binding(p, &binding));
                            unshown_warned.report(
                                &mut shown_warned,
                                lib,
                                header,
                                &report.warnings,
                            );
                        }
                    }
                    Err(d) => {
                        refused += 1;
                        let header = format!("{}: {}", sched.name, describe_binding(p, &binding));
                        unshown_refused.report(&mut shown_refused, lib, header, &d);
                    }
                }
            }
        }
        for line in [
            unshown_refused.summary("refused"),
            unshown_warned.summary("with warnings"),
        ]
        .into_iter()
        .flatten()
        {
            eprintln!("{line}");
        }
        let ranks: Vec<String> = args.ranks.iter().map(u32::to_string).collect();
        let warn = if warnings > 0 {
            format!(", {warnings} warning(s)")
        } else {
            String::new()
        };
        if refused == 0 && verified > 0 {
            println!(
                "ok    {}: {verified} instantiation(s) verified for P in {{{}}}{warn}",
                sched.name,
                ranks.join(",")
            );
        } else {
            all_ok = false;
            println!(
                "FAIL  {}: {refused} refused, {verified} verified for P in {{{}}}{warn}",
                sched.name,
                ranks.join(",")
            );
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
