//! The straightforward reference: scalar conversions written from the format crates (`half`,
//! `float8`) and Rust casts, and a sequential simulator that runs a plan step by step for all
//! ranks (round robin, a rank blocking at an unsatisfied wait), unfused, with the interpreter's
//! numerics rules (convert through f32, or f64 when either side is f64; reduce as a left fold in
//! the accumulator rounded once; `avg` divides every written role at the end of each rank).

#![allow(dead_code)]

use float8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use symsched_jit::{DType, ElemTypes, ReduceOp};
use symsched_plan::{HostCollOp, LaunchSizes, Op, Plan, Rank, Region, SignalMode};

/// f64 → f32 rounded to odd (truncate toward zero, set the last bit when inexact).
pub fn odd_f32(x: f64) -> f32 {
    let r = x as f32;
    if x.is_nan() || r as f64 == x {
        return r;
    }
    let mut bits = r.to_bits();
    if (r as f64).abs() > x.abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

pub fn to_f32(d: DType, b: &[u8]) -> f32 {
    match d {
        DType::F32 => f32::from_le_bytes(b[..4].try_into().unwrap()),
        DType::F64 => f64::from_le_bytes(b[..8].try_into().unwrap()) as f32,
        DType::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        DType::Bf16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        DType::F8E4M3 => F8E4M3::from_bits(b[0]).to_f32(),
        DType::F8E5M2 => F8E5M2::from_bits(b[0]).to_f32(),
        _ => unreachable!("integers never go through f32"),
    }
}

pub fn from_f32(d: DType, x: f32) -> Vec<u8> {
    match d {
        DType::F32 => x.to_le_bytes().to_vec(),
        DType::F64 => (x as f64).to_le_bytes().to_vec(),
        DType::F16 => f16::from_f32(x).to_bits().to_le_bytes().to_vec(),
        DType::Bf16 => bf16::from_f32(x).to_bits().to_le_bytes().to_vec(),
        DType::F8E4M3 => vec![F8E4M3::from_f64(x as f64).to_bits()],
        DType::F8E5M2 => vec![F8E5M2::from_f64(x as f64).to_bits()],
        _ => unreachable!("integers never go through f32"),
    }
}

pub fn to_f64(d: DType, b: &[u8]) -> f64 {
    match d {
        DType::F64 => f64::from_le_bytes(b[..8].try_into().unwrap()),
        _ => to_f32(d, b) as f64,
    }
}

pub fn from_f64(d: DType, x: f64) -> Vec<u8> {
    match d {
        DType::F64 => x.to_le_bytes().to_vec(),
        DType::F32 => (x as f32).to_le_bytes().to_vec(),
        DType::F16 | DType::Bf16 => from_f32(d, odd_f32(x)),
        DType::F8E4M3 => vec![F8E4M3::from_f64(x).to_bits()],
        DType::F8E5M2 => vec![F8E5M2::from_f64(x).to_bits()],
        _ => unreachable!("integers never go through f64"),
    }
}

/// One element converted.
pub fn convert(from: DType, to: DType, b: &[u8]) -> Vec<u8> {
    if from == to {
        return b[..from.size()].to_vec();
    }
    if from == DType::F64 || to == DType::F64 {
        return from_f64(to, to_f64(from, b));
    }
    from_f32(to, to_f32(from, b))
}

/// An accumulator value.
#[derive(Debug, Clone, Copy)]
pub enum Acc {
    F32(f32),
    F64(f64),
    I32(i32),
    I64(i64),
    U8(u8),
}

pub fn acc_load(acc: DType, d: DType, b: &[u8]) -> Acc {
    match acc {
        DType::F32 => Acc::F32(to_f32(d, b)),
        DType::F64 => Acc::F64(to_f64(d, b)),
        DType::I32 => Acc::I32(i32::from_le_bytes(b[..4].try_into().unwrap())),
        DType::I64 => Acc::I64(i64::from_le_bytes(b[..8].try_into().unwrap())),
        DType::U8 => Acc::U8(b[0]),
        _ => unreachable!(),
    }
}

pub fn acc_store(a: Acc, d: DType) -> Vec<u8> {
    match a {
        Acc::F32(x) => from_f32(d, x),
        Acc::F64(x) => from_f64(d, x),
        Acc::I32(x) => x.to_le_bytes().to_vec(),
        Acc::I64(x) => x.to_le_bytes().to_vec(),
        Acc::U8(x) => vec![x],
    }
}

fn pick<T: PartialOrd + Copy>(a: T, b: T, a_nan: bool, max: bool) -> T {
    let keep = if max { a >= b } else { a <= b };
    if a_nan || keep {
        a
    } else {
        b
    }
}

pub fn fold(op: ReduceOp, a: Acc, x: Acc) -> Acc {
    let max = op == ReduceOp::Max;
    match (a, x) {
        (Acc::F32(a), Acc::F32(x)) => Acc::F32(match op {
            ReduceOp::Sum | ReduceOp::Avg => a + x,
            _ => pick(a, x, a.is_nan(), max),
        }),
        (Acc::F64(a), Acc::F64(x)) => Acc::F64(match op {
            ReduceOp::Sum | ReduceOp::Avg => a + x,
            _ => pick(a, x, a.is_nan(), max),
        }),
        (Acc::I32(a), Acc::I32(x)) => Acc::I32(match op {
            ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(x),
            _ => pick(a, x, false, max),
        }),
        (Acc::I64(a), Acc::I64(x)) => Acc::I64(match op {
            ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(x),
            _ => pick(a, x, false, max),
        }),
        (Acc::U8(a), Acc::U8(x)) => Acc::U8(match op {
            ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(x),
            _ => pick(a, x, false, max),
        }),
        _ => unreachable!("one accumulator type per launch"),
    }
}

pub fn div_by(a: Acc, p: u32) -> Acc {
    match a {
        Acc::F32(x) => Acc::F32(x / p as f32),
        Acc::F64(x) => Acc::F64(x / p as f64),
        Acc::I32(x) => Acc::I32(x / p as i32),
        Acc::I64(x) => Acc::I64(x / p as i64),
        Acc::U8(x) => Acc::U8(x / p as u8),
    }
}

/// `dst = fold(srcs)` over `n` elements of raw bytes.
pub fn reduce_bytes(
    types: ElemTypes,
    op: ReduceOp,
    srcs: &[(&[u8], DType)],
    dst_dtype: DType,
    n: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * dst_dtype.size());
    for i in 0..n {
        let at = |(b, d): &(&[u8], DType)| {
            let s = d.size();
            acc_load(types.acc, *d, &b[i * s..(i + 1) * s])
        };
        let mut a = at(&srcs[0]);
        for s in &srcs[1..] {
            a = fold(op, a, at(s));
        }
        out.extend(acc_store(a, dst_dtype));
    }
    out
}

/// `c = a × b` (row-major), accumulated in f64 in k order then rounded into c's type (floats);
/// wrapping integer arithmetic for integers. The harness's matmul intrinsic runs the same.
pub fn matmul_bytes(
    c: &mut [u8],
    cd: DType,
    a: &[u8],
    ad: DType,
    b: &[u8],
    bd: DType,
    (m, k, n): (usize, usize, usize),
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            let mut si = 0i64;
            for l in 0..k {
                let (x, y) = (&a[(i * k + l) * ad.size()..], &b[(l * n + j) * bd.size()..]);
                if cd.is_float() {
                    s += to_f64(ad, x) * to_f64(bd, y);
                } else {
                    let xi = int_of(ad, x);
                    si = si.wrapping_add(xi.wrapping_mul(int_of(bd, y)));
                }
            }
            let out = if cd.is_float() {
                from_f64(cd, s)
            } else {
                si.to_le_bytes()[..cd.size()].to_vec()
            };
            let w = cd.size();
            c[(i * n + j) * w..(i * n + j + 1) * w].copy_from_slice(&out);
        }
    }
}

fn int_of(d: DType, b: &[u8]) -> i64 {
    match d {
        DType::I32 => i32::from_le_bytes(b[..4].try_into().unwrap()) as i64,
        DType::I64 => i64::from_le_bytes(b[..8].try_into().unwrap()),
        _ => b[0] as i64,
    }
}

/// In-place host collective over the members' regions (member order), as the runtime's
/// built-in stand-in: allreduce folds all; allgather takes block i from member i; reduce_scatter
/// folds block i into member i; broadcast copies member 0's. `avg` folds as `sum`.
pub fn host_coll_result(
    op: HostCollOp,
    types: ElemTypes,
    rop: ReduceOp,
    dtype: DType,
    all: &[Vec<u8>],
    me: usize,
) -> Vec<u8> {
    let es = dtype.size();
    let n = all[0].len() / es;
    let m = all.len();
    let block = n.div_ceil(m.max(1));
    let span = |i: usize| ((i * block).min(n), ((i + 1) * block).min(n));
    let rop = if rop == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        rop
    };
    let fold = |lo: usize, hi: usize| {
        let srcs: Vec<(&[u8], DType)> = all.iter().map(|v| (&v[lo * es..hi * es], dtype)).collect();
        reduce_bytes(types, rop, &srcs, dtype, hi - lo)
    };
    let mut out = all[me].clone();
    match op {
        HostCollOp::Allreduce => out = fold(0, n),
        HostCollOp::Allgather => {
            for (i, v) in all.iter().enumerate() {
                let (lo, hi) = span(i);
                out[lo * es..hi * es].copy_from_slice(&v[lo * es..hi * es]);
            }
        }
        HostCollOp::ReduceScatter => {
            let (lo, hi) = span(me);
            let r = fold(lo, hi);
            out[lo * es..hi * es].copy_from_slice(&r);
        }
        HostCollOp::Broadcast => out = all[0].clone(),
    }
    out
}

/// Every rank's copy of every buffer, as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    pub bufs: Vec<Vec<Vec<u8>>>,
}

impl Memory {
    /// Buffers sized for `sizes` on each rank.
    pub fn new(plan: &Plan, types: ElemTypes, sizes: &LaunchSizes) -> Memory {
        let bufs = (0..plan.group_size)
            .map(|r| {
                plan.buffers
                    .iter()
                    .map(|b| {
                        let n = b.total_len(r, sizes).expect("sizes fit the plan");
                        vec![0xa5u8; n as usize * types.of(b.elem).size()]
                    })
                    .collect()
            })
            .collect();
        Memory { bufs }
    }
}

fn span(plan: &Plan, sizes: &LaunchSizes, rank: Rank, r: &Region) -> (usize, usize) {
    let s = plan.buffers[r.buffer as usize]
        .region_span(r.first, r.count, rank, sizes)
        .expect("spans evaluate");
    (s.offset as usize, s.len as usize)
}

/// Run one launch of `plan` on every rank sequentially; signal counters persist in `signals`
/// (`[rank][slot]`) across launches.
pub fn simulate(
    plan: &Plan,
    types: ElemTypes,
    op: ReduceOp,
    sizes: &LaunchSizes,
    mem: &mut Memory,
    signals: &mut [Vec<u64>],
    epoch: u64,
) {
    let p = plan.group_size as usize;
    let mut pc = vec![0usize; p];
    let mut finished = vec![false; p];
    let mut host_ord = vec![0u32; p];
    let dt = |b: u32| types.of(plan.buffers[b as usize].elem);
    let apply = |signals: &mut [Vec<u64>], u: &symsched_plan::SignalUpdate| {
        let c = &mut signals[u.peer as usize][u.slot as usize];
        match u.mode {
            SignalMode::Add => *c = c.wrapping_add(u.value),
            SignalMode::Set => *c = u.value_at(epoch),
        }
    };
    // Every rank enters (its staged inputs are in place) before any step runs.
    for prog in &plan.ranks {
        for u in &prog.entry_signals {
            apply(signals, u);
        }
    }
    loop {
        let mut progress = false;
        for r in 0..p {
            let steps = &plan.ranks[r].steps;
            while pc[r] < steps.len() {
                let me = r as Rank;
                match &steps[pc[r]].op {
                    Op::Wait { slot, cmp, target } => {
                        if !cmp.holds(signals[r][*slot as usize], target.at(epoch)) {
                            break;
                        }
                    }
                    Op::Signal { update } => apply(signals, update),
                    Op::Put {
                        src,
                        dst,
                        peer,
                        signal,
                    } => {
                        move_elems(mem, plan, sizes, &dt, (me, src), (*peer, dst), (me, src));
                        if let Some(u) = signal {
                            apply(signals, u);
                        }
                    }
                    Op::Get { src, dst, peer } => {
                        move_elems(mem, plan, sizes, &dt, (*peer, src), (me, dst), (*peer, src))
                    }
                    Op::Copy { src, dst } | Op::Cast { src, dst } => {
                        move_elems(mem, plan, sizes, &dt, (me, src), (me, dst), (me, src))
                    }
                    Op::Reduce { dst, srcs } => {
                        let (doff, n) = span(plan, sizes, me, dst);
                        let owned: Vec<(Vec<u8>, DType)> = srcs
                            .iter()
                            .map(|s| {
                                let (off, _) = span(plan, sizes, me, s);
                                let w = dt(s.buffer).size();
                                (
                                    mem.bufs[r][s.buffer as usize][off * w..(off + n) * w].to_vec(),
                                    dt(s.buffer),
                                )
                            })
                            .collect();
                        let refs: Vec<(&[u8], DType)> =
                            owned.iter().map(|(v, d)| (&v[..], *d)).collect();
                        let out = reduce_bytes(types, op, &refs, dt(dst.buffer), n);
                        let w = dt(dst.buffer).size();
                        mem.bufs[r][dst.buffer as usize][doff * w..(doff + n) * w]
                            .copy_from_slice(&out);
                    }
                    Op::Matmul { c, a, b } => {
                        let v = |name: &str| sizes.vars[name] as usize;
                        let (m, k, n) = (v("m"), v("k"), v("n"));
                        let region = |x: &Region, len: usize| {
                            let (off, _) = span(plan, sizes, me, x);
                            let w = dt(x.buffer).size();
                            (off * w, len * w)
                        };
                        let (ao, al) = region(a, m * k);
                        let (bo, bl) = region(b, k * n);
                        let (co, cl) = region(c, m * n);
                        let av = mem.bufs[r][a.buffer as usize][ao..ao + al].to_vec();
                        let bv = mem.bufs[r][b.buffer as usize][bo..bo + bl].to_vec();
                        let cv = &mut mem.bufs[r][c.buffer as usize][co..co + cl];
                        matmul_bytes(
                            cv,
                            dt(c.buffer),
                            &av,
                            dt(a.buffer),
                            &bv,
                            dt(b.buffer),
                            (m, k, n),
                        );
                    }
                    Op::HostColl {
                        op: hop,
                        region,
                        members,
                    } => {
                        // Blocks until every member stands at a host collective of the same ordinal.
                        let ready = members.iter().all(|&m| {
                            let m = m as usize;
                            host_ord[m] == host_ord[r]
                                && pc[m] < plan.ranks[m].steps.len()
                                && matches!(plan.ranks[m].steps[pc[m]].op, Op::HostColl { .. })
                        });
                        if !ready {
                            break;
                        }
                        let d = dt(region.buffer);
                        let w = d.size();
                        let all: Vec<Vec<u8>> = members
                            .iter()
                            .map(|&m| {
                                let (off, n) = span(plan, sizes, m, region);
                                mem.bufs[m as usize][region.buffer as usize][off * w..(off + n) * w]
                                    .to_vec()
                            })
                            .collect();
                        for (i, &m) in members.iter().enumerate() {
                            let out = host_coll_result(*hop, types, op, d, &all, i);
                            let (off, n) = span(plan, sizes, m, region);
                            mem.bufs[m as usize][region.buffer as usize][off * w..(off + n) * w]
                                .copy_from_slice(&out);
                            if m as usize != r {
                                pc[m as usize] += 1;
                                host_ord[m as usize] += 1;
                            }
                        }
                        host_ord[r] += 1;
                    }
                }
                pc[r] += 1;
                progress = true;
            }
            if pc[r] == steps.len() && !finished[r] {
                finished[r] = true;
                progress = true;
                if op == ReduceOp::Avg && plan.collective.reduces() {
                    for (b, decl) in plan.buffers.iter().enumerate() {
                        if matches!(
                            decl.role,
                            symsched_plan::BufferRole::Output | symsched_plan::BufferRole::InOut
                        ) {
                            let d = dt(b as u32);
                            let w = d.size();
                            let buf = &mut mem.bufs[r][b];
                            for i in 0..buf.len() / w {
                                let a = acc_load(types.acc, d, &buf[i * w..(i + 1) * w]);
                                let out = acc_store(div_by(a, plan.group_size), d);
                                buf[i * w..(i + 1) * w].copy_from_slice(&out);
                            }
                        }
                    }
                }
                for u in &plan.ranks[r].exit_signals {
                    apply(signals, u);
                }
            }
        }
        if finished.iter().all(|f| *f) {
            return;
        }
        assert!(progress, "reference simulation deadlocked at {pc:?}");
    }
}

/// A plain move of the data region's length from `src` to `dst` (converting).
fn move_elems(
    mem: &mut Memory,
    plan: &Plan,
    sizes: &LaunchSizes,
    dt: &dyn Fn(u32) -> DType,
    (sr, src): (Rank, &Region),
    (dr, dst): (Rank, &Region),
    (lr, len_of): (Rank, &Region),
) {
    let (_, n) = span(plan, sizes, lr, len_of);
    let (soff, _) = span(plan, sizes, sr, src);
    let (doff, _) = span(plan, sizes, dr, dst);
    let (sd, dd) = (dt(src.buffer), dt(dst.buffer));
    let (sw, dw) = (sd.size(), dd.size());
    let data: Vec<u8> =
        mem.bufs[sr as usize][src.buffer as usize][soff * sw..(soff + n) * sw].to_vec();
    let out = &mut mem.bufs[dr as usize][dst.buffer as usize];
    for i in 0..n {
        let v = convert(sd, dd, &data[i * sw..(i + 1) * sw]);
        out[(doff + i) * dw..(doff + i + 1) * dw].copy_from_slice(&v);
    }
}
