//! The pluggable matmul engine: a registered engine receives every matmul step of the MC2
//! plans (P per launch, on every rank), its errors abort the launch with the engine's name, and
//! unregistering restores the built-in kernel. One test function, in its own process, because
//! the engine is process-wide.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
mod common;

use common::{plan, TIMEOUT};
use symsched_plan::Plan;
use symsched_runtime::exec::harness::{run_local, sizes_for, RunSpec};
use symsched_runtime::exec::matmul::{self, Builtin};
use symsched_runtime::exec::{DType, ElemTypes, ExecError, MatmulEngine, MatmulStep};

const HEAP: u64 = 16 << 20;

/// Counts its calls and delegates to the built-in kernel (so results stay checkable against
/// the sequential reference), or fails every call.
struct Probe {
    calls: AtomicUsize,
    fail: bool,
}

impl MatmulEngine for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    unsafe fn matmul(&self, s: &MatmulStep, scratch: &mut Vec<f64>) -> Result<(), ExecError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err(ExecError::Runtime("refused on purpose".into()));
        }
        Builtin.matmul(s, scratch)
    }
}

/// A checked launch with one warm-up, so the call count also covers warm-up launches.
fn spec(plan: &Plan, data: DType, staged: bool) -> RunSpec {
    let sizes = sizes_for(
        plan,
        4 * plan.group_size as u64,
        &[("m".into(), 3), ("k".into(), 5)],
    );
    RunSpec {
        warmup: 1,
        ..common::spec(ElemTypes::new(data, None).unwrap(), sizes, staged)
    }
}

#[test]
fn registered_engine_runs_every_matmul_step() {
    assert_eq!(matmul::engine_name(), "builtin");
    let probe = Arc::new(Probe {
        calls: AtomicUsize::new(0),
        fail: false,
    });
    matmul::set_engine(Some(probe.clone()));
    assert_eq!(matmul::engine_name(), "probe");
    for p in [1u32, 2, 3] {
        for name in ["allgather_matmul", "matmul_reduce_scatter"] {
            let plan = plan(name, p);
            for (data, staged) in [(DType::F32, false), (DType::Bf16, true)] {
                let before = probe.calls.load(Ordering::SeqCst);
                let sp = spec(&plan, data, staged);
                common::run_checked(&plan, &sp, HEAP, &format!("{name} P={p} {data}"));
                // P matmul steps per rank and launch, P ranks, warm-up + timed launches.
                let launches = (sp.warmup + sp.iters) as usize;
                let p = p as usize;
                assert_eq!(
                    probe.calls.load(Ordering::SeqCst) - before,
                    p * p * launches,
                    "{name} P={p} {data}"
                );
            }
        }
    }

    // A failing engine aborts the launch on every rank, naming the engine.
    matmul::set_engine(Some(Arc::new(Probe {
        calls: AtomicUsize::new(0),
        fail: true,
    })));
    let plan = plan("allgather_matmul", 2);
    let err = run_local(&plan, &spec(&plan, DType::F32, false), HEAP, TIMEOUT)
        .expect_err("a failing engine must fail the launch");
    let msg = err.to_string();
    assert!(
        msg.contains("matmul engine `probe`") && msg.contains("refused on purpose"),
        "{msg}"
    );

    // Steps whose output overlaps an operand, and integer operands, never reach the engine.
    let probe = Arc::new(Probe {
        calls: AtomicUsize::new(0),
        fail: true,
    });
    matmul::set_engine(Some(probe.clone()));
    // c = a × b with c on top of a: a = [[1, 2], [3, 4]], b = I.
    let mut buf: Vec<u8> = [1f32, 2., 3., 4.]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let eye: Vec<u8> = [1f32, 0., 0., 1.]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let p = buf.as_mut_ptr();
    let step = MatmulStep {
        c: (p, DType::F32),
        a: (p as *const u8, DType::F32),
        b: (eye.as_ptr(), DType::F32),
        m: 2,
        k: 2,
        n: 2,
    };
    let mut scratch = Vec::new();
    // SAFETY: every operand points to 4 valid f32 (unaligned reads are allowed).
    unsafe { matmul::run(&step, &mut scratch) }.expect("aliased step runs on the built-in kernel");
    let out: Vec<f32> = buf
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(out, [1., 2., 3., 4.]);
    let ints = MatmulStep {
        a: (eye.as_ptr(), DType::I32),
        ..step
    };
    // SAFETY: as above.
    let err = unsafe { matmul::run(&ints, &mut scratch) }.expect_err("integer matmul");
    assert!(matches!(err, ExecError::UnsupportedOp { .. }), "{err}");
    assert_eq!(probe.calls.load(Ordering::SeqCst), 0);

    matmul::set_engine(None);
    assert_eq!(matmul::engine_name(), "builtin");
    let reports = run_local(&plan, &spec(&plan, DType::F32, true), HEAP, TIMEOUT).unwrap();
    assert!(reports.iter().all(|r| r.wrong == 0));
}
