//! Hand-built programs for unit tests of the graph and of each verifier rule.

use crate::diag::Span;
use crate::ir::{Program, Step, StepRef};
use std::collections::BTreeMap;
use symsched_plan::{
    BufferDecl, BufferRole, Cmp, CollectiveKind, ElemClass, Extent, HostCollOp, Op, Rank, Region,
    SignalMode, SignalSlot, SignalUpdate, SizeExpr, WaitTarget,
};

pub fn sr(rank: Rank, index: u32) -> StepRef {
    StepRef { rank, index }
}

pub fn reg(buffer: u32, first: u32, count: u32) -> Region {
    Region {
        buffer,
        first,
        count,
    }
}

/// Builds a program step by step; every step gets a distinct one-byte span (its creation
/// number), so tests can tell which step a diagnostic points at.
pub struct Builder {
    prog: Program,
    next_span: usize,
}

impl Builder {
    /// Scratch buffers split over `n` with the given chunk counts, and signal slots.
    pub fn new(p: u32, buffers: &[(&str, u32)], signals: &[(&str, SignalMode)]) -> Builder {
        let prog = Program {
            schedule: "t".into(),
            collective: CollectiveKind::Allreduce,
            group_size: p,
            params: BTreeMap::new(),
            hierarchy: None,
            size_vars: Vec::new(),
            buffers: buffers
                .iter()
                .map(|(name, k)| BufferDecl {
                    name: name.to_string(),
                    role: BufferRole::Scratch,
                    chunks: *k,
                    extent: Extent::Split {
                        total: SizeExpr::var("n"),
                    },
                    elem: ElemClass::Data,
                })
                .collect(),
            buffer_spans: vec![Span::default(); buffers.len()],
            signals: signals
                .iter()
                .map(|(name, mode)| SignalSlot {
                    name: name.to_string(),
                    mode: *mode,
                })
                .collect(),
            signal_spans: vec![Span::default(); signals.len()],
            ranks: vec![Vec::new(); p as usize],
            entry_signals: vec![Vec::new(); p as usize],
            exit_signals: vec![Vec::new(); p as usize],
            duals: Vec::new(),
            header_span: Span::new(0, 10_000, 10_001),
            declared: None,
        };
        Builder { prog, next_span: 0 }
    }

    /// A program for `kind` whose first buffers are the collective's roles.
    pub fn collective(kind: CollectiveKind, p: u32, buffers: &[(&str, u32)]) -> Builder {
        let mut b = Builder::new(p, buffers, &[]);
        b.prog.collective = kind;
        let (roles, extents) = role_table(kind, p as u64);
        for (i, (role, ext)) in roles.iter().zip(extents).enumerate() {
            b.prog.buffers[i].role = *role;
            b.prog.buffers[i].extent = ext;
        }
        b
    }

    pub fn signals(&mut self, signals: &[(&str, SignalMode)]) -> &mut Self {
        for (name, mode) in signals {
            self.prog.signals.push(SignalSlot {
                name: name.to_string(),
                mode: *mode,
            });
            self.prog.signal_spans.push(Span::default());
        }
        self
    }

    pub fn extent(&mut self, buffer: u32, e: Extent) -> &mut Self {
        self.prog.buffers[buffer as usize].extent = e;
        self
    }

    pub fn elem(&mut self, buffer: u32, class: symsched_plan::ElemClass) -> &mut Self {
        self.prog.buffers[buffer as usize].elem = class;
        self
    }

    pub fn param(&mut self, name: &str, value: i64) -> &mut Self {
        self.prog.params.insert(name.to_string(), value);
        self
    }

    pub fn hierarchy(&mut self, l: u32) -> &mut Self {
        self.prog.hierarchy = Some(symsched_plan::Hierarchy { ranks_per_node: l });
        self
    }

    /// Append a step to `rank`; returns its reference.
    pub fn op(&mut self, rank: Rank, op: Op) -> StepRef {
        let span = Span::new(0, self.next_span, self.next_span + 1);
        self.next_span += 1;
        let steps = &mut self.prog.ranks[rank as usize];
        steps.push(Step {
            op,
            span,
            inlined_from: Vec::new(),
            channel: 0,
        });
        sr(rank, steps.len() as u32 - 1)
    }

    pub fn put(&mut self, rank: Rank, src: Region, dst: Region, peer: Rank) -> StepRef {
        self.op(
            rank,
            Op::Put {
                src,
                dst,
                peer,
                signal: None,
            },
        )
    }

    pub fn put_sig(
        &mut self,
        rank: Rank,
        src: Region,
        dst: Region,
        peer: Rank,
        slot: u32,
        value: u64,
    ) -> StepRef {
        self.op(
            rank,
            Op::Put {
                src,
                dst,
                peer,
                signal: Some(SignalUpdate {
                    slot,
                    peer,
                    mode: SignalMode::Add,
                    value,
                    stride: 0,
                }),
            },
        )
    }

    pub fn get(&mut self, rank: Rank, src: Region, dst: Region, peer: Rank) -> StepRef {
        self.op(rank, Op::Get { src, dst, peer })
    }

    pub fn signal(
        &mut self,
        rank: Rank,
        slot: u32,
        peer: Rank,
        mode: SignalMode,
        value: u64,
    ) -> StepRef {
        self.op(
            rank,
            Op::Signal {
                update: SignalUpdate {
                    slot,
                    peer,
                    mode,
                    value,
                    stride: 0,
                },
            },
        )
    }

    pub fn wait(&mut self, rank: Rank, slot: u32, cmp: Cmp, k: u64) -> StepRef {
        self.op(
            rank,
            Op::Wait {
                slot,
                cmp,
                target: WaitTarget {
                    stride: 0,
                    offset: k,
                },
            },
        )
    }

    pub fn reduce(&mut self, rank: Rank, dst: Region, srcs: &[Region]) -> StepRef {
        self.op(
            rank,
            Op::Reduce {
                dst,
                srcs: srcs.to_vec(),
            },
        )
    }

    pub fn copy(&mut self, rank: Rank, src: Region, dst: Region) -> StepRef {
        self.op(rank, Op::Copy { src, dst })
    }

    pub fn matmul(&mut self, rank: Rank, c: Region, a: Region, b: Region) -> StepRef {
        self.op(rank, Op::Matmul { c, a, b })
    }

    pub fn hostcoll(&mut self, rank: Rank, region: Region, members: &[Rank]) -> StepRef {
        self.hostcoll_op(rank, HostCollOp::Allreduce, region, members)
    }

    pub fn hostcoll_op(
        &mut self,
        rank: Rank,
        op: HostCollOp,
        region: Region,
        members: &[Rank],
    ) -> StepRef {
        self.op(
            rank,
            Op::HostColl {
                op,
                region,
                members: members.to_vec(),
            },
        )
    }

    /// Move a step to another channel of its rank.
    pub fn channel(&mut self, at: StepRef, channel: u32) -> &mut Self {
        self.prog.ranks[at.rank as usize][at.index as usize].channel = channel;
        self
    }

    pub fn build(&self) -> Program {
        self.prog.clone()
    }
}

/// Role access and extent per collective (the spec's table), for tests only.
fn role_table(kind: CollectiveKind, p: u64) -> (Vec<BufferRole>, Vec<Extent>) {
    use BufferRole::*;
    let n = || SizeExpr::var("n");
    let split = |t: SizeExpr| Extent::Split { total: t };
    let mul =
        |a: &str, b: &str| SizeExpr::Mul(Box::new(SizeExpr::var(a)), Box::new(SizeExpr::var(b)));
    match kind {
        CollectiveKind::Allgather => (vec![Input, Output], vec![split(n()), split(n().scaled(p))]),
        CollectiveKind::ReduceScatter => {
            (vec![Input, Output], vec![split(n().scaled(p)), split(n())])
        }
        CollectiveKind::Alltoall => (
            vec![Input, Output],
            vec![split(n().scaled(p)), split(n().scaled(p))],
        ),
        CollectiveKind::Alltoallv => (
            vec![Input, Output],
            vec![
                Extent::Counts {
                    matrix: symsched_plan::CountsMatrix::Send,
                },
                Extent::Counts {
                    matrix: symsched_plan::CountsMatrix::Recv,
                },
            ],
        ),
        CollectiveKind::Allreduce
        | CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::Sendrecv => (vec![InOut], vec![split(n())]),
        CollectiveKind::AllgatherMatmul => (
            vec![Input, Input, Output, Output],
            vec![
                split(mul("m", "k")),
                split(mul("k", "n")),
                split(mul("m", "k").scaled(p)),
                split(mul("m", "n").scaled(p)),
            ],
        ),
        CollectiveKind::MatmulReduceScatter => (
            vec![Input, Input, Output],
            vec![
                split(mul("m", "k").scaled(p)),
                split(mul("k", "n")),
                split(mul("m", "n")),
            ],
        ),
        // Hand-built programs of declared collectives set their roles themselves.
        CollectiveKind::Declared { .. } => (Vec::new(), Vec::new()),
    }
}
