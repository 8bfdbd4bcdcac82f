//! What the templates need beyond the step table for the two steps that are not plain data
//! movement: `matmul` (the Cube unit reads the launch's `m`, `k`, `n`) and `hostcoll` (the
//! kernel runs in launch segments and the launch stub calls the framework's collective library,
//! HCCL, between them, because a kernel cannot call a host collective).

use super::{expr, table, BufView, Classes};
use crate::{DType, KernelError, LowerOptions, ReduceOp};
use symsched_plan::{Extent, Op, Plan};

/// One buffer as the host side of the launch stub sees it (only buffers host collectives use
/// need it, but every buffer gets an entry so indices match the kernel's).
pub struct HostBuf {
    pub index: usize,
    /// 0 split, 1 uniform (counts extents are refused for host collectives).
    pub extent_kind: u32,
    pub extent_expr: String,
    pub chunks: u32,
    pub elem_bytes: u64,
    /// `HcclDataType` enumerator of the buffer's element type.
    pub hccl_type: &'static str,
}

/// One host collective of one rank: run after launch segment `segment` of that rank.
pub struct HostCall {
    pub rank: u32,
    pub segment: u32,
    /// 0 allreduce, 1 allgather, 2 reduce_scatter, 3 broadcast (see `table::hostcoll_code`).
    pub op: i32,
    pub buf: u32,
    pub first: u32,
    pub count: u32,
    /// Position of the call among the rank's host collectives (= the runtime's ordinal).
    pub ordinal: u32,
    /// Offset of the members in [`Extras::members`] and how many there are.
    pub members_at: usize,
    pub n_members: usize,
    /// This rank's position among the members.
    pub member_index: usize,
    pub doc: String,
}

/// Template inputs for matmul and hostcoll plans.
pub struct Extras {
    pub has_matmul: bool,
    /// C expressions of the size variables `m`, `k`, `n` (empty without matmul).
    pub mm_m: String,
    pub mm_k: String,
    pub mm_n: String,
    /// `m` over a host array `sizes` (the workspace size function).
    pub mm_m_host: String,
    /// `blockDim` of the launch: channels × the option's cores per channel.
    pub block_dim: u32,
    /// Channels per rank ([`Plan::channel_count`]); the templates add the channel mapping only
    /// when it is more than 1, so single-channel kernels stay as they were.
    pub channels: u32,
    /// Vector cores (AIVs) of one channel: the option's `block_dim`.
    pub channel_cores: u32,
    pub has_hostcoll: bool,
    pub host_bufs: Vec<HostBuf>,
    pub calls: Vec<HostCall>,
    /// Every call's members, flattened (C initializer list).
    pub members: String,
    pub n_member_words: usize,
    /// `HcclReduceOp` enumerator of the launch's reduce op (`avg` folds as a sum, as in the
    /// runtime's host collectives; the division happens once at the end of the launch).
    pub hccl_reduce: &'static str,
    /// Most host collectives of one rank (segments per launch = this + 1).
    pub max_calls: usize,
}

fn hccl_type(t: DType) -> Option<&'static str> {
    Some(match t {
        DType::F32 => "HCCL_DATA_TYPE_FP32",
        DType::F16 => "HCCL_DATA_TYPE_FP16",
        DType::Bf16 => "HCCL_DATA_TYPE_BFP16",
        DType::F64 => "HCCL_DATA_TYPE_FP64",
        DType::I32 => "HCCL_DATA_TYPE_INT32",
        DType::I64 => "HCCL_DATA_TYPE_INT64",
        _ => return None,
    })
}

/// Collect the extras of `plan` (already encoded into a table, so its steps are supported).
pub fn extras(
    plan: &Plan,
    classes: &Classes,
    opts: &LowerOptions,
    bufs: &[BufView],
) -> Result<Extras, KernelError> {
    let has_matmul = plan
        .ranks
        .iter()
        .any(|r| r.steps.iter().any(|s| matches!(s.op, Op::Matmul { .. })));
    let dim = |v: &str| -> Result<String, KernelError> {
        if has_matmul {
            expr::to_c(&symsched_plan::SizeExpr::var(v), &plan.size_vars)
        } else {
            Ok(String::new())
        }
    };
    let mut x = Extras {
        has_matmul,
        mm_m: dim("m")?,
        mm_k: dim("k")?,
        mm_n: dim("n")?,
        mm_m_host: if has_matmul {
            expr::to_c_over(&symsched_plan::SizeExpr::var("m"), &plan.size_vars, "sizes")?
        } else {
            String::new()
        },
        block_dim: opts.block_dim * plan.channel_count(),
        channels: plan.channel_count(),
        channel_cores: opts.block_dim,
        has_hostcoll: false,
        host_bufs: Vec::new(),
        calls: Vec::new(),
        members: String::new(),
        n_member_words: 0,
        hccl_reduce: match opts.op {
            ReduceOp::Max => "HCCL_REDUCE_MAX",
            ReduceOp::Min => "HCCL_REDUCE_MIN",
            _ => "HCCL_REDUCE_SUM",
        },
        max_calls: 0,
    };
    let mut members: Vec<String> = Vec::new();
    for prog in &plan.ranks {
        let mut ordinal = 0u32;
        for step in &prog.steps {
            let Op::HostColl {
                op,
                region,
                members: ms,
            } = &step.op
            else {
                continue;
            };
            let member_index = ms.iter().position(|m| *m == prog.rank).ok_or_else(|| {
                KernelError::Unsupported {
                    what: "a hostcoll whose members do not include the rank itself".into(),
                    rank: prog.rank,
                    step: step.id,
                }
            })?;
            x.calls.push(HostCall {
                rank: prog.rank,
                segment: ordinal,
                op: table::hostcoll_code(*op),
                buf: region.buffer,
                first: region.first,
                count: region.count,
                ordinal,
                members_at: members.len(),
                n_members: ms.len(),
                member_index,
                doc: format!(
                    "r{} s{}: {:?} of {}[{}..{}] over {:?}",
                    prog.rank,
                    step.id,
                    op,
                    plan.buffers[region.buffer as usize].name,
                    region.first,
                    region.first + region.count,
                    ms
                ),
            });
            members.extend(ms.iter().map(|m| m.to_string()));
            ordinal += 1;
        }
        x.max_calls = x.max_calls.max(ordinal as usize);
    }
    x.has_hostcoll = !x.calls.is_empty();
    if x.has_hostcoll {
        for (b, decl) in bufs.iter().zip(&plan.buffers) {
            let t = classes.of(decl.elem);
            let used = x.calls.iter().any(|c| c.buf as usize == b.index);
            let kind = match decl.extent {
                Extent::Split { .. } => 0,
                Extent::Uniform { .. } => 1,
                Extent::Counts { .. } => 2,
                // The host stub's span rule knows splits and uniform chunks only.
                Extent::Blocks { .. } if used => {
                    return Err(KernelError::Unsupported {
                        what: format!(
                            "a hostcoll on `{}`, which has K chunks per block",
                            decl.name
                        ),
                        rank: 0,
                        step: 0,
                    })
                }
                Extent::Blocks { .. } => 4,
            };
            let ht = match hccl_type(t) {
                Some(h) => h,
                None if !used => "HCCL_DATA_TYPE_INT8",
                None => {
                    return Err(KernelError::Unsupported {
                        what: format!("a hostcoll on {t} data (HCCL has no such type)"),
                        rank: 0,
                        step: 0,
                    })
                }
            };
            x.host_bufs.push(HostBuf {
                index: b.index,
                extent_kind: kind,
                extent_expr: b.extent_expr.clone(),
                chunks: b.chunks,
                elem_bytes: t.size(),
                hccl_type: ht,
            });
        }
    }
    x.n_member_words = members.len().max(1);
    x.members = if members.is_empty() {
        "0".into()
    } else {
        members.join(", ")
    };
    Ok(x)
}

/// Bytes of GM workspace one rank's launch needs for `sizes`: the Cube cores write the partial
/// last 16-column block of every matmul product row there (m x 16 elements of at most 4 bytes);
/// 0 for plans without matmul steps.
pub fn workspace_bytes(
    plan: &Plan,
    sizes: &symsched_plan::LaunchSizes,
) -> Result<u64, KernelError> {
    let has_matmul = plan
        .ranks
        .iter()
        .any(|r| r.steps.iter().any(|s| matches!(s.op, Op::Matmul { .. })));
    if !has_matmul {
        return Ok(0);
    }
    let m = *sizes
        .vars
        .get("m")
        .ok_or_else(|| KernelError::Run("size variable `m` has no value".into()))?;
    m.checked_mul(64)
        .ok_or_else(|| KernelError::Run(format!("m = {m} overflows the workspace size")))
}
