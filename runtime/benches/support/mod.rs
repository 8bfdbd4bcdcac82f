//! What the host benches share. Each variant runs in a child process — this bench binary again,
//! as `--child ARGS…` — because the executor reads its switches (fusion, non-temporal copies,
//! protocol knobs) once per process; the parent alternates the variants within each round so
//! all of them see the same machine load.

use std::process::Command;
use std::time::Duration;
use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_plan::{LaunchSizes, Plan};
use symsched_runtime::exec::harness::{run_local, RunSpec};
use symsched_runtime::exec::{ElemTypes, ReduceOp};

/// The standard-library schedule `name` compiled for `p` ranks, with the params its examples
/// use (`sendrecv_pair`'s `src` and `dst`, a root, a level).
// The entry-credit bench compiles schedules with params itself.
#[allow(dead_code)]
pub fn standard_plan(name: &str, p: u32) -> Plan {
    compile(
        &standard_library(),
        name,
        p,
        &example_params(name),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|d| panic!("{name}: {d:?}"))
    .plan
}

/// Per-launch seconds (the slowest rank's) of `iters` sum launches of `plan` with `n` elements
/// per rank (`n` is the schedule's size variable), its ranks as threads over a `heap`-byte heap.
// The alltoall bench drives the executor's eager protocol itself and does not use this.
#[allow(dead_code)]
pub fn slowest_launches(plan: &Plan, types: ElemTypes, n: u64, heap: u64, iters: u32) -> Vec<f64> {
    let mut sizes = LaunchSizes::default();
    sizes.vars.insert("n".into(), n);
    let spec = RunSpec {
        types,
        op: ReduceOp::Sum,
        sizes,
        warmup: 2,
        iters,
        check: false,
        staged: false,
    };
    let reps = run_local(plan, &spec, heap, Duration::from_secs(300)).expect("run");
    (0..iters as usize)
        .map(|i| reps.iter().map(|r| r.times[i]).fold(0.0, f64::max))
        .collect()
}

/// Run this bench binary as `--child args…` with `env` set and return the numbers it printed
/// (whitespace-separated). A child that fails aborts the bench with its stderr.
// The entry-credit and launch-overhead benches need no switches and run in one process.
#[allow(dead_code)]
pub fn child_numbers(args: &[String], env: &[(&str, &str)]) -> Vec<f64> {
    let out = Command::new(std::env::current_exe().expect("bench binary"))
        .arg("--child")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("spawn a child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// The upper median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The value following the flag `name` in `args`, if any.
pub fn opt<'a>(args: &'a [String], name: &str) -> Option<&'a String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
}
