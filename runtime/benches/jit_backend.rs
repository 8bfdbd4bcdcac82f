//! The JIT backend against the interpreter, in one run (criterion), with the ratios and the
//! load average printed at the end (issue 12's performance goals):
//!
//! - `compile`: thread CPU time to compile one kernel (lower, optimise, generate code, no
//!   cache) per (plan, rank) at P = 8 and P = 64 (goals ≤ 50 ms and ≤ 500 ms, release), f32
//!   data (f32 on the wire for the wire two-shot, the slowest to compile);
//! - `launch/<schedule>/<bytes>/<backend>`: every standard schedule at 2 ranks (threads of this
//!   process over the in-process fabric, role buffers in the heap), f32 sum, the message sizes
//!   of [`SIZES`] (goal: JIT ÷ interpreter ≤ 1.0); the schedules without a reduce step are the
//!   ones the interpreter runs unfused (its fusion starts at a reduce; goal there ≥ 1.3×);
//! - `wire`: `allreduce_two_shot_wire` with bf16 on the wire against `allreduce_two_shot` in
//!   f32, the same f32 bytes, at 1 and 16 MiB (goal: wire ≥ 0.6× the f32 bytes per second);
//! - the 8-byte rows are the host overhead per launch (goal: JIT ≥ 1.2× lower);
//! - the bounds, in the same run: `launch/noop/8` is `sendrecv_pair` with `src = dst` (no
//!   steps on any rank), so its time is the part of a launch the executor runs for every
//!   backend (checks, resolution reuse, the agreement round trip, staging; the JIT calls an
//!   empty kernel); `memcpy/<bytes>` is two threads each copying the message size between two
//!   buffers of their own at once (what a rank of an unfused schedule at 2 ranks writes per
//!   launch, on a memory system both ranks share). No backend can run a launch faster than
//!   either, so `interp ÷ max(noop, memcpy)` bounds the speedup of any backend.
//!
//! - with `SYMSCHED_BENCH_CONTROL=1`, every launch row also runs the interpreter a second time,
//!   after the JIT (`…/interp-again`): the ratio `interp-again ÷ interp` is what the same
//!   backend measured the same way gives, so a JIT row above 1.0 can be told from the noise of
//!   its own row (an A/A control; the summary counts the rows of both above 1.0, 1.1 and 1.2).
//!
//! `cargo bench -p symsched-runtime --bench jit_backend` (add `-- launch/allreduce` to filter;
//! `SYMSCHED_BENCH_MAX_BYTES=4194304` caps the sizes; `SYMSCHED_BENCH_RANKS=2,3,4` runs the
//! launch rows at those group sizes too, named `launch/<schedule>/p<P>/<bytes>` for P ≠ 2, so
//! that the `auto` rule is measured beyond 2 ranks). The summary marks the rows where `auto`
//! picks the JIT and gives their mean ratio per group size. On a shared machine compare the
//! ratios of one run only.

use criterion::{criterion_group, criterion_main, Criterion};
use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_jit::compile::{compile_object, CompileOptions as JitOptions, HostTarget};
use symsched_jit::{KernelScope, KernelSpec, LowerOptions};
use symsched_plan::{BufferRole, Op, Plan};
use symsched_runtime::config::{BackendKind, ExecOptions};
use symsched_runtime::exec::backend::auto;
use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::reference::fill;
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, Executor, Fabric, LaunchArgs, LocalWorld, ReduceOp,
};

/// Message sizes (bytes of the largest role, nccl-tests style).
const SIZES: [u64; 5] = [8, 4096, 256 << 10, 4 << 20, 64 << 20];

/// Mean seconds per launch of every benchmark, by name (filled inside the measurements).
static SEEN: Mutex<BTreeMap<String, (f64, u64)>> = Mutex::new(BTreeMap::new());

fn record(name: &str, total: Duration, iters: u64) {
    let mut s = SEEN.lock().unwrap();
    let e = s.entry(name.to_string()).or_insert((0.0, 0));
    e.0 += total.as_secs_f64();
    e.1 += iters;
}

fn mean(name: &str) -> Option<f64> {
    SEEN.lock()
        .unwrap()
        .get(name)
        .map(|(t, n)| t / (*n).max(1) as f64)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn plan(name: &str, p: u32) -> Option<Plan> {
    plan_with(name, p, &example_params(name))
}

fn plan_with(name: &str, p: u32, params: &BTreeMap<String, i64>) -> Option<Plan> {
    compile(
        &standard_library(),
        name,
        p,
        params,
        &CompileOptions::default(),
    )
    .ok()
    .map(|c| c.plan)
}

/// A plan with no steps on any rank at 2 ranks: `sendrecv_pair` from rank 0 to itself.
fn noop_plan() -> Option<Plan> {
    let params = [("src".to_string(), 0), ("dst".to_string(), 0)].into();
    plan_with("sendrecv_pair", 2, &params).filter(|p| p.ranks.iter().all(|r| r.steps.is_empty()))
}

/// Two threads each copying `bytes` between two buffers of their own, `iters` times, started
/// together; the slower thread's time.
fn memcpy_pair(bytes: u64, iters: u64) -> Duration {
    let n = bytes as usize;
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let start = &start;
                s.spawn(move || {
                    let src = vec![1u8; n];
                    let mut dst = vec![0u8; n];
                    // Fault the destination's pages in outside the measurement.
                    dst.copy_from_slice(&src);
                    start.wait();
                    let t0 = Instant::now();
                    for _ in 0..iters {
                        dst.copy_from_slice(std::hint::black_box(&src));
                        std::hint::black_box(&mut dst);
                    }
                    t0.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
    })
}

fn names() -> Vec<String> {
    let mut v: Vec<String> = standard_library()
        .schedules()
        .into_iter()
        .map(|s| s.name)
        .collect();
    v.sort();
    v
}

/// One launch row of the summary.
struct Case {
    label: String,
    bytes: u64,
    p: u32,
    reduce: bool,
    /// Whether `auto` runs this launch on the JIT.
    auto_jit: bool,
}

fn has_reduce(plan: &Plan) -> bool {
    plan.ranks
        .iter()
        .flat_map(|r| &r.steps)
        .any(|s| matches!(s.op, Op::Reduce { .. }))
}

/// Two (or P) rank threads that launch one plan on command, back to back.
struct Ranks {
    go: Vec<Sender<u64>>,
    done: Receiver<Duration>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Ranks {
    fn start(plan: &Plan, types: ElemTypes, bytes: u64, backend: BackendKind) -> Ranks {
        let plan = Arc::new(plan.clone());
        let es = types.data.size() as u64;
        let count = (bytes / es).max(1);
        let sizes = sizes_for(&plan, count, &[]);
        let roles = plan
            .buffers
            .iter()
            .take_while(|b| b.role != BufferRole::Scratch)
            .count();
        let lens = |r: u32| -> Vec<u64> {
            plan.buffers[..roles]
                .iter()
                .map(|b| b.total_len(r, &sizes).expect("sizes"))
                .collect()
        };
        let cap: Vec<u64> = (0..roles)
            .map(|i| (0..plan.group_size).map(|r| lens(r)[i]).max().unwrap_or(0))
            .collect();
        let heap = cap.iter().sum::<u64>() * es * 3 + (8 << 20);
        let world = LocalWorld::new(plan.group_size, heap).expect("world");
        let group = world.world_group().expect("group");
        let (dtx, done) = channel();
        let mut go = Vec::new();
        let mut threads = Vec::new();
        for r in 0..plan.group_size {
            let (tx, rx) = channel::<u64>();
            go.push(tx);
            let (plan, group, dtx, sizes, cap, mine) = (
                plan.clone(),
                group.clone(),
                dtx.clone(),
                sizes.clone(),
                cap.clone(),
                lens(r),
            );
            threads.push(std::thread::spawn(move || {
                let opts = ExecOptions {
                    backend,
                    ..ExecOptions::default()
                };
                let exec = Executor::with_options(group.fabric(r).expect("fabric"), opts);
                let fab = exec.fabric();
                let lp = exec.load(&plan).expect("load");
                let offs: Vec<u64> = cap
                    .iter()
                    .enumerate()
                    .map(|(i, c)| fab.scratch(&format!("b/{i}"), (c * es).max(1)).unwrap())
                    .collect();
                for (i, n) in mine.iter().enumerate() {
                    let v = fill(types.data, r, 0, i, *n as usize);
                    if !v.is_empty() {
                        let p = fab.heap_ptr(r, offs[i], v.len() as u64).unwrap();
                        // SAFETY: checked heap range, before any launch.
                        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
                    }
                }
                while let Ok(iters) = rx.recv() {
                    exec.barrier().expect("barrier");
                    let t0 = Instant::now();
                    // One vector for every launch: the harness's own allocation is not
                    // the runtime's overhead, and it would be counted in every row alike
                    // (one `malloc` and `free` per launch, ~100 instructions).
                    let mut binds: Vec<Binding> = Vec::with_capacity(offs.len());
                    for _ in 0..iters {
                        binds.clear();
                        binds.extend(offs.iter().zip(&mine).map(|(o, n)| Binding::Heap {
                            offset: *o,
                            bytes: n * es,
                        }));
                        exec.launch(
                            &lp,
                            LaunchArgs {
                                types,
                                op: ReduceOp::Sum,
                                sizes: &sizes,
                                buffers: &mut binds,
                            },
                        )
                        .expect("launch");
                    }
                    let dt = t0.elapsed();
                    exec.barrier().expect("barrier");
                    dtx.send(dt).unwrap();
                }
            }));
        }
        let r = Ranks { go, done, threads };
        // Compile (JIT) and warm every cache outside the measurement.
        r.run(2);
        r
    }

    /// Seconds of `iters` launches, the slowest rank.
    fn run(&self, iters: u64) -> Duration {
        for g in &self.go {
            g.send(iters).unwrap();
        }
        (0..self.go.len())
            .map(|_| self.done.recv().unwrap())
            .max()
            .unwrap()
    }

    fn stop(self) {
        drop(self.go);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

/// The backends of a row, each with the name its timings are recorded under: the two
/// backends, and with the A/A control the interpreter once more after the JIT.
fn row_backends(control: bool) -> Vec<(BackendKind, &'static str)> {
    let mut b = vec![(BackendKind::Interp, "interp"), (BackendKind::Jit, "jit")];
    if control {
        b.push((BackendKind::Interp, AGAIN));
    }
    b
}

/// The name of the A/A control's second interpreter run.
const AGAIN: &str = "interp-again";

/// The thresholds the control's summary counts rows above.
const CONTROL_THRESHOLDS: [f64; 3] = [1.0, 1.1, 1.2];

/// Rows above each of [`CONTROL_THRESHOLDS`], for `jit ÷ interp` and for the A/A control
/// `interp-again ÷ interp` of the same rows.
#[derive(Default)]
struct Control {
    rows: u32,
    jit: [u32; 3],
    again: [u32; 3],
    worst_again: f64,
}

impl Control {
    fn add(&mut self, jit: f64, again: f64) {
        self.rows += 1;
        for (k, t) in CONTROL_THRESHOLDS.iter().enumerate() {
            self.jit[k] += u32::from(jit > *t);
            self.again[k] += u32::from(again > *t);
        }
        self.worst_again = self.worst_again.max(again);
    }

    fn summary(&self) -> String {
        let counts = |c: &[u32; 3]| {
            CONTROL_THRESHOLDS
                .iter()
                .zip(c)
                .map(|(t, n)| format!("{n} above {t:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "# A/A control over {} rows: jit÷interp {}; interp-again÷interp {} (worst {:.2})",
            self.rows,
            counts(&self.jit),
            counts(&self.again),
            self.worst_again
        )
    }
}

fn bench_launch(
    c: &mut Criterion,
    group: &str,
    label: &str,
    plan: &Plan,
    types: ElemTypes,
    bytes: u64,
    backends: &[(BackendKind, &str)],
) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(if bytes >= 16 << 20 {
            3000
        } else {
            800
        }));
    for &(backend, tag) in backends {
        let name = format!("{group}/{label}/{tag}");
        let ranks = Ranks::start(plan, types, bytes, backend);
        g.bench_function(format!("{label}/{tag}"), |b| {
            b.iter_custom(|iters| {
                let t = ranks.run(iters);
                record(&name, t, iters);
                t
            })
        });
        ranks.stop();
    }
    g.finish();
}

/// `SYMSCHED_BENCH_PROFILE=<schedule>/<bytes>/<interp|jit>/<launches>[/<wire dtype>]`: only that
/// case, as a fixed number of launches after the warm-up and no statistics, for a profiler
/// (`valgrind --tool=callgrind`, `perf record`); prints µs per launch. f32 data, summed; the
/// wire dtype (e.g. `bf16`, for the wire schedules) defaults to the data's.
fn profile(spec: &str) {
    let parts: Vec<&str> = spec.split('/').collect();
    let (name, bytes, backend, iters, wire) = match parts[..] {
        [name, bytes, backend, iters] => (name, bytes, backend, iters, None),
        [name, bytes, backend, iters, wire] => (name, bytes, backend, iters, Some(wire)),
        _ => panic!(
            "SYMSCHED_BENCH_PROFILE: <schedule>/<bytes>/<interp|jit>/<launches>[/<wire>], not {spec}"
        ),
    };
    let wire = wire.map(|w| {
        w.parse::<DType>()
            .unwrap_or_else(|e| panic!("SYMSCHED_BENCH_PROFILE: wire {w}: {e}"))
    });
    let backend = match backend {
        "interp" => BackendKind::Interp,
        "jit" => BackendKind::Jit,
        b => panic!("SYMSCHED_BENCH_PROFILE: backend {b}"),
    };
    let (bytes, iters): (u64, u64) = (bytes.parse().expect("bytes"), iters.parse().expect("n"));
    let pl = if name == "noop" {
        noop_plan()
    } else {
        plan(name, 2)
    }
    .unwrap_or_else(|| panic!("no schedule {name}"));
    let types = ElemTypes::new(DType::F32, wire)
        .unwrap_or_else(|e| panic!("SYMSCHED_BENCH_PROFILE: wire {wire:?}: {e}"));
    let ranks = Ranks::start(&pl, types, bytes, backend);
    let t = ranks.run(iters);
    ranks.stop();
    println!(
        "{spec}: {:.3} µs per launch (load {})",
        t.as_secs_f64() * 1e6 / iters.max(1) as f64,
        load()
    );
}

fn all(c: &mut Criterion) {
    if let Ok(spec) = std::env::var("SYMSCHED_BENCH_PROFILE") {
        profile(&spec);
        return;
    }
    let load0 = load();
    eprintln!("load average at start: {load0}");
    let max_bytes: u64 = std::env::var("SYMSCHED_BENCH_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let f32t = ElemTypes::new(DType::F32, None).unwrap();
    let control = match std::env::var("SYMSCHED_BENCH_CONTROL").as_deref() {
        Err(_) | Ok("" | "0") => false,
        Ok("1") => true,
        Ok(v) => panic!("SYMSCHED_BENCH_CONTROL must be 0 or 1, not {v:?}"),
    };
    let launch_backends = row_backends(control);
    let pair = row_backends(false);

    // Compile time per (plan, rank).
    let opts = JitOptions {
        lower: LowerOptions {
            scope: KernelScope::Steps,
            ..LowerOptions::default()
        },
        ..JitOptions::default()
    };
    let target = HostTarget::of(&opts).expect("host target");
    let mut compile_cases = Vec::new();
    for p in [8u32, 64] {
        for name in [
            "allreduce_two_shot",
            "allreduce_two_shot_wire",
            "allreduce_ring",
            "allgather_push",
            "alltoall_push",
        ] {
            if let Some(pl) = plan(name, p) {
                compile_cases.push((format!("{name}/P={p}"), pl));
            }
        }
    }
    {
        let mut g = c.benchmark_group("compile");
        g.sample_size(10);
        for (label, pl) in &compile_cases {
            let spec = KernelSpec {
                plan: pl,
                rank: 1,
                channel: 0,
                types: symsched_jit::ElemTypes::new(symsched_jit::DType::F32, None).unwrap(),
                op: symsched_jit::ReduceOp::Sum,
            };
            let name = format!("compile/{label}");
            g.bench_function(label.as_str(), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t0 = thread_cpu();
                        std::hint::black_box(
                            compile_object(&spec, &opts, &target, "bench").expect("compiles"),
                        );
                        total += thread_cpu() - t0;
                    }
                    record(&name, total, iters);
                    total
                })
            });
        }
        g.finish();
    }

    // Every standard schedule at 2 ranks (and the group sizes of SYMSCHED_BENCH_RANKS).
    let ranks: Vec<u32> = std::env::var("SYMSCHED_BENCH_RANKS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![2]);
    let mut launch_cases = Vec::new();
    for (p, name) in ranks
        .iter()
        .flat_map(|p| names().into_iter().map(move |n| (*p, n)))
    {
        let Some(pl) = plan(&name, p) else { continue };
        // A matmul collective's time is its matmul (n × 16 × 16 at `n` elements): seconds per
        // launch above 256 KiB, and nothing about the backends' data movement.
        let cap = if name.contains("matmul") {
            256 << 10
        } else {
            max_bytes
        };
        for &bytes in SIZES.iter().filter(|b| **b <= max_bytes.min(cap)) {
            let label = if p == 2 {
                format!("{name}/{bytes}")
            } else {
                format!("{name}/p{p}/{bytes}")
            };
            if c.clone_filter_matches(&format!("launch/{label}")) {
                bench_launch(c, "launch", &label, &pl, f32t, bytes, &launch_backends);
            }
            let picks = auto::prefers_jit(auto::PlanTraits::of(&pl), bytes, f32t, ReduceOp::Sum);
            launch_cases.push(Case {
                label,
                bytes,
                p,
                reduce: has_reduce(&pl),
                auto_jit: picks,
            });
        }
    }

    // The bounds: the executor's part of a launch, and the copy at memory speed.
    let noop = noop_plan();
    if let Some(pl) = &noop {
        if c.clone_filter_matches("launch/noop/8") {
            bench_launch(c, "launch", "noop/8", pl, f32t, 8, &pair);
        }
    }
    for &bytes in SIZES.iter().filter(|b| **b <= max_bytes) {
        let name = format!("memcpy/{bytes}");
        if !c.clone_filter_matches(&name) {
            continue;
        }
        let mut g = c.benchmark_group("memcpy");
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(800));
        g.bench_function(format!("{bytes}"), |b| {
            b.iter_custom(|iters| {
                let t = memcpy_pair(bytes, iters);
                record(&name, t, iters);
                t
            })
        });
        g.finish();
    }

    // Low-precision wire against f32.
    let wire_t = ElemTypes::new(DType::F32, Some(DType::Bf16)).unwrap();
    let (two, wire) = (
        plan("allreduce_two_shot", 2),
        plan("allreduce_two_shot_wire", 2),
    );
    let mut wire_sizes = Vec::new();
    if let (Some(two), Some(wire)) = (&two, &wire) {
        for mib in [1u64, 16] {
            let bytes = mib << 20;
            if bytes > max_bytes {
                continue;
            }
            if c.clone_filter_matches(&format!("wire/f32/{bytes}")) {
                bench_launch(c, "wire", &format!("f32/{bytes}"), two, f32t, bytes, &pair);
                bench_launch(
                    c,
                    "wire",
                    &format!("bf16/{bytes}"),
                    wire,
                    wire_t,
                    bytes,
                    &pair,
                );
            }
            wire_sizes.push(bytes);
        }
    }

    // The summary.
    let load1 = load();
    println!("\n# JIT backend summary (load average at start {load0}, at end {load1})");
    println!("# compile, thread CPU ms per (plan, rank):");
    for (label, _) in &compile_cases {
        if let Some(t) = mean(&format!("compile/{label}")) {
            println!("  {label:<32} {:>8.1} ms", t * 1e3);
        }
    }
    println!(
        "# launch, f32 sum: µs per launch, interp / jit, ratio jit÷interp (`auto`: the rule \
         runs the row on the JIT)"
    );
    let mut worst: Option<(f64, String)> = None;
    let mut tally = Control::default();
    let mut auto_ratios: BTreeMap<u32, (f64, u32, f64, u32)> = BTreeMap::new();
    for Case {
        label,
        p,
        reduce,
        auto_jit,
        ..
    } in &launch_cases
    {
        let (Some(i), Some(j)) = (
            mean(&format!("launch/{label}/interp")),
            mean(&format!("launch/{label}/jit")),
        ) else {
            continue;
        };
        let r = j / i;
        let aa = mean(&format!("launch/{label}/{AGAIN}")).map(|a| a / i);
        if let Some(a) = aa {
            tally.add(r, a);
        }
        if worst.as_ref().is_none_or(|(w, _)| r > *w) {
            worst = Some((r, label.clone()));
        }
        let e = auto_ratios.entry(*p).or_insert((0.0, 0, 0.0, 0));
        if *auto_jit {
            (e.0, e.1) = (e.0 + r, e.1 + 1);
        } else {
            (e.2, e.3) = (e.2 + r, e.3 + 1);
        }
        println!(
            "  {label:<40} {:>10.1} {:>10.1} {r:>6.2}{}{}{}",
            i * 1e6,
            j * 1e6,
            aa.map_or(String::new(), |a| format!("  A/A {a:.2}")),
            if *reduce { "" } else { "  (interp unfused)" },
            if *auto_jit { "  auto" } else { "" }
        );
    }
    if tally.rows > 0 {
        println!("{}", tally.summary());
    }
    if let Some((r, l)) = worst {
        println!("# worst jit÷interp: {r:.2} at {l}");
    }
    for (p, (a, na, o, no)) in &auto_ratios {
        println!(
            "# P = {p}: mean jit÷interp where auto picks the JIT {:.2} ({na} rows), elsewhere \
             {:.2} ({no} rows)",
            a / (*na).max(1) as f64,
            o / (*no).max(1) as f64
        );
    }
    let noop_t = (mean("launch/noop/8/interp"), mean("launch/noop/8/jit"));
    if let (Some(i), Some(j)) = noop_t {
        println!(
            "# no-step launch (the executor's part): interp {:.2} µs, jit {:.2} µs",
            i * 1e6,
            j * 1e6
        );
    }
    println!(
        "# bounds: memcpy µs (2 threads, message size each); per schedule interp÷max(noop, \
         memcpy) = the largest speedup any backend can reach; 8 B: backend part = t - noop"
    );
    for &bytes in SIZES.iter().filter(|b| **b <= max_bytes) {
        if let Some(m) = mean(&format!("memcpy/{bytes}")) {
            println!("  memcpy/{bytes:<34} {:>10.2}", m * 1e6);
        }
    }
    if let (Some(noop_i), _) = noop_t {
        for Case {
            label,
            bytes,
            reduce,
            ..
        } in &launch_cases
        {
            let (Some(i), Some(j)) = (
                mean(&format!("launch/{label}/interp")),
                mean(&format!("launch/{label}/jit")),
            ) else {
                continue;
            };
            let floor = mean(&format!("memcpy/{bytes}")).map_or(noop_i, |m| m.max(noop_i));
            let part = if *bytes == 8 {
                format!(
                    "  backend part interp {:.2} µs jit {:.2} µs",
                    (i - noop_i) * 1e6,
                    (j - noop_i) * 1e6
                )
            } else {
                String::new()
            };
            // Every row: from 256 KiB on the copy bound is the one that matters, for the
            // reducing schedules too (a reduce reads P operands, so its bound is looser).
            println!(
                "  {label:<40} bound {:>5.2}x  jit/memcpy {:>5.2}{part}{}",
                i / floor,
                j / floor,
                if *reduce { "" } else { "  (interp unfused)" }
            );
        }
    }
    println!("# wire: bf16-wire two-shot vs f32 two-shot, f32 bytes/s ratio (= t_f32 / t_wire)");
    for bytes in wire_sizes {
        for backend in ["interp", "jit"] {
            if let (Some(f), Some(w)) = (
                mean(&format!("wire/f32/{bytes}/{backend}")),
                mean(&format!("wire/bf16/{bytes}/{backend}")),
            ) {
                println!(
                    "  {bytes:>10} B {backend:<6} f32 {:>9.1} µs  bf16 wire {:>9.1} µs  ratio {:.2}",
                    f * 1e6,
                    w * 1e6,
                    f / w
                );
            }
        }
    }
}

/// `Criterion::filter_matches` is private; this asks the same question of the command line.
trait FilterMatches {
    fn clone_filter_matches(&self, id: &str) -> bool;
}

/// Criterion 0.5's options that take a value (`--measurement-time 3`): their values are not
/// filters. Without this, `-- --warm-up-time 1` made "1" a filter and silently skipped every row
/// whose name lacks a 1 (the 8 B and 4 KiB rows).
const VALUE_OPTIONS: [&str; 18] = [
    "--warm-up-time",
    "--measurement-time",
    "--sample-size",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--profile-time",
    "--save-baseline",
    "-s",
    "--baseline",
    "-b",
    "--load-baseline",
    "--color",
    "-c",
    "--plotting-backend",
    "--format",
    "--output-format",
];

/// The filter of a criterion command line (its one positional argument), if any.
fn filter_argument(args: &[String]) -> Option<&str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if VALUE_OPTIONS.contains(&a.as_str()) {
            it.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

impl FilterMatches for Criterion {
    fn clone_filter_matches(&self, id: &str) -> bool {
        let args: Vec<String> = std::env::args().skip(1).collect();
        // Criterion reads the filter as a regex; alternatives (`a|b`) are the part used here.
        filter_argument(&args).is_none_or(|f| f.split('|').any(|alt| id.contains(alt)))
    }
}

criterion_group!(benches, all);
criterion_main!(benches);
