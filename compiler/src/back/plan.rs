//! The plan back end: a projection of the IR onto [`symsched_plan::Plan`].
//!
//! The IR already speaks the plan's [`Op`](symsched_plan::Op) vocabulary with epoch strides
//! filled in, so this stage only assigns plan-wide step ids, turns spans into byte ranges and
//! drops compiler-only information (inlining chains, spans of declarations).

use crate::ir::Program;
use symsched_plan::{FoldTable, Plan, RankProgram, Step, PLAN_SCHEMA_VERSION};

/// Project `prog` onto a plan. `source_hash` identifies the source text the program came from
/// (see [`crate::pipeline::source_hash`]); it is copied verbatim, and so is `folds`, the fold
/// table the verifier proved for it ([`crate::verify::Report::folds`]).
///
/// Step ids are unique within the plan: rank-major, in program order, starting at 0, so a step's
/// id is stable for a given program and can be quoted in runtime diagnostics.
pub fn emit_plan(prog: &Program, source_hash: &str, folds: FoldTable) -> Plan {
    let mut next_id = 0u32;
    let ranks = prog
        .ranks
        .iter()
        .enumerate()
        .map(|(r, steps)| {
            let steps = steps
                .iter()
                .map(|s| {
                    let id = next_id;
                    next_id += 1;
                    Step {
                        id,
                        span: (s.span.start, s.span.end),
                        op: s.op.clone(),
                        channel: s.channel,
                    }
                })
                .collect();
            RankProgram {
                rank: r as u32,
                steps,
                entry_signals: prog.entry_signals.get(r).cloned().unwrap_or_default(),
                exit_signals: prog.exit_signals.get(r).cloned().unwrap_or_default(),
            }
        })
        .collect();
    Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        schedule: prog.schedule.clone(),
        collective: prog.collective,
        group_size: prog.group_size,
        params: prog.params.clone(),
        hierarchy: prog.hierarchy,
        size_vars: prog.size_vars.clone(),
        buffers: prog.buffers.clone(),
        signals: prog.signals.clone(),
        ranks,
        duals: prog.duals.iter().map(|(d, _)| d.clone()).collect(),
        source_hash: source_hash.to_string(),
        folds,
        declared: prog.declared.as_deref().cloned(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::diag::Span;
    use crate::ir::Step as IrStep;
    use std::collections::BTreeMap;
    use symsched_plan::{
        BufferDecl, BufferRole, CollectiveKind, DualDecl, ElemClass, Extent, Op, Region,
        SignalMode, SignalSlot, SignalUpdate, SizeExpr, SizeVar, WaitTarget,
    };

    /// A hand-built two-rank program: rank 0 puts chunk 0 to rank 1 and signals it, rank 1
    /// waits. Shared by the back-end and optimiser unit tests so they do not depend on the
    /// front end.
    pub(crate) fn tiny_program() -> Program {
        let span = |a: usize, b: usize| Span::new(0, a, b);
        let x = Region {
            buffer: 0,
            first: 0,
            count: 1,
        };
        Program {
            schedule: "tiny".into(),
            collective: CollectiveKind::Broadcast,
            group_size: 2,
            params: BTreeMap::from([("root".to_string(), 0)]),
            hierarchy: None,
            size_vars: vec![SizeVar {
                name: "n".into(),
                meaning: "elements per rank".into(),
            }],
            buffers: vec![BufferDecl {
                name: "x".into(),
                role: BufferRole::InOut,
                chunks: 1,
                extent: Extent::Split {
                    total: SizeExpr::var("n"),
                },
                elem: ElemClass::Data,
            }],
            buffer_spans: vec![span(0, 1)],
            signals: vec![SignalSlot {
                name: "ready".into(),
                mode: SignalMode::Add,
            }],
            signal_spans: vec![span(2, 3)],
            ranks: vec![
                vec![
                    IrStep {
                        op: Op::Put {
                            src: x,
                            dst: x,
                            peer: 1,
                            signal: None,
                        },
                        span: span(10, 20),
                        inlined_from: vec![],
                        channel: 0,
                    },
                    IrStep {
                        op: Op::Signal {
                            update: SignalUpdate {
                                slot: 0,
                                peer: 1,
                                mode: SignalMode::Add,
                                value: 1,
                                stride: 0,
                            },
                        },
                        span: span(21, 30),
                        inlined_from: vec![],
                        channel: 0,
                    },
                ],
                vec![IrStep {
                    op: Op::Wait {
                        slot: 0,
                        cmp: symsched_plan::Cmp::Ge,
                        target: WaitTarget {
                            stride: 1,
                            offset: 1,
                        },
                    },
                    span: span(31, 40),
                    inlined_from: vec![],
                    channel: 0,
                }],
            ],
            entry_signals: vec![vec![], vec![]],
            exit_signals: vec![vec![], vec![]],
            duals: vec![(
                DualDecl::Schedule {
                    name: "tiny_dual".into(),
                    params: BTreeMap::new(),
                },
                span(4, 9),
            )],
            header_span: span(0, 9),
            declared: None,
        }
    }

    #[test]
    fn step_ids_are_unique_and_rank_major() {
        let plan = emit_plan(&tiny_program(), "abc", FoldTable::default());
        let ids: Vec<u32> = plan
            .ranks
            .iter()
            .flat_map(|r| r.steps.iter().map(|s| s.id))
            .collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert_eq!(plan.ranks[1].steps[0].span, (31, 40));
        assert_eq!(plan.source_hash, "abc");
        assert_eq!(plan.duals.len(), 1);
    }

    #[test]
    fn emitted_plan_round_trips_through_json() {
        let plan = emit_plan(&tiny_program(), "abc", FoldTable::default());
        let back = Plan::from_json(&plan.to_json()).expect("plan must re-read");
        assert_eq!(back, plan);
    }
}
