//! The Cube (matmul) and launch-segment (hostcoll) lowering: generated kernels of
//! allgather_matmul, matmul_reduce_scatter and allreduce_hier on the host simulation against the
//! runtime's plan interpreter, bit for bit; and the simulation's Cube misuse checks on
//! hand-broken kernels.

mod common;
use common::*;
use std::time::Duration;
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_kernels::sim::heap::HeapLayout;
use symsched_kernels::sim::inproc::{self, RunConfig};
use symsched_kernels::{DType, KernelError, LowerOptions, ReduceOp};
use symsched_plan::Plan;

const UB: u32 = 4096;

fn plan(name: &str, p: u32, params: &[(&str, i64)]) -> Plan {
    let lib = standard_library();
    let params = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    compile(&lib, name, p, &params, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{name} P={p}: {e:?}"))
        .plan
}

/// Build every combination (one g++ per batch), compare each with the runtime at n = 1000 and
/// n = 37, and return what ran.
fn check_all(combos: &[(Plan, LowerOptions)]) -> String {
    let mut ran = vec![];
    for ((plan, o), k) in combos.iter().zip(build_all(combos)) {
        for n in [1000, 37] {
            compare_with_runtime(&k, plan, o, n).unwrap_or_else(|e| panic!("{e}"));
        }
        ran.push(format!(
            "{} P={} {:?} {}/{}",
            plan.schedule, plan.group_size, plan.params, o.dtype, o.op
        ));
    }
    ran.join("\n")
}

#[test]
fn matmul_schedules_equal_the_interpreter_f32_at_every_group_size() {
    let mut combos = vec![];
    for p in [1, 2, 3, 4, 8] {
        for name in ["allgather_matmul", "matmul_reduce_scatter"] {
            let o = opts(DType::F32, DType::F32, ReduceOp::Sum, UB);
            // n = 1000: m 130, k 260, n 136 (several Cube tiles); n = 37: m 5, k 37, n 3.
            combos.push((plan(name, p, &[]), o));
        }
    }
    eprintln!("{}", check_all(&combos));
}

#[test]
fn matmul_schedules_equal_the_interpreter_in_16_bit_types_at_p4() {
    let mut combos = vec![];
    for name in ["allgather_matmul", "matmul_reduce_scatter"] {
        for (d, op) in [
            (DType::Bf16, ReduceOp::Sum),
            (DType::F16, ReduceOp::Sum),
            (DType::F32, ReduceOp::Max),
        ] {
            combos.push((plan(name, 4, &[]), opts(d, d, op, UB)));
        }
    }
    eprintln!("{}", check_all(&combos));
}

#[test]
fn allreduce_hier_equals_the_interpreter_with_host_collectives() {
    let mut combos = vec![];
    // L = 1: the host collective is the whole allreduce; L = P: no cross-node traffic.
    for (p, ls) in [
        (1, &[1][..]),
        (2, &[1, 2][..]),
        (3, &[1, 3][..]),
        (4, &[1, 2, 4][..]),
        (8, &[1, 2, 4][..]),
    ] {
        for &l in ls {
            let o = opts(DType::F32, DType::F32, ReduceOp::Sum, UB);
            combos.push((plan("allreduce_hier", p, &[("L", l)]), o));
        }
    }
    for (d, op) in [
        (DType::Bf16, ReduceOp::Sum),
        (DType::F16, ReduceOp::Sum),
        (DType::F32, ReduceOp::Max),
        (DType::Bf16, ReduceOp::Min),
    ] {
        combos.push((plan("allreduce_hier", 4, &[("L", 2)]), opts(d, d, op, UB)));
    }
    eprintln!("{}", check_all(&combos));
}

#[test]
fn segmented_kernels_run_back_to_back_launches() {
    // Three launches without a barrier in between: the host collectives' rendezvous and the
    // launch credits must keep the epochs apart, and an allreduce leaves equal bytes everywhere.
    let plan = plan("allreduce_hier", 4, &[("L", 2)]);
    let o = opts(DType::F32, DType::F32, ReduceOp::Sum, UB);
    let k = build(&plan, &o);
    let sizes = sizes_for(&plan, 100);
    let layout = HeapLayout::new(&plan, DType::F32, DType::F32, &sizes).unwrap();
    let init = fresh_states(&plan, &layout, 3);
    let cfg = RunConfig {
        epochs: 0..3,
        timeout: Duration::from_secs(60),
        send_exit_signals: true,
        seed: 0,
        ..RunConfig::default()
    };
    let out = inproc::run(&k, &plan, &layout, &sizes, &init, &cfg).unwrap();
    // An allreduce leaves the same bytes in `x` on every rank.
    for r in 1..4 {
        assert_eq!(out[r].buffers[0], out[0].buffers[0], "rank {r}");
    }
}

// ------------------------------------------------------------------ negative: Cube misuse

fn o32() -> LowerOptions {
    opts(DType::F32, DType::F32, ReduceOp::Sum, UB)
}

/// Build allgather_matmul (P = 2) with `from` replaced by `to` in the kernel and run it.
fn run_edited(from: &str, to: &str) -> Result<(), KernelError> {
    let plan = plan("allgather_matmul", 2, &[]);
    let k = build_edited(&plan, &o32(), |s| &mut s.kernel, from, to);
    run_fresh(&k, &plan, &o32(), 1000, Duration::from_secs(20)).map(|_| ())
}

fn run_broken(from: &str, to: &str) -> KernelError {
    run_edited(from, to).expect_err("the broken kernel must fail")
}

fn status(e: &KernelError) -> String {
    e.sim_status().unwrap_or("").to_string()
}

#[test]
fn mmad_operand_in_the_wrong_position_is_caught() {
    // A2 and B2 swapped: Mmad's left matrix must be in L0A (A2).
    let e = run_broken(
        "AscendC::Mmad(acc, a2, b2, mp);",
        "AscendC::Mmad(acc, b2, a2, mp);",
    );
    assert_eq!(status(&e), "SYMSCHED_SIM_E_CUBE_POSITION", "{e}");
}

#[test]
fn load_data_from_gm_side_queue_is_caught() {
    // LoadData B1 -> A2 (the left matrix's L0 from the right matrix's L1) is not a path the
    // device has.
    let e = run_broken(
        "AscendC::LoadData(a2[i * kBlocks * kFrac], a1[i * kFrac], la);",
        "AscendC::LoadData(a2[i * kBlocks * kFrac], b1[i * kFrac], la);",
    );
    assert!(
        [
            "SYMSCHED_SIM_E_CUBE_POSITION",
            "SYMSCHED_SIM_E_QUEUE_MISUSE"
        ]
        .contains(&status(&e).as_str()),
        "{e}"
    );
}

#[test]
fn l0_overflow_is_caught() {
    // A 16-row-deeper k block than L0A holds (f32: 128 x 144 x 4 bytes > 64 KiB).
    let e = run_broken(
        "constexpr uint32_t kBaseK = BaseK<T>();",
        "constexpr uint32_t kBaseK = BaseK<T>() + 16;",
    );
    assert_eq!(status(&e), "SYMSCHED_SIM_E_CUBE_OVERFLOW", "{e}");
    // A CO1 queue larger than L0C is refused at InitBuffer.
    let e = run_broken(
        "pipe.InitBuffer(c1_, 1, kBaseM * kBaseN * sizeof(float));",
        "pipe.InitBuffer(c1_, 1, 2 * kBaseM * kBaseN * sizeof(float) + 1024);",
    );
    assert_eq!(status(&e), "SYMSCHED_SIM_E_CUBE_OVERFLOW", "{e}");
}

#[test]
fn fixpipe_without_the_matching_quantization_is_caught() {
    let plan = plan("allgather_matmul", 2, &[]);
    let o = opts(DType::Bf16, DType::Bf16, ReduceOp::Sum, UB);
    let k = build_edited(
        &plan,
        &o,
        |s| &mut s.kernel,
        "f.quantPre = Quant<C>();",
        "f.quantPre = AscendC::QuantMode_t::NoQuant;",
    );
    let e = run_fresh(&k, &plan, &o, 37, Duration::from_secs(60)).unwrap_err();
    assert_eq!(status(&e), "SYMSCHED_SIM_E_CAST_MODE", "{e}");
}

#[test]
fn the_comparison_catches_a_lost_k_block() {
    // Every k block re-initialising CO1 keeps only the last block's products (k = 260 spans
    // three f32 blocks of 128): a plausible Cube bug the interpreter comparison must see.
    let plan = plan("allgather_matmul", 2, &[]);
    let o = o32();
    let k = build_edited(
        &plan,
        &o,
        |s| &mut s.kernel,
        "mp.cmatrixInitVal = first;",
        "mp.cmatrixInitVal = true;",
    );
    let e = compare_with_runtime(&k, &plan, &o, 1000).expect_err("a lost k block must differ");
    assert!(
        e.contains("sim") && e.contains("runtime interpreter"),
        "{e}"
    );
    // With one k block (k = 37) the same kernel is right: the check is about accumulation.
    compare_with_runtime(&k, &plan, &o, 37).unwrap();
}

#[test]
fn unbroken_matmul_kernel_passes_the_same_harness() {
    // The harness above fails only because of the edits.
    run_edited("kBaseM = 128;", "kBaseM = 128;").unwrap();
}

#[test]
fn host_collective_in_a_form_the_stub_never_emits_fails_by_name() {
    // An out-of-place HcclAllReduce (recvBuf past sendBuf) is not what the lowering emits.
    let plan = plan("allreduce_hier", 2, &[("L", 1)]);
    let k = build_edited(
        &plan,
        &o32(),
        |s| &mut s.sim_entry,
        "case 0: return HcclAllReduce(p, p, len, t, HCCL_REDUCE_SUM, comm, stream);",
        "case 0: return HcclAllReduce(p, p + 4, len, t, HCCL_REDUCE_SUM, comm, stream);",
    );
    let e = run_fresh(&k, &plan, &o32(), 37, Duration::from_secs(60)).unwrap_err();
    assert_eq!(status(&e), "SYMSCHED_SIM_E_HOST_COLL", "{e}");
}

/// The `symsched run --backend sim` path on the runtime's in-process fabric: the launch stub's
/// host collectives go through the runtime's heap exchange (`SimBackend`), four launches, each
/// checked against the runtime's sequential reference.
#[test]
fn sim_backend_on_the_runtime_fabric_checks_clean() {
    for (name, p, params) in [
        ("allreduce_hier", 4u32, vec![("L", 2i64)]),
        ("allreduce_hier", 3, vec![("L", 1)]),
        ("allgather_matmul", 3, vec![]),
        ("matmul_reduce_scatter", 2, vec![]),
    ] {
        check_sim_harness(&plan(name, p, &params), o32());
    }
}
