//! Framework collectives and shmem (E045x): the RFC forbids mixing the framework's collective
//! library (hostcoll) and symmetric-memory steps on the same data in the same communication
//! stage. A *stage* is the set of steps unordered with a given hostcoll step (neither happens
//! before the other); E0451 refuses a hostcoll whose region overlaps a region a shmem step
//! (put/get source or destination, reduce operand or result) touches in the same stage.

use super::race::{is_shmem, locations};
use super::{span_of, step_error, step_text, Findings};
use crate::diag::Diagnostic;
use crate::ir::graph::HappensBefore;
use crate::ir::{Program, StepRef};
use std::collections::HashSet;
use symsched_plan::Op;

pub(super) fn check(prog: &Program, hb: &HappensBefore) -> Vec<Diagnostic> {
    let mut out = Findings::new("location(s) mixing a host collective and shmem");
    let mut reported: HashSet<(StepRef, StepRef)> = HashSet::new();
    for ((r, buf, c), acc) in locations(prog) {
        let mut counted = false;
        for &(eh, _) in acc
            .iter()
            .filter(|(e, _)| matches!(prog.step(e.step()).op, Op::HostColl { .. }))
        {
            for &(es, _) in acc
                .iter()
                .filter(|(e, _)| is_shmem(&prog.step(e.step()).op))
            {
                let (h, s) = (eh.step(), es.step());
                // A put's remote write is its arrival, which a hostcoll does not complete.
                if hb.events_ordered(eh, es) {
                    continue;
                }
                if out.full() {
                    if !counted {
                        out.skip();
                        counted = true;
                    }
                    continue;
                }
                if !reported.insert((h, s)) {
                    continue;
                }
                out.push(
                    step_error(
                        prog,
                        "E0451",
                        h,
                        format!(
                            "[interop] host collective and shmem step touch `{}[{c}]` on rank {r} in the same stage: {} and {}",
                            prog.buffers[buf as usize].name,
                            step_text(prog, h),
                            step_text(prog, s)
                        ),
                        "framework collective here",
                    )
                    .with_label(span_of(prog, s), "shmem access not ordered with it")
                    .with_help("finish the shmem stage (signal/wait) before the hostcoll, or start it after"),
                );
            }
        }
    }
    out.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::graph;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, SignalMode};

    fn run(p: &Program) -> Vec<Diagnostic> {
        let g = graph::build(p);
        check(p, g.happens_before().expect("acyclic"))
    }

    #[test]
    fn put_into_a_region_under_hostcoll() {
        let mut b = Builder::new(4, &[("x", 2)], &[]);
        for r in [0, 2] {
            b.hostcoll(r, reg(0, 0, 2), &[0, 2]);
        }
        let put = b.put(1, reg(0, 1, 1), reg(0, 1, 1), 0);
        let prog = b.build();
        let d = run(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0451");
        assert_eq!(d[0].labels[1].0, prog.step(put).span);
    }

    #[test]
    fn ordered_stages_are_fine() {
        let mut b = Builder::new(2, &[("x", 2), ("y", 2)], &[("s", SignalMode::Add)]);
        b.put_sig(1, reg(1, 1, 1), reg(0, 1, 1), 0, 0, 1);
        b.wait(0, 0, Cmp::Ge, 1);
        b.hostcoll(0, reg(0, 0, 2), &[0]);
        assert!(run(&b.build()).is_empty());
    }

    #[test]
    fn local_reduce_in_the_same_stage() {
        let mut b = Builder::new(2, &[("x", 2), ("y", 2)], &[]);
        b.hostcoll(0, reg(0, 0, 2), &[0, 1]);
        b.hostcoll(1, reg(0, 0, 2), &[0, 1]);
        b.reduce(1, reg(1, 0, 1), &[reg(1, 0, 1)]);
        // Rank 1's reduce is after its own hostcoll: ordered, and y is not under hostcoll.
        assert!(run(&b.build()).is_empty());
        let mut b = Builder::new(2, &[("x", 2)], &[]);
        b.hostcoll(0, reg(0, 0, 1), &[0]);
        b.get(1, reg(0, 0, 1), reg(0, 1, 1), 0);
        assert_eq!(run(&b.build())[0].code, "E0451");
    }
}
