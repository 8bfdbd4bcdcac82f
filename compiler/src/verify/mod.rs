//! The verifier: proves properties of one instantiated [`Program`] (one group size, one binding
//! of its params), symbolically. Rules and codes are documented in `docs/verifier.md`.
//!
//! Order of the rules: structural checks that need no ordering (the roles' shapes, bounds,
//! placement) first; then the happens-before graph; deadlock (a simulation); and only for
//! programs that can run to completion, races, the entry rule, the host-collective mixing rule
//! and the postcondition, which all need a happens-before-consistent order.

use crate::diag::{Diagnostic, Severity, Span};
use crate::ir::{graph, Program, StepRef};
use symsched_plan::{Cmp, Op, SignalMode};

mod bounds;
mod check;
mod deadlock;
mod dual;
mod entry;
mod folds;
mod interop;
mod placement;
mod postcondition;
mod race;
mod readonly;
mod replica;
mod symbolic;
#[cfg(test)]
pub(crate) mod testutil;

pub use check::{check, check_program};
pub use dual::verify_dual;

/// Most errors of one rule reported for one program; the rest are summarised in a note.
const MAX_PER_RULE: usize = 8;

/// Findings of a successful verification that are not refusals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub warnings: Vec<Diagnostic>,
    /// E.g. "dual identity accepted assuming replicated downstream (Megatron g)".
    pub notes: Vec<Diagnostic>,
    /// How every reduced output chunk is computed (empty for collectives that do not reduce).
    pub folds: symsched_plan::FoldTable,
}

/// Verify one instantiated program: bounds, placement, deadlock, races, host-collective mixing
/// and the collective's postcondition. Returns every refusal (errors only) or a report with
/// warnings and notes.
pub fn verify_program(prog: &Program) -> Result<Report, Vec<Diagnostic>> {
    // A role whose chunking does not align with the collective's blocks (E0403) or a missing
    // role (E0404) explains every extent mismatch the bounds rule would find after it.
    let shape = postcondition::shape_errors(prog);
    if !shape.is_empty() {
        return Err(cap(shape));
    }
    let mut errors = Vec::new();
    let structural = bounds::check(prog);
    let structurally_sound = structural.is_empty();
    errors.extend(cap(structural));
    errors.extend(cap(placement::check(prog)));
    errors.extend(readonly::check(prog));
    if !structurally_sound {
        // Later rules index buffers, chunks and ranks by the regions' values.
        return Err(errors);
    }
    let g = graph::build(prog);
    let stuck = deadlock::check(prog, &g);
    if !stuck.is_empty() || g.happens_before().is_none() {
        errors.extend(cap(stuck));
        if errors.is_empty() {
            // The simulation ran to completion yet the sync edges form a cycle: report it.
            errors.push(deadlock::cycle_error(prog, &g));
        }
        return Err(errors);
    }
    let hb = g.happens_before().expect("checked above");
    if prog
        .steps()
        .any(|(_, s)| matches!(s.op, Op::HostColl { .. }))
    {
        let no_barrier = graph::build_with(prog, false);
        match no_barrier.happens_before() {
            Some(shmem_hb) => errors.extend(cap(interop::check(prog, shmem_hb))),
            // Without the barrier a wait may lack its signal's ordering; the cycle itself is
            // reported by the deadlock rule on the full graph, so use that order here.
            None => errors.extend(cap(interop::check(prog, hb))),
        }
    }
    let locs = race::locations(prog);
    errors.extend(cap(race::check(prog, hb, &locs)));
    let (early_reads, early_writes) = entry::check(prog, hb, &locs);
    errors.extend(cap(early_reads));
    errors.extend(cap(early_writes));
    let mut fold_warnings = Vec::new();
    let mut table = symsched_plan::FoldTable::default();
    if errors.is_empty() {
        let proved = postcondition::check(prog, hb);
        errors.extend(cap(proved.errors));
        fold_warnings = proved.warnings;
        if errors.is_empty() {
            if let Some(run) = &proved.run {
                errors.extend(replica::check(prog, run));
                table = folds::table(prog, run);
            }
        }
    }
    if errors.is_empty() {
        let mut warnings = warnings(prog);
        warnings.extend(fold_warnings);
        Ok(Report {
            warnings,
            notes: Vec::new(),
            folds: table,
        })
    } else {
        Err(errors)
    }
}

/// W0422: `==`, `<`, `<=` waits on add-slots are exact only within one launch.
fn warnings(prog: &Program) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (at, s) in prog.steps() {
        let Op::Wait { slot, cmp, .. } = &s.op else {
            continue;
        };
        let add = prog
            .signals
            .get(*slot as usize)
            .is_some_and(|x| x.mode == SignalMode::Add);
        if add && matches!(cmp, Cmp::Eq | Cmp::Lt | Cmp::Le) && !graph::is_credit_slot(prog, *slot)
        {
            out.push(
                Diagnostic::warning(
                    "W0422",
                    format!(
                        "[deadlock] {}: this comparison on an add-signal is exact only within one launch",
                        step_text(prog, at)
                    ),
                )
                .with_label(s.span, "a peer running ahead into the next launch can overshoot")
                .with_help("use `>=` (or `>`), which stays correct across back-to-back launches"),
            );
        }
    }
    out
}

/// The findings of a rule that may find one problem per pair of accesses: the first
/// [`MAX_PER_RULE`] diagnostics, and a count of the rest, which are never built — a program with
/// millions of racing pairs costs counting them, not millions of messages.
pub(crate) struct Findings {
    kept: Vec<Diagnostic>,
    more: usize,
    /// What [`Self::more`] counts, for the closing note.
    unit: &'static str,
}

impl Findings {
    pub(crate) fn new(unit: &'static str) -> Findings {
        Findings {
            kept: Vec::new(),
            more: 0,
            unit,
        }
    }

    /// Whether further findings are only counted.
    pub(crate) fn full(&self) -> bool {
        self.kept.len() >= MAX_PER_RULE
    }

    /// Keep `d`, or count it when full.
    pub(crate) fn push(&mut self, d: Diagnostic) {
        if self.full() {
            self.more += 1;
        } else {
            self.kept.push(d);
        }
    }

    /// Count one more finding that is not shown.
    pub(crate) fn skip(&mut self) {
        self.more += 1;
    }

    pub(crate) fn into_vec(mut self) -> Vec<Diagnostic> {
        if self.more > 0 {
            if let Some(last) = self.kept.last_mut() {
                last.notes
                    .push(format!("{} more {} not shown", self.more, self.unit));
            }
        }
        self.kept
    }
}

/// Keep the first [`MAX_PER_RULE`] errors and summarise the rest in a note on the last kept.
fn cap(mut diags: Vec<Diagnostic>) -> Vec<Diagnostic> {
    if diags.len() > MAX_PER_RULE {
        let more = diags.len() - MAX_PER_RULE;
        diags.truncate(MAX_PER_RULE);
        if let Some(last) = diags.last_mut() {
            last.notes
                .push(format!("{more} more finding(s) of this rule not shown"));
        }
    }
    diags
}

/// `rank R step I `op``, the way every refusal names a step.
pub(crate) fn step_text(prog: &Program, at: StepRef) -> String {
    format!(
        "rank {} step {} `{}`",
        at.rank,
        at.index,
        prog.source_op_text(&prog.step(at).op)
    )
}

/// The span of a step (the statement it came from).
pub(crate) fn span_of(prog: &Program, at: StepRef) -> Span {
    prog.step(at).span
}

/// An error about one step, labelled with its span.
pub(crate) fn step_error(
    prog: &Program,
    code: &'static str,
    at: StepRef,
    message: String,
    label: impl Into<String>,
) -> Diagnostic {
    let s = prog.step(at);
    let mut d = Diagnostic::error(code, message).with_label(s.span, label);
    for (i, outer) in s.inlined_from.iter().enumerate() {
        d = d.with_label(
            *outer,
            if i == 0 {
                "inlined by this `use`"
            } else {
                "…via this `use`"
            },
        );
    }
    d
}

/// A note-severity diagnostic (for [`Report::notes`]).
pub(crate) fn note(code: &'static str, message: String, span: Span) -> Diagnostic {
    Diagnostic {
        severity: Severity::Note,
        ..Diagnostic::error(code, message).with_label(span, "here")
    }
}
