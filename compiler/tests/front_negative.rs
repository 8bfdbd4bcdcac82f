//! The front-end negative suite: every file under `tests/negative/front/` is a broken schedule
//! whose first line says which diagnostic it must produce and where:
//!
//! ```text
//! // expect: E0303 at 5:21 [ranks=4] [params=root=1,L=2] [schedule=NAME]
//! ```
//!
//! Syntax and name errors (E01xx, E02xx) come from `Library::add_source`. Otherwise the file is
//! instantiated: the named schedule (default: the last one in the file) at `ranks` (default 4)
//! for the given params, or for every binding of its param space until one fails. The first
//! diagnostic must have the code and its primary span must start at LINE:COL (1-based).
//! The header format is documented in `grammar/README.md` for reuse by other suites.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use symsched_compiler::diag::Diagnostic;
use symsched_compiler::library::Library;

mod common;
use common::{parse_header, Expect};

/// The diagnostics the file produces, or None when it is accepted.
fn run(path: &Path, text: &str, e: &Expect) -> (Library, Option<Vec<Diagnostic>>) {
    let mut lib = Library::new();
    if let Err(d) = lib.add_source(&path.display().to_string(), text) {
        return (lib, Some(d));
    }
    let Some(name) = e
        .schedule
        .clone()
        .or_else(|| lib.schedules().last().map(|s| s.name.clone()))
    else {
        return (lib, None);
    };
    let fixed = e.params.clone().unwrap_or_default();
    let space = match lib.param_space(&name, e.ranks, &fixed) {
        Ok(s) => s,
        Err(d) => return (lib, Some(d)),
    };
    for b in space {
        if let Err(d) = lib.instantiate(&name, e.ranks, &b) {
            return (lib, Some(d));
        }
    }
    (lib, None)
}

fn files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/negative/front");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/negative/front exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sched"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_negative_file_fails_with_its_code_and_span() {
    let mut failures = Vec::new();
    let mut per_code: BTreeMap<String, usize> = BTreeMap::new();
    for path in files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let e = match parse_header(&text) {
            Ok(e) => e,
            Err(m) => {
                failures.push(format!("{}: bad header: {m}", path.display()));
                continue;
            }
        };
        *per_code.entry(e.code.clone()).or_default() += 1;
        let (lib, diags) = run(&path, &text, &e);
        let Some(diags) = diags else {
            failures.push(format!("{}: accepted, expected {}", path.display(), e.code));
            continue;
        };
        let d = &diags[0];
        let Some(span) = d.span() else {
            failures.push(format!("{}: {} has no span", path.display(), d.code));
            continue;
        };
        let (line, col) = lib.sources().line_col(span.file, span.start);
        if d.code != e.code || (line, col) != (e.line, e.col) {
            failures.push(format!(
                "{}: expected {} at {}:{}, got {} at {line}:{col}\n{}",
                path.display(),
                e.code,
                e.line,
                e.col,
                d.code,
                symsched_compiler::diag::render_all(&diags, lib.sources())
            ));
        }
        assert!(!d.message.is_empty());
    }
    // Every code the front end defines has at least two broken examples.
    for code in defined_codes() {
        let n = per_code.get(code).copied().unwrap_or(0);
        if n < 2 {
            failures.push(format!("code {code} has {n} negative file(s), needs 2"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Codes declared in `front/codes.rs` (read from the source so a new code needs new tests).
fn defined_codes() -> Vec<&'static str> {
    let src = include_str!("../src/front/codes.rs");
    let mut v: Vec<&'static str> = src
        .lines()
        .filter_map(|l| l.split('"').nth(1))
        .filter(|c| c.starts_with("E0"))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn header_parser_reads_options() {
    let e =
        parse_header("// expect: E0305 at 1:10 ranks=8 params=root=9,L=2 schedule=b\n").unwrap();
    assert_eq!(
        (e.code.as_str(), e.line, e.col, e.ranks),
        ("E0305", 1, 10, 8)
    );
    assert_eq!(e.params.unwrap().get("root"), Some(&9));
    assert_eq!(e.schedule.as_deref(), Some("b"));
    assert!(parse_header("// nothing\n").is_err());
}

#[test]
fn every_code_is_documented_in_the_reference() {
    let readme = include_str!("../../grammar/README.md");
    let missing: Vec<&str> = defined_codes()
        .into_iter()
        .filter(|c| !readme.contains(&format!("### {c}")))
        .collect();
    assert!(
        missing.is_empty(),
        "grammar/README.md lacks a section for {missing:?}"
    );
}
