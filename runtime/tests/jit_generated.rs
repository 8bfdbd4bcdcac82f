//! Generated schedules through the JIT and the interpreter, byte for byte.
//!
//! The compiler's property tests generate programs for the formatter and the parser (which
//! need not verify) and mutate standard schedules into broken ones; none of them is a plan that
//! runs. So this test draws its own: an all-reduce body of one reducing block between local
//! ones, each block of a shape that is synchronised by construction (its own scratch and
//! signal), with its parameters drawn (peer order, where the own operand is folded from, a
//! root, the element class of the scratch). Every drawn program must verify and compile at the
//! drawn P, and both backends must agree on every byte for a drawn dtype, op and size.

mod jit_common;

use jit_common::{compare, type_matrix, Case};
use proptest::prelude::*;
use std::collections::BTreeMap;
use symsched_compiler::library::Library;
use symsched_compiler::pipeline::{compile, CompileOptions};
use symsched_runtime::exec::ReduceOp;

/// One block, numbered `k` (its scratch `land{k}` and signal `s{k}`).
#[derive(Debug, Clone)]
enum Block {
    /// Every rank pushes `x` into slot `rank` of every peer's scratch (peers visited upwards
    /// or downwards from `rank`), waits for the P - 1 puts, then folds the P operands in rank
    /// order, its own straight from `x` or (always with a wire) first moved into its own slot,
    /// so every rank computes the same value the same way.
    OneShot { down: bool, own_slot: bool },
    /// Every rank moves `x` into its own slot and back through a one-operand reduce (a
    /// conversion through the accumulator; through the wire type with a wire).
    Local,
    /// Rank `root % P` gathers everyone's `x`, folds, and pushes the result back.
    Rooted { root: u32 },
}

/// One reducing block (an all-reduce adds every contribution exactly once) with 0–2 local
/// blocks before and after it.
fn blocks() -> impl Strategy<Value = Vec<Block>> {
    let reducing = prop_oneof![
        (any::<bool>(), any::<bool>())
            .prop_map(|(down, own_slot)| Block::OneShot { down, own_slot }),
        (0u32..8).prop_map(|root| Block::Rooted { root }),
    ];
    (0usize..3, reducing, 0usize..3).prop_map(|(before, r, after)| {
        let mut v = vec![Block::Local; before];
        v.push(r);
        v.extend(std::iter::repeat_n(Block::Local, after));
        v
    })
}

fn text(blocks: &[Block], wire: bool) -> String {
    let class = if wire { "x as wire" } else { "x" };
    let mv = if wire { "cast" } else { "copy" };
    let mut decl = String::new();
    let mut body = String::new();
    for (k, b) in blocks.iter().enumerate() {
        decl.push_str(&format!(
            "    scratch land{k}: [P] of {class};\n    signal s{k};\n"
        ));
        match b {
            Block::OneShot { down, own_slot } => {
                let p = if *down {
                    "(rank + P - i) % P"
                } else {
                    "(rank + i) % P"
                };
                body.push_str(&format!(
                    "    for i in 1..P {{\n        let p = {p};\n        \
                     put x -> land{k}[rank] @ p, signal s{k} @ p += 1;\n    }}\n    \
                     wait s{k} >= P - 1;\n"
                ));
                if *own_slot || wire {
                    body.push_str(&format!(
                        "    land{k}[rank] = {mv}(x);\n    x = reduce(land{k}[0..P]);\n"
                    ));
                } else {
                    body.push_str(&format!(
                        "    x = reduce(land{k}[0..rank], x, land{k}[rank + 1..P]);\n"
                    ));
                }
            }
            Block::Local => {
                body.push_str(&format!(
                    "    land{k}[rank] = {mv}(x);\n    x = reduce(land{k}[rank]);\n"
                ));
            }
            Block::Rooted { root } => {
                body.push_str(&format!(
                    "    let r{k} = {root} % P;\n    \
                     if rank != r{k} {{\n        \
                     put x -> land{k}[rank] @ r{k}, signal s{k} @ r{k} += 1;\n        \
                     wait s{k} >= 1;\n    }} else {{\n        \
                     wait s{k} >= P - 1;\n        \
                     land{k}[rank] = {mv}(x);\n        \
                     x = reduce(land{k}[0..P]);\n        \
                     for i in 1..P {{\n            let p = (rank + i) % P;\n            \
                     put x -> x @ p, signal s{k} @ p += 1;\n        }}\n    }}\n"
                ));
            }
        }
    }
    format!("schedule generated implements allreduce(x: [1]) {{\n{decl}{body}}}\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn generated_schedules_run_alike_on_both_backends(
        blocks in blocks(),
        wire in any::<bool>(),
        p in 1u32..5,
        ti in 0usize..64,
        oi in 0usize..4,
        count in 0u64..3000,
    ) {
        let src = text(&blocks, wire);
        let mut lib = Library::new();
        lib.add_source("generated", &src)
            .map_err(|d| TestCaseError::fail(format!("{d:?}\n{src}")))?;
        let plan = compile(&lib, "generated", p, &BTreeMap::new(), &CompileOptions::default())
            .map_err(|d| TestCaseError::fail(format!("P = {p}: {d:?}\n{src}")))?
            .plan;
        let types = type_matrix();
        let case = Case {
            plan: &plan,
            types: types[ti % types.len()],
            op: ReduceOp::ALL[oi],
            count,
            staged: false,
            late: Vec::new(),
            nt_min_bytes: None,
        };
        if let Err(e) = compare(&case) {
            prop_assert!(false, "{}\n{}", e, src);
        }
    }
}
