//! Deterministic inputs, the sequential reference of every collective, and result comparison.
//!
//! Used by `symsched run --check` and the executor tests. A reduced output chunk the plan's fold
//! table lists ([`symsched_plan::FoldTable`], the expression the verifier proved computes it) is
//! computed by that expression: its contributions folded in the proved order, rounded where the
//! schedule rounds (to the wire type, to the data type after a hop), so a correct schedule must
//! match bit for bit whatever its order. Other reduced outputs (a plan without a table, or an
//! expression with a framework reduction) fold contributions in rank order 0..P-1 in the
//! accumulator type and round once, like the collective's postcondition
//! (`docs/language-spec.md`). Fill values for 16-bit floats are quarter-integers in [-2, 2], so
//! their sums are exact; outside the table a low-precision wire or a hierarchical fold gets a
//! tolerance derived from the types' epsilon.

use super::dtype::{convert, decode, encode, DType, ElemTypes};
use super::error::ExecError;
use super::reduce::{reduce_raw, scale_avg, Operand, ReduceOp};
use std::collections::HashMap;
use symsched_plan::{BufferRole, CollectiveKind, FoldNode, LaunchSizes, Plan};

fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser: cheap, well-distributed, deterministic across platforms.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `n` deterministic elements of `dtype` for (rank, iteration, role), different for each.
pub fn fill(dtype: DType, rank: u32, iter: u64, role: usize, n: usize) -> Vec<u8> {
    let seed = mix(((rank as u64) << 40) ^ (iter << 8) ^ role as u64);
    let mut vals = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let h = mix(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let v = match dtype {
            // 24 random significant bits in [-4, 4): sums are inexact, so order matters.
            DType::F32 | DType::F64 => ((h >> 40) as f64) / (1u64 << 21) as f64 - 4.0,
            _ => ((h % 17) as f64 - 8.0) * 0.25,
        };
        vals.push(v);
    }
    let mut out = vec![0u8; n * dtype.size()];
    match dtype {
        DType::I32 => {
            for (i, v) in vals.iter().enumerate() {
                let x = (mix(seed ^ i as u64) % 2001) as i32 - 1000;
                out[i * 4..i * 4 + 4].copy_from_slice(&x.to_le_bytes());
                let _ = v;
            }
        }
        DType::I64 => {
            for i in 0..n {
                let x = (mix(seed ^ i as u64) % 200_001) as i64 - 100_000;
                out[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
            }
        }
        DType::U8 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = (mix(seed ^ i as u64) % 8) as u8;
            }
        }
        _ => out = encode(&vals, dtype),
    }
    out
}

/// Deterministic alltoallv counts `counts[sender][receiver]` in `0..=2n`, some zero.
pub fn counts_for(p: u32, n: u64) -> Vec<Vec<u64>> {
    (0..p as u64)
        .map(|s| {
            (0..p as u64)
                .map(|r| mix(s * 131 + r * 7 + n) % (2 * n + 1))
                .collect()
        })
        .collect()
}

/// Element counts of each role buffer on `rank`.
pub fn role_lens(plan: &Plan, rank: u32, sizes: &LaunchSizes) -> Result<Vec<u64>, ExecError> {
    plan.buffers
        .iter()
        .take_while(|b| b.role != BufferRole::Scratch)
        .map(|b| b.total_len(rank, sizes).map_err(ExecError::from))
        .collect()
}

fn fold(
    types: ElemTypes,
    op: ReduceOp,
    operands: &[&[u8]],
    p: u32,
    n: usize,
) -> Result<Vec<u8>, ExecError> {
    let dt = types.data;
    let mut out = vec![0u8; n * dt.size()];
    let srcs: Vec<Operand> = operands
        .iter()
        .map(|s| Operand {
            ptr: s.as_ptr(),
            dtype: dt,
        })
        .collect();
    let fold_op = if op == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        op
    };
    // SAFETY: every operand holds at least n elements (callers slice them so).
    unsafe {
        reduce_raw(types.acc, fold_op, out.as_mut_ptr(), dt, &srcs, n)?;
        if op == ReduceOp::Avg {
            scale_avg(types.acc, out.as_mut_ptr(), dt, n, p);
        }
    }
    Ok(out)
}

fn matmul_ref(dt: DType, a: &[u8], b: &[u8], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut av = vec![0f64; m * k];
    let mut bv = vec![0f64; k * n];
    decode(dt, a, &mut av);
    decode(dt, b, &mut bv);
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for t in 0..k {
            for j in 0..n {
                c[i * n + j] += av[i * k + t] * bv[t * n + j];
            }
        }
    }
    c
}

// Rank-indexed loops read several per-rank tables at once; indices are clearer than zips.
#[allow(clippy::needless_range_loop)]
/// Expected contents of every role buffer on every rank after one launch, given each rank's
/// contents before it (`before[rank][role]`, in the data dtype). `None` = unspecified.
pub fn expected(
    plan: &Plan,
    types: ElemTypes,
    op: ReduceOp,
    sizes: &LaunchSizes,
    before: &[Vec<Vec<u8>>],
) -> Result<Vec<Vec<Option<Vec<u8>>>>, ExecError> {
    let p = plan.group_size;
    let pu = p as usize;
    let es = types.data.size();
    let var = |v: &str| -> u64 { sizes.vars.get(v).copied().unwrap_or(0) };
    let param = |k: &str| -> usize { plan.params.get(k).copied().unwrap_or(0).max(0) as usize };
    let mut out: Vec<Vec<Option<Vec<u8>>>> = before
        .iter()
        .map(|roles| roles.iter().map(|b| Some(b.clone())).collect())
        .collect();
    let blk = |v: &[u8], j: usize, len: usize| -> Vec<u8> {
        v[j * len * es..(j + 1) * len * es].to_vec()
    };
    match plan.collective {
        CollectiveKind::Allgather => {
            let n = var("n") as usize;
            for r in 0..pu {
                out[r][1] = Some((0..pu).flat_map(|j| before[j][0].clone()).collect());
            }
            let _ = n;
        }
        CollectiveKind::ReduceScatter => {
            let n = var("n") as usize;
            for r in 0..pu {
                let ops: Vec<Vec<u8>> = (0..pu).map(|j| blk(&before[j][0], r, n)).collect();
                let refs: Vec<&[u8]> = ops.iter().map(|v| v.as_slice()).collect();
                out[r][1] = Some(fold(types, op, &refs, p, n)?);
            }
        }
        CollectiveKind::Allreduce => {
            let n = var("n") as usize;
            let refs: Vec<&[u8]> = (0..pu).map(|j| before[j][0].as_slice()).collect();
            let v = fold(types, op, &refs, p, n)?;
            for o in out.iter_mut() {
                o[0] = Some(v.clone());
            }
        }
        CollectiveKind::Alltoall => {
            let n = var("n") as usize;
            for r in 0..pu {
                out[r][1] = Some((0..pu).flat_map(|j| blk(&before[j][0], r, n)).collect());
            }
        }
        CollectiveKind::Alltoallv => {
            let counts = sizes
                .counts
                .as_ref()
                .ok_or_else(|| ExecError::MissingCounts(plan.schedule.clone()))?;
            for r in 0..pu {
                let mut v = Vec::new();
                for (j, row) in counts.iter().enumerate().take(pu) {
                    let off: u64 = row[..r].iter().sum();
                    let len = row[r];
                    v.extend_from_slice(
                        &before[j][0][off as usize * es..(off + len) as usize * es],
                    );
                }
                out[r][1] = Some(v);
            }
        }
        CollectiveKind::Broadcast => {
            let root = param("root");
            for r in 0..pu {
                out[r][0] = Some(before[root][0].clone());
            }
        }
        CollectiveKind::Reduce => {
            let root = param("root");
            let n = var("n") as usize;
            let refs: Vec<&[u8]> = (0..pu).map(|j| before[j][0].as_slice()).collect();
            let v = fold(types, op, &refs, p, n)?;
            for (r, o) in out.iter_mut().enumerate() {
                o[0] = (r == root).then(|| v.clone());
            }
        }
        CollectiveKind::Sendrecv => {
            let (src, dst) = (param("src"), param("dst"));
            out[dst][0] = Some(before[src][0].clone());
        }
        CollectiveKind::AllgatherMatmul => {
            let (m, k, n) = (var("m") as usize, var("k") as usize, var("n") as usize);
            for r in 0..pu {
                out[r][2] = Some((0..pu).flat_map(|j| before[j][0].clone()).collect());
                let mut c = Vec::new();
                for j in 0..pu {
                    c.extend(matmul_ref(
                        types.data,
                        &before[j][0],
                        &before[r][1],
                        m,
                        k,
                        n,
                    ));
                }
                out[r][3] = Some(encode(&c, types.data));
            }
        }
        CollectiveKind::MatmulReduceScatter => {
            let (m, k, n) = (var("m") as usize, var("k") as usize, var("n") as usize);
            for r in 0..pu {
                // Each rank's partial product is rounded to the data type, then folded with the
                // launch op in rank order.
                let parts: Vec<Vec<u8>> = (0..pu)
                    .map(|j| {
                        let a = blk(&before[j][0], r, m * k);
                        encode(
                            &matmul_ref(types.data, &a, &before[j][1], m, k, n),
                            types.data,
                        )
                    })
                    .collect();
                let refs: Vec<&[u8]> = parts.iter().map(|v| v.as_slice()).collect();
                out[r][2] = Some(fold(types, op, &refs, p, m * n)?);
            }
        }
        CollectiveKind::Declared { .. } => declared(plan, types, op, sizes, before, &mut out)?,
    }
    proved_folds(plan, types, op, sizes, before, &mut out)?;
    // An input role the schedule declares `inout` may be overwritten: no promise after the call.
    for (i, b) in plan.buffers.iter().enumerate() {
        let declared_input = plan.declared.as_ref().is_some_and(|d| {
            d.roles
                .get(i)
                .is_some_and(|r| r.access == BufferRole::Input)
        });
        if b.role == BufferRole::InOut && (declared_input || signature_input(plan.collective, i)) {
            for o in out.iter_mut() {
                if let Some(slot) = o.get_mut(i) {
                    *slot = None;
                }
            }
        }
    }
    Ok(out)
}

/// A declared collective's outputs from its chunk map: a copied block is its source, a reduced
/// one the rank-order fold of its sources (divided by P for `avg`, as the executor does for
/// every output of a reducing collective); blocks the map does not specify are unspecified.
fn declared(
    plan: &Plan,
    types: ElemTypes,
    op: ReduceOp,
    sizes: &LaunchSizes,
    before: &[Vec<Vec<u8>>],
    out: &mut [Vec<Option<Vec<u8>>>],
) -> Result<(), ExecError> {
    let d = plan
        .declared
        .as_ref()
        .ok_or_else(|| ExecError::Runtime("a declared collective without its chunk map".into()))?;
    let es = types.data.size();
    let n = sizes.vars.get("n").copied().unwrap_or(0) as usize;
    let block = |rank: u32, role: u32, j: u32| -> Result<&[u8], ExecError> {
        let v = before
            .get(rank as usize)
            .and_then(|r| r.get(role as usize))
            .ok_or_else(|| ExecError::Runtime("declared source of a missing role".into()))?;
        v.get(j as usize * n * es..(j as usize + 1) * n * es)
            .ok_or_else(|| ExecError::Runtime("declared source block past its role".into()))
    };
    for (i, role) in d.roles.iter().enumerate() {
        if role.access == BufferRole::Input {
            continue;
        }
        for (r, o) in out.iter_mut().enumerate() {
            let specified = d.post_of(i as u32, r as u32);
            let Some(slot) = o.get_mut(i) else {
                continue;
            };
            if specified.len() != role.blocks as usize {
                // Some block is unspecified: the comparison skips the role on this rank.
                *slot = None;
                continue;
            }
            let Some(buf) = slot.as_mut() else {
                continue;
            };
            for b in specified {
                let srcs = b
                    .sources
                    .iter()
                    .map(|s| block(s.rank, s.role, s.block))
                    .collect::<Result<Vec<&[u8]>, _>>()?;
                let v = if b.reduce {
                    fold(types, op, &srcs, plan.group_size, n)?
                } else {
                    srcs[0].to_vec()
                };
                let j = b.at.block as usize;
                if let Some(dst) = buf.get_mut(j * n * es..(j + 1) * n * es) {
                    dst.copy_from_slice(&v);
                }
            }
        }
    }
    Ok(())
}

/// Whether role `i` of `kind` is an input of its signature (an `inout` declaration makes it
/// in-out in the plan).
fn signature_input(kind: CollectiveKind, i: usize) -> bool {
    match kind {
        CollectiveKind::Allgather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::Alltoall
        | CollectiveKind::Alltoallv => i == 0,
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter => i <= 1,
        _ => false,
    }
}

/// Whether every reduced output of the plan is in its fold table and reproducible, so the
/// reference follows the schedule's own order and roundings everywhere.
pub fn follows_proved_folds(plan: &Plan) -> bool {
    let t = &plan.folds;
    plan.collective.reduces() && !t.is_empty() && t.outputs.iter().all(|o| t.reproducible(o.node))
}

/// The order the reference assumed for one output chunk, for a failing comparison's message:
/// the proved fold from the plan's table, or the rank-order fold.
pub fn assumed_order(plan: &Plan, rank: u32, buffer: u32, chunk: u32) -> String {
    let name = |b: u32| {
        plan.buffers
            .get(b as usize)
            .map_or_else(|| "?".to_string(), |x| x.name.clone())
    };
    match plan.folds.output(rank, buffer, chunk) {
        Some(node) if plan.folds.reproducible(node) => format!(
            "the fold the verifier proved: {}",
            plan.folds
                .describe(node, &name, 3 * plan.group_size as usize + 8)
        ),
        Some(node) => format!(
            "rank order 0..P-1 with a tolerance (the proved fold has a framework reduction: {})",
            plan.folds
                .describe(node, &name, 3 * plan.group_size as usize + 8)
        ),
        None => "rank order 0..P-1 (the sequential fold)".to_string(),
    }
}

/// Overwrite every reduced output chunk the fold table lists (and can reproduce) with the value
/// of its proved expression.
fn proved_folds(
    plan: &Plan,
    types: ElemTypes,
    op: ReduceOp,
    sizes: &LaunchSizes,
    before: &[Vec<Vec<u8>>],
    out: &mut [Vec<Option<Vec<u8>>>],
) -> Result<(), ExecError> {
    let t = &plan.folds;
    if t.is_empty() || !plan.collective.reduces() {
        return Ok(());
    }
    let fold_op = if op == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        op
    };
    let class_dtype = |n: u32| -> DType {
        match &t.nodes[n as usize] {
            FoldNode::Fold { class, .. } | FoldNode::Convert { class, .. } => types.of(*class),
            _ => types.data,
        }
    };
    // Values by (node, length): one node is one chunk, shared by every rank holding it.
    let mut memo: HashMap<(u32, usize), Vec<u8>> = HashMap::new();
    for o in &t.outputs {
        if !t.reproducible(o.node) {
            continue;
        }
        let b = plan
            .buffers
            .get(o.buffer as usize)
            .ok_or_else(|| ExecError::Runtime("fold output of a missing buffer".into()))?;
        let span = b.chunk_span(o.chunk, o.rank, sizes)?;
        let len = span.len as usize;
        // Children before parents: the table lists nodes in that order.
        let mut stack = vec![(o.node, false)];
        while let Some((n, ready)) = stack.pop() {
            if memo.contains_key(&(n, len)) {
                continue;
            }
            let node = &t.nodes[n as usize];
            let kids: Vec<u32> = match node {
                FoldNode::Fold { operands, .. } => operands.clone(),
                FoldNode::Convert { of, .. } => vec![*of],
                _ => Vec::new(),
            };
            if !ready && !kids.is_empty() {
                stack.push((n, true));
                stack.extend(kids.iter().map(|&k| (k, false)));
                continue;
            }
            let dt = class_dtype(n);
            let v = match node {
                FoldNode::Input {
                    rank,
                    buffer,
                    chunk,
                } => {
                    let ib = &plan.buffers[*buffer as usize];
                    let s = ib.chunk_span(*chunk, *rank, sizes)?;
                    let es = types.data.size();
                    let src = before
                        .get(*rank as usize)
                        .and_then(|r| r.get(*buffer as usize))
                        .ok_or_else(|| ExecError::Runtime("fold input of a missing role".into()))?;
                    let (a, z) = (s.offset as usize * es, (s.offset as usize + len) * es);
                    if s.len < len as u64 || z > src.len() {
                        return Err(ExecError::Runtime(format!(
                            "fold input chunk {chunk} of `{}` on rank {rank} is shorter than its output",
                            ib.name
                        )));
                    }
                    src[a..z].to_vec()
                }
                FoldNode::Convert { of, .. } => {
                    let from = class_dtype(*of);
                    let src = &memo[&(*of, len)];
                    let mut v = vec![0u8; len * dt.size()];
                    // SAFETY: `src` holds `len` elements of `from`, `v` as many of `dt`.
                    unsafe { convert(from, src.as_ptr(), dt, v.as_mut_ptr(), len) };
                    v
                }
                FoldNode::Fold { operands, .. } => {
                    let srcs: Vec<Operand> = operands
                        .iter()
                        .map(|&k| Operand {
                            ptr: memo[&(k, len)].as_ptr(),
                            dtype: class_dtype(k),
                        })
                        .collect();
                    let mut v = vec![0u8; len * dt.size()];
                    // SAFETY: every operand holds `len` elements of its dtype, `v` of `dt`.
                    unsafe { reduce_raw(types.acc, fold_op, v.as_mut_ptr(), dt, &srcs, len)? };
                    v
                }
                FoldNode::Library { .. } => unreachable!("checked reproducible"),
            };
            memo.insert((n, len), v);
        }
        let mut v = memo[&(o.node, len)].clone();
        let dt = class_dtype(o.node);
        if dt != types.data {
            let mut w = vec![0u8; len * types.data.size()];
            // SAFETY: `v` holds `len` elements of `dt`, `w` as many of the data type.
            unsafe { convert(dt, v.as_ptr(), types.data, w.as_mut_ptr(), len) };
            v = w;
        }
        if op == ReduceOp::Avg {
            // SAFETY: `v` holds `len` elements of the data type.
            unsafe { scale_avg(types.acc, v.as_mut_ptr(), types.data, len, plan.group_size) };
        }
        let es = types.data.size();
        if let Some(Some(dst)) = out
            .get_mut(o.rank as usize)
            .and_then(|r| r.get_mut(o.buffer as usize))
        {
            let a = span.offset as usize * es;
            if a + v.len() <= dst.len() {
                dst[a..a + v.len()].copy_from_slice(&v);
            }
        }
    }
    Ok(())
}

/// Allowed absolute error per element for this launch (0 = bit-exact).
pub fn tolerance(plan: &Plan, types: ElemTypes, sizes: &LaunchSizes) -> f64 {
    let eps = |d: DType| -> f64 {
        match d {
            DType::F32 => 2f64.powi(-23),
            DType::F64 => 2f64.powi(-52),
            DType::F16 => 2f64.powi(-10),
            DType::Bf16 => 2f64.powi(-7),
            DType::F8E4M3 => 2f64.powi(-3),
            DType::F8E5M2 => 2f64.powi(-2),
            _ => 0.0,
        }
    };
    let p = plan.group_size as f64;
    let mut tol = 0.0;
    if matches!(
        plan.collective,
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter
    ) {
        let k = sizes.vars.get("k").copied().unwrap_or(1) as f64;
        // Products of values up to 4 summed over k (and P) terms, each rounding once or twice.
        tol += eps(types.data).max(eps(types.acc)) * 16.0 * k * p * 4.0;
    }
    let exact = follows_proved_folds(plan);
    if plan.hierarchy.is_some() && plan.collective.reduces() && !exact {
        // Hierarchical schedules fold inside a node first, then across nodes: a fixed order
        // (identical on every rank) but not the sequential one.
        tol += eps(types.acc).max(eps(types.data)) * 4.0 * p * p;
    }
    if types.wire != types.data && !exact {
        // Every contribution and partial sum (magnitude ≤ 4·P) may be rounded to the wire.
        tol += eps(types.wire) * 4.0 * p * (p + 1.0);
    }
    tol
}

/// Number of elements of `got` that differ from `want` by more than `tol` (bitwise when
/// `tol == 0`; NaNs equal NaNs).
pub fn count_wrong(dtype: DType, got: &[u8], want: &[u8], tol: f64) -> u64 {
    if got.len() != want.len() {
        return (got.len().max(want.len()) / dtype.size()) as u64;
    }
    let n = got.len() / dtype.size();
    if tol == 0.0 || !dtype.is_float() {
        let es = dtype.size();
        return (0..n)
            .filter(|i| got[i * es..(i + 1) * es] != want[i * es..(i + 1) * es])
            .filter(|i| !(dtype.is_float() && both_nan(dtype, got, want, *i)))
            .count() as u64;
    }
    let mut g = vec![0f64; n];
    let mut w = vec![0f64; n];
    decode(dtype, got, &mut g);
    decode(dtype, want, &mut w);
    g.iter()
        .zip(&w)
        .filter(|(a, b)| !((a.is_nan() && b.is_nan()) || (*a - *b).abs() <= tol))
        .count() as u64
}

/// Index of the first element of `got` that differs from `want` by more than `tol` (as
/// [`count_wrong`] counts them).
pub fn first_wrong(dtype: DType, got: &[u8], want: &[u8], tol: f64) -> Option<usize> {
    let es = dtype.size();
    let n = got.len().min(want.len()) / es;
    (0..n)
        .find(|&i| {
            let (a, b) = (&got[i * es..(i + 1) * es], &want[i * es..(i + 1) * es]);
            count_wrong(dtype, a, b, tol) > 0
        })
        .or_else(|| (got.len() != want.len()).then_some(n))
}

fn both_nan(dtype: DType, a: &[u8], b: &[u8], i: usize) -> bool {
    let es = dtype.size();
    let (mut x, mut y) = ([0f64], [0f64]);
    decode(dtype, &a[i * es..], &mut x);
    decode(dtype, &b[i * es..], &mut y);
    x[0].is_nan() && y[0].is_nan()
}

/// nccl-tests bus-bandwidth factor for a collective on `p` ranks.
pub fn bus_factor(kind: CollectiveKind, p: u32) -> f64 {
    let p = p as f64;
    match kind {
        CollectiveKind::Allreduce => 2.0 * (p - 1.0) / p,
        CollectiveKind::Allgather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::Alltoall
        | CollectiveKind::Alltoallv
        | CollectiveKind::AllgatherMatmul
        | CollectiveKind::MatmulReduceScatter => (p - 1.0) / p,
        CollectiveKind::Broadcast
        | CollectiveKind::Reduce
        | CollectiveKind::Sendrecv
        | CollectiveKind::Declared { .. } => 1.0,
    }
}
