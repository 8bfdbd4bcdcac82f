//! Plans split into channels by hand (shapes the standard library does not have: a wait on a
//! later channel, a channel that fails, a rank that stalls): the channel tests on the
//! in-process fabric (`exec_channels.rs`) and on processes (`exec_channels_multiproc.rs`) run
//! the same ones.

use symsched_plan::{
    BufferDecl, BufferRole, Cmp, CollectiveKind, ElemClass, Extent, Op, Plan, RankProgram, Region,
    SignalMode, SignalSlot, SignalUpdate, SizeExpr, SizeVar, Step, WaitTarget, PLAN_SCHEMA_VERSION,
};

/// A new slot named `name` in `plan`; returns its index.
pub fn add_slot(plan: &mut Plan, name: &str) -> u32 {
    plan.signals.push(SignalSlot {
        name: name.into(),
        mode: SignalMode::Add,
    });
    plan.signals.len() as u32 - 1
}

/// `slot @ peer += 1` (once per launch).
pub fn signal(slot: u32, peer: u32) -> Op {
    Op::Signal {
        update: SignalUpdate {
            slot,
            peer,
            mode: SignalMode::Add,
            value: 1,
            stride: 0,
        },
    }
}

/// Wait until `slot` has had its one update of this launch (the `+= 1` of [`signal`]).
pub fn wait(slot: u32) -> Op {
    Op::Wait {
        slot,
        cmp: Cmp::Ge,
        target: WaitTarget {
            stride: 1,
            offset: 1,
        },
    }
}

/// Replace rank `r`'s steps with `steps` (channel, op), then number every step of the plan
/// afresh (ids are unique over the plan).
pub fn set_steps(plan: &mut Plan, r: usize, steps: Vec<(u32, Op)>) {
    plan.ranks[r].steps = steps
        .into_iter()
        .map(|(channel, op)| Step {
            id: 0,
            span: (0, 0),
            op,
            channel,
        })
        .collect();
    let mut id = 0;
    for rank in &mut plan.ranks {
        for s in &mut rank.steps {
            s.id = id;
            id += 1;
        }
    }
}

/// The ops of rank `r`, in plan order.
pub fn ops(plan: &Plan, r: usize) -> Vec<Op> {
    plan.ranks[r].steps.iter().map(|s| s.op.clone()).collect()
}

/// `alltoall_push` at P = 2 with every rank's own-block copy moved to channel 1, placed *after*
/// channel 0's steps, and channel 0 first waiting for a signal channel 1 sends only after that
/// copy: as one sequence the rank waits for its own last step (deadlock); as channels it runs.
pub fn alltoall_waiting_on_a_later_channel() -> Plan {
    let mut plan = super::plan("alltoall_push", 2);
    let own = add_slot(&mut plan, "own_copied");
    for r in 0..2 {
        let all = ops(&plan, r);
        let (copies, rest): (Vec<Op>, Vec<Op>) =
            all.into_iter().partition(|o| matches!(o, Op::Copy { .. }));
        assert_eq!(copies.len(), 1, "alltoall_push copies its own block once");
        let mut steps = vec![(0, wait(own))];
        steps.extend(rest.into_iter().map(|o| (0, o)));
        steps.extend(copies.into_iter().map(|o| (1, o)));
        steps.push((1, signal(own, r as u32)));
        set_steps(&mut plan, r, steps);
    }
    plan
}

/// `allreduce_two_shot` at P = 2 with each rank's reduce-scatter half on channel 0 and its
/// allgather half (the push of the reduced chunk and the wait for the peer's) on channel 1,
/// which waits for a signal channel 0 sends after its reduce.
pub fn two_shot_split() -> Plan {
    let mut plan = super::plan("allreduce_two_shot", 2);
    let reduced = add_slot(&mut plan, "reduced");
    for r in 0..2 {
        let all = ops(&plan, r);
        let at = all
            .iter()
            .position(|o| matches!(o, Op::Reduce { .. }))
            .expect("two-shot reduces");
        let mut steps: Vec<(u32, Op)> = all[..=at].iter().map(|o| (0, o.clone())).collect();
        steps.push((0, signal(reduced, r as u32)));
        steps.push((1, wait(reduced)));
        steps.extend(all[at + 1..].iter().map(|o| (1, o.clone())));
        set_steps(&mut plan, r, steps);
    }
    plan
}

/// One rank, two channels, i32 data: channel 1's matmul fails at once (matmul is defined for
/// floats only, and is refused when the step runs), so the signal channel 0 waits for never
/// comes.
pub fn failing_channel_plan() -> Plan {
    let split_n = Extent::Split {
        total: SizeExpr::var("n"),
    };
    let buf = |name: &str, role| BufferDecl {
        name: name.into(),
        role,
        chunks: 1,
        extent: split_n.clone(),
        elem: ElemClass::Data,
    };
    let whole = |buffer| Region {
        buffer,
        first: 0,
        count: 1,
    };
    let mut plan = Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        schedule: "failing_channel".into(),
        collective: CollectiveKind::Allgather,
        group_size: 1,
        params: Default::default(),
        hierarchy: None,
        size_vars: ["n", "m", "k"]
            .iter()
            .map(|v| SizeVar {
                name: (*v).into(),
                meaning: "elements".into(),
            })
            .collect(),
        buffers: vec![buf("x", BufferRole::Input), buf("y", BufferRole::Output)],
        signals: vec![],
        ranks: vec![RankProgram {
            rank: 0,
            steps: vec![],
            entry_signals: vec![],
            exit_signals: vec![],
        }],
        duals: vec![],
        source_hash: "0".repeat(64),
        folds: Default::default(),
        declared: None,
    };
    let go = add_slot(&mut plan, "go");
    set_steps(
        &mut plan,
        0,
        vec![
            (0, wait(go)),
            (
                0,
                Op::Copy {
                    src: whole(0),
                    dst: whole(1),
                },
            ),
            (
                1,
                Op::Matmul {
                    c: whole(1),
                    a: whole(0),
                    b: whole(0),
                },
            ),
            (1, signal(go, 0)),
        ],
    );
    plan
}

/// The signal names of [`waiting_for_the_last_rank`]: what the last rank would send every
/// other rank on each of its channels.
pub const FROM_LAST_RANK: [&str; 2] = ["from_last_rank_ch0", "from_last_rank_ch1"];

/// `p` ranks, two channels each, every step a wait or a signal (the `alltoall_push` buffers at
/// `p`, unused). The last rank holds both of its channels in a wait for a signal nobody sends
/// (a peer that stalls, and is then killed), after which each channel would signal every other
/// rank. The other ranks wait for those signals:
/// - `chained == false`: both of their channels wait for the last rank (channel 0 for the
///   first signal, channel 1 for the second);
/// - `chained == true`: only channel 1 waits for the last rank and then signals channel 0,
///   which waits for that local signal first (so its wait ends by cancellation when channel 1
///   fails).
pub fn waiting_for_the_last_rank(p: u32, chained: bool) -> Plan {
    let mut plan = super::plan("alltoall_push", p);
    plan.schedule = if chained {
        "dead_peer_chained"
    } else {
        "dead_peer_both"
    }
    .into();
    let from_last = FROM_LAST_RANK.map(|name| add_slot(&mut plan, name));
    let hold = add_slot(&mut plan, "never_sent");
    let go = add_slot(&mut plan, "channel_1_done");
    let last = p - 1;
    for r in 0..last {
        let steps = if chained {
            vec![
                (0, wait(go)),
                (0, wait(from_last[0])),
                (1, wait(from_last[1])),
                (1, signal(go, r)),
            ]
        } else {
            vec![(0, wait(from_last[0])), (1, wait(from_last[1]))]
        };
        set_steps(&mut plan, r as usize, steps);
    }
    let mut steps = Vec::new();
    for (channel, slot) in [(0, from_last[0]), (1, from_last[1])] {
        steps.push((channel, wait(hold)));
        steps.extend((0..last).map(|r| (channel, signal(slot, r))));
    }
    set_steps(&mut plan, last as usize, steps);
    plan
}
