//! The cost of `symm.empty` / `symm.free` as collectives: a pair of `Runtime::malloc` + `free`
//! (local, agreement checked only at the next barrier) against `empty_collective` +
//! `free_collective` (one world barrier each), 4 KiB, on 2 ranks that are processes of this
//! binary (re-executed by the launcher with `SYMSCHED_ALLOC_BENCH_RANK` set).
//!
//! `cargo bench -p symsched-runtime --bench alloc_collective [-- --pairs N --rounds R]`
//!
//! The variants take turns round by round so machine load hits them alike; printed: µs per
//! pair, minimum and median over the rounds (rank 0), with the load average. Compare ratios of
//! one run only.

mod support;

use std::time::{Duration, Instant};
use symsched_runtime::launcher::{launch, LaunchSpec};

const ROLE: &str = "SYMSCHED_ALLOC_BENCH_RANK";

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn rank(pairs: u32, rounds: usize) {
    let rt = symsched_runtime::Runtime::init_from_env().expect("joins the job");
    let world = rt.world().expect("world");
    let (mut local, mut coll) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        world.barrier().expect("barrier");
        let t0 = Instant::now();
        for _ in 0..pairs {
            let a = rt.malloc(4096).expect("malloc");
            rt.free(a.offset).expect("free");
        }
        local.push(t0.elapsed().as_secs_f64() / f64::from(pairs));
        world.barrier().expect("barrier");
        let t0 = Instant::now();
        for _ in 0..pairs {
            let a = rt.empty_collective(4096, 64).expect("empty");
            rt.free_collective(a.offset).expect("free");
        }
        coll.push(t0.elapsed().as_secs_f64() / f64::from(pairs));
    }
    if rt.rank() == 0 {
        for (label, mut v) in [("malloc+free (local)", local), ("collective pair", coll)] {
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let med = support::median(&mut v);
            println!("{label:>24} {:>10.2} {:>10.2}", min * 1e6, med * 1e6);
        }
    }
    world.barrier().expect("barrier");
    rt.finalize().expect("finalize");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pairs = support::opt(&args, "--pairs").map_or(2000, |v| v.parse().expect("--pairs N"));
    let rounds = support::opt(&args, "--rounds").map_or(9, |v| v.parse().expect("--rounds R"));
    if std::env::var_os(ROLE).is_some() {
        rank(pairs, rounds);
        return;
    }
    println!("load average before: {}", load_average());
    println!(
        "{:>24} {:>10} {:>10}",
        "4 KiB, 2 ranks", "min us", "median us"
    );
    let exe = std::env::current_exe().expect("bench path");
    let mut spec = LaunchSpec::new(2, exe, args.into_iter().skip(1));
    spec.env.push((ROLE.into(), "1".into()));
    spec.timeout = Some(Duration::from_secs(600));
    spec.capture = true;
    let out = launch(&spec).expect("launcher starts the ranks");
    for (r, _, line) in &out.output {
        if *r == 0 {
            println!("{line}");
        }
    }
    assert!(out.success(), "{:?}", out.failure);
    println!("load average after: {}", load_average());
}
