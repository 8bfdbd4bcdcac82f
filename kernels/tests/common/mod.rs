//! Test support: hand-built plans of the standard collectives (until the compiler pipeline
//! emits them), a sequential reference interpreter of plans (64-bit signals), and helpers to
//! run generated kernels on the in-process simulation.
#![allow(dead_code)]
// Rank- and buffer-indexed loops mirror the plan model (rank r, buffer b) more clearly.
#![allow(clippy::needless_range_loop)]

use half::{bf16, f16};
use std::collections::BTreeMap;
pub use symsched_kernels::sim::device::OverflowMode;
use symsched_kernels::sim::heap::HeapLayout;
use symsched_kernels::sim::inproc::{self, RankState, RunConfig};
use symsched_kernels::sim_build::{self, SimKernel, SimSources};
use symsched_kernels::{lower, DType, KernelError, KernelOp, LowerOptions, ReduceOp};
use symsched_plan::*;
use symsched_runtime::exec::dtype as rt_dtype;

pub fn reg(buffer: u32, first: u32, count: u32) -> Region {
    Region {
        buffer,
        first,
        count,
    }
}

fn n() -> SizeExpr {
    SizeExpr::var("n")
}

fn buf(name: &str, role: BufferRole, chunks: u32, extent: Extent, elem: ElemClass) -> BufferDecl {
    BufferDecl {
        name: name.into(),
        role,
        chunks,
        extent,
        elem,
    }
}

fn split(total: SizeExpr) -> Extent {
    Extent::Split { total }
}

pub fn add(slot: u32, peer: u32, value: u64) -> SignalUpdate {
    SignalUpdate {
        slot,
        peer,
        mode: SignalMode::Add,
        value,
        stride: 0,
    }
}

pub fn wait_ge(slot: u32, per_launch: u64) -> Op {
    Op::Wait {
        slot,
        cmp: Cmp::Ge,
        target: WaitTarget {
            stride: per_launch,
            offset: per_launch,
        },
    }
}

struct B {
    name: String,
    coll: CollectiveKind,
    p: u32,
    params: BTreeMap<String, i64>,
    buffers: Vec<BufferDecl>,
    signals: Vec<SignalSlot>,
    ranks: Vec<Vec<Op>>,
}

impl B {
    fn new(name: &str, coll: CollectiveKind, p: u32) -> B {
        B {
            name: name.into(),
            coll,
            p,
            params: BTreeMap::new(),
            buffers: vec![],
            signals: vec![],
            ranks: vec![vec![]; p as usize],
        }
    }
    fn buf(&mut self, b: BufferDecl) -> u32 {
        self.buffers.push(b);
        self.buffers.len() as u32 - 1
    }
    fn sig(&mut self, name: &str, mode: SignalMode) -> u32 {
        self.signals.push(SignalSlot {
            name: name.into(),
            mode,
        });
        self.signals.len() as u32 - 1
    }
    /// Insert launch credits (as compiler/src/ir/credits.rs does, except that every pair whose
    /// puts write a role buffer gets an entry credit, dataflow order or not) and build the plan.
    fn finish(mut self) -> Plan {
        let p = self.p as usize;
        let base = self.signals.len() as u32;
        let mut accessors: Vec<Vec<u32>> = vec![vec![]; p];
        // entry[r][q]: r puts into one of q's role buffers.
        let mut entry = vec![vec![false; p]; p];
        for (r, ops) in self.ranks.iter().enumerate() {
            for op in ops {
                if let Op::Put { dst, peer, .. } = op {
                    if *peer as usize != r
                        && self.buffers[dst.buffer as usize].role != BufferRole::Scratch
                    {
                        entry[r][*peer as usize] = true;
                    }
                }
            }
        }
        let mut progs = vec![];
        for (r, ops) in self.ranks.iter().enumerate() {
            let mut seen = vec![false; p];
            let mut steps = vec![];
            for op in ops {
                let peer = match op {
                    Op::Put { peer, .. } | Op::Get { peer, .. } => Some(*peer),
                    Op::Signal { update } => Some(update.peer),
                    _ => None,
                };
                if let Some(q) = peer.filter(|q| *q as usize != r) {
                    if !seen[q as usize] {
                        seen[q as usize] = true;
                        accessors[q as usize].push(r as u32);
                        steps.push(Op::Wait {
                            slot: base + q,
                            cmp: Cmp::Ge,
                            target: WaitTarget {
                                stride: 1,
                                offset: entry[r][q as usize] as u64,
                            },
                        });
                    }
                }
                steps.push(op.clone());
            }
            progs.push(steps);
        }
        let used = accessors.iter().any(|a| !a.is_empty());
        if used {
            for q in 0..p {
                self.signals.push(SignalSlot {
                    name: format!("__credit[{q}]"),
                    mode: SignalMode::Add,
                });
            }
        }
        let ranks = progs
            .into_iter()
            .enumerate()
            .map(|(r, steps)| RankProgram {
                rank: r as u32,
                steps: steps
                    .into_iter()
                    .enumerate()
                    .map(|(i, op)| Step {
                        id: i as u32,
                        span: (0, 0),
                        op,
                        channel: 0,
                    })
                    .collect(),
                entry_signals: accessors[r]
                    .iter()
                    .filter(|&&a| entry[a as usize][r])
                    .map(|&a| add(base + r as u32, a, 1))
                    .collect(),
                exit_signals: accessors[r]
                    .iter()
                    .filter(|&&a| !entry[a as usize][r])
                    .map(|&a| add(base + r as u32, a, 1))
                    .collect(),
            })
            .collect();
        let plan = Plan {
            schema_version: PLAN_SCHEMA_VERSION,
            schedule: self.name,
            collective: self.coll,
            group_size: self.p,
            params: self.params,
            hierarchy: None,
            size_vars: vec![SizeVar {
                name: "n".into(),
                meaning: "elements per rank".into(),
            }],
            buffers: self.buffers,
            signals: self.signals,
            ranks,
            duals: vec![],
            source_hash: "hand-built".into(),
            folds: Default::default(),
            declared: None,
        };
        plan.check_consistency()
            .expect("hand-built plan is consistent");
        plan
    }
}

fn land_class(wire: bool) -> ElemClass {
    if wire {
        ElemClass::Wire
    } else {
        ElemClass::Data
    }
}

fn own_copy(src: Region, dst: Region, wire: bool) -> Op {
    if wire {
        Op::Cast { src, dst }
    } else {
        Op::Copy { src, dst }
    }
}

pub fn allgather_direct(p: u32) -> Plan {
    let mut b = B::new("allgather_direct", CollectiveKind::Allgather, p);
    let inp = b.buf(buf("in", BufferRole::Input, 1, split(n()), ElemClass::Data));
    let out = b.buf(buf(
        "out",
        BufferRole::Output,
        p,
        split(n().scaled(p as u64)),
        ElemClass::Data,
    ));
    let ready = b.sig("ready", SignalMode::Add);
    for r in 0..p {
        let ops = &mut b.ranks[r as usize];
        ops.push(Op::Copy {
            src: reg(inp, 0, 1),
            dst: reg(out, r, 1),
        });
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Put {
                src: reg(inp, 0, 1),
                dst: reg(out, r, 1),
                peer: q,
                signal: Some(add(ready, q, 1)),
            });
        }
        if p > 1 {
            ops.push(wait_ge(ready, p as u64 - 1));
        }
    }
    b.finish()
}

pub fn allgather_pull(p: u32) -> Plan {
    let mut b = B::new("allgather_pull", CollectiveKind::Allgather, p);
    let inp = b.buf(buf("in", BufferRole::Input, 1, split(n()), ElemClass::Data));
    let out = b.buf(buf(
        "out",
        BufferRole::Output,
        p,
        split(n().scaled(p as u64)),
        ElemClass::Data,
    ));
    for r in 0..p {
        let ops = &mut b.ranks[r as usize];
        ops.push(Op::Copy {
            src: reg(inp, 0, 1),
            dst: reg(out, r, 1),
        });
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Get {
                src: reg(inp, 0, 1),
                dst: reg(out, q, 1),
                peer: q,
            });
        }
    }
    b.finish()
}

pub fn reduce_scatter_direct(p: u32, wire: bool) -> Plan {
    let mut b = B::new(
        if wire {
            "reduce_scatter_direct_wire"
        } else {
            "reduce_scatter_direct"
        },
        CollectiveKind::ReduceScatter,
        p,
    );
    let total = n().scaled(p as u64);
    let inp = b.buf(buf(
        "in",
        BufferRole::Input,
        p,
        split(total.clone()),
        ElemClass::Data,
    ));
    let out = b.buf(buf(
        "out",
        BufferRole::Output,
        1,
        split(n()),
        ElemClass::Data,
    ));
    let land = b.buf(buf(
        "land",
        BufferRole::Scratch,
        p,
        split(total),
        land_class(wire),
    ));
    let ready = b.sig("ready", SignalMode::Add);
    for r in 0..p {
        let ops = &mut b.ranks[r as usize];
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Put {
                src: reg(inp, q, 1),
                dst: reg(land, r, 1),
                peer: q,
                signal: Some(add(ready, q, 1)),
            });
        }
        ops.push(own_copy(reg(inp, r, 1), reg(land, r, 1), wire));
        if p > 1 {
            ops.push(wait_ge(ready, p as u64 - 1));
        }
        ops.push(Op::Reduce {
            dst: reg(out, 0, 1),
            srcs: (0..p).map(|j| reg(land, j, 1)).collect(),
        });
    }
    b.finish()
}

pub fn reduce_scatter_pull(p: u32, wire: bool) -> Plan {
    let mut b = B::new(
        if wire {
            "reduce_scatter_pull_wire"
        } else {
            "reduce_scatter_pull"
        },
        CollectiveKind::ReduceScatter,
        p,
    );
    let total = n().scaled(p as u64);
    let inp = b.buf(buf(
        "in",
        BufferRole::Input,
        p,
        split(total.clone()),
        ElemClass::Data,
    ));
    let out = b.buf(buf(
        "out",
        BufferRole::Output,
        1,
        split(n()),
        ElemClass::Data,
    ));
    let land = b.buf(buf(
        "land",
        BufferRole::Scratch,
        p,
        Extent::Uniform { chunk: n() },
        land_class(wire),
    ));
    for r in 0..p {
        let ops = &mut b.ranks[r as usize];
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Get {
                src: reg(inp, r, 1),
                dst: reg(land, q, 1),
                peer: q,
            });
        }
        ops.push(own_copy(reg(inp, r, 1), reg(land, r, 1), wire));
        ops.push(Op::Reduce {
            dst: reg(out, 0, 1),
            srcs: (0..p).map(|j| reg(land, j, 1)).collect(),
        });
    }
    b.finish()
}

pub fn allreduce_rs_ag(p: u32, wire: bool) -> Plan {
    let mut b = B::new(
        if wire {
            "allreduce_rs_ag_wire"
        } else {
            "allreduce_rs_ag"
        },
        CollectiveKind::Allreduce,
        p,
    );
    let x = b.buf(buf("x", BufferRole::InOut, p, split(n()), ElemClass::Data));
    let land = b.buf(buf(
        "land",
        BufferRole::Scratch,
        p,
        Extent::Uniform {
            chunk: n().ceil_div(p as u64),
        },
        land_class(wire),
    ));
    let ready = b.sig("ready", SignalMode::Add);
    let done = b.sig("done", SignalMode::Add);
    for r in 0..p {
        let ops = &mut b.ranks[r as usize];
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Put {
                src: reg(x, q, 1),
                dst: reg(land, r, 1),
                peer: q,
                signal: Some(add(ready, q, 1)),
            });
        }
        ops.push(own_copy(reg(x, r, 1), reg(land, r, 1), wire));
        if p > 1 {
            ops.push(wait_ge(ready, p as u64 - 1));
        }
        ops.push(Op::Reduce {
            dst: reg(x, r, 1),
            srcs: (0..p).map(|j| reg(land, j, 1)).collect(),
        });
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Put {
                src: reg(x, r, 1),
                dst: reg(x, r, 1),
                peer: q,
                signal: Some(add(done, q, 1)),
            });
        }
        if p > 1 {
            ops.push(wait_ge(done, p as u64 - 1));
        }
    }
    b.finish()
}

pub fn alltoall_direct(p: u32) -> Plan {
    let mut b = B::new("alltoall_direct", CollectiveKind::Alltoall, p);
    let total = n().scaled(p as u64);
    let inp = b.buf(buf(
        "in",
        BufferRole::Input,
        p,
        split(total.clone()),
        ElemClass::Data,
    ));
    let out = b.buf(buf(
        "out",
        BufferRole::Output,
        p,
        split(total),
        ElemClass::Data,
    ));
    exchange(&mut b, inp, out);
    b.finish()
}

pub fn alltoallv_direct(p: u32) -> Plan {
    let mut b = B::new("alltoallv_direct", CollectiveKind::Alltoallv, p);
    let inp = b.buf(buf(
        "in",
        BufferRole::Input,
        p,
        Extent::Counts {
            matrix: CountsMatrix::Send,
        },
        ElemClass::Data,
    ));
    let out = b.buf(buf(
        "out",
        BufferRole::Output,
        p,
        Extent::Counts {
            matrix: CountsMatrix::Recv,
        },
        ElemClass::Data,
    ));
    exchange(&mut b, inp, out);
    b.finish()
}

fn exchange(b: &mut B, inp: u32, out: u32) {
    let p = b.p;
    let ready = b.sig("ready", SignalMode::Add);
    for r in 0..p {
        let ops = &mut b.ranks[r as usize];
        ops.push(Op::Copy {
            src: reg(inp, r, 1),
            dst: reg(out, r, 1),
        });
        for q in (0..p).filter(|q| *q != r) {
            ops.push(Op::Put {
                src: reg(inp, q, 1),
                dst: reg(out, r, 1),
                peer: q,
                signal: Some(add(ready, q, 1)),
            });
        }
        if p > 1 {
            ops.push(wait_ge(ready, p as u64 - 1));
        }
    }
}

pub fn broadcast_push(p: u32, root: u32) -> Plan {
    let mut b = B::new("broadcast_push", CollectiveKind::Broadcast, p);
    b.params.insert("root".into(), root as i64);
    let x = b.buf(buf("x", BufferRole::InOut, 1, split(n()), ElemClass::Data));
    let ready = b.sig("ready", SignalMode::Set);
    for q in (0..p).filter(|q| *q != root) {
        let set = SignalUpdate {
            slot: ready,
            peer: q,
            mode: SignalMode::Set,
            value: 1,
            stride: 2,
        };
        b.ranks[root as usize].push(Op::Put {
            src: reg(x, 0, 1),
            dst: reg(x, 0, 1),
            peer: q,
            signal: Some(set),
        });
        b.ranks[q as usize].push(Op::Wait {
            slot: ready,
            cmp: Cmp::Ge,
            target: WaitTarget {
                stride: 2,
                offset: 1,
            },
        });
    }
    b.finish()
}

pub fn sendrecv(p: u32, src: u32, dst: u32) -> Plan {
    let mut b = B::new("sendrecv", CollectiveKind::Sendrecv, p);
    b.params.insert("src".into(), src as i64);
    b.params.insert("dst".into(), dst as i64);
    let x = b.buf(buf("x", BufferRole::InOut, 1, split(n()), ElemClass::Data));
    let ready = b.sig("ready", SignalMode::Add);
    if src != dst {
        b.ranks[src as usize].push(Op::Put {
            src: reg(x, 0, 1),
            dst: reg(x, 0, 1),
            peer: dst,
            signal: Some(add(ready, dst, 1)),
        });
        b.ranks[dst as usize].push(wait_ge(ready, 1));
    }
    b.finish()
}

pub fn reduce_to_root(p: u32, root: u32, wire: bool) -> Plan {
    let mut b = B::new(
        if wire {
            "reduce_to_root_wire"
        } else {
            "reduce_to_root"
        },
        CollectiveKind::Reduce,
        p,
    );
    b.params.insert("root".into(), root as i64);
    let x = b.buf(buf("x", BufferRole::InOut, 1, split(n()), ElemClass::Data));
    let land = b.buf(buf(
        "land",
        BufferRole::Scratch,
        p,
        Extent::Uniform { chunk: n() },
        land_class(wire),
    ));
    let ready = b.sig("ready", SignalMode::Add);
    for r in (0..p).filter(|r| *r != root) {
        b.ranks[r as usize].push(Op::Put {
            src: reg(x, 0, 1),
            dst: reg(land, r, 1),
            peer: root,
            signal: Some(add(ready, root, 1)),
        });
    }
    let ops = &mut b.ranks[root as usize];
    ops.push(own_copy(reg(x, 0, 1), reg(land, root, 1), wire));
    if p > 1 {
        ops.push(wait_ge(ready, p as u64 - 1));
    }
    ops.push(Op::Reduce {
        dst: reg(x, 0, 1),
        srcs: (0..p).map(|j| reg(land, j, 1)).collect(),
    });
    b.finish()
}

/// Every hand-built standard plan at group size `p` (wire variants included).
pub fn all_plans(p: u32) -> Vec<Plan> {
    let mut v = vec![
        allgather_direct(p),
        allgather_pull(p),
        alltoall_direct(p),
        alltoallv_direct(p),
        broadcast_push(p, p - 1),
        sendrecv(p, 0, p - 1),
    ];
    for wire in [false, true] {
        v.push(reduce_scatter_direct(p, wire));
        v.push(reduce_scatter_pull(p, wire));
        v.push(allreduce_rs_ag(p, wire));
        v.push(reduce_to_root(p, p / 2, wire));
    }
    v
}

// ---------------------------------------------------------------- reference interpreter

fn read(t: DType, bytes: &[u8], i: usize) -> f32 {
    match t {
        DType::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
        DType::F16 => f16::from_bits(u16::from_le_bytes(
            bytes[2 * i..2 * i + 2].try_into().unwrap(),
        ))
        .to_f32(),
        DType::Bf16 => bf16::from_bits(u16::from_le_bytes(
            bytes[2 * i..2 * i + 2].try_into().unwrap(),
        ))
        .to_f32(),
        // Wider types read lossily: the f32 reference interpreter never runs them; these values
        // only name the first difference in error messages.
        DType::F64 => f64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()) as f32,
        DType::I32 => i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()) as f32,
        DType::I64 => i64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap()) as f32,
        DType::E4m3 | DType::E5m2 => rt_dtype::fp8_to_f32(rt_fp8(t), bytes[i]),
    }
}

fn rt_fp8(t: DType) -> rt_dtype::DType {
    if t == DType::E5m2 {
        rt_dtype::DType::F8E5M2
    } else {
        rt_dtype::DType::F8E4M3
    }
}

fn write(t: DType, bytes: &mut [u8], i: usize, v: f32) {
    match t {
        DType::F32 => bytes[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => {
            bytes[2 * i..2 * i + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes())
        }
        DType::Bf16 => {
            bytes[2 * i..2 * i + 2].copy_from_slice(&bf16::from_f32(v).to_bits().to_le_bytes())
        }
        DType::F64 => bytes[8 * i..8 * i + 8].copy_from_slice(&(v as f64).to_le_bytes()),
        DType::I32 => bytes[4 * i..4 * i + 4].copy_from_slice(&(v as i32).to_le_bytes()),
        DType::I64 => bytes[8 * i..8 * i + 8].copy_from_slice(&(v as i64).to_le_bytes()),
        DType::E4m3 | DType::E5m2 => bytes[i] = rt_dtype::f32_to_fp8(rt_fp8(t), v),
    }
}

/// Element-wise move between two memories (copy when types match, else through f32, RNE).
fn transfer(st: DType, src: &[u8], so: usize, dt: DType, dst: &mut [u8], d_off: usize, len: usize) {
    if st == dt {
        let e = st.size() as usize;
        dst[d_off * e..(d_off + len) * e].copy_from_slice(&src[so * e..(so + len) * e]);
    } else {
        for i in 0..len {
            write(dt, dst, d_off + i, read(st, src, so + i));
        }
    }
}

/// Sequential reference execution of `plan` (64-bit signals; ranks advance round-robin until
/// they block on a wait). Mirrors the plan semantics in plan/src/lib.rs.
pub fn interpret(
    plan: &Plan,
    layout: &HeapLayout,
    op: ReduceOp,
    sizes: &LaunchSizes,
    mem: &mut [Vec<Vec<u8>>],
    sig: &mut [Vec<u64>],
    epochs: std::ops::Range<u64>,
) {
    let p = plan.group_size as usize;
    let span = |r: &Region, rank: usize| {
        plan.buffers[r.buffer as usize]
            .region_span(r.first, r.count, rank as u32, sizes)
            .unwrap()
    };
    let ty = |r: &Region| layout.elem[r.buffer as usize];
    for epoch in epochs {
        let mut pc = vec![0usize; p];
        let mut finished = vec![false; p];
        // Every rank enters before any runs a step (a valid order: nothing waits to enter).
        for prog in &plan.ranks {
            for u in &prog.entry_signals {
                apply(sig, u, epoch);
            }
        }
        loop {
            let mut progress = false;
            for r in 0..p {
                if finished[r] {
                    continue;
                }
                let steps = &plan.ranks[r].steps;
                while pc[r] < steps.len() {
                    match &steps[pc[r]].op {
                        Op::Wait { slot, cmp, target } => {
                            if !cmp.holds(sig[r][*slot as usize], target.at(epoch)) {
                                break;
                            }
                        }
                        Op::Put {
                            src,
                            dst,
                            peer,
                            signal,
                        } => {
                            let (s, d) = (span(src, r), span(dst, *peer as usize));
                            let from = mem[r][src.buffer as usize].clone();
                            transfer(
                                ty(src),
                                &from,
                                s.offset as usize,
                                ty(dst),
                                &mut mem[*peer as usize][dst.buffer as usize],
                                d.offset as usize,
                                s.len as usize,
                            );
                            if let Some(u) = signal {
                                apply(sig, u, epoch);
                            }
                        }
                        Op::Get { src, dst, peer } => {
                            let (s, d) = (span(src, *peer as usize), span(dst, r));
                            let from = mem[*peer as usize][src.buffer as usize].clone();
                            transfer(
                                ty(src),
                                &from,
                                s.offset as usize,
                                ty(dst),
                                &mut mem[r][dst.buffer as usize],
                                d.offset as usize,
                                s.len as usize,
                            );
                        }
                        Op::Signal { update } => apply(sig, update, epoch),
                        Op::Copy { src, dst } | Op::Cast { src, dst } => {
                            let (s, d) = (span(src, r), span(dst, r));
                            let from = mem[r][src.buffer as usize].clone();
                            transfer(
                                ty(src),
                                &from,
                                s.offset as usize,
                                ty(dst),
                                &mut mem[r][dst.buffer as usize],
                                d.offset as usize,
                                s.len as usize,
                            );
                        }
                        Op::Reduce { dst, srcs } => {
                            let d = span(dst, r);
                            let ss: Vec<_> = srcs.iter().map(|s| (s, span(s, r))).collect();
                            for i in 0..d.len as usize {
                                let mut acc = 0f32;
                                for (k, (s, sp)) in ss.iter().enumerate() {
                                    let v = read(
                                        ty(s),
                                        &mem[r][s.buffer as usize],
                                        sp.offset as usize + i,
                                    );
                                    acc = if k == 0 { v } else { op.apply(acc, v) };
                                }
                                write(
                                    ty(dst),
                                    &mut mem[r][dst.buffer as usize],
                                    d.offset as usize + i,
                                    acc,
                                );
                            }
                        }
                        other => panic!("reference interpreter does not run {other:?}"),
                    }
                    pc[r] += 1;
                    progress = true;
                }
                if pc[r] == steps.len() {
                    for u in &plan.ranks[r].exit_signals {
                        apply(sig, u, epoch);
                    }
                    finished[r] = true;
                    progress = true;
                }
            }
            if finished.iter().all(|f| *f) {
                break;
            }
            assert!(
                progress,
                "reference interpreter deadlocked in epoch {epoch}"
            );
        }
    }
}

fn apply(sig: &mut [Vec<u64>], u: &SignalUpdate, epoch: u64) {
    let s = &mut sig[u.peer as usize][u.slot as usize];
    match u.mode {
        SignalMode::Add => *s = s.wrapping_add(u.value),
        SignalMode::Set => *s = u.value_at(epoch),
    }
}

/// Counter values every (rank, slot) holds before launch `e0` had launches 0..e0 run.
pub fn signals_before(plan: &Plan, e0: u64) -> Vec<Vec<u64>> {
    let p = plan.group_size as usize;
    let mut per_launch = vec![vec![0u64; plan.signals.len()]; p];
    let mut set = vec![vec![0u64; plan.signals.len()]; p];
    for prog in &plan.ranks {
        let ups = prog.steps.iter().filter_map(|s| match &s.op {
            Op::Put {
                signal: Some(u), ..
            } => Some(*u),
            Op::Signal { update } => Some(*update),
            _ => None,
        });
        let credits = prog.entry_signals.iter().chain(&prog.exit_signals).copied();
        for u in ups.chain(credits) {
            let (q, s) = (u.peer as usize, u.slot as usize);
            match u.mode {
                SignalMode::Add => per_launch[q][s] += u.value,
                SignalMode::Set if e0 > 0 => set[q][s] = set[q][s].max(u.value_at(e0 - 1)),
                SignalMode::Set => {}
            }
        }
    }
    (0..p)
        .map(|q| {
            (0..plan.signals.len())
                .map(|s| {
                    if plan.signals[s].mode == SignalMode::Add {
                        per_launch[q][s].wrapping_mul(e0)
                    } else {
                        set[q][s]
                    }
                })
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------- sim helpers

pub fn cache_dir() -> std::path::PathBuf {
    std::env::var_os("SYMSCHED_KERNEL_CACHE")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernel-cache")
        })
}

pub fn build(plan: &Plan, opts: &LowerOptions) -> SimKernel {
    let l = lower(plan, opts).expect("lowering");
    // -O0: a third of the -O2 build time, same results (see sim_build::OptLevel).
    sim_build::build_with(&SimSources::from(&l), &cache_dir(), sim_build::OptLevel::O0)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`build`] for several kernels at once: one g++ per batch of kernels
/// ([`sim_build::build_many`]), which parses the simulation headers once per batch instead of
/// once per kernel.
pub fn build_all(combos: &[(Plan, LowerOptions)]) -> Vec<SimKernel> {
    let srcs: Vec<SimSources> = combos
        .iter()
        .map(|(p, o)| SimSources::from(&lower(p, o).expect("lowering")))
        .collect();
    sim_build::build_many(
        &srcs,
        &cache_dir(),
        sim_build::OptLevel::O0,
        sim_build::default_jobs(),
    )
    .into_iter()
    .map(|k| k.unwrap_or_else(|e| panic!("{e}")))
    .collect()
}

pub fn sizes_for(plan: &Plan, n: u64) -> LaunchSizes {
    let p = plan.group_size as u64;
    let counts = (0..p)
        .map(|s| (0..p).map(|r| (n + 3 * s + 5 * r) % (n + 1)).collect())
        .collect();
    // Matmul plans (size variables m, k, n): n >= 100 gives output tiles past the Cube's
    // 128 x 128 and k past its k block (128 for f32, 256 for 16-bit operands); else one tile.
    let vars = if plan.size_vars.iter().any(|v| v.name == "k") {
        let (m, k, nn) = if n >= 100 { (130, 260, 136) } else { (5, n, 3) };
        vec![
            ("m".to_string(), m),
            ("k".to_string(), k),
            ("n".to_string(), nn),
        ]
    } else {
        vec![("n".to_string(), n)]
    };
    LaunchSizes {
        vars: vars.into_iter().collect(),
        counts: Some(counts),
    }
}

/// Deterministic, non-zero, sign-varying input values (exactly representable in the dtype).
pub fn inputs(plan: &Plan, layout: &HeapLayout, seed: u64) -> Vec<Vec<Vec<u8>>> {
    (0..plan.group_size as usize)
        .map(|r| {
            (0..plan.buffers.len())
                .map(|b| {
                    let t = layout.elem[b];
                    let count = layout.buf_bytes[b] / t.size() as usize;
                    let mut bytes = vec![0u8; layout.buf_bytes[b]];
                    for i in 0..count {
                        let h = (i as u64 * 2654435761
                            + r as u64 * 40503
                            + b as u64 * 977
                            + seed * 7919)
                            % 2001;
                        if !t.is_float() || t == DType::F64 {
                            // Integers near the type's range so that sums wrap; f64 values
                            // with more bits than f32 holds, so that f64 sums round as f64.
                            let e = t.size() as usize;
                            let raw = match t {
                                DType::I32 => (((h as i64 - 1000) * 2_147_483) as i32)
                                    .to_le_bytes()
                                    .to_vec(),
                                DType::I64 => ((h as i64 - 1000) * 9_223_372_036_854_775)
                                    .to_le_bytes()
                                    .to_vec(),
                                _ => ((h as f64 - 1000.0) / 3.0 + 1e-9).to_le_bytes().to_vec(),
                            };
                            bytes[e * i..e * (i + 1)].copy_from_slice(&raw);
                            continue;
                        }
                        let v = (h as f32 - 1000.0) / 8.0 + 0.0625;
                        let v = if v == 0.0 { 0.5 } else { v };
                        write(t, &mut bytes, i, read_back(t, v));
                    }
                    bytes
                })
                .collect()
        })
        .collect()
}

fn read_back(t: DType, v: f32) -> f32 {
    let mut b = vec![0u8; 4];
    write(t, &mut b, 0, v);
    read(t, &b, 0)
}

/// Every rank's state before a run: [`inputs`] with `seed`, signals zero.
pub fn fresh_states(plan: &Plan, layout: &HeapLayout, seed: u64) -> Vec<RankState> {
    inputs(plan, layout, seed)
        .into_iter()
        .map(|b| RankState {
            buffers: b,
            signals: vec![],
        })
        .collect()
}

/// Lower `plan` with `o`, replace `from` by `to` in the source `part` picks (it must be there:
/// a pattern the lowering stopped emitting would make a negative test pass for no reason) and
/// build the edited kernel on the simulation.
pub fn build_edited(
    plan: &Plan,
    o: &LowerOptions,
    part: impl FnOnce(&mut SimSources) -> &mut String,
    from: &str,
    to: &str,
) -> SimKernel {
    let l = lower(plan, o).unwrap();
    let mut src = SimSources::from(&l);
    let text = part(&mut src);
    assert!(
        text.contains(from),
        "pattern `{from}` not in the generated source:\n{text}"
    );
    *text = text.replace(from, to);
    sim_build::build(&src, &cache_dir()).unwrap_or_else(|e| panic!("{e}"))
}

/// One launch of `kernel` on the in-process simulation from [`fresh_states`] (seed 1) at size
/// `n`, bounded by `timeout`.
pub fn run_fresh(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    n: u64,
    timeout: std::time::Duration,
) -> Result<Vec<RankState>, KernelError> {
    let sizes = sizes_for(plan, n);
    let layout = HeapLayout::new(plan, o.dtype, o.wire, &sizes)?;
    let init = fresh_states(plan, &layout, 1);
    let cfg = RunConfig {
        timeout,
        ..RunConfig::default()
    };
    inproc::run(kernel, plan, &layout, &sizes, &init, &cfg)
}

/// Run the kernel on the simulation and the reference interpreter from the same state and
/// compare every byte of every buffer and every signal word (the sim's int32 words against the
/// low 32 bits of the reference's 64-bit counters).
pub fn compare(
    kernel: &SimKernel,
    plan: &Plan,
    opts: &LowerOptions,
    n: u64,
    epochs: std::ops::Range<u64>,
) -> Result<(), String> {
    let sizes = sizes_for(plan, n);
    let layout = HeapLayout::new(plan, opts.dtype, opts.wire, &sizes).map_err(|e| e.to_string())?;
    let mut mem = inputs(plan, &layout, n);
    let mut sig = signals_before(plan, epochs.start);
    let init: Vec<RankState> = (0..plan.group_size as usize)
        .map(|r| RankState {
            buffers: mem[r].clone(),
            signals: sig[r].iter().map(|v| *v as u32 as i32).collect(),
        })
        .collect();
    let cfg = RunConfig {
        epochs: epochs.clone(),
        timeout: std::time::Duration::from_secs(60),
        send_exit_signals: true,
        seed: 0,
        ..RunConfig::default()
    };
    let got = inproc::run(kernel, plan, &layout, &sizes, &init, &cfg)
        .map_err(|e: KernelError| e.to_string())?;
    interpret(plan, &layout, opts.op, &sizes, &mut mem, &mut sig, epochs);
    for r in 0..plan.group_size as usize {
        for b in 0..plan.buffers.len() {
            if got[r].buffers[b] != mem[r][b] {
                let t = layout.elem[b];
                let i = (0..got[r].buffers[b].len() / t.size() as usize)
                    .find(|&i| {
                        read(t, &got[r].buffers[b], i).to_bits() != read(t, &mem[r][b], i).to_bits()
                    })
                    .unwrap_or(0);
                return Err(format!(
                    "{}: rank {r} buffer `{}` differs at element {i}: sim {} vs reference {}",
                    kernel.name(),
                    plan.buffers[b].name,
                    read(t, &got[r].buffers[b], i),
                    read(t, &mem[r][b], i)
                ));
            }
        }
        let want: Vec<i32> = sig[r].iter().map(|v| *v as u32 as i32).collect();
        if got[r].signals != want {
            return Err(format!(
                "{}: rank {r} signals {:?} vs reference {:?}",
                kernel.name(),
                got[r].signals,
                want
            ));
        }
    }
    Ok(())
}

pub fn opts(dtype: DType, wire: DType, op: ReduceOp, ub_bytes: u32) -> LowerOptions {
    LowerOptions {
        dtype,
        wire,
        op,
        ub_bytes,
        block_dim: 1,
    }
}

// ---------------------------------------------------------------- the runtime's interpreter

/// Role buffers' bytes on every rank after one launch of the runtime's plan interpreter
/// (symsched_runtime::exec, in-process world, role buffers bound as private memory).
pub fn runtime_outputs(
    plan: &Plan,
    o: &LowerOptions,
    sizes: &LaunchSizes,
    roles_in: &[Vec<Vec<u8>>],
) -> Result<Vec<Vec<Vec<u8>>>, String> {
    use symsched_runtime::exec as rt;
    let dt = |t: DType| rt::DType::parse(t.name()).map_err(|e| e.to_string());
    let types = rt::ElemTypes::new(dt(o.dtype)?, Some(dt(o.wire)?)).map_err(|e| e.to_string())?;
    let op = rt::ReduceOp::parse(o.op.name()).map_err(|e| e.to_string())?;
    // Size the heap from the plan (8-byte elements, twice over, plus 1 MiB): a fixed 64 MiB
    // per rank made every comparison cost ~1.5 s of page faults, more than its kernel build.
    let need: u64 = plan
        .buffers
        .iter()
        .map(|b| {
            let most = (0..plan.group_size)
                .map(|r| b.total_len(r, sizes).unwrap_or(0))
                .max()
                .unwrap_or(0);
            most * 8 + 4096
        })
        .sum();
    let heap = (2 * need + (1 << 20)).next_power_of_two();
    let world = rt::LocalWorld::new(plan.group_size, heap)
        .map_err(|e| e.to_string())?
        .with_timeout(std::time::Duration::from_secs(30));
    let group = world.world_group().map_err(|e| e.to_string())?;
    let results: Vec<Result<Vec<Vec<u8>>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..plan.group_size)
            .map(|r| {
                let group = group.clone();
                let mut mine = roles_in[r as usize].clone();
                s.spawn(move || {
                    let exec = rt::Executor::new(group.fabric(r).map_err(|e| e.to_string())?);
                    let lp = exec.load(plan).map_err(|e| e.to_string())?;
                    {
                        let mut binds: Vec<rt::Binding> = mine
                            .iter_mut()
                            .map(|b| rt::Binding::Host(b.as_mut_slice()))
                            .collect();
                        exec.launch(
                            &lp,
                            rt::LaunchArgs {
                                types,
                                op,
                                sizes,
                                buffers: &mut binds,
                            },
                        )
                        .map_err(|e| e.to_string())?;
                    }
                    exec.barrier().map_err(|e| e.to_string())?;
                    Ok(mine)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("runtime rank panicked".into()))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Number of role (non-scratch) buffers: they come first in plan order.
pub fn n_roles(plan: &Plan) -> usize {
    plan.buffers
        .iter()
        .take_while(|b| b.role != BufferRole::Scratch)
        .count()
}

/// [`inputs`] with `seed`, cut to the role buffers' lengths at `sizes` (what the runtime binds).
pub fn role_inputs(
    plan: &Plan,
    layout: &HeapLayout,
    sizes: &LaunchSizes,
    seed: u64,
) -> Vec<Vec<Vec<u8>>> {
    let all = inputs(plan, layout, seed);
    (0..plan.group_size as usize)
        .map(|r| {
            (0..n_roles(plan))
                .map(|b| {
                    let len = plan.buffers[b].total_len(r as u32, sizes).unwrap() as usize
                        * layout.elem[b].size() as usize;
                    all[r][b][..len].to_vec()
                })
                .collect()
        })
        .collect()
}

/// The `symsched run --backend sim` path on the runtime's in-process fabric: the runtime's
/// harness conventions (fill, barriers, sequential reference check) with one warm-up and three
/// checked launches of the generated kernel; every rank must check clean.
pub fn check_sim_harness(plan: &Plan, o: LowerOptions) {
    use symsched_kernels::sim::fabric::SimBackend;
    use symsched_kernels::sim::harness;
    use symsched_runtime::exec::harness::{sizes_for as rt_sizes, RunSpec};
    use symsched_runtime::exec::{ElemTypes, Executor, LocalWorld};
    let (name, p) = (&plan.schedule, plan.group_size);
    let backend = SimBackend::new(plan, o, &cache_dir()).unwrap();
    let spec = RunSpec {
        types: ElemTypes::new(rt_dtype::DType::F32, None).unwrap(),
        op: symsched_runtime::exec::ReduceOp::Sum,
        sizes: rt_sizes(plan, 999, &[]),
        warmup: 1,
        iters: 3,
        check: true,
        staged: false,
    };
    let world = LocalWorld::new(p, 64 << 20).unwrap();
    let group = world.world_group().unwrap();
    let reports: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..p)
            .map(|r| {
                let (group, backend, spec) = (&group, &backend, &spec);
                s.spawn(move || {
                    let exec = Executor::new(group.fabric(r).unwrap());
                    harness::run_rank(&exec, backend, plan, spec)
                        .unwrap_or_else(|e| panic!("{name}: {e}"))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for rep in reports {
        assert_eq!(rep.wrong, 0, "{name} P={p}");
        assert_eq!(rep.times.len(), 3);
    }
}

/// One launch of the generated kernel on the simulation against one launch of the runtime's
/// interpreter, from the same role contents; role buffers must agree byte for byte.
pub fn compare_with_runtime(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    n: u64,
) -> Result<(), String> {
    compare_with_runtime_seeded(kernel, plan, o, n, 0).map_err(|e| e.to_string())
}

/// Why a simulated launch disagreed with the runtime's interpreter.
#[derive(Debug)]
pub enum Mismatch {
    /// The simulation stopped the launch (its `SYMSCHED_SIM_E_*` status is in the error).
    Sim(KernelError),
    /// The launch finished with a role buffer that differs.
    Wrong(String),
    /// Setting the comparison up failed (layout, the runtime's side).
    Setup(String),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Sim(e) => write!(f, "{e}"),
            Mismatch::Wrong(s) | Mismatch::Setup(s) => f.write_str(s),
        }
    }
}

/// [`compare_with_runtime`] with the engine interleaving of `seed`, keeping the simulation's
/// error typed.
pub fn compare_with_runtime_seeded(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    n: u64,
    seed: u64,
) -> Result<(), Mismatch> {
    compare_with_runtime_from(kernel, plan, o, n, seed, |_, roles| roles)
}

/// [`compare_with_runtime`] at explicit launch sizes, role inputs from `input_seed`.
pub fn compare_with_runtime_at(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    sizes: &LaunchSizes,
    input_seed: u64,
) -> Result<(), String> {
    compare_core(
        kernel,
        plan,
        o,
        sizes,
        input_seed,
        (0, OverflowMode::default()),
        |_, roles| roles,
    )
    .map_err(|e| e.to_string())
}

/// [`compare_with_runtime_seeded`] at explicit launch sizes (role inputs from `n + 11`, as there).
pub fn compare_with_runtime_sized(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    sizes: &LaunchSizes,
    n: u64,
    seed: u64,
) -> Result<(), Mismatch> {
    let keep = |_: &[DType], roles| roles;
    compare_core(
        kernel,
        plan,
        o,
        sizes,
        n + 11,
        (seed, OverflowMode::default()),
        keep,
    )
}

/// [`compare_with_runtime_seeded`] from role contents that `edit` makes of the default inputs
/// (`edit(element type of each role buffer, inputs)`), e.g. to plant NaNs or overflowing values.
pub fn compare_with_runtime_from(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    n: u64,
    seed: u64,
    edit: impl FnOnce(&[DType], Vec<Vec<Vec<u8>>>) -> Vec<Vec<Vec<u8>>>,
) -> Result<(), Mismatch> {
    compare_under(kernel, plan, o, n, seed, OverflowMode::default(), edit)
}

/// [`compare_with_runtime_from`] on a device whose float overflow mode is `overflow` (what
/// `aclrtSetDeviceSatMode` chose for the process).
pub fn compare_under(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    n: u64,
    seed: u64,
    overflow: OverflowMode,
    edit: impl FnOnce(&[DType], Vec<Vec<Vec<u8>>>) -> Vec<Vec<Vec<u8>>>,
) -> Result<(), Mismatch> {
    let sizes = sizes_for(plan, n);
    compare_core(kernel, plan, o, &sizes, n + 11, (seed, overflow), edit).map_err(|e| match e {
        Mismatch::Wrong(s) => Mismatch::Wrong(format!("n={n}: {s}")),
        other => other,
    })
}

/// The comparison behind the `compare_with_runtime*` helpers: inputs from `input_seed`, the
/// engine interleaving of `seed`, the device in float overflow mode `overflow`.
fn compare_core(
    kernel: &SimKernel,
    plan: &Plan,
    o: &LowerOptions,
    sizes: &LaunchSizes,
    input_seed: u64,
    (seed, overflow): (u64, OverflowMode),
    edit: impl FnOnce(&[DType], Vec<Vec<Vec<u8>>>) -> Vec<Vec<Vec<u8>>>,
) -> Result<(), Mismatch> {
    let setup = Mismatch::Setup;
    let sizes = sizes.clone();
    let layout =
        HeapLayout::new(plan, o.dtype, o.wire, &sizes).map_err(|e| setup(e.to_string()))?;
    let roles = n_roles(plan);
    let roles_in = edit(
        &layout.elem[..roles],
        role_inputs(plan, &layout, &sizes, input_seed),
    );
    let want = runtime_outputs(plan, o, &sizes, &roles_in).map_err(setup)?;
    let init: Vec<RankState> = (0..plan.group_size as usize)
        .map(|r| RankState {
            buffers: roles_in[r].clone(),
            signals: vec![],
        })
        .collect();
    let cfg = RunConfig {
        epochs: 0..1,
        timeout: std::time::Duration::from_secs(60),
        send_exit_signals: true,
        seed,
        overflow,
    };
    let got = inproc::run(kernel, plan, &layout, &sizes, &init, &cfg).map_err(Mismatch::Sim)?;
    for r in 0..plan.group_size as usize {
        for b in 0..roles {
            let w = &want[r][b];
            let g = &got[r].buffers[b][..w.len()];
            if g != w.as_slice() {
                let t = layout.elem[b];
                let i = (0..w.len() / t.size() as usize)
                    .find(|&i| read(t, g, i).to_bits() != read(t, w, i).to_bits())
                    .unwrap_or(0);
                return Err(Mismatch::Wrong(format!(
                    "{}: rank {r} `{}` element {i}: sim {} vs runtime interpreter {}",
                    kernel.name(),
                    plan.buffers[b].name,
                    read(t, g, i),
                    read(t, w, i)
                )));
            }
        }
    }
    Ok(())
}

/// The standard library's plans that the Ascend lowering supports, compiled for `p` ranks.
pub fn standard_plans(p: u32) -> Vec<Plan> {
    use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
    let lib = standard_library();
    let mut names: Vec<String> = lib.schedules().into_iter().map(|s| s.name).collect();
    names.sort();
    names
        .iter()
        .filter_map(|name| {
            let mut params = example_params(name);
            if p == 1 {
                // sendrecv_pair needs two distinct ranks.
                if params.contains_key("dst") {
                    return None;
                }
            }
            if name.ends_with("_hier") {
                params.insert("L".into(), 1);
            }
            let c = compile(&lib, name, p, &params, &CompileOptions::default()).ok()?;
            lower(&c.plan, &LowerOptions::default())
                .ok()
                .map(|_| c.plan)
        })
        .collect()
}
