//! Generated kernels of the standard library, run on the host simulation, against the runtime's
//! plan interpreter (symsched_runtime::exec): role buffers must agree bit for bit.
//!
//! Kernels are built at -O0 (same results, a third of the -O2 cost, see `sim_build::OptLevel`),
//! two g++ at a time, and cached in target/tmp/kernel-cache (`SYMSCHED_KERNEL_CACHE` moves it).
//! The default tests run a covering subset; `SYMSCHED_FULL_MATRIX=1` runs the whole product of
//! schedule × P ∈ {1,2,3,4,8} × dtype × op × wire (`full_matrix`).

mod common;
use common::*;
use symsched_kernels::sim_build::{self, OptLevel, SimSources};
use symsched_kernels::{lower, DType, KernelError, LowerOptions, ReduceOp};
use symsched_plan::{ElemClass, Plan};

/// n = 1000 spans several 256-element tiles (UB budget 4096 bytes) with ragged tails; n = 37
/// gives uneven and empty chunks at P = 8.
const SIZES: [u64; 2] = [1000, 37];
const UB: u32 = 4096;
const GROUP_SIZES: [u32; 5] = [1, 2, 3, 4, 8];
/// Vector-core counts the split is checked at besides 1.
const BLOCK_DIMS: [u32; 2] = [2, 8];
/// The wire formats the *_wire schedules are run with.
const WIRES: [DType; 4] = [DType::F16, DType::Bf16, DType::E4m3, DType::E5m2];

fn has_wire(plan: &Plan) -> bool {
    plan.buffers.iter().any(|b| b.elem == ElemClass::Wire)
}

/// The launch types to run `plan` with: every `dtype` × `op`, plus every `wire` the dtype may
/// travel as when the plan has wire buffers. The op of a collective that does not reduce is
/// never read, so only the first is run.
fn variants(plan: &Plan, dtypes: &[DType], ops: &[ReduceOp], wires: &[DType]) -> Vec<LowerOptions> {
    let ops = if plan.collective.reduces() {
        ops
    } else {
        &ops[..1]
    };
    let mut v = vec![];
    for &d in dtypes {
        let mut ws = vec![d];
        if has_wire(plan) {
            ws.extend(
                wires
                    .iter()
                    .copied()
                    .filter(|&w| w != d && d.can_travel_as(w)),
            );
        }
        for &w in &ws {
            for &op in ops {
                v.push(opts(d, w, op, UB));
            }
        }
    }
    v
}

/// Build every combination (in parallel), run each against the runtime's interpreter at every
/// size, and fail listing every mismatch. Returns the number of combinations run.
fn run(combos: &[(Plan, LowerOptions)]) -> usize {
    let (n, failures) = run_collect(combos);
    assert!(
        failures.is_empty(),
        "{} of {n} combinations differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    n
}

/// [`run`] without the assertion: the number of combinations run and the mismatches.
fn run_collect(combos: &[(Plan, LowerOptions)]) -> (usize, Vec<String>) {
    let t0 = std::time::Instant::now();
    // A step whose types the lowering does not implement (the Cube unit multiplies only
    // f32/f16/bf16) is refused with `Unsupported`; those combinations are listed, not run.
    let mut refused = vec![];
    let mut lowered = vec![];
    for (p, o) in combos {
        match lower(p, o) {
            Ok(l) => lowered.push(((p, o), SimSources::from(&l))),
            Err(e @ KernelError::Unsupported { .. }) => refused.push(format!(
                "{} P={} {}/{}/{}: {e}",
                p.schedule, p.group_size, o.dtype, o.wire, o.op
            )),
            Err(e) => panic!("{} {}/{}/{}: {e}", p.schedule, o.dtype, o.wire, o.op),
        }
    }
    if !refused.is_empty() {
        eprintln!(
            "{} combinations refused by the lowering:\n{}",
            refused.len(),
            refused.join("\n")
        );
    }
    let (combos, srcs): (Vec<_>, Vec<SimSources>) = lowered.into_iter().unzip();
    let kernels =
        sim_build::build_many(&srcs, &cache_dir(), OptLevel::O0, sim_build::default_jobs());
    let built = t0.elapsed();
    let mut failures = vec![];
    for ((plan, o), k) in combos.iter().copied().zip(kernels) {
        let tag = format!(
            "{} P={} {}/{}/{} blockDim {}",
            plan.schedule, plan.group_size, o.dtype, o.wire, o.op, o.block_dim
        );
        match k {
            Err(e) => failures.push(format!("{tag}: build: {e}")),
            Ok(k) => {
                for n in SIZES {
                    if let Err(e) = compare_with_runtime(&k, plan, o, n) {
                        failures.push(format!("{tag}: {e}"));
                        break;
                    }
                }
            }
        }
    }
    eprintln!(
        "{} combinations: built/cached in {:.1} s, ran in {:.1} s",
        combos.len(),
        built.as_secs_f64(),
        (t0.elapsed() - built).as_secs_f64()
    );
    (combos.len(), failures)
}

/// `c` at `block_dim` vector cores per step. Plans on channels run one core per channel, and a
/// blockDim above 1 is refused for them (`KernelError::Channels`, `tests/channels.rs`): they
/// are left out.
fn with_block_dim(c: Vec<(Plan, LowerOptions)>, block_dim: u32) -> Vec<(Plan, LowerOptions)> {
    c.into_iter()
        .filter(|(p, _)| block_dim == 1 || p.channel_count() == 1)
        .map(|(p, mut o)| {
            o.block_dim = block_dim;
            (p, o)
        })
        .collect()
}

fn combos_for(
    ps: &[u32],
    schedules: Option<&[&str]>,
    dtypes: &[DType],
    ops: &[ReduceOp],
    wires: &[DType],
) -> Vec<(Plan, LowerOptions)> {
    let mut v = vec![];
    for &p in ps {
        for plan in standard_plans(p) {
            if schedules.is_some_and(|s| !s.contains(&plan.schedule.as_str())) {
                continue;
            }
            for o in variants(&plan, dtypes, ops, wires) {
                v.push((plan.clone(), o));
            }
        }
    }
    v
}

#[test]
fn every_standard_schedule_f32_sum_at_every_group_size() {
    let c = combos_for(&GROUP_SIZES, None, &[DType::F32], &[ReduceOp::Sum], &[]);
    assert!(run(&c) >= 55);
}

/// Every dtype × op × wire at P = 4 on the two-shot wire allreduce (converting put onto the
/// wire, reduce of wire operands, cast back, allgather of the result), and every dtype × op on
/// the one-shot allreduce (reduce of operands read in place).
#[test]
fn every_dtype_op_and_wire_at_p4() {
    let mut c = combos_for(
        &[4],
        Some(&["allreduce_two_shot_wire"]),
        &DType::DATA,
        &ReduceOp::ALL,
        &WIRES,
    );
    c.extend(combos_for(
        &[4],
        Some(&["allreduce_one_shot"]),
        &DType::DATA,
        &ReduceOp::ALL,
        &[],
    ));
    run(&c);
}

/// Uneven chunks: every dtype × op on the ring allreduce at P = 3; sum and avg of every dtype on
/// the reduce at P = 8; the fp8 wires on the push reduce-scatter at P = 3; and the 64-bit and
/// integer paths (f64, i32) on every schedule at P = 3.
#[test]
fn dtypes_and_ops_at_p3_and_p8() {
    let mut c = combos_for(
        &[3],
        Some(&["allreduce_ring"]),
        &DType::DATA,
        &ReduceOp::ALL,
        &[],
    );
    c.extend(combos_for(
        &[8],
        Some(&["reduce_push"]),
        &DType::DATA,
        &[ReduceOp::Sum, ReduceOp::Avg],
        &[],
    ));
    c.extend(
        combos_for(
            &[3],
            Some(&["reduce_scatter_push_wire"]),
            &[DType::F32, DType::Bf16],
            &[ReduceOp::Sum, ReduceOp::Avg],
            &[DType::E4m3, DType::E5m2],
        )
        .into_iter()
        .filter(|(_, o)| o.wire != o.dtype),
    );
    c.extend(combos_for(
        &[3],
        None,
        &[DType::F64, DType::I32],
        &[ReduceOp::Sum],
        &[],
    ));
    run(&c);
}

/// The vector-core split (blockDim 2 and 8): every standard schedule with f32/sum at P = 4,
/// and at P = 3 the integer, f64 and fp8-wire paths on the schedules that reduce. Each step's
/// data is split over the cores in 64-element blocks, so at n = 37 most cores get nothing and
/// at n = 1000 the shares are ragged.
#[test]
fn every_standard_schedule_at_block_dims_2_and_8() {
    let mut c = vec![];
    for b in BLOCK_DIMS {
        c.extend(with_block_dim(
            combos_for(&[4], None, &[DType::F32], &[ReduceOp::Sum], &[]),
            b,
        ));
        c.extend(with_block_dim(
            combos_for(
                &[3],
                Some(&["allreduce_two_shot_wire", "reduce_scatter_push_wire"]),
                &[DType::Bf16],
                &[ReduceOp::Avg],
                &[DType::E4m3],
            ),
            b,
        ));
        c.extend(with_block_dim(
            combos_for(
                &[3],
                Some(&["allreduce_ring", "allreduce_one_shot"]),
                &[DType::I32, DType::F64],
                &[ReduceOp::Sum, ReduceOp::Max],
                &[],
            ),
            b,
        ));
    }
    assert!(run(&c) >= 2 * 21);
}

/// Every dtype × op × wire of every schedule at P = 4 and blockDim 2 and 8 (several hundred
/// kernels): `cargo test -p symsched-kernels --test vs_runtime -- --ignored`.
#[test]
#[ignore = "several hundred kernel builds; run with --ignored"]
fn full_matrix_at_block_dims_2_and_8() {
    let mut c = vec![];
    for b in BLOCK_DIMS {
        c.extend(with_block_dim(
            combos_for(&[4], None, &DType::DATA, &ReduceOp::ALL, &WIRES),
            b,
        ));
    }
    run(&c);
}

/// The whole product, gated: `SYMSCHED_FULL_MATRIX=1 cargo test -p symsched-kernels --test
/// vs_runtime full_matrix -- --nocapture`.
#[test]
fn full_matrix() {
    if std::env::var_os("SYMSCHED_FULL_MATRIX").is_none() {
        eprintln!("skipped: set SYMSCHED_FULL_MATRIX=1 to run the full product");
        return;
    }
    // One group size at a time, so a long run reports as it goes.
    let (mut n, mut failures) = (0, vec![]);
    for p in GROUP_SIZES {
        let c = combos_for(&[p], None, &DType::DATA, &ReduceOp::ALL, &WIRES);
        let (k, f) = run_collect(&c);
        eprintln!(
            "full matrix P = {p}: {k} combinations run, {} differ",
            f.len()
        );
        n += k;
        failures.extend(f);
    }
    assert!(
        failures.is_empty(),
        "{} of {n} combinations differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("full matrix: {n} combinations equal the runtime interpreter bit for bit");
}

/// Type combinations the lowering cannot carry are refused by name, before any build.
#[test]
fn types_the_lowering_cannot_carry_are_refused() {
    let plan = standard_plans(2)
        .into_iter()
        .find(|p| p.schedule == "allreduce_two_shot_wire")
        .unwrap();
    for (d, w) in [
        (DType::F64, DType::Bf16),
        (DType::F64, DType::E4m3),
        (DType::I32, DType::F32),
        (DType::I64, DType::I32),
        (DType::E4m3, DType::E4m3),
        (DType::F32, DType::F64),
    ] {
        match lower(&plan, &opts(d, w, ReduceOp::Sum, UB)) {
            Err(KernelError::Types { .. }) => {}
            other => panic!("{d} on {w}: expected KernelError::Types, got {other:?}"),
        }
    }
}
