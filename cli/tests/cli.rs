//! The `symsched` binary end to end: exit codes, messages and outputs.

use std::path::{Path, PathBuf};
use std::process::Command;
use symsched_plan::Plan;

mod common;
use common::{arg as s, compile_file, symsched, text, wrong_elements};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn example(name: &str) -> PathBuf {
    examples().join(format!("{name}.sched"))
}

/// Runs `symsched ARGS` (a `run … --check`), requires success and a passed check; returns stdout.
fn run_checked(args: &[&str]) -> String {
    let out = symsched(args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("# check passed"), "{stdout}");
    stdout
}

#[test]
fn check_accepts_the_standard_library() {
    let mut args: Vec<String> = vec!["check".into()];
    let mut files: Vec<String> = std::fs::read_dir(examples())
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "sched"))
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    args.extend(files);
    args.extend(["--ranks".into(), "1,2,3,4".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = symsched(&refs);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("ok    allreduce_two_shot:"), "{stdout}");
    // broadcast_push has root in 0..P: 1 + 2 + 3 + 4 instantiations.
    assert!(
        stdout.contains("ok    broadcast_push: 10 instantiation(s)"),
        "{stdout}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn check_loads_neighbours_so_cross_file_duals_resolve() {
    // allgather_push's dual lives in reduce_scatter_push.sched.
    let out = symsched(&["check", s(&example("allgather_push")), "--ranks", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("ok    allgather_push"), "{stdout}");
    // Only schedules of the named files are checked.
    assert!(!stdout.contains("reduce_scatter_push:"), "{stdout}");
}

#[test]
fn check_refuses_a_schedule_with_a_missing_wait() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("broken.sched");
    std::fs::write(
        &file,
        "schedule broken implements allgather(in: [1], out: [P]) {\n\
         \x20   signal done;\n\
         \x20   out[rank] = copy(in);\n\
         \x20   for i in 1..P {\n\
         \x20       let p = (rank + i) % P;\n\
         \x20       put in -> out[rank] @ p, signal done @ p += 1;\n\
         \x20   }\n\
         }\n",
    )
    .expect("write");
    let out = symsched(&["check", s(&file), "--ranks", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("error[E04"), "{stderr}");
    assert!(stderr.contains("broken.sched"), "{stderr}");
    assert!(text(&out.stdout).contains("FAIL  broken"));
}

#[test]
fn check_reports_syntax_errors_with_a_code() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bad.sched");
    std::fs::write(
        &file,
        "schedule bad implements allreduce(x: [1]) { wait ; }\n",
    )
    .expect("write");
    let out = symsched(&["check", s(&file), "--ranks", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error[E01"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn compile_emits_a_valid_plan_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("plan.json");
    let out = symsched(&[
        "compile",
        s(&example("allreduce_two_shot")),
        "--ranks",
        "5",
        "--emit",
        "plan",
        "-o",
        s(&path),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan = Plan::from_json(&std::fs::read_to_string(&path).expect("plan written"))
        .expect("a valid plan");
    assert_eq!(plan.group_size, 5);
    assert_eq!(plan.schedule, "allreduce_two_shot");
}

#[test]
fn compile_emits_ir_and_dot_and_graph_prints_dot() {
    let file = example("reduce_push");
    let ir = symsched(&[
        "compile",
        s(&file),
        "--ranks",
        "3",
        "--param",
        "root=1",
        "--emit",
        "ir",
    ]);
    assert!(ir.status.success(), "{}", text(&ir.stderr));
    let ir = text(&ir.stdout);
    assert!(
        ir.starts_with("schedule reduce_push implements reduce"),
        "{ir}"
    );
    assert!(ir.contains("params [root=1]"), "{ir}");
    assert!(ir.contains("rank 2:"), "{ir}");

    let dot = symsched(&["graph", s(&file), "--ranks", "3", "--param", "root=1"]);
    assert!(dot.status.success(), "{}", text(&dot.stderr));
    let dot = text(&dot.stdout);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("subgraph cluster_r2"), "{dot}");
    assert!(dot.contains("style=dashed"), "{dot}");
}

#[test]
fn compile_asks_for_unbound_params() {
    let out = symsched(&["compile", s(&example("broadcast_push")), "--ranks", "4"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--param root=V"), "{stderr}");
}

#[test]
fn compile_without_optimiser_keeps_separate_steps() {
    let file = example("allreduce_one_shot");
    let run = |extra: &[&str]| {
        let mut args = vec!["compile", s(&file), "--ranks", "4", "--emit", "plan"];
        args.extend_from_slice(extra);
        let out = symsched(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        Plan::from_json(&text(&out.stdout)).expect("valid plan")
    };
    let steps = |p: &Plan| p.ranks.iter().map(|r| r.steps.len()).sum::<usize>();
    assert!(steps(&run(&[])) <= steps(&run(&["--no-opt"])));
}

#[test]
fn bad_arguments_are_usage_errors() {
    let out = symsched(&["check", s(&example("allgather_push")), "--ranks", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = symsched(&[
        "compile",
        s(&example("allgather_push")),
        "--ranks",
        "2",
        "--param",
        "oops",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("NAME=VALUE"));
}

#[test]
fn fmt_check_fails_on_unformatted_and_fmt_fixes_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.sched");
    let original = std::fs::read_to_string(example("allgather_push")).expect("read");
    // Same program, mangled layout.
    let mangled = original.replace("    ", "  ").replace(" -> ", "->");
    std::fs::write(&file, &mangled).expect("write");
    let check = symsched(&["fmt", "--check", s(&file)]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check.stdout));
    assert!(text(&check.stdout).contains("not formatted"));
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        mangled,
        "--check must not write"
    );

    let fix = symsched(&["fmt", s(&file)]);
    assert!(fix.status.success(), "{}", text(&fix.stderr));
    let again = symsched(&["fmt", "--check", s(&file)]);
    assert!(again.status.success(), "{}", text(&again.stdout));
    let formatted = std::fs::read_to_string(&file).expect("read");
    assert!(formatted.contains("schedule allgather_push"), "{formatted}");
}

#[test]
fn a_broken_neighbour_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().expect("temp dir");
    // allgather_push's dual reduce_scatter_push declares allgather_pull as a dual too.
    for name in ["allgather_push", "reduce_scatter_push", "allgather_pull"] {
        std::fs::copy(example(name), dir.path().join(format!("{name}.sched"))).expect("copy");
    }
    std::fs::write(dir.path().join("zz_broken.sched"), "schedule {").expect("write");
    let out = symsched(&[
        "check",
        s(&dir.path().join("allgather_push.sched")),
        "--ranks",
        "2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: skipping"),
        "{}",
        text(&out.stderr)
    );
    // Named, it fails.
    let out = symsched(&[
        "check",
        s(&dir.path().join("zz_broken.sched")),
        "--ranks",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(1));
}

/// `symsched run` end to end: compile, launch ranks as processes, run, check against the
/// sequential reference (counts not divisible by P, and 0 elements).
#[test]
fn run_checks_every_rank_against_the_reference() {
    let stdout = run_checked(&[
        "run",
        s(&example("allreduce_two_shot")),
        "--ranks",
        "3",
        "--count",
        "0,1001",
        "--iters",
        "2",
        "--timeout",
        "120",
        "--check",
    ]);
    assert!(stdout.contains("1001"), "{stdout}");
}

/// The generated Ascend C kernel, compiled against the host simulation, run by every rank
/// process on the real runtime, gives the reference result.
/// A chunk factor (two or three chunks per rank's block; built-in collectives and a declared
/// one): with n not a multiple of K every block's chunks differ in length, so a whole-buffer
/// split would misplace every block after the first.
#[test]
fn run_with_a_chunk_factor_matches_the_reference_at_odd_counts() {
    let files = [
        example("reduce_scatter_push_k2"),
        example("allgather_push_k2"),
        test_schedule("alltoall_push_k3.sched"),
        test_schedule("transpose_k2.sched"),
    ];
    for file in &files {
        for (ranks, counts) in [("2", "1,7,2002"), ("3", "3003,3009")] {
            let stdout = run_checked(&[
                "run",
                s(file),
                "--ranks",
                ranks,
                "--count",
                counts,
                "--iters",
                "2",
                "--timeout",
                "120",
                "--check",
            ]);
            assert!(
                stdout.contains(if ranks == "2" { "2002" } else { "3009" }),
                "{stdout}"
            );
        }
    }
}

#[test]
fn run_on_the_simulated_device_matches_the_reference() {
    run_checked(&[
        "run",
        s(&example("allreduce_two_shot_wire")),
        "--ranks",
        "3",
        "--count",
        "1001",
        "--wire",
        "bf16",
        "--backend",
        "sim",
        "--iters",
        "2",
        "--timeout",
        "120",
        "--check",
    ]);
}

#[test]
fn run_refuses_bad_arguments_before_launching() {
    let file = example("allreduce_one_shot");
    for args in [
        vec!["--dtype", "f13"],
        vec!["--op", "xor"],
        vec!["--backend", "gpu"],
        vec!["--count", "lots"],
    ] {
        let mut all = vec!["run", s(&file), "--ranks", "2"];
        all.extend(args.iter().copied());
        let out = symsched(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = text(&out.stderr);
        assert!(
            !err.is_empty() && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

/// A schedule of `tests/schedules/` (algorithms outside the standard library).
fn test_schedule(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/schedules")
        .join(file)
}

/// The classic rotating ring: chunk c is folded along the ring starting at rank c, the same
/// order on every rank (so it verifies), not rank order (so it warns W0404).
fn rotating_ring() -> PathBuf {
    test_schedule("allreduce_ring_rotating.sched")
}

#[test]
fn check_and_run_check_agree_on_a_fold_out_of_rank_order() {
    let ring = rotating_ring();
    let out = symsched(&["check", s(&ring), "--ranks", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("W0404"), "{}", text(&out.stderr));
    // f32 bit for bit, at sizes that leave a short last chunk: the reference folds each chunk in
    // the order the verifier proved.
    run_checked(&[
        "run",
        s(&ring),
        "--ranks",
        "4",
        "--count",
        "4097,65536",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--check",
    ]);
}

#[test]
fn the_reference_follows_the_plan_fold_table() {
    let plan = compile_file(&rotating_ring(), "allreduce_ring_rotating", 4);
    assert_eq!(plan.folds.outputs.len(), 16, "every chunk of every rank");
    let wrong = |plan: &Plan| wrong_elements(plan, 4097);
    assert_eq!(wrong(&plan), 0);
    // Without the table the reference folds in rank order and the same results fail in f32:
    // what `run --check` did before plans carried their fold order.
    let mut blind = plan.clone();
    blind.folds = Default::default();
    assert!(wrong(&blind) > 0);
}

#[test]
fn hierarchical_run_with_chunks_of_different_lengths_ends_cleanly() {
    // 4097 elements over two node-local chunks: 2049 and 2048. Each rank's host collective
    // (over its own one-rank cross group) has a different length; its exchange area used to be
    // sized by that length, so the ranks' scratch registrations disagreed and every rank failed
    // with SIGNAL SLOT MISMATCH after "check passed".
    let out = symsched(&[
        "run",
        s(&example("allreduce_hier")),
        "--param",
        "L=2",
        "--ranks",
        "2",
        "--count",
        "4097",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--check",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("# check passed"), "{stdout}");
    assert!(!stderr.contains("MISMATCH"), "{stderr}");
}

/// SIGTERM to `symsched run` stops the ranks and says the launch was interrupted — not that
/// some rank failed — with the shell's status for the signal (128 + 15). Bounded: the run is
/// signalled after 2 s and must end within 60 s.
#[test]
fn run_interrupted_by_sigterm_says_so() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_symsched"))
        .args([
            "run",
            s(&example("allreduce_one_shot")),
            "--ranks",
            "2",
            "--count",
            "64",
            "--iters",
            "100000000",
            "--timeout",
            "120",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("symsched runs");
    std::thread::sleep(Duration::from_secs(2));
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(st.success());
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("symsched run did not stop after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let err = text(&out.stderr);
    assert!(err.contains("interrupted"), "{err}");
    assert!(!err.contains("failed"), "{err}");
    assert_eq!(out.status.code(), Some(143), "{err}");
}

/// Recursive doubling, written with the integer vocabulary (`^`, `<<`, `>>`, `log2`) and a
/// `require`: verified and run at every power of two, refused with E0318 elsewhere.
fn recursive_doubling() -> PathBuf {
    test_schedule("allreduce_recursive_doubling.sched")
}

#[test]
fn recursive_doubling_verifies_runs_and_states_its_requirement() {
    let rd = recursive_doubling();
    let out = symsched(&["check", s(&rd), "--ranks", "1,2,4,8,16"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // A tree fold: one W0404, printed once with the instantiations that repeat it.
    assert_eq!(err.matches("warning[W0404]").count(), 1, "{err}");
    assert!(
        err.contains("the same W0404 here in 2 more instantiation(s): P = 8; P = 16"),
        "{err}"
    );
    let out = symsched(&["check", s(&rd), "--ranks", "6"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("error[E0318]: `allreduce_recursive_doubling` requires `is_pow2(P)`, which does not hold for P = 6"),
        "{err}"
    );
    // f32 bit for bit against the reference, which folds in the order the verifier proved.
    run_checked(&[
        "run",
        s(&rd),
        "--ranks",
        "4",
        "--count",
        "4097",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--check",
    ]);
    let out = symsched(&["run", s(&rd), "--ranks", "3", "--count", "16"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("E0318"), "{}", text(&out.stderr));
}

#[test]
fn check_refuses_a_param_no_schedule_declares() {
    let ring = rotating_ring();
    let out = symsched(&["check", s(&ring), "--ranks", "4", "--param", "BOGUS=3"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("--param BOGUS: no schedule in the given files has a parameter `BOGUS`"),
        "{err}"
    );
}
