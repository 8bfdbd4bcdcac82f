//! Ascend C lowering of symsched plans and the host simulation that runs the generated kernels.
//!
//! - [`lower`] turns a verified [`symsched_plan::Plan`] plus launch types into Ascend C sources
//!   (kernel, step table, launch stub, C header) through askama templates in `templates/`;
//! - [`signal32`] is the mapping of the plan's 64-bit epoch counters onto Ascend's int32 signals;
//! - [`sim_build`] compiles a generated kernel against the header-only simulation in `sim/`
//!   with the system g++ into a cached shared library and loads it;
//! - [`sim`] runs loaded kernels: the C device table and an in-process multi-thread driver.

pub mod dtype;
pub mod error;
pub mod lower;
pub mod signal32;
pub mod sim;
pub mod sim_build;

pub use dtype::{DType, KernelOp, ReduceOp};
pub use error::KernelError;
pub use lower::{lower, LowerOptions, Lowered};
