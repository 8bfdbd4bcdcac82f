//! The whole compiler as one call: instantiate, verify, optimise, re-verify, emit a plan.
//!
//! Also home of the embedded standard library ([`standard_library`]), which the runtime and the
//! Python package load so they need no files on disk, and of [`source_hash`], the digest plans
//! carry to identify the source they were compiled from.

use crate::back::emit_plan;
use crate::diag::{Diagnostic, FileId, SourceMap};
use crate::ir::Program;
use crate::library::Library;
use crate::opt::{self, OptStats};
use crate::verify::{self, Report};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use symsched_plan::Plan;

/// Knobs of [`compile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// Run the optimiser (and verify its output again).
    pub optimize: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions { optimize: true }
    }
}

/// The result of compiling one schedule for one group size and parameter binding.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The verified (and, if asked, optimised and re-verified) program.
    pub program: Program,
    /// Its plan.
    pub plan: Plan,
    /// The verifier's warnings and notes on the source program.
    pub report: Report,
    /// What the optimiser changed (all zero without `optimize`).
    pub opt_stats: OptStats,
}

/// Compile schedule `name` of `lib` for `group_size` ranks with `params` bound.
///
/// Verification runs on the instantiated program before any rewrite; with
/// [`CompileOptions::optimize`] the optimised program is verified again, so an optimiser bug
/// surfaces as a diagnostic rather than as a wrong plan.
pub fn compile(
    lib: &Library,
    name: &str,
    group_size: u32,
    params: &BTreeMap<String, i64>,
    opts: &CompileOptions,
) -> Result<Compiled, Vec<Diagnostic>> {
    let (mut program, report) = verify::check_program(lib, name, group_size, params)?;
    let mut opt_stats = OptStats::default();
    let mut folds = report.folds.clone();
    if opts.optimize {
        opt_stats = opt::optimize(&mut program);
        // An unchanged program is the one just verified.
        if opt_stats != OptStats::default() {
            folds = verify::verify_program(&program)?.folds;
        }
    }
    let hash = source_hash(lib.sources(), &program);
    let plan = emit_plan(&program, &hash, folds);
    Ok(Compiled {
        program,
        plan,
        report,
        opt_stats,
    })
}

/// A stable hex digest (SHA-256) of the source text a program came from: every file one of its
/// steps, its header or an inlined `use` points into, in file order. File names are not hashed,
/// so the same text gives the same digest wherever it was loaded from.
pub fn source_hash(sources: &SourceMap, prog: &Program) -> String {
    let mut files: BTreeSet<FileId> = BTreeSet::new();
    files.insert(prog.header_span.file);
    for (_, step) in prog.steps() {
        files.insert(step.span.file);
        files.extend(step.inlined_from.iter().map(|s| s.file));
    }
    let mut h = Sha256::new();
    for f in files {
        let text = sources.text(f);
        // Length-prefix each text so concatenations cannot collide.
        h.update((text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

/// The standard library's sources, `(file name, text)`, embedded at build time. This list is the
/// one place that names them.
pub const STANDARD_LIBRARY: &[(&str, &str)] = &[
    (
        "examples/allgather_push.sched",
        include_str!("../../examples/allgather_push.sched"),
    ),
    (
        "examples/allgather_pull.sched",
        include_str!("../../examples/allgather_pull.sched"),
    ),
    (
        "examples/allgather_one_shot.sched",
        include_str!("../../examples/allgather_one_shot.sched"),
    ),
    (
        "examples/reduce_scatter_push.sched",
        include_str!("../../examples/reduce_scatter_push.sched"),
    ),
    (
        "examples/reduce_scatter_pull.sched",
        include_str!("../../examples/reduce_scatter_pull.sched"),
    ),
    (
        "examples/allreduce_one_shot.sched",
        include_str!("../../examples/allreduce_one_shot.sched"),
    ),
    (
        "examples/allreduce_two_shot.sched",
        include_str!("../../examples/allreduce_two_shot.sched"),
    ),
    (
        "examples/allreduce_two_shot_pull.sched",
        include_str!("../../examples/allreduce_two_shot_pull.sched"),
    ),
    (
        "examples/allreduce_ring.sched",
        include_str!("../../examples/allreduce_ring.sched"),
    ),
    (
        "examples/allreduce_ring_gloo.sched",
        include_str!("../../examples/allreduce_ring_gloo.sched"),
    ),
    (
        "examples/allreduce_two_shot_wire.sched",
        include_str!("../../examples/allreduce_two_shot_wire.sched"),
    ),
    (
        "examples/reduce_scatter_push_wire.sched",
        include_str!("../../examples/reduce_scatter_push_wire.sched"),
    ),
    (
        "examples/reduce_scatter_push_k2.sched",
        include_str!("../../examples/reduce_scatter_push_k2.sched"),
    ),
    (
        "examples/reduce_scatter_push_channels.sched",
        include_str!("../../examples/reduce_scatter_push_channels.sched"),
    ),
    (
        "examples/allgather_push_k2.sched",
        include_str!("../../examples/allgather_push_k2.sched"),
    ),
    (
        "examples/alltoall_push.sched",
        include_str!("../../examples/alltoall_push.sched"),
    ),
    (
        "examples/alltoallv_push.sched",
        include_str!("../../examples/alltoallv_push.sched"),
    ),
    (
        "examples/broadcast_push.sched",
        include_str!("../../examples/broadcast_push.sched"),
    ),
    (
        "examples/reduce_push.sched",
        include_str!("../../examples/reduce_push.sched"),
    ),
    (
        "examples/sendrecv_pair.sched",
        include_str!("../../examples/sendrecv_pair.sched"),
    ),
    (
        "examples/allgather_matmul.sched",
        include_str!("../../examples/allgather_matmul.sched"),
    ),
    (
        "examples/matmul_reduce_scatter.sched",
        include_str!("../../examples/matmul_reduce_scatter.sched"),
    ),
    (
        "examples/allgather_matmul_pull.sched",
        include_str!("../../examples/allgather_matmul_pull.sched"),
    ),
    (
        "examples/matmul_reduce_scatter_pull.sched",
        include_str!("../../examples/matmul_reduce_scatter_pull.sched"),
    ),
    (
        "examples/allreduce_hier.sched",
        include_str!("../../examples/allreduce_hier.sched"),
    ),
    (
        "examples/allgather_hier.sched",
        include_str!("../../examples/allgather_hier.sched"),
    ),
    (
        "examples/reduce_scatter_hier.sched",
        include_str!("../../examples/reduce_scatter_hier.sched"),
    ),
];

/// Load the embedded standard library, reporting the diagnostics of any source that does not
/// parse or resolve.
pub fn try_standard_library() -> Result<Library, Vec<Diagnostic>> {
    let mut lib = Library::new();
    let mut errors = Vec::new();
    for (name, text) in STANDARD_LIBRARY {
        if let Err(mut d) = lib.add_source(name, text) {
            errors.append(&mut d);
        }
    }
    if errors.is_empty() {
        Ok(lib)
    } else {
        Err(errors)
    }
}

/// The embedded standard library.
///
/// # Panics
/// Only if an embedded source is broken, which `standard_library_loads_and_compiles` rules out
/// in CI; use [`try_standard_library`] to handle that case instead.
pub fn standard_library() -> Library {
    match try_standard_library() {
        Ok(lib) => lib,
        Err(d) => panic!(
            "the embedded standard library does not load: {}",
            d.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

/// Parameters the snapshot tests, the bench and the docs use for the standard library's
/// parametrised schedules.
pub fn example_params(schedule: &str) -> BTreeMap<String, i64> {
    let pairs: &[(&str, i64)] = match schedule {
        "broadcast_push" | "reduce_push" => &[("root", 0)],
        "sendrecv_pair" => &[("src", 0), ("dst", 1)],
        "allreduce_hier" | "allgather_hier" | "reduce_scatter_hier" => &[("L", 2)],
        _ => &[],
    };
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_library_list_matches_examples_dir() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("examples/ exists")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sched"))
            .map(|n| format!("examples/{n}"))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = STANDARD_LIBRARY
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        listed.sort();
        assert_eq!(
            on_disk, listed,
            "pipeline::STANDARD_LIBRARY must list every example"
        );
    }

    #[test]
    fn standard_library_loads_and_compiles() {
        let lib = match try_standard_library() {
            Ok(lib) => lib,
            Err(d) => panic!("{d:#?}"),
        };
        let names: Vec<String> = lib.schedules().into_iter().map(|s| s.name).collect();
        assert_eq!(names.len(), STANDARD_LIBRARY.len(), "{names:?}");
        for name in &names {
            let params = example_params(name);
            for p in [1u32, 4] {
                let params = if name == "sendrecv_pair" && p == 1 {
                    BTreeMap::from([("src".to_string(), 0), ("dst".to_string(), 0)])
                } else if name.ends_with("_hier") && p == 1 {
                    BTreeMap::from([("L".to_string(), 1)])
                } else {
                    params.clone()
                };
                let c = compile(&lib, name, p, &params, &CompileOptions::default()).unwrap_or_else(
                    |d| {
                        panic!(
                            "{name} P={p}: {}",
                            crate::diag::render_all(&d, lib.sources())
                        )
                    },
                );
                assert_eq!(c.plan.group_size, p);
                assert_eq!(c.plan.schedule, *name);
                c.plan
                    .check_consistency()
                    .expect("emitted plans are consistent");
            }
        }
    }

    #[test]
    fn source_hash_is_stable_and_content_based() {
        let lib = standard_library();
        let a = compile(
            &lib,
            "allgather_push",
            2,
            &BTreeMap::new(),
            &CompileOptions::default(),
        )
        .expect("compiles");
        let b = compile(
            &lib,
            "allgather_push",
            2,
            &BTreeMap::new(),
            &CompileOptions::default(),
        )
        .expect("compiles");
        assert_eq!(a.plan.source_hash, b.plan.source_hash);
        assert_eq!(a.plan.source_hash.len(), 64);
        let c = compile(
            &lib,
            "alltoall_push",
            2,
            &BTreeMap::new(),
            &CompileOptions::default(),
        )
        .expect("compiles");
        assert_ne!(a.plan.source_hash, c.plan.source_hash);
    }

    #[test]
    fn optimised_programs_reverify_and_do_not_grow() {
        let lib = standard_library();
        for name in ["allreduce_two_shot", "allreduce_ring", "allgather_matmul"] {
            let plain = compile(
                &lib,
                name,
                5,
                &BTreeMap::new(),
                &CompileOptions { optimize: false },
            )
            .expect("compiles without optimiser");
            let opt = compile(&lib, name, 5, &BTreeMap::new(), &CompileOptions::default())
                .expect("optimised program re-verifies");
            assert!(opt.program.step_count() <= plain.program.step_count());
        }
    }
}
