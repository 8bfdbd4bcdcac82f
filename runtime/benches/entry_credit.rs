//! The cost of the entry rule at 8 B per rank: back-to-back launches of push schedules whose
//! pushes go straight into the peers' role buffers, with the compiled plan (entry credits: a
//! push waits until its receiver entered) against the same plan with every entry credit turned
//! back into an exit credit (a push waits only until its receiver finished the previous launch
//! — the protocol before the entry rule, racy for role buffers). Both heap-bound roles (in
//! place) and private ones (staged): staged "before" adds one group barrier per launch, standing
//! in for the barrier after the copy-in the executor took before the entry rule.
//!
//! `cargo bench -p symsched-runtime --bench entry_credit [-- --blocks B --launches K --ranks P]`.
//! Ranks are threads of this process over the in-process fabric. A block is K launches back to
//! back with no barrier in between (the way a training loop calls a collective), timed as the
//! slowest rank's mean per launch; the variants take turns block by block (B blocks each) on one
//! world, so a burst of machine load hits them alike. The table gives the median and the 10th
//! percentile over the blocks. Compare ratios of one run only.

mod support;

use std::time::{Duration, Instant};
use symsched_plan::{LaunchSizes, Op, Plan};
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, Executor, Fabric, LaunchArgs, LocalWorld, ReduceOp,
};

/// The plan with its entry credits turned into exit credits, under another name (the executor
/// caches plans by name).
fn exit_credits_only(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    p.schedule = format!("{}_exit_credits", p.schedule);
    let credit: Vec<bool> = p
        .signals
        .iter()
        .map(|s| s.name.starts_with("__credit"))
        .collect();
    for prog in &mut p.ranks {
        for s in &mut prog.steps {
            if let Op::Wait { slot, target, .. } = &mut s.op {
                if credit[*slot as usize] {
                    target.offset = 0;
                }
            }
        }
        let entry = std::mem::take(&mut prog.entry_signals);
        prog.exit_signals.extend(entry);
    }
    p
}

/// One variant: label, whether roles are staged (private memory), whether the plan is the
/// exit-credit form, whether a group barrier precedes each launch.
type Variant = (&'static str, bool, bool, bool);

const VARIANTS: [Variant; 4] = [
    ("heap, entry credits (now)", false, false, false),
    ("heap, exit credits (before)", false, true, false),
    (
        "staged, entry credits, no barrier (now)",
        true,
        false,
        false,
    ),
    ("staged, exit credits + barrier (before)", true, true, true),
];

/// Per variant, per block: the slowest rank's mean seconds per launch over `k` back-to-back
/// launches. All variants run on one in-process world, block after block in turn (`blocks`
/// rounds), so a burst of machine load hits them alike.
fn run(now: &Plan, before: &Plan, k: u32, blocks: u32) -> Vec<Vec<f64>> {
    let p = now.group_size;
    let world = LocalWorld::new(p, 16 << 20)
        .expect("world")
        .with_timeout(Duration::from_secs(60));
    let group = world.world_group().expect("group");
    let types = ElemTypes::new(DType::F32, None).expect("f32");
    let mut sizes = LaunchSizes::default();
    sizes.vars.insert("n".into(), 2); // 8 bytes of f32 per rank
    let per_rank: Vec<Vec<Vec<f64>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p)
            .map(|r| {
                let (group, sizes) = (group.clone(), &sizes);
                s.spawn(move || {
                    let exec = Executor::new(group.fabric(r).expect("fabric"));
                    let plans = [
                        exec.load(now).expect("load"),
                        exec.load(before).expect("load"),
                    ];
                    let lens = exec.role_lens(&plans[0], sizes).expect("lens");
                    let bytes: Vec<u64> = lens.iter().map(|n| n * 4).collect();
                    let offs: Vec<u64> = bytes
                        .iter()
                        .enumerate()
                        .map(|(i, b)| {
                            exec.fabric()
                                .scratch(&format!("bench/role{i}"), (*b).max(64))
                                .expect("scratch")
                        })
                        .collect();
                    let mut host: Vec<Vec<u8>> =
                        bytes.iter().map(|b| vec![1u8; *b as usize]).collect();
                    let mut once = |v: &Variant| {
                        let &(_, staged, old, barrier) = v;
                        if barrier {
                            exec.barrier().expect("barrier");
                        }
                        let mut binds: Vec<Binding> = if staged {
                            host.iter_mut()
                                .map(|h| Binding::Host(h.as_mut_slice()))
                                .collect()
                        } else {
                            offs.iter()
                                .zip(&bytes)
                                .map(|(o, b)| Binding::Heap {
                                    offset: *o,
                                    bytes: *b,
                                })
                                .collect()
                        };
                        exec.launch(
                            &plans[old as usize],
                            LaunchArgs {
                                types,
                                op: ReduceOp::Sum,
                                sizes,
                                buffers: &mut binds,
                            },
                        )
                        .expect("launch");
                    };
                    let mut times = vec![Vec::new(); VARIANTS.len()];
                    for b in 0..=blocks {
                        for (i, v) in VARIANTS.iter().enumerate() {
                            exec.barrier().expect("barrier");
                            let t0 = Instant::now();
                            for _ in 0..k {
                                once(v);
                            }
                            // Block 0 warms up.
                            if b > 0 {
                                times[i].push(t0.elapsed().as_secs_f64() / k as f64);
                            }
                        }
                    }
                    exec.barrier().expect("final barrier");
                    times
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    });
    (0..VARIANTS.len())
        .map(|i| {
            (0..blocks as usize)
                .map(|b| per_rank.iter().map(|t| t[i][b]).fold(0.0, f64::max))
                .collect()
        })
        .collect()
}

/// The value at quantile `q` of `v` (sorted in place).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |name: &str, default: u32| -> u32 {
        support::opt(&args, name)
            .map(|v| v.parse().expect("a number"))
            .unwrap_or(default)
    };
    let (blocks, k, p) = (
        num("--blocks", 60),
        num("--launches", 200),
        num("--ranks", 2),
    );
    let schedules = ["broadcast_push", "allgather_push", "alltoall_push"];
    println!(
        "8 B per rank, P = {p}, blocks of {k} back-to-back launches, {blocks} blocks per variant"
    );
    println!(
        "load average at start: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:<20} {:<42} {:>12} {:>12} {:>9}",
        "schedule", "variant", "median µs", "p10 µs", "vs before"
    );
    for name in schedules {
        let now = symsched_compiler::pipeline::compile(
            &symsched_compiler::pipeline::standard_library(),
            name,
            p,
            &symsched_compiler::pipeline::example_params(name),
            &Default::default(),
        )
        .unwrap_or_else(|d| panic!("{name}: {d:?}"))
        .plan;
        let before = exit_credits_only(&now);
        let mut samples = run(&now, &before, k, blocks);
        let med: Vec<f64> = samples.iter_mut().map(|s| support::median(s)).collect();
        let p10: Vec<f64> = samples.iter_mut().map(|s| quantile(s, 0.1)).collect();
        for (i, (label, ..)) in VARIANTS.iter().enumerate() {
            let base = med[i | 1];
            println!(
                "{name:<20} {label:<42} {:>12.2} {:>12.2} {:>8.3}×",
                med[i] * 1e6,
                p10[i] * 1e6,
                med[i] / base
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
