//! Channels inside a rank (plan schema 3, `Step::channel`): the lowering maps channel c to its
//! own launch cores, and the simulation runs every core concurrently, so a wait of one channel
//! never holds up another. Plans are built by hand (the `.sched` syntax is elsewhere).

mod common;

use common::{add, build, build_all, fresh_states, opts, reg, run_fresh, sizes_for, wait_ge};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use symsched_kernels::sim::heap::HeapLayout;
use symsched_kernels::sim::inproc::{self, RankState, RunConfig};
use symsched_kernels::{lower, DType, KernelError, LowerOptions, ReduceOp};
use symsched_plan::*;

const N: u64 = 300;
/// Every run is bounded: a hang is a failure, not a stuck test.
const TIMEOUT: Duration = Duration::from_secs(30);

fn f32_opts() -> LowerOptions {
    opts(DType::F32, DType::F32, ReduceOp::Sum, 16 * 1024)
}

fn buffer(name: &str, role: BufferRole, chunks: u32) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        role,
        chunks,
        extent: Extent::Split {
            total: SizeExpr::var("n").scaled(chunks as u64),
        },
        elem: ElemClass::Data,
    }
}

fn plan_of(
    name: &str,
    buffers: Vec<BufferDecl>,
    signals: &[&str],
    ranks: Vec<Vec<(u32, Op)>>,
) -> Plan {
    let plan = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        schedule: name.into(),
        collective: CollectiveKind::Alltoall,
        group_size: ranks.len() as u32,
        params: BTreeMap::new(),
        hierarchy: None,
        size_vars: vec![SizeVar {
            name: "n".into(),
            meaning: "elements per chunk".into(),
        }],
        buffers,
        signals: signals
            .iter()
            .map(|s| SignalSlot {
                name: (*s).into(),
                mode: SignalMode::Add,
            })
            .collect(),
        ranks: ranks
            .into_iter()
            .enumerate()
            .map(|(r, steps)| RankProgram {
                rank: r as u32,
                steps: steps
                    .into_iter()
                    .enumerate()
                    .map(|(i, (channel, op))| Step {
                        id: i as u32,
                        span: (0, 0),
                        op,
                        channel,
                    })
                    .collect(),
                entry_signals: vec![],
                exit_signals: vec![],
            })
            .collect(),
        duals: vec![],
        source_hash: "hand-built".into(),
        folds: Default::default(),
        declared: None,
    };
    plan.check_consistency()
        .expect("hand-built plan is consistent");
    plan
}

/// Two ranks, two channels each. Channel 0 comes first in the step list and waits on `mine`,
/// which only channel 1 (listed after it) signals, once it copied `in[0]` to `mid`; channel 0
/// then waits for the peer's channel 1 to put `in[1]` into its `land`. Run as one sequence per
/// rank, the first wait never returns.
fn crossed_channels() -> Plan {
    let (inp, out, mid, land) = (0, 1, 2, 3);
    let (mine, ready) = (0, 1);
    let ranks = (0..2u32)
        .map(|r| {
            let peer = 1 - r;
            vec![
                (0, wait_ge(mine, 1)),
                (
                    0,
                    Op::Copy {
                        src: reg(mid, 0, 1),
                        dst: reg(out, 0, 1),
                    },
                ),
                (0, wait_ge(ready, 1)),
                (
                    0,
                    Op::Copy {
                        src: reg(land, 0, 1),
                        dst: reg(out, 1, 1),
                    },
                ),
                (
                    1,
                    Op::Copy {
                        src: reg(inp, 0, 1),
                        dst: reg(mid, 0, 1),
                    },
                ),
                (
                    1,
                    Op::Signal {
                        update: add(mine, r, 1),
                    },
                ),
                (
                    1,
                    Op::Put {
                        src: reg(inp, 1, 1),
                        dst: reg(land, 0, 1),
                        peer,
                        signal: Some(add(ready, peer, 1)),
                    },
                ),
            ]
        })
        .collect();
    plan_of(
        "crossed_channels",
        vec![
            buffer("in", BufferRole::Input, 2),
            buffer("out", BufferRole::Output, 2),
            buffer("mid", BufferRole::Scratch, 1),
            buffer("land", BufferRole::Scratch, 1),
        ],
        &["mine", "ready"],
        ranks,
    )
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn a_wait_on_one_channel_does_not_block_the_other() {
    let plan = crossed_channels();
    assert_eq!(plan.channel_count(), 2);
    let o = f32_opts();
    let k = build(&plan, &o);
    let sizes = sizes_for(&plan, N);
    let layout = HeapLayout::new(&plan, o.dtype, o.wire, &sizes).unwrap();
    let init = fresh_states(&plan, &layout, 1);
    let start = Instant::now();
    let got = run_fresh(&k, &plan, &o, N, TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    assert!(start.elapsed() < TIMEOUT);
    let n = N as usize;
    for r in 0..2 {
        let inp = f32s(&init[r].buffers[0]);
        let peer_in = f32s(&init[1 - r].buffers[0]);
        let out = f32s(&got[r].buffers[1]);
        assert_eq!(
            out[..n],
            inp[..n],
            "rank {r}: out[0] is its own in[0] via channel 1"
        );
        assert_eq!(
            out[n..2 * n],
            peer_in[n..2 * n],
            "rank {r}: out[1] is the peer's in[1]"
        );
        // mine: one self-signal; ready: the peer's one put-with-signal.
        assert_eq!(got[r].signals, vec![1, 1]);
    }
}

/// `reduce_scatter_direct` with its steps dealt over `c` >= 2 channels: the puts (each after its
/// credit wait) go to channel `peer % c`; the own copy runs on channel 1, which
/// then signals its own rank's `ready`, so channel 0's wait counts P arrivals instead of P - 1
/// before the reduce.
fn channel_split(plan: &Plan, c: u32) -> Plan {
    let ready = plan
        .signals
        .iter()
        .position(|s| s.name == "ready")
        .expect("a `ready` slot") as u32;
    let p = plan.group_size as u64;
    let mut split = plan.clone();
    for prog in &mut split.ranks {
        let rank = prog.rank;
        let mut steps: Vec<Step> = Vec::new();
        let old = std::mem::take(&mut prog.steps);
        for (i, step) in old.iter().enumerate() {
            let mut s = step.clone();
            match &step.op {
                Op::Put { peer, .. } => s.channel = peer % c,
                // A credit wait guards the put after it: same channel.
                Op::Wait { slot, .. } if *slot != ready => {
                    if let Some(Op::Put { peer, .. }) = old.get(i + 1).map(|n| &n.op) {
                        s.channel = peer % c;
                    }
                }
                Op::Wait { slot, .. } => {
                    s.op = wait_ge(*slot, p);
                }
                Op::Copy { .. } => {
                    s.channel = 1;
                    steps.push(s);
                    let mut sig = step.clone();
                    sig.op = Op::Signal {
                        update: add(ready, rank, 1),
                    };
                    sig.channel = 1;
                    steps.push(sig);
                    continue;
                }
                _ => {}
            }
            steps.push(s);
        }
        for (i, s) in steps.iter_mut().enumerate() {
            s.id = i as u32;
        }
        prog.steps = steps;
    }
    split.schedule = format!("{}_{c}_channels", plan.schedule);
    split.check_consistency().expect("split plan is consistent");
    split
}

fn run_epochs(
    k: &symsched_kernels::sim_build::SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    epochs: std::ops::Range<u64>,
) -> Vec<RankState> {
    let sizes = sizes_for(plan, N);
    let layout = HeapLayout::new(plan, o.dtype, o.wire, &sizes).unwrap();
    let cfg = RunConfig {
        epochs,
        timeout: TIMEOUT,
        ..RunConfig::default()
    };
    inproc::run(
        k,
        plan,
        &layout,
        &sizes,
        &fresh_states(plan, &layout, 1),
        &cfg,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", plan.schedule))
}

#[test]
fn reduce_scatter_split_over_channels_gives_the_single_channel_bytes() {
    let one = common::reduce_scatter_direct(4, false);
    let two = channel_split(&one, 2);
    let three = channel_split(&one, 3);
    assert_eq!(two.channel_count(), 2);
    assert_eq!(three.channel_count(), 3);
    let sum = opts(DType::F32, DType::F32, ReduceOp::Sum, 16 * 1024);
    let avg = opts(DType::F32, DType::F32, ReduceOp::Avg, 16 * 1024);
    let combos = vec![
        (one.clone(), sum),
        (two.clone(), sum),
        (one.clone(), avg),
        (two.clone(), avg),
        (one.clone(), sum),
        (three.clone(), sum),
    ];
    let kernels = build_all(&combos);
    for (pair, ks) in combos.chunks(2).zip(kernels.chunks(2)) {
        let (o, split) = (pair[0].1, &pair[1].0);
        // Three launches back to back: the credits and exit signals carry across epochs.
        let a = run_epochs(&ks[0], &one, &o, 0..3);
        let b = run_epochs(&ks[1], split, &o, 0..3);
        for r in 0..one.group_size as usize {
            assert_eq!(
                a[r].buffers, b[r].buffers,
                "{} {:?}: rank {r}: the buffers differ from the single-channel plan's",
                split.schedule, o.op
            );
        }
    }
}

#[test]
fn generated_source_maps_channels_to_cores() {
    let plan = crossed_channels();
    let l = lower(&plan, &f32_opts()).unwrap();
    assert!(l.name.ends_with("_c2"), "{}", l.name);
    for want in [
        "constexpr uint32_t kBlockDim = 2;",
        "constexpr uint32_t kChannels = 2;",
        "constexpr uint32_t kChannelCores = 1;",
        "constexpr uint32_t kVecCores = kChannelCores * kAivPerCore;",
        "chan_ = blk_ / kChannelCores;",
        "RunRows(static_cast<uint32_t>(firstRow[1 + chan_]), static_cast<uint32_t>(firstRow[2 + chan_]));",
        "SyncChannels();",
    ] {
        assert!(l.kernel.contains(want), "`{want}` not in the kernel:\n{}", l.kernel);
    }
    assert!(l.header.contains("_BLOCK_DIM 2"), "{}", l.header);
    assert!(
        l.table
            .contains("first_row[0..=P*(C+2)] with C = 2 channels"),
        "{}",
        l.table
    );
    // The table: P·(C+2)+1 run starts, each rank's runs entry, channel 0, channel 1, exit.
    let t = &l.table_data;
    assert_eq!(t.channels, 2);
    assert_eq!(t.rank_first.len(), 2 * 4 + 1);
    // No entry or exit signals; channel 0 has 4 rows, channel 1 three.
    assert_eq!(t.rank_first[..5], [0, 0, 4, 7, 7]);
    let comments: Vec<&str> = t.rows.iter().map(|r| r.comment.as_str()).collect();
    assert!(comments[0].starts_with("r0 c0 s0: wait"), "{comments:?}");
    assert!(comments[4].starts_with("r0 c1 s4: "), "{comments:?}");
    assert!(l.table.contains("r0 c1 s5: signal mine@0"), "{}", l.table);
}

#[test]
fn single_channel_plans_lower_as_before() {
    let plan = common::reduce_scatter_direct(4, false);
    let l = lower(&plan, &f32_opts()).unwrap();
    assert_eq!(l.table_data.channels, 1);
    assert_eq!(l.table_data.rank_first.len(), 5);
    for absent in ["kChannels", "chan_", "SyncChannels", "RunRows"] {
        assert!(
            !l.kernel.contains(absent),
            "`{absent}` in a single-channel kernel"
        );
    }
}

#[test]
fn channels_times_block_dim_is_bounded() {
    let plan = crossed_channels();
    let mut o = f32_opts();
    o.block_dim = 16;
    let e = lower(&plan, &o).unwrap_err();
    assert!(
        matches!(
            e,
            KernelError::ChannelCores {
                channels: 2,
                block_dim: 16,
                cores: 32,
                max: 16,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("2 channels x blockDim 16 = 32 cores"), "{msg}");
    // Within the limit but more than one core per channel: refused by name.
    o.block_dim = 2;
    let e = lower(&plan, &o).unwrap_err();
    assert!(
        matches!(e, KernelError::Channels { channels: 2, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("blockDim 2 per channel"), "{e}");
}

/// Channel 1 of rank 0 waits on a slot nobody signals; its channel 0 and rank 1 are fine. The
/// launch fails within the run's deadline (the wait gives up, the other cores stop at their
/// barrier or wait) instead of hanging.
#[test]
fn a_stuck_channel_fails_the_launch_without_hanging_the_others() {
    let (inp, out) = (0, 1);
    let never = 0;
    let ranks = (0..2u32)
        .map(|r| {
            let mut steps = vec![(
                0,
                Op::Copy {
                    src: reg(inp, 0, 1),
                    dst: reg(out, 0, 1),
                },
            )];
            if r == 0 {
                steps.push((1, wait_ge(never, 1)));
            }
            steps.push((
                1,
                Op::Copy {
                    src: reg(inp, 1, 1),
                    dst: reg(out, 1, 1),
                },
            ));
            steps
        })
        .collect();
    let plan = plan_of(
        "stuck_channel",
        vec![
            buffer("in", BufferRole::Input, 2),
            buffer("out", BufferRole::Output, 2),
        ],
        &["never"],
        ranks,
    );
    let o = f32_opts();
    let k = build(&plan, &o);
    let start = Instant::now();
    let e = run_fresh(&k, &plan, &o, N, Duration::from_secs(3)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(e.sim_status(), Some("SYMSCHED_SIM_E_WAIT_FAILED"), "{e}");
}

/// The same plan with channel 1's signal moved before its copy: nothing orders channel 0's
/// read of `mid` after channel 1's write any more, and the simulation says so (a self-signal
/// orders only the writes its sender knew finished, not everything).
#[test]
fn a_signal_before_the_write_does_not_order_the_channels() {
    let mut plan = crossed_channels();
    plan.schedule = "crossed_channels_early_signal".into();
    for prog in &mut plan.ranks {
        // Steps 4 (copy into mid) and 5 (signal mine) of channel 1 trade places.
        prog.steps.swap(4, 5);
        for (i, s) in prog.steps.iter_mut().enumerate() {
            s.id = i as u32;
        }
    }
    let o = f32_opts();
    let k = build(&plan, &o);
    let sizes = sizes_for(&plan, N);
    let layout = HeapLayout::new(&plan, o.dtype, o.wire, &sizes).unwrap();
    for seed in 0..4 {
        let cfg = RunConfig {
            timeout: TIMEOUT,
            seed,
            ..RunConfig::default()
        };
        let e = inproc::run(
            &k,
            &plan,
            &layout,
            &sizes,
            &fresh_states(&plan, &layout, 1),
            &cfg,
        )
        .expect_err("the race is reported");
        let status = e.sim_status().unwrap_or_default().to_string();
        assert!(
            status == "SYMSCHED_SIM_E_PIPE_RACE" || status == "SYMSCHED_SIM_E_GM_RACE",
            "seed {seed}: {e}"
        );
    }
}

/// Write after read across channels: channel 0 copies `mid` out, then signals its own rank;
/// channel 1 waits for that signal and only then overwrites `mid` (listed first, so one
/// sequence would deadlock). The read finished before the signal (the copy's store waited for
/// its load), so the overwrite is ordered after it.
#[test]
fn a_channel_may_overwrite_what_another_channel_read_after_its_signal() {
    let (inp, out, mid) = (0, 1, 2);
    let done = 0;
    let ranks = (0..2u32)
        .map(|r| {
            vec![
                (1, wait_ge(done, 1)),
                (
                    1,
                    Op::Copy {
                        src: reg(inp, 0, 1),
                        dst: reg(mid, 0, 1),
                    },
                ),
                (
                    1,
                    Op::Copy {
                        src: reg(mid, 0, 1),
                        dst: reg(out, 1, 1),
                    },
                ),
                (
                    0,
                    Op::Copy {
                        src: reg(mid, 0, 1),
                        dst: reg(out, 0, 1),
                    },
                ),
                (
                    0,
                    Op::Signal {
                        update: add(done, r, 1),
                    },
                ),
            ]
        })
        .collect();
    let plan = plan_of(
        "channel_write_after_read",
        vec![
            buffer("in", BufferRole::Input, 2),
            buffer("out", BufferRole::Output, 2),
            buffer("mid", BufferRole::Scratch, 1),
        ],
        &["done"],
        ranks,
    );
    let o = f32_opts();
    let k = build(&plan, &o);
    let sizes = sizes_for(&plan, N);
    let layout = HeapLayout::new(&plan, o.dtype, o.wire, &sizes).unwrap();
    let init = fresh_states(&plan, &layout, 1);
    let got = run_fresh(&k, &plan, &o, N, TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let n = N as usize;
    for r in 0..2 {
        let mid0 = f32s(&init[r].buffers[2]);
        let inp = f32s(&init[r].buffers[0]);
        let out = f32s(&got[r].buffers[1]);
        assert_eq!(
            out[..n],
            mid0[..n],
            "rank {r}: out[0] is mid before channel 1 wrote it"
        );
        assert_eq!(out[n..2 * n], inp[..n], "rank {r}: out[1] is in[0] via mid");
    }
}

/// Ranks may use different numbers of channels: the plan's count sets the launch, and a rank's
/// unused channels run empty (their cores only meet the others at the start and the end).
#[test]
fn a_rank_with_fewer_channels_leaves_its_extra_cores_idle() {
    let (inp, out) = (0, 1);
    let copy = |c: u32| Op::Copy {
        src: reg(inp, c, 1),
        dst: reg(out, c, 1),
    };
    let plan = plan_of(
        "uneven_channels",
        vec![
            buffer("in", BufferRole::Input, 3),
            buffer("out", BufferRole::Output, 3),
        ],
        &[],
        vec![
            vec![(2, copy(2)), (0, copy(0)), (1, copy(1))],
            vec![(0, copy(0)), (0, copy(1)), (0, copy(2))],
        ],
    );
    assert_eq!(plan.ranks[1].channel_count(), 1);
    let o = f32_opts();
    let l = lower(&plan, &o).unwrap();
    assert!(l.kernel.contains("constexpr uint32_t kBlockDim = 3;"));
    // Rank 1: no entry rows, three rows on channel 0, empty channels 1 and 2, no exit rows.
    assert_eq!(l.table_data.rank_first[5..], [3, 3, 6, 6, 6, 6]);
    let k = build(&plan, &o);
    let sizes = sizes_for(&plan, N);
    let layout = HeapLayout::new(&plan, o.dtype, o.wire, &sizes).unwrap();
    let init = fresh_states(&plan, &layout, 1);
    let got = run_fresh(&k, &plan, &o, N, TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    for r in 0..2 {
        assert_eq!(got[r].buffers[1], init[r].buffers[0], "rank {r}");
    }
}

/// Matmul steps and host collectives stay single-channel: a plan with either and a second
/// channel is refused by name (the Cube cores and launch segments serve every core at once).
#[test]
fn matmul_and_host_collectives_with_channels_are_refused() {
    use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
    let lib = standard_library();
    for (name, params, what) in [
        ("allgather_matmul", vec![], "matmul steps"),
        (
            "allreduce_hier",
            vec![("L".to_string(), 2i64)],
            "host collectives",
        ),
    ] {
        let mut plan = compile(
            &lib,
            name,
            4,
            &params.into_iter().collect(),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|d| panic!("{name}: {d:?}"))
        .plan;
        // Some step that is neither (the lowering checks combinations, not the verifier's rules).
        let step = plan.ranks[0]
            .steps
            .iter_mut()
            .find(|s| matches!(s.op, Op::Wait { .. } | Op::Copy { .. } | Op::Put { .. }))
            .expect("a movable step");
        step.channel = 1;
        let e = lower(&plan, &f32_opts()).unwrap_err();
        assert!(
            matches!(&e, KernelError::Channels { channels: 2, what: w } if w == what),
            "{name}: {e:?}"
        );
    }
}
