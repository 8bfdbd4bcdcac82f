//! Several kernels build as one translation unit (`sim_build::build_many`), and each still runs
//! and reports as itself.
//!
//! A batch that does not compile is rebuilt kernel by kernel so that each error names its kernel;
//! that fallback also hides a sim entry that cannot share a unit with another (a helper defined
//! in every entry): every batch then costs a build per kernel, about four times the CPU, and
//! nothing fails. This test fails instead.

mod common;
use common::*;
use std::time::Duration;
use symsched_kernels::sim_build::{self, OptLevel, SimSources};
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};

fn o() -> LowerOptions {
    opts(DType::F32, DType::F32, ReduceOp::Sum, 4096)
}

#[test]
fn kernels_of_a_batch_compile_as_one_unit() {
    let plans = [allgather_direct(2), reduce_scatter_direct(2, false)];
    let srcs: Vec<SimSources> = plans
        .iter()
        .map(|p| SimSources::from(&lower(p, &o()).expect("lowering")))
        .collect();
    let cache = tempfile::tempdir().expect("temp dir");
    let kernels = sim_build::build_many(&srcs, cache.path(), OptLevel::O0, 1);
    let entries: Vec<String> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let batches: Vec<&String> = entries.iter().filter(|n| n.starts_with("batch-")).collect();
    assert_eq!(batches.len(), 1, "one batch directory: {entries:?}");
    assert!(
        cache.path().join(batches[0]).join("batch.so").exists(),
        "the batch compiled as one unit (no batch.so: it fell back to one build per kernel; \
         cache holds {entries:?})"
    );
    assert_eq!(
        entries.len(),
        1,
        "no kernel was built on its own: {entries:?}"
    );
    for (plan, k) in plans.iter().zip(kernels) {
        let k = k.unwrap_or_else(|e| panic!("{}: {e}", plan.schedule));
        run_fresh(&k, plan, &o(), 300, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{}: {e}", plan.schedule));
        assert!(
            !k.sync_sites().is_empty(),
            "{}: its own sync sites are reported",
            plan.schedule
        );
    }
}
