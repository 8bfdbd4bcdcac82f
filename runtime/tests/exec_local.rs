//! The cartesian sweep on the in-process fabric: every standard schedule × dtypes × ops ×
//! P ∈ {1, 2, 3, 4, 8} × counts (0, not divisible by P, larger than a conversion block), two
//! launches each (so epochs and launch credits are exercised), heap-bound and staged, checked
//! against the sequential reference.

use std::collections::BTreeMap;
use std::time::Duration;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_plan::{CollectiveKind, Plan};
use symsched_runtime::exec::harness::{run_local, sizes_for, RunSpec};
use symsched_runtime::exec::{DType, ElemTypes, ReduceOp};

const HEAP: u64 = 16 << 20;
const TIMEOUT: Duration = Duration::from_secs(20);

fn params_for(name: &str, p: u32) -> Option<BTreeMap<String, i64>> {
    let mut params = example_params(name);
    match name {
        "sendrecv_pair" if p == 1 => {
            params.insert("dst".into(), 0);
        }
        "sendrecv_pair" => {
            params.insert("src".into(), (p - 1) as i64);
            params.insert("dst".into(), 0);
        }
        "broadcast_push" | "reduce_push" => {
            params.insert("root".into(), (p / 2) as i64);
        }
        "allreduce_hier" | "allgather_hier" | "reduce_scatter_hier" if !p.is_multiple_of(2) => {
            params.insert("L".into(), 1);
        }
        _ => {}
    }
    Some(params)
}

/// Compile through the full pipeline: every standard schedule must verify, so a refusal fails
/// the test rather than running an unverified plan.
fn plan_of(lib: &Library, name: &str, p: u32, params: &BTreeMap<String, i64>) -> Plan {
    compile(lib, name, p, params, &CompileOptions::default())
        .unwrap_or_else(|d| panic!("{name} P={p} {params:?} does not verify: {d:?}"))
        .plan
}

fn plans(p: u32) -> Vec<Plan> {
    let lib = standard_library();
    lib.schedules()
        .into_iter()
        .filter_map(|s| {
            let params = params_for(&s.name, p)?;
            Some(plan_of(&lib, &s.name, p, &params))
        })
        .collect()
}

fn run(plan: &Plan, data: DType, wire: Option<DType>, op: ReduceOp, count: u64, staged: bool) {
    let spec = RunSpec {
        types: ElemTypes::new(data, wire).unwrap(),
        op,
        sizes: sizes_for(plan, count, &[("m".into(), 3), ("k".into(), 5)]),
        warmup: 0,
        iters: 2,
        check: true,
        staged,
    };
    let reports = run_local(plan, &spec, HEAP, TIMEOUT).unwrap_or_else(|e| {
        panic!(
            "{} P={} {data} wire={wire:?} {op} count={count} staged={staged}: {e}",
            plan.schedule, plan.group_size
        )
    });
    for (r, rep) in reports.iter().enumerate() {
        assert_eq!(
            rep.wrong, 0,
            "{} P={} rank {r} {data} wire={wire:?} {op} count={count} staged={staged}: {} wrong",
            plan.schedule, plan.group_size, rep.wrong
        );
    }
}

const DATA: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::Bf16,
    DType::I32,
    DType::I64,
    DType::U8,
];

/// The sweeps run one at a time: P threads each, on a machine that may have 2 cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sweep(p: u32) {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for plan in plans(p) {
        let reduces = plan.collective.reduces();
        let matmul = matches!(
            plan.collective,
            CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter
        );
        let counts = [0u64, 3 * p as u64 + 1, 1500 * p as u64 + 7];
        for (ci, &count) in counts.iter().enumerate() {
            for (di, &data) in DATA.iter().enumerate() {
                if matmul && !data.is_float() {
                    continue;
                }
                // Every dtype with sum; every op on one type of each kind (float, 16-bit, int).
                let all_ops = reduces && matches!(data, DType::F32 | DType::Bf16 | DType::I32);
                let ops: &[ReduceOp] = if all_ops {
                    &ReduceOp::ALL
                } else {
                    &[ReduceOp::Sum]
                };
                if count == 0 && data != DType::F32 {
                    continue;
                }
                for &op in ops {
                    // Alternate heap-bound and staged roles over the sweep.
                    let staged = (ci + di) % 2 == 1;
                    run(&plan, data, None, op, count, staged);
                }
            }
            if plan.schedule.ends_with("_wire") {
                for data in [DType::F32, DType::Bf16, DType::F16] {
                    for wire in [DType::F16, DType::Bf16, DType::F8E4M3, DType::F8E5M2] {
                        run(&plan, data, Some(wire), ReduceOp::Sum, count, false);
                    }
                }
            }
        }
    }
}

#[test]
fn sweep_p1() {
    sweep(1);
}

#[test]
fn sweep_p2() {
    sweep(2);
}

#[test]
fn sweep_p3() {
    sweep(3);
}

#[test]
fn sweep_p4() {
    sweep(4);
}

#[test]
fn sweep_p8() {
    sweep(8);
}
