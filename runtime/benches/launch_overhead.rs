//! Per-launch cost of the smallest allreduce: 8 bytes (two f32) with `allreduce_one_shot`, the
//! schedule the Python layer picks at that size, its ranks as threads of one process.
//!
//! `cargo bench -p symsched-runtime --bench launch_overhead [-- --rounds N --iters N --ranks P
//! --schedule NAME]` (`--ranks 1`: only the cases with one rank; `--schedule`: another standard
//! schedule at the same size variable, n = 2 f32, e.g. `allgather_push`, whose puts into role
//! buffers wait for entry credits)
//! - P = 1: the executor's own per-launch cost (checks, resolution reuse, staging, the step
//!   loop, exit signals) with nobody to wait for, the buffer symmetric (heap) or private
//!   (staged);
//! - P = 2: the same with a peer (two threads; on a loaded host this mostly measures how soon
//!   the peer gets a core).
//!
//! Prints µs per launch, the minimum and the median over rounds of `--iters` launches (the
//! slowest rank of each round counts), with the load average. Build this file against another
//! checkout to compare builds; compare numbers of one run only.

mod support;

use std::sync::Barrier;
use std::time::{Duration, Instant};
use symsched_plan::LaunchSizes;
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, Executor, Fabric, LaunchArgs, LocalWorld, ReduceOp,
};

/// Seconds per launch of each round (slowest rank) of `iters` launches on `p` threads.
fn rounds(schedule: &str, p: u32, staged: bool, iters: u32, rounds: usize) -> Vec<f64> {
    let plan = support::standard_plan(schedule, p);
    let world = LocalWorld::new(p, 16 << 20)
        .expect("world")
        .with_timeout(Duration::from_secs(120));
    let group = world.world_group().expect("group");
    let barrier = Barrier::new(p as usize);
    let types = ElemTypes::new(DType::F32, None).expect("f32");
    let mut sizes = LaunchSizes::default();
    sizes.vars.insert("n".into(), 2);
    let per_rank: Vec<Vec<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p)
            .map(|r| {
                let (group, barrier, plan, sizes) = (group.clone(), &barrier, &plan, &sizes);
                s.spawn(move || {
                    let ex = Executor::new(group.fabric(r).expect("fabric"));
                    let lp = ex.load(plan).expect("loads");
                    // One buffer per role, its length on this rank.
                    let bytes: Vec<u64> = ex
                        .role_lens(&lp, sizes)
                        .expect("role lengths")
                        .iter()
                        .map(|n| n * 4)
                        .collect();
                    let offsets: Vec<u64> = bytes
                        .iter()
                        .enumerate()
                        .map(|(i, b)| {
                            ex.fabric()
                                .scratch(&format!("bench/{i}"), (*b).max(8))
                                .expect("scratch")
                        })
                        .collect();
                    let mut private: Vec<Vec<u8>> =
                        bytes.iter().map(|b| vec![0u8; *b as usize]).collect();
                    // Built once: a launch only reads its bindings.
                    let mut b: Vec<Binding<'_>> = if staged {
                        private.iter_mut().map(|v| Binding::Host(v)).collect()
                    } else {
                        offsets
                            .iter()
                            .zip(&bytes)
                            .map(|(&offset, &bytes)| Binding::Heap { offset, bytes })
                            .collect()
                    };
                    let mut launch = || {
                        ex.launch(
                            &lp,
                            LaunchArgs {
                                types,
                                op: ReduceOp::Sum,
                                sizes,
                                buffers: &mut b,
                            },
                        )
                        .expect("launch");
                    };
                    for _ in 0..200 {
                        launch();
                    }
                    let mut out = Vec::with_capacity(rounds);
                    for _ in 0..rounds {
                        barrier.wait();
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            launch();
                        }
                        out.push(t0.elapsed().as_secs_f64() / f64::from(iters));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    (0..rounds)
        .map(|i| per_rank.iter().map(|r| r[i]).fold(0.0, f64::max))
        .collect()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n_rounds = support::opt(&args, "--rounds").map_or(15, |v| v.parse().expect("--rounds N"));
    let iters = support::opt(&args, "--iters").map_or(5000, |v| v.parse().expect("--iters N"));
    let only: Option<u32> = support::opt(&args, "--ranks").map(|v| v.parse().expect("--ranks P"));
    let schedule = support::opt(&args, "--schedule").map_or("allreduce_one_shot", String::as_str);
    println!("load average before: {}", load_average());
    println!(
        "{:>26} {:>10} {:>10}",
        format!("n = 2 f32 {schedule}"),
        "min us",
        "median us"
    );
    for (label, p, staged) in [
        ("P=1 symmetric", 1, false),
        ("P=1 staged", 1, true),
        ("P=2 symmetric", 2, false),
    ] {
        if only.is_some_and(|o| o != p) {
            continue;
        }
        let mut v = rounds(
            schedule,
            p,
            staged,
            if p == 1 { iters } else { iters / 10 },
            n_rounds,
        );
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let med = support::median(&mut v);
        println!("{label:>26} {:>10.3} {:>10.3}", min * 1e6, med * 1e6);
    }
    println!("load average after: {}", load_average());
}
