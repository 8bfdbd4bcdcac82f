//! Name resolution and type checks of one schedule (E02xx).
//!
//! Names live in one namespace per schedule: params, roles, scratch buffers, signals and groups
//! are global to the schedule (declared anywhere at the top level of its body); `let` and loop
//! variables are block-scoped and may shadow each other in inner blocks but never a global.
//! References to other schedules (`dual NAME`, `use NAME`) are checked at instantiation, since
//! they may live in files added later.

use super::ast::*;
use super::codes;
use super::collectives;
use super::declared::DeclaredSig;
use crate::diag::{Diagnostic, Span};
use std::collections::HashMap;
use std::sync::Arc;
use symsched_plan::{BufferRole, CollectiveKind, HostCollOp, SignalMode};

/// What resolution learned about a schedule, used by instantiation.
#[derive(Debug, Clone)]
pub struct ResolvedSchedule {
    /// For a declared collective, `Declared` with whether its map has a `+=` (instantiation
    /// sets it from the map for one P).
    pub kind: CollectiveKind,
    /// The declaration of a collective the source declares.
    pub declared: Option<Arc<DeclaredSig>>,
    /// Mode of every declared signal (Add when never updated).
    pub signal_modes: HashMap<String, SignalMode>,
    /// Whether the body contains `barrier;` (then an internal `__barrier` slot exists).
    pub uses_barrier: bool,
}

/// Framework collective named in `hostcoll`.
pub fn hostcoll_op(name: &str) -> Option<HostCollOp> {
    Some(match name {
        "allreduce" => HostCollOp::Allreduce,
        "allgather" => HostCollOp::Allgather,
        "reduce_scatter" => HostCollOp::ReduceScatter,
        "broadcast" => HostCollOp::Broadcast,
        _ => return None,
    })
}

/// Edit distance counting an adjacent swap as one edit, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let sub = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut d = sub.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

/// The closest candidate within a small edit distance.
fn closest<'c>(name: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .map(|c| (distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Global {
    Param,
    Role { counts: bool },
    Scratch,
    Signal { array: bool },
    Group,
}

impl Global {
    fn describe(self) -> &'static str {
        match self {
            Global::Param => "a param",
            Global::Role { .. } => "a role buffer",
            Global::Scratch => "a scratch buffer",
            Global::Signal { .. } => "a signal",
            Global::Group => "a group",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Int,
    Bool,
}

/// Where an expression appears: per-rank code, or a declaration that must be the same on every
/// rank (only literals, `P` and params — for a param range only the params before it).
#[derive(Debug, Clone, Copy)]
enum Ctx {
    Rank,
    Static { params_visible: usize },
}

struct Resolver<'a> {
    sched: &'a Schedule,
    globals: HashMap<String, (Global, Span)>,
    param_order: Vec<String>,
    scopes: Vec<Vec<(String, Span)>>,
    diags: Vec<Diagnostic>,
    modes: HashMap<String, (SignalMode, Span)>,
    uses_barrier: bool,
    size_vars: Vec<String>,
    /// Checking a collective declaration (only `let`, `for`, `if` and chunk maps) rather than
    /// a schedule.
    declaring: bool,
    /// Collectives declared so far, by name.
    collectives: &'a dyn Fn(&str) -> Option<Arc<DeclaredSig>>,
    declared: Option<Arc<DeclaredSig>>,
}

/// Resolve and type-check one schedule of a built-in collective.
pub fn resolve(sched: &Schedule) -> Result<ResolvedSchedule, Vec<Diagnostic>> {
    resolve_with(sched, &|_| None)
}

impl<'a> Resolver<'a> {
    fn new(
        sched: &'a Schedule,
        collectives: &'a dyn Fn(&str) -> Option<Arc<DeclaredSig>>,
        declaring: bool,
    ) -> Resolver<'a> {
        Resolver {
            sched,
            globals: HashMap::new(),
            param_order: Vec::new(),
            scopes: Vec::new(),
            diags: Vec::new(),
            modes: HashMap::new(),
            uses_barrier: false,
            size_vars: Vec::new(),
            declaring,
            collectives,
            declared: None,
        }
    }
}

/// Resolve and type-check a collective declaration (its params, roles and chunk map).
pub fn resolve_collective(decl: &CollectiveDecl) -> Result<DeclaredSig, Vec<Diagnostic>> {
    // The declaration is checked as a schedule whose body may hold only chunk maps and the
    // statements that compute their indices.
    let sched = Schedule {
        name: decl.name.clone(),
        params: decl.params.clone(),
        has_param_parens: decl.has_param_parens,
        collective: Ident {
            name: String::new(),
            span: decl.name.span,
        },
        roles: decl.roles.clone(),
        over_nodes: None,
        duals: Vec::new(),
        items: decl.items.clone(),
        header_span: decl.header_span,
        span: decl.span,
        body_open: decl.body_open,
        close_brace: decl.close_brace,
    };
    let none = |_: &str| None;
    let mut r = Resolver::new(&sched, &none, true);
    r.header();
    r.scopes.push(Vec::new());
    for item in &sched.items {
        r.stmt(item, true);
    }
    r.scopes.pop();
    let sig = DeclaredSig::new(decl.clone());
    if r.diags.is_empty() && !sig.access.iter().any(|a| *a != BufferRole::Input) {
        r.err(
            Diagnostic::error(
                codes::E_NO_OUTPUT,
                format!(
                    "collective `{}` writes no role: its chunk map has no statement",
                    decl.name.name
                ),
            )
            .with_label(decl.header_span, "declared here")
            .with_help("say what each output block holds: `out[i] @ r = in[j] @ q;`"),
        );
    }
    if r.diags.is_empty() {
        Ok(sig)
    } else {
        Err(r.diags)
    }
}

/// Resolve and type-check one schedule; `collectives` finds the collectives declared so far.
pub fn resolve_with(
    sched: &Schedule,
    collectives: &dyn Fn(&str) -> Option<Arc<DeclaredSig>>,
) -> Result<ResolvedSchedule, Vec<Diagnostic>> {
    let mut r = Resolver::new(sched, collectives, false);
    let kind = r.header();
    r.declarations();
    r.scopes.push(Vec::new());
    for item in &sched.items {
        r.stmt(item, true);
    }
    r.scopes.pop();
    if !r.diags.is_empty() {
        return Err(r.diags);
    }
    let kind = kind.unwrap_or(CollectiveKind::Allreduce);
    let mut signal_modes: HashMap<String, SignalMode> =
        r.modes.into_iter().map(|(k, (m, _))| (k, m)).collect();
    for (name, (g, _)) in &r.globals {
        if matches!(g, Global::Signal { .. }) {
            signal_modes.entry(name.clone()).or_insert(SignalMode::Add);
        }
    }
    Ok(ResolvedSchedule {
        kind,
        declared: r.declared,
        signal_modes,
        uses_barrier: r.uses_barrier,
    })
}

impl<'a> Resolver<'a> {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Report an unknown name, suggesting a declared one of the wanted kind if one is close.
    fn unknown(&mut self, d: Diagnostic, name: &str, want: fn(Global) -> bool, ints: bool) {
        let globals = self
            .globals
            .iter()
            .filter(|(_, (g, _))| want(*g))
            .map(|(n, _)| n.as_str());
        let locals = self
            .scopes
            .iter()
            .flatten()
            .filter(|_| ints)
            .map(|(n, _)| n.as_str());
        let hint = closest(name, globals.chain(locals)).map(|c| format!("did you mean `{c}`?"));
        self.err(match hint {
            Some(h) if d.help.is_none() => d.with_help(h),
            _ => d,
        });
    }

    fn declare(&mut self, name: &Ident, g: Global) {
        if name.name.is_empty() {
            return;
        }
        if let Some((prev, pspan)) = self.globals.get(&name.name) {
            let d = Diagnostic::error(
                codes::E_DUPLICATE,
                format!("`{}` is declared twice", name.name),
            )
            .with_label(name.span, "declared again here")
            .with_label(
                *pspan,
                format!("first declared here as {}", prev.describe()),
            );
            self.err(d);
            return;
        }
        self.globals.insert(name.name.clone(), (g, name.span));
    }

    fn header(&mut self) -> Option<CollectiveKind> {
        let s = self.sched;
        for (i, p) in s.params.iter().enumerate() {
            let ctx = Ctx::Static { params_visible: i };
            match &p.range {
                ParamRange::Span(a, b) => {
                    self.expr_ty(a, Ty::Int, ctx);
                    self.expr_ty(b, Ty::Int, ctx);
                }
                ParamRange::Divisors(e) => self.expr_ty(e, Ty::Int, ctx),
            }
            self.declare(&p.name, Global::Param);
            self.param_order.push(p.name.name.clone());
        }
        let all = Ctx::Static {
            params_visible: s.params.len(),
        };
        if self.declaring {
            for role in &s.roles {
                self.expr_ty(&role.chunks, Ty::Int, all);
                if role.inout {
                    self.err(
                        Diagnostic::error(
                            codes::E_INOUT_ROLE,
                            format!(
                                "role `{}` of a collective declaration is marked `inout`",
                                role.name.name
                            ),
                        )
                        .with_label(role.span, "`inout` here")
                        .with_help("remove it: the chunk map says which roles are read and written; a schedule may write `inout` on an input role"),
                    );
                }
                self.declare(&role.name, Global::Role { counts: false });
            }
            return None;
        }
        let declared = match CollectiveKind::from_name(&s.collective.name) {
            Some(_) => None,
            None => (self.collectives)(&s.collective.name),
        };
        if let Some(sig) = &declared {
            self.declared_header(sig);
            self.declared = declared.clone();
        }
        let kind = CollectiveKind::from_name(&s.collective.name);
        match kind {
            None if declared.is_some() => {}
            None => {
                let names: Vec<&str> = CollectiveKind::ALL.iter().map(|k| k.name()).collect();
                self.err(
                    Diagnostic::error(
                        codes::E_UNKNOWN_COLLECTIVE,
                        format!("unknown collective `{}`", s.collective.name),
                    )
                    .with_label(s.collective.span, "not a collective")
                    .with_note(format!("known collectives: {}", names.join(", ")))
                    .with_help("declare it before the schedule: `collective NAME(ROLES) { CHUNK MAP }` (docs/language.md)"),
                );
            }
            Some(k) => {
                let names: Vec<&str> = collectives::roles(k).iter().map(|r| r.name).collect();
                self.check_role_count(k.name(), &names, None);
                for req in collectives::required_params(k) {
                    if !s.params.iter().any(|p| p.name.name == *req) {
                        self.err(
                            Diagnostic::error(
                                codes::E_MISSING_PARAM,
                                format!("`{}` needs a param `{req}`", k.name()),
                            )
                            .with_label(s.name.span, format!("declare `{req} in 0..P` here"))
                            .with_help(format!(
                                "write `schedule {}({req} in 0..P) …`",
                                s.name.name
                            )),
                        );
                    }
                }
                self.size_vars = collectives::size_vars(k)
                    .into_iter()
                    .map(|v| v.name)
                    .collect();
            }
        }
        for (i, role) in s.roles.iter().enumerate() {
            self.expr_ty(&role.chunks, Ty::Int, all);
            let access = match &declared {
                Some(sig) => sig.access.get(i).copied(),
                None => kind
                    .and_then(|k| collectives::roles(k).get(i))
                    .map(|r| r.access),
            };
            if role.inout && access.is_some_and(|a| a != symsched_plan::BufferRole::Input) {
                let k = match &declared {
                    Some(sig) => sig.name().to_string(),
                    None => kind.map(|k| k.name()).unwrap_or("?").to_string(),
                };
                self.err(
                    Diagnostic::error(
                        codes::E_INOUT_ROLE,
                        format!(
                            "role `{}` of {k} is not an input: `inout` only lets a schedule overwrite an input role",
                            role.name.name
                        ),
                    )
                    .with_label(role.span, "not an input role")
                    .with_help("remove `inout`: the collective writes this role anyway"),
                );
            }
            self.declare(
                &role.name,
                Global::Role {
                    counts: kind == Some(CollectiveKind::Alltoallv),
                },
            );
        }
        if let Some(l) = &s.over_nodes {
            self.expr_ty(l, Ty::Int, all);
        }
        for d in &s.duals {
            match d {
                Dual::Identity { words, span } => {
                    let ok = words.len() == 2
                        && words[0].name == "assuming"
                        && words[1].name == "replicated";
                    if !ok {
                        self.err(
                            Diagnostic::error(
                                codes::E_IDENTITY_SPELLING,
                                "an identity dual must be spelled `identity assuming replicated`",
                            )
                            .with_label(*span, "not `identity assuming replicated`")
                            .with_note("the identity backward is only valid when the downstream computation is replicated; the words say so")
                            .with_help("write `dual identity assuming replicated`"),
                        );
                    }
                }
                Dual::Derived { .. } => {}
                Dual::Named { args, .. } => {
                    let mut seen: Vec<&str> = Vec::new();
                    for (n, e) in args {
                        if seen.contains(&n.name.as_str()) {
                            self.err(
                                Diagnostic::error(
                                    codes::E_DUPLICATE,
                                    format!("dual param `{}` bound twice", n.name),
                                )
                                .with_label(n.span, "bound again here"),
                            );
                        }
                        seen.push(&n.name);
                        self.expr_ty(e, Ty::Int, all);
                    }
                }
            }
        }
        match &declared {
            Some(sig) => Some(CollectiveKind::Declared {
                reduces: sig.reduces,
            }),
            None => kind,
        }
    }

    /// E0203 when the schedule does not declare one role per role of its collective (`names`,
    /// in order); `declared_at` points at a user-declared collective's header.
    fn check_role_count(&mut self, collective: &str, names: &[&str], declared_at: Option<Span>) {
        let s = self.sched;
        if names.len() == s.roles.len() {
            return;
        }
        let span = s
            .roles
            .first()
            .map(|r| r.span.join(s.roles[s.roles.len() - 1].span))
            .unwrap_or(s.collective.span);
        let mut d = Diagnostic::error(
            codes::E_ROLE_COUNT,
            format!(
                "`{collective}` takes {} role(s), found {}",
                names.len(),
                s.roles.len()
            ),
        )
        .with_label(span, "roles declared here");
        if let Some(at) = declared_at {
            d = d.with_label(at, "the collective is declared here");
        }
        self.err(d.with_help(format!(
            "declare the roles ({}) in this order",
            names.join(", ")
        )));
    }

    /// The role count, params and size variables of a schedule implementing a declared
    /// collective.
    fn declared_header(&mut self, sig: &DeclaredSig) {
        let s = self.sched;
        let names: Vec<&str> = sig
            .decl
            .roles
            .iter()
            .map(|r| r.name.name.as_str())
            .collect();
        self.check_role_count(sig.name(), &names, Some(sig.decl.header_span));
        for req in sig.params() {
            if !s.params.iter().any(|p| p.name.name == req) {
                self.err(
                    Diagnostic::error(
                        codes::E_MISSING_PARAM,
                        format!("`{}` needs a param `{req}`", sig.name()),
                    )
                    .with_label(s.name.span, format!("declare `{req}` here"))
                    .with_label(sig.decl.header_span, "the collective declares it here"),
                );
            }
        }
        self.size_vars = super::declared::size_vars()
            .into_iter()
            .map(|v| v.name)
            .collect();
    }

    /// Declarations are global to the schedule; collect them before checking statements.
    fn declarations(&mut self) {
        let all = Ctx::Static {
            params_visible: self.sched.params.len(),
        };
        let mut scratch_seen: Vec<String> = Vec::new();
        for item in &self.sched.items {
            match &item.kind {
                StmtKind::Scratch {
                    name, chunks, size, ..
                } => {
                    self.expr_ty(chunks, Ty::Int, all);
                    match size {
                        ScratchSize::Of(buf) => match self.globals.get(&buf.name).copied() {
                            Some((Global::Role { counts: true }, _)) => self.err(
                                Diagnostic::error(
                                    codes::E_SCRATCH_OF_COUNTS,
                                    format!("`{}` has runtime-sized chunks; `of` needs a fixed chunk capacity", buf.name),
                                )
                                .with_label(buf.span, "alltoallv role")
                                .with_help("size the scratch with `each SIZE`"),
                            ),
                            Some((Global::Role { .. }, _)) => {}
                            Some((Global::Scratch, _)) if scratch_seen.contains(&buf.name) => {}
                            Some((g, _)) if g != Global::Scratch => self.err(
                                Diagnostic::error(
                                    codes::E_WRONG_KIND,
                                    format!("`{}` is {}, not a buffer", buf.name, g.describe()),
                                )
                                .with_label(buf.span, "expected a role or an earlier scratch buffer"),
                            ),
                            _ => self.err(
                                Diagnostic::error(
                                    codes::E_UNKNOWN_NAME,
                                    format!("unknown buffer `{}`", buf.name),
                                )
                                .with_label(buf.span, "not a role or an earlier scratch buffer"),
                            ),
                        },
                        ScratchSize::Each(sz) => self.size(sz),
                    }
                    self.declare(name, Global::Scratch);
                    scratch_seen.push(name.name.clone());
                }
                StmtKind::Signals { decls, .. } => {
                    for (n, len) in decls {
                        if let Some(e) = len {
                            self.expr_ty(e, Ty::Int, all);
                        }
                        self.declare(
                            n,
                            Global::Signal {
                                array: len.is_some(),
                            },
                        );
                    }
                }
                StmtKind::Group { name, arg, .. } => {
                    self.expr_ty(arg, Ty::Int, all);
                    self.declare(name, Global::Group);
                }
                StmtKind::Require { cond } => self.expr_ty(cond, Ty::Bool, all),
                _ => {}
            }
        }
    }

    fn size(&mut self, s: &SizeAst) {
        match s {
            SizeAst::Int(..) | SizeAst::P(_) => {}
            SizeAst::Name(id) => {
                let ok = self.size_vars.contains(&id.name)
                    || matches!(self.globals.get(&id.name), Some((Global::Param, _)));
                if !ok {
                    let d = Diagnostic::error(
                        codes::E_UNKNOWN_NAME,
                        format!("`{}` is not a size variable or param", id.name),
                    )
                    .with_label(id.span, "unknown in a size")
                    .with_note(format!(
                        "size variables of this collective: {}",
                        if self.size_vars.is_empty() {
                            "none".to_string()
                        } else {
                            self.size_vars.join(", ")
                        }
                    ));
                    self.err(d);
                }
            }
            SizeAst::Add(a, b) | SizeAst::Mul(a, b) => {
                self.size(a);
                self.size(b);
            }
            SizeAst::Paren(a, _) => self.size(a),
        }
    }

    /// Whether a top-level `let` binds `name` (declarations are checked before statements, so
    /// such a name is out of scope there, but the precise complaint is that it is per-rank).
    fn binds_let(&self, name: &str) -> bool {
        self.sched
            .items
            .iter()
            .any(|i| matches!(&i.kind, StmtKind::Let { name: n, .. } if n.name == name))
    }

    fn lookup_local(&self, name: &str) -> bool {
        self.scopes
            .iter()
            .rev()
            .any(|s| s.iter().any(|(n, _)| n == name))
    }

    fn bind_local(&mut self, id: &Ident) {
        if let Some((g, gspan)) = self.globals.get(&id.name).copied() {
            self.err(
                Diagnostic::error(
                    codes::E_DUPLICATE,
                    format!("`{}` shadows {} of the schedule", id.name, g.describe()),
                )
                .with_label(id.span, "bound here")
                .with_label(gspan, "declared here")
                .with_help("pick another name"),
            );
            return;
        }
        let dup = self
            .scopes
            .last()
            .and_then(|s| s.iter().find(|(n, _)| *n == id.name))
            .map(|(_, s)| *s);
        if let Some(prev) = dup {
            self.err(
                Diagnostic::error(
                    codes::E_DUPLICATE,
                    format!("`{}` is bound twice in one block", id.name),
                )
                .with_label(id.span, "bound again here")
                .with_label(prev, "first bound here")
                .with_help("bindings are immutable; use a new name or an inner block"),
            );
            return;
        }
        if let Some(s) = self.scopes.last_mut() {
            s.push((id.name.clone(), id.span));
        }
    }

    fn block(&mut self, b: &Block) {
        self.scopes.push(Vec::new());
        for s in &b.stmts {
            self.stmt(s, false);
        }
        self.scopes.pop();
    }

    fn note_mode(&mut self, sig: &SignalRef, op: UpdateOp, span: Span) {
        let mode = match op {
            UpdateOp::Add => SignalMode::Add,
            UpdateOp::Set => SignalMode::Set,
        };
        match self.modes.get(&sig.name.name).copied() {
            Some((m, first)) if m != mode => {
                let word = |m: SignalMode| {
                    if m == SignalMode::Add {
                        "added to"
                    } else {
                        "set"
                    }
                };
                self.err(
                    Diagnostic::error(
                        codes::E_MIXED_SIGNAL,
                        format!(
                            "signal `{}` is both {} and {}",
                            sig.name.name,
                            word(m),
                            word(mode)
                        ),
                    )
                    .with_label(span, format!("{} here", word(mode)))
                    .with_label(first, format!("{} here", word(m)))
                    .with_help("use two signals, one added to and one set"),
                );
            }
            Some(_) => {}
            None => {
                self.modes.insert(sig.name.name.clone(), (mode, span));
            }
        }
    }

    fn signal_ref(&mut self, s: &SignalRef) {
        match self.globals.get(&s.name.name).copied() {
            Some((Global::Signal { array }, _)) => {
                if array && s.index.is_none() {
                    self.err(
                        Diagnostic::error(
                            codes::E_SIGNAL_INDEX,
                            format!("signal `{}` is an array and needs an index", s.name.name),
                        )
                        .with_label(s.span, "no index")
                        .with_help(format!("write `{}[i]`", s.name.name)),
                    );
                } else if !array && s.index.is_some() {
                    self.err(
                        Diagnostic::error(
                            codes::E_SIGNAL_INDEX,
                            format!("signal `{}` is not an array", s.name.name),
                        )
                        .with_label(s.span, "indexed here")
                        .with_help(format!("declare it as `signal {}[N];`", s.name.name)),
                    );
                }
            }
            Some((g, _)) => self.err(
                Diagnostic::error(
                    codes::E_WRONG_KIND,
                    format!("`{}` is {}, not a signal", s.name.name, g.describe()),
                )
                .with_label(s.name.span, "expected a signal"),
            ),
            None => {
                let what = if self.lookup_local(&s.name.name) {
                    " (it is an integer binding)"
                } else {
                    ""
                };
                let d = Diagnostic::error(
                    if what.is_empty() {
                        codes::E_UNKNOWN_NAME
                    } else {
                        codes::E_WRONG_KIND
                    },
                    format!("unknown signal `{}`{what}", s.name.name),
                )
                .with_label(s.name.span, "not a declared signal");
                let near = closest(
                    &s.name.name,
                    self.globals
                        .iter()
                        .filter(|(_, (g, _))| matches!(g, Global::Signal { .. }))
                        .map(|(n, _)| n.as_str()),
                );
                self.err(match near {
                    Some(c) => d.with_help(format!("did you mean `{c}`?")),
                    None => d.with_help(format!("declare it with `signal {};`", s.name.name)),
                })
            }
        }
        if let Some(i) = &s.index {
            self.expr_ty(i, Ty::Int, Ctx::Rank);
        }
    }

    fn region(&mut self, r: &RegionAst) {
        match self.globals.get(&r.buffer.name).copied() {
            Some((Global::Role { .. } | Global::Scratch, _)) => {}
            Some((g, _)) => self.err(
                Diagnostic::error(
                    codes::E_WRONG_KIND,
                    format!("`{}` is {}, not a buffer", r.buffer.name, g.describe()),
                )
                .with_label(r.buffer.span, "expected a buffer"),
            ),
            None => {
                let code = if self.lookup_local(&r.buffer.name) {
                    codes::E_WRONG_KIND
                } else {
                    codes::E_UNKNOWN_NAME
                };
                self.unknown(
                    Diagnostic::error(code, format!("unknown buffer `{}`", r.buffer.name))
                        .with_label(r.buffer.span, "not a role or scratch buffer"),
                    &r.buffer.name,
                    |g| matches!(g, Global::Role { .. } | Global::Scratch),
                    false,
                )
            }
        }
        match &r.index {
            None => {}
            Some(IndexAst::One(e)) => self.expr_ty(e, Ty::Int, Ctx::Rank),
            Some(IndexAst::Range(a, b)) => {
                self.expr_ty(a, Ty::Int, Ctx::Rank);
                self.expr_ty(b, Ty::Int, Ctx::Rank);
            }
        }
    }

    fn group(&mut self, g: &Ident) {
        match self.globals.get(&g.name).copied() {
            Some((Global::Group, _)) => {}
            Some((k, _)) => self.err(
                Diagnostic::error(
                    codes::E_WRONG_KIND,
                    format!("`{}` is {}, not a group", g.name, k.describe()),
                )
                .with_label(g.span, "expected a group"),
            ),
            None => self.err(
                Diagnostic::error(codes::E_UNKNOWN_NAME, format!("unknown group `{}`", g.name))
                    .with_label(g.span, "not a declared group")
                    .with_help(format!("declare it with `group {} = block(…);`", g.name)),
            ),
        }
    }

    fn stmt(&mut self, s: &Stmt, top: bool) {
        let _ = top;
        let in_decl = matches!(
            s.kind,
            StmtKind::Let { .. }
                | StmtKind::For { .. }
                | StmtKind::If { .. }
                | StmtKind::Map { .. }
        );
        if self.declaring && !in_decl {
            self.err(
                Diagnostic::error(
                    codes::E_MISPLACED,
                    "a collective declaration holds only its chunk map",
                )
                .with_label(s.span, "not a chunk map, `let`, `for` or `if`")
                .with_help("write the steps in a schedule that `implements` the collective"),
            );
            return;
        }
        match &s.kind {
            StmtKind::Map { dst, src, .. } => {
                if !self.declaring {
                    self.err(
                        Diagnostic::error(
                            codes::E_MISPLACED,
                            "a chunk map belongs in a collective declaration",
                        )
                        .with_label(s.span, "a postcondition, not a step")
                        .with_help("declare it in `collective NAME(ROLES) { … }`; a schedule moves data with put, get and local ops"),
                    );
                    return;
                }
                for c in [dst, src] {
                    match self.globals.get(&c.role.name) {
                        Some((Global::Role { .. }, _)) => {}
                        _ => {
                            let roles: Vec<String> = self
                                .sched
                                .roles
                                .iter()
                                .map(|r| format!("`{}`", r.name.name))
                                .collect();
                            self.unknown(
                                Diagnostic::error(
                                    codes::E_UNKNOWN_ROLE,
                                    format!(
                                        "`{}` is not a role of collective `{}`",
                                        c.role.name, self.sched.name.name
                                    ),
                                )
                                .with_label(c.role.span, "not a role")
                                .with_note(format!("its roles: {}", roles.join(", "))),
                                &c.role.name,
                                |g| matches!(g, Global::Role { .. }),
                                false,
                            );
                        }
                    }
                    self.expr_ty(&c.index, Ty::Int, Ctx::Rank);
                    self.expr_ty(&c.rank, Ty::Int, Ctx::Rank);
                }
            }
            // Declarations were checked by `declarations`.
            StmtKind::Scratch { .. }
            | StmtKind::Signals { .. }
            | StmtKind::Group { .. }
            | StmtKind::Require { .. } => {}
            StmtKind::Let { name, value } => {
                self.expr_ty(value, Ty::Int, Ctx::Rank);
                self.bind_local(name);
            }
            StmtKind::For {
                var,
                from,
                to,
                body,
            } => {
                self.expr_ty(from, Ty::Int, Ctx::Rank);
                self.expr_ty(to, Ty::Int, Ctx::Rank);
                self.scopes.push(Vec::new());
                self.bind_local(var);
                self.block(body);
                self.scopes.pop();
            }
            StmtKind::If { arms, otherwise } => {
                for (cond, block) in arms {
                    self.expr_ty(cond, Ty::Bool, Ctx::Rank);
                    self.block(block);
                }
                if let Some(b) = otherwise {
                    self.block(b);
                }
            }
            StmtKind::Channel { channel, body } => {
                self.expr_ty(channel, Ty::Int, Ctx::Rank);
                self.block(body);
            }
            StmtKind::Put {
                src,
                dst,
                peer,
                signal,
            } => {
                self.region(src);
                self.region(dst);
                self.expr_ty(peer, Ty::Int, Ctx::Rank);
                if let Some(ps) = signal {
                    self.signal_ref(&ps.signal);
                    if let Some(p) = &ps.peer {
                        self.expr_ty(p, Ty::Int, Ctx::Rank);
                    }
                    self.expr_ty(&ps.value, Ty::Int, Ctx::Rank);
                    self.note_mode(&ps.signal, ps.op, ps.span);
                }
            }
            StmtKind::Get { src, peer, dst } => {
                self.region(src);
                self.expr_ty(peer, Ty::Int, Ctx::Rank);
                self.region(dst);
            }
            StmtKind::Signal {
                signal,
                peer,
                op,
                value,
            } => {
                self.signal_ref(signal);
                self.expr_ty(peer, Ty::Int, Ctx::Rank);
                self.expr_ty(value, Ty::Int, Ctx::Rank);
                self.note_mode(signal, *op, s.span);
            }
            StmtKind::Wait { signal, value, .. } => {
                self.signal_ref(signal);
                self.expr_ty(value, Ty::Int, Ctx::Rank);
            }
            StmtKind::Assign { dst, op } => {
                self.region(dst);
                match op {
                    LocalOp::Reduce(rs) => {
                        for r in rs {
                            self.region(r);
                        }
                    }
                    LocalOp::Copy(r) | LocalOp::Cast(r) => self.region(r),
                }
            }
            StmtKind::Matmul { c, a, b } => {
                self.region(c);
                self.region(a);
                self.region(b);
            }
            StmtKind::HostColl { op, region, group } => {
                if hostcoll_op(&op.name).is_none() {
                    self.err(
                        Diagnostic::error(
                            codes::E_UNKNOWN_HOSTCOLL,
                            format!("`{}` is not a framework collective", op.name),
                        )
                        .with_label(op.span, "unknown host collective")
                        .with_note(
                            "hostcoll supports allreduce, allgather, reduce_scatter and broadcast",
                        ),
                    );
                }
                self.region(region);
                self.group(group);
            }
            StmtKind::Barrier => self.uses_barrier = true,
            StmtKind::Use { args, group, .. } => {
                let mut seen: Vec<&str> = Vec::new();
                for a in args {
                    if seen.contains(&a.name.name.as_str()) {
                        self.err(
                            Diagnostic::error(
                                codes::E_DUPLICATE,
                                format!("`{}` bound twice in this `use`", a.name.name),
                            )
                            .with_label(a.name.span, "bound again here"),
                        );
                    }
                    seen.push(&a.name.name);
                    match &a.value {
                        // A bare name may be an integer for a callee param; check it leniently.
                        UseValue::Region(r) if r.index.is_none() => {
                            let is_int = self.lookup_local(&r.buffer.name)
                                || matches!(
                                    self.globals.get(&r.buffer.name),
                                    Some((Global::Param, _))
                                );
                            if !is_int {
                                self.region(r);
                            }
                        }
                        UseValue::Region(r) => self.region(r),
                        UseValue::Expr(e) => self.expr_ty(e, Ty::Int, Ctx::Rank),
                    }
                }
                self.group(group);
            }
        }
    }

    fn expr_ty(&mut self, e: &Expr, want: Ty, ctx: Ctx) {
        if let Some(got) = self.ty(e, ctx) {
            if got != want {
                let (w, g) = match want {
                    Ty::Int => ("an integer", "a condition"),
                    Ty::Bool => ("a condition", "an integer"),
                };
                self.err(
                    Diagnostic::error(codes::E_TYPE, format!("expected {w}, found {g}"))
                        .with_label(e.span, format!("this is {g}")),
                );
            }
        }
    }

    fn not_static(&mut self, span: Span, what: &str) {
        self.err(
            Diagnostic::error(
                codes::E_NOT_STATIC,
                format!("{what} differs per rank and cannot size a declaration"),
            )
            .with_label(span, "per-rank value")
            .with_help("declarations, roles and params may only use integers, `P` and params"),
        );
    }

    /// Type of an expression, reporting name errors; `None` after an error.
    fn ty(&mut self, e: &Expr, ctx: Ctx) -> Option<Ty> {
        match &e.kind {
            ExprKind::Int(_) | ExprKind::P => Some(Ty::Int),
            ExprKind::Bool(_) => Some(Ty::Bool),
            ExprKind::Rank => {
                if self.declaring {
                    self.err(
                        Diagnostic::error(
                            codes::E_MISPLACED,
                            "`rank` has no value in a collective declaration",
                        )
                        .with_label(e.span, "no executing rank here")
                        .with_help("name ranks with a loop variable: `for r in 0..P { … @ r … }`"),
                    );
                    return None;
                }
                if let Ctx::Static { .. } = ctx {
                    self.not_static(e.span, "`rank`");
                    return None;
                }
                Some(Ty::Int)
            }
            ExprKind::Name(n) => {
                if self.lookup_local(n) {
                    if let Ctx::Static { .. } = ctx {
                        self.not_static(e.span, &format!("`{n}`"));
                        return None;
                    }
                    return Some(Ty::Int);
                }
                match self.globals.get(n).copied() {
                    Some((Global::Param, _)) => {
                        if let Ctx::Static { params_visible } = ctx {
                            let idx = self.param_order.iter().position(|p| p == n);
                            if idx.map(|i| i >= params_visible).unwrap_or(true) {
                                self.err(
                                    Diagnostic::error(
                                        codes::E_UNKNOWN_NAME,
                                        format!("param `{n}` is not declared yet"),
                                    )
                                    .with_label(
                                        e.span,
                                        "a param range may only use earlier params",
                                    ),
                                );
                                return None;
                            }
                        }
                        Some(Ty::Int)
                    }
                    Some((g, _)) => {
                        self.err(
                            Diagnostic::error(
                                codes::E_WRONG_KIND,
                                format!("`{n}` is {}, not an integer", g.describe()),
                            )
                            .with_label(e.span, "expected an integer"),
                        );
                        None
                    }
                    None if matches!(ctx, Ctx::Static { .. }) && self.binds_let(n) => {
                        self.not_static(e.span, &format!("`{n}`"));
                        None
                    }
                    None => {
                        // Params declared after this point in the header are still "unknown" here.
                        let is_later_param = self.sched.params.iter().any(|p| p.name.name == *n);
                        let msg = if is_later_param {
                            format!("param `{n}` is not declared yet")
                        } else {
                            format!("unknown name `{n}`")
                        };
                        self.unknown(
                            Diagnostic::error(codes::E_UNKNOWN_NAME, msg)
                                .with_label(e.span, "not bound here"),
                            n,
                            |g| g == Global::Param,
                            true,
                        );
                        None
                    }
                }
            }
            ExprKind::Unary(op, x) => {
                let want = match op {
                    UnOp::Neg => Ty::Int,
                    UnOp::Not => Ty::Bool,
                };
                self.expr_ty(x, want, ctx);
                Some(want)
            }
            ExprKind::Binary(op, a, b) => {
                let (operand, result) = match op {
                    BinOp::And | BinOp::Or => (Ty::Bool, Ty::Bool),
                    BinOp::Cmp(_) => (Ty::Int, Ty::Bool),
                    _ => (Ty::Int, Ty::Int),
                };
                self.expr_ty(a, operand, ctx);
                self.expr_ty(b, operand, ctx);
                Some(result)
            }
            ExprKind::Min(a, b) | ExprKind::Max(a, b) => {
                self.expr_ty(a, Ty::Int, ctx);
                self.expr_ty(b, Ty::Int, ctx);
                Some(Ty::Int)
            }
            ExprKind::Log2(x) => {
                self.expr_ty(x, Ty::Int, ctx);
                Some(Ty::Int)
            }
            ExprKind::IsPow2(x) => {
                self.expr_ty(x, Ty::Int, ctx);
                Some(Ty::Bool)
            }
            ExprKind::Cond(arms, otherwise) => {
                // Every arm has the type of the `else` value.
                let ty = self.ty(otherwise, ctx)?;
                for (c, v) in arms {
                    self.expr_ty(c, Ty::Bool, ctx);
                    self.expr_ty(v, ty, ctx);
                }
                Some(ty)
            }
            ExprKind::GroupAttr(g, _) => {
                if let Ctx::Static { .. } = ctx {
                    self.not_static(e.span, "a group attribute");
                    return None;
                }
                self.group(g);
                Some(Ty::Int)
            }
            ExprKind::GroupMember(g, x) => {
                if let Ctx::Static { .. } = ctx {
                    self.not_static(e.span, "a group member");
                    return None;
                }
                self.group(g);
                self.expr_ty(x, Ty::Int, ctx);
                Some(Ty::Int)
            }
            ExprKind::Paren(x) => self.ty(x, ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::parse;

    fn res(body: &str) -> Result<ResolvedSchedule, Vec<Diagnostic>> {
        let text = format!("schedule a implements allreduce(x: [P]) {{\n{body}\n}}\n");
        let s = parse(0, &text).unwrap().schedules.remove(0);
        resolve(&s)
    }

    #[test]
    fn signal_modes_and_barrier() {
        let r = res("signals a, b, c;\nsignal a @ 0 += 1;\nsignal b @ 0 = 2;\nbarrier;").unwrap();
        assert_eq!(r.signal_modes["a"], SignalMode::Add);
        assert_eq!(r.signal_modes["b"], SignalMode::Set);
        assert_eq!(r.signal_modes["c"], SignalMode::Add);
        assert!(r.uses_barrier);
        assert_eq!(r.kind, CollectiveKind::Allreduce);
    }

    #[test]
    fn scopes_allow_inner_shadowing_only() {
        assert!(res("let y = 1;\nfor i in 0..P { let y = i; }").is_ok());
        let e = res("for i in 0..P { let i = 1; }").err();
        assert!(
            e.is_none(),
            "a let in the loop body shadows the loop variable of the outer scope"
        );
        let e = res("let x = 1;").unwrap_err();
        assert_eq!(e[0].code, "E0202");
        let e = res("for i in 0..P { }\nlet z = i;").unwrap_err();
        assert_eq!(e[0].code, "E0201");
    }

    #[test]
    fn unknown_names_get_suggestions() {
        let e = res("scratch land: [P] of x;\nput x -> lnad[0] @ 0;").unwrap_err();
        assert_eq!(e[0].help.as_deref(), Some("did you mean `land`?"));
        let e = res("let peer = 1;\nlet q = pear + 1;").unwrap_err();
        assert_eq!(e[0].help.as_deref(), Some("did you mean `peer`?"));
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn every_error_is_reported() {
        let e = res("put y -> x @ 0;\nlet q = rank == 1;\nwait nope >= 1;").unwrap_err();
        let codes: Vec<&str> = e.iter().map(|d| d.code).collect();
        assert_eq!(codes, vec!["E0201", "E0208", "E0201"]);
    }
}
