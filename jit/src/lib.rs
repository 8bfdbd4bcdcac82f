//! The LLVM back end: a verified [`symsched_plan::Plan`] lowered to native host kernels.
//!
//! One kernel per (plan, rank, dtypes, reduce op) (per channel of a rank with several), the way [`symsched_kernels`]-style Ascend C
//! is one kernel per plan for the device:
//!
//! - [`lower`]: plan → LLVM IR (extents, fusion analysis, element loops, synchronisation);
//! - [`abi`]: the C ABI between the generated code and the runtime that calls it (argument
//!   block, status, the intrinsic table the runtime supplies);
//! - [`compile`]: optimise for the host CPU (its name and features, so LLVM picks AVX2 or
//!   AVX-512 where present), emit an object, link it into the process;
//! - [`cache`]: compiled kernels cached per launch signature, in memory and on disk.
//!
//! Data flows one way: plan → jit → runtime. The runtime depends on this crate and implements
//! the intrinsics; nothing here knows the runtime.
//!
//! [`symsched_kernels`]: https://docs.rs/symsched-kernels

pub mod abi;
pub mod cache;
pub mod compile;
mod dtype;
mod error;
pub mod lower;

pub use dtype::{DType, ElemTypes, ReduceOp};
pub use error::JitError;
pub use lower::{emit_llvm, kernel_channels, F16Lowering, KernelScope, KernelSpec, LowerOptions};
