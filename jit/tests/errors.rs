//! Bad sizes, bindings and stuck waits come back as typed statuses with the failing step, the
//! first failure in program order, before any data moves.

mod common;

use common::reference::Memory;
use common::{new_signals, plan as std_plan, run_jit, sizes_for, types, Failure, Harness, Launch};
use std::time::Duration;
use symsched_jit::abi::Status;
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, ReduceOp};
use symsched_plan::*;

fn cache() -> KernelCache {
    KernelCache::new(None, CompileOptions::default()).expect("host target")
}

fn region(buffer: u32) -> Region {
    Region {
        buffer,
        first: 0,
        count: 1,
    }
}

/// One rank: `a` (n elements) copied into `b` (a uniform chunk of `chunk`), then into `c`.
fn one_rank(chunk: SizeExpr, steps: Vec<Op>, signals: usize) -> Plan {
    let buf = |name: &str, role, extent| BufferDecl {
        name: name.into(),
        role,
        chunks: 1,
        extent,
        elem: ElemClass::Data,
    };
    Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        schedule: "bad".into(),
        collective: CollectiveKind::Allgather,
        group_size: 1,
        params: Default::default(),
        hierarchy: None,
        size_vars: vec![SizeVar {
            name: "n".into(),
            meaning: "elements".into(),
        }],
        buffers: vec![
            buf(
                "a",
                BufferRole::Input,
                Extent::Split {
                    total: SizeExpr::var("n"),
                },
            ),
            buf(
                "b",
                BufferRole::Output,
                Extent::Uniform {
                    chunk: chunk.clone(),
                },
            ),
            buf("c", BufferRole::Output, Extent::Uniform { chunk }),
        ],
        signals: (0..signals)
            .map(|i| SignalSlot {
                name: format!("s{i}"),
                mode: SignalMode::Add,
            })
            .collect(),
        ranks: vec![RankProgram {
            rank: 0,
            steps: steps
                .into_iter()
                .enumerate()
                .map(|(i, op)| Step {
                    id: i as u32,
                    span: (0, 0),
                    op,
                    channel: 0,
                })
                .collect(),
            entry_signals: vec![],
            exit_signals: vec![],
        }],
        duals: vec![],
        source_hash: "0".repeat(64),
        folds: Default::default(),
        declared: None,
    }
}

fn copy(src: u32, dst: u32) -> Op {
    Op::Copy {
        src: region(src),
        dst: region(dst),
    }
}

fn run(plan: &Plan, n: u64, h: &Harness, mem_n: Option<u64>) -> Result<(), Vec<Failure>> {
    let sizes = LaunchSizes {
        vars: [("n".to_string(), n)].into_iter().collect(),
        counts: None,
    };
    let t = types(DType::F32, None);
    // The buffers as the caller bound them (possibly for another size).
    let alloc = LaunchSizes {
        vars: [("n".to_string(), mem_n.unwrap_or(n))]
            .into_iter()
            .collect(),
        counts: None,
    };
    let mut mem = Memory::new(plan, t, &alloc);
    let l = Launch {
        plan,
        types: t,
        op: ReduceOp::Sum,
        sizes: &sizes,
    };
    run_jit(&cache(), h, &l, &mut mem, &new_signals(plan), 0..1)
}

#[test]
fn a_region_too_small_names_the_first_step_and_both_lengths() {
    let p = one_rank(SizeExpr::Const(4), vec![copy(0, 1), copy(0, 2)], 0);
    run(&p, 4, &Harness::default(), None).expect("fits");
    let f = run(&p, 6, &Harness::default(), Some(4)).expect_err("6 elements into 4");
    assert_eq!(
        f[0].status,
        Status::RegionTooSmall {
            step: 0,
            need: 6,
            have: 4
        }
    );
}

#[test]
fn an_overflowing_extent_is_a_size_overflow() {
    let huge = SizeExpr::Mul(
        Box::new(SizeExpr::var("n")),
        Box::new(SizeExpr::Const(1 << 62)),
    );
    let p = one_rank(huge, vec![copy(0, 1)], 0);
    let f = run(&p, 8, &Harness::default(), Some(0)).expect_err("8 · 2^62 overflows");
    assert_eq!(f[0].status, Status::SizeOverflow { step: 0 });
}

#[test]
fn an_address_outside_the_binding_is_an_intrinsic_failure_before_any_data_moves() {
    // `c` is bound for n = 2 but the launch says n = 4: the region check of step 1 fails, and
    // step 0, in the same pass, has not run either.
    let p = one_rank(SizeExpr::var("n"), vec![copy(0, 1), copy(1, 2)], 0);
    let sizes = LaunchSizes {
        vars: [("n".to_string(), 4)].into_iter().collect(),
        counts: None,
    };
    let t = types(DType::F32, None);
    let mut mem = Memory::new(&p, t, &sizes);
    mem.bufs[0][2].truncate(8);
    mem.bufs[0][0] = (0..16).collect();
    let l = Launch {
        plan: &p,
        types: t,
        op: ReduceOp::Sum,
        sizes: &sizes,
    };
    let f = run_jit(
        &cache(),
        &Harness::default(),
        &l,
        &mut mem,
        &new_signals(&p),
        0..1,
    )
    .expect_err("outside the binding");
    assert_eq!(f[0].status, Status::Intrinsic { step: 1 });
    assert!(
        f[0].message
            .as_deref()
            .unwrap_or("")
            .contains("past the end"),
        "{f:?}"
    );
    assert!(mem.bufs[0][1].iter().all(|b| *b == 0xa5), "no data moved");
}

#[test]
fn a_stuck_wait_times_out_with_its_step() {
    let wait = Op::Wait {
        slot: 0,
        cmp: Cmp::Ge,
        target: WaitTarget {
            stride: 1,
            offset: 1,
        },
    };
    let p = one_rank(SizeExpr::var("n"), vec![copy(0, 1), wait, copy(1, 2)], 1);
    let h = Harness {
        wait_timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let f = run(&p, 4, &h, None).expect_err("nobody signals");
    assert_eq!(f[0].status, Status::Intrinsic { step: 1 });
    assert!(
        f[0].message
            .as_deref()
            .unwrap_or("")
            .contains("timed out in step 1"),
        "{f:?}"
    );
}

#[test]
fn nothing_is_signalled_after_a_failed_wait() {
    let wait = Op::Wait {
        slot: 0,
        cmp: Cmp::Ge,
        target: WaitTarget {
            stride: 1,
            offset: 1,
        },
    };
    let signal = Op::Signal {
        update: SignalUpdate {
            slot: 1,
            peer: 0,
            mode: SignalMode::Add,
            value: 1,
            stride: 0,
        },
    };
    let p = one_rank(SizeExpr::var("n"), vec![wait, signal], 2);
    let h = Harness {
        wait_timeout: Some(Duration::from_millis(50)),
        ..Default::default()
    };
    let sizes = LaunchSizes {
        vars: [("n".to_string(), 4)].into_iter().collect(),
        counts: None,
    };
    let t = types(DType::F32, None);
    let mut mem = Memory::new(&p, t, &sizes);
    let l = Launch {
        plan: &p,
        types: t,
        op: ReduceOp::Sum,
        sizes: &sizes,
    };
    let signals = new_signals(&p);
    let f = run_jit(&cache(), &h, &l, &mut mem, &signals, 0..1).expect_err("times out");
    assert_eq!(f[0].status, Status::Intrinsic { step: 0 });
    assert_eq!(signals[0][1].load(std::sync::atomic::Ordering::Acquire), 0);
}

#[test]
fn a_counts_plan_without_counts_is_refused() {
    let p = std_plan("alltoallv_push", 2);
    let sizes = sizes_for(&p, 4, 1);
    let t = types(DType::F32, None);
    let mut mem = Memory::new(&p, t, &sizes);
    let no_counts = LaunchSizes {
        vars: sizes.vars.clone(),
        counts: None,
    };
    let l = Launch {
        plan: &p,
        types: t,
        op: ReduceOp::Sum,
        sizes: &no_counts,
    };
    let f = run_jit(
        &cache(),
        &Harness::default(),
        &l,
        &mut mem,
        &new_signals(&p),
        0..1,
    )
    .expect_err("no counts");
    assert!(f.iter().all(|x| x.status == Status::MissingCounts), "{f:?}");
}

/// A rank whose steps run on two channels gets one kernel per channel, in the steps scope only:
/// a launch-scope kernel (entry signals, steps, exit signals in one function) cannot bracket
/// concurrent channels and is refused with a typed error, and so is a channel the rank lacks.
#[test]
fn a_multi_channel_rank_lowers_per_channel_in_the_steps_scope_only() {
    let mut p = one_rank(SizeExpr::var("n"), vec![copy(0, 1), copy(1, 2)], 0);
    p.ranks[0].steps[1].channel = 1;
    let spec = symsched_jit::KernelSpec {
        plan: &p,
        rank: 0,
        channel: 0,
        types: types(DType::F32, None),
        op: ReduceOp::Sum,
    };
    let e = symsched_jit::emit_llvm(&spec, &symsched_jit::LowerOptions::default())
        .expect_err("a launch kernel of two channels");
    assert!(
        matches!(
            e,
            symsched_jit::JitError::Channels {
                rank: 0,
                channels: 2
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("channels"), "{e}");
    assert!(cache().get(&spec).is_err());
    assert_eq!(symsched_jit::kernel_channels(&p, 0), vec![0, 1]);
    let steps = symsched_jit::LowerOptions {
        scope: symsched_jit::KernelScope::Steps,
        ..symsched_jit::LowerOptions::default()
    };
    for channel in [0, 1] {
        let spec = symsched_jit::KernelSpec { channel, ..spec };
        let ir = symsched_jit::emit_llvm(&spec, &steps).expect("a channel kernel lowers");
        assert!(
            ir.contains(&format!("define i32 @{}(", spec.name())),
            "{ir}"
        );
        assert!(spec.name().ends_with(&format!(".c{channel}")));
    }
    let e = symsched_jit::emit_llvm(&symsched_jit::KernelSpec { channel: 2, ..spec }, &steps)
        .expect_err("no channel 2");
    assert!(
        matches!(
            e,
            symsched_jit::JitError::Channel {
                rank: 0,
                channel: 2,
                channels: 2
            }
        ),
        "{e}"
    );
    // The same plan on one channel lowers as one launch kernel, under its usual name.
    let mut one = p.clone();
    one.ranks[0].steps[1].channel = 0;
    let spec = symsched_jit::KernelSpec { plan: &one, ..spec };
    assert!(symsched_jit::emit_llvm(&spec, &symsched_jit::LowerOptions::default()).is_ok());
    assert!(!spec.name().contains(".c0"));
    assert_eq!(symsched_jit::kernel_channels(&one, 0), vec![0]);
}

/// The agreement check goes between the steps of a steps-scope kernel of a one-channel rank:
/// anywhere else it is refused with its own error, and where it goes the kernel calls `agree`
/// once.
#[test]
fn an_agreement_check_only_fits_a_steps_kernel_of_one_channel() {
    let p = one_rank(SizeExpr::var("n"), vec![copy(0, 1), copy(1, 2)], 0);
    let spec = symsched_jit::KernelSpec {
        plan: &p,
        rank: 0,
        channel: 0,
        types: types(DType::F32, None),
        op: ReduceOp::Sum,
    };
    let steps = |check_after| symsched_jit::LowerOptions {
        scope: symsched_jit::KernelScope::Steps,
        check_after,
        ..symsched_jit::LowerOptions::default()
    };
    let refused = |opts: symsched_jit::LowerOptions, plan: &Plan| {
        let spec = symsched_jit::KernelSpec { plan, ..spec };
        match symsched_jit::emit_llvm(&spec, &opts) {
            Err(symsched_jit::JitError::CheckAfter { rank: 0, .. }) => {}
            other => panic!("{opts:?}: {other:?}"),
        }
    };
    // Past the rank's two steps; in a launch-scope kernel; on a rank with two channels.
    refused(steps(Some(3)), &p);
    refused(
        symsched_jit::LowerOptions {
            check_after: Some(1),
            ..symsched_jit::LowerOptions::default()
        },
        &p,
    );
    let mut two = p.clone();
    two.ranks[0].steps[1].channel = 1;
    refused(steps(Some(1)), &two);
    for at in 0..=2 {
        let ir = symsched_jit::emit_llvm(&spec, &steps(Some(at))).expect("lowers");
        assert_eq!(ir.matches("%agreed = call").count(), 1, "after {at}: {ir}");
    }
    let ir = symsched_jit::emit_llvm(&spec, &steps(None)).expect("lowers");
    assert!(!ir.contains("%agreed"), "{ir}");
}
