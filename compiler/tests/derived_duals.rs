//! Derived duals of the standard library: every standard forward schedule, made to say
//! `dual derived` (in front of its declared duals), verifies for P = 1..8 and every binding of
//! its params, with its derived dual (postcondition of the dual collective, races, deadlock,
//! bounds, and the adjoint check against the forward). The forwards the transposition cannot
//! handle are refused with E0445.

use std::collections::BTreeMap;
use symsched_compiler::diag::render_all;
use symsched_compiler::ir::transpose::{derived_name, dual_collective, E_UNTRANSPOSABLE};
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::STANDARD_LIBRARY;
use symsched_compiler::verify;

/// Forwards whose derived dual is refused, a word of the reason, and the smallest P refused.
const REFUSED: &[(&str, &str, u32)] = &[
    ("allgather_matmul", "operand", 1),
    ("allgather_matmul_pull", "operand", 1),
    ("matmul_reduce_scatter", "operand", 1),
    ("matmul_reduce_scatter_pull", "operand", 1),
    ("allreduce_two_shot_wire", "cast", 1),
    ("alltoallv_push", "runtime-sized", 1),
    ("allreduce_hier", "hostcoll", 1),
    ("allgather_hier", "hostcoll", 1),
    ("reduce_scatter_hier", "hostcoll", 1),
];

/// `text` with its schedule's `dual` clause led by `derived` (unchanged if it has one).
fn with_derived(text: &str) -> String {
    if text.contains("dual derived") || text.contains(", derived") {
        return text.to_string();
    }
    let at = text
        .lines()
        .scan(0usize, |off, l| {
            let start = *off;
            *off += l.len() + 1;
            Some((start, l))
        })
        .find(|(_, l)| !l.trim_start().starts_with("//") && l.contains("dual "))
        .map(|(start, l)| start + l.find("dual ").expect("found"))
        .expect("every standard schedule declares a dual");
    format!("{}dual derived, {}", &text[..at], &text[at + 5..])
}

fn derived_library() -> Library {
    let mut lib = Library::new();
    for (name, text) in STANDARD_LIBRARY {
        if let Err(d) = lib.add_source(name, &with_derived(text)) {
            panic!("{}", render_all(&d, lib.sources()));
        }
    }
    lib
}

#[test]
fn every_standard_forward_has_a_verified_derived_dual_for_p_1_to_8() {
    let lib = derived_library();
    let mut failures = Vec::new();
    let mut derived = 0;
    for s in lib.schedules() {
        let refused_from = REFUSED.iter().find(|(n, _, _)| *n == s.name);
        for p in 1u32..=8 {
            let space = lib
                .param_space(&s.name, p, &BTreeMap::new())
                .expect("param space");
            let refused = refused_from.filter(|(_, _, from)| p >= *from);
            for params in space {
                match (verify::check(&lib, &s.name, p, &params), refused) {
                    (Ok(_), None) => derived += 1,
                    (Err(d), Some((_, why, _))) => {
                        let first = &d[0];
                        if first.code != E_UNTRANSPOSABLE || !first.message.contains(why) {
                            failures.push(format!(
                                "{} P={p}: refused, but not with E0445 ({why}):\n{}",
                                s.name,
                                render_all(&d[..1], lib.sources())
                            ));
                        }
                    }
                    (Ok(_), Some(_)) => {
                        failures.push(format!("{} P={p}: expected E0445, verified", s.name))
                    }
                    (Err(d), None) => failures.push(format!(
                        "{} P={p} {params:?}:\n{}",
                        s.name,
                        render_all(&d[..d.len().min(2)], lib.sources())
                    )),
                }
            }
        }
        // The derived dual is a schedule of the dual collective, found by its name.
        if refused_from.is_none() {
            let info = lib.schedule(&derived_name(&s.name)).expect("derived dual");
            assert_eq!(Some(info.collective), dual_collective(s.collective));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    // 14 forwards, with every root / src-dst binding.
    assert!(derived > 300, "only {derived} instantiations checked");
}

/// A schedule that does not say `dual derived` has no derived dual.
#[test]
fn only_a_forward_that_says_derived_has_one() {
    let mut lib = Library::new();
    for (name, text) in STANDARD_LIBRARY {
        lib.add_source(name, text).expect("loads");
    }
    let has = |n: &str| lib.schedule(&derived_name(n)).is_some();
    assert!(!has("allreduce_two_shot"));
    assert!(lib.schedule("nope.dual").is_none());
}
