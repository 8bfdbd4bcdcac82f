//! Instantiation of a declared collective's chunk map for one group size and param binding:
//! evaluate the `let`, `for` and `if` statements of its body and collect every output block's
//! sources into the plan's [`DeclaredCollective`].
//!
//! Refused with a span on the statement or index at fault: a rank outside the group (E0303), a
//! block index outside its role (E0306), a block mapped twice or a source added twice (E0319),
//! a reduction of blocks of different roles (E0320), a param outside the declared range
//! (E0305), a map too large to check (E0315).

use super::eval::{
    eval_bool, eval_int, in_iteration, lookup_param, param_values, positive, Env, StaticEnv,
};
use crate::diag::{Diagnostic, Span};
use crate::front::ast::{ChunkAst, Stmt, StmtKind, UpdateOp};
use crate::front::codes;
use crate::front::declared::DeclaredSig;
use std::collections::BTreeMap;
use symsched_plan::{BlockRef, DeclaredCollective, DeclaredRole, PostBlock};

/// Most map statements one instantiation may execute (a runaway loop nest is refused).
pub const MAX_MAP_STATEMENTS: u64 = 1 << 22;

/// P, the params and the `let` and loop variables in scope (innermost last).
struct MapEnv<'a> {
    p: i64,
    params: &'a [(String, i64)],
    locals: Vec<(String, i64)>,
}

impl Env for MapEnv<'_> {
    fn rank(&self) -> i64 {
        // The resolver refuses `rank` in a declaration.
        0
    }
    fn p(&self) -> i64 {
        self.p
    }
    fn name(&self, n: &str) -> Option<i64> {
        lookup_param(&self.locals, n).or_else(|| lookup_param(self.params, n))
    }
    fn group(&self, _: &str) -> Option<&[i64]> {
        None
    }
}

/// One output block while the map is collected.
struct Entry {
    op: UpdateOp,
    sources: Vec<BlockRef>,
    /// The statement that first mapped it.
    span: Span,
}

struct Collector<'a> {
    sig: &'a DeclaredSig,
    blocks: Vec<u32>,
    p: u32,
    entries: BTreeMap<(u32, u32, u32), Entry>,
    statements: u64,
}

/// The chunk map of `sig` for group size `p` with the schedule's params `bound`.
pub fn instantiate_map(
    sig: &DeclaredSig,
    p: u32,
    bound: &[(String, i64)],
) -> Result<DeclaredCollective, Diagnostic> {
    let decl = &sig.decl;
    let pi = i64::from(p);
    // The declaration's own params, in its order, each checked against its range.
    let mut params: Vec<(String, i64)> = Vec::new();
    for param in &decl.params {
        let name = &param.name.name;
        let Some(v) = lookup_param(bound, name) else {
            return Err(Diagnostic::error(
                codes::E_MISSING_PARAM,
                format!("collective `{}` needs a param `{name}`", decl.name.name),
            )
            .with_label(param.span, "declared here"));
        };
        let env = StaticEnv {
            p: pi,
            params: &params,
        };
        if !param_values(param, &env)?.contains(&v) {
            return Err(Diagnostic::error(
                codes::E_PARAM_RANGE,
                format!(
                    "collective `{}` is declared for `{name}` in its range, and the schedule binds {name} = {v}",
                    decl.name.name
                ),
            )
            .with_label(param.span, format!("{name} = {v} is outside this range at P = {p}")));
        }
        params.push((name.clone(), v));
    }
    let env = StaticEnv {
        p: pi,
        params: &params,
    };
    let blocks = decl
        .roles
        .iter()
        .map(|r| positive(&r.chunks, &env, "a role's block count"))
        .collect::<Result<Vec<u32>, _>>()?;
    let mut c = Collector {
        sig,
        blocks,
        p,
        entries: BTreeMap::new(),
        statements: 0,
    };
    let mut menv = MapEnv {
        p: pi,
        params: &params,
        locals: Vec::new(),
    };
    c.exec(&decl.items, &mut menv)?;
    let roles = sig
        .access
        .iter()
        .zip(&c.blocks)
        .map(|(&access, &blocks)| DeclaredRole { access, blocks })
        .collect();
    let post = c
        .entries
        .into_iter()
        .map(|((role, rank, block), mut e)| {
            e.sources.sort_unstable();
            PostBlock {
                at: BlockRef { rank, role, block },
                reduce: e.op == UpdateOp::Add,
                sources: e.sources,
            }
        })
        .collect();
    Ok(DeclaredCollective {
        name: decl.name.name.clone(),
        roles,
        post,
    })
}

impl Collector<'_> {
    fn exec(&mut self, items: &[Stmt], env: &mut MapEnv<'_>) -> Result<(), Diagnostic> {
        let depth = env.locals.len();
        for s in items {
            self.statements += 1;
            if self.statements > MAX_MAP_STATEMENTS {
                return Err(Diagnostic::error(
                    codes::E_TOO_LARGE,
                    format!(
                        "the chunk map of `{}` runs more than {MAX_MAP_STATEMENTS} statements at P = {}",
                        self.sig.name(),
                        self.p
                    ),
                )
                .with_label(s.span, "still running here"));
            }
            match &s.kind {
                StmtKind::Let { name, value } => {
                    let v = eval_int(value, env)?;
                    env.locals.push((name.name.clone(), v));
                }
                StmtKind::For {
                    var,
                    from,
                    to,
                    body,
                } => {
                    let (a, b) = (eval_int(from, env)?, eval_int(to, env)?);
                    for i in a..b {
                        env.locals.push((var.name.clone(), i));
                        let r = self.exec(&body.stmts, env);
                        env.locals.pop();
                        r.map_err(|d| in_iteration(d, &var.name, i))?;
                    }
                }
                StmtKind::If { arms, otherwise } => {
                    let mut taken = None;
                    for (cond, b) in arms {
                        if eval_bool(cond, env)? {
                            taken = Some(b);
                            break;
                        }
                    }
                    if let Some(b) = taken.or(otherwise.as_ref()) {
                        self.exec(&b.stmts, env)?;
                    }
                }
                StmtKind::Map { dst, op, src } => self.map(dst, *op, src, s.span, env)?,
                // The resolver lets nothing else into a declaration.
                _ => {}
            }
        }
        env.locals.truncate(depth);
        Ok(())
    }

    /// A chunk reference's block, checked against the group and the role.
    fn block(&self, c: &ChunkAst, env: &MapEnv<'_>) -> Result<BlockRef, Diagnostic> {
        let decl = &self.sig.decl;
        let role = decl
            .roles
            .iter()
            .position(|r| r.name.name == c.role.name)
            .ok_or_else(|| {
                Diagnostic::error(
                    codes::E_UNKNOWN_ROLE,
                    format!("`{}` is not a role of `{}`", c.role.name, decl.name.name),
                )
                .with_label(c.role.span, "not a role")
            })?;
        let rank = eval_int(&c.rank, env)?;
        if !(0..i64::from(self.p)).contains(&rank) {
            return Err(Diagnostic::error(
                codes::E_PEER_RANGE,
                format!("rank {rank} is outside the group 0..{}", self.p),
            )
            .with_label(c.rank.span, format!("evaluates to {rank}")));
        }
        let blocks = self.blocks[role];
        let block = eval_int(&c.index, env)?;
        if !(0..i64::from(blocks)).contains(&block) {
            return Err(Diagnostic::error(
                codes::E_BOUNDS,
                format!(
                    "block {block} of role `{}` does not exist: it has {blocks} block(s) at P = {}",
                    c.role.name, self.p
                ),
            )
            .with_label(c.index.span, format!("evaluates to {block}"))
            .with_label(decl.roles[role].span, "declared here"));
        }
        Ok(BlockRef {
            rank: rank as u32,
            role: role as u32,
            block: block as u32,
        })
    }

    fn map(
        &mut self,
        dst: &ChunkAst,
        op: UpdateOp,
        src: &ChunkAst,
        span: Span,
        env: &MapEnv<'_>,
    ) -> Result<(), Diagnostic> {
        let at = self.block(dst, env)?;
        let from = self.block(src, env)?;
        let roles = &self.sig.decl.roles;
        let place = format!(
            "`{}[{}]` on rank {}",
            roles[at.role as usize].name.name, at.block, at.rank
        );
        let key = (at.role, at.rank, at.block);
        let Some(e) = self.entries.get_mut(&key) else {
            self.entries.insert(
                key,
                Entry {
                    op,
                    sources: vec![from],
                    span,
                },
            );
            return Ok(());
        };
        let twice = |what: String, first: Span| {
            Diagnostic::error(
                codes::E_MAPPED_TWICE,
                format!("{place} is mapped twice: {what}"),
            )
            .with_label(span, "mapped again here")
            .with_label(first, "first mapped here")
        };
        if op == UpdateOp::Set || e.op == UpdateOp::Set {
            return Err(
                twice("a block holds one value after the call".into(), e.span)
                    .with_help("use `+=` for every operand of a reduction, `=` for a copy"),
            );
        }
        if e.sources.contains(&from) {
            return Err(twice(
                format!(
                    "it adds `{}[{}]` of rank {} twice",
                    roles[from.role as usize].name.name, from.block, from.rank
                ),
                e.span,
            ));
        }
        if let Some(other) = e.sources.iter().find(|s| s.role != from.role) {
            return Err(Diagnostic::error(
                codes::E_MIXED_REDUCE,
                format!(
                    "{place} reduces blocks of different roles (`{}` and `{}`)",
                    roles[other.role as usize].name.name, roles[from.role as usize].name.name
                ),
            )
            .with_label(src.role.span, "another role here")
            .with_label(e.span, "the reduction starts here")
            .with_help("a reduction combines one role's blocks across ranks"));
        }
        e.sources.push(from);
        Ok(())
    }
}
