//! Compile time of one host kernel per (plan, rank): lowering, the optimisation pipeline and
//! code generation for the host CPU (no cache), at P = 8 and P = 64, for the standard schedules
//! with the most steps per rank. Goals (issue 12): ≤ 50 ms at P = 8, ≤ 500 ms at P = 64,
//! release build.
//!
//! Two groups measure the same work: `compile_cpu` reports the compiling thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which a busy machine inflates far less than wall time;
//! `compile_wall` the wall time. The load average is printed before and after: on a shared
//! 2-core machine wall times scale with it.
//!
//! Run: `cargo bench -p symsched-jit --bench compile -- --measurement-time 5 --warm-up-time 1`

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;
use symsched_compiler::pipeline::{
    compile, example_params, standard_library, CompileOptions as PlanOptions,
};
use symsched_jit::compile::{compile_object, CompileOptions, HostTarget};
use symsched_jit::{DType, ElemTypes, KernelSpec, ReduceOp};
use symsched_plan::Plan;

const CASES: [(&str, Option<DType>); 6] = [
    ("allreduce_two_shot", None),
    ("allreduce_two_shot_wire", Some(DType::Bf16)),
    ("allreduce_two_shot_pull", None),
    ("allreduce_ring", None),
    ("allgather_push", None),
    ("alltoall_push", None),
];

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn plans() -> Vec<(String, Plan, Option<DType>)> {
    let lib = standard_library();
    let mut out = Vec::new();
    for p in [8u32, 64] {
        for (name, wire) in CASES {
            let plan = compile(
                &lib,
                name,
                p,
                &example_params(name),
                &PlanOptions::default(),
            )
            .unwrap_or_else(|d| panic!("{name} at P = {p}: {d:?}"))
            .plan;
            out.push((format!("{name}/P={p}"), plan, wire));
        }
    }
    out
}

fn spec(plan: &Plan, wire: Option<DType>) -> KernelSpec<'_> {
    KernelSpec {
        plan,
        rank: 1,
        channel: 0,
        types: ElemTypes::new(DType::F32, wire).expect("types"),
        op: ReduceOp::Sum,
    }
}

fn compile_time(c: &mut Criterion) {
    eprintln!("load average at start: {}", load());
    let opts = CompileOptions::default();
    let target = HostTarget::of(&opts).expect("host target");
    eprintln!("target: {} {}", target.triple, target.cpu);
    let cases = plans();
    let mut g = c.benchmark_group("compile_cpu");
    g.sample_size(10);
    for (label, plan, wire) in &cases {
        let s = spec(plan, *wire);
        g.bench_function(label.as_str(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t0 = thread_cpu();
                    black_box(
                        compile_object(black_box(&s), &opts, &target, "bench").expect("compiles"),
                    );
                    total += thread_cpu() - t0;
                }
                total
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("compile_wall");
    g.sample_size(10);
    for (label, plan, wire) in &cases {
        let s = spec(plan, *wire);
        g.bench_function(label.as_str(), |b| {
            b.iter(|| compile_object(black_box(&s), &opts, &target, "bench").expect("compiles"))
        });
    }
    g.finish();
    eprintln!("load average at end: {}", load());
}

criterion_group!(benches, compile_time);
criterion_main!(benches);
