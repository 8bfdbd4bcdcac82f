//! Setup shared by the executor's integration tests: compile a standard-library schedule and
//! run a small checked launch of it on the in-process fabric.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

pub mod channels;
pub mod ranks;

use std::time::Duration;
use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_plan::{LaunchSizes, Plan};
use symsched_runtime::exec::harness::{run_local, RankReport, RunSpec};
use symsched_runtime::exec::{ElemTypes, ReduceOp};

/// Timed launches of a [`spec`] run.
pub const ITERS: u32 = 2;

/// Bound on every in-process run, so a hung schedule fails the test instead of stalling it.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The standard-library schedule `name` compiled for `p` ranks with its example parameters.
pub fn plan(name: &str, p: u32) -> Plan {
    compile(
        &standard_library(),
        name,
        p,
        &example_params(name),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|d| panic!("{name} P={p} does not verify: {d:?}"))
    .plan
}

/// A checked sum over `sizes`: no warm-up, [`ITERS`] timed launches.
pub fn spec(types: ElemTypes, sizes: LaunchSizes, staged: bool) -> RunSpec {
    RunSpec {
        types,
        op: ReduceOp::Sum,
        sizes,
        warmup: 0,
        iters: ITERS,
        check: true,
        staged,
    }
}

/// Runs `spec` in a `heap`-byte heap per rank and asserts that every rank matched the
/// sequential reference; `what` names the case in failure messages.
pub fn run_checked(plan: &Plan, spec: &RunSpec, heap: u64, what: &str) -> Vec<RankReport> {
    let reports = run_local(plan, spec, heap, TIMEOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (r, rep) in reports.iter().enumerate() {
        assert_eq!(rep.wrong, 0, "{what} rank {r}");
    }
    reports
}

/// Run this test binary's `rank_entry` test as `n` rank processes, with `role_var` set to
/// `role`, waits that give up after `signal_timeout_ms`, a 16 MiB heap and `timeout` for the
/// whole job; panics with every rank's output when a rank fails.
pub fn run_rank_processes(
    n: usize,
    role_var: &str,
    role: &str,
    signal_timeout_ms: u64,
    timeout: Duration,
) -> symsched_runtime::launcher::LaunchOutcome {
    run_rank_processes_with(
        n,
        role_var,
        role,
        &RankJob {
            signal_timeout_ms,
            timeout,
            ..RankJob::default()
        },
    )
}

/// What a launch of rank processes ([`run_rank_processes_with`]) sets besides the role.
#[derive(Debug, Clone)]
pub struct RankJob<'a> {
    /// `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS` of every rank.
    pub signal_timeout_ms: u64,
    /// The launcher's timeout for the whole job.
    pub timeout: Duration,
    /// `SYMMETRIC_MEMORY_HEAP_SIZE` of every rank, in bytes.
    pub heap_bytes: u64,
    /// More environment for every rank.
    pub env: &'a [(&'a str, &'a std::ffi::OsStr)],
}

impl Default for RankJob<'_> {
    /// 20 s signal timeout, 120 s for the job, 16 MiB heap, nothing more.
    fn default() -> Self {
        RankJob {
            signal_timeout_ms: 20_000,
            timeout: Duration::from_secs(120),
            heap_bytes: 16 << 20,
            env: &[],
        }
    }
}

/// [`run_rank_processes`] with the knobs of `job`.
pub fn run_rank_processes_with(
    n: usize,
    role_var: &str,
    role: &str,
    job: &RankJob,
) -> symsched_runtime::launcher::LaunchOutcome {
    use symsched_runtime::launcher::{launch, LaunchSpec};
    let exe = std::env::current_exe().expect("test binary path");
    let mut spec = LaunchSpec::new(
        n,
        exe,
        ["rank_entry", "--exact", "--nocapture", "--test-threads=1"],
    );
    spec.env.push((role_var.into(), role.into()));
    spec.env.push((
        "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS".into(),
        job.signal_timeout_ms.to_string().into(),
    ));
    spec.env.push((
        "SYMMETRIC_MEMORY_HEAP_SIZE".into(),
        job.heap_bytes.to_string().into(),
    ));
    spec.env
        .extend(job.env.iter().map(|(k, v)| ((*k).into(), (*v).to_owned())));
    spec.timeout = Some(job.timeout);
    spec.capture = true;
    let out = launch(&spec).expect("launcher starts the ranks");
    if !out.success() {
        panic!(
            "{role}: {:?}\n{}",
            out.failure,
            output_lines(&out).join("\n")
        );
    }
    out
}

/// The captured output of a launch, each line prefixed with `[rank r]`.
pub fn output_lines(out: &symsched_runtime::launcher::LaunchOutcome) -> Vec<String> {
    out.output
        .iter()
        .map(|(r, _, l)| format!("[rank {r}] {l}"))
        .collect()
}
