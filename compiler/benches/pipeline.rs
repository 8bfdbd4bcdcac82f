//! Cost of the compiler front to back — parse + instantiate + verify + plan — for the standard
//! schedules the issue names, and a sweep over P to show how it grows.
//!
//! Run: `cargo bench -p symsched-compiler --bench pipeline -- --measurement-time 2 --warm-up-time 1`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::collections::BTreeMap;
use std::hint::black_box;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, CompileOptions, STANDARD_LIBRARY};

/// Parse `schedule`'s file, instantiate, verify and emit the plan (no optimiser, as in the issue).
fn parse_to_plan(schedule: &str, p: u32) -> usize {
    let file = format!("examples/{schedule}.sched");
    let text = STANDARD_LIBRARY
        .iter()
        .find(|(n, _)| *n == file)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("{file} is not in the standard library"));
    let mut lib = Library::new();
    if let Err(d) = lib.add_source(&file, text) {
        panic!("{file} does not parse: {d:?}");
    }
    let opts = CompileOptions { optimize: false };
    match compile(&lib, schedule, p, &BTreeMap::new(), &opts) {
        Ok(c) => c.plan.ranks.len(),
        Err(d) => panic!("{schedule} P={p} does not compile: {d:?}"),
    }
}

fn headline(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse_to_plan");
    g.sample_size(10);
    for (schedule, p) in [
        ("allreduce_two_shot", 8),
        ("allreduce_two_shot", 64),
        ("alltoall_push", 64),
    ] {
        g.bench_function(format!("{schedule}/P={p}"), |b| {
            b.iter(|| parse_to_plan(black_box(schedule), black_box(p)))
        });
    }
    g.finish();
}

fn sweep(c: &mut Criterion) {
    let mut g = c.benchmark_group("allreduce_two_shot_sweep");
    g.sample_size(10);
    for p in [2u32, 4, 8, 16, 32, 64] {
        g.bench_with_input(BenchmarkId::from_parameter(p), &p, |b, &p| {
            b.iter(|| parse_to_plan("allreduce_two_shot", black_box(p)))
        });
    }
    g.finish();
}

criterion_group!(benches, headline, sweep);
criterion_main!(benches);
