//! The hook through which the plan executor makes itself available to the C ABI
//! (`symsched_launch_plan` in the `symsched-capi` crate) without the runtime core depending on
//! it: the executor registers a launcher once, the C entry point calls it.

use std::sync::{Arc, OnceLock};

use crate::group::Group;

/// Why a plan launch through the C ABI failed: the C status follows the kind, the message is
/// reported through `symsched_last_error`.
#[derive(Debug)]
pub enum PlanLaunchError {
    /// The ranks disagree on the launch (every rank gets it; nothing was written).
    Disagreement(String),
    /// An error of the runtime core (timeout, dead peer, aborted group, …).
    Core(crate::error::RuntimeError),
    /// A malformed plan or argument.
    Invalid(String),
}

/// Launches a plan on a group: `(group, plan JSON, launch arguments JSON)`.
pub type PlanLauncher = fn(&Arc<Group>, &str, &str) -> Result<(), PlanLaunchError>;

static LAUNCHER: OnceLock<PlanLauncher> = OnceLock::new();

/// Registers the plan launcher (first registration wins; returns whether this one was taken).
pub fn register_plan_launcher(f: PlanLauncher) -> bool {
    LAUNCHER.set(f).is_ok()
}

/// The registered plan launcher, if any.
pub fn plan_launcher() -> Option<PlanLauncher> {
    LAUNCHER.get().copied()
}
