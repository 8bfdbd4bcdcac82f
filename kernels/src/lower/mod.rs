//! Lowering a verified plan to Ascend C.
//!
//! The generated kernel is generic over the plan: every rank's steps are encoded as rows of a
//! step table (see [`table`]) that one SPMD kernel interprets after reading its team rank, so
//! the source stays the same size at P = 64 as at P = 2. What is plan-specific in code is small:
//! the buffers' element classes and chunk extents (size expressions become C expressions over
//! the kernel's size-variable argument, evaluated at run time, so one kernel serves every n),
//! the element types, the reduce op and the UB budget (a template parameter of the kernel class).

pub mod expr;
pub mod extras;
pub mod project;
pub mod table;

pub use extras::workspace_bytes;

use crate::{DType, KernelError, KernelOp, ReduceOp};
use askama::Template;
use symsched_plan::{CountsMatrix, ElemClass, Extent, Plan, Region};

/// Launch types and budget a kernel is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LowerOptions {
    /// The user's dtype (buffers of class `data`).
    pub dtype: DType,
    /// The wire dtype (class `wire`); equal to `dtype` when no low-precision transport is used.
    pub wire: DType,
    pub op: ReduceOp,
    /// Unified-buffer bytes the kernel's tiles may use (the `UbBytes` template argument).
    pub ub_bytes: u32,
    /// Vector cores (AIVs) each step's data is split over (`blockDim`); kernels with matmul
    /// steps launch as many AI Cores, each one Cube core (AIC) and one AIV.
    pub block_dim: u32,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            dtype: DType::F32,
            wire: DType::F32,
            op: ReduceOp::Sum,
            ub_bytes: DEFAULT_UB_BYTES,
            block_dim: 1,
        }
    }
}

/// Cores per rank the simulation runs (`kMaxCores` in `sim/symsched_sim_pipes.h`).
pub const SIM_MAX_CORES: u32 = 24;

/// Most vector cores a kernel may be split over.
pub const MAX_BLOCK_DIM: u32 = 16;

/// Most AI Cores a kernel with matmul steps may run on: each is one Cube core and two vector
/// cores (`KERNEL_TYPE_MIX_AIC_1_2`).
pub const MAX_MIXED_BLOCK_DIM: u32 = SIM_MAX_CORES / 3;

/// Default UB budget: 96 KiB, half of an Atlas A2 vector core's 192 KiB, leaving room for the
/// shmem library's own MTE staging buffer (`aclshmemx_set_mte_config`).
pub const DEFAULT_UB_BYTES: u32 = 96 * 1024;

/// Concrete dtype of each element class.
#[derive(Debug, Clone, Copy)]
pub struct Classes {
    pub data: DType,
    pub wire: DType,
    pub acc: DType,
}

impl Classes {
    pub fn of(&self, c: ElemClass) -> DType {
        match c {
            ElemClass::Data => self.data,
            ElemClass::Wire => self.wire,
            ElemClass::Acc => self.acc,
        }
    }

    /// Whether moving `src` to `dst` converts element types.
    pub fn differ(&self, plan: &Plan, src: &Region, dst: &Region) -> bool {
        self.of(table::class_of(plan, src)) != self.of(table::class_of(plan, dst))
    }
}

/// The generated files of one kernel.
#[derive(Debug, Clone)]
pub struct Lowered {
    /// C identifier of the kernel (also the file stem).
    pub name: String,
    /// `<name>_kernel.cpp`: the device code.
    pub kernel: String,
    /// `<name>_table.h`: the step table (host data, copied to device memory by the stub).
    pub table: String,
    /// `<name>_launch.cpp`: the host launch stub (`<<<blockDim, nullptr, stream>>>`).
    pub launch: String,
    /// `<name>.h`: the C header frameworks include.
    pub header: String,
    /// `<name>_sim.cpp`: the simulation entry point (`symsched_sim_launch`), not for CANN.
    pub sim_entry: String,
    /// `CMakeLists.txt`: the CANN build of the stub and kernel (see [`project`]).
    pub cmake: String,
    /// The encoded table, for tests and tools.
    pub table_data: table::Table,
    /// Number of buffers (kernel GM_ADDR buffer arguments, in plan order).
    pub n_buffers: usize,
}

impl Lowered {
    /// `(file name, contents)` of the files `symsched compile --emit ascendc` writes.
    pub fn files(&self) -> Vec<(String, &str)> {
        vec![
            (format!("{}_kernel.cpp", self.name), self.kernel.as_str()),
            (format!("{}_table.h", self.name), self.table.as_str()),
            (format!("{}_launch.cpp", self.name), self.launch.as_str()),
            (format!("{}.h", self.name), self.header.as_str()),
        ]
    }

    /// [`Lowered::files`] plus the build files CANN expects beside them: what
    /// `symsched compile --emit ascendc -o DIR` writes.
    pub fn project_files(&self) -> Vec<(String, &str)> {
        let mut v = self.files();
        v.push((project::CMAKE_FILE.to_string(), self.cmake.as_str()));
        v
    }
}

/// A buffer as the templates see it.
pub struct BufView {
    pub index: usize,
    pub name: String,
    pub role: String,
    pub class: String,
    pub class_code: u32,
    pub chunks: u32,
    /// 0 split, 1 uniform, 2 counts-send, 3 counts-recv, 4 blocks (K chunks per block).
    pub extent_kind: u32,
    /// C expression: the split total, the uniform chunk size or the block size ("0ull" for
    /// counts).
    pub extent_expr: String,
    /// Chunks per block of a blocks extent (`chunks` otherwise).
    pub block_chunks: u32,
    pub extent_doc: String,
}

#[derive(Template)]
#[template(path = "kernel.cpp", escape = "none")]
struct KernelTpl<'a> {
    name: &'a str,
    plan: &'a Plan,
    opts: &'a LowerOptions,
    classes: &'a Classes,
    bufs: &'a [BufView],
    n_size_vars: usize,
    size_var_doc: String,
    reduce_call: &'a str,
    x: &'a extras::Extras,
    /// Whether the kernel ends with the `avg` division pass (avg on a reducing collective).
    avg: bool,
    /// Whether some buffer has K chunks per block (then the kernel has the blocks extent rule).
    has_blocks: bool,
    version: &'a str,
}

#[derive(Template)]
#[template(path = "table.h", escape = "none")]
struct TableTpl<'a> {
    name: &'a str,
    plan: &'a Plan,
    header_words: String,
    rows: Vec<(String, String)>,
    n_words: usize,
    /// Channels per rank (the layout of `first_row`).
    channels: u32,
}

#[derive(Template)]
#[template(path = "launch.cpp", escape = "none")]
struct LaunchTpl<'a> {
    name: &'a str,
    bufs: &'a [BufView],
    x: &'a extras::Extras,
}

#[derive(Template)]
#[template(path = "header.h", escape = "none")]
struct HeaderTpl<'a> {
    name: &'a str,
    upper: String,
    plan: &'a Plan,
    opts: &'a LowerOptions,
    bufs: &'a [BufView],
    size_var_doc: String,
    n_signals: usize,
    x: &'a extras::Extras,
}

#[derive(Template)]
#[template(path = "sim_entry.cpp", escape = "none")]
struct SimTpl<'a> {
    name: &'a str,
    bufs: &'a [BufView],
    x: &'a extras::Extras,
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The kernel name for a plan and options.
pub fn kernel_name(plan: &Plan, opts: &LowerOptions) -> String {
    let mut params = String::new();
    for (k, v) in &plan.params {
        params.push_str(&format!("_{}{}", sanitize(k), v));
    }
    let mut blocks = if opts.block_dim > 1 {
        format!("_b{}", opts.block_dim)
    } else {
        String::new()
    };
    if plan.channel_count() > 1 {
        blocks.push_str(&format!("_c{}", plan.channel_count()));
    }
    format!(
        "symsched_{}{}_p{}_{}_{}_{}{}",
        sanitize(&plan.schedule),
        params,
        plan.group_size,
        opts.dtype,
        opts.wire,
        opts.op,
        blocks
    )
}

/// What a plan with more than one channel per rank may not combine with.
fn check_channels(
    channels: u32,
    opts: &LowerOptions,
    x: &extras::Extras,
) -> Result<(), KernelError> {
    let what = if opts.block_dim > 1 {
        // The cores of one channel would have to meet before every signal; the only barrier
        // over chosen vector cores (mode-0 CrossCoreSetFlag) spans every vector core of the
        // launch, which would make each channel wait for the others and can deadlock them.
        format!(
            "blockDim {} per channel (each channel runs on one vector core)",
            opts.block_dim
        )
    } else if x.has_matmul {
        // The Cube cores take every matmul row from all vector cores at once.
        "matmul steps".to_string()
    } else if x.has_hostcoll {
        // A host collective ends the launch segment of every core, whatever its channel.
        "host collectives".to_string()
    } else {
        return Ok(());
    };
    Err(KernelError::Channels { channels, what })
}

/// Lower `plan` (already verified) for the given launch types.
pub fn lower(plan: &Plan, opts: &LowerOptions) -> Result<Lowered, KernelError> {
    plan.check_consistency()?;
    if opts.ub_bytes < 1024 {
        return Err(KernelError::UbBudget(opts.ub_bytes));
    }
    if opts.block_dim == 0 || opts.block_dim > MAX_BLOCK_DIM {
        return Err(KernelError::BlockDim {
            block_dim: opts.block_dim,
            max: MAX_BLOCK_DIM,
            cores: "vector cores",
        });
    }
    let channels = plan.channel_count();
    // Channel c of a rank runs on launch cores c·block_dim .. (c+1)·block_dim - 1, so the
    // launch's blockDim is channels × block_dim (see docs/ascendc.md, "Channels").
    let cores = channels.saturating_mul(opts.block_dim);
    if channels > 1 && cores > MAX_BLOCK_DIM {
        return Err(KernelError::ChannelCores {
            channels,
            block_dim: opts.block_dim,
            cores,
            max: MAX_BLOCK_DIM,
            what: "vector cores",
        });
    }
    if !opts.dtype.is_data() || !opts.dtype.can_travel_as(opts.wire) {
        return Err(KernelError::Types {
            data: opts.dtype.name(),
            wire: opts.wire.name(),
        });
    }
    let classes = Classes {
        data: opts.dtype,
        wire: opts.wire,
        acc: opts.dtype.accumulator(),
    };
    let name = kernel_name(plan, opts);
    let mut bufs = Vec::with_capacity(plan.buffers.len());
    for (i, b) in plan.buffers.iter().enumerate() {
        let (kind, expr, doc) = match &b.extent {
            Extent::Split { total } => (
                0,
                expr::to_c(total, &plan.size_vars)?,
                format!("split total {total}"),
            ),
            Extent::Uniform { chunk } => (
                1,
                expr::to_c(chunk, &plan.size_vars)?,
                format!("uniform chunk {chunk}"),
            ),
            Extent::Blocks { block, blocks } => (
                4,
                expr::to_c(block, &plan.size_vars)?,
                format!(
                    "{blocks} blocks of {block}, {} chunks each",
                    b.extent.chunks_per_block(b.chunks)
                ),
            ),
            Extent::Counts { matrix } => match matrix {
                CountsMatrix::Send => (2, "0ull".to_string(), "counts[rank][j]".to_string()),
                CountsMatrix::Recv => (3, "0ull".to_string(), "counts[j][rank]".to_string()),
            },
        };
        let (class, code) = match b.elem {
            ElemClass::Data => ("data", 0),
            ElemClass::Wire => ("wire", 1),
            ElemClass::Acc => ("acc", 2),
        };
        bufs.push(BufView {
            index: i,
            name: b.name.clone(),
            role: format!("{:?}", b.role).to_lowercase(),
            class: class.to_string(),
            class_code: code,
            chunks: b.chunks,
            extent_kind: kind,
            extent_expr: expr,
            block_chunks: b.extent.chunks_per_block(b.chunks),
            extent_doc: doc,
        });
    }
    let tab = table::build(plan, &classes)?;
    let x = extras::extras(plan, &classes, opts, &bufs)?;
    if x.has_matmul && opts.block_dim > MAX_MIXED_BLOCK_DIM {
        return Err(KernelError::BlockDim {
            block_dim: opts.block_dim,
            max: MAX_MIXED_BLOCK_DIM,
            cores: "AI Cores (a kernel with matmul steps: each AI Core is one Cube core and two vector cores)",
        });
    }
    if channels > 1 {
        check_channels(channels, opts, &x)?;
    }
    let size_var_doc = if plan.size_vars.is_empty() {
        "(none)".to_string()
    } else {
        plan.size_vars
            .iter()
            .enumerate()
            .map(|(i, v)| format!("sizes[{i}] = {} ({})", v.name, v.meaning))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let version = env!("CARGO_PKG_VERSION");
    let kernel = KernelTpl {
        name: &name,
        plan,
        opts,
        classes: &classes,
        bufs: &bufs,
        n_size_vars: plan.size_vars.len(),
        size_var_doc: size_var_doc.clone(),
        reduce_call: opts.op.ascend_call(),
        x: &x,
        avg: opts.op == ReduceOp::Avg && plan.collective.reduces(),
        has_blocks: bufs.iter().any(|b| b.extent_kind == 4),
        version,
    }
    .render()?;
    let words = tab.words();
    let head = 3 + tab.rank_first.len();
    let header_words = words[..head]
        .iter()
        .map(|w| w.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let rows = tab
        .rows
        .iter()
        .map(|r| {
            (
                r.words
                    .iter()
                    .map(|w| w.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                r.comment.replace("*/", "* /"),
            )
        })
        .collect();
    let table_src = TableTpl {
        name: &name,
        plan,
        header_words,
        rows,
        n_words: words.len(),
        channels: tab.channels,
    }
    .render()?;
    let launch = LaunchTpl {
        name: &name,
        bufs: &bufs,
        x: &x,
    }
    .render()?;
    let header = HeaderTpl {
        name: &name,
        upper: name.to_uppercase(),
        plan,
        opts,
        bufs: &bufs,
        size_var_doc,
        n_signals: plan.signals.len(),
        x: &x,
    }
    .render()?;
    let sim_entry = SimTpl {
        name: &name,
        bufs: &bufs,
        x: &x,
    }
    .render()?;
    let cmake = project::cmake_lists(&name, &x)?;
    Ok(Lowered {
        cmake,
        name,
        kernel,
        table: table_src,
        launch,
        header,
        sim_entry,
        n_buffers: bufs.len(),
        table_data: tab,
    })
}
