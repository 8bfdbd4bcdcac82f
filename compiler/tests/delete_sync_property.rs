//! Deleting any single user wait, or any single signal (a `Signal` step or the signal of a
//! put-with-signal), from any standard schedule must make verification fail: every
//! synchronisation in the standard library is necessary, and the verifier notices when one is
//! missing. Checked for P ∈ {2, 3, 4} and every param binding.
//!
//! Skipped, because deleting them is a no-op by construction: waits on launch-credit slots, and
//! waits that hold in every epoch before any update arrives — `>=` with offset 0 and stride 0
//! (nothing is ever sent to that slot of that rank, and the per-launch target is 0). They arise
//! when a `use` is instantiated over a group of one rank (e.g. `allreduce_hier` with L = 1,
//! whose node-local reduce-scatter and all-gather wait for `P_node - 1 = 0` updates).

use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::diag::render_all;
use symsched_compiler::ir::graph::is_credit_slot;
use symsched_compiler::ir::Program;
use symsched_compiler::library::Library;
use symsched_compiler::verify::verify_program;
use symsched_plan::{Cmp, Op};

fn examples_library() -> Library {
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

/// Every single-deletion variant of `prog`, with a description.
fn deletions(prog: &Program) -> Vec<(String, Program)> {
    let mut out = Vec::new();
    for (at, s) in prog.steps() {
        let text = format!("{at} `{}`", prog.op_text(&s.op));
        match &s.op {
            Op::Wait { slot, .. } if is_credit_slot(prog, *slot) => {}
            Op::Wait {
                cmp: Cmp::Ge,
                target,
                ..
            } if target.offset == 0 && target.stride == 0 => {}
            Op::Wait { .. } => {
                let mut p = prog.clone();
                p.ranks[at.rank as usize].remove(at.index as usize);
                out.push((format!("delete wait {text}"), p));
            }
            Op::Signal { update } if !is_credit_slot(prog, update.slot) => {
                let mut p = prog.clone();
                p.ranks[at.rank as usize].remove(at.index as usize);
                out.push((format!("delete signal {text}"), p));
            }
            Op::Put {
                signal: Some(u), ..
            } if !is_credit_slot(prog, u.slot) => {
                let mut p = prog.clone();
                if let Op::Put { signal, .. } = &mut p.ranks[at.rank as usize][at.index as usize].op
                {
                    *signal = None;
                }
                out.push((format!("drop the signal of {text}"), p));
            }
            _ => {}
        }
    }
    for p in out.iter_mut() {
        p.1.assign_epoch_strides();
    }
    out
}

#[test]
fn deleting_any_wait_or_signal_is_caught() {
    let lib = examples_library();
    let mut survivors = Vec::new();
    let mut variants = 0usize;
    for s in lib.schedules() {
        for p in [2u32, 3, 4] {
            let space = lib
                .param_space(&s.name, p, &BTreeMap::new())
                .unwrap_or_else(|d| panic!("{}", render_all(&d, lib.sources())));
            for params in space {
                let prog = lib
                    .instantiate(&s.name, p, &params)
                    .unwrap_or_else(|d| panic!("{}", render_all(&d, lib.sources())));
                assert!(
                    verify_program(&prog).is_ok(),
                    "{} P={p} must verify as is",
                    s.name
                );
                for (what, edited) in deletions(&prog) {
                    variants += 1;
                    if verify_program(&edited).is_ok() {
                        survivors.push(format!("{} P={p} {params:?}: {what}", s.name));
                    }
                }
            }
        }
    }
    assert!(variants > 0, "no deletion was tried");
    assert!(
        survivors.is_empty(),
        "{} of {variants} deletion(s) still verify:\n{}",
        survivors.len(),
        survivors.join("\n")
    );
}
