//! The JIT backend equals the interpreter byte for byte (`tests/common/equivalence.rs`).
//!
//! Default CI runs a covering subset: every standard schedule at every P ∈ {1, 2, 3, 4, 8}
//! with f32 sum at a size with remainders, every dtype × wire × op on the schedules that use a
//! wire type at P = 3, staged bindings, and a second size. The full matrix (every schedule ×
//! P × dtype × wire × op) is ignored by default; a property test draws random cases from it
//! (schedule, P, dtype, wire, op, size, staged) in every run:
//!
//! ```text
//! cargo test --release -p symsched-runtime --test jit_equivalence -- --ignored
//! ```

mod jit_common;

use jit_common::{compare, instance, names, reduces, type_matrix, uses_wire, Case};
use symsched_runtime::exec::{DType, ElemTypes, ReduceOp};

const PS: [u32; 5] = [1, 2, 3, 4, 8];

fn f32_sum(plan: &symsched_plan::Plan, count: u64) -> Case<'_> {
    Case {
        plan,
        types: ElemTypes::new(DType::F32, None).unwrap(),
        op: ReduceOp::Sum,
        count,
        staged: false,
        late: Vec::new(),
        nt_min_bytes: None,
    }
}

fn check_all(cases: &[Case]) {
    let fails: Vec<String> = cases.iter().filter_map(|c| compare(c).err()).collect();
    assert!(
        fails.is_empty(),
        "{} of {} cases differ:\n{}",
        fails.len(),
        cases.len(),
        fails.join("\n")
    );
}

/// Every plan at every count, once per (types, op) and once f32 sum staged.
fn typed_and_staged<'p>(
    plans: &'p [symsched_plan::Plan],
    counts: &[u64],
    typed: &[(ElemTypes, ReduceOp)],
) -> Vec<Case<'p>> {
    let mut cases = Vec::new();
    for plan in plans {
        for &count in counts {
            for &(types, op) in typed {
                cases.push(Case {
                    types,
                    op,
                    ..f32_sum(plan, count)
                });
            }
            cases.push(Case {
                staged: true,
                ..f32_sum(plan, count)
            });
        }
    }
    cases
}

#[test]
fn every_schedule_at_every_p_f32_sum() {
    let mut plans = Vec::new();
    for name in names() {
        let mut any = false;
        for p in PS {
            if let Some(plan) = instance(&name, p) {
                plans.push(plan);
                any = true;
            }
        }
        assert!(any, "{name} has no instance at any of {PS:?}");
    }
    let cases: Vec<Case> = plans.iter().map(|p| f32_sum(p, 1001)).collect();
    check_all(&cases);
}

#[test]
fn every_dtype_wire_and_op_at_p3() {
    let plans: Vec<_> = names()
        .iter()
        .filter_map(|n| instance(n, 3))
        .filter(|p| uses_wire(p) && reduces(p))
        .take(3)
        .collect();
    assert!(!plans.is_empty());
    let mut cases = Vec::new();
    for plan in &plans {
        for types in type_matrix() {
            for op in ReduceOp::ALL {
                cases.push(Case {
                    types,
                    op,
                    ..f32_sum(plan, 517)
                });
            }
        }
    }
    check_all(&cases);
}

#[test]
fn staged_bindings_and_other_sizes() {
    let names = [
        "allreduce_ring",
        "allreduce_two_shot",
        "allgather_push",
        "alltoall_push",
    ];
    let plans: Vec<_> = names.iter().filter_map(|n| instance(n, 4)).collect();
    assert!(!plans.is_empty());
    let mut cases = Vec::new();
    for plan in &plans {
        for count in [0, 3, 40_003] {
            for staged in [false, true] {
                cases.push(Case {
                    staged,
                    ..f32_sum(plan, count)
                });
            }
        }
    }
    check_all(&cases);
}

/// The passes whose reduce result is copied out to peers (or to local places) a block at a
/// time (`copy_outs` in the JIT's `lower/elements.rs`): sizes of one block, of several with a
/// short last one, and of exact blocks (1024 elements per block, so 4 × 4096 at P = 4), with a
/// wire type, staged bindings and an op other than sum.
#[test]
fn blocked_copy_outs_across_block_boundaries() {
    let names = [
        "allreduce_ring",
        "allreduce_two_shot",
        "allreduce_two_shot_pull",
        "allreduce_two_shot_wire",
    ];
    let mut cases_plans = Vec::new();
    for name in names {
        for p in [2, 4] {
            cases_plans.push(instance(name, p).expect("an instance"));
        }
    }
    let typed = [
        (ElemTypes::new(DType::F32, None).unwrap(), ReduceOp::Sum),
        (
            ElemTypes::new(DType::F32, Some(DType::Bf16)).unwrap(),
            ReduceOp::Sum,
        ),
        (ElemTypes::new(DType::F64, None).unwrap(), ReduceOp::Max),
    ];
    check_all(&typed_and_staged(
        &cases_plans,
        &[1024, 5 * 1024 + 7, 16_384],
        &typed,
    ));
}

/// Streamed moves: with the threshold at 0 every plain move into a buffer no step reads goes
/// through the non-temporal copy on both backends, and at 4 KiB only the longer ones do (the
/// JIT runs such a pass's moves one by one, each streamed or `memcpy`'d by its own length, as
/// the interpreter does); every standard schedule at P = 2 and 4, sizes around the threshold.
#[test]
fn streamed_moves_at_low_thresholds() {
    let mut plans = Vec::new();
    for name in names() {
        for p in [2, 4] {
            if let Some(plan) = instance(&name, p) {
                plans.push(plan);
            }
        }
    }
    let mut cases = Vec::new();
    for plan in &plans {
        for (nt_min, count) in [(0, 1001), (4096, 3000), (4096, 5 * 1024 + 3)] {
            cases.push(Case {
                nt_min_bytes: Some(nt_min),
                ..f32_sum(plan, count)
            });
        }
    }
    check_all(&cases);
}

/// The channel example (a kernel per channel, run concurrently) at P = 1..4, sizes with and
/// without remainders, a few dtypes, wires and ops, staged too.
#[test]
fn the_channel_example_at_p1_to_p4() {
    let plans: Vec<_> = (1..=4)
        .map(|p| instance("reduce_scatter_push_channels", p).expect("an instance"))
        .collect();
    assert!(plans.iter().skip(1).all(|p| p.channel_count() == 2));
    let typed = [
        (ElemTypes::new(DType::F32, None).unwrap(), ReduceOp::Sum),
        (ElemTypes::new(DType::Bf16, None).unwrap(), ReduceOp::Max),
        (ElemTypes::new(DType::F64, None).unwrap(), ReduceOp::Avg),
        (ElemTypes::new(DType::I32, None).unwrap(), ReduceOp::Min),
    ];
    check_all(&typed_and_staged(&plans, &[1000, 4097], &typed));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    #[test]
    fn random_cases_of_the_full_matrix(
        pick in 0usize..10_000,
        pi in 0usize..PS.len(),
        ti in 0usize..64,
        oi in 0usize..4,
        count in 0u64..5000,
        staged in proptest::bool::ANY,
    ) {
        let all = names();
        let plan = (0..all.len())
            .find_map(|k| instance(&all[(pick + k) % all.len()], PS[pi]))
            .expect("some schedule has an instance");
        let types = type_matrix();
        let c = Case {
            types: types[ti % types.len()],
            op: ReduceOp::ALL[oi],
            staged,
            ..f32_sum(&plan, count)
        };
        if let Err(e) = compare(&c) {
            proptest::prop_assert!(false, "{}", e);
        }
    }
}

#[test]
#[ignore = "full matrix: minutes in release (see the module docs)"]
fn full_matrix() {
    let mut fails = Vec::new();
    let mut total = 0;
    for name in names() {
        for p in PS {
            let Some(plan) = instance(&name, p) else {
                continue;
            };
            let types: Vec<ElemTypes> = if uses_wire(&plan) {
                type_matrix()
            } else {
                type_matrix()
                    .into_iter()
                    .filter(|t| t.wire == t.data)
                    .collect()
            };
            let ops: &[ReduceOp] = if reduces(&plan) {
                &ReduceOp::ALL
            } else {
                &[ReduceOp::Sum]
            };
            for &t in &types {
                for &op in ops {
                    let c = Case {
                        types: t,
                        op,
                        ..f32_sum(&plan, 1001)
                    };
                    total += 1;
                    if let Err(e) = compare(&c) {
                        fails.push(e);
                    }
                }
            }
        }
    }
    assert!(
        fails.is_empty(),
        "{} of {total} cases differ:\n{}",
        fails.len(),
        fails.join("\n")
    );
    eprintln!("full matrix: {total} cases equal");
}
