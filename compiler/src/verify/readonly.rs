//! Read-only inputs (E0405): a role the collective only reads (allgather's `in`, the matmul
//! collectives' `a` and `b`, …) is the caller's tensor, which it still owns and expects
//! unchanged after the call. No step may write it, locally or remotely; a schedule that needs
//! to overwrite an input declares the role `inout`, and the caller then gets no promise about
//! its contents after the call.

use super::{step_error, step_text, Findings};
use crate::diag::Diagnostic;
use crate::ir::graph::accesses;
use crate::ir::Program;
use symsched_plan::BufferRole;

pub(super) fn check(prog: &Program) -> Vec<Diagnostic> {
    let mut out = Findings::new("step(s) writing a read-only input");
    for (at, s) in prog.steps() {
        let Some(a) = accesses(&s.op, at.rank).into_iter().find(|a| {
            a.write
                && prog
                    .buffers
                    .get(a.buffer as usize)
                    .is_some_and(|b| b.role == BufferRole::Input)
        }) else {
            continue;
        };
        if out.full() {
            out.skip();
            continue;
        }
        let b = &prog.buffers[a.buffer as usize];
        let region = if a.count == 1 {
            format!("{}[{}]", b.name, a.first)
        } else {
            format!("{}[{}..{}]", b.name, a.first, a.first + a.count)
        };
        let whose = if a.rank == at.rank {
            "its own".to_string()
        } else {
            format!("rank {}'s", a.rank)
        };
        let span = prog
            .buffer_spans
            .get(a.buffer as usize)
            .copied()
            .unwrap_or(prog.header_span);
        out.push(
            step_error(
                prog,
                "E0405",
                at,
                format!(
                    "[contract] {} writes `{region}` of {whose} `{}`, a read-only input of {}: the caller's input would be corrupted",
                    step_text(prog, at),
                    b.name,
                    prog.collective_name()
                ),
                "writes a read-only input",
            )
            .with_label(span, "declared as an input here")
            .with_help(format!(
                "write into a scratch buffer instead, or declare the role `inout {}: [...]` if the collective may overwrite its input",
                b.name
            )),
        );
    }
    out.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;
    use symsched_plan::CollectiveKind;

    #[test]
    fn local_and_remote_writes_into_an_input_are_refused() {
        let mut b = Builder::collective(CollectiveKind::Allgather, 2, &[("in", 1), ("out", 2)]);
        let local = b.copy(0, reg(1, 0, 1), reg(0, 0, 1));
        let remote = b.put(1, reg(1, 1, 1), reg(0, 0, 1), 0);
        let prog = b.build();
        let d = check(&prog);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].code, "E0405");
        assert_eq!(d[0].span(), Some(prog.step(local).span));
        assert!(d[0].message.contains("its own `in`"), "{}", d[0].message);
        assert_eq!(d[1].span(), Some(prog.step(remote).span));
        assert!(d[1].message.contains("rank 0's `in`"), "{}", d[1].message);
    }

    #[test]
    fn an_inout_role_may_be_written() {
        let mut b = Builder::collective(CollectiveKind::Allgather, 2, &[("in", 1), ("out", 2)]);
        b.copy(0, reg(1, 0, 1), reg(0, 0, 1));
        let mut prog = b.build();
        prog.buffers[0].role = BufferRole::InOut;
        assert!(check(&prog).is_empty());
    }
}
