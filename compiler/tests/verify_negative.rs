//! The verifier's negative suite: every file under `tests/negative/verify/` is a schedule the
//! verifier must refuse. The first line says which diagnostic and where, in the header format
//! of the front-end suite (`grammar/README.md`):
//!
//! ```text
//! // expect: E0421 at 9:5 [ranks=4] [params=root=1] [schedule=NAME]
//! ```
//!
//! The named schedule (default: the last in the file) is checked with `verify::check` (program
//! and declared duals) at `ranks` (default 4) for the given params, or for every binding of its
//! param space until one is refused. The first diagnostic must carry the code and its primary
//! span must start at LINE:COL (1-based).
//!
//! `edit=exit-credits` instead instantiates the schedule, turns every entry credit back into an
//! exit credit (the launch credits before the entry rule) and runs `verify_program`: the
//! compiler never omits an entry credit, so this is how a source file shows E0415.

use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::diag::{render_all, Diagnostic};
use symsched_compiler::ir::graph::is_credit_slot;
use symsched_compiler::ir::Program;
use symsched_compiler::library::Library;
use symsched_compiler::verify;
use symsched_plan::Op;

mod common;
use common::{parse_header, Expect};

/// The first refusal of the file, with the library (for rendering).
fn refusal(path: &str, text: &str, e: &Expect) -> (Library, Option<Vec<Diagnostic>>) {
    let mut lib = Library::new();
    if let Err(d) = lib.add_source(path, text) {
        return (lib, Some(d));
    }
    let Some(name) = e
        .schedule
        .clone()
        .or_else(|| lib.schedules().last().map(|s| s.name.clone()))
    else {
        return (lib, None);
    };
    let space = match &e.params {
        Some(p) => vec![p.clone()],
        None => match lib.param_space(&name, e.ranks, &BTreeMap::new()) {
            Ok(s) => s,
            Err(d) => return (lib, Some(d)),
        },
    };
    for params in space {
        let refused = match e.edit.as_deref() {
            None => verify::check(&lib, &name, e.ranks, &params).err(),
            Some("exit-credits") => match lib.instantiate(&name, e.ranks, &params) {
                Err(d) => Some(d),
                Ok(mut prog) => {
                    exit_credits_only(&mut prog);
                    verify::verify_program(&prog).err()
                }
            },
            Some(other) => panic!("unknown edit `{other}`"),
        };
        if refused.is_some() {
            return (lib, refused);
        }
    }
    (lib, None)
}

/// Every entry credit becomes an exit credit: its waits `>= epoch + 1` become `>= epoch + 0`
/// and its entry signals are sent on exit instead.
fn exit_credits_only(prog: &mut Program) {
    let credit: Vec<bool> = (0..prog.signals.len() as u32)
        .map(|s| is_credit_slot(prog, s))
        .collect();
    for step in prog.ranks.iter_mut().flatten() {
        if let Op::Wait { slot, target, .. } = &mut step.op {
            if credit[*slot as usize] {
                target.offset = 0;
            }
        }
    }
    let entries = std::mem::take(&mut prog.entry_signals);
    for (q, ups) in entries.into_iter().enumerate() {
        prog.exit_signals[q].extend(ups);
    }
    prog.entry_signals = vec![Vec::new(); prog.exit_signals.len()];
    prog.assign_epoch_strides();
}

#[test]
fn every_broken_schedule_is_refused_with_its_code_and_span() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/negative/verify");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/negative/verify exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sched"))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let mut per_family: BTreeMap<String, usize> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        let name = f.display().to_string();
        let e = match parse_header(&text) {
            Ok(e) => e,
            Err(m) => {
                failures.push(format!("{name}: {m}"));
                continue;
            }
        };
        *per_family.entry(e.code[..4].to_string()).or_default() += 1;
        let (lib, diags) = refusal(&name, &text, &e);
        let Some(diags) = diags else {
            failures.push(format!("{name}: accepted, expected {}", e.code));
            continue;
        };
        let d = &diags[0];
        let at = d.span().map(|s| lib.sources().line_col(s.file, s.start));
        if d.code != e.code || at != Some((e.line, e.col)) {
            failures.push(format!(
                "{name}: expected {} at {}:{}, found {} at {at:?}\n{}",
                e.code,
                e.line,
                e.col,
                d.code,
                render_all(&diags[..1], lib.sources())
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // At least two broken schedules per rule family (E040x … E046x).
    for fam in ["E040", "E041", "E042", "E043", "E044", "E045", "E046"] {
        assert!(
            per_family.get(fam).copied().unwrap_or(0) >= 2,
            "fewer than two negative cases for {fam}x: {per_family:?}"
        );
    }
}
