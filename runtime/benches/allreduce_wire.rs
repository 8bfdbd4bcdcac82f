//! Low-precision wire allreduce on the host against the f32 allreduce, in f32 bytes per second.
//!
//! `cargo bench -p symsched-runtime --bench allreduce_wire [-- --rounds N --sizes 1,16
//! --wires bf16,f16,e4m3 --schedules allreduce_two_shot_wire,...]` (MiB of f32 data per rank).
//! Two ranks run as threads of this process over the in-process fabric with `x` in the heap (as
//! for symmetric tensors). Every variant runs in a child process (the executor reads its
//! switches once per process) and the variants alternate within each round, so all of them see
//! the same machine load: compare the ratios of one run only. `--child SCHEDULE WIRE MIB ITERS`
//! runs one variant and prints its per-launch seconds (for `perf record`).

mod support;

use symsched_runtime::exec::{DType, ElemTypes};

const MIB: usize = 1 << 20;

/// Per-launch seconds (slowest rank) of `iters` launches of `schedule` with f32 data on `wire`
/// (`f32`: no wire) on 2 ranks, `mib` MiB per rank.
fn launches(schedule: &str, wire: &str, mib: usize, iters: u32) -> Vec<f64> {
    let wire = DType::parse(wire).expect("a dtype name");
    let types = ElemTypes::new(DType::F32, Some(wire)).expect("a float wire");
    let heap = (4 * mib * MIB + 4 * MIB) as u64;
    let plan = support::standard_plan(schedule, 2);
    support::slowest_launches(&plan, types, (mib * MIB / 4) as u64, heap, iters)
}

fn child(schedule: &str, wire: &str, mib: usize, iters: u32) -> Vec<f64> {
    let args = [schedule, wire, &mib.to_string(), &iters.to_string()].map(str::to_string);
    support::child_numbers(&args, &[])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let mib: usize = args[i + 3].parse().expect("MiB");
        let iters: u32 = args[i + 4].parse().expect("iters");
        for t in launches(&args[i + 1], &args[i + 2], mib, iters) {
            println!("{t}");
        }
        return;
    }
    let opt = |name: &str| support::opt(&args, name);
    let list = |name: &str, default: &str| -> Vec<String> {
        opt(name)
            .map_or(default, |v| v.as_str())
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let rounds: usize = opt("--rounds").map_or(3, |v| v.parse().expect("rounds"));
    let sizes: Vec<usize> = list("--sizes", "1,16")
        .iter()
        .map(|s| s.parse().expect("MiB"))
        .collect();
    let wires = list("--wires", "bf16,f16,e4m3");
    let schedules = list("--schedules", "allreduce_two_shot_wire");
    let mut variants = vec![("allreduce_two_shot_pull".to_string(), "f32".to_string())];
    for s in &schedules {
        for w in &wires {
            variants.push((s.clone(), w.clone()));
        }
    }
    println!(
        "allreduce, 2 ranks (threads), f32 data, x in the heap; median (min) µs, f32 GB/s and × f32 of the medians"
    );
    for &mib in &sizes {
        let iters = if mib >= 32 { 6 } else { 20 };
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (k, (s, w)) in variants.iter().enumerate() {
                times[k].extend(child(s, w, mib, iters));
            }
        }
        let medians: Vec<f64> = times.iter_mut().map(|t| support::median(t)).collect();
        for (((s, w), md), t) in variants.iter().zip(&medians).zip(&times) {
            println!(
                "{mib:>4} MiB  {s:<28} {w:<5} {:>9.0} ({:>7.0}) µs {:>6.2} GB/s  {:.2}×",
                md * 1e6,
                t[0] * 1e6,
                (mib * MIB) as f64 / md / 1e9,
                medians[0] / md
            );
        }
    }
}
