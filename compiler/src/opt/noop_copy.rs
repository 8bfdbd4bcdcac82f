//! No-op copy elimination: `r = copy(r)` (or a cast of a region onto itself, which cannot change
//! the element class) does nothing. Such steps appear when a schedule is inlined in place, e.g.
//! `use allgather_push(in = x[i], out = x)` turns the callee's `out[rank] = copy(in)` into
//! `x[i] = copy(x[i])`.

use crate::ir::Program;
use symsched_plan::Op;

/// Remove every copy or cast whose source and destination are the same region. Returns the
/// number removed.
pub fn remove_noop_copies(prog: &mut Program) -> usize {
    let mut removed = 0;
    for steps in &mut prog.ranks {
        steps.retain(|s| match s.op {
            Op::Copy { src, dst } | Op::Cast { src, dst } if src == dst => {
                removed += 1;
                false
            }
            _ => true,
        });
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::back::plan::tests::tiny_program;
    use symsched_plan::Region;

    #[test]
    fn only_copies_onto_themselves_are_removed() {
        let mut prog = tiny_program();
        let at = |first| Region {
            buffer: 0,
            first,
            count: 1,
        };
        let mut step = prog.ranks[1][0].clone();
        step.op = Op::Copy {
            src: at(0),
            dst: at(0),
        };
        prog.ranks[1].push(step.clone());
        step.op = Op::Copy {
            src: at(0),
            dst: at(1),
        };
        prog.ranks[1].push(step);
        assert_eq!(remove_noop_copies(&mut prog), 1);
        assert_eq!(prog.ranks[1].len(), 2);
        assert!(matches!(prog.ranks[1][1].op, Op::Copy { .. }));
    }
}
