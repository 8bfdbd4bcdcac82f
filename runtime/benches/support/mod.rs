//! What the host benches share. Each variant runs in a child process — this bench binary again,
//! as `--child ARGS…` — because the executor reads its switches (fusion, non-temporal copies,
//! protocol knobs) once per process; the parent alternates the variants within each round so
//! all of them see the same machine load.

use std::process::Command;

/// Run this bench binary as `--child args…` with `env` set and return the numbers it printed
/// (whitespace-separated). A child that fails aborts the bench with its stderr.
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
