//! Instantiation: one resolved schedule + a group size P + a param binding → [`Program`].
//!
//! Every rank's statements are evaluated: `for` unrolls, `if` and `let` are decided, every
//! index, peer and signal value becomes a concrete integer. Message sizes stay symbolic
//! ([`SizeExpr`] over the collective's size variables, with P and params folded in). Errors are
//! E03xx diagnostics naming the rank and pointing at the statement.
//!
//! `use NAME(...) within G` inlines NAME for the sub-group G: inside it `rank`/`P` are
//! `G.rank`/`G.size` and peers go through `G.member`; its scratch and signals become fresh
//! buffers/slots prefixed `NAME#i.` (i counts `use` executions on a rank, which must agree on
//! every rank), and its roles are re-based onto the regions the caller binds.

use super::eval::{
    err, eval_bool, eval_int, in_iteration, lookup_param, param_values, positive, Env, StaticEnv,
};
use super::{limits, Program, Step};
use crate::diag::{Diagnostic, Span};
use crate::front::ast::*;
use crate::front::codes;
use crate::front::collectives;
use crate::front::resolve::{hostcoll_op, ResolvedSchedule};
use std::collections::{BTreeMap, HashMap};
use symsched_plan::{
    BufferDecl, BufferRole, Cmp, CollectiveKind, DualDecl, ElemClass, Extent, Hierarchy, Op, Rank,
    Region, SignalMode, SignalSlot, SignalUpdate, SizeExpr, WaitTarget,
};

/// Largest group size a plan may have.
pub const MAX_GROUP_SIZE: u32 = 64;
/// Statements one rank may execute while unrolling; more means a runaway loop.
pub const MAX_STATEMENTS_PER_RANK: u64 = 1 << 20;
pub use super::eval::{MAX_COUNT, MAX_PARAM_BINDINGS};

/// Where instantiation finds schedules by name (the [`crate::library::Library`]).
pub trait ScheduleLookup {
    fn find(&self, name: &str) -> Option<(&Schedule, &ResolvedSchedule)>;
}

type Diags = Vec<Diagnostic>;

fn check_group_size(sched: &Schedule, p: u32) -> Result<(), Diags> {
    if p == 0 || p > MAX_GROUP_SIZE {
        return Err(vec![err(
            codes::E_GROUP_SIZE,
            format!("group size {p} is outside 1..={MAX_GROUP_SIZE}"),
            sched.header_span,
            "instantiated here",
        )]);
    }
    Ok(())
}

/// E0318 unless every `require` of the schedule holds at this group size and binding.
fn check_requirements(sched: &Schedule, env: &StaticEnv<'_>) -> Result<(), Diagnostic> {
    for item in &sched.items {
        let StmtKind::Require { cond } = &item.kind else {
            continue;
        };
        if !eval_bool(cond, env)? {
            let mut values = vec![format!("P = {}", env.p)];
            values.extend(env.params.iter().map(|(n, v)| format!("{n} = {v}")));
            return Err(err(
                codes::E_REQUIRE,
                format!(
                    "`{}` requires `{}`, which does not hold for {}",
                    sched.name.name,
                    crate::front::fmt::expr(cond),
                    values.join(", ")
                ),
                cond.span,
                "not met",
            ));
        }
    }
    Ok(())
}

fn unknown_fixed(sched: &Schedule, fixed: &BTreeMap<String, i64>) -> Result<(), Diags> {
    let unknown: Vec<Diagnostic> = fixed
        .keys()
        .filter(|k| !sched.params.iter().any(|p| &p.name.name == *k))
        .map(|k| {
            err(
                codes::E_UNKNOWN_NAME,
                format!("schedule `{}` has no param `{k}`", sched.name.name),
                sched.header_span,
                "params are declared here",
            )
        })
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(unknown)
    }
}

/// Every param binding to check at group size `p`: the cartesian product of the declared
/// ranges in declaration order, with `fixed` values replacing a range (they must lie in it).
pub fn param_space(
    sched: &Schedule,
    p: u32,
    fixed: &BTreeMap<String, i64>,
) -> Result<Vec<BTreeMap<String, i64>>, Diags> {
    check_group_size(sched, p)?;
    unknown_fixed(sched, fixed)?;
    let mut partial: Vec<Vec<(String, i64)>> = vec![Vec::new()];
    for param in &sched.params {
        let mut next = Vec::new();
        for b in &partial {
            let env = StaticEnv {
                p: p as i64,
                params: b,
            };
            let values = param_values(param, &env).map_err(|d| vec![d])?;
            let chosen: Vec<i64> = match fixed.get(&param.name.name) {
                Some(v) if values.contains(v) => vec![*v],
                Some(v) => return Err(vec![out_of_range(param, *v, &values, p)]),
                None => values,
            };
            for v in chosen {
                let mut nb = b.clone();
                nb.push((param.name.name.clone(), v));
                next.push(nb);
                if next.len() > MAX_PARAM_BINDINGS {
                    return Err(vec![err(
                        codes::E_TOO_LARGE,
                        "too many param bindings to enumerate",
                        sched.header_span,
                        "fix some params",
                    )]);
                }
            }
        }
        partial = next;
    }
    // Bindings outside the schedule's `require`s are not part of its space; when none is left,
    // the first one's failure says why.
    let mut first_refusal = None;
    let mut space = Vec::with_capacity(partial.len());
    for b in partial {
        let env = StaticEnv {
            p: p as i64,
            params: &b,
        };
        match check_requirements(sched, &env) {
            Ok(()) => space.push(b.into_iter().collect()),
            Err(d) => {
                first_refusal.get_or_insert(d);
            }
        }
    }
    match first_refusal {
        Some(d) if space.is_empty() => Err(vec![d]),
        _ => Ok(space),
    }
}

fn out_of_range(param: &Param, v: i64, values: &[i64], p: u32) -> Diagnostic {
    let shown = match values {
        [] => "no value".to_string(),
        [x] => format!("{x}"),
        _ if values.len() <= 8 => values
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        _ => format!("{}..={}", values[0], values[values.len() - 1]),
    };
    err(
        codes::E_PARAM_RANGE,
        format!(
            "param `{}` = {v} is outside its range at P = {p}",
            param.name.name
        ),
        param.span,
        format!("allowed: {shown}"),
    )
}

/// Check a complete binding against the declared ranges; returns it in declaration order.
fn bind_params(
    sched: &Schedule,
    p: u32,
    given: &BTreeMap<String, i64>,
    at: Span,
) -> Result<Vec<(String, i64)>, Diagnostic> {
    let mut bound: Vec<(String, i64)> = Vec::new();
    for param in &sched.params {
        let Some(v) = given.get(&param.name.name).copied() else {
            return Err(err(
                codes::E_PARAM_RANGE,
                format!(
                    "no value for param `{}` of `{}`",
                    param.name.name, sched.name.name
                ),
                at,
                "bind it here",
            )
            .with_label(param.span, "declared here"));
        };
        let env = StaticEnv {
            p: p as i64,
            params: &bound,
        };
        let values = param_values(param, &env)?;
        if !values.contains(&v) {
            let d = out_of_range(param, v, &values, p);
            if at == sched.header_span {
                return Err(d);
            }
            // Bound by a `use`: the error is at the use, the declaration explains it.
            let (decl, allowed) = d.labels[0].clone();
            return Err(Diagnostic {
                labels: vec![
                    (at, format!("binds `{}` = {v}", param.name.name)),
                    (decl, allowed),
                ],
                ..d
            });
        }
        bound.push((param.name.name.clone(), v));
    }
    Ok(bound)
}

// ------------------------------------------------------------------ program building

/// Where a buffer name of a frame lives: chunk i of the name is chunk `first + i` of `id`.
#[derive(Debug, Clone, Copy)]
struct BufBind {
    id: u32,
    first: u32,
    chunks: u32,
}

/// A signal name of a frame: slots `base..base+len` (len 1 and `array` false for scalars).
#[derive(Debug, Clone, Copy)]
struct SigBind {
    base: u32,
    len: u32,
}

/// Buffers and slots of one schedule instance, shared by every rank executing it.
#[derive(Debug, Clone)]
struct Instance {
    callee: String,
    buffers: Vec<(String, BufBind)>,
    signals: Vec<(String, SigBind)>,
    barrier: Option<u32>,
}

/// One rank executing one schedule instance.
struct Frame<'a> {
    res: &'a ResolvedSchedule,
    p: i64,
    rank: i64,
    params: Vec<(String, i64)>,
    /// Frame-local rank → top-level rank.
    rank_map: Vec<Rank>,
    buffers: HashMap<&'a str, BufBind>,
    signals: HashMap<&'a str, SigBind>,
    groups: HashMap<&'a str, Vec<i64>>,
    barrier: Option<u32>,
    barriers_done: u64,
    locals: Vec<(&'a str, i64)>,
    inlined_from: Vec<Span>,
    prefix: String,
    /// The channel the steps emitted now go to (the innermost `channel C { … }`, else 0).
    channel: u32,
}

impl Env for Frame<'_> {
    fn rank(&self) -> i64 {
        self.rank
    }
    fn p(&self) -> i64 {
        self.p
    }
    fn name(&self, n: &str) -> Option<i64> {
        self.locals
            .iter()
            .rev()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| *v)
            .or_else(|| lookup_param(&self.params, n))
    }
    fn group(&self, g: &str) -> Option<&[i64]> {
        self.groups.get(g).map(Vec::as_slice)
    }
}

struct RankState {
    instances_used: usize,
    statements: u64,
    call_stack: Vec<String>,
    /// Steps this rank may unroll to ([`limits::steps_per_rank`]).
    step_limit: u64,
    /// Group size, for the loop-nest diagnostic.
    p: u32,
    /// The `for` loops being unrolled, outermost first.
    loops: Vec<LoopFrame>,
}

/// One `for` loop being unrolled, for the diagnostic that names a loop nest that is too large.
struct LoopFrame {
    /// `VAR in FROM..TO`.
    header: Span,
    var: String,
    trips: u64,
    /// Iterations already completed.
    done: u64,
    /// Statements and steps when the loop started.
    statements0: u64,
    steps0: u64,
}

/// What a loop nest (or the program) grows too large in.
#[derive(Clone, Copy)]
enum Measure {
    Statements,
    Steps,
}

impl RankState {
    /// E0315 for a program that unrolls past a limit: names the loop nest being unrolled (every
    /// active `for`, outermost first, with its trip count) and the size it would reach,
    /// extrapolated from the part of its iteration space already done.
    fn too_large(&self, what: Measure, now: u64, limit: u64, span: Span) -> Diagnostic {
        let (noun, whole) = match what {
            Measure::Statements => ("statements (or reduce operands)", String::new()),
            Measure::Steps => (
                "steps",
                format!(
                    " at P = {} (the verifier's budget: {} steps in all, steps × P at most {})",
                    self.p,
                    limits::MAX_PROGRAM_STEPS,
                    limits::MAX_STEP_CLOCKS,
                ),
            ),
        };
        let Some(outer) = self.loops.first() else {
            return err(
                codes::E_TOO_LARGE,
                format!("the unrolled program exceeds {limit} {noun} per rank{whole}"),
                span,
                "while unrolling this",
            );
        };
        let since = now.saturating_sub(match what {
            Measure::Statements => outer.statements0,
            Measure::Steps => outer.steps0,
        });
        // The fraction of the nest's iteration space done, in mixed radix.
        let (mut done, mut scale) = (0f64, 1f64);
        for l in &self.loops {
            scale *= l.trips.max(1) as f64;
            done += l.done as f64 / scale;
        }
        let iterations: f64 = self.loops.iter().map(|l| l.trips.max(1) as f64).product();
        let projected = if done > 0.0 {
            since as f64 / done
        } else {
            iterations * since.max(1) as f64
        };
        let trips: Vec<String> = self.loops.iter().map(|l| l.trips.to_string()).collect();
        let vars: Vec<String> = self.loops.iter().map(|l| format!("`{}`", l.var)).collect();
        let mut d = err(
            codes::E_TOO_LARGE,
            format!(
                "the loop nest over {} ({} = {iterations:.0} iterations) would unroll to about {projected:.2e} {noun} per rank at P = {}, {:.2e} in all; one rank may have at most {limit}{whole}",
                vars.join(", "),
                trips.join(" × "),
                self.p,
                projected * self.p as f64,
            ),
            outer.header,
            format!("this loop nest: {} iterations", outer.trips),
        );
        for l in &self.loops[1..] {
            d = d.with_label(l.header, format!("× {} iterations", l.trips));
        }
        d.with_help("bound the loops by the group size once, not once per nesting level; or split the work into fewer, larger chunks")
    }
}

struct Builder<'a> {
    lookup: &'a dyn ScheduleLookup,
    buffers: Vec<BufferDecl>,
    buffer_spans: Vec<Span>,
    signals: Vec<SignalSlot>,
    signal_spans: Vec<Span>,
    instances: Vec<Instance>,
}

/// Instantiate `name` for group size `p` with the given params (all params must be bound).
pub fn instantiate(
    lookup: &dyn ScheduleLookup,
    name: &str,
    p: u32,
    params: &BTreeMap<String, i64>,
) -> Result<Program, Diags> {
    let Some((sched, res)) = lookup.find(name) else {
        return Err(vec![Diagnostic::error(
            codes::E_UNKNOWN_NAME,
            format!("no schedule named `{name}`"),
        )]);
    };
    check_group_size(sched, p)?;
    unknown_fixed(sched, params)?;
    let bound = bind_params(sched, p, params, sched.header_span).map_err(|d| vec![d])?;
    let pi = p as i64;
    let senv = StaticEnv {
        p: pi,
        params: &bound,
    };
    let one = |d: Diagnostic| vec![d];
    check_requirements(sched, &senv).map_err(one)?;

    let hierarchy = match &sched.over_nodes {
        None => None,
        Some(e) => {
            let l = eval_int(e, &senv).map_err(one)?;
            if l < 1 || pi % l != 0 {
                return Err(vec![err(
                    codes::E_NODES,
                    format!(
                        "`over nodes({l})`: {l} ranks per node does not divide the group size {p}"
                    ),
                    e.span,
                    format!("evaluates to {l}"),
                )]);
            }
            Some(Hierarchy {
                ranks_per_node: l as u32,
            })
        }
    };

    // A declared collective's chunk map for this P and binding: its roles' access and blocks.
    let declared = match &res.declared {
        Some(sig) => Some(std::sync::Arc::new(
            super::declared::instantiate_map(sig, p, &bound).map_err(|d| {
                vec![d.with_note(format!(
                    "in the chunk map of `{}` at P = {p}, for schedule `{}`",
                    sig.name(),
                    sched.name.name
                ))]
            })?,
        )),
        None => None,
    };
    let kind = match &declared {
        Some(d) => CollectiveKind::Declared {
            reduces: d.reduces(),
        },
        None => res.kind,
    };

    let mut b = Builder {
        lookup,
        buffers: Vec::new(),
        buffer_spans: Vec::new(),
        signals: Vec::new(),
        signal_spans: Vec::new(),
        instances: Vec::new(),
    };
    // Role buffers, signature order.
    let mut top_buffers: Vec<(String, BufBind)> = Vec::new();
    for (i, role) in sched.roles.iter().enumerate() {
        let k = positive(&role.chunks, &senv, "a role's chunk count").map_err(one)?;
        if res.kind == CollectiveKind::Alltoallv && k != p {
            return Err(vec![err(
                codes::E_ALLTOALLV_CHUNKS,
                format!(
                    "alltoallv role `{}` has {k} chunk(s); it needs one per rank (P = {p})",
                    role.name.name
                ),
                role.chunks.span,
                "write `[P]`",
            )]);
        }
        let signature = match &declared {
            Some(d) => d.roles.get(i).map(|r| r.access),
            None => collectives::roles(res.kind).get(i).map(|r| r.access),
        };
        let access = match signature {
            // `inout`: the schedule may overwrite the caller's input.
            Some(BufferRole::Input) if role.inout => BufferRole::InOut,
            Some(a) => a,
            None => BufferRole::InOut,
        };
        let id = b.buffers.len() as u32;
        b.buffers.push(BufferDecl {
            name: role.name.name.clone(),
            role: access,
            chunks: k,
            extent: {
                // A role holding one block per rank may have K chunks per block (a chunk
                // factor): each block is then split on its own (the plan's remainder rule).
                let blocked = match &declared {
                    Some(d) => Some((SizeExpr::var("n"), u64::from(d.roles[i].blocks))),
                    None => collectives::chunk_factor_block(res.kind, i, p as u64),
                };
                match blocked.and_then(|(b, j)| collectives::blocked_extent(b, j, k)) {
                    Some(e) => e,
                    None => match &declared {
                        Some(d) => Extent::Split {
                            total: SizeExpr::var("n").scaled(u64::from(d.roles[i].blocks)),
                        },
                        None => collectives::role_extent(res.kind, i, p as u64),
                    },
                }
            },
            elem: ElemClass::Data,
        });
        b.buffer_spans.push(role.span);
        top_buffers.push((
            role.name.name.clone(),
            BufBind {
                id,
                first: 0,
                chunks: k,
            },
        ));
    }
    let inst = b
        .declare_instance(sched, res, "", &senv, &top_buffers, String::new())
        .map_err(one)?;
    // Before unrolling anything: a program with too many chunks is refused at once.
    limits::check_locations(p, &b.buffers, &b.buffer_spans, sched.header_span).map_err(one)?;

    let mut ranks = Vec::with_capacity(p as usize);
    let rank_map: Vec<Rank> = (0..p).collect();
    for r in 0..p {
        let mut st = RankState {
            instances_used: 0,
            statements: 0,
            call_stack: vec![sched.name.name.clone()],
            step_limit: limits::steps_per_rank(p),
            p,
            loops: Vec::new(),
        };
        let mut frame = b
            .frame(
                sched,
                res,
                pi,
                r as i64,
                bound.clone(),
                rank_map.clone(),
                &top_buffers,
                &inst,
                Vec::new(),
                String::new(),
            )
            .map_err(|d| vec![on_rank(d, r, p, &bound)])?;
        let mut out = Vec::new();
        b.exec_stmts(&mut frame, &sched.items, &mut out, &mut st)
            .map_err(|d| vec![on_rank(d, r, p, &bound)])?;
        ranks.push(out);
    }

    let mut duals = Vec::new();
    for d in &sched.duals {
        match d {
            Dual::Identity { span, .. } => {
                duals.push((DualDecl::IdentityAssumingReplicated, *span))
            }
            Dual::Derived { span } => {
                if super::transpose::dual_collective(kind).is_none() {
                    return Err(vec![err(
                        super::transpose::E_UNTRANSPOSABLE,
                        format!(
                            "`dual derived` on `{}`, which implements the declared collective `{}`: it has no dual collective",
                            sched.name.name,
                            declared.as_ref().map(|d| d.name.as_str()).unwrap_or("?")
                        ),
                        *span,
                        "no backward collective to derive",
                    )
                    .with_help("declare the backward schedule by name instead (`dual NAME`)")]);
                }
                let params: BTreeMap<String, i64> = bound.iter().cloned().collect();
                duals.push((
                    DualDecl::Schedule {
                        name: super::transpose::derived_name(&sched.name.name),
                        params: super::transpose::dual_params(kind, &params),
                    },
                    *span,
                ));
            }
            Dual::Named {
                name, args, span, ..
            } => {
                let Some((ds, _)) = lookup.find(&name.name) else {
                    return Err(vec![err(
                        codes::E_UNKNOWN_NAME,
                        format!("dual schedule `{}` is not defined", name.name),
                        name.span,
                        "no schedule of this name in the library",
                    )
                    .with_help("add the file that defines it, or fix the name")]);
                };
                let mut params = BTreeMap::new();
                for (an, ae) in args {
                    if !ds.params.iter().any(|q| q.name.name == an.name) {
                        return Err(vec![err(
                            codes::E_UNKNOWN_NAME,
                            format!("dual `{}` has no param `{}`", name.name, an.name),
                            an.span,
                            "not a param of the dual",
                        )]);
                    }
                    params.insert(an.name.clone(), eval_int(ae, &senv).map_err(one)?);
                }
                if let Some(missing) = ds
                    .params
                    .iter()
                    .find(|q| !params.contains_key(&q.name.name))
                {
                    return Err(vec![err(
                        codes::E_DUAL_ARGS,
                        format!(
                            "dual `{}` needs a value for its param `{}`",
                            name.name, missing.name.name
                        ),
                        *span,
                        format!("bind it: `{}({} = …)`", name.name, missing.name.name),
                    )]);
                }
                duals.push((
                    DualDecl::Schedule {
                        name: name.name.clone(),
                        params,
                    },
                    *span,
                ));
            }
        }
    }

    let mut prog = Program {
        schedule: sched.name.name.clone(),
        collective: kind,
        group_size: p,
        params: bound.into_iter().collect(),
        hierarchy,
        size_vars: match &declared {
            Some(_) => crate::front::declared::size_vars(),
            None => collectives::size_vars(res.kind),
        },
        declared,
        buffers: b.buffers,
        buffer_spans: b.buffer_spans,
        signals: b.signals,
        signal_spans: b.signal_spans,
        ranks,
        entry_signals: vec![Vec::new(); p as usize],
        exit_signals: vec![Vec::new(); p as usize],
        duals,
        header_span: sched.header_span,
    };
    // `use` may have declared more scratch while unrolling.
    limits::check_locations(p, &prog.buffers, &prog.buffer_spans, prog.header_span).map_err(one)?;
    limits::check_size_overflow(&prog).map_err(one)?;
    super::credits::insert_launch_credits(&mut prog);
    limits::check_signal_slots(&prog).map_err(one)?;
    prog.assign_epoch_strides();
    Ok(prog)
}

/// Name the rank (and group size and params) in an instantiation error.
fn on_rank(mut d: Diagnostic, r: Rank, p: u32, params: &[(String, i64)]) -> Diagnostic {
    if d.notes.iter().any(|n| n.starts_with("on rank")) {
        return d;
    }
    d.message = format!("{} (rank {r})", d.message);
    let mut note = format!("on rank {r}, P = {p}");
    for (k, v) in params {
        note.push_str(&format!(", {k} = {v}"));
    }
    d.with_note(note)
}

fn size_const(v: i64, span: Span) -> Result<SizeExpr, Diagnostic> {
    u64::try_from(v).map(SizeExpr::Const).map_err(|_| {
        err(
            codes::E_COUNT,
            format!("a size must not be negative, found {v}"),
            span,
            "negative",
        )
    })
}

fn size_add(a: SizeExpr, b: SizeExpr) -> SizeExpr {
    match (a, b) {
        (SizeExpr::Const(x), SizeExpr::Const(y)) => SizeExpr::Const(x.saturating_add(y)),
        (SizeExpr::Const(0), e) | (e, SizeExpr::Const(0)) => e,
        (a, b) => SizeExpr::Add(Box::new(a), Box::new(b)),
    }
}

fn size_mul(a: SizeExpr, b: SizeExpr) -> SizeExpr {
    match (a, b) {
        (SizeExpr::Const(x), SizeExpr::Const(y)) => SizeExpr::Const(x.saturating_mul(y)),
        (SizeExpr::Const(1), e) | (e, SizeExpr::Const(1)) => e,
        (SizeExpr::Const(x), e) | (e, SizeExpr::Const(x)) => e.scaled(x),
        (a, b) => SizeExpr::Mul(Box::new(a), Box::new(b)),
    }
}

fn fold_size(s: &SizeAst, env: &StaticEnv<'_>) -> Result<SizeExpr, Diagnostic> {
    Ok(match s {
        SizeAst::Int(v, span) => size_const(*v, *span)?,
        SizeAst::P(_) => SizeExpr::Const(env.p as u64),
        SizeAst::Name(id) => match lookup_param(env.params, &id.name) {
            Some(v) => size_const(v, id.span)?,
            None => SizeExpr::var(&id.name),
        },
        SizeAst::Add(a, b) => size_add(fold_size(a, env)?, fold_size(b, env)?),
        SizeAst::Mul(a, b) => size_mul(fold_size(a, env)?, fold_size(b, env)?),
        SizeAst::Paren(a, _) => fold_size(a, env)?,
    })
}

impl<'a> Builder<'a> {
    /// Create the scratch buffers, signal slots and barrier slot of one schedule instance.
    fn declare_instance(
        &mut self,
        sched: &'a Schedule,
        res: &ResolvedSchedule,
        callee: &str,
        env: &StaticEnv<'_>,
        roles: &[(String, BufBind)],
        prefix: String,
    ) -> Result<Instance, Diagnostic> {
        let mut buffers: Vec<(String, BufBind)> = Vec::new();
        let mut signals = Vec::new();
        for item in &sched.items {
            match &item.kind {
                StmtKind::Scratch {
                    name,
                    chunks,
                    size,
                    class,
                } => {
                    let k = positive(chunks, env, "a scratch chunk count")?;
                    let chunk = match size {
                        ScratchSize::Each(s) => fold_size(s, env)?,
                        ScratchSize::Of(of) => {
                            let bind = roles
                                .iter()
                                .chain(buffers.iter())
                                .find(|(n, _)| *n == of.name)
                                .map(|(_, b)| *b)
                                .ok_or_else(|| {
                                    err(
                                        codes::E_UNKNOWN_NAME,
                                        format!("unknown buffer `{}`", of.name),
                                        of.span,
                                        "not a role or earlier scratch",
                                    )
                                })?;
                            let under = &self.buffers[bind.id as usize];
                            match &under.extent {
                                Extent::Split { total } => total.clone().ceil_div(under.chunks as u64),
                                Extent::Blocks { block, .. } => block.clone().ceil_div(
                                    under.extent.chunks_per_block(under.chunks) as u64,
                                ),
                                Extent::Uniform { chunk } => chunk.clone(),
                                Extent::Counts { .. } => {
                                    return Err(err(
                                        codes::E_SCRATCH_OF_COUNTS,
                                        format!("`{}` has runtime-sized chunks; `of` needs a fixed chunk capacity", of.name),
                                        of.span,
                                        "bound to an alltoallv role",
                                    ))
                                }
                            }
                        }
                    };
                    let id = self.buffers.len() as u32;
                    self.buffers.push(BufferDecl {
                        name: format!("{prefix}{}", name.name),
                        role: BufferRole::Scratch,
                        chunks: k,
                        extent: Extent::Uniform { chunk },
                        elem: match class {
                            Some(ElemClassAst::Wire) => ElemClass::Wire,
                            Some(ElemClassAst::Acc) => ElemClass::Acc,
                            _ => ElemClass::Data,
                        },
                    });
                    self.buffer_spans.push(item.span);
                    buffers.push((
                        name.name.clone(),
                        BufBind {
                            id,
                            first: 0,
                            chunks: k,
                        },
                    ));
                }
                StmtKind::Signals { decls, .. } => {
                    for (n, len) in decls {
                        let mode = res
                            .signal_modes
                            .get(&n.name)
                            .copied()
                            .unwrap_or(SignalMode::Add);
                        let base = self.signals.len() as u32;
                        let count = match len {
                            None => {
                                self.signals.push(SignalSlot {
                                    name: format!("{prefix}{}", n.name),
                                    mode,
                                });
                                self.signal_spans.push(n.span);
                                1
                            }
                            Some(e) => {
                                let l = positive(e, env, "a signal array length")?;
                                for i in 0..l {
                                    self.signals.push(SignalSlot {
                                        name: format!("{prefix}{}[{i}]", n.name),
                                        mode,
                                    });
                                    self.signal_spans.push(n.span);
                                }
                                l
                            }
                        };
                        signals.push((n.name.clone(), SigBind { base, len: count }));
                    }
                }
                _ => {}
            }
        }
        let barrier = res.uses_barrier.then(|| {
            let slot = self.signals.len() as u32;
            self.signals.push(SignalSlot {
                name: format!("{prefix}__barrier"),
                mode: SignalMode::Add,
            });
            self.signal_spans.push(sched.header_span);
            slot
        });
        Ok(Instance {
            callee: callee.to_string(),
            buffers,
            signals,
            barrier,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn frame(
        &self,
        sched: &'a Schedule,
        res: &'a ResolvedSchedule,
        p: i64,
        rank: i64,
        params: Vec<(String, i64)>,
        rank_map: Vec<Rank>,
        roles: &[(String, BufBind)],
        inst: &Instance,
        inlined_from: Vec<Span>,
        prefix: String,
    ) -> Result<Frame<'a>, Diagnostic> {
        let mut buffers = HashMap::new();
        for (role, (_, bind)) in sched.roles.iter().zip(roles) {
            buffers.insert(role.name.name.as_str(), *bind);
        }
        let mut signals = HashMap::new();
        let mut groups = HashMap::new();
        let senv = StaticEnv { p, params: &params };
        for item in &sched.items {
            match &item.kind {
                StmtKind::Scratch { name, .. } => {
                    if let Some((_, bb)) = inst.buffers.iter().find(|(n, _)| *n == name.name) {
                        buffers.insert(name.name.as_str(), *bb);
                    }
                }
                StmtKind::Signals { decls, .. } => {
                    for (n, _) in decls {
                        if let Some((_, sb)) = inst.signals.iter().find(|(k, _)| *k == n.name) {
                            signals.insert(n.name.as_str(), *sb);
                        }
                    }
                }
                StmtKind::Group { name, kind, arg } => {
                    let g = positive(arg, &senv, "a group's block size or stride")? as i64;
                    let members: Vec<i64> = match kind {
                        GroupKind::Block => {
                            let start = (rank / g) * g;
                            (start..(start + g).min(p)).collect()
                        }
                        GroupKind::Stride => (rank % g..p).step_by(g as usize).collect(),
                    };
                    groups.insert(name.name.as_str(), members);
                }
                _ => {}
            }
        }
        Ok(Frame {
            res,
            p,
            rank,
            params,
            rank_map,
            buffers,
            signals,
            groups,
            barrier: inst.barrier,
            barriers_done: 0,
            locals: Vec::new(),
            inlined_from,
            prefix,
            channel: 0,
        })
    }

    fn exec_stmts(
        &mut self,
        f: &mut Frame<'a>,
        stmts: &'a [Stmt],
        out: &mut Vec<Step>,
        st: &mut RankState,
    ) -> Result<(), Diagnostic> {
        let mark = f.locals.len();
        for s in stmts {
            self.exec(f, s, out, st)?;
        }
        f.locals.truncate(mark);
        Ok(())
    }

    fn step(f: &Frame<'_>, op: Op, span: Span) -> Step {
        Step {
            op,
            span,
            inlined_from: f.inlined_from.clone(),
            channel: f.channel,
        }
    }

    fn peer(f: &Frame<'_>, e: &Expr) -> Result<(i64, Rank), Diagnostic> {
        let v = eval_int(e, f)?;
        if v < 0 || v >= f.p {
            return Err(err(
                codes::E_PEER_RANGE,
                format!("peer {v} is outside the group 0..{}", f.p),
                e.span,
                format!("evaluates to {v}"),
            ));
        }
        Ok((v, f.rank_map[v as usize]))
    }

    /// Concrete region; `allow_empty` for reduce operands.
    fn region(f: &Frame<'_>, r: &RegionAst, allow_empty: bool) -> Result<Region, Diagnostic> {
        let bind = *f.buffers.get(r.buffer.name.as_str()).ok_or_else(|| {
            err(
                codes::E_UNKNOWN_NAME,
                format!("unknown buffer `{}`", r.buffer.name),
                r.buffer.span,
                "not a buffer",
            )
        })?;
        let k = bind.chunks as i64;
        let (first, count) = match &r.index {
            None => (0, k),
            Some(IndexAst::One(e)) => {
                let i = eval_int(e, f)?;
                if i < 0 || i >= k {
                    return Err(err(
                        codes::E_BOUNDS,
                        format!(
                            "chunk {i} of `{}` is out of bounds (it has {k} chunks)",
                            r.buffer.name
                        ),
                        e.span,
                        format!("evaluates to {i}"),
                    ));
                }
                (i, 1)
            }
            Some(IndexAst::Range(a, b)) => {
                let (x, y) = (eval_int(a, f)?, eval_int(b, f)?);
                if x < 0 || y > k || x > k {
                    return Err(err(
                        codes::E_BOUNDS,
                        format!(
                            "chunks {x}..{y} of `{}` are out of bounds (it has {k} chunks)",
                            r.buffer.name
                        ),
                        r.span,
                        format!("range {x}..{y}"),
                    ));
                }
                if y < x || (y == x && !allow_empty) {
                    return Err(err(
                        codes::E_EMPTY_REGION,
                        format!("chunk range {x}..{y} of `{}` is empty", r.buffer.name),
                        r.span,
                        "empty range",
                    )
                    .with_help(
                        "guard the statement with `if`; only reduce operands may be empty",
                    ));
                }
                (x, y - x)
            }
        };
        Ok(Region {
            buffer: bind.id,
            first: bind.first + first as u32,
            count: count as u32,
        })
    }

    fn slot(f: &Frame<'_>, s: &SignalRef) -> Result<u32, Diagnostic> {
        let bind = *f.signals.get(s.name.name.as_str()).ok_or_else(|| {
            err(
                codes::E_UNKNOWN_NAME,
                format!("unknown signal `{}`", s.name.name),
                s.name.span,
                "not a signal",
            )
        })?;
        let i = match &s.index {
            None => 0,
            Some(e) => {
                let i = eval_int(e, f)?;
                if i < 0 || i >= bind.len as i64 {
                    return Err(err(
                        codes::E_BOUNDS,
                        format!(
                            "signal index {i} of `{}` is out of bounds (length {})",
                            s.name.name, bind.len
                        ),
                        e.span,
                        format!("evaluates to {i}"),
                    ));
                }
                i as u32
            }
        };
        Ok(bind.base + i)
    }

    fn signal_value(f: &Frame<'_>, e: &Expr) -> Result<u64, Diagnostic> {
        let v = eval_int(e, f)?;
        u64::try_from(v).map_err(|_| {
            err(
                codes::E_NEGATIVE_SIGNAL,
                format!("signal value {v} is negative"),
                e.span,
                "counters only grow",
            )
        })
    }

    fn mode(f: &Frame<'_>, s: &SignalRef) -> SignalMode {
        f.res
            .signal_modes
            .get(&s.name.name)
            .copied()
            .unwrap_or(SignalMode::Add)
    }

    fn tick(st: &mut RankState, n: u64, span: Span) -> Result<(), Diagnostic> {
        st.statements = st.statements.saturating_add(n);
        if st.statements > MAX_STATEMENTS_PER_RANK {
            return Err(st.too_large(
                Measure::Statements,
                st.statements,
                MAX_STATEMENTS_PER_RANK,
                span,
            ));
        }
        Ok(())
    }

    fn exec(
        &mut self,
        f: &mut Frame<'a>,
        s: &'a Stmt,
        out: &mut Vec<Step>,
        st: &mut RankState,
    ) -> Result<(), Diagnostic> {
        Self::tick(st, 1, s.span)?;
        if out.len() as u64 > st.step_limit {
            return Err(st.too_large(Measure::Steps, out.len() as u64, st.step_limit, s.span));
        }
        match &s.kind {
            StmtKind::Scratch { .. }
            | StmtKind::Signals { .. }
            | StmtKind::Group { .. }
            | StmtKind::Require { .. } => {}
            // The resolver refuses a chunk map in a schedule.
            StmtKind::Map { .. } => {
                return Err(err(
                    codes::E_MISPLACED,
                    "a chunk map belongs in a collective declaration",
                    s.span,
                    "not a step",
                ))
            }
            StmtKind::Let { name, value } => {
                let v = eval_int(value, f)?;
                f.locals.push((name.name.as_str(), v));
            }
            StmtKind::For {
                var,
                from,
                to,
                body,
            } => {
                let (a, b) = (eval_int(from, f)?, eval_int(to, f)?);
                let trips = (b as i128 - a as i128).clamp(0, u64::MAX as i128) as u64;
                st.loops.push(LoopFrame {
                    header: var.span.join(to.span),
                    var: var.name.clone(),
                    trips,
                    done: 0,
                    statements0: st.statements,
                    steps0: out.len() as u64,
                });
                Self::tick(st, trips, s.span)?;
                let mut i = a;
                while i < b {
                    f.locals.push((var.name.as_str(), i));
                    self.exec_stmts(f, &body.stmts, out, st)
                        .map_err(|d| in_iteration(d, &var.name, i))?;
                    f.locals.pop();
                    i += 1;
                    if let Some(l) = st.loops.last_mut() {
                        l.done += 1;
                    }
                }
                st.loops.pop();
            }
            StmtKind::If { arms, otherwise } => {
                let mut taken = None;
                for (cond, block) in arms {
                    if eval_bool(cond, f)? {
                        taken = Some(block);
                        break;
                    }
                }
                if let Some(b) = taken.or(otherwise.as_ref()) {
                    self.exec_stmts(f, &b.stmts, out, st)?;
                }
            }
            StmtKind::Channel { channel, body } => {
                let c = eval_int(channel, f)?;
                let max = symsched_plan::MAX_CHANNELS;
                let Some(c) = u32::try_from(c).ok().filter(|c| *c < max) else {
                    return Err(err(
                        codes::E_CHANNEL,
                        format!("channel {c} does not exist: a rank has channels 0..{max}"),
                        channel.span,
                        format!("evaluates to {c}"),
                    ));
                };
                let outer = std::mem::replace(&mut f.channel, c);
                let r = self.exec_stmts(f, &body.stmts, out, st);
                f.channel = outer;
                r?;
            }
            StmtKind::Put {
                src,
                dst,
                peer,
                signal,
            } => {
                let src_r = Self::region(f, src, false)?;
                let dst_r = Self::region(f, dst, false)?;
                let (local_peer, peer_rank) = Self::peer(f, peer)?;
                let signal = match signal {
                    None => None,
                    Some(ps) => {
                        if let Some(pe) = &ps.peer {
                            let v = eval_int(pe, f)?;
                            if v != local_peer {
                                return Err(err(
                                    codes::E_SIGNAL_PEER,
                                    format!("the fused signal goes to peer {v} but the data to peer {local_peer}"),
                                    pe.span,
                                    format!("evaluates to {v}"),
                                )
                                .with_label(peer.span, format!("evaluates to {local_peer}"))
                                .with_help("a put-with-signal signals the peer it writes to; use a separate `signal` statement"));
                            }
                        }
                        Some(SignalUpdate {
                            slot: Self::slot(f, &ps.signal)?,
                            peer: peer_rank,
                            mode: Self::mode(f, &ps.signal),
                            value: Self::signal_value(f, &ps.value)?,
                            stride: 0,
                        })
                    }
                };
                out.push(Self::step(
                    f,
                    Op::Put {
                        src: src_r,
                        dst: dst_r,
                        peer: peer_rank,
                        signal,
                    },
                    s.span,
                ));
            }
            StmtKind::Get { src, peer, dst } => {
                let src_r = Self::region(f, src, false)?;
                let (_, peer_rank) = Self::peer(f, peer)?;
                let dst_r = Self::region(f, dst, false)?;
                out.push(Self::step(
                    f,
                    Op::Get {
                        src: src_r,
                        dst: dst_r,
                        peer: peer_rank,
                    },
                    s.span,
                ));
            }
            StmtKind::Signal {
                signal,
                peer,
                value,
                ..
            } => {
                let update = SignalUpdate {
                    slot: Self::slot(f, signal)?,
                    peer: Self::peer(f, peer)?.1,
                    mode: Self::mode(f, signal),
                    value: Self::signal_value(f, value)?,
                    stride: 0,
                };
                out.push(Self::step(f, Op::Signal { update }, s.span));
            }
            StmtKind::Wait { signal, cmp, value } => {
                let slot = Self::slot(f, signal)?;
                let offset = Self::signal_value(f, value)?;
                let cmp = match cmp {
                    CmpOp::Eq => Cmp::Eq,
                    CmpOp::Ne => Cmp::Ne,
                    CmpOp::Lt => Cmp::Lt,
                    CmpOp::Le => Cmp::Le,
                    CmpOp::Gt => Cmp::Gt,
                    CmpOp::Ge => Cmp::Ge,
                };
                out.push(Self::step(
                    f,
                    Op::Wait {
                        slot,
                        cmp,
                        target: WaitTarget { stride: 0, offset },
                    },
                    s.span,
                ));
            }
            StmtKind::Assign { dst, op } => {
                let dst_r = Self::region(f, dst, false)?;
                let op = match op {
                    LocalOp::Copy(r) => Op::Copy {
                        src: Self::region(f, r, false)?,
                        dst: dst_r,
                    },
                    LocalOp::Cast(r) => Op::Cast {
                        src: Self::region(f, r, false)?,
                        dst: dst_r,
                    },
                    LocalOp::Reduce(rs) => {
                        let mut srcs = Vec::new();
                        for r in rs {
                            let reg = Self::region(f, r, true)?;
                            if matches!(r.index, Some(IndexAst::Range(..))) {
                                Self::tick(st, reg.count as u64, r.span)?;
                                srcs.extend((0..reg.count).map(|i| Region {
                                    first: reg.first + i,
                                    count: 1,
                                    ..reg
                                }));
                            } else {
                                srcs.push(reg);
                            }
                        }
                        if srcs.is_empty() {
                            return Err(err(
                                codes::E_EMPTY_REDUCE,
                                "reduce has no operands: every range is empty",
                                s.span,
                                "nothing to reduce",
                            )
                            .with_help("guard the statement with `if`, or add an operand"));
                        }
                        Op::Reduce { dst: dst_r, srcs }
                    }
                };
                out.push(Self::step(f, op, s.span));
            }
            StmtKind::Matmul { c, a, b } => {
                let op = Op::Matmul {
                    c: Self::region(f, c, false)?,
                    a: Self::region(f, a, false)?,
                    b: Self::region(f, b, false)?,
                };
                out.push(Self::step(f, op, s.span));
            }
            StmtKind::HostColl { op, region, group } => {
                // The framework's collectives are called from the launching thread, in one
                // order on every member: channel 0's.
                if f.channel != 0 {
                    return Err(err(
                        codes::E_CHANNEL,
                        format!("a `hostcoll` runs on channel 0, not channel {}", f.channel),
                        s.span,
                        "inside a `channel` block",
                    )
                    .with_help("move it out of the `channel` block"));
                }
                let hop = hostcoll_op(&op.name).ok_or_else(|| {
                    err(
                        codes::E_UNKNOWN_HOSTCOLL,
                        format!("`{}` is not a framework collective", op.name),
                        op.span,
                        "unknown",
                    )
                })?;
                let reg = Self::region(f, region, false)?;
                let members = f
                    .groups
                    .get(group.name.as_str())
                    .ok_or_else(|| {
                        err(
                            codes::E_UNKNOWN_NAME,
                            format!("unknown group `{}`", group.name),
                            group.span,
                            "not a group",
                        )
                    })?
                    .iter()
                    .map(|m| f.rank_map[*m as usize])
                    .collect();
                out.push(Self::step(
                    f,
                    Op::HostColl {
                        op: hop,
                        region: reg,
                        members,
                    },
                    s.span,
                ));
            }
            StmtKind::Barrier => {
                let slot = f.barrier.ok_or_else(|| {
                    err(
                        codes::E_UNKNOWN_NAME,
                        "internal: no barrier slot",
                        s.span,
                        "here",
                    )
                })?;
                for q in 0..f.p as usize {
                    let update = SignalUpdate {
                        slot,
                        peer: f.rank_map[q],
                        mode: SignalMode::Add,
                        value: 1,
                        stride: 0,
                    };
                    out.push(Self::step(f, Op::Signal { update }, s.span));
                }
                f.barriers_done += 1;
                let offset = f.barriers_done * f.p as u64;
                out.push(Self::step(
                    f,
                    Op::Wait {
                        slot,
                        cmp: Cmp::Ge,
                        target: WaitTarget { stride: 0, offset },
                    },
                    s.span,
                ));
            }
            StmtKind::Use {
                callee,
                args,
                group,
            } => self.exec_use(f, s, callee, args, group, out, st)?,
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exec_use(
        &mut self,
        f: &mut Frame<'a>,
        s: &'a Stmt,
        callee: &'a Ident,
        args: &'a [UseArg],
        group: &'a Ident,
        out: &mut Vec<Step>,
        st: &mut RankState,
    ) -> Result<(), Diagnostic> {
        let lookup = self.lookup;
        let Some((cs, cres)) = lookup.find(&callee.name) else {
            return Err(err(
                codes::E_UNKNOWN_NAME,
                format!("no schedule named `{}`", callee.name),
                callee.span,
                "not defined in the library",
            ));
        };
        if st.call_stack.contains(&callee.name) {
            return Err(err(
                codes::E_RECURSION,
                format!("`use {}` is recursive", callee.name),
                callee.span,
                format!(
                    "call chain: {} -> {}",
                    st.call_stack.join(" -> "),
                    callee.name
                ),
            ));
        }
        let members: Vec<i64> = f
            .groups
            .get(group.name.as_str())
            .ok_or_else(|| {
                err(
                    codes::E_UNKNOWN_NAME,
                    format!("unknown group `{}`", group.name),
                    group.span,
                    "not a group",
                )
            })?
            .clone();
        let sub_p = members.len() as i64;
        let sub_rank = members.iter().position(|m| *m == f.rank).unwrap_or(0) as i64;
        let rank_map: Vec<Rank> = members.iter().map(|m| f.rank_map[*m as usize]).collect();

        // Callee params first (role chunk counts may depend on them).
        let mut given = BTreeMap::new();
        for a in args {
            if cs.params.iter().any(|p| p.name.name == a.name.name) {
                let v = match &a.value {
                    UseValue::Expr(e) => eval_int(e, f)?,
                    UseValue::Region(r) if r.index.is_none() => {
                        f.name(&r.buffer.name).ok_or_else(|| {
                            err(
                                codes::E_USE_ARGS,
                                format!("param `{}` needs an integer", a.name.name),
                                r.span,
                                "not an integer",
                            )
                        })?
                    }
                    UseValue::Region(r) => {
                        return Err(err(
                            codes::E_USE_ARGS,
                            format!("param `{}` needs an integer, found a region", a.name.name),
                            r.span,
                            "a region",
                        ))
                    }
                };
                given.insert(a.name.name.clone(), v);
            } else if !cs.roles.iter().any(|r| r.name.name == a.name.name) {
                return Err(err(
                    codes::E_UNKNOWN_NAME,
                    format!("`{}` has no role or param `{}`", callee.name, a.name.name),
                    a.name.span,
                    "unknown argument",
                ));
            }
        }
        if let Some(missing) = cs.params.iter().find(|q| !given.contains_key(&q.name.name)) {
            return Err(err(
                codes::E_USE_ARGS,
                format!(
                    "`use {}` does not bind its param `{}`",
                    callee.name, missing.name.name
                ),
                s.span,
                format!("add `{} = EXPR`", missing.name.name),
            )
            .with_label(missing.span, "param declared here"));
        }
        let params = bind_params(cs, sub_p as u32, &given, s.span)?;
        let senv = StaticEnv {
            p: sub_p,
            params: &params,
        };
        let mut roles = Vec::new();
        for role in &cs.roles {
            let Some(arg) = args.iter().find(|a| a.name.name == role.name.name) else {
                return Err(err(
                    codes::E_USE_ARGS,
                    format!(
                        "`use {}` does not bind its role `{}`",
                        callee.name, role.name.name
                    ),
                    s.span,
                    format!("add `{} = REGION`", role.name.name),
                )
                .with_label(role.span, "role declared here"));
            };
            let UseValue::Region(r) = &arg.value else {
                return Err(err(
                    codes::E_USE_ARGS,
                    format!(
                        "role `{}` needs a buffer region, found an integer",
                        role.name.name
                    ),
                    arg.span,
                    "not a region",
                ));
            };
            let reg = Self::region(f, r, false)?;
            let k = positive(&role.chunks, &senv, "a role's chunk count")?;
            if reg.count != k {
                return Err(err(
                    codes::E_USE_CHUNKS,
                    format!(
                        "role `{}` of `{}` has {k} chunks but the region bound to it has {}",
                        role.name.name, callee.name, reg.count
                    ),
                    r.span,
                    format!("{} chunk(s)", reg.count),
                )
                .with_label(role.span, format!("{k} chunk(s) at P = {sub_p}")));
            }
            roles.push((
                role.name.name.clone(),
                BufBind {
                    id: reg.buffer,
                    first: reg.first,
                    chunks: k,
                },
            ));
        }

        // A schedule inlined by `use` meets its own requirements with the callee's binding (the
        // top-level schedule's were checked once, before unrolling).
        check_requirements(cs, &senv)?;
        let idx = st.instances_used;
        st.instances_used += 1;
        let prefix = format!("{}{}#{idx}.", f.prefix, callee.name);
        let inst = if let Some(inst) = self.instances.get(idx) {
            if inst.callee != callee.name {
                return Err(err(
                    codes::E_ASYMMETRIC,
                    format!(
                        "ranks disagree on `use` number {idx}: `{}` here, `{}` on an earlier rank",
                        callee.name, inst.callee
                    ),
                    s.span,
                    "every rank must execute the same sequence of `use`",
                ));
            }
            inst.clone()
        } else {
            let inst =
                self.declare_instance(cs, cres, &callee.name, &senv, &roles, prefix.clone())?;
            self.instances.push(inst.clone());
            inst
        };
        let mut inlined = f.inlined_from.clone();
        inlined.push(s.span);
        let mut sub = self.frame(
            cs, cres, sub_p, sub_rank, params, rank_map, &roles, &inst, inlined, prefix,
        )?;
        // The callee's steps run on the channel of the `use`.
        sub.channel = f.channel;
        st.call_stack.push(callee.name.clone());
        let r = self.exec_stmts(&mut sub, &cs.items, out, st);
        st.call_stack.pop();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::{parse, resolve::resolve};

    struct One(Vec<(Schedule, ResolvedSchedule)>);
    impl ScheduleLookup for One {
        fn find(&self, name: &str) -> Option<(&Schedule, &ResolvedSchedule)> {
            self.0
                .iter()
                .find(|(s, _)| s.name.name == name)
                .map(|(s, r)| (s, r))
        }
    }

    fn lib(text: &str) -> One {
        let f = parse(0, text).unwrap();
        One(f
            .schedules
            .into_iter()
            .map(|s| {
                let r = resolve(&s).unwrap();
                (s, r)
            })
            .collect())
    }

    #[test]
    fn allgather_push_unrolls() {
        let l = lib("schedule ag implements allgather(in: [1], out: [P]) {\n signal done;\n for p in 0..P { put in -> out[rank] @ p, signal done @ p += 1; }\n wait done >= P;\n}\n");
        let prog = instantiate(&l, "ag", 4, &BTreeMap::new()).unwrap();
        assert_eq!(prog.ranks.len(), 4);
        let puts = prog.ranks[2]
            .iter()
            .filter(|s| matches!(s.op, Op::Put { .. }))
            .count();
        assert_eq!(puts, 4);
        match &prog.ranks[2].last().unwrap().op {
            Op::Wait { target, .. } => assert_eq!(target.offset, 4),
            other => panic!("{other:?}"),
        }
        assert_eq!(prog.buffers[1].chunks, 4);
    }

    #[test]
    fn peer_out_of_range_names_rank() {
        let l = lib("schedule ag implements allgather(in: [1], out: [P]) {\n put in -> out[rank] @ rank + 1;\n}\n");
        let e = instantiate(&l, "ag", 4, &BTreeMap::new()).unwrap_err();
        assert_eq!(e[0].code, codes::E_PEER_RANGE);
        assert!(
            e[0].notes.iter().any(|n| n == "on rank 3, P = 4"),
            "{:?}",
            e[0]
        );
        assert!(e[0].message.ends_with("(rank 3)"));
    }

    /// The value of `let v = EXPR;` at P = 8, rank 3, read back from a wait target.
    fn value_of(expr: &str) -> Result<i64, Vec<Diagnostic>> {
        let l = lib(&format!(
            "schedule v implements allreduce(x: [1]) {{\n signal s;\n let v = {expr};\n wait s >= v;\n}}\n"
        ));
        let prog = instantiate(&l, "v", 8, &BTreeMap::new())?;
        let step = prog.ranks[3].last().expect("the wait");
        match &step.op {
            Op::Wait { target, .. } => Ok(target.offset as i64),
            other => panic!("unexpected step {other:?}"),
        }
    }

    #[test]
    fn integer_vocabulary_evaluates_with_documented_precedence() {
        assert_eq!(
            value_of("2 ** 3 ** 2").unwrap(),
            512,
            "`**` groups to the right"
        );
        assert_eq!(
            value_of("-2 ** 2 + 8").unwrap(),
            4,
            "`-` applies after `**`"
        );
        assert_eq!(
            value_of("1 << 2 + 1").unwrap(),
            8,
            "shifts bind looser than `+`"
        );
        assert_eq!(value_of("64 >> log2(P)").unwrap(), 8);
        assert_eq!(value_of("rank ^ 1").unwrap(), 2);
        assert_eq!(value_of("(6 ^ 3) * 2").unwrap(), 10);
        assert_eq!(value_of("log2(P - 1)").unwrap(), 2, "log2 rounds down");
        assert_eq!(
            value_of("if rank == 0 { 5 } else if is_pow2(rank + 1) { 7 } else { 9 }").unwrap(),
            7
        );
        assert_eq!(value_of("if is_pow2(P + 1) { 1 } else { 2 }").unwrap(), 2);
        assert_eq!(
            value_of("(-9 >> 1) + 10").unwrap(),
            5,
            "`>>` rounds toward minus infinity"
        );
    }

    #[test]
    fn integer_vocabulary_refuses_what_has_no_value() {
        for (expr, what) in [
            ("2 ** (0 - 1)", "negative exponent"),
            ("3 ** 40", "integer overflow"),
            ("1 << 63", "shift amount out of range"),
            ("3 << 62", "integer overflow"),
            ("log2(P - 8)", "log2 of a value that is not positive"),
        ] {
            let e = value_of(expr).unwrap_err();
            assert_eq!(e[0].code, codes::E_OVERFLOW, "{expr}");
            assert!(e[0].message.starts_with(what), "{expr}: {}", e[0].message);
        }
    }

    #[test]
    fn requirements_restrict_the_param_space_and_refuse_instantiations() {
        let l = lib("schedule r(K in 1..5) implements allreduce(x: [1]) {\n require is_pow2(P);\n require P % K == 0;\n}\n");
        let (s, _) = l.find("r").unwrap();
        let ks = |p: u32| -> Vec<i64> {
            param_space(s, p, &BTreeMap::new())
                .unwrap()
                .iter()
                .map(|b| b["K"])
                .collect()
        };
        assert_eq!(ks(4), vec![1, 2, 4]);
        assert_eq!(ks(2), vec![1, 2]);
        let e = param_space(s, 6, &BTreeMap::new()).unwrap_err();
        assert_eq!(e[0].code, codes::E_REQUIRE);
        assert!(e[0].message.contains("`is_pow2(P)`"), "{}", e[0].message);
        assert!(e[0].message.contains("P = 6"), "{}", e[0].message);
        let k3: BTreeMap<String, i64> = [("K".into(), 3)].into_iter().collect();
        let e = instantiate(&l, "r", 4, &k3).unwrap_err();
        assert_eq!(e[0].code, codes::E_REQUIRE);
        assert!(e[0].message.contains("`P % K == 0`"), "{}", e[0].message);
        assert!(e[0].message.contains("K = 3"), "{}", e[0].message);
        let k2: BTreeMap<String, i64> = [("K".into(), 2)].into_iter().collect();
        assert!(instantiate(&l, "r", 4, &k2).is_ok());
    }

    #[test]
    fn a_used_schedule_meets_its_own_requirements() {
        let text = "schedule inner implements allreduce(x: [1]) {\n require P >= 2;\n}\n\
schedule outer implements allreduce(x: [1]) {\n group g = block(1);\n use inner(x = x) within g;\n}\n";
        let l = lib(text);
        let e = instantiate(&l, "outer", 4, &BTreeMap::new()).unwrap_err();
        assert_eq!(e[0].code, codes::E_REQUIRE);
        assert!(
            e[0].message.contains("`inner` requires `P >= 2`"),
            "{}",
            e[0].message
        );
    }

    #[test]
    fn divisors_and_param_space() {
        let l = lib("schedule h(L in divisors(P), root in 0..L) implements allreduce(x: [1]) { }");
        let (s, _) = l.find("h").unwrap();
        let space = param_space(s, 6, &BTreeMap::new()).unwrap();
        assert_eq!(space.len(), 1 + 2 + 3 + 6);
        let fixed: BTreeMap<String, i64> = [("L".to_string(), 4)].into_iter().collect();
        assert_eq!(
            param_space(s, 6, &fixed).unwrap_err()[0].code,
            codes::E_PARAM_RANGE
        );
    }

    #[test]
    fn use_inlines_with_prefix_and_mapping() {
        let text = "schedule inner implements allreduce(x: [1]) {\n signal s;\n for q in 0..P { signal s @ q += 1; }\n wait s >= P;\n}\n\
schedule outer implements allreduce(x: [1]) {\n group g = stride(2);\n use inner(x = x) within g;\n}\n";
        let l = lib(text);
        let prog = instantiate(&l, "outer", 4, &BTreeMap::new()).unwrap();
        assert_eq!(prog.signals[0].name, "inner#0.s");
        let peers: Vec<u32> = prog.ranks[1]
            .iter()
            .filter_map(|s| match &s.op {
                Op::Signal { update } => Some(update.peer),
                _ => None,
            })
            .collect();
        assert_eq!(peers, vec![1, 3]);
        assert_eq!(prog.ranks[1][0].inlined_from.len(), 1);
    }

    #[test]
    fn barrier_lowers_to_signals_and_wait() {
        let l = lib("schedule b implements allreduce(x: [1]) { barrier; barrier; }");
        let prog = instantiate(&l, "b", 3, &BTreeMap::new()).unwrap();
        let waits: Vec<u64> = prog.ranks[0]
            .iter()
            .filter_map(|s| match &s.op {
                Op::Wait { target, slot, .. }
                    if prog.signals[*slot as usize].name == "__barrier" =>
                {
                    Some(target.offset)
                }
                _ => None,
            })
            .collect();
        assert_eq!(waits, vec![3, 6]);
    }
}
