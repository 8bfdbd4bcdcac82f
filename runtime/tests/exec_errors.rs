//! Every bad input to the executor returns its typed error (in-process fabric; the multi-process
//! fabric maps the runtime's range and rank errors to the same variants, see exec_multiproc).

use std::collections::BTreeMap;
use std::time::Duration;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_plan::{LaunchSizes, Plan};
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, Executor, Fabric, LaunchArgs, LoadedPlan, LocalWorld,
    ReduceOp,
};

fn plan(lib: &Library, name: &str, p: u32) -> Plan {
    let params = BTreeMap::new();
    compile(lib, name, p, &params, &CompileOptions::default())
        .unwrap_or_else(|d| panic!("{name} P={p} does not verify: {d:?}"))
        .plan
}

fn sizes(n: u64) -> LaunchSizes {
    let mut s = LaunchSizes::default();
    s.vars.insert("n".into(), n);
    s
}

fn f32s() -> ElemTypes {
    ElemTypes::new(DType::F32, None).unwrap()
}

/// One f32 `sum` launch of `lp` with these sizes and bindings (most bad-input cases differ only
/// in what they bind).
fn launch_f32_sum<F: Fabric>(
    exec: &Executor<F>,
    lp: &LoadedPlan,
    sizes: &LaunchSizes,
    buffers: &mut [Binding<'_>],
) -> Result<(), ExecError> {
    exec.launch(
        lp,
        LaunchArgs {
            types: f32s(),
            op: ReduceOp::Sum,
            sizes,
            buffers,
        },
    )
}

#[test]
fn fabric_bounds_are_typed() {
    let world = LocalWorld::new(2, 1 << 16).unwrap();
    let g = world.world_group().unwrap();
    assert!(matches!(
        g.fabric(2),
        Err(ExecError::RankOutsideGroup { peer: 2, size: 2 })
    ));
    let f = g.fabric(0).unwrap();
    assert!(matches!(
        f.heap_ptr(5, 0, 1),
        Err(ExecError::RankOutsideGroup { peer: 5, .. })
    ));
    assert!(matches!(
        f.heap_ptr(1, (1 << 16) - 4, 8),
        Err(ExecError::OffsetPastHeap { .. })
    ));
    assert!(matches!(
        f.heap_ptr(1, u64::MAX, 2),
        Err(ExecError::OffsetPastHeap { .. })
    ));
    assert!(matches!(
        world.group(&[0, 7]),
        Err(ExecError::RankOutsideGroup { peer: 7, .. })
    ));
}

#[test]
fn names_and_types_are_typed() {
    assert!(matches!(
        DType::parse("f31").map_err(ExecError::from),
        Err(ExecError::UnknownName { what: "dtype", .. })
    ));
    assert!(matches!(
        ReduceOp::parse("prod").map_err(ExecError::from),
        Err(ExecError::UnknownName { .. })
    ));
    assert!(matches!(
        ElemTypes::new(DType::I32, Some(DType::Bf16)),
        Err(ExecError::DtypeMismatch(_))
    ));
    assert!(matches!(
        ElemTypes::new(DType::F8E4M3, None),
        Err(ExecError::DtypeMismatch(_))
    ));
    assert!(matches!(
        ElemTypes::new(DType::F32, Some(DType::I32)),
        Err(ExecError::DtypeMismatch(_))
    ));
}

#[test]
fn launch_inputs_are_checked() {
    let lib = standard_library();
    let ar = plan(&lib, "allreduce_two_shot", 1);
    let world = LocalWorld::new(1, 1 << 20).unwrap();
    let g = world.world_group().unwrap();
    let exec = Executor::new(g.fabric(0).unwrap());
    let lp = exec.load(&ar).unwrap();
    let s = sizes(16);
    // Wrong size of a heap binding.
    let off = world.alloc("x", 64).unwrap();
    let mut b = [Binding::Heap {
        offset: off,
        bytes: 60,
    }];
    let r = launch_f32_sum(&exec, &lp, &s, &mut b);
    assert!(
        matches!(
            r,
            Err(ExecError::SizeMismatch {
                expected: 64,
                found: 60,
                ..
            })
        ),
        "{r:?}"
    );
    // Wrong size of a private binding.
    let mut host = vec![0u8; 12];
    let mut b = [Binding::Host(&mut host)];
    let r = launch_f32_sum(&exec, &lp, &s, &mut b);
    assert!(matches!(r, Err(ExecError::SizeMismatch { .. })), "{r:?}");
    // A heap binding past the end of the heap.
    let mut b = [Binding::Heap {
        offset: (1 << 20) - 32,
        bytes: 64,
    }];
    let r = launch_f32_sum(&exec, &lp, &s, &mut b);
    assert!(matches!(r, Err(ExecError::OffsetPastHeap { .. })), "{r:?}");
    // Wrong number of bindings.
    let mut b: [Binding; 0] = [];
    let r = launch_f32_sum(&exec, &lp, &s, &mut b);
    assert!(
        matches!(
            r,
            Err(ExecError::BindingCount {
                expected: 1,
                found: 0,
                ..
            })
        ),
        "{r:?}"
    );
    // A read-only binding for a role the plan writes.
    let ro = vec![0u8; 64];
    let mut b = [Binding::HostRead(&ro)];
    let r = launch_f32_sum(&exec, &lp, &s, &mut b);
    assert!(matches!(r, Err(ExecError::DtypeMismatch(_))), "{r:?}");
    // Unbound size variable.
    let mut b = [Binding::Heap {
        offset: off,
        bytes: 64,
    }];
    let r = exec.launch(
        &lp,
        LaunchArgs {
            types: f32s(),
            op: ReduceOp::Sum,
            sizes: &LaunchSizes::default(),
            buffers: &mut b,
        },
    );
    assert!(
        matches!(
            r,
            Err(ExecError::Plan(symsched_plan::PlanError::UnboundSize(_)))
        ),
        "{r:?}"
    );
    // Still usable after all those refusals.
    let r = launch_f32_sum(&exec, &lp, &s, &mut b);
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn plan_and_group_mismatches_are_typed() {
    let lib = standard_library();
    let world = LocalWorld::new(2, 1 << 20).unwrap();
    let g = world.world_group().unwrap();
    let exec = Executor::new(g.fabric(0).unwrap());
    let p4 = plan(&lib, "allreduce_two_shot", 4);
    assert!(matches!(
        exec.load(&p4),
        Err(ExecError::GroupSizeMismatch {
            plan_size: 4,
            group_size: 2,
            ..
        })
    ));
    let mut bad = plan(&lib, "allreduce_two_shot", 2);
    bad.schema_version = 99;
    assert!(matches!(
        exec.load(&bad),
        Err(ExecError::Plan(symsched_plan::PlanError::Version { .. }))
    ));
    // alltoallv without the counts matrix.
    let v = plan(&lib, "alltoallv_push", 2);
    let lp = exec.load(&v).unwrap();
    let mut b = [
        Binding::Heap {
            offset: 0,
            bytes: 0,
        },
        Binding::Heap {
            offset: 0,
            bytes: 0,
        },
    ];
    let r = exec.launch(
        &lp,
        LaunchArgs {
            types: f32s(),
            op: ReduceOp::Sum,
            sizes: &sizes(4),
            buffers: &mut b,
        },
    );
    assert!(matches!(r, Err(ExecError::MissingCounts(_))), "{r:?}");
    // A counts row of the wrong length.
    assert!(matches!(
        exec.gather_counts(&[1, 2, 3]),
        Err(ExecError::SizeMismatch { .. })
    ));
}

#[test]
fn matmul_refuses_integers() {
    let lib = standard_library();
    let world = LocalWorld::new(1, 1 << 20).unwrap();
    let g = world.world_group().unwrap();
    let exec = Executor::new(g.fabric(0).unwrap());
    let mm = plan(&lib, "allgather_matmul", 1);
    let lp = exec.load(&mm).unwrap();
    let mut s = sizes(2);
    s.vars.insert("m".into(), 2);
    s.vars.insert("k".into(), 2);
    let types = ElemTypes::new(DType::I32, None).unwrap();
    let mut bufs: Vec<Vec<u8>> = vec![vec![0; 16], vec![0; 16], vec![0; 16], vec![0; 16]];
    let mut b: Vec<Binding> = bufs.iter_mut().map(|v| Binding::Host(v)).collect();
    let r = exec.launch(
        &lp,
        LaunchArgs {
            types,
            op: ReduceOp::Sum,
            sizes: &s,
            buffers: &mut b,
        },
    );
    assert!(matches!(r, Err(ExecError::UnsupportedOp { .. })), "{r:?}");
}

#[test]
fn a_wait_nobody_satisfies_times_out_naming_the_step() {
    let lib = standard_library();
    let world = LocalWorld::new(2, 1 << 20)
        .unwrap()
        .with_timeout(Duration::from_millis(300));
    let g = world.world_group().unwrap();
    // Only rank 0 launches: its wait for rank 1's data must expire with a full description.
    let exec = Executor::new(g.fabric(0).unwrap());
    let lp = exec.load(&plan(&lib, "allreduce_one_shot", 2)).unwrap();
    let off = world.alloc("x", 32).unwrap();
    let mut b = [Binding::Heap {
        offset: off,
        bytes: 32,
    }];
    let r = exec.launch(
        &lp,
        LaunchArgs {
            types: f32s(),
            op: ReduceOp::Sum,
            sizes: &sizes(8),
            buffers: &mut b,
        },
    );
    match r {
        Err(ExecError::Timeout(t)) => {
            let msg = t.to_string();
            assert!(
                msg.contains("rank 0") && msg.contains("allreduce_one_shot"),
                "{msg}"
            );
            assert_eq!(t.signallers, vec![1]);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}
