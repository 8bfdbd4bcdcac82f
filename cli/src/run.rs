//! `symsched run FILE --ranks N`: compile a schedule, run it on N local ranks (processes sharing
//! the symmetric heap, started through the launcher), check every rank against the sequential
//! reference with `--check`, and print an nccl-tests style table from rank 0.
//!
//! The parent re-executes this binary as the rank program under the launcher (with
//! `SYMSCHED_RUN_CHILD=1`); every rank compiles the plan itself (compilation is deterministic,
//! the plan's source hash is compared across ranks), runs the sizes in order and exchanges its
//! count of wrong elements so the table shows the total. `--backend threads` runs the ranks as
//! threads of this process over the in-process fabric instead.

use crate::common::{load, param_map, parse_param, pick_schedule, single_binding};
use anyhow::{anyhow, bail, Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use symsched_compiler::pipeline::{compile, CompileOptions};
use symsched_plan::{LaunchSizes, Plan};
use symsched_runtime::exec::harness::{
    message_bytes, run_local, run_rank_with, sizes_for, RankReport, RoleMemory, RunSpec,
};
use symsched_runtime::exec::reference::{assumed_order, bus_factor};
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::backend::jit;
use symsched_runtime::exec::{
    DType, ElemTypes, ExecError, Executor, Fabric, GroupFabric, ReduceOp,
};
use symsched_runtime::launcher::{launch, FailureCause, LaunchSpec, Stream};

const CHILD_ENV: &str = "SYMSCHED_RUN_CHILD";

/// Arguments of `symsched run`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// The `.sched` file (its directory's other schedules are loaded too, for `use` and duals).
    file: PathBuf,
    /// Number of ranks (may exceed the cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    ranks: u32,
    /// Schedule to run when the file defines several.
    #[arg(long)]
    schedule: Option<String>,
    /// Integer parameter of the schedule, `NAME=VALUE` (repeatable).
    #[arg(long = "param", value_parser = parse_param)]
    params: Vec<(String, i64)>,
    /// Element counts: `N`, a list `N,M,…`, or a power-of-two range `LO:HI` (suffixes K, M, G);
    /// the count of the collective's largest buffer, as in nccl-tests.
    #[arg(long, default_value = "1M")]
    count: String,
    /// Data type (f32, f64, f16, bf16, i32, i64, u8).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Reduce op (sum, avg, max, min).
    #[arg(long, default_value = "sum")]
    op: String,
    /// Wire type for `wire`-class buffers (default: the data type, or
    /// SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE when set).
    #[arg(long)]
    wire: Option<String>,
    /// Timed launches per size (each row gives the slowest rank's median and minimum per launch).
    #[arg(long, default_value_t = 20)]
    iters: u32,
    /// Untimed launches before them.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Compare every rank's output with the sequential reference (exit 1 on any mismatch).
    #[arg(long)]
    check: bool,
    /// Bind the role buffers as private memory (staged through heap scratch).
    #[arg(long)]
    staged: bool,
    /// `auto` (processes sharing the heap, each launch's steps run by whichever of the two
    /// host backends measured faster for its schedule and size; the default), `interp` (the
    /// same processes, the interpreter), `jit` (the same processes, the steps run by kernels
    /// compiled through LLVM), `threads` (one process) or `sim` (the generated Ascend C kernel
    /// compiled against the host simulation, run by every rank). `auto` and `jit` print the
    /// compile time.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Extra size variable, `NAME=VALUE` (e.g. `m=64` for the matmul collectives; repeatable).
    #[arg(long = "size", value_parser = parse_param)]
    size_vars: Vec<(String, i64)>,
    /// Kill the ranks and fail after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// `--backend sim`: blockDim, the vector cores each step's data is split over; for kernels
    /// with matmul steps, AI Cores of one Cube core and two vector cores each (at most 8).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    block_dim: u32,
}

fn parse_count(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("`{s}` is not an element count"))?;
    n.checked_mul(mult)
        .ok_or_else(|| anyhow!("count `{s}` overflows"))
}

/// `N`, `N,M,…` or `LO:HI` (powers of two from LO to HI).
pub fn parse_counts(s: &str) -> Result<Vec<u64>> {
    if let Some((lo, hi)) = s.split_once(':') {
        let (lo, hi) = (parse_count(lo)?, parse_count(hi)?);
        if lo == 0 || lo > hi {
            bail!("count range `{s}` must be LO:HI with 0 < LO <= HI");
        }
        let mut v = Vec::new();
        let mut c = lo;
        while c <= hi {
            v.push(c);
            c = match c.checked_mul(2) {
                Some(x) => x,
                None => break,
            };
        }
        return Ok(v);
    }
    s.split(',').map(parse_count).collect()
}

fn build_plan(args: &Args) -> Result<Plan> {
    let loaded = load(std::slice::from_ref(&args.file)).map_err(|e| anyhow!("{e}"))?;
    let name = pick_schedule(&loaded, args.schedule.as_deref())?;
    let fixed = param_map(&args.params)?;
    let params = single_binding(&loaded.lib, &name, args.ranks, &fixed)?;
    let c = compile(
        &loaded.lib,
        &name,
        args.ranks,
        &params,
        &CompileOptions::default(),
    )
    .map_err(|d| {
        anyhow!(
            "`{name}` does not compile for {} ranks:\n{}",
            args.ranks,
            symsched_compiler::diag::render_all(&d, loaded.lib.sources())
        )
    })?;
    Ok(c.plan)
}

struct Setup {
    plan: Plan,
    types: ElemTypes,
    op: ReduceOp,
    counts: Vec<u64>,
    extra: Vec<(String, u64)>,
}

fn setup(args: &Args) -> Result<Setup> {
    let plan = build_plan(args)?;
    let data = DType::parse(&args.dtype)?;
    let wire = match &args.wire {
        Some(w) => Some(DType::parse(w)?),
        None => match std::env::var("SYMMETRIC_MEMORY_LOW_PRECISION_DTYPE") {
            Ok(w) if !w.is_empty() && data.is_float() => Some(DType::parse(&w)?),
            _ => None,
        },
    };
    let types = ElemTypes::new(data, wire)?;
    let op = ReduceOp::parse(&args.op)?;
    let counts = parse_counts(&args.count)?;
    let extra = args
        .size_vars
        .iter()
        .map(|(k, v)| {
            u64::try_from(*v)
                .map(|v| (k.clone(), v))
                .map_err(|_| anyhow!("size {k} must not be negative"))
        })
        .collect::<Result<_>>()?;
    Ok(Setup {
        plan,
        types,
        op,
        counts,
        extra,
    })
}

fn spec_for(args: &Args, s: &Setup, count: u64) -> RunSpec {
    RunSpec {
        types: s.types,
        op: s.op,
        sizes: sizes_for(&s.plan, count, &s.extra),
        warmup: args.warmup,
        iters: args.iters.max(1),
        check: args.check,
        staged: args.staged,
    }
}

fn header(args: &Args, s: &Setup) {
    println!(
        "# symsched run: {} ({}) on {} ranks, backend {}, dtype {}, wire {}, op {}, iters {}, warmup {}{}",
        s.plan.schedule,
        s.plan.collective.name(),
        s.plan.group_size,
        args.backend,
        s.types.data,
        s.types.wire,
        s.op,
        args.iters,
        args.warmup,
        if args.staged { ", staged" } else { "" }
    );
    println!(
        "# {:>12} {:>12} {:>6} {:>6} {:>11} {:>11} {:>9} {:>9} {:>8}",
        "size(B)", "count", "type", "redop", "time(us)", "min(us)", "algbw", "busbw", "#wrong"
    );
    println!(
        "# {:>12} {:>12} {:>6} {:>6} {:>11} {:>11} {:>9} {:>9} {:>8}",
        "", "(elements)", "", "", "median", "", "(GB/s)", "(GB/s)", ""
    );
}

/// Median and minimum of one rank's seconds per launch, in nanoseconds.
fn median_min_ns(times: &[f64]) -> [u64; 2] {
    let mut t = times.to_vec();
    t.sort_by(|a, b| a.total_cmp(b));
    let ns = |v: Option<&f64>| (v.copied().unwrap_or(0.0) * 1e9).round() as u64;
    [ns(t.get(t.len() / 2)), ns(t.first())]
}

/// The slowest rank's median and minimum (seconds) of every rank's `[median, min, …]` in
/// nanoseconds: a rank that only sends (a broadcast root, the source of a send) finishes its
/// launch before the data has arrived anywhere, so one rank's times can hide the collective's.
fn slowest<R: AsRef<[u64]>>(per_rank: &[R]) -> (f64, f64) {
    per_rank
        .iter()
        .filter_map(|r| Some((*r.as_ref().first()?, *r.as_ref().get(1)?)))
        .max()
        .map_or((0.0, 0.0), |(med, min)| (med as f64 / 1e9, min as f64 / 1e9))
}

fn row(s: &Setup, bytes: u64, count: u64, (med, min): (f64, f64), wrong: Option<u64>) {
    let algbw = if med > 0.0 {
        bytes as f64 / med / 1e9
    } else {
        0.0
    };
    let busbw = algbw * bus_factor(s.plan.collective, s.plan.group_size);
    let wrong = wrong.map_or("N/A".to_string(), |w| w.to_string());
    println!(
        "  {:>12} {:>12} {:>6} {:>6} {:>11.2} {:>11.2} {:>9.3} {:>9.3} {:>8}",
        bytes,
        count,
        s.types.data.name(),
        if s.plan.collective.reduces() {
            s.op.name()
        } else {
            "none"
        },
        med * 1e6,
        min * 1e6,
        algbw,
        busbw,
        wrong
    );
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<ExitCode> {
    if std::env::var_os(CHILD_ENV).is_some() {
        return run_child(&args);
    }
    match args.backend.as_str() {
        "threads" => run_threads(&args),
        "interp" | "jit" | "auto" => run_parent(&args),
        "sim" => {
            // Lower and compile the kernel once here so the ranks find it in the cache instead
            // of all running g++ at once; its errors (e.g. an op the lowering refuses) surface
            // once, before any rank starts.
            sim_backend(&args, &setup(&args)?)?;
            run_parent(&args)
        }
        b => bail!("unknown backend `{b}` (auto, interp, jit, threads, sim)"),
    }
}

/// The generated Ascend C kernel for this run, compiled against the host simulation
/// (`kernels/sim`) and loaded; cached by content hash.
fn sim_backend(args: &Args, s: &Setup) -> Result<symsched_kernels::sim::fabric::SimBackend> {
    let dtype: symsched_kernels::DType = args.dtype.parse().map_err(|e: String| anyhow!(e))?;
    let wire: symsched_kernels::DType = match &args.wire {
        Some(w) => w.parse().map_err(|e: String| anyhow!(e))?,
        None => dtype,
    };
    let op: symsched_kernels::ReduceOp = args.op.parse()?;
    let opts = symsched_kernels::LowerOptions {
        dtype,
        wire,
        op,
        block_dim: args.block_dim,
        ..Default::default()
    };
    let cache = symsched_kernels::sim_build::default_cache_dir();
    symsched_kernels::sim::fabric::SimBackend::new(&s.plan, opts, &cache)
        .context("building the simulated Ascend C kernel")
}

fn run_threads(args: &Args) -> Result<ExitCode> {
    let s = setup(args)?;
    header(args, &s);
    let mut total_wrong = 0;
    for &count in &s.counts {
        let spec = spec_for(args, &s, count);
        let bytes = message_bytes(&s.plan, &spec)?;
        let heap = (bytes * 4).max(1 << 20) + (16 << 20);
        let reports: Vec<RankReport> =
            run_local(&s.plan, &spec, heap, Duration::from_secs(args.timeout))?;
        let wrong: u64 = reports.iter().map(|r| r.wrong).sum();
        total_wrong += wrong;
        for (r, rep) in reports.iter().enumerate() {
            if let Some(at) = rep.first_wrong {
                println!("{}", explain_wrong(&s.plan, &spec.sizes, r as u32, at));
            }
        }
        let times: Vec<[u64; 2]> = reports.iter().map(|r| median_min_ns(&r.times)).collect();
        row(
            &s,
            bytes,
            count,
            slowest(&times),
            args.check.then_some(wrong),
        );
    }
    finish(args, total_wrong)
}

/// Where a rank's first wrong element is, and the order the reference assumed for its chunk:
/// a failing comparison says what it compared against.
fn explain_wrong(plan: &Plan, sizes: &LaunchSizes, rank: u32, at: (u32, u64)) -> String {
    let (buffer, elem) = at;
    let Some(b) = plan.buffers.get(buffer as usize) else {
        return format!("# rank {rank}: first wrong element {elem} of buffer #{buffer}");
    };
    let chunk = (0..b.chunks).find(|&c| {
        b.chunk_span(c, rank, sizes)
            .is_ok_and(|s| elem >= s.offset && elem < s.offset + s.len)
    });
    match chunk {
        Some(c) if plan.collective.reduces() => format!(
            "# rank {rank}: first wrong element: `{}` element {elem} (chunk {c}); the reference assumed {}",
            b.name,
            assumed_order(plan, rank, buffer, c)
        ),
        Some(c) => format!(
            "# rank {rank}: first wrong element: `{}` element {elem} (chunk {c})",
            b.name
        ),
        None => format!("# rank {rank}: first wrong element: `{}` element {elem}", b.name),
    }
}

fn finish(args: &Args, total_wrong: u64) -> Result<ExitCode> {
    if args.check {
        if total_wrong > 0 {
            println!("# check FAILED: {total_wrong} wrong elements");
            return Ok(ExitCode::from(1));
        }
        println!("# check passed: every rank matches the sequential reference");
    }
    Ok(ExitCode::SUCCESS)
}

fn run_parent(args: &Args) -> Result<ExitCode> {
    // Compile once here so schedule errors are reported once, not by every rank.
    setup(args)?;
    let exe = std::env::current_exe().context("locating the symsched binary")?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut spec = LaunchSpec::new(args.ranks as usize, exe, argv);
    spec.env.push((CHILD_ENV.into(), "1".into()));
    if std::env::var_os("SYMSCHED_SCRATCH_SIZE").is_none() {
        // Staging and scratch for the largest sizes: virtual, only touched pages cost memory.
        spec.env.push((
            "SYMSCHED_SCRATCH_SIZE".into(),
            (4u64 << 30).to_string().into(),
        ));
    }
    if std::env::var_os("SYMMETRIC_MEMORY_HEAP_SIZE").is_none() {
        spec.env.push((
            "SYMMETRIC_MEMORY_HEAP_SIZE".into(),
            (2u64 << 30).to_string().into(),
        ));
    }
    spec.timeout = Some(Duration::from_secs(args.timeout));
    spec.capture = true;
    let outcome = launch(&spec).context("launching the ranks")?;
    let mut rank0_failed = false;
    for (rank, stream, line) in &outcome.output {
        match (rank, stream) {
            (0, Stream::Stdout) => println!("{line}"),
            _ => eprintln!("[rank {rank}] {line}"),
        }
        if *rank == 0 && line.starts_with("# check FAILED") {
            rank0_failed = true;
        }
    }
    match outcome.failure {
        None => Ok(ExitCode::SUCCESS),
        Some(f) => match f.cause {
            // An interruption or the timeout is not a failure of any rank: say what happened,
            // with the shell's exit status for a signal (128 + its number).
            FailureCause::Interrupted { signal } => {
                eprintln!("symsched run: interrupted ({}); ranks stopped", f.status);
                Ok(ExitCode::from(128u8.wrapping_add(signal.clamp(0, 127) as u8)))
            }
            FailureCause::TimedOut => {
                eprintln!("symsched run: {} (--timeout); ranks stopped", f.status);
                Ok(ExitCode::from(1))
            }
            FailureCause::RankFailed if rank0_failed => Ok(ExitCode::from(1)),
            FailureCause::RankFailed => {
                eprintln!("symsched run: rank {} failed ({})", f.rank, f.status);
                Ok(ExitCode::from(1))
            }
        },
    }
}

fn run_child(args: &Args) -> Result<ExitCode> {
    let s = setup(args)?;
    let rt = symsched_runtime::Runtime::init_from_env().context("joining the job")?;
    let world = rt.world()?;
    let fabric = GroupFabric::new(world.clone());
    let exec = match BackendKind::parse(&args.backend) {
        Some(kind) => {
            let mut opts = fabric.exec_options().clone();
            opts.backend = kind;
            Executor::with_options(fabric, opts)
        }
        None => Executor::new(fabric),
    };
    let sim = match args.backend.as_str() {
        "sim" => Some(sim_backend(args, &s)?),
        _ => None,
    };
    let me = world.rank();
    // Every rank must run the same plan: compare the source hash through the heap.
    let digest = u64::from_str_radix(s.plan.source_hash.get(..16).unwrap_or("0"), 16).unwrap_or(0);
    let hashes = exec.allgather_u64("run/plan-hash", &[digest])?;
    if hashes.iter().any(|h| h.first() != Some(&digest)) {
        bail!("ranks compiled different plans (source hashes {hashes:?})");
    }
    if me == 0 {
        header(args, &s);
    }
    let rt_ref = &rt;
    let mut mem = RoleMemory {
        alloc: Box::new(move |bytes| {
            rt_ref
                .malloc(bytes as usize)
                .map(|a| a.offset as u64)
                .map_err(ExecError::from)
        }),
        free: Box::new(move |off| rt_ref.free(off as usize).map_err(ExecError::from)),
    };
    let mut total_wrong = 0;
    for &count in &s.counts {
        let spec = spec_for(args, &s, count);
        let bytes = message_bytes(&s.plan, &spec)?;
        let rep = match &sim {
            Some(kernel) => symsched_kernels::sim::harness::run_rank(&exec, kernel, &s.plan, &spec)?,
            None => run_rank_with(&exec, &s.plan, &spec, Some(&mut mem))?,
        };
        if let Some(at) = rep.first_wrong {
            println!("{}", explain_wrong(&s.plan, &spec.sizes, me as u32, at));
        }
        // One exchange per size: every rank's [median ns, min ns, wrong elements].
        let [med, min] = median_min_ns(&rep.times);
        let all = exec.allgather_u64("run/result", &[med, min, rep.wrong])?;
        let wrong: u64 = all.iter().filter_map(|r| r.get(2)).sum();
        total_wrong += wrong;
        if me == 0 {
            row(&s, bytes, count, slowest(&all), args.check.then_some(wrong));
        }
    }
    drop(mem);
    if matches!(args.backend.as_str(), "jit" | "auto") {
        let st = jit::compile_stats();
        let all = exec.allgather_u64(
            "run/jit-compile",
            &[st.compiled, st.from_disk, st.compile_time.as_nanos() as u64],
        )?;
        if me == 0 {
            let col = |i: usize| all.iter().map(move |r| r.get(i).copied().unwrap_or(0));
            println!(
                "# jit: {} kernels compiled, compile time per rank max {:.1} ms, mean {:.1} ms; {} kernels from the disk cache",
                col(0).sum::<u64>(),
                col(2).max().unwrap_or(0) as f64 / 1e6,
                col(2).sum::<u64>() as f64 / 1e6 / all.len().max(1) as f64,
                col(1).sum::<u64>()
            );
        }
    }
    let code = if me == 0 {
        finish(args, total_wrong)?
    } else if args.check && total_wrong > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    rt.finalize()?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_element_names_its_chunk_and_the_assumed_order() {
        let lib = symsched_compiler::pipeline::standard_library();
        let plan = compile(
            &lib,
            "allreduce_ring",
            3,
            &Default::default(),
            &CompileOptions::default(),
        )
        .expect("compiles")
        .plan;
        let sizes = sizes_for(&plan, 30, &[]);
        let text = explain_wrong(&plan, &sizes, 1, (0, 25));
        assert!(text.contains("`x` element 25 (chunk 2)"), "{text}");
        assert!(
            text.contains("the fold the verifier proved: (x[2]@0 ⊕ x[2]@1) ⊕ x[2]@2"),
            "{text}"
        );
    }

    #[test]
    fn counts_parse() {
        assert_eq!(parse_counts("8:64").unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(parse_counts("1K,3").unwrap(), vec![1024, 3]);
        assert_eq!(parse_counts("2M").unwrap(), vec![2 << 20]);
        assert!(parse_counts("0:4").is_err());
        assert!(parse_counts("x").is_err());
    }
}
