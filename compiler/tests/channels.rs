//! Channels inside a rank (`channel C { … }`): a rank's channels run concurrently and order
//! against each other only through signals, so a wait blocks its own channel only.

use std::collections::BTreeMap;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, CompileOptions};
use symsched_compiler::verify;

/// Rank 0 waits for its own signal, sent by work placed after the wait: one sequence
/// deadlocks, two channels do not. `BLOCK` is how the signalling half is wrapped.
fn self_signal(block: &str) -> String {
    format!(
        "schedule handoff implements allgather(in: [1], out: [P]) {{
    signals done, arrived;
    out[rank] = copy(in);
    wait done >= 1;
    wait arrived >= P - 1;
    {block} {{
        for i in 1..P {{
            let p = (rank + i) % P;
            put in -> out[rank] @ p, signal arrived @ p += 1;
        }}
        signal done @ rank += 1;
    }}
}}"
    )
}

fn library(text: &str) -> Library {
    let mut lib = Library::new();
    lib.add_source("t.sched", text).expect("parses");
    lib
}

fn codes(lib: &Library, p: u32) -> Vec<&'static str> {
    match verify::check(lib, "handoff", p, &BTreeMap::new()) {
        Ok(_) => Vec::new(),
        Err(d) => d.iter().map(|d| d.code).collect(),
    }
}

#[test]
fn a_wait_blocks_only_its_own_channel() {
    for p in [1, 2, 4] {
        let one_sequence = codes(&library(&self_signal("if true")), p);
        assert!(
            !one_sequence.is_empty() && one_sequence.iter().all(|c| *c == "E0422"),
            "P = {p}: {one_sequence:?}"
        );
        assert_eq!(
            codes(&library(&self_signal("channel 1")), p),
            [] as [&str; 0]
        );
    }
}

#[test]
fn the_plan_puts_each_step_on_its_channel() {
    let lib = library(&self_signal("channel 1"));
    let c = compile(
        &lib,
        "handoff",
        2,
        &BTreeMap::new(),
        &CompileOptions::default(),
    )
    .expect("compiles");
    assert_eq!(c.plan.channel_count(), 2);
    for r in &c.plan.ranks {
        // The copy and the two waits on channel 0; the put, the signal and the put's credit
        // wait on channel 1.
        let on = |ch: u32| r.steps.iter().filter(|s| s.channel == ch).count();
        assert_eq!(on(0), 3, "rank {}", r.rank);
        assert!(on(1) >= 2, "rank {}", r.rank);
    }
    let json = c.plan.to_json();
    assert!(json.contains("\"channel\": 1"));
    let back = symsched_plan::Plan::from_json(&json).expect("reads back");
    assert_eq!(back, c.plan);
}

#[test]
fn every_channel_waits_for_its_own_launch_credit() {
    let lib = symsched_compiler::pipeline::standard_library();
    let c = compile(
        &lib,
        "reduce_scatter_push_channels",
        2,
        &BTreeMap::new(),
        &CompileOptions::default(),
    )
    .expect("compiles");
    for r in &c.plan.ranks {
        for ch in 0..2 {
            let first_put = r
                .steps
                .iter()
                .filter(|s| s.channel == ch)
                .position(|s| matches!(s.op, symsched_plan::Op::Put { .. }))
                .expect("each channel puts");
            let credit = r
                .steps
                .iter()
                .filter(|s| s.channel == ch)
                .take(first_put)
                .any(|s| matches!(s.op, symsched_plan::Op::Wait { slot, .. } if c.plan.signals[slot as usize].name.starts_with("__credit")));
            assert!(
                credit,
                "rank {} channel {ch} puts before its credit",
                r.rank
            );
        }
    }
}

#[test]
fn the_formatter_keeps_channel_blocks() {
    let text = self_signal("channel 1");
    let formatted =
        symsched_compiler::front::fmt::format_source("t.sched", &text).expect("formats");
    assert!(formatted.contains("    channel 1 {\n"), "{formatted}");
    assert_eq!(
        symsched_compiler::front::fmt::format_source("t.sched", &formatted).expect("formats"),
        formatted
    );
}

/// `dual derived` of a schedule with channels: the backward verifies (postcondition, races,
/// deadlock, adjoint) and runs on channel 0, one sequence per rank.
#[test]
fn a_derived_dual_of_a_channel_schedule_runs_on_channel_0() {
    let text = self_signal("channel 1").replace(
        "implements allgather(in: [1], out: [P])",
        "implements allgather(in: [1], out: [P]) dual derived",
    );
    let lib = library(&text);
    for p in [1, 2, 3, 4] {
        assert_eq!(codes(&lib, p), [] as [&str; 0], "P = {p}");
        let c = compile(
            &lib,
            "handoff.dual",
            p,
            &BTreeMap::new(),
            &CompileOptions::default(),
        )
        .expect("the derived dual compiles");
        assert_eq!(c.plan.channel_count(), 1, "P = {p}");
    }
}
