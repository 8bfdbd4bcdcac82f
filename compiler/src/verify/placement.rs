//! Node placement (E046x): in a hierarchical schedule (`over nodes(L)`), shmem traffic stays
//! inside the executing rank's node block `[b·L, (b+1)·L)`; only hostcoll members may span
//! blocks.

use super::{step_error, step_text};
use crate::diag::Diagnostic;
use crate::ir::Program;
use symsched_plan::Op;

pub(super) fn check(prog: &Program) -> Vec<Diagnostic> {
    let Some(h) = prog.hierarchy else {
        return Vec::new();
    };
    let l = h.ranks_per_node.max(1);
    let mut out = Vec::new();
    for (at, s) in prog.steps() {
        let peer = match &s.op {
            Op::Put { peer, .. } | Op::Get { peer, .. } => *peer,
            Op::Signal { update } => update.peer,
            _ => continue,
        };
        let block = at.rank / l;
        if peer / l != block {
            out.push(
                step_error(
                    prog,
                    "E0461",
                    at,
                    format!(
                        "[placement] {}: peer {peer} is on node block {} but rank {} is on block {block} (ranks {}..{})",
                        step_text(prog, at),
                        peer / l,
                        at.rank,
                        block * l,
                        (block + 1) * l
                    ),
                    "shmem traffic leaves the node",
                )
                .with_help("cross-node traffic must go through `hostcoll`"),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;
    use symsched_plan::SignalMode;

    #[test]
    fn peers_must_stay_in_the_node_block() {
        let mut b = Builder::new(4, &[("x", 1)], &[("s", SignalMode::Add)]);
        b.hierarchy(2);
        b.put(0, reg(0, 0, 1), reg(0, 0, 1), 1);
        b.hostcoll(1, reg(0, 0, 1), &[1, 3]);
        let bad = b.signal(2, 0, 1, SignalMode::Add, 1);
        let prog = b.build();
        let d = check(&prog);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].code, "E0461");
        assert_eq!(d[0].span(), Some(prog.step(bad).span));
    }

    #[test]
    fn flat_schedules_are_not_checked() {
        let mut b = Builder::new(4, &[("x", 1)], &[]);
        b.put(0, reg(0, 0, 1), reg(0, 0, 1), 3);
        assert!(check(&b.build()).is_empty());
    }
}
