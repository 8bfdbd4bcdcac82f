//! Signal round trip between two rank processes through `Group::signal` + `Group::wait`: the
//! fixed cost every put-with-signal and every wait of the runtime core pays (signal tallies,
//! abort probes). Rank 0 signals rank 1 and waits for its answer, `--iters` times per round.
//!
//! `cargo bench -p symsched-runtime --bench signal_pingpong [-- --iters N --rounds R]`
//! prints the median and minimum ns per round trip over the rounds. With `--local`, one rank
//! signals itself and waits for the (already satisfied) value instead: the CPU cost of a
//! signal plus a wait without any cross-process wake-up, which is what to compare on a
//! loaded machine. Compare builds (or changes) by running them alternately in one session and
//! giving the load average.

use std::time::{Duration, Instant};

use symsched_runtime::launcher::{launch, LaunchSpec};
use symsched_runtime::{Cmp, Runtime, SignalMode, WaitContext};

const ROLE: &str = "SYMSCHED_PINGPONG_RANK";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rank(iters: u64, rounds: u64) {
    let rt = Runtime::init_from_env().expect("joins");
    let w = rt.world().expect("world");
    let s = w.signal_slots("pingpong", 2).expect("slots");
    let (ping, pong) = (s.slot(0), s.slot(1));
    let ctx = WaitContext::new("pingpong", "rt", "s");
    let me = w.rank();
    w.barrier().expect("barrier");
    let mut n = 0u64;
    for round in 0..rounds {
        w.barrier().expect("barrier");
        let t = Instant::now();
        for _ in 0..iters {
            n += 1;
            if me == 0 {
                w.signal(1, ping, SignalMode::Add, 1).expect("signal");
                w.wait(pong, Cmp::Ge, n, &ctx).expect("wait");
            } else {
                w.wait(ping, Cmp::Ge, n, &ctx).expect("wait");
                w.signal(0, pong, SignalMode::Add, 1).expect("signal");
            }
        }
        if me == 0 {
            let ns = t.elapsed().as_nanos() as f64 / iters as f64;
            println!("ROUND {round} ns_per_roundtrip={ns:.1}");
        }
    }
    rt.finalize().expect("finalize");
}

/// One rank, self-signals: ns per signal + satisfied wait.
fn local(iters: u64, rounds: u64) {
    let dir = symsched_runtime::bootstrap::make_private_dir(&std::env::temp_dir()).expect("dir");
    let mut cfg = symsched_runtime::RuntimeConfig::local(0, 1, dir.clone()).expect("cfg");
    cfg.heap_size = 8 << 20;
    cfg.scratch_size = 1 << 20;
    let rt = Runtime::init(cfg).expect("runtime");
    let w = rt.world().expect("world");
    let s = w.signal_slots("pingpong", 1).expect("slots").slot(0);
    let ctx = WaitContext::new("pingpong", "local", "s");
    let mut n = 0u64;
    let mut ns = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            n += 1;
            w.signal(0, s, SignalMode::Add, 1).expect("signal");
            w.wait(s, Cmp::Ge, n, &ctx).expect("wait");
        }
        ns.push(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    drop(w);
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
    ns.sort_by(f64::total_cmp);
    println!(
        "local signal + satisfied wait: median {:.1} ns, min {:.1} ns over {} rounds of {iters}",
        ns[ns.len() / 2],
        ns[0],
        ns.len()
    );
}

fn main() {
    let iters = arg("--iters", 200_000);
    let rounds = arg("--rounds", 7);
    if std::env::args().any(|a| a == "--local") {
        local(iters, rounds);
        return;
    }
    if std::env::var_os(ROLE).is_some() {
        rank(iters, rounds);
        return;
    }
    let exe = std::env::current_exe().expect("exe");
    let mut spec = LaunchSpec::new(
        2,
        exe,
        [
            "--iters".to_string(),
            iters.to_string(),
            "--rounds".to_string(),
            rounds.to_string(),
        ],
    );
    spec.env.push((ROLE.into(), "1".into()));
    spec.env
        .push(("SYMMETRIC_MEMORY_HEAP_SIZE".into(), "8388608".into()));
    spec.env
        .push(("SYMSCHED_SCRATCH_SIZE".into(), "1048576".into()));
    spec.timeout = Some(Duration::from_secs(600));
    spec.capture = true;
    let out = launch(&spec).expect("launch");
    let mut ns: Vec<f64> = out
        .output
        .iter()
        .filter_map(|(_, _, l)| l.split("ns_per_roundtrip=").nth(1))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    assert!(out.success() && !ns.is_empty(), "{:?}", out.failure);
    ns.sort_by(f64::total_cmp);
    println!(
        "signal round trip: median {:.1} ns, min {:.1} ns over {} rounds of {iters}",
        ns[ns.len() / 2],
        ns[0],
        ns.len()
    );
}
