//! The plan executor: interprets a compiled [`symsched_plan::Plan`] for one rank of a group.
//!
//! - [`fabric`]: the small trait the executor needs from the machinery underneath, one file per
//!   implementation ([`fabric::local`] in-process, [`fabric::group`] multi-process);
//! - [`dtype`] and [`reduce`]: element types, conversions and reduction numerics;
//! - [`interp`]: the interpreter ([`Executor`]);
//! - [`eager`]: one-round alltoallv for small chunks (counts travel with the data);
//! - [`matmul`]: matmul steps: the pluggable engine and the built-in deterministic one;
//! - [`hostcoll`]: `HostColl` steps (framework collectives) and the heap stand-in;
//! - [`reference`]: deterministic inputs and the sequential reference of every collective.

pub mod capi_launch;
pub mod dtype;
pub mod eager;
pub mod error;
pub mod fabric;
pub mod harness;
pub mod hostcoll;
pub mod interp;
pub mod matmul;
pub mod reduce;
pub mod reference;
pub mod resolve;
pub mod resolved;
mod stream_copy;
pub mod trace;

pub use crate::config::ExecOptions;
pub use dtype::{DType, ElemTypes};
pub use eager::{AlltoallvOutcome, EAGER_MAX_CHUNK};
pub use error::{ExecError, WaitTimeout};
pub use fabric::group::GroupFabric;
pub use fabric::local::{LocalFabric, LocalGroup, LocalWorld};
pub use fabric::{Fabric, WaitContext};
pub use hostcoll::{HostCollRequest, HostCollectives};
pub use interp::{Binding, Executor, LaunchArgs, LoadedPlan};
pub use matmul::{MatmulEngine, MatmulStep};
pub use reduce::ReduceOp;
