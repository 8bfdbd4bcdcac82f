//! The eager alltoall (`Executor::alltoallv_eager`) on 2 ranks as threads of one process, send
//! and receive buffers in the symmetric heap (as the perftest's tensors), equal splits.
//!
//! `cargo bench -p symsched-runtime --bench alltoall_eager [-- --rounds N --sizes 512K,1,8,64
//! --small ITERS]` (bytes sent per rank: MiB, or KiB with a `K`).
//! - Large: one round (large chunks pulled from the symmetric send buffer) against the earlier
//!   header round + `alltoallv_push` plan (`SYMSCHED_A2A_LARGE_PULL=0`), each with
//!   non-temporal copies on and off (`SYMSCHED_NT_COPY=0`).
//! - `--small ITERS`: per-call µs of a 16-byte alltoall (the small-message path), the number
//!   to compare before/after a change to the call's fixed cost (tracing off).
//!
//! Each variant runs in a child process (this binary again), since the executor reads its
//! switches once per process; variants alternate within each round so all see the same load.
//! Compare ratios within one run only.

mod support;

use std::sync::Barrier;
use std::time::{Duration, Instant};
use symsched_plan::LaunchSizes;
use symsched_runtime::exec::{
    AlltoallvOutcome, Binding, DType, ElemTypes, Executor, Fabric, LaunchArgs, LocalWorld, ReduceOp,
};

/// A bench row: label and the environment of its child process.
type Variant = (&'static str, &'static [(&'static str, &'static str)]);

/// Median and minimum seconds per call over `batches` batches of `iters` calls of a
/// `bytes`-per-rank alltoall (equal splits, f32) on `p` threads; the slowest rank of each
/// batch counts. On an oversubscribed host the minimum is the batch where every rank ran
/// throughout.
fn calls(p: u32, bytes: usize, iters: u32, batches: usize) -> (f64, f64) {
    let plan = support::standard_plan("alltoallv_push", p);
    let heap = (2 * bytes + (64 << 20)) as u64;
    let world = LocalWorld::new(p, heap)
        .expect("world")
        .with_timeout(Duration::from_secs(120));
    let group = world.world_group().expect("group");
    let barrier = Barrier::new(p as usize);
    let per_rank: Vec<Vec<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p)
            .map(|r| {
                let (group, barrier, plan) = (group.clone(), &barrier, &plan);
                s.spawn(move || {
                    let ex = Executor::new(group.fabric(r).expect("fabric"));
                    let lp = ex.load(plan).expect("loads");
                    let f = ex.fabric();
                    let so = f.scratch("bench/send", bytes as u64).expect("send");
                    let ro = f.scratch("bench/recv", bytes as u64).expect("recv");
                    let sp = f.heap_ptr(r, so, bytes as u64).expect("send range");
                    let rp = f.heap_ptr(r, ro, bytes as u64).expect("recv range");
                    // SAFETY: two disjoint checked ranges of this rank's heap segment; peers
                    // read the send range only within a call.
                    let (send, recv) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(sp, bytes),
                            std::slice::from_raw_parts_mut(rp, bytes),
                        )
                    };
                    send.fill(r as u8 + 1);
                    let n = (bytes / 4 / p as usize) as u64;
                    let counts = vec![n; p as usize];
                    let mut one = || {
                        let out = ex
                            .alltoallv_eager(DType::F32, &counts, &counts, send, Some(so), recv)
                            .expect("alltoall");
                        if let AlltoallvOutcome::Rendezvous(m) = out {
                            let sizes = LaunchSizes {
                                vars: Default::default(),
                                counts: Some(m),
                            };
                            let b = bytes as u64;
                            let mut binds = [
                                Binding::Heap {
                                    offset: so,
                                    bytes: b,
                                },
                                Binding::Heap {
                                    offset: ro,
                                    bytes: b,
                                },
                            ];
                            ex.launch(
                                &lp,
                                LaunchArgs {
                                    types: ElemTypes::new(DType::F32, None).expect("f32"),
                                    op: ReduceOp::Sum,
                                    sizes: &sizes,
                                    buffers: &mut binds,
                                },
                            )
                            .expect("plan");
                        }
                    };
                    for _ in 0..3 {
                        one();
                    }
                    let mut out = Vec::with_capacity(batches);
                    for _ in 0..batches {
                        barrier.wait();
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            one();
                        }
                        out.push(t0.elapsed().as_secs_f64() / f64::from(iters));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    let mut slowest: Vec<f64> = (0..batches)
        .map(|b| per_rank.iter().map(|r| r[b]).fold(0.0, f64::max))
        .collect();
    let least = slowest.iter().copied().fold(f64::INFINITY, f64::min);
    (support::median(&mut slowest), least)
}

/// One measurement in a child process with `env` set: median and minimum seconds per call.
fn child(env: &[(&str, &str)], p: u32, bytes: usize, iters: u32, batches: usize) -> (f64, f64) {
    let args = [p as usize, bytes, iters as usize, batches].map(|n| n.to_string());
    let v = support::child_numbers(&args, env);
    (v[0], v[1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let num = |k: usize| -> usize { args[i + k].parse().expect("number") };
        let (md, mn) = calls(num(1) as u32, num(2), num(3) as u32, num(4));
        println!("{md} {mn}");
        return;
    }
    let opt = |name: &str| support::opt(&args, name);
    let rounds: usize = opt("--rounds").map_or(3, |v| v.parse().expect("rounds"));
    if let Some(iters) = opt("--small") {
        let iters: u32 = iters.parse().expect("iterations");
        // One rank has no peer to wait for: its time is the call's own fixed cost.
        for p in [1u32, 2] {
            let t: Vec<(f64, f64)> = (0..rounds)
                .map(|_| child(&[], p, 16 * p as usize, iters, 15))
                .collect();
            let list: Vec<String> = t
                .iter()
                .map(|(md, mn)| format!("{:.3}/{:.3}", mn * 1e6, md * 1e6))
                .collect();
            let best = t.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
            println!(
                "alltoall 16 B per pair, {p} rank(s) (threads): µs per call, least batch {:.3} \
                 (per round min/median: {})",
                best * 1e6,
                list.join(" ")
            );
        }
        return;
    }
    let sizes: Vec<usize> =
        opt("--sizes").map_or(vec![512 << 10, 1 << 20, 8 << 20, 64 << 20], |v| {
            v.split(',')
                .map(|s| match s.strip_suffix('K') {
                    Some(k) => k.parse::<usize>().expect("KiB") << 10,
                    None => s.parse::<usize>().expect("MiB") << 20,
                })
                .collect()
        });
    let variants: [Variant; 4] = [
        ("one round", &[]),
        ("rendezvous", &[("SYMSCHED_A2A_LARGE_PULL", "0")]),
        ("one round NT=0", &[("SYMSCHED_NT_COPY", "0")]),
        (
            "rendezvous NT=0",
            &[("SYMSCHED_A2A_LARGE_PULL", "0"), ("SYMSCHED_NT_COPY", "0")],
        ),
    ];
    println!("alltoall, 2 ranks (threads), heap buffers; µs per call, min / median over rounds");
    for &bytes in &sizes {
        let iters = (256 << 20) / bytes.max(1);
        let iters = iters.clamp(4, 200) as u32;
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (k, (_, env)) in variants.iter().enumerate() {
                times[k].push(child(env, 2, bytes, iters, 5).0);
            }
        }
        let mn: Vec<f64> = times
            .iter()
            .map(|t| t.iter().copied().fold(f64::INFINITY, f64::min))
            .collect();
        let md: Vec<f64> = times.iter_mut().map(|t| support::median(t)).collect();
        let mut line = format!("{:>6} KiB:", bytes >> 10);
        for (k, (label, _)) in variants.iter().enumerate() {
            line += &format!("  {label} {:.0}/{:.0}", mn[k] * 1e6, md[k] * 1e6);
        }
        println!(
            "{line}  | rendezvous/one round {:.2}/{:.2}  NT=0/NT one round {:.2}/{:.2}",
            mn[1] / mn[0],
            md[1] / md[0],
            mn[2] / mn[0],
            md[2] / md[0]
        );
    }
}
