//! Mutation property test: single edits of a standard schedule that break it must make
//! verification fail. Checked on every standard schedule for P ∈ {2, 3, 4} and every param
//! binding. Mutation classes:
//!
//! 1. **delete a synchronisation**: any single user wait, or any single signal (a `Signal` step
//!    or the signal of a put-with-signal). Every synchronisation in the standard library is
//!    necessary, and the verifier notices when one is missing.
//! 2. **write into a read-only input**: the destination of any step that writes (a put, get,
//!    copy, cast, reduce or matmul) redirected onto an input role of the collective, same
//!    chunks. Must be refused with E0405 among the findings (the caller's input is not the
//!    schedule's to overwrite).
//! 3. **one rank computes its replica differently**: on one rank, a local step that writes a
//!    replicated output (allreduce's and broadcast's `x`, allgather's `out`) reads its own
//!    destination instead of its sources — the one-token mutant of the wire all-reduce whose
//!    owner keeps its full-precision chunk (`x[rank] = reduce(gath[rank])` →
//!    `x[rank] = reduce(x[rank])`) is of this class.
//! 4. **a wait moved to another channel** (schedules with `channel` blocks): any single user
//!    wait put on another channel of its rank, where it no longer orders the steps after it in
//!    its own channel — a wait of one channel says nothing about another.
//!
//! Skipped, because the edit is a no-op by construction: waits on launch-credit slots; waits
//! that hold in every epoch before any update arrives — `>=` with offset 0 and stride 0
//! (nothing is ever sent to that slot of that rank, and the per-launch target is 0; they arise
//! when a `use` is instantiated over a group of one rank, e.g. `allreduce_hier` with L = 1);
//! and class-3 edits of a step that already reads only its destination.

use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::diag::render_all;
use symsched_compiler::ir::graph::is_credit_slot;
use symsched_compiler::ir::Program;
use symsched_compiler::library::Library;
use symsched_compiler::verify::verify_program;
use symsched_plan::{BufferRole, Cmp, CollectiveKind, Op, Region};

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

/// One mutated program: what was done, the program, and a code its refusal must include (any
/// refusal when `None`).
struct Mutant {
    what: String,
    prog: Program,
    code: Option<&'static str>,
}

/// Class 1: every single-deletion variant of `prog`.
fn deletions(prog: &Program) -> Vec<Mutant> {
    let mut out = Vec::new();
    for (at, s) in prog.steps() {
        let text = format!("{at} `{}`", prog.op_text(&s.op));
        let mut p = prog.clone();
        let what = match &s.op {
            Op::Wait { slot, .. } if is_credit_slot(prog, *slot) => continue,
            Op::Wait {
                cmp: Cmp::Ge,
                target,
                ..
            } if target.offset == 0 && target.stride == 0 => continue,
            Op::Wait { .. } => {
                p.ranks[at.rank as usize].remove(at.index as usize);
                format!("delete wait {text}")
            }
            Op::Signal { update } if !is_credit_slot(prog, update.slot) => {
                p.ranks[at.rank as usize].remove(at.index as usize);
                format!("delete signal {text}")
            }
            Op::Put {
                signal: Some(u), ..
            } if !is_credit_slot(prog, u.slot) => {
                if let Op::Put { signal, .. } = &mut p.ranks[at.rank as usize][at.index as usize].op
                {
                    *signal = None;
                }
                format!("drop the signal of {text}")
            }
            _ => continue,
        };
        p.assign_epoch_strides();
        out.push(Mutant {
            what,
            prog: p,
            code: None,
        });
    }
    out
}

/// Class 4: every user wait of a multi-channel program moved to each other channel in use.
fn moved_waits(prog: &Program) -> Vec<Mutant> {
    let channels = prog.channel_count();
    let mut out = Vec::new();
    for (at, s) in prog.steps() {
        let Op::Wait { slot, .. } = &s.op else {
            continue;
        };
        if is_credit_slot(prog, *slot) {
            continue;
        }
        for c in (0..channels).filter(|c| *c != s.channel) {
            let mut p = prog.clone();
            p.ranks[at.rank as usize][at.index as usize].channel = c;
            out.push(Mutant {
                what: format!(
                    "move wait {at} `{}` from channel {} to {c}",
                    prog.op_text(&s.op),
                    s.channel
                ),
                prog: p,
                code: None,
            });
        }
    }
    out
}

/// The region a step writes, mutable.
fn written(op: &mut Op) -> Option<&mut Region> {
    match op {
        Op::Put { dst, .. }
        | Op::Get { dst, .. }
        | Op::Copy { dst, .. }
        | Op::Cast { dst, .. }
        | Op::Reduce { dst, .. } => Some(dst),
        Op::Matmul { c, .. } => Some(c),
        _ => None,
    }
}

/// Class 2: every write redirected onto an input role (same chunk range, when it fits).
fn writes_into_inputs(prog: &Program) -> Vec<Mutant> {
    let inputs: Vec<u32> = (0..prog.buffers.len() as u32)
        .filter(|&b| prog.buffers[b as usize].role == BufferRole::Input)
        .collect();
    let mut out = Vec::new();
    for &input in &inputs {
        let chunks = prog.buffers[input as usize].chunks;
        for (at, s) in prog.steps() {
            let mut op = s.op.clone();
            let Some(dst) = written(&mut op) else {
                continue;
            };
            if dst.buffer == input || dst.count > chunks {
                continue;
            }
            dst.buffer = input;
            dst.first = dst.first.min(chunks - dst.count);
            let mut p = prog.clone();
            p.ranks[at.rank as usize][at.index as usize].op = op;
            out.push(Mutant {
                what: format!(
                    "write into input `{}`: {at} `{}`",
                    prog.buffers[input as usize].name,
                    prog.op_text(&s.op)
                ),
                prog: p,
                code: Some("E0405"),
            });
        }
    }
    out
}

/// The role every rank holds a copy of, for collectives with a replicated output.
fn replicated_role(kind: CollectiveKind) -> Option<u32> {
    match kind {
        CollectiveKind::Allreduce | CollectiveKind::Broadcast => Some(0),
        CollectiveKind::Allgather => Some(1),
        _ => None,
    }
}

/// Class 3: one local write of a replicated output reads its destination instead.
fn divergent_replicas(prog: &Program) -> Vec<Mutant> {
    let Some(role) = replicated_role(prog.collective) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (at, s) in prog.steps() {
        let op = match &s.op {
            Op::Reduce { dst, srcs } if dst.buffer == role && srcs.as_slice() != [*dst] => {
                Op::Reduce {
                    dst: *dst,
                    srcs: vec![*dst],
                }
            }
            Op::Copy { src, dst } if dst.buffer == role && src != dst => Op::Copy {
                src: *dst,
                dst: *dst,
            },
            Op::Cast { src, dst } if dst.buffer == role && src != dst => Op::Cast {
                src: *dst,
                dst: *dst,
            },
            _ => continue,
        };
        let mut p = prog.clone();
        p.ranks[at.rank as usize][at.index as usize].op = op;
        out.push(Mutant {
            what: format!(
                "read the destination instead: {at} `{}`",
                prog.op_text(&s.op)
            ),
            prog: p,
            code: None,
        });
    }
    out
}

#[test]
fn every_breaking_single_edit_is_caught() {
    let lib = examples_library();
    let mut survivors = Vec::new();
    let mut wrong_code = Vec::new();
    let mut tried: BTreeMap<&str, usize> = BTreeMap::new();
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
                let classes: [(&str, Vec<Mutant>); 4] = [
                    ("delete a sync", deletions(&prog)),
                    ("write into an input", writes_into_inputs(&prog)),
                    ("divergent replica", divergent_replicas(&prog)),
                    ("wait on another channel", moved_waits(&prog)),
                ];
                for (class, mutants) in classes {
                    for m in mutants {
                        *tried.entry(class).or_default() += 1;
                        let where_ = format!("{} P={p} {params:?}: {}", s.name, m.what);
                        match verify_program(&m.prog) {
                            Ok(_) => survivors.push(where_),
                            Err(d) => {
                                if let Some(code) = m.code {
                                    if !d.iter().any(|x| x.code == code) {
                                        let got: Vec<&str> = d.iter().map(|x| x.code).collect();
                                        wrong_code.push(format!("{where_}: {got:?}, no {code}"));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for class in [
        "delete a sync",
        "write into an input",
        "divergent replica",
        "wait on another channel",
    ] {
        assert!(
            tried.get(class).copied().unwrap_or(0) > 0,
            "no mutation of class `{class}` was tried: {tried:?}"
        );
    }
    assert!(
        survivors.is_empty(),
        "{} mutant(s) still verify ({tried:?} tried):\n{}",
        survivors.len(),
        survivors.join("\n")
    );
    assert!(wrong_code.is_empty(), "{}", wrong_code.join("\n"));
    eprintln!("mutants tried per class: {tried:?}");
}
