//! `SYMSCHED_TRACE` under the JIT: kernels compiled while tracing is on report every step of
//! the rank's program once per launch, with the plan's step ids and kinds, inside its launch
//! event, into the same Chrome trace as the interpreter's (plus, for a put whose data ran in
//! an earlier fused pass, the moment its signal went out). Its own test binary because the
//! recorder is process-wide.

mod jit_common;

use jit_common::{instance, run, Case, LAUNCHES};
use serde_json::Value;
use symsched_plan::Op;
use symsched_runtime::config::BackendKind;
use symsched_runtime::exec::backend::jit::compile_stats;
use symsched_runtime::exec::{trace, DType, ElemTypes, ReduceOp};

#[test]
fn jit_kernels_trace_every_step_once_per_launch() {
    let dir = std::env::temp_dir().join(format!("symsched-jit-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    trace::enable(&path);
    let p = 3;
    let plan = instance("allreduce_one_shot", p).expect("P = 3 instance");
    let case = Case {
        plan: &plan,
        types: ElemTypes::new(DType::F32, None).unwrap(),
        op: ReduceOp::Sum,
        count: 1000,
        staged: false,
        late: Vec::new(),
        nt_min_bytes: None,
    };
    let before = compile_stats().compiled;
    let out = run(&case, BackendKind::Jit);
    for (r, o) in out.iter().enumerate() {
        assert!(o.is_ok(), "rank {r}: {o:?}");
    }
    assert!(
        compile_stats().compiled > before,
        "traced kernels were compiled"
    );
    trace::flush().unwrap();

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    for r in 0..p {
        let mine: Vec<&Value> = events.iter().filter(|e| e["pid"] == r).collect();
        let mut launches: Vec<(f64, f64)> = mine
            .iter()
            .filter(|e| e["cat"] == "launch")
            .map(|e| {
                let ts = e["ts"].as_f64().expect("ts");
                (ts, ts + e["dur"].as_f64().expect("dur"))
            })
            .collect();
        launches.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(launches.len(), LAUNCHES as usize, "rank {r}");
        let prog = &plan.ranks[r as usize].steps;
        assert!(!prog.is_empty());
        let mut want: Vec<(u64, String)> = prog
            .iter()
            .map(|s| (s.id as u64, trace::kind(&s.op).to_string()))
            .collect();
        want.sort();
        let signalled_put = |id: u64| {
            prog.iter().any(|s| {
                s.id as u64 == id
                    && matches!(
                        s.op,
                        Op::Put {
                            signal: Some(_),
                            ..
                        }
                    )
            })
        };
        for (t0, t1) in launches {
            let mut steps: Vec<&Value> = mine
                .iter()
                .filter(|e| e["cat"] == "step")
                .filter(|e| (t0..=t1).contains(&e["ts"].as_f64().unwrap()))
                .copied()
                .collect();
            steps.sort_by(|a, b| {
                a["ts"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["ts"].as_f64().unwrap())
            });
            // Every step once with its kind; a put whose data ran inside an earlier fused pass
            // reports its signal once more, later, moving no bytes.
            let mut got = Vec::new();
            for e in &steps {
                assert_eq!(e["args"]["schedule"], "allreduce_one_shot", "{e}");
                let id = e["args"]["step"].as_u64().expect("step id");
                let kind = e["name"].as_str().expect("kind").to_string();
                if got.iter().any(|(g, _)| *g == id) {
                    assert!(signalled_put(id), "rank {r}: step {id} twice: {e}");
                    assert_eq!(e["args"]["bytes"], 0, "{e}");
                } else {
                    got.push((id, kind));
                }
            }
            got.sort();
            assert_eq!(got, want, "rank {r}");
        }
    }
}
