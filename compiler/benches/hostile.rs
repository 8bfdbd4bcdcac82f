//! `check` on hostile schedules (`tests/hostile_cases`): wall time and peak memory of one
//! `verify::check` per (case, group size), each in a child process (this binary again, as
//! `--child CASE P`) so its peak resident set is its own.
//!
//! `cargo bench -p symsched-compiler --bench hostile [-- --rounds N]`. Prints the median over
//! the rounds of each measurement and the load average; compare within one run only.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;
use symsched_compiler::library::Library;
use symsched_compiler::verify;

#[path = "../tests/hostile_cases/mod.rs"]
mod hostile_cases;
use hostile_cases::{CASES, RACES};

/// The peak resident set of this process, in KiB (`VmHWM`).
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn source(name: &str) -> &'static str {
    if name == "races" {
        return RACES;
    }
    CASES
        .iter()
        .find(|c| c.0 == name)
        .map(|c| c.1)
        .expect("a known case")
}

/// One check in this process: prints seconds, peak KiB and the first code (or `ok`).
fn child(name: &str, p: u32) {
    let mut lib = Library::new();
    lib.add_source("hostile.sched", source(name))
        .expect("the case parses");
    let sched = lib.schedules().last().expect("a schedule").name.clone();
    let t0 = Instant::now();
    let outcome = verify::check(&lib, &sched, p, &BTreeMap::new());
    let secs = t0.elapsed().as_secs_f64();
    let code = match &outcome {
        Ok(_) => "ok",
        Err(d) => d[0].code,
    };
    println!("{secs} {} {code}", peak_kib());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let p = args[i + 2].parse().expect("a group size");
        child(&args[i + 1], p);
        return;
    }
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(3, |v| v.parse().expect("a number"));
    println!(
        "load average at start: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:<22} {:>3} {:>10} {:>12} {:>6}",
        "case", "P", "check s", "peak MiB", "code"
    );
    let names: Vec<&str> = CASES
        .iter()
        .map(|c| c.0)
        .chain(std::iter::once("races"))
        .collect();
    for name in names {
        for p in [4u32, 16, 64] {
            let mut runs: Vec<(f64, u64, String)> = (0..rounds)
                .map(|_| {
                    let out = Command::new(std::env::current_exe().expect("bench binary"))
                        .args(["--child", name, &p.to_string()])
                        .output()
                        .expect("spawn a child");
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let text = String::from_utf8_lossy(&out.stdout).to_string();
                    let mut w = text.split_whitespace();
                    let secs = w.next().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
                    let kib = w.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                    (secs, kib, w.next().unwrap_or("?").to_string())
                })
                .collect();
            runs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (secs, _, code) = &runs[runs.len() / 2];
            let kib = runs.iter().map(|r| r.1).max().unwrap_or(0);
            println!(
                "{name:<22} {p:>3} {secs:>10.3} {:>12.1} {code:>6}",
                kib as f64 / 1024.0
            );
        }
    }
    println!(
        "load average at end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
