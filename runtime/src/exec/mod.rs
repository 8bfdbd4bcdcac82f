//! The plan executor: runs a compiled [`symsched_plan::Plan`] for one rank of a group.
//!
//! Data flows one way, top to bottom; every module imports only those below it:
//!
//! - [`Executor`] (`executor.rs`): loads plans and runs a launch as named phases (check,
//!   resolve or reuse, bind and stage in, entry signals, run steps, finish, stage out, exit
//!   signals, and at `DEBUG` a log record of the launch);
//! - [`backend`]: what runs the resolved steps — the [`backend::Backend`] trait and its context
//!   in `mod.rs`, one file per implementation ([`backend::interp`], the interpreter);
//! - [`LoadedPlan`] (`loaded.rs`): what is decided once per (group, plan) and what launches
//!   carry from one to the next;
//! - [`resolve`]: a plan resolved for one launch's sizes, and the passes choosing how its
//!   steps run (fusion, folded gets, streaming), into [`resolved`], the representation every
//!   backend runs;
//! - [`agreement`]: before data moves, every rank checks that every rank launches the same
//!   (sizes, dtypes, op, binding pattern), or all fail alike;
//! - [`binding`] and [`staging`]: how buffers are bound and the binding rule; the staging area,
//!   the copies in and out and the launch's address map;
//! - [`eager`]: the one-round alltoallv channel (counts travel with the data);
//! - [`fabric`]: the small trait the executor needs from the machinery underneath, one file per
//!   implementation ([`fabric::local`] in-process, [`fabric::group`] multi-process);
//! - kernels and steps: [`dtype`] and [`reduce`] (conversions and reduction numerics over the
//!   plan's dtype and reduce-op vocabulary), `stream_copy` (non-temporal copies), [`matmul`]
//!   (the pluggable matmul engine and the built-in one), [`hostcoll`] (framework collectives and
//!   the heap stand-in), [`trace`] (the step trace);
//! - around it: [`harness`] and [`reference`](mod@reference) (checked, timed runs against the sequential
//!   reference), [`capi_launch`] (the C ABI's launcher).
//!
//! Knobs come in as one [`ExecOptions`] value (see [`crate::config`]).

pub mod agreement;
pub mod backend;
pub mod binding;
pub mod cancel;
pub mod capi_launch;
pub mod dtype;
pub mod eager;
pub mod error;
mod executor;
pub mod fabric;
pub mod harness;
pub mod hostcoll;
mod loaded;
pub mod matmul;
pub mod reduce;
pub mod reference;
pub mod resolve;
pub mod resolved;
pub mod staging;
mod stream_copy;
#[cfg(test)]
pub(crate) mod test_plans;
pub mod trace;

pub use crate::config::ExecOptions;
pub use agreement::Disagreement;
pub use binding::Binding;
pub use dtype::{DType, ElemTypes};
pub use eager::{AlltoallvOutcome, EAGER_MAX_CHUNK};
pub use error::{ExecError, WaitTimeout};
pub use executor::{Executor, LaunchArgs};
pub use fabric::group::GroupFabric;
pub use fabric::local::{LocalFabric, LocalGroup, LocalWorld};
pub use fabric::{Fabric, HeapSpan, WaitContext};
pub use hostcoll::{HostCollFailure, HostCollRequest, HostCollectives};
pub use loaded::LoadedPlan;
pub use matmul::{MatmulEngine, MatmulStep};
pub use reduce::ReduceOp;
