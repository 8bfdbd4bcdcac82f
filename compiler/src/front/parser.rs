//! pest parser (`grammar/sched.pest`) and the conversion of its parse tree into [`ast`](super::ast).
//!
//! Syntax errors become E01xx diagnostics with the error's position and an "expected …" message
//! built from the grammar's named rules; the parser never panics on any input.

use super::ast::*;
use super::codes;
use crate::diag::{Diagnostic, FileId, Span};
use pest::iterators::Pair;
use pest::Parser;

#[derive(pest_derive::Parser)]
#[grammar = "../../grammar/sched.pest"]
struct SchedParser;

/// Deepest bracket nesting accepted; deeper input is refused before parsing so the recursive
/// descent (pest's and ours) cannot exhaust the stack.
pub const MAX_NESTING: usize = 64;

/// Most operators one expression may have (bounds the depth of expression trees).
pub const MAX_EXPR_OPS: usize = 512;

/// Parse one file.
pub fn parse(file: FileId, text: &str) -> Result<File, Vec<Diagnostic>> {
    check_lexical(file, text)?;
    let mut pairs =
        SchedParser::parse(Rule::file, text).map_err(|e| vec![syntax_error(file, text, e)])?;
    let top = pairs.next().ok_or_else(|| {
        vec![Diagnostic::error(codes::E_SYNTAX, "empty parse")
            .with_label(Span::new(file, 0, 0), "here")]
    })?;
    let mut b = Builder {
        file,
        diags: Vec::new(),
        ops: 0,
        too_deep: false,
    };
    let mut schedules = Vec::new();
    let mut collectives = Vec::new();
    for p in top.into_inner() {
        match p.as_rule() {
            Rule::schedule => schedules.push(b.schedule(p)),
            Rule::collective_decl => collectives.push(b.collective(p)),
            _ => {}
        }
    }
    if b.diags.is_empty() {
        Ok(File {
            schedules,
            collectives,
        })
    } else {
        Err(b.diags)
    }
}

/// Checks pest cannot report well: unterminated block comments and excessive nesting.
fn check_lexical(file: FileId, text: &str) -> Result<(), Vec<Diagnostic>> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut depth = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => match text[i + 2..].find("*/") {
                Some(end) => {
                    i += 2 + end + 2;
                    continue;
                }
                None => {
                    return Err(vec![Diagnostic::error(
                        codes::E_UNTERMINATED_COMMENT,
                        "block comment is never closed",
                    )
                    .with_label(Span::new(file, i, i + 2), "this `/*` has no matching `*/`")
                    .with_help("close the comment with `*/`")]);
                }
            },
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(vec![Diagnostic::error(
                        codes::E_NESTING,
                        format!("brackets nested deeper than {MAX_NESTING} levels"),
                    )
                    .with_label(Span::new(file, i, i + 1), "too deep here")
                    .with_help("split the expression with `let`")]);
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Readable name of a grammar rule for "expected …" messages; `None` hides it.
fn rule_text(r: Rule) -> Option<&'static str> {
    Some(match r {
        Rule::EOI => "end of file",
        Rule::schedule | Rule::kw_schedule => "`schedule`",
        Rule::collective_decl | Rule::kw_collective => "`collective`",
        Rule::kw_implements => "`implements`",
        Rule::kw_dual => "`dual`",
        Rule::kw_identity => "`identity`",
        Rule::kw_derived => "`derived`",
        Rule::kw_divisors => "`divisors`",
        Rule::kw_over | Rule::over_nodes => "`over`",
        Rule::kw_nodes => "`nodes`",
        Rule::kw_in => "`in`",
        Rule::kw_inout => "`inout`",
        Rule::kw_of => "`of`",
        Rule::kw_each => "`each`",
        Rule::kw_as | Rule::elem_class => "`as`",
        Rule::kw_within => "`within`",
        Rule::kw_matmul => "`matmul`",
        Rule::kw_else => "`else`",
        Rule::kw_block | Rule::kw_stride | Rule::group_kind => "`block` or `stride`",
        Rule::class_name => "`data`, `wire` or `acc`",
        Rule::scratch_size | Rule::scratch_of | Rule::scratch_each => "`of` or `each`",
        Rule::ident | Rule::word => "a name",
        Rule::buf_name | Rule::region => "a buffer region",
        Rule::signal_ref => "a signal",
        Rule::int => "an integer",
        Rule::expr
        | Rule::or_expr
        | Rule::and_expr
        | Rule::cmp_expr
        | Rule::xor_expr
        | Rule::shift_expr
        | Rule::add_expr
        | Rule::mul_expr
        | Rule::unary
        | Rule::pow_expr
        | Rule::primary
        | Rule::minmax
        | Rule::call1
        | Rule::cond_expr
        | Rule::cond_elif
        | Rule::kw_log2
        | Rule::kw_is_pow2
        | Rule::group_attr
        | Rule::kw_rank
        | Rule::kw_P
        | Rule::kw_true
        | Rule::kw_false
        | Rule::kw_min
        | Rule::kw_max
        | Rule::op_neg
        | Rule::op_not => "an expression",
        Rule::member_call | Rule::attr_name => "`rank`, `size` or `member(…)`",
        Rule::size_expr | Rule::size_term | Rule::size_atom => "a size expression",
        Rule::op_or
        | Rule::op_and
        | Rule::op_add
        | Rule::op_sub
        | Rule::op_mul
        | Rule::op_div
        | Rule::op_mod
        | Rule::op_pow
        | Rule::op_xor
        | Rule::op_shl
        | Rule::op_shr
        | Rule::size_plus
        | Rule::size_times => "an operator",
        Rule::cmp_op => "a comparison (`==`, `>=`, …)",
        Rule::update_op | Rule::add_assign => "`+=` or `=`",
        Rule::assign => "`=`",
        Rule::semi => "`;`",
        Rule::comma => "`,`",
        Rule::colon => "`:`",
        Rule::lparen => "`(`",
        Rule::rparen => "`)`",
        Rule::lbrack => "`[`",
        Rule::rbrack => "`]`",
        Rule::lbrace | Rule::block | Rule::body => "`{`",
        Rule::rbrace => "`}`",
        Rule::arrow => "`->`",
        Rule::at => "`@`",
        Rule::dotdot => "`..`",
        Rule::dot => "`.`",
        Rule::param | Rule::params => "a parameter",
        Rule::param_range | Rule::span_range | Rule::divisors_range => "a range",
        Rule::role | Rule::roles => "a role `name: [chunks]`",
        Rule::dual | Rule::identity_dual | Rule::derived_dual | Rule::named_dual => "a dual",
        Rule::dual_arg => "a dual argument",
        Rule::use_arg | Rule::use_value => "a `use` argument",
        Rule::put_signal => "`signal`",
        Rule::local_op
        | Rule::reduce_call
        | Rule::copy_call
        | Rule::cast_call
        | Rule::kw_reduce
        | Rule::kw_copy
        | Rule::kw_cast => "`reduce`, `copy` or `cast`",
        Rule::scratch_decl
        | Rule::signal_decl
        | Rule::signals_decl
        | Rule::group_decl
        | Rule::let_stmt
        | Rule::for_stmt
        | Rule::if_stmt
        | Rule::channel_stmt
        | Rule::kw_channel
        | Rule::else_if
        | Rule::else_block
        | Rule::put_stmt
        | Rule::get_stmt
        | Rule::signal_stmt
        | Rule::wait_stmt
        | Rule::compute_stmt
        | Rule::hostcoll_stmt
        | Rule::barrier_stmt
        | Rule::use_stmt
        | Rule::assign_stmt
        | Rule::kw_scratch
        | Rule::kw_signal
        | Rule::kw_signals
        | Rule::kw_group
        | Rule::kw_require
        | Rule::require_decl
        | Rule::kw_let
        | Rule::kw_for
        | Rule::kw_if
        | Rule::kw_put
        | Rule::kw_get
        | Rule::kw_wait
        | Rule::kw_compute
        | Rule::kw_hostcoll
        | Rule::kw_barrier
        | Rule::kw_use => "a statement",
        _ => return None,
    })
}

fn syntax_error(file: FileId, text: &str, e: pest::error::Error<Rule>) -> Diagnostic {
    let pos = match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((a, _)) => a,
    }
    .min(text.len());
    let mut expected: Vec<&str> = Vec::new();
    if let pest::error::ErrorVariant::ParsingError { positives, .. } = &e.variant {
        for r in positives {
            if let Some(t) = rule_text(*r) {
                if !expected.contains(&t) {
                    expected.push(t);
                }
            }
        }
    }
    let found = found_text(text, pos);
    let msg = match expected.len() {
        0 => format!("unexpected {found}"),
        1 => format!("expected {}, found {found}", expected[0]),
        _ => {
            let (last, rest) = expected.split_last().unwrap_or((&"", &[]));
            format!("expected {} or {last}, found {found}", rest.join(", "))
        }
    };
    // A missing `;` or `)` is best shown right after the previous token, not at the next line.
    let before = text[..pos].trim_end();
    let gap_has_newline = text[before.len()..pos].contains('\n');
    let closing = expected
        .iter()
        .any(|e| matches!(*e, "`;`" | "`)`" | "`]`" | "`}`"));
    let (label, at) = if closing && gap_has_newline && !before.is_empty() {
        let end = before.len();
        let start = end - before.chars().next_back().map(char::len_utf8).unwrap_or(0);
        ("missing here", Span::new(file, start, end))
    } else {
        ("here", Span::new(file, pos, next_char_end(text, pos)))
    };
    let mut d = Diagnostic::error(codes::E_SYNTAX, msg).with_label(at, label);
    if let Some(kw) = keyword_at(text, pos) {
        if expected
            .iter()
            .any(|e| matches!(*e, "a name" | "a buffer region" | "a signal"))
        {
            d = d.with_note(format!("`{kw}` is a keyword and cannot be used as a name"));
        }
    }
    d
}

fn next_char_end(text: &str, pos: usize) -> usize {
    text[pos..]
        .chars()
        .next()
        .map(|c| pos + c.len_utf8())
        .unwrap_or(pos)
}

fn word_at(text: &str, pos: usize) -> &str {
    let rest = &text[pos..];
    let len = rest
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(rest.len());
    &rest[..len]
}

fn found_text(text: &str, pos: usize) -> String {
    if pos >= text.len() {
        return "end of file".into();
    }
    let w = word_at(text, pos);
    if !w.is_empty() {
        return format!("`{w}`");
    }
    match text[pos..].chars().next() {
        Some(c) if c.is_whitespace() => "whitespace".into(),
        Some(c) => format!("`{}`", c.escape_default()),
        None => "end of file".into(),
    }
}

/// Every reserved word of the language.
pub const KEYWORDS: &[&str] = &[
    "schedule",
    "implements",
    "dual",
    "identity",
    "assuming",
    "replicated",
    "param",
    "divisors",
    "over",
    "nodes",
    "group",
    "block",
    "stride",
    "scratch",
    "of",
    "each",
    "as",
    "data",
    "wire",
    "acc",
    "signals",
    "signal",
    "wait",
    "for",
    "let",
    "if",
    "else",
    "put",
    "get",
    "reduce",
    "copy",
    "cast",
    "compute",
    "matmul",
    "hostcoll",
    "barrier",
    "use",
    "within",
    "rank",
    "P",
    "true",
    "false",
    "in",
    "inout",
    "min",
    "max",
];

fn keyword_at(text: &str, pos: usize) -> Option<&str> {
    let w = word_at(text, pos);
    KEYWORDS.contains(&w).then_some(w)
}

/// Rules that only structure the text (punctuation, most keywords) and carry no AST content.
fn is_noise(r: Rule) -> bool {
    matches!(
        r,
        Rule::semi
            | Rule::comma
            | Rule::colon
            | Rule::lparen
            | Rule::rparen
            | Rule::lbrack
            | Rule::rbrack
            | Rule::lbrace
            | Rule::rbrace
            | Rule::arrow
            | Rule::at
            | Rule::dotdot
            | Rule::dot
            | Rule::assign
            | Rule::kw_schedule
            | Rule::kw_collective
            | Rule::kw_implements
            | Rule::kw_dual
            | Rule::kw_identity
            | Rule::kw_derived
            | Rule::kw_divisors
            | Rule::kw_over
            | Rule::kw_nodes
            | Rule::kw_group
            | Rule::kw_scratch
            | Rule::kw_of
            | Rule::kw_each
            | Rule::kw_as
            | Rule::kw_signals
            | Rule::kw_signal
            | Rule::kw_wait
            | Rule::kw_for
            | Rule::kw_in
            | Rule::kw_let
            | Rule::kw_if
            | Rule::kw_else
            | Rule::kw_put
            | Rule::kw_get
            | Rule::kw_reduce
            | Rule::kw_copy
            | Rule::kw_cast
            | Rule::kw_compute
            | Rule::kw_matmul
            | Rule::kw_hostcoll
            | Rule::kw_barrier
            | Rule::kw_use
            | Rule::kw_within
            | Rule::kw_require
            | Rule::kw_channel
            | Rule::EOI
    )
}

fn sig(p: Pair<'_, Rule>) -> Vec<Pair<'_, Rule>> {
    p.into_inner().filter(|q| !is_noise(q.as_rule())).collect()
}

fn has_child(p: &Pair<'_, Rule>, r: Rule) -> bool {
    p.clone().into_inner().any(|q| q.as_rule() == r)
}

struct Builder {
    file: FileId,
    diags: Vec<Diagnostic>,
    /// Operators seen in the expression being built, and whether it passed the limit.
    ops: usize,
    too_deep: bool,
}

/// A placeholder expression used after a reported error so building can continue.
fn zero(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Int(0),
        span,
    }
}

impl Builder {
    fn span(&self, p: &Pair<'_, Rule>) -> Span {
        let s = p.as_span();
        Span::new(self.file, s.start(), s.end())
    }

    fn ident(&self, p: Pair<'_, Rule>) -> Ident {
        Ident {
            name: p.as_str().to_string(),
            span: self.span(&p),
        }
    }

    /// The next child as an identifier. The grammar guarantees it; the empty placeholder only
    /// keeps building total after an error has already been reported.
    fn next_ident<'i>(&self, it: &mut impl Iterator<Item = Pair<'i, Rule>>, span: Span) -> Ident {
        it.next().map(|n| self.ident(n)).unwrap_or(Ident {
            name: String::new(),
            span,
        })
    }

    /// The next child as an expression, or the placeholder [`zero`] (see [`Self::next_ident`]).
    fn next_expr<'i>(&mut self, it: &mut impl Iterator<Item = Pair<'i, Rule>>, span: Span) -> Expr {
        it.next()
            .map(|e| self.expr(e))
            .unwrap_or_else(|| zero(span))
    }

    fn schedule(&mut self, p: Pair<'_, Rule>) -> Schedule {
        let span = self.span(&p);
        let has_param_parens = has_child(&p, Rule::params);
        let mut name = None;
        let mut params = Vec::new();
        let mut collective = None;
        let mut roles = Vec::new();
        let mut over_nodes = None;
        let mut duals = Vec::new();
        let mut items = Vec::new();
        let mut header_end = span.end as usize;
        let mut close_brace = span.end.saturating_sub(1);
        let mut body_open = span.start;
        for q in p.into_inner() {
            match q.as_rule() {
                Rule::rparen if collective.is_some() => header_end = q.as_span().end(),
                Rule::ident => name = Some(self.ident(q)),
                Rule::params => {
                    for pr in sig(q) {
                        params.push(self.param(pr));
                    }
                }
                Rule::word => {
                    header_end = q.as_span().end();
                    collective = Some(self.ident(q));
                }
                Rule::roles => roles = self.roles(q),
                Rule::over_nodes => {
                    if let Some(e) = sig(q).into_iter().next() {
                        over_nodes = Some(self.expr(e));
                    }
                }
                Rule::duals => {
                    for d in sig(q) {
                        if let Some(d) = sig(d).into_iter().next() {
                            duals.push(self.dual(d));
                        }
                    }
                }
                Rule::body => {
                    body_open = q.as_span().start() as u32;
                    close_brace = (q.as_span().end() as u32).saturating_sub(1);
                    for it in sig(q) {
                        items.push(self.stmt(it));
                    }
                }
                _ => {}
            }
        }
        let header_span = Span::new(self.file, span.start as usize, header_end);
        let fallback = Ident {
            name: String::new(),
            span,
        };
        Schedule {
            name: name.unwrap_or_else(|| fallback.clone()),
            params,
            has_param_parens,
            collective: collective.unwrap_or(fallback),
            roles,
            over_nodes,
            duals,
            items,
            header_span,
            span,
            body_open,
            close_brace,
        }
    }

    fn roles(&mut self, q: Pair<'_, Rule>) -> Vec<RoleDecl> {
        let mut roles = Vec::new();
        for r in sig(q) {
            let rspan = self.span(&r);
            let inout = has_child(&r, Rule::kw_inout);
            let mut it = sig(r).into_iter().filter(|x| x.as_rule() != Rule::kw_inout);
            let (Some(n), Some(e)) = (it.next(), it.next()) else {
                continue;
            };
            roles.push(RoleDecl {
                name: self.ident(n),
                chunks: self.expr(e),
                inout,
                span: rspan,
            });
        }
        roles
    }

    fn collective(&mut self, p: Pair<'_, Rule>) -> CollectiveDecl {
        let span = self.span(&p);
        let has_param_parens = has_child(&p, Rule::params);
        let mut name = None;
        let mut params = Vec::new();
        let mut roles = Vec::new();
        let mut items = Vec::new();
        let mut header_end = span.end as usize;
        let mut close_brace = span.end.saturating_sub(1);
        let mut body_open = span.start;
        for q in p.into_inner() {
            match q.as_rule() {
                Rule::rparen => header_end = q.as_span().end(),
                Rule::ident => name = Some(self.ident(q)),
                Rule::params => {
                    for pr in sig(q) {
                        params.push(self.param(pr));
                    }
                }
                Rule::roles => roles = self.roles(q),
                Rule::body => {
                    body_open = q.as_span().start() as u32;
                    close_brace = (q.as_span().end() as u32).saturating_sub(1);
                    for it in sig(q) {
                        items.push(self.stmt(it));
                    }
                }
                _ => {}
            }
        }
        CollectiveDecl {
            name: name.unwrap_or(Ident {
                name: String::new(),
                span,
            }),
            params,
            has_param_parens,
            roles,
            items,
            header_span: Span::new(self.file, span.start as usize, header_end),
            span,
            body_open,
            close_brace,
        }
    }

    fn chunk_ref(&mut self, p: Pair<'_, Rule>) -> ChunkAst {
        let span = self.span(&p);
        let mut it = sig(p).into_iter();
        let role = self.next_ident(&mut it, span);
        let index = self.next_expr(&mut it, span);
        let rank = self.next_expr(&mut it, span);
        ChunkAst {
            role,
            index,
            rank,
            span,
        }
    }

    fn param(&mut self, p: Pair<'_, Rule>) -> Param {
        let span = self.span(&p);
        let mut it = sig(p).into_iter();
        let name = self.next_ident(&mut it, span);
        let range = match it.next().and_then(|r| sig(r).into_iter().next()) {
            Some(r) if r.as_rule() == Rule::divisors_range => {
                let e = sig(r).into_iter().next();
                ParamRange::Divisors(e.map(|e| self.expr(e)).unwrap_or_else(|| zero(span)))
            }
            Some(r) => {
                let mut es = sig(r).into_iter();
                let a = self.next_expr(&mut es, span);
                let b = self.next_expr(&mut es, span);
                ParamRange::Span(a, b)
            }
            None => ParamRange::Span(zero(span), zero(span)),
        };
        Param { name, range, span }
    }

    fn dual(&mut self, d: Pair<'_, Rule>) -> Dual {
        let span = self.span(&d);
        match d.as_rule() {
            Rule::derived_dual => Dual::Derived { span },
            Rule::identity_dual => Dual::Identity {
                words: sig(d).into_iter().map(|w| self.ident(w)).collect(),
                span,
            },
            _ => {
                let has_parens = has_child(&d, Rule::lparen);
                let mut it = sig(d).into_iter();
                let name = self.next_ident(&mut it, span);
                let mut args = Vec::new();
                for a in it {
                    let mut ai = sig(a).into_iter();
                    if let (Some(n), Some(e)) = (ai.next(), ai.next()) {
                        args.push((self.ident(n), self.expr(e)));
                    }
                }
                Dual::Named {
                    name,
                    args,
                    has_parens,
                    span,
                }
            }
        }
    }

    fn int(&mut self, p: &Pair<'_, Rule>) -> i64 {
        match p.as_str().parse::<i64>() {
            Ok(v) => v,
            Err(_) => {
                self.diags.push(
                    Diagnostic::error(codes::E_INT_LITERAL, "integer literal is too large")
                        .with_label(self.span(p), "does not fit in a signed 64-bit integer"),
                );
                0
            }
        }
    }

    fn block(&mut self, p: Pair<'_, Rule>) -> Block {
        let span = self.span(&p);
        Block {
            stmts: sig(p).into_iter().map(|s| self.stmt(s)).collect(),
            span,
        }
    }

    fn region(&mut self, p: Pair<'_, Rule>) -> RegionAst {
        let span = self.span(&p);
        let mut it = sig(p).into_iter();
        let buffer = self.next_ident(&mut it, span);
        let index = it.next().map(|ix| {
            let mut es = sig(ix).into_iter();
            let a = self.next_expr(&mut es, span);
            match es.next() {
                Some(b) => IndexAst::Range(a, self.expr(b)),
                None => IndexAst::One(a),
            }
        });
        RegionAst {
            buffer,
            index,
            span,
        }
    }

    fn signal_ref(&mut self, p: Pair<'_, Rule>) -> SignalRef {
        let span = self.span(&p);
        let mut it = sig(p).into_iter();
        let name = self.next_ident(&mut it, span);
        let index = it.next().map(|e| self.expr(e));
        SignalRef { name, index, span }
    }

    fn update_op(p: &Pair<'_, Rule>) -> UpdateOp {
        if p.as_str().trim() == "+=" {
            UpdateOp::Add
        } else {
            UpdateOp::Set
        }
    }

    fn stmt(&mut self, p: Pair<'_, Rule>) -> Stmt {
        let span = self.span(&p);
        let rule = p.as_rule();
        let kind = match rule {
            Rule::scratch_decl => {
                let mut name = None;
                let mut chunks = None;
                let mut size = None;
                let mut class = None;
                for q in sig(p) {
                    match q.as_rule() {
                        Rule::buf_name => name = Some(self.ident(q)),
                        Rule::expr => chunks = Some(self.expr(q)),
                        Rule::scratch_size => {
                            if let Some(s) = sig(q).into_iter().next() {
                                let is_of = s.as_rule() == Rule::scratch_of;
                                if let Some(v) = sig(s).into_iter().next() {
                                    size = Some(if is_of {
                                        ScratchSize::Of(self.ident(v))
                                    } else {
                                        ScratchSize::Each(self.size_expr(v))
                                    });
                                }
                            }
                        }
                        Rule::elem_class => {
                            class = sig(q).into_iter().next().map(|c| match c.as_str() {
                                "wire" => ElemClassAst::Wire,
                                "acc" => ElemClassAst::Acc,
                                _ => ElemClassAst::Data,
                            })
                        }
                        _ => {}
                    }
                }
                StmtKind::Scratch {
                    name: name.unwrap_or(Ident {
                        name: String::new(),
                        span,
                    }),
                    chunks: chunks.unwrap_or_else(|| zero(span)),
                    size: size.unwrap_or(ScratchSize::Each(SizeAst::Int(1, span))),
                    class,
                }
            }
            Rule::signal_decl | Rule::signals_decl => {
                let plural = rule == Rule::signals_decl;
                let mut decls = Vec::new();
                if plural {
                    for item in sig(p) {
                        let mut it = sig(item).into_iter();
                        if let Some(n) = it.next() {
                            let n = self.ident(n);
                            let len = it.next().map(|e| self.expr(e));
                            decls.push((n, len));
                        }
                    }
                } else {
                    let mut it = sig(p).into_iter();
                    if let Some(n) = it.next() {
                        let n = self.ident(n);
                        let len = it.next().map(|e| self.expr(e));
                        decls.push((n, len));
                    }
                }
                StmtKind::Signals { decls, plural }
            }
            Rule::group_decl => {
                let mut it = sig(p).into_iter();
                let name = self.next_ident(&mut it, span);
                let kind = match it.next().map(|k| k.as_str().trim().to_string()) {
                    Some(k) if k == "stride" => GroupKind::Stride,
                    _ => GroupKind::Block,
                };
                let arg = self.next_expr(&mut it, span);
                StmtKind::Group { name, kind, arg }
            }
            Rule::require_decl => {
                let mut it = sig(p).into_iter();
                let cond = self.next_expr(&mut it, span);
                StmtKind::Require { cond }
            }
            Rule::let_stmt => {
                let mut it = sig(p).into_iter();
                let name = self.next_ident(&mut it, span);
                let value = self.next_expr(&mut it, span);
                StmtKind::Let { name, value }
            }
            Rule::for_stmt => {
                let mut it = sig(p).into_iter();
                let var = self.next_ident(&mut it, span);
                let from = self.next_expr(&mut it, span);
                let to = self.next_expr(&mut it, span);
                let body = it.next().map(|b| self.block(b)).unwrap_or(Block {
                    stmts: Vec::new(),
                    span,
                });
                StmtKind::For {
                    var,
                    from,
                    to,
                    body,
                }
            }
            Rule::if_stmt => {
                let mut arms = Vec::new();
                let mut otherwise = None;
                let mut cond = None;
                for q in sig(p) {
                    match q.as_rule() {
                        Rule::expr => cond = Some(self.expr(q)),
                        Rule::block => {
                            let c = cond.take().unwrap_or_else(|| zero(span));
                            arms.push((c, self.block(q)));
                        }
                        Rule::else_if => {
                            let mut it = sig(q).into_iter();
                            let c = self.next_expr(&mut it, span);
                            let b = it.next().map(|b| self.block(b)).unwrap_or(Block {
                                stmts: Vec::new(),
                                span,
                            });
                            arms.push((c, b));
                        }
                        Rule::else_block => {
                            otherwise = sig(q).into_iter().next().map(|b| self.block(b));
                        }
                        _ => {}
                    }
                }
                StmtKind::If { arms, otherwise }
            }
            Rule::channel_stmt => {
                let mut it = sig(p).into_iter();
                let channel = self.next_expr(&mut it, span);
                let body = it.next().map(|b| self.block(b)).unwrap_or(Block {
                    stmts: Vec::new(),
                    span,
                });
                StmtKind::Channel { channel, body }
            }
            Rule::put_stmt => {
                let mut it = sig(p).into_iter();
                let src = it.next().map(|r| self.region(r));
                let dst = it.next().map(|r| self.region(r));
                let peer = self.next_expr(&mut it, span);
                let signal = it.next().map(|ps| self.put_signal(ps));
                let empty = || RegionAst {
                    buffer: Ident {
                        name: String::new(),
                        span,
                    },
                    index: None,
                    span,
                };
                StmtKind::Put {
                    src: src.unwrap_or_else(empty),
                    dst: dst.unwrap_or_else(empty),
                    peer,
                    signal,
                }
            }
            Rule::get_stmt => {
                let mut it = sig(p).into_iter();
                let src = it.next().map(|r| self.region(r));
                let peer = self.next_expr(&mut it, span);
                let dst = it.next().map(|r| self.region(r));
                let empty = || RegionAst {
                    buffer: Ident {
                        name: String::new(),
                        span,
                    },
                    index: None,
                    span,
                };
                StmtKind::Get {
                    src: src.unwrap_or_else(empty),
                    peer,
                    dst: dst.unwrap_or_else(empty),
                }
            }
            Rule::signal_stmt => {
                let mut it = sig(p).into_iter();
                let signal = it.next().map(|s| self.signal_ref(s));
                let peer = self.next_expr(&mut it, span);
                let op = it
                    .next()
                    .map(|o| Self::update_op(&o))
                    .unwrap_or(UpdateOp::Add);
                let value = self.next_expr(&mut it, span);
                StmtKind::Signal {
                    signal: signal.unwrap_or(SignalRef {
                        name: Ident {
                            name: String::new(),
                            span,
                        },
                        index: None,
                        span,
                    }),
                    peer,
                    op,
                    value,
                }
            }
            Rule::wait_stmt => {
                let mut it = sig(p).into_iter();
                let signal = it.next().map(|s| self.signal_ref(s));
                let cmp = it.next().map(|c| cmp_of(c.as_str())).unwrap_or(CmpOp::Ge);
                let value = self.next_expr(&mut it, span);
                StmtKind::Wait {
                    signal: signal.unwrap_or(SignalRef {
                        name: Ident {
                            name: String::new(),
                            span,
                        },
                        index: None,
                        span,
                    }),
                    cmp,
                    value,
                }
            }
            Rule::compute_stmt => {
                let mut rs: Vec<RegionAst> = sig(p).into_iter().map(|r| self.region(r)).collect();
                while rs.len() < 3 {
                    rs.push(RegionAst {
                        buffer: Ident {
                            name: String::new(),
                            span,
                        },
                        index: None,
                        span,
                    });
                }
                let b = rs.pop().unwrap_or_else(|| unreachable_region(span));
                let a = rs.pop().unwrap_or_else(|| unreachable_region(span));
                let c = rs.pop().unwrap_or_else(|| unreachable_region(span));
                StmtKind::Matmul { c, a, b }
            }
            Rule::hostcoll_stmt => {
                let mut it = sig(p).into_iter();
                let op = it.next().map(|w| self.ident(w));
                let region = it.next().map(|r| self.region(r));
                let group = it.next().map(|g| self.ident(g));
                let blank = Ident {
                    name: String::new(),
                    span,
                };
                StmtKind::HostColl {
                    op: op.unwrap_or_else(|| blank.clone()),
                    region: region.unwrap_or_else(|| unreachable_region(span)),
                    group: group.unwrap_or(blank),
                }
            }
            Rule::barrier_stmt => StmtKind::Barrier,
            Rule::use_stmt => {
                let mut callee = None;
                let mut group = None;
                let mut args = Vec::new();
                for q in sig(p) {
                    match q.as_rule() {
                        Rule::ident if callee.is_none() => callee = Some(self.ident(q)),
                        Rule::ident => group = Some(self.ident(q)),
                        Rule::use_arg => {
                            let aspan = self.span(&q);
                            let mut it = sig(q).into_iter();
                            let (Some(n), Some(v)) = (it.next(), it.next()) else {
                                continue;
                            };
                            let name = self.ident(n);
                            let value = match sig(v).into_iter().next() {
                                Some(x) if x.as_rule() == Rule::region => {
                                    UseValue::Region(self.region(x))
                                }
                                Some(x) => UseValue::Expr(self.expr(x)),
                                None => UseValue::Expr(zero(aspan)),
                            };
                            args.push(UseArg {
                                name,
                                value,
                                span: aspan,
                            });
                        }
                        _ => {}
                    }
                }
                let blank = Ident {
                    name: String::new(),
                    span,
                };
                StmtKind::Use {
                    callee: callee.unwrap_or_else(|| blank.clone()),
                    args,
                    group: group.unwrap_or(blank),
                }
            }
            Rule::assign_stmt => {
                let mut it = sig(p).into_iter();
                let dst = it
                    .next()
                    .map(|r| self.region(r))
                    .unwrap_or_else(|| unreachable_region(span));
                let op = match it.next().and_then(|o| sig(o).into_iter().next()) {
                    Some(call) => {
                        let r = call.as_rule();
                        let mut regions: Vec<RegionAst> =
                            sig(call).into_iter().map(|x| self.region(x)).collect();
                        match r {
                            Rule::reduce_call => LocalOp::Reduce(regions),
                            Rule::cast_call => LocalOp::Cast(
                                regions.pop().unwrap_or_else(|| unreachable_region(span)),
                            ),
                            _ => LocalOp::Copy(
                                regions.pop().unwrap_or_else(|| unreachable_region(span)),
                            ),
                        }
                    }
                    None => LocalOp::Copy(unreachable_region(span)),
                };
                StmtKind::Assign { dst, op }
            }
            Rule::chunk_map => {
                let mut dst = None;
                let mut src = None;
                let mut op = UpdateOp::Set;
                for q in sig(p) {
                    match q.as_rule() {
                        Rule::update_op => op = Self::update_op(&q),
                        Rule::chunk_ref if dst.is_none() => dst = Some(self.chunk_ref(q)),
                        Rule::chunk_ref => src = Some(self.chunk_ref(q)),
                        _ => {}
                    }
                }
                let blank = || ChunkAst {
                    role: Ident {
                        name: String::new(),
                        span,
                    },
                    index: zero(span),
                    rank: zero(span),
                    span,
                };
                StmtKind::Map {
                    dst: dst.unwrap_or_else(blank),
                    op,
                    src: src.unwrap_or_else(blank),
                }
            }
            _ => StmtKind::Barrier,
        };
        Stmt { kind, span }
    }

    fn put_signal(&mut self, p: Pair<'_, Rule>) -> PutSignal {
        let span = self.span(&p);
        let mut signal = None;
        let mut peer = None;
        let mut op = UpdateOp::Add;
        let mut value = None;
        let mut seen_op = false;
        for q in sig(p) {
            match q.as_rule() {
                Rule::signal_ref => signal = Some(self.signal_ref(q)),
                Rule::update_op => {
                    op = Self::update_op(&q);
                    seen_op = true;
                }
                Rule::expr if seen_op => value = Some(self.expr(q)),
                Rule::expr => peer = Some(self.expr(q)),
                _ => {}
            }
        }
        PutSignal {
            signal: signal.unwrap_or(SignalRef {
                name: Ident {
                    name: String::new(),
                    span,
                },
                index: None,
                span,
            }),
            peer,
            op,
            value: value.unwrap_or_else(|| zero(span)),
            span,
        }
    }

    fn size_expr(&mut self, p: Pair<'_, Rule>) -> SizeAst {
        let span = self.span(&p);
        match p.as_rule() {
            Rule::size_expr | Rule::size_term => {
                let is_sum = p.as_rule() == Rule::size_expr;
                let mut acc: Option<SizeAst> = None;
                for q in sig(p) {
                    if matches!(q.as_rule(), Rule::size_plus | Rule::size_times) {
                        if !self.count_op() {
                            self.diags.push(
                                Diagnostic::error(
                                    codes::E_NESTING,
                                    format!("size has more than {MAX_EXPR_OPS} operators"),
                                )
                                .with_label(span, "too large"),
                            );
                            break;
                        }
                        continue;
                    }
                    let v = self.size_expr(q);
                    acc = Some(match acc {
                        None => v,
                        Some(a) if is_sum => SizeAst::Add(Box::new(a), Box::new(v)),
                        Some(a) => SizeAst::Mul(Box::new(a), Box::new(v)),
                    });
                }
                acc.unwrap_or(SizeAst::Int(0, span))
            }
            Rule::size_atom => {
                let Some(q) = sig(p).into_iter().next() else {
                    return SizeAst::Int(0, span);
                };
                match q.as_rule() {
                    Rule::int => SizeAst::Int(self.int(&q), span),
                    Rule::kw_P => SizeAst::P(span),
                    Rule::ident => SizeAst::Name(self.ident(q)),
                    _ => SizeAst::Paren(Box::new(self.size_expr(q)), span),
                }
            }
            _ => SizeAst::Int(0, span),
        }
    }

    /// One whole expression. Operators are counted so a pathological expression is refused
    /// (E0104) before it becomes a tree too deep to walk or drop recursively.
    fn expr(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span = self.span(&p);
        let outer = (self.ops, self.too_deep);
        self.ops = 0;
        self.too_deep = false;
        let e = self.expr_inner(p);
        let deep = self.too_deep;
        (self.ops, self.too_deep) = outer;
        if deep {
            self.diags.push(
                Diagnostic::error(
                    codes::E_NESTING,
                    format!("expression has more than {MAX_EXPR_OPS} operators"),
                )
                .with_label(span, "too large")
                .with_help("split the expression with `let`"),
            );
            return zero(span);
        }
        e
    }

    /// Count one operator of the current expression; false once the limit is passed.
    fn count_op(&mut self) -> bool {
        self.ops += 1;
        if self.ops > MAX_EXPR_OPS {
            self.too_deep = true;
        }
        !self.too_deep
    }

    fn expr_inner(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span = self.span(&p);
        match p.as_rule() {
            Rule::expr => match sig(p).into_iter().next() {
                Some(q) => self.expr_inner(q),
                None => zero(span),
            },
            Rule::or_expr
            | Rule::and_expr
            | Rule::add_expr
            | Rule::mul_expr
            | Rule::cmp_expr
            | Rule::xor_expr
            | Rule::shift_expr
            | Rule::pow_expr => {
                let mut it = sig(p).into_iter();
                let Some(first) = it.next() else {
                    return zero(span);
                };
                let mut acc = self.expr_inner(first);
                while let (Some(op), Some(rhs)) = (it.next(), it.next()) {
                    if !self.count_op() {
                        break;
                    }
                    let op = match op.as_rule() {
                        Rule::op_or => BinOp::Or,
                        Rule::op_and => BinOp::And,
                        Rule::op_add => BinOp::Add,
                        Rule::op_sub => BinOp::Sub,
                        Rule::op_mul => BinOp::Mul,
                        Rule::op_div => BinOp::Div,
                        Rule::op_mod => BinOp::Mod,
                        Rule::op_pow => BinOp::Pow,
                        Rule::op_xor => BinOp::Xor,
                        Rule::op_shl => BinOp::Shl,
                        Rule::op_shr => BinOp::Shr,
                        _ => BinOp::Cmp(cmp_of(op.as_str())),
                    };
                    let rhs = self.expr_inner(rhs);
                    let s = acc.span.join(rhs.span);
                    acc = Expr {
                        kind: ExprKind::Binary(op, Box::new(acc), Box::new(rhs)),
                        span: s,
                    };
                }
                acc
            }
            Rule::unary => {
                let parts = sig(p);
                let mut ops = Vec::new();
                let mut operand = None;
                for q in parts {
                    match q.as_rule() {
                        Rule::op_neg => ops.push((UnOp::Neg, self.span(&q))),
                        Rule::op_not => ops.push((UnOp::Not, self.span(&q))),
                        _ => operand = Some(self.expr_inner(q)),
                    }
                }
                let mut e = operand.unwrap_or_else(|| zero(span));
                for (op, s) in ops.into_iter().rev() {
                    if !self.count_op() {
                        break;
                    }
                    let s = s.join(e.span);
                    e = Expr {
                        kind: ExprKind::Unary(op, Box::new(e)),
                        span: s,
                    };
                }
                e
            }
            Rule::primary => {
                let Some(q) = sig(p).into_iter().next() else {
                    return zero(span);
                };
                match q.as_rule() {
                    Rule::expr => Expr {
                        kind: ExprKind::Paren(Box::new(self.expr_inner(q))),
                        span,
                    },
                    _ => self.expr_inner(q),
                }
            }
            Rule::int => Expr {
                kind: ExprKind::Int(self.int(&p)),
                span,
            },
            Rule::kw_rank => Expr {
                kind: ExprKind::Rank,
                span,
            },
            Rule::kw_P => Expr {
                kind: ExprKind::P,
                span,
            },
            Rule::kw_true => Expr {
                kind: ExprKind::Bool(true),
                span,
            },
            Rule::kw_false => Expr {
                kind: ExprKind::Bool(false),
                span,
            },
            Rule::ident => Expr {
                kind: ExprKind::Name(p.as_str().to_string()),
                span,
            },
            Rule::minmax => {
                let mut it = sig(p).into_iter();
                let is_min = it
                    .next()
                    .map(|k| k.as_rule() == Rule::kw_min)
                    .unwrap_or(true);
                let a = it
                    .next()
                    .map(|e| self.expr_inner(e))
                    .unwrap_or_else(|| zero(span));
                let b = it
                    .next()
                    .map(|e| self.expr_inner(e))
                    .unwrap_or_else(|| zero(span));
                Expr {
                    kind: if is_min {
                        ExprKind::Min(Box::new(a), Box::new(b))
                    } else {
                        ExprKind::Max(Box::new(a), Box::new(b))
                    },
                    span,
                }
            }
            Rule::call1 => {
                let mut it = sig(p).into_iter();
                let is_log2 = it
                    .next()
                    .map(|k| k.as_rule() == Rule::kw_log2)
                    .unwrap_or(true);
                let x = Box::new(
                    it.next()
                        .map(|e| self.expr_inner(e))
                        .unwrap_or_else(|| zero(span)),
                );
                Expr {
                    kind: if is_log2 {
                        ExprKind::Log2(x)
                    } else {
                        ExprKind::IsPow2(x)
                    },
                    span,
                }
            }
            Rule::cond_expr => {
                // cond, value, (else if cond, value)*, else value
                let mut arms = Vec::new();
                let mut rest = None;
                let mut it = sig(p).into_iter();
                while let Some(q) = it.next() {
                    if q.as_rule() == Rule::cond_elif {
                        let mut e = sig(q).into_iter();
                        let c = e.next().map(|x| self.expr_inner(x));
                        let v = e.next().map(|x| self.expr_inner(x));
                        arms.push((
                            c.unwrap_or_else(|| zero(span)),
                            v.unwrap_or_else(|| zero(span)),
                        ));
                    } else if arms.is_empty() && rest.is_none() {
                        let c = self.expr_inner(q);
                        let v = it
                            .next()
                            .map(|v| self.expr_inner(v))
                            .unwrap_or_else(|| zero(span));
                        arms.push((c, v));
                    } else {
                        rest = Some(self.expr_inner(q));
                    }
                    if !self.count_op() {
                        break;
                    }
                }
                Expr {
                    kind: ExprKind::Cond(arms, Box::new(rest.unwrap_or_else(|| zero(span)))),
                    span,
                }
            }
            Rule::group_attr => {
                let mut it = sig(p).into_iter();
                let g = self.next_ident(&mut it, span);
                match it.next() {
                    Some(m) if m.as_rule() == Rule::member_call => {
                        let arg = sig(m)
                            .into_iter()
                            .next()
                            .map(|e| self.expr_inner(e))
                            .unwrap_or_else(|| zero(span));
                        Expr {
                            kind: ExprKind::GroupMember(g, Box::new(arg)),
                            span,
                        }
                    }
                    Some(a) => Expr {
                        kind: ExprKind::GroupAttr(
                            g,
                            if a.as_str() == "size" {
                                GroupAttr::Size
                            } else {
                                GroupAttr::Rank
                            },
                        ),
                        span,
                    },
                    None => zero(span),
                }
            }
            _ => zero(span),
        }
    }
}

fn unreachable_region(span: Span) -> RegionAst {
    RegionAst {
        buffer: Ident {
            name: String::new(),
            span,
        },
        index: None,
        span,
    }
}

fn cmp_of(s: &str) -> CmpOp {
    match s.trim() {
        "==" => CmpOp::Eq,
        "!=" => CmpOp::Ne,
        "<" => CmpOp::Lt,
        "<=" => CmpOp::Le,
        ">" => CmpOp::Gt,
        _ => CmpOp::Ge,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(stmts: &str) -> Vec<Stmt> {
        let text = format!("schedule a implements allgather(in: [1], out: [P]) {{\n{stmts}\n}}\n");
        parse(0, &text).unwrap().schedules.remove(0).items
    }

    #[test]
    fn precedence_and_associativity() {
        let s = body("let y = 1 + 2 * 3 - 4 % 5;");
        let StmtKind::Let { value, .. } = &s[0].kind else {
            panic!()
        };
        // ((1 + (2 * 3)) - (4 % 5))
        let ExprKind::Binary(BinOp::Sub, l, r) = &value.kind else {
            panic!("{value:?}")
        };
        assert!(matches!(l.kind, ExprKind::Binary(BinOp::Add, _, _)));
        assert!(matches!(r.kind, ExprKind::Binary(BinOp::Mod, _, _)));
        let s = body("if !(rank == 0) && P > 1 || false { barrier; }");
        let StmtKind::If { arms, .. } = &s[0].kind else {
            panic!()
        };
        let cond = &arms[0].0;
        assert!(matches!(cond.kind, ExprKind::Binary(BinOp::Or, _, _)));
    }

    #[test]
    fn statements_parse_to_their_ast() {
        let s = body(
            "signal s;\nput in -> out[rank] @ p, signal s += 1;\nget out[0..2] @ 1 -> out[2..4];\nwait s >= P - 1;\nout[rank] = reduce(out[0..rank], in);\nhostcoll allgather(out) over g;\nuse inner(x = out[rank], root = 0) within g;",
        );
        let StmtKind::Put {
            src,
            signal: Some(ps),
            ..
        } = &s[1].kind
        else {
            panic!("{:?}", s[1])
        };
        assert_eq!(src.buffer.name, "in");
        assert!(ps.peer.is_none());
        assert!(matches!(ps.value.kind, ExprKind::Int(1)));
        assert!(matches!(
            &s[2].kind,
            StmtKind::Get {
                dst: RegionAst {
                    index: Some(IndexAst::Range(..)),
                    ..
                },
                ..
            }
        ));
        assert!(matches!(&s[3].kind, StmtKind::Wait { cmp: CmpOp::Ge, .. }));
        let StmtKind::Assign {
            op: LocalOp::Reduce(rs),
            ..
        } = &s[4].kind
        else {
            panic!()
        };
        assert_eq!(rs.len(), 2);
        let StmtKind::Use { args, group, .. } = &s[6].kind else {
            panic!()
        };
        assert_eq!(group.name, "g");
        assert!(matches!(args[1].value, UseValue::Expr(_)));
        assert!(matches!(args[0].value, UseValue::Region(_)));
    }

    #[test]
    fn header_parts() {
        let text = "schedule h(L in divisors(P), r in 0..L) implements allreduce(x: [L]) over nodes(L) dual identity assuming replicated, h2(a = 1) { }";
        let s = parse(3, text).unwrap().schedules.remove(0);
        assert_eq!(s.params.len(), 2);
        assert!(matches!(s.params[0].range, ParamRange::Divisors(_)));
        assert!(s.over_nodes.is_some());
        assert_eq!(s.duals.len(), 2);
        assert_eq!(s.name.span.file, 3);
        assert_eq!(
            &text[s.header_span.start as usize..s.header_span.end as usize],
            "schedule h(L in divisors(P), r in 0..L) implements allreduce(x: [L])"
        );
    }

    #[test]
    fn syntax_errors_say_what_was_expected() {
        let e = parse(
            0,
            "schedule a implements allreduce(x: [1]) {\n  let y = 3\n}",
        )
        .unwrap_err();
        assert_eq!(e[0].code, codes::E_SYNTAX);
        assert!(e[0].message.starts_with("expected `;`"), "{}", e[0].message);
        let e = parse(
            0,
            "schedule a implements allreduce(x: [1]) { let for = 1; }",
        )
        .unwrap_err();
        assert!(
            e[0].notes.iter().any(|n| n.contains("`for` is a keyword")),
            "{:?}",
            e[0]
        );
        let e = parse(0, "schedule").unwrap_err();
        assert!(
            e[0].message.contains("found end of file"),
            "{}",
            e[0].message
        );
    }

    #[test]
    fn garbage_never_panics() {
        for t in [
            "",
            "}",
            "schedule a implements",
            "é",
            "/*",
            "((((",
            "schedule a implements x() { put",
            "\u{0}",
        ] {
            let _ = parse(0, t);
        }
        assert!(parse(0, "").unwrap().schedules.is_empty());
    }
}
