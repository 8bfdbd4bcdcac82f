//! Derived duals end to end: the backward schedule `F.dual` of each standard forward, made to
//! say `dual derived`, runs on 2–4 local rank processes and matches the dual collective's
//! sequential reference (`symsched run … --schedule F.dual --check`); a forward that cannot be
//! transposed is refused by `check` with E0445 at the step.

use std::path::{Path, PathBuf};

// Shared by the binary's test files; this one only runs the binary.
#[allow(dead_code)]
mod common;
use common::{arg as s, symsched, text};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/{name}.sched"))
}

/// `name`'s source with its `dual …` clause replaced by `dual derived`, written into `dir`.
fn derived_copy(dir: &Path, name: &str) -> PathBuf {
    let src = std::fs::read_to_string(example(name)).expect("example");
    let mut out = String::new();
    let mut done = false;
    for line in src.lines() {
        match line.find("dual ") {
            Some(at) if !done && !line.trim_start().starts_with("//") => {
                let tail = if line.trim_end().ends_with('{') {
                    " {"
                } else {
                    ""
                };
                out.push_str(&line[..at]);
                out.push_str("dual derived");
                out.push_str(tail);
                done = true;
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    assert!(done, "{name} declares a dual");
    let path = dir.join(format!("{name}.sched"));
    std::fs::write(&path, out).expect("written");
    path
}

/// Every derived backward runs and passes its check at 2–4 ranks (counts not divisible by P).
#[test]
fn derived_backwards_run_and_match_the_reference() {
    let cases: &[(&str, u32, &[&str])] = &[
        ("allgather_push", 2, &[]),
        ("allgather_push", 3, &[]),
        ("allgather_push", 4, &[]),
        ("allgather_pull", 3, &[]),
        ("allgather_one_shot", 4, &[]),
        ("reduce_scatter_push", 2, &[]),
        ("reduce_scatter_push", 4, &[]),
        ("alltoall_push", 3, &[]),
        ("broadcast_push", 3, &["--param", "root=1"]),
        ("reduce_push", 4, &["--param", "root=2"]),
        (
            "sendrecv_pair",
            3,
            &["--param", "src=2", "--param", "dst=0"],
        ),
        ("allreduce_one_shot", 2, &[]),
        ("allreduce_two_shot", 4, &[]),
        ("allreduce_ring", 3, &[]),
        // Chunk factor 2: the backward's roles keep the forward's chunking.
        ("reduce_scatter_push_k2", 3, &[]),
        ("allgather_push_k2", 4, &[]),
        // Two channels: the backward runs on channel 0.
        ("reduce_scatter_push_channels", 2, &[]),
        ("reduce_scatter_push_channels", 3, &[]),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let mut failures = Vec::new();
    for (name, ranks, params) in cases {
        let file = derived_copy(dir.path(), name);
        let schedule = format!("{name}.dual");
        let ranks = ranks.to_string();
        let mut args = vec![
            "run",
            s(&file),
            "--schedule",
            &schedule,
            "--ranks",
            &ranks,
            "--count",
            "1,1001",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--timeout",
            "120",
            "--check",
        ];
        args.extend_from_slice(params);
        let out = symsched(&args);
        let stdout = text(&out.stdout);
        if !out.status.success() || !stdout.contains("# check passed") {
            failures.push(format!(
                "{schedule} at {ranks} ranks:\n{stdout}\n{}",
                text(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `check` refuses a forward with a step the transposition cannot handle, naming the step.
#[test]
fn check_names_the_step_a_derived_dual_cannot_transpose() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = derived_copy(dir.path(), "allreduce_two_shot_wire");
    let out = symsched(&["check", s(&file), "--ranks", "2"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("error[E0445]"), "{stderr}");
    assert!(stderr.contains("cast"), "{stderr}");
    assert!(stderr.contains("dual derived here"), "{stderr}");
}
