//! Back ends: one module per target. Each is a pure function of an instantiated (and normally
//! verified) [`crate::ir::Program`] and produces deterministic output, so it can be snapshot-tested.
//!
//! - [`plan`]: the JSON plan the runtime executes (the contract, see `docs/plan-schema.md`);
//! - [`text`]: a human-readable IR dump (`symsched compile --emit ir`);
//! - [`dot`]: a Graphviz view of the dataflow graph (`--emit dot`, `symsched graph`).

pub mod dot;
pub mod plan;
pub mod text;

pub use dot::emit_dot;
pub use plan::emit_plan;
pub use text::emit_ir;
