//! `SYMSCHED_TRACE` step events: run an all-reduce on the in-process fabric with tracing
//! enabled into a temp file, flush, and check the merged Chrome trace. Its own test binary
//! because the recorder is process-wide.

mod common;

use common::ITERS;
use serde_json::Value;
use symsched_plan::Plan;
use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::{trace, DType, ElemTypes};

fn run(plan: &Plan) {
    let types = ElemTypes::new(DType::F32, None).unwrap();
    let spec = common::spec(types, sizes_for(plan, 1000, &[]), false);
    common::run_checked(plan, &spec, 4 << 20, "allreduce_one_shot");
}

#[test]
fn step_events_form_a_chrome_trace() {
    let dir = std::env::temp_dir().join(format!("symsched-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    trace::enable(&path);
    let p = 3;
    let plan = common::plan("allreduce_one_shot", p);
    run(&plan);
    assert!(trace::pending().0 > 0);
    trace::flush().unwrap();
    assert_eq!(trace::pending(), (0, 0));
    // A second flush (e.g. from another rank or at exit) merges into the same file.
    run(&plan);
    trace::flush().unwrap();

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["pid"].is_u64(), "{e}");
        match ph {
            "X" => {
                assert!(e["ts"].as_f64().unwrap() > 1.0e15, "wall-clock µs: {e}");
                assert!(e["dur"].as_f64().unwrap() > 0.0, "{e}");
                assert!(e["name"].is_string() && e["tid"].is_string(), "{e}");
            }
            "M" => assert_eq!(e["name"], "process_name"),
            other => panic!("unexpected phase {other}"),
        }
    }
    for r in 0..p {
        let mine: Vec<&Value> = events.iter().filter(|e| e["pid"] == r).collect();
        let names: Vec<&Value> = mine.iter().filter(|e| e["ph"] == "M").copied().collect();
        assert_eq!(names.len(), 1, "one process_name for rank {r}");
        assert_eq!(names[0]["args"]["name"], format!("rank {r}"));
        let steps: Vec<&Value> = mine
            .iter()
            .filter(|e| e["cat"] == "step")
            .copied()
            .collect();
        let prog = &plan.ranks[r as usize].steps;
        assert_eq!(steps.len(), 2 * ITERS as usize * prog.len(), "rank {r}");
        let launches = mine.iter().filter(|e| e["cat"] == "launch").count();
        assert_eq!(launches, 2 * ITERS as usize, "rank {r}");
        // Kinds in plan order, per launch.
        for launch in steps.chunks(prog.len()) {
            for (e, s) in launch.iter().zip(prog) {
                assert_eq!(e["name"], trace::kind(&s.op));
                assert_eq!(e["args"]["step"], s.id);
                assert_eq!(e["args"]["channel"], s.channel);
                assert_eq!(e["args"]["schedule"], "allreduce_one_shot");
            }
        }
        let count = |k: &str| steps.iter().filter(|e| e["name"] == k).count();
        let in_plan = |k: &str| prog.iter().filter(|s| trace::kind(&s.op) == k).count();
        for k in ["put_signal", "wait", "reduce"] {
            assert!(in_plan(k) > 0, "the one-shot plan has {k} steps");
            assert_eq!(count(k), 2 * ITERS as usize * in_plan(k), "rank {r} {k}");
        }
        // P - 1 data puts land in peers' scratch (credit signals may add more signal steps).
        assert!(in_plan("put_signal") >= p as usize - 1);
        assert!(steps.iter().any(|e| e["args"]["slot"] == "arrived"));
        for e in &steps {
            match e["name"].as_str().unwrap() {
                "put_signal" => {
                    assert_eq!(e["args"]["bytes"], 4000, "{e}");
                    assert!(e["args"]["peer"].as_u64().unwrap() < p as u64);
                }
                "wait" => {
                    let slot = e["args"]["slot"].as_str().unwrap();
                    assert!(plan.signals.iter().any(|s| s.name == slot), "{e}");
                    assert!(e["args"]["target"].is_u64());
                }
                "reduce" => assert_eq!(e["args"]["bytes"], 4000),
                _ => {}
            }
        }
    }
}
