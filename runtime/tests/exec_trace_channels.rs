//! `SYMSCHED_TRACE` step events of a multi-channel plan. Its own test binary because the
//! recorder is process-wide (see `exec_trace.rs`).

mod common;

use common::ITERS;
use serde_json::Value;
use symsched_runtime::config::{BackendKind, ExecOptions};
use symsched_runtime::exec::harness::{run_in_world, sizes_for};
use symsched_runtime::exec::{trace, DType, ElemTypes, LocalWorld};

/// A multi-channel plan's step events name each step's channel and plan step id, on the
/// interpreter and on the JIT (both group a rank's steps by channel; the trace still says which
/// plan step ran).
#[test]
fn channel_steps_name_their_channel() {
    let dir = std::env::temp_dir().join(format!("symsched-trace-ch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    trace::enable(&path);
    // alltoall_push with each rank's own-block copy (independent of its other steps) moved to
    // channel 1.
    let mut plan = common::plan("alltoall_push", 2);
    for r in &mut plan.ranks {
        for s in &mut r.steps {
            if matches!(s.op, symsched_plan::Op::Copy { .. }) {
                s.channel = 1;
            }
        }
    }
    assert_eq!(plan.channel_count(), 2);
    let types = ElemTypes::new(DType::F32, None).unwrap();
    let spec = common::spec(types, sizes_for(&plan, 2 * 100, &[]), false);
    let backends = [BackendKind::Interp, BackendKind::Jit];
    for backend in backends {
        let opts = ExecOptions {
            backend,
            ..ExecOptions::default()
        };
        let world =
            LocalWorld::with_options(plan.group_size, 4 << 20, common::TIMEOUT, opts).unwrap();
        let reports = run_in_world(&plan, &spec, &world)
            .unwrap_or_else(|e| panic!("{backend:?}: alltoall_push on two channels: {e}"));
        assert!(reports.iter().all(|r| r.wrong == 0), "{backend:?}");
    }
    trace::flush().unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e["cat"] == "step" && e["args"]["schedule"] == "alltoall_push")
        .collect();
    let all: Vec<&symsched_plan::Step> = plan.ranks.iter().flat_map(|r| &r.steps).collect();
    // Every plan step once per launch and backend; the JIT reports a signalled put fused into
    // a pass once more when its signal goes out (`docs/llvm.md`, the `trace` intrinsic).
    for s in &all {
        let seen = steps.iter().filter(|e| e["args"]["step"] == s.id).count();
        let once = backends.len() * ITERS as usize;
        let signalled_put = matches!(
            s.op,
            symsched_plan::Op::Put {
                signal: Some(_),
                ..
            }
        );
        assert!(
            seen == once || (signalled_put && seen == once + ITERS as usize),
            "step {}: {seen} events",
            s.id
        );
    }
    for e in steps {
        let s = all
            .iter()
            .find(|s| e["args"]["step"] == s.id)
            .unwrap_or_else(|| panic!("a plan step: {e}"));
        assert_eq!(e["name"], trace::kind(&s.op), "{e}");
        assert_eq!(e["args"]["channel"], s.channel, "{e}");
    }
}
