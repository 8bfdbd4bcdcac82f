//! `SYMSCHED_TRACE` step events of a multi-channel plan. Its own test binary because the
//! recorder is process-wide (see `exec_trace.rs`).

mod common;

use common::ITERS;
use serde_json::Value;
use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::{trace, DType, ElemTypes};

/// A multi-channel plan's step events name each step's channel and plan step id (the
/// interpreter groups a rank's steps by channel; the trace still says which plan step ran).
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
    common::run_checked(&plan, &spec, 4 << 20, "alltoall_push on two channels");
    trace::flush().unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    let steps: Vec<&Value> = events
        .iter()
        .filter(|e| e["cat"] == "step" && e["args"]["schedule"] == "alltoall_push")
        .collect();
    let all: Vec<&symsched_plan::Step> = plan.ranks.iter().flat_map(|r| &r.steps).collect();
    assert_eq!(steps.len(), ITERS as usize * all.len());
    for e in steps {
        let s = all
            .iter()
            .find(|s| e["args"]["step"] == s.id)
            .unwrap_or_else(|| panic!("a plan step: {e}"));
        assert_eq!(e["name"], trace::kind(&s.op), "{e}");
        assert_eq!(e["args"]["channel"], s.channel, "{e}");
    }
}
