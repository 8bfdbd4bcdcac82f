//! The compiler under hostile input: schedules written to make `check` take unbounded time,
//! memory or output are refused with a clear error at every group size, with a bounded amount
//! of diagnostics. Time and memory are measured by `cargo bench -p symsched-compiler --bench
//! hostile`, not asserted here.

use std::collections::BTreeMap;
use symsched_compiler::diag::render_all;
use symsched_compiler::library::Library;
use symsched_compiler::verify;

mod hostile_cases;
use hostile_cases::{CASES, RACES};

/// Group sizes every case is checked at.
const SIZES: &[u32] = &[1, 2, 3, 4, 8, 12, 13, 16, 32, 64];

/// Rendered diagnostics of one refusal may not exceed this (the unbounded form printed 969 MB).
const MAX_RENDERED: usize = 16 << 10;

fn library(src: &str) -> Library {
    let mut lib = Library::new();
    lib.add_source("hostile.sched", src)
        .unwrap_or_else(|d| panic!("{}", render_all(&d, lib.sources())));
    lib
}

#[test]
fn hostile_schedules_are_refused_with_bounded_diagnostics() {
    for &(name, src, code, from) in CASES {
        let lib = library(src);
        let sched = lib.schedules().last().expect("one schedule").name.clone();
        for &p in SIZES.iter().filter(|&&p| p >= from) {
            let d = verify::check(&lib, &sched, p, &BTreeMap::new())
                .err()
                .unwrap_or_else(|| panic!("{name} at P = {p} was accepted"));
            assert_eq!(d[0].code, code, "{name} at P = {p}: {:?}", d[0].message);
            let text = render_all(&d, lib.sources());
            assert!(
                text.len() < MAX_RENDERED,
                "{name} at P = {p}: {} bytes of diagnostics",
                text.len()
            );
        }
    }
}

#[test]
fn the_loop_nest_diagnostic_names_the_nest_and_its_size() {
    let (_, src, _, _) = CASES[1];
    let lib = library(src);
    let d = verify::check(&lib, "nest", 64, &BTreeMap::new()).expect_err("refused");
    let m = &d[0].message;
    assert!(m.contains("`a`, `b`, `c`, `d`, `e`"), "{m}");
    assert!(m.contains("64 × 64 × 64 × 64 × 64"), "{m}");
    assert!(m.contains("1.07e9 steps per rank"), "{m}");
    // One label per loop of the nest.
    assert_eq!(d[0].labels.len(), 5, "{:?}", d[0].labels);
}

/// Every rank puts P times into the same slot of every peer: P² racing writes per location.
/// The race rule shows 8 findings and counts the rest instead of building a diagnostic per pair
/// (which took 9 GB at P = 64).
#[test]
fn quadratically_many_races_are_counted_not_built() {
    let src = RACES;
    let lib = library(src);
    let d = verify::check(&lib, "n2", 16, &BTreeMap::new()).expect_err("refused");
    assert!(d.iter().all(|x| x.code == "E0411"), "{d:?}");
    assert_eq!(d.len(), 8);
    let note = d[7].notes.last().expect("a summary note");
    assert!(
        note.contains("more location(s) with unordered accesses not shown"),
        "{note}"
    );
}
