//! Plans of the standard library for the unit tests of the executor's modules.

use std::collections::BTreeMap;
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_plan::Plan;

/// Standard schedule `name` compiled for `p` ranks with no params.
pub fn standard(name: &str, p: u32) -> Plan {
    standard_with(name, p, &BTreeMap::new())
}

/// Standard schedule `name` compiled for `p` ranks with `params`.
pub fn standard_with(name: &str, p: u32, params: &BTreeMap<String, i64>) -> Plan {
    compile(
        &standard_library(),
        name,
        p,
        params,
        &CompileOptions::default(),
    )
    .unwrap_or_else(|d| panic!("{name} verifies at P = {p}: {d:?}"))
    .plan
}
