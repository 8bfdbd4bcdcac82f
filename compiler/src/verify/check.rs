//! `check`: verify one schedule at one group size and param binding, then every declared dual.

use super::{note, verify_dual, verify_program, Report};
use crate::diag::Diagnostic;
use crate::ir::Program;
use crate::library::Library;
use std::collections::BTreeMap;
use symsched_plan::{CollectiveKind, DualDecl};

/// Instantiate `name` at P with `params`, verify it, instantiate every declared dual at the same
/// P with its mapped params and check it is the adjoint; `identity assuming replicated` is
/// accepted only for allreduce (and reported as a note).
pub fn check(
    lib: &Library,
    name: &str,
    group_size: u32,
    params: &BTreeMap<String, i64>,
) -> Result<Report, Vec<Diagnostic>> {
    check_program(lib, name, group_size, params).map(|(_, report)| report)
}

/// [`check`], also returning the verified program so a caller that goes on to compile it need
/// not instantiate it again.
pub fn check_program(
    lib: &Library,
    name: &str,
    group_size: u32,
    params: &BTreeMap<String, i64>,
) -> Result<(Program, Report), Vec<Diagnostic>> {
    let prog = lib.instantiate(name, group_size, params)?;
    let mut report = verify_program(&prog)?;
    let mut errors = Vec::new();
    for (dual, span) in &prog.duals {
        match dual {
            DualDecl::IdentityAssumingReplicated => {
                if prog.collective == CollectiveKind::Allreduce {
                    report.notes.push(note(
                        "N0440",
                        format!(
                            "[dual] `{name}`: dual identity accepted assuming replicated downstream (Megatron g); not proved"
                        ),
                        *span,
                    ));
                } else {
                    errors.push(
                        Diagnostic::error(
                            "E0443",
                            format!(
                                "[dual] `identity assuming replicated` is only valid for allreduce, not {}",
                                prog.collective_name()
                            ),
                        )
                        .with_label(*span, "declared here")
                        .with_help("declare the backward schedule instead"),
                    );
                }
            }
            DualDecl::Schedule {
                name: dn,
                params: dp,
            } => {
                let at = |d: Diagnostic| {
                    Diagnostic::error(
                        "E0444",
                        format!(
                            "[dual] `{dn}` (dual of `{name}`) at P = {group_size} with {dp:?}: {}",
                            d.message
                        ),
                    )
                    .with_label(*span, "dual declared here")
                    .with_note(format!("caused by {}", d.code))
                };
                if dn == name && dp == params {
                    // The schedule is its own dual (same name, same binding): the program is
                    // the one just instantiated and verified.
                    if let Err(d) = verify_dual(&prog, &prog, *span) {
                        errors.push(d);
                    }
                    continue;
                }
                let bwd = match lib.instantiate(dn, group_size, dp) {
                    Ok(b) => b,
                    Err(ds) => {
                        // A forward `dual derived` cannot be transposed: its own diagnostic
                        // (E0445) already names the step and the clause.
                        errors.extend(ds.into_iter().map(|d| {
                            if d.code == crate::ir::transpose::E_UNTRANSPOSABLE {
                                d
                            } else {
                                at(d)
                            }
                        }));
                        continue;
                    }
                };
                if let Err(ds) = verify_program(&bwd) {
                    errors.extend(ds.into_iter().take(1).map(at));
                    continue;
                }
                if let Err(d) = verify_dual(&prog, &bwd, *span) {
                    errors.push(d);
                }
            }
        }
    }
    if errors.is_empty() {
        Ok((prog, report))
    } else {
        Err(errors)
    }
}
