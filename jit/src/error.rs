//! Errors of the lowering, the compilation and the kernel cache.

/// Everything that can go wrong between a plan and a callable kernel.
#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error("dtype mismatch: {0}")]
    Types(String),
    #[error("rank {rank} is outside the plan's group of {size}")]
    Rank { rank: u32, size: u32 },
    #[error("plan is inconsistent: {0}")]
    Plan(#[from] symsched_plan::PlanError),
    #[error("size variable `{0}` is used by an extent but not declared in the plan's size_vars")]
    UnknownSizeVar(String),
    #[error("step {step} needs size variable `{var}`, which the plan does not declare")]
    MissingDim { step: u32, var: &'static str },
    #[error("LLVM: {0}")]
    Llvm(String),
    /// A launch-scope kernel (entry signals, steps, exit signals in one function) of a rank whose
    /// steps run on several channels: the entry signals must precede every channel and the exit
    /// signals follow them all, which only the runtime that starts the channels can do. Lower
    /// each channel in the steps scope instead ([`crate::KernelScope::Steps`]).
    #[error(
        "rank {rank} runs its steps on {channels} channels; a launch-scope kernel cannot run \
         them (lower each channel in the steps scope; the runtime sends the entry and exit \
         signals around the channels)"
    )]
    Channels { rank: u32, channels: u32 },
    #[error("rank {rank} has {channels} channel(s); there is no channel {channel}")]
    Channel {
        rank: u32,
        channel: u32,
        channels: u32,
    },
    /// [`crate::LowerOptions::check_after`] where no check can go: past the rank's steps, in a
    /// launch-scope kernel, or on a rank with several channels.
    #[error(
        "rank {rank}: an agreement check after step {at} of {steps} (on {channels} channel(s)) \
         needs a steps-scope kernel of a one-channel rank and a point within its steps"
    )]
    CheckAfter {
        rank: u32,
        at: u32,
        steps: usize,
        channels: u32,
    },
    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl JitError {
    pub(crate) fn llvm(what: impl std::fmt::Display) -> JitError {
        JitError::Llvm(what.to_string())
    }

    pub(crate) fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> JitError {
        JitError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

impl From<inkwell::builder::BuilderError> for JitError {
    fn from(e: inkwell::builder::BuilderError) -> Self {
        JitError::llvm(e)
    }
}
