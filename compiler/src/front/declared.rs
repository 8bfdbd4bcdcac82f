//! Collectives declared in the source by their chunk map (`collective NAME(…)(…) { … }`), the
//! way MSCCLang declares a collective by the chunks every rank holds before and after it.
//!
//! A declaration names its roles with their block counts; its body says, with `let`, `for` and
//! `if` over P and the params, which input block each output block holds after the call
//! (`out[i] @ r = in[j] @ q;`) or which blocks it reduces (`out[i] @ r += in[j] @ q;`, once per
//! operand). A role the map only reads is an input, one it only writes an output, one it does
//! both in-out. Resolution checks the names ([`super::resolve::resolve_collective`]);
//! instantiation for one P evaluates the map (`crate::ir::declared`) into the plan's
//! [`symsched_plan::DeclaredCollective`], which the verifier proves a schedule against like the
//! built-in collectives' table.

use super::ast::{CollectiveDecl, Stmt, StmtKind, UpdateOp};
use symsched_plan::{BufferRole, SizeVar};

/// A resolved collective declaration: what a schedule implementing it is checked against.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredSig {
    pub decl: CollectiveDecl,
    /// Access of every role, in signature order.
    pub access: Vec<BufferRole>,
    /// Whether the map has a `+=` (a reduction) anywhere.
    pub reduces: bool,
}

impl DeclaredSig {
    /// The inferred access of every role and whether the map reduces.
    pub fn new(decl: CollectiveDecl) -> DeclaredSig {
        let mut read = vec![false; decl.roles.len()];
        let mut written = vec![false; decl.roles.len()];
        let mut reduces = false;
        walk(&decl.items, &mut |s| {
            if let StmtKind::Map { dst, op, src } = &s.kind {
                let idx = |n: &str| decl.roles.iter().position(|r| r.name.name == n);
                if let Some(i) = idx(&dst.role.name) {
                    written[i] = true;
                }
                if let Some(i) = idx(&src.role.name) {
                    read[i] = true;
                }
                reduces |= *op == UpdateOp::Add;
            }
        });
        let access = read
            .iter()
            .zip(&written)
            .map(|(r, w)| match (r, w) {
                (true, true) => BufferRole::InOut,
                (false, true) => BufferRole::Output,
                _ => BufferRole::Input,
            })
            .collect();
        DeclaredSig {
            decl,
            access,
            reduces,
        }
    }

    pub fn name(&self) -> &str {
        &self.decl.name.name
    }

    /// Params a schedule implementing it must declare.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.decl.params.iter().map(|p| p.name.name.as_str())
    }
}

/// Every statement of a declaration body, nested ones included, in source order.
pub fn walk(items: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for s in items {
        f(s);
        match &s.kind {
            StmtKind::For { body, .. } | StmtKind::Channel { body, .. } => walk(&body.stmts, f),
            StmtKind::If { arms, otherwise } => {
                for (_, b) in arms {
                    walk(&b.stmts, f);
                }
                if let Some(b) = otherwise {
                    walk(&b.stmts, f);
                }
            }
            _ => {}
        }
    }
}

/// The one size variable of a declared collective.
pub fn size_vars() -> Vec<SizeVar> {
    vec![SizeVar {
        name: "n".into(),
        meaning: "elements of one block of every role".into(),
    }]
}
