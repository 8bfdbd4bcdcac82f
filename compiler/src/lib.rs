//! symsched compiler: `.sched` text → AST → IR (petgraph dataflow per group size) → verified
//! → optimised → plan / IR text / DOT / Ascend C.
//!
//! Layering (data flows one way): [`front`] parses and resolves, [`ir`] instantiates and builds
//! the graph, [`verify`] proves properties of an instantiated program, [`opt`] rewrites it,
//! [`back`] emits targets. [`diag`] is shared by all of them.

pub mod back;
pub mod diag;
pub mod front;
pub mod ir;
pub mod library;
pub mod opt;
pub mod pipeline;
pub mod verify;
