//! Front end of the `.sched` language: the pest grammar (`grammar/sched.pest`), the typed AST
//! with spans, name resolution and type checks, and the canonical formatter.
//!
//! Most users go through [`crate::library::Library`], which parses, resolves and instantiates.

pub mod ast;
pub mod codes;
pub mod collectives;
pub mod declared;
pub mod fmt;
pub mod parser;
pub mod resolve;

pub use parser::parse;
