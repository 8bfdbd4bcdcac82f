//! Static evaluation: integer and boolean expressions over P, the params and the locals in
//! scope, with the language's errors (overflow, division by zero, a type mismatch), the value
//! lists of params, and the note that names the loop iteration an error came from. Shared by
//! instantiating schedules ([`super::instantiate`]) and chunk maps ([`super::declared`]).

use crate::diag::{Diagnostic, Span};
use crate::front::ast::*;
use crate::front::codes;

/// Largest number of param bindings [`super::instantiate::param_space`] enumerates.
pub const MAX_PARAM_BINDINGS: usize = 1 << 16;

/// An error diagnostic with one label.
pub(super) fn err(
    code: &'static str,
    msg: impl Into<String>,
    span: Span,
    label: impl Into<String>,
) -> Diagnostic {
    Diagnostic::error(code, msg).with_label(span, label)
}

/// Environment of expressions that are the same on every rank: P and params.
pub(super) struct StaticEnv<'a> {
    pub(super) p: i64,
    pub(super) params: &'a [(String, i64)],
}

pub(super) fn lookup_param(params: &[(String, i64)], name: &str) -> Option<i64> {
    params
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v)
}

fn arith(op: BinOp, a: i64, b: i64, span: Span) -> Result<i64, Diagnostic> {
    let r = match op {
        BinOp::Add => a.checked_add(b),
        BinOp::Sub => a.checked_sub(b),
        BinOp::Mul => a.checked_mul(b),
        BinOp::Div | BinOp::Mod => {
            if b == 0 {
                return Err(err(
                    codes::E_DIV_ZERO,
                    if op == BinOp::Div {
                        "division by zero"
                    } else {
                        "modulo by zero"
                    },
                    span,
                    "the right operand is 0",
                ));
            }
            if op == BinOp::Div {
                a.checked_div_euclid(b)
            } else {
                a.checked_rem_euclid(b)
            }
        }
        BinOp::Pow => {
            let Ok(exp) = u32::try_from(b) else {
                return Err(err(
                    codes::E_OVERFLOW,
                    if b < 0 {
                        "negative exponent"
                    } else {
                        "integer overflow"
                    },
                    span,
                    format!("{a} ** {b} is not an integer that fits 64 bits"),
                ));
            };
            a.checked_pow(exp)
        }
        BinOp::Xor => Some(a ^ b),
        BinOp::Shl | BinOp::Shr => {
            if !(0..=62).contains(&b) {
                return Err(err(
                    codes::E_OVERFLOW,
                    "shift amount out of range",
                    span,
                    format!("shift by {b}; must be in 0..=62"),
                ));
            }
            if op == BinOp::Shr {
                Some(a >> b)
            } else {
                // A left shift that drops bits overflows.
                a.checked_mul(1i64 << b)
            }
        }
        _ => None,
    };
    r.ok_or_else(|| {
        err(
            codes::E_OVERFLOW,
            "integer overflow",
            span,
            format!("{a} {} {b} overflows", op.text()),
        )
    })
}

fn cmp_holds(c: CmpOp, a: i64, b: i64) -> bool {
    match c {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

/// Values an expression may take: integers and conditions share one evaluator (the resolver
/// already checked the types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Int(i64),
    Bool(bool),
}

pub(super) trait Env {
    fn rank(&self) -> i64;
    fn p(&self) -> i64;
    fn name(&self, n: &str) -> Option<i64>;
    fn group(&self, g: &str) -> Option<&[i64]>;
}

impl Env for StaticEnv<'_> {
    fn rank(&self) -> i64 {
        0
    }
    fn p(&self) -> i64 {
        self.p
    }
    fn name(&self, n: &str) -> Option<i64> {
        lookup_param(self.params, n)
    }
    fn group(&self, _: &str) -> Option<&[i64]> {
        None
    }
}

fn type_error(span: Span) -> Diagnostic {
    err(codes::E_TYPE, "expression has the wrong type", span, "here")
}

fn eval(e: &Expr, env: &dyn Env) -> Result<Val, Diagnostic> {
    Ok(match &e.kind {
        ExprKind::Int(v) => Val::Int(*v),
        ExprKind::Bool(b) => Val::Bool(*b),
        ExprKind::Rank => Val::Int(env.rank()),
        ExprKind::P => Val::Int(env.p()),
        ExprKind::Name(n) => Val::Int(env.name(n).ok_or_else(|| {
            err(
                codes::E_UNKNOWN_NAME,
                format!("unknown name `{n}`"),
                e.span,
                "not bound",
            )
        })?),
        ExprKind::Paren(x) => eval(x, env)?,
        ExprKind::Unary(UnOp::Neg, x) => {
            let v = eval_int(x, env)?;
            Val::Int(v.checked_neg().ok_or_else(|| {
                err(
                    codes::E_OVERFLOW,
                    "integer overflow",
                    e.span,
                    "negation overflows",
                )
            })?)
        }
        ExprKind::Unary(UnOp::Not, x) => Val::Bool(!eval_bool(x, env)?),
        ExprKind::Binary(BinOp::And, a, b) => Val::Bool(eval_bool(a, env)? && eval_bool(b, env)?),
        ExprKind::Binary(BinOp::Or, a, b) => Val::Bool(eval_bool(a, env)? || eval_bool(b, env)?),
        ExprKind::Binary(BinOp::Cmp(c), a, b) => {
            Val::Bool(cmp_holds(*c, eval_int(a, env)?, eval_int(b, env)?))
        }
        ExprKind::Binary(op, a, b) => {
            Val::Int(arith(*op, eval_int(a, env)?, eval_int(b, env)?, e.span)?)
        }
        ExprKind::Min(a, b) => Val::Int(eval_int(a, env)?.min(eval_int(b, env)?)),
        ExprKind::Max(a, b) => Val::Int(eval_int(a, env)?.max(eval_int(b, env)?)),
        ExprKind::Log2(x) => {
            let v = eval_int(x, env)?;
            if v <= 0 {
                return Err(err(
                    codes::E_OVERFLOW,
                    "log2 of a value that is not positive",
                    e.span,
                    format!("the argument is {v}"),
                ));
            }
            Val::Int(v.ilog2() as i64)
        }
        ExprKind::IsPow2(x) => {
            let v = eval_int(x, env)?;
            Val::Bool(v > 0 && (v & (v - 1)) == 0)
        }
        ExprKind::Cond(arms, otherwise) => {
            for (c, v) in arms {
                if eval_bool(c, env)? {
                    return eval(v, env);
                }
            }
            eval(otherwise, env)?
        }
        ExprKind::GroupAttr(g, attr) => {
            let members = env.group(&g.name).ok_or_else(|| {
                err(
                    codes::E_UNKNOWN_NAME,
                    format!("unknown group `{}`", g.name),
                    g.span,
                    "not a group",
                )
            })?;
            match attr {
                GroupAttr::Size => Val::Int(members.len() as i64),
                GroupAttr::Rank => {
                    let me = env.rank();
                    Val::Int(members.iter().position(|m| *m == me).unwrap_or(0) as i64)
                }
            }
        }
        ExprKind::GroupMember(g, x) => {
            let i = eval_int(x, env)?;
            let members = env.group(&g.name).ok_or_else(|| {
                err(
                    codes::E_UNKNOWN_NAME,
                    format!("unknown group `{}`", g.name),
                    g.span,
                    "not a group",
                )
            })?;
            let m = usize::try_from(i)
                .ok()
                .and_then(|i| members.get(i))
                .ok_or_else(|| {
                    err(
                        codes::E_PEER_RANGE,
                        format!(
                            "`{}.member({i})` is outside the group (size {})",
                            g.name,
                            members.len()
                        ),
                        e.span,
                        format!("member index {i}"),
                    )
                })?;
            Val::Int(*m)
        }
    })
}

pub(super) fn eval_int(e: &Expr, env: &dyn Env) -> Result<i64, Diagnostic> {
    match eval(e, env)? {
        Val::Int(v) => Ok(v),
        Val::Bool(_) => Err(type_error(e.span)),
    }
}

pub(super) fn eval_bool(e: &Expr, env: &dyn Env) -> Result<bool, Diagnostic> {
    match eval(e, env)? {
        Val::Bool(b) => Ok(b),
        Val::Int(_) => Err(type_error(e.span)),
    }
}

/// Largest chunk count, signal array length or group argument: far beyond any real schedule,
/// small enough that per-chunk and per-slot tables stay cheap.
pub const MAX_COUNT: i64 = 1 << 20;

/// A positive count (chunks, array length, group block) from a static expression.
pub(super) fn positive(e: &Expr, env: &dyn Env, what: &str) -> Result<u32, Diagnostic> {
    let v = eval_int(e, env)?;
    if !(1..=MAX_COUNT).contains(&v) {
        return Err(err(
            codes::E_COUNT,
            format!("{what} must be in 1..={MAX_COUNT}, found {v}"),
            e.span,
            format!("evaluates to {v}"),
        ));
    }
    Ok(v as u32)
}

// ------------------------------------------------------------------ params

/// The values of param `index` of `sched` given the earlier params' values.
pub(super) fn param_values(param: &Param, env: &StaticEnv<'_>) -> Result<Vec<i64>, Diagnostic> {
    match &param.range {
        ParamRange::Span(a, b) => {
            let (a, b) = (eval_int(a, env)?, eval_int(b, env)?);
            if b.saturating_sub(a) > MAX_PARAM_BINDINGS as i64 {
                return Err(err(
                    codes::E_TOO_LARGE,
                    format!("param range {a}..{b} is too large"),
                    param.span,
                    "too many values",
                ));
            }
            Ok((a..b).collect())
        }
        ParamRange::Divisors(e) => {
            let n = eval_int(e, env)?;
            if n < 1 {
                return Err(err(
                    codes::E_COUNT,
                    format!("divisors({n}): the argument must be positive"),
                    e.span,
                    format!("evaluates to {n}"),
                ));
            }
            let mut out = Vec::new();
            let mut d = 1i64;
            while d.saturating_mul(d) <= n {
                if n % d == 0 {
                    out.push(d);
                    if d != n / d {
                        out.push(n / d);
                    }
                }
                d += 1;
            }
            out.sort_unstable();
            Ok(out)
        }
    }
}

const ITERATION: &str = "in the iteration where ";

/// Name the loop variables' values in an error raised inside a loop body, outermost first
/// (`in the iteration where a = 1, b = 3`).
pub(super) fn in_iteration(mut d: Diagnostic, var: &str, value: i64) -> Diagnostic {
    if d.code == codes::E_TOO_LARGE {
        // It names the loop nest and its trip counts already.
        return d;
    }
    match d.notes.iter_mut().find(|n| n.starts_with(ITERATION)) {
        Some(n) => *n = n.replacen(ITERATION, &format!("{ITERATION}{var} = {value}, "), 1),
        None => d.notes.insert(0, format!("{ITERATION}{var} = {value}")),
    }
    d
}
