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

/// Distinct diagnostics of one schedule printed in full, per kind (refusals, warnings).
const SHOWN: usize = 8;
/// Instantiations listed by name after a diagnostic they repeat.
const LISTED: usize = 8;

/// A diagnostic's code, primary span and ordinal among those at that place in its instantiation.
type Key = (&'static str, Option<symsched_compiler::diag::Span>, usize);

/// One diagnostic as the first instantiation reported it, and the other instantiations that
/// reported the same code at the same place.
struct Group {
    key: Key,
    header: String,
    diag: Diagnostic,
    repeats: Vec<String>,
}

/// The diagnostics of one schedule over all its instantiations, grouped by (code, primary
/// span), so a diagnostic that every instantiation repeats is printed once with the list of
/// instantiations instead of once per instantiation.
#[derive(Default)]
struct Grouped {
    groups: Vec<Group>,
}

impl Grouped {
    /// `header` is `schedule: binding`; repeats list the binding alone.
    fn add(&mut self, header: &str, diags: &[Diagnostic]) {
        let binding = header.split_once(": ").map_or(header, |(_, b)| b);
        // The n-th diagnostic with a (code, span) of one instantiation repeats the n-th of
        // another; several at one place within one instantiation (one per rank) stay distinct.
        let mut seen: Vec<(Key, usize)> = Vec::new();
        for d in diags {
            let place = (d.code, d.labels.first().map(|l| l.0));
            let ordinal = match seen.iter_mut().find(|(k, _)| (k.0, k.1) == place) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    seen.push(((place.0, place.1, 0), 0));
                    0
                }
            };
            let key = (place.0, place.1, ordinal);
            match self.groups.iter_mut().find(|g| g.key == key) {
                Some(g) => g.repeats.push(binding.to_string()),
                None => self.groups.push(Group {
                    key,
                    header: header.to_string(),
                    diag: d.clone(),
                    repeats: Vec::new(),
                }),
            }
        }
    }

    /// Print the first [`SHOWN`] groups in full, then one line for the rest.
    fn print(&self, lib: &Library, what: &str) {
        for g in self.groups.iter().take(SHOWN) {
            eprintln!("{}", g.header);
            let mut d = g.diag.clone();
            if !g.repeats.is_empty() {
                let mut listed: Vec<&str> =
                    g.repeats.iter().take(LISTED).map(String::as_str).collect();
                if g.repeats.len() > LISTED {
                    listed.push("…");
                }
                d.notes.push(format!(
                    "the same {} here in {} more instantiation(s): {}",
                    d.code,
                    g.repeats.len(),
                    listed.join("; ")
                ));
            }
            common::print_diagnostics(lib, std::slice::from_ref(&d));
        }
        let rest = &self.groups[self.groups.len().min(SHOWN)..];
        if !rest.is_empty() {
            let codes: BTreeSet<&str> = rest.iter().map(|g| g.diag.code).collect();
            let n: usize = rest.iter().map(|g| 1 + g.repeats.len()).sum();
            eprintln!(
                "… {} more distinct diagnostic(s) {what} not shown ({}), in {n} report(s); first at {}",
                rest.len(),
                codes.into_iter().collect::<Vec<_>>().join(", "),
                rest[0].header
            );
        }
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
    // A `--param` no checked schedule declares is a typo, not a no-op (compile and run refuse
    // it too).
    if let Some(name) = fixed
        .keys()
        .find(|k| !schedules.iter().any(|s| s.params.iter().any(|p| &p.name == *k)))
    {
        let declared: std::collections::BTreeSet<&str> = schedules
            .iter()
            .flat_map(|s| s.params.iter().map(|p| p.name.as_str()))
            .collect();
        eprintln!(
            "error: --param {name}: no schedule in the given files has a parameter `{name}` (declared: {})",
            if declared.is_empty() {
                "none".to_string()
            } else {
                declared.into_iter().collect::<Vec<_>>().join(", ")
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    let mut all_ok = true;
    for sched in &schedules {
        let (mut verified, mut refused, mut warnings) = (0usize, 0usize, 0usize);
        let (mut refusals, mut warned) = (Grouped::default(), Grouped::default());
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
                    refusals.add(&header, &d);
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
                            warned.add(&header, &report.warnings);
                        }
                    }
                    Err(d) => {
                        refused += 1;
                        let header = format!("{}: {}", sched.name, describe_binding(p, &binding));
                        refusals.add(&header, &d);
                    }
                }
            }
        }
        refusals.print(lib, "refused");
        warned.print(lib, "with warnings");
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
