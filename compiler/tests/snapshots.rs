//! Snapshots of every back end for every standard schedule at P = 4 (params root = 0, src = 0,
//! dst = 1, L = 2), and for the derived dual `F.dual` of each that says `dual derived` (with the
//! dual params: a sendrecv's src and dst swapped), under `snapshots/{ir,plan,dot}/`. Review changes by reading the `.snap.new`
//! files (or `cargo insta review`) before accepting them.

use std::collections::BTreeMap;
use symsched_compiler::back::{emit_dot, emit_ir};
use symsched_compiler::ir::transpose::{derived_name, dual_params};
use symsched_compiler::pipeline::{
    compile, example_params, standard_library, CompileOptions, Compiled,
};

const P: u32 = 4;

fn compiled_examples() -> Vec<(String, Compiled)> {
    let lib = standard_library();
    let mut names: Vec<(String, BTreeMap<String, i64>)> = Vec::new();
    for s in lib.schedules() {
        let params = example_params(&s.name);
        let derived = derived_name(&s.name);
        if lib.schedule(&derived).is_some() {
            names.push((derived, dual_params(s.collective, &params)));
        }
        names.push((s.name, params));
    }
    names.sort();
    names
        .into_iter()
        .map(|(name, params)| {
            let c =
                compile(&lib, &name, P, &params, &CompileOptions::default()).unwrap_or_else(|d| {
                    panic!(
                        "{name} P={P}:\n{}",
                        symsched_compiler::diag::render_all(&d, lib.sources())
                    )
                });
            (name, c)
        })
        .collect()
}

fn settings(backend: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(format!("../../snapshots/{backend}"));
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

#[test]
fn ir_snapshots() {
    settings("ir").bind(|| {
        for (name, c) in compiled_examples() {
            insta::assert_snapshot!(name, emit_ir(&c.program));
        }
    });
}

#[test]
fn plan_snapshots() {
    settings("plan").bind(|| {
        for (name, c) in compiled_examples() {
            insta::assert_snapshot!(name, c.plan.to_json());
        }
    });
}

#[test]
fn dot_snapshots() {
    settings("dot").bind(|| {
        for (name, c) in compiled_examples() {
            insta::assert_snapshot!(name, emit_dot(&c.program));
        }
    });
}
