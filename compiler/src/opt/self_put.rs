//! Self-put → local copy: a put whose peer is the executing rank is a local copy (or a cast when
//! the element classes differ, since a put converts between classes). A fused signal stays as a
//! separate signal step right after it, so the data is still written before the signal.

use crate::ir::{Program, Step};
use symsched_plan::{Op, Rank};

/// Rewrite every self-put. Returns the number of puts rewritten.
pub fn self_put_to_copy(prog: &mut Program) -> usize {
    let mut rewritten = 0;
    let elem = |b: u32| prog.buffers.get(b as usize).map(|d| d.elem);
    let elems: Vec<_> = (0..prog.buffers.len() as u32).map(elem).collect();
    for (r, steps) in prog.ranks.iter_mut().enumerate() {
        let me = r as Rank;
        let mut out: Vec<Step> = Vec::with_capacity(steps.len());
        for step in steps.drain(..) {
            match step.op {
                Op::Put {
                    src,
                    dst,
                    peer,
                    signal,
                } if peer == me => {
                    let same_class =
                        elems.get(src.buffer as usize) == elems.get(dst.buffer as usize);
                    let op = if same_class {
                        Op::Copy { src, dst }
                    } else {
                        Op::Cast { src, dst }
                    };
                    out.push(Step { op, ..step.clone() });
                    if let Some(update) = signal {
                        out.push(Step {
                            op: Op::Signal { update },
                            ..step
                        });
                    }
                    rewritten += 1;
                }
                _ => out.push(step),
            }
        }
        *steps = out;
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::back::plan::tests::tiny_program;
    use symsched_plan::{BufferRole, ElemClass};

    #[test]
    fn self_put_becomes_copy_and_keeps_its_signal() {
        let mut prog = tiny_program();
        if let Op::Put { peer, signal, .. } = &mut prog.ranks[0][0].op {
            *peer = 0;
            *signal = Some(symsched_plan::SignalUpdate {
                slot: 0,
                peer: 0,
                mode: symsched_plan::SignalMode::Add,
                value: 1,
                stride: 0,
            });
        }
        assert_eq!(self_put_to_copy(&mut prog), 1);
        assert!(matches!(prog.ranks[0][0].op, Op::Copy { .. }));
        assert!(matches!(prog.ranks[0][1].op, Op::Signal { .. }));
        assert_eq!(prog.ranks[0].len(), 3);
    }

    #[test]
    fn self_put_across_element_classes_becomes_cast() {
        let mut prog = tiny_program();
        let mut wire = prog.buffers[0].clone();
        wire.name = "w".into();
        wire.role = BufferRole::Scratch;
        wire.elem = ElemClass::Wire;
        prog.buffers.push(wire);
        if let Op::Put { peer, dst, .. } = &mut prog.ranks[0][0].op {
            *peer = 0;
            dst.buffer = 1;
        }
        assert_eq!(self_put_to_copy(&mut prog), 1);
        assert!(matches!(prog.ranks[0][0].op, Op::Cast { .. }));
    }

    #[test]
    fn remote_put_is_untouched() {
        let mut prog = tiny_program();
        assert_eq!(self_put_to_copy(&mut prog), 0);
    }
}
