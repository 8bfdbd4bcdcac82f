//! Errors of the lowering, the build and the simulated launch.

/// Everything that can go wrong between a plan and a finished simulated launch.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("the Ascend C lowering does not support {what} (step {step} of rank {rank})")]
    Unsupported { what: String, rank: u32, step: u32 },
    #[error("signal slot `{slot}` needs per-launch stride {stride} / offset {offset}; int32 signals need both below 2^29 (see docs/ascendc.md, \"int32 signals\")")]
    SignalRange {
        slot: String,
        stride: u64,
        offset: u64,
    },
    #[error("size variable `{0}` is used by an extent but not declared in the plan's size_vars")]
    UnknownSizeVar(String),
    #[error("the Ascend C lowering cannot carry data type {data} as wire type {wire} (integers travel as themselves, f64 only as f64, fp8 is a wire format only)")]
    Types {
        data: &'static str,
        wire: &'static str,
    },
    #[error("UB budget {0} bytes is too small: one tile needs at least 1024 bytes")]
    UbBudget(u32),
    #[error("blockDim {block_dim} is not one the lowering supports: 1 to {max} {cores}")]
    BlockDim {
        block_dim: u32,
        max: u32,
        /// What blockDim counts for this kernel.
        cores: &'static str,
    },
    #[error("{channels} channels x blockDim {block_dim} = {cores} cores per rank: the lowering supports at most {max} {what}")]
    ChannelCores {
        channels: u32,
        /// Cores per channel (the launch option `block_dim`).
        block_dim: u32,
        /// `channels * block_dim`: the launch's blockDim.
        cores: u32,
        max: u32,
        what: &'static str,
    },
    #[error(
        "the Ascend C lowering does not support {what} in a plan with {channels} channels per rank"
    )]
    Channels { channels: u32, what: String },
    #[error("plan is inconsistent: {0}")]
    Plan(#[from] symsched_plan::PlanError),
    #[error("template rendering failed: {0}")]
    Render(#[from] askama::Error),
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("g++ failed to compile {path} (exit {status}):\n{stderr}")]
    Compile {
        path: String,
        status: String,
        stderr: String,
    },
    #[error("cannot load simulated kernel {path}: {message}")]
    Load { path: String, message: String },
    #[error("simulated launch failed on rank {rank}: {message}")]
    Launch {
        rank: u32,
        code: i32,
        message: String,
    },
    #[error("simulated run is malformed: {0}")]
    Run(String),
}

impl KernelError {
    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        KernelError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// The simulation's status name (`SYMSCHED_SIM_E_…`) for launch failures.
    pub fn sim_status(&self) -> Option<&str> {
        match self {
            KernelError::Launch { message, .. } => message.split(':').next(),
            _ => None,
        }
    }
}
