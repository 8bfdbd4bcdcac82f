//! Collectives declared by their chunk map (`collective NAME(…)(…) { … }`), end to end: the
//! verifier proves their schedules (and their duals as adjoints) at every group size, `compile`
//! emits a plan that carries the map, and `run --check` compares bit for bit against the
//! reference derived from it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use symsched_compiler::library::Library;
use symsched_plan::{CollectiveKind, Plan};

mod common;
use common::{arg as path, compile_file, symsched, text, wrong_elements};

fn schedule_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/schedules")
        .join(name)
}

#[test]
fn declared_collectives_verify_at_every_group_size_with_their_duals() {
    for (file, names, instantiations) in [
        (
            "all_to_next.sched",
            ["all_to_next_push", "all_to_prev_push"],
            8,
        ),
        // root in 0..P: 1 + 2 + … + 8.
        (
            "reduce_then_gather.sched",
            ["reduce_then_gather_push", "broadcast_blocks_push"],
            36,
        ),
    ] {
        let f = schedule_file(file);
        let out = symsched(&["check", path(&f), "--ranks", "1,2,3,4,5,6,7,8"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stdout}\n{stderr}");
        for name in names {
            assert!(
                stdout.contains(&format!(
                    "ok    {name}: {instantiations} instantiation(s) verified"
                )),
                "{stdout}"
            );
        }
        // Both fold in rank order or copy: nothing to warn about.
        assert!(!stderr.contains("warning"), "{stderr}");
    }
}

#[test]
fn a_wrong_schedule_of_a_declared_collective_is_refused() {
    // The reduction leaves out the rank's own block: every output misses one contribution.
    let good = std::fs::read_to_string(schedule_file("reduce_then_gather.sched")).expect("reads");
    let bad = good.replace(
        "mine = reduce(land[0..rank], in[rank], land[rank + 1..P]);",
        "mine = reduce(land[0..rank], land[rank + 1..P]);",
    );
    assert_ne!(good, bad);
    let mut lib = Library::new();
    lib.add_source("bad.sched", &bad).expect("parses");
    let params = BTreeMap::from([("root".to_string(), 1)]);
    let d = symsched_compiler::verify::check(&lib, "reduce_then_gather_push", 3, &params)
        .expect_err("refused");
    assert_eq!(d[0].code, "E0401", "{d:?}");
    // The note names the declared collective and its postcondition for that block.
    assert!(
        d[0].notes
            .iter()
            .any(|n| n.starts_with("reduce_then_gather requires: {r0:in[0], r1:in[0], r2:in[0]}")),
        "{:?}",
        d[0].notes
    );
}

#[test]
fn compile_emits_a_plan_that_carries_the_chunk_map() {
    let dir = tempfile::tempdir().expect("temp dir");
    let plan_path = dir.path().join("plan.json");
    let f = schedule_file("reduce_then_gather.sched");
    let out = symsched(&[
        "compile",
        path(&f),
        "--schedule",
        "reduce_then_gather_push",
        "--ranks",
        "4",
        "--param",
        "root=2",
        "--emit",
        "plan",
        "-o",
        path(&plan_path),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan = Plan::from_json(&std::fs::read_to_string(&plan_path).expect("plan written"))
        .expect("a valid plan");
    plan.check_consistency().expect("consistent");
    assert_eq!(plan.collective, CollectiveKind::Declared { reduces: true });
    let d = plan.declared.as_ref().expect("the chunk map");
    assert_eq!(d.name, "reduce_then_gather");
    // Only the root's four output blocks are specified, each the reduction of four inputs.
    assert_eq!(d.post.len(), 4);
    assert!(d
        .post
        .iter()
        .all(|b| b.at.rank == 2 && b.sources.len() == 4));
}

fn run_check(file: &str, schedule: &str, ranks: &str, extra: &[&str]) {
    let f = schedule_file(file);
    let mut args = vec![
        "run",
        path(&f),
        "--schedule",
        schedule,
        "--ranks",
        ranks,
        "--count",
        "4097",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--check",
    ];
    args.extend_from_slice(extra);
    let out = symsched(&args);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("# check passed"), "{stdout}");
}

#[test]
fn run_check_passes_bit_for_bit_at_two_to_four_ranks() {
    // f32 with the default tolerance of zero: the reference folds reductions in rank order,
    // which is the order these schedules fold in.
    for ranks in ["2", "3", "4"] {
        run_check("all_to_next.sched", "all_to_next_push", ranks, &[]);
        run_check("all_to_next.sched", "all_to_prev_push", ranks, &[]);
        run_check(
            "reduce_then_gather.sched",
            "reduce_then_gather_push",
            ranks,
            &["--param", "root=1"],
        );
        run_check(
            "reduce_then_gather.sched",
            "broadcast_blocks_push",
            ranks,
            &["--param", "root=0"],
        );
    }
    run_check(
        "reduce_then_gather.sched",
        "reduce_then_gather_push",
        "3",
        &["--param", "root=2", "--op", "avg"],
    );
}

#[test]
fn the_reference_is_derived_from_the_declared_map() {
    let plan = compile_file(&schedule_file("all_to_next.sched"), "all_to_next_push", 3);
    let wrong = |plan: &Plan| wrong_elements(plan, 4097);
    assert_eq!(wrong(&plan), 0);
    // A map that says rank 2 receives rank 0's block (the schedule delivers rank 1's): the same
    // run now fails on rank 2, so the comparison reads the map.
    let mut tampered = plan.clone();
    let d = tampered.declared.as_mut().expect("the chunk map");
    let b = d
        .post
        .iter_mut()
        .find(|b| b.at.rank == 2)
        .expect("rank 2 receives");
    b.sources[0].rank = 0;
    assert!(wrong(&tampered) > 0);
}
