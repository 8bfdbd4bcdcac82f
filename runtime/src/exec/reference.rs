//! Deterministic inputs, the sequential reference of every collective, and result comparison.
//!
//! Used by `symsched run --check` and the executor tests. The reference folds contributions in
//! rank order 0..P-1 in the accumulator type and rounds once, exactly like the collective's
//! postcondition (`docs/language-spec.md`), so a schedule that folds in rank order must match it
//! bit-exactly (f32/f64/integers). Fill values for 16-bit floats are quarter-integers in
//! [-2, 2], so their sums are exact and partial sums rounded to the data type at every hop still
//! match; with a low-precision wire the comparison gets a tolerance derived from the wire's
//! epsilon.

use super::dtype::{decode, encode, DType, ElemTypes};
use super::error::ExecError;
use super::reduce::{reduce_raw, scale_avg, Operand, ReduceOp};
use symsched_plan::{BufferRole, CollectiveKind, LaunchSizes, Plan};

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
    }
    Ok(out)
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
    if plan.hierarchy.is_some() && plan.collective.reduces() {
        // Hierarchical schedules fold inside a node first, then across nodes: a fixed order
        // (identical on every rank) but not the sequential one.
        tol += eps(types.acc).max(eps(types.data)) * 4.0 * p * p;
    }
    if types.wire != types.data {
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
        CollectiveKind::Broadcast | CollectiveKind::Reduce | CollectiveKind::Sendrecv => 1.0,
    }
}
