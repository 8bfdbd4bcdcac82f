//! Every standard schedule in `examples/` verifies (with its duals) for P ∈ {1, 2, 3, 4, 5, 8, 16}
//! and every binding of its params.

use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::diag::render_all;
use symsched_compiler::library::Library;
use symsched_compiler::verify;

pub fn examples_library() -> Library {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sched"))
        .collect();
    files.sort();
    let mut lib = Library::new();
    for f in &files {
        if let Err(d) = lib.add_file(f) {
            panic!("{}", render_all(&d, lib.sources()));
        }
    }
    lib
}

#[test]
fn every_example_verifies_at_every_group_size() {
    let lib = examples_library();
    let mut failures = Vec::new();
    let mut checked = 0;
    for s in lib.schedules() {
        for p in [1u32, 2, 3, 4, 5, 8, 16] {
            let space = match lib.param_space(&s.name, p, &BTreeMap::new()) {
                Ok(space) => space,
                Err(d) => {
                    failures.push(format!(
                        "{} P={p}: {}",
                        s.name,
                        render_all(&d, lib.sources())
                    ));
                    continue;
                }
            };
            for params in space {
                checked += 1;
                if let Err(d) = verify::check(&lib, &s.name, p, &params) {
                    failures.push(format!(
                        "{} P={p} {params:?}:\n{}",
                        s.name,
                        render_all(&d[..d.len().min(2)], lib.sources())
                    ));
                }
            }
        }
    }
    assert!(checked > 0, "no schedule was checked");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Hand-run timing of `verify_program` alone (not a timed test):
/// `cargo test --release -p symsched-compiler --test verify_examples -- --ignored --nocapture`.
#[test]
#[ignore]
fn verify_timing_by_hand() {
    let lib = examples_library();
    for (name, p) in [
        ("allreduce_two_shot", 8u32),
        ("allreduce_two_shot", 64),
        ("alltoall_push", 16),
        ("alltoall_push", 32),
        ("alltoall_push", 64),
        ("allreduce_ring", 64),
    ] {
        let prog = lib
            .instantiate(name, p, &BTreeMap::new())
            .unwrap_or_else(|d| panic!("{}", render_all(&d, lib.sources())));
        let runs = 5;
        let t = std::time::Instant::now();
        for _ in 0..runs {
            verify::verify_program(&prog).expect("verifies");
        }
        let per = t.elapsed() / runs;
        println!(
            "{name} P={p}: {} steps, verify_program {per:?}",
            prog.step_count()
        );
    }
}

#[test]
fn identity_dual_is_reported_as_a_note() {
    let lib = examples_library();
    let report = verify::check(&lib, "allreduce_one_shot", 4, &BTreeMap::new())
        .unwrap_or_else(|d| panic!("{}", render_all(&d, lib.sources())));
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.message.contains("assuming replicated downstream")),
        "{report:?}"
    );
}

/// Puts are non-blocking and unordered with one another: in the ring's broadcast pass, rank
/// P-2's wait for chunk c is not implied by its wait for the last chunk, although its
/// predecessor sends the chunks in program order.
#[test]
fn ring_broadcast_needs_every_per_chunk_wait() {
    use symsched_plan::Op;
    let lib = examples_library();
    let p = 4u32;
    let prog = lib
        .instantiate("allreduce_ring", p, &BTreeMap::new())
        .unwrap_or_else(|d| panic!("{}", render_all(&d, lib.sources())));
    verify::verify_program(&prog).expect("the ring verifies");
    let rank = (p - 2) as usize;
    let bc0 = prog.ranks[rank]
        .iter()
        .position(|s| matches!(&s.op, Op::Wait { slot, .. } if prog.slot_name(*slot) == "bc[0]"))
        .expect("rank P-2 waits for bc[0]");
    let mut edited = prog.clone();
    edited.ranks[rank].remove(bc0);
    edited.assign_epoch_strides();
    let errors = verify::verify_program(&edited).expect_err("chunk 0 may still be in flight");
    // Chunk 0 lands in rank P-2's `x`, a role buffer: it may arrive after the rank returns.
    assert!(
        errors
            .iter()
            .any(|d| d.code == "E0413" && d.message.contains("x[0]")),
        "{}",
        render_all(&errors, lib.sources())
    );
}
