//! What the binary's end-to-end tests share: running `symsched`, reading its output, compiling
//! a schedule file in-process, and counting the elements a plan's checked run gets wrong.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, CompileOptions};
use symsched_plan::Plan;
use symsched_runtime::exec::harness::{run_local, sizes_for, RunSpec};
use symsched_runtime::exec::{DType, ElemTypes, ReduceOp};

/// Runs the `symsched` binary built for this test, in the test's working directory.
pub fn symsched(args: &[&str]) -> Output {
    symsched_in(Path::new("."), args)
}

/// Runs the `symsched` binary built for this test in `dir` (relative paths resolve there).
pub fn symsched_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_symsched"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("symsched runs")
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A path as a command-line argument.
pub fn arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The plan of `schedule` at `p` ranks, compiled from the schedule file `file` alone.
pub fn compile_file(file: &Path, schedule: &str, p: u32) -> Plan {
    let mut lib = Library::new();
    let src = std::fs::read_to_string(file).expect("readable");
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name");
    lib.add_source(name, &src).expect("parses");
    compile(
        &lib,
        schedule,
        p,
        &BTreeMap::new(),
        &CompileOptions::default(),
    )
    .expect("compiles")
    .plan
}

/// Elements wrong on all ranks after one checked f32 sum launch of `plan` at `count` elements,
/// in-process (the comparison `run --check` makes, against the plan's own reference).
pub fn wrong_elements(plan: &Plan, count: u64) -> u64 {
    let spec = RunSpec {
        types: ElemTypes::new(DType::F32, None).expect("f32"),
        op: ReduceOp::Sum,
        sizes: sizes_for(plan, count, &[]),
        warmup: 0,
        iters: 1,
        check: true,
        staged: false,
    };
    run_local(plan, &spec, 1 << 22, Duration::from_secs(60))
        .expect("runs")
        .iter()
        .map(|r| r.wrong)
        .sum()
}
