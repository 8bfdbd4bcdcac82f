//! The canonical formatter (`symsched fmt`): 4-space indent, one statement per line, normalised
//! spacing, comments kept, at most one blank line kept between items. Idempotent:
//! `format(format(x)) == format(x)`.
//!
//! Comments are not in the AST; they are scanned from the text and re-attached by position: a
//! comment on the same line after a statement stays trailing, any other comment is printed on
//! its own line before the next item (a comment inside a statement moves before it).

use super::ast::*;
use crate::diag::Diagnostic;

/// Canonical layout of a whole file. Fails with the parser's diagnostics on invalid syntax.
pub fn format_source(name: &str, text: &str) -> Result<String, Vec<Diagnostic>> {
    let _ = name;
    let file = super::parse(0, text)?;
    let mut p = Printer {
        text,
        comments: scan_comments(text),
        next: 0,
        out: String::new(),
        indent: 0,
        last_end: 0,
        at_block_start: true,
    };
    // Schedules and collective declarations, in source order.
    let mut items: Vec<(u32, Option<&Schedule>, Option<&CollectiveDecl>)> = file
        .schedules
        .iter()
        .map(|s| (s.span.start, Some(s), None))
        .chain(
            file.collectives
                .iter()
                .map(|c| (c.span.start, None, Some(c))),
        )
        .collect();
    items.sort_by_key(|(start, _, _)| *start);
    for (i, (start, s, c)) in items.iter().enumerate() {
        p.leading(*start as usize, i > 0);
        if let Some(s) = s {
            p.schedule(s);
        }
        if let Some(c) = c {
            p.collective(c);
        }
    }
    p.leading(text.len(), !items.is_empty());
    let mut out = p.out;
    while out.ends_with("\n\n") {
        out.pop();
    }
    Ok(out)
}

/// Longest one-line schedule header; longer ones put the `dual` clause on its own line.
const MAX_HEADER: usize = 100;

struct Comment {
    start: usize,
    end: usize,
}

fn scan_comments(text: &str) -> Vec<Comment> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'/' && b[i + 1] == b'/' {
            let start = i;
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            out.push(Comment { start, end: i });
        } else if b[i] == b'/' && b[i + 1] == b'*' {
            let start = i;
            let end = text[i + 2..]
                .find("*/")
                .map(|e| i + 2 + e + 2)
                .unwrap_or(b.len());
            out.push(Comment { start, end });
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

struct Printer<'t> {
    text: &'t str,
    comments: Vec<Comment>,
    next: usize,
    out: String,
    indent: usize,
    /// Source offset of the last thing printed (for blank-line detection).
    last_end: usize,
    /// Nothing printed yet in the current block (no blank line there).
    at_block_start: bool,
}

impl Printer<'_> {
    fn blank_between(&self, a: usize, b: usize) -> bool {
        let (a, b) = (a.min(self.text.len()), b.min(self.text.len()));
        if a >= b {
            return false;
        }
        let gap = &self.text[a..b];
        let mut newlines = 0;
        for c in gap.chars() {
            if c == '\n' {
                newlines += 1;
                if newlines >= 2 {
                    return true;
                }
            } else if !c.is_whitespace() {
                newlines = 0;
            }
        }
        false
    }

    fn pad(&mut self) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
    }

    /// Print the comments inside an item (before `pos`) on their own lines before it, with no
    /// blank lines: the item itself starts a line already.
    fn inner(&mut self, pos: usize) {
        let keep = self.at_block_start;
        self.at_block_start = true;
        self.leading(pos, false);
        self.at_block_start = keep && self.at_block_start;
        self.last_end = self.last_end.max(pos);
    }

    /// Print the comments before `pos` on their own lines; `force_blank` puts one blank line
    /// before the next item (between schedules).
    fn leading(&mut self, pos: usize, force_blank: bool) {
        let mut first = true;
        while self.next < self.comments.len() && self.comments[self.next].start < pos {
            let c = &self.comments[self.next];
            let (start, end) = (c.start, c.end);
            let blank = if first && force_blank {
                true
            } else {
                !self.at_block_start && self.blank_between(self.last_end, start)
            };
            if blank && !self.out.is_empty() {
                self.out.push('\n');
            }
            self.pad();
            let body = self.text[start..end].trim_end().to_string();
            self.out.push_str(&body);
            self.out.push('\n');
            self.last_end = end;
            self.next += 1;
            self.at_block_start = false;
            first = false;
        }
        if pos < self.text.len() {
            let blank = if first && force_blank {
                true
            } else {
                !self.at_block_start && self.blank_between(self.last_end, pos)
            };
            if blank && !self.out.is_empty() {
                self.out.push('\n');
            }
            self.last_end = self.last_end.max(pos);
        }
    }

    /// Print one line ending at source offset `end`, with any comment that follows on the same
    /// source line.
    fn line(&mut self, s: &str, end: usize) {
        self.pad();
        self.out.push_str(s);
        self.last_end = end;
        self.trailing(end);
        self.out.push('\n');
        self.at_block_start = false;
    }

    /// A line that takes no trailing comment (the first lines of a split header).
    fn plain_line(&mut self, s: &str) {
        self.pad();
        self.out.push_str(s);
        self.out.push('\n');
        self.at_block_start = false;
    }

    fn trailing(&mut self, end: usize) {
        while self.next < self.comments.len() {
            let c = &self.comments[self.next];
            let (start, cend) = (c.start, c.end);
            let gap = if start >= end {
                &self.text[end..start]
            } else {
                "\n"
            };
            if gap.contains('\n') || !gap.trim().is_empty() {
                break;
            }
            let body = self.text[start..cend].trim_end().to_string();
            self.out.push_str("  ");
            self.out.push_str(&body);
            self.last_end = cend;
            self.next += 1;
        }
    }

    fn collective(&mut self, c: &CollectiveDecl) {
        self.inner(c.body_open as usize);
        let head = format!(
            "collective {}{}({})",
            c.name.name,
            params_text(&c.params, c.has_param_parens),
            roles_text(&c.roles)
        );
        self.line(&format!("{head} {{"), c.body_open as usize + 1);
        self.body(&c.items, c.close_brace as usize);
        self.line("}", c.close_brace as usize + 1);
    }

    fn schedule(&mut self, s: &Schedule) {
        // Comments inside the header move before it.
        self.inner(s.body_open as usize);
        let mut head = format!("schedule {}", s.name.name);
        head.push_str(&params_text(&s.params, s.has_param_parens));
        let roles = roles_text(&s.roles);
        head.push_str(&format!(" implements {}({roles})", s.collective.name));
        if let Some(l) = &s.over_nodes {
            head.push_str(&format!(" over nodes({})", expr(l)));
        }
        let duals: Vec<String> = s.duals.iter().map(dual).collect();
        let open = s.body_open as usize + 1;
        if duals.is_empty() {
            self.line(&format!("{head} {{"), open);
        } else {
            let one = format!("{head} dual {} {{", duals.join(", "));
            // A `dual` clause the author put on its own line stays there.
            let first = s.duals[0].span().start as usize;
            let hend = (s.header_span.end as usize).min(first);
            let split = self.text.get(hend..first).is_some_and(|g| g.contains('\n'));
            if one.len() <= MAX_HEADER && !split {
                self.line(&one, open);
            } else {
                self.plain_line(&head);
                self.indent += 1;
                self.plain_line(&format!("dual {}", duals.join(", ")));
                self.indent -= 1;
                self.line("{", open);
            }
        }
        self.body(&s.items, s.close_brace as usize);
        self.line("}", s.close_brace as usize + 1);
    }

    fn body(&mut self, stmts: &[Stmt], close: usize) {
        self.indent += 1;
        self.at_block_start = true;
        for st in stmts {
            self.stmt(st);
        }
        // Comments before the closing brace stay inside the block, without a blank line.
        self.at_block_start = self.at_block_start || !self.blank_between(self.last_end, close);
        let keep = self.at_block_start;
        self.at_block_start = true;
        self.leading(close, false);
        self.at_block_start = keep;
        self.indent -= 1;
    }

    fn stmt(&mut self, st: &Stmt) {
        self.leading(st.span.start as usize, false);
        match &st.kind {
            StmtKind::For {
                var,
                from,
                to,
                body,
            } => {
                let open = body.span.start as usize;
                self.inner(open);
                self.line(
                    &format!("for {} in {}..{} {{", var.name, expr(from), expr(to)),
                    open + 1,
                );
                self.body(&body.stmts, body.span.end as usize - 1);
                self.line("}", body.span.end as usize);
            }
            StmtKind::If { .. } => self.if_chain(st),
            StmtKind::Channel { channel, body } => {
                let open = body.span.start as usize;
                self.inner(open);
                self.line(&format!("channel {} {{", expr(channel)), open + 1);
                self.body(&body.stmts, body.span.end as usize - 1);
                self.line("}", body.span.end as usize);
            }
            _ => {
                // Comments inside a one-line statement move before it.
                self.inner(st.span.end as usize);
                let s = simple(st);
                self.line(&s, st.span.end as usize);
            }
        }
    }

    fn if_chain(&mut self, st: &Stmt) {
        let StmtKind::If { arms, otherwise } = &st.kind else {
            return;
        };
        for (i, (cond, block)) in arms.iter().enumerate() {
            let open = block.span.start as usize;
            self.inner(open);
            let lead = if i == 0 { "if" } else { "} else if" };
            self.line(&format!("{lead} {} {{", expr(cond)), open + 1);
            // Comments between `}` and the next `{` (around `else`) stay in the block before it.
            let close = match (arms.get(i + 1), otherwise) {
                (Some((_, next)), _) => next.span.start as usize,
                (None, Some(b)) => b.span.start as usize,
                (None, None) => block.span.end as usize - 1,
            };
            self.body(&block.stmts, close);
        }
        match (otherwise, arms.last()) {
            (Some(b), _) => {
                self.line("} else {", b.span.start as usize + 1);
                self.body(&b.stmts, b.span.end as usize - 1);
                self.line("}", b.span.end as usize);
            }
            (None, Some((_, last))) => self.line("}", last.span.end as usize),
            (None, None) => {}
        }
    }
}

fn dual(d: &Dual) -> String {
    match d {
        Dual::Derived { .. } => "derived".to_string(),
        Dual::Identity { words, .. } => {
            let mut s = "identity".to_string();
            for w in words {
                s.push(' ');
                s.push_str(&w.name);
            }
            s
        }
        Dual::Named {
            name,
            args,
            has_parens,
            ..
        } => {
            if *has_parens || !args.is_empty() {
                let a: Vec<String> = args
                    .iter()
                    .map(|(n, e)| format!("{} = {}", n.name, expr(e)))
                    .collect();
                format!("{}({})", name.name, a.join(", "))
            } else {
                name.name.clone()
            }
        }
    }
}

fn region(r: &RegionAst) -> String {
    match &r.index {
        None => r.buffer.name.clone(),
        Some(IndexAst::One(e)) => format!("{}[{}]", r.buffer.name, expr(e)),
        Some(IndexAst::Range(a, b)) => format!("{}[{}..{}]", r.buffer.name, expr(a), expr(b)),
    }
}

fn signal_ref(s: &SignalRef) -> String {
    match &s.index {
        None => s.name.name.clone(),
        Some(e) => format!("{}[{}]", s.name.name, expr(e)),
    }
}

fn update(op: UpdateOp) -> &'static str {
    match op {
        UpdateOp::Add => "+=",
        UpdateOp::Set => "=",
    }
}

fn size(s: &SizeAst) -> String {
    match s {
        SizeAst::Int(v, _) => v.to_string(),
        SizeAst::P(_) => "P".into(),
        SizeAst::Name(i) => i.name.clone(),
        SizeAst::Add(a, b) => format!("{} + {}", size(a), size(b)),
        SizeAst::Mul(a, b) => format!("{}*{}", size(a), size(b)),
        SizeAst::Paren(a, _) => format!("({})", size(a)),
    }
}

/// `(a in 0..P, b in divisors(P))`, or nothing when written without parentheses.
fn params_text(params: &[Param], parens: bool) -> String {
    if !parens {
        return String::new();
    }
    let ps: Vec<String> = params
        .iter()
        .map(|p| {
            let r = match &p.range {
                ParamRange::Span(a, b) => format!("{}..{}", expr(a), expr(b)),
                ParamRange::Divisors(e) => format!("divisors({})", expr(e)),
            };
            format!("{} in {r}", p.name.name)
        })
        .collect();
    format!("({})", ps.join(", "))
}

fn roles_text(roles: &[RoleDecl]) -> String {
    roles
        .iter()
        .map(|r| {
            let mode = if r.inout { "inout " } else { "" };
            format!("{mode}{}: [{}]", r.name.name, expr(&r.chunks))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn chunk(c: &ChunkAst) -> String {
    format!("{}[{}] @ {}", c.role.name, expr(&c.index), expr(&c.rank))
}

fn simple(st: &Stmt) -> String {
    match &st.kind {
        StmtKind::Map { dst, op, src } => {
            let op = match op {
                UpdateOp::Add => "+=",
                UpdateOp::Set => "=",
            };
            format!("{} {op} {};", chunk(dst), chunk(src))
        }
        StmtKind::Scratch {
            name,
            chunks,
            size: sz,
            class,
        } => {
            let mut s = format!("scratch {}: [{}] ", name.name, expr(chunks));
            match sz {
                ScratchSize::Of(b) => s.push_str(&format!("of {}", b.name)),
                ScratchSize::Each(e) => s.push_str(&format!("each {}", size(e))),
            }
            match class {
                Some(ElemClassAst::Data) => s.push_str(" as data"),
                Some(ElemClassAst::Wire) => s.push_str(" as wire"),
                Some(ElemClassAst::Acc) => s.push_str(" as acc"),
                None => {}
            }
            s.push(';');
            s
        }
        StmtKind::Signals { decls, plural } => {
            let items: Vec<String> = decls
                .iter()
                .map(|(n, len)| match len {
                    None => n.name.clone(),
                    Some(e) => format!("{}[{}]", n.name, expr(e)),
                })
                .collect();
            format!(
                "{} {};",
                if *plural { "signals" } else { "signal" },
                items.join(", ")
            )
        }
        StmtKind::Group { name, kind, arg } => format!(
            "group {} = {}({});",
            name.name,
            match kind {
                GroupKind::Block => "block",
                GroupKind::Stride => "stride",
            },
            expr(arg)
        ),
        StmtKind::Require { cond } => format!("require {};", expr(cond)),
        StmtKind::Let { name, value } => format!("let {} = {};", name.name, expr(value)),
        StmtKind::Put {
            src,
            dst,
            peer,
            signal,
        } => {
            let mut s = format!("put {} -> {} @ {}", region(src), region(dst), expr(peer));
            if let Some(ps) = signal {
                s.push_str(&format!(", signal {}", signal_ref(&ps.signal)));
                if let Some(p) = &ps.peer {
                    s.push_str(&format!(" @ {}", expr(p)));
                }
                s.push_str(&format!(" {} {}", update(ps.op), expr(&ps.value)));
            }
            s.push(';');
            s
        }
        StmtKind::Get { src, peer, dst } => {
            format!("get {} @ {} -> {};", region(src), expr(peer), region(dst))
        }
        StmtKind::Signal {
            signal,
            peer,
            op,
            value,
        } => {
            format!(
                "signal {} @ {} {} {};",
                signal_ref(signal),
                expr(peer),
                update(*op),
                expr(value)
            )
        }
        StmtKind::Wait { signal, cmp, value } => format!(
            "wait {} {} {};",
            signal_ref(signal),
            cmp.text(),
            expr(value)
        ),
        StmtKind::Assign { dst, op } => {
            let rhs = match op {
                LocalOp::Reduce(rs) => format!(
                    "reduce({})",
                    rs.iter().map(region).collect::<Vec<_>>().join(", ")
                ),
                LocalOp::Copy(r) => format!("copy({})", region(r)),
                LocalOp::Cast(r) => format!("cast({})", region(r)),
            };
            format!("{} = {rhs};", region(dst))
        }
        StmtKind::Matmul { c, a, b } => format!(
            "compute {} = matmul({}, {});",
            region(c),
            region(a),
            region(b)
        ),
        StmtKind::HostColl {
            op,
            region: r,
            group,
        } => format!("hostcoll {}({}) over {};", op.name, region(r), group.name),
        StmtKind::Barrier => "barrier;".into(),
        StmtKind::Use {
            callee,
            args,
            group,
        } => {
            let a: Vec<String> = args
                .iter()
                .map(|a| {
                    let v = match &a.value {
                        UseValue::Region(r) => region(r),
                        UseValue::Expr(e) => expr(e),
                    };
                    format!("{} = {v}", a.name.name)
                })
                .collect();
            format!(
                "use {}({}) within {};",
                callee.name,
                a.join(", "),
                group.name
            )
        }
        // Compound statements are printed by the Printer.
        StmtKind::For { .. } | StmtKind::If { .. } | StmtKind::Channel { .. } => String::new(),
    }
}

/// Canonical text of an expression: spaces around binary operators, parentheses as written.
pub fn expr(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Int(v) => v.to_string(),
        ExprKind::Bool(b) => b.to_string(),
        ExprKind::Rank => "rank".into(),
        ExprKind::P => "P".into(),
        ExprKind::Name(n) => n.clone(),
        ExprKind::Unary(UnOp::Neg, x) => format!("-{}", expr(x)),
        ExprKind::Unary(UnOp::Not, x) => format!("!{}", expr(x)),
        ExprKind::Binary(op, a, b) => format!("{} {} {}", expr(a), op.text(), expr(b)),
        ExprKind::Min(a, b) => format!("min({}, {})", expr(a), expr(b)),
        ExprKind::Max(a, b) => format!("max({}, {})", expr(a), expr(b)),
        ExprKind::Log2(x) => format!("log2({})", expr(x)),
        ExprKind::IsPow2(x) => format!("is_pow2({})", expr(x)),
        ExprKind::Cond(arms, otherwise) => {
            let mut out = String::new();
            for (i, (c, v)) in arms.iter().enumerate() {
                if i > 0 {
                    out.push_str(" else ");
                }
                out.push_str(&format!("if {} {{ {} }}", expr(c), expr(v)));
            }
            out.push_str(&format!(" else {{ {} }}", expr(otherwise)));
            out
        }
        ExprKind::GroupAttr(g, GroupAttr::Rank) => format!("{}.rank", g.name),
        ExprKind::GroupAttr(g, GroupAttr::Size) => format!("{}.size", g.name),
        ExprKind::GroupMember(g, x) => format!("{}.member({})", g.name, expr(x)),
        ExprKind::Paren(x) => format!("({})", expr(x)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_spacing_and_keeps_comments() {
        let src = "// head\nschedule a implements allreduce(x:[1]){signal s; // trailing\n\n\n  for i in 0..P{signal s@i+=1;}\n/* end */ wait s>=P;}\n";
        let out = format_source("t", src).unwrap();
        assert_eq!(
            out,
            "// head\nschedule a implements allreduce(x: [1]) {\n    signal s;  // trailing\n\n    for i in 0..P {\n        signal s @ i += 1;\n    }\n    /* end */\n    wait s >= P;\n}\n"
        );
        assert_eq!(format_source("t", &out).unwrap(), out);
    }

    #[test]
    fn else_if_chains_and_long_headers() {
        let src = "schedule b(root in 0..P) implements broadcast(x: [1]) dual reduce_push(root = root), some_other_schedule_with_a_long_name {\nif rank==root{barrier;}else if rank>root{barrier;}else{barrier;}\n}";
        let out = format_source("t", src).unwrap();
        assert!(
            out.contains(
                "\n    dual reduce_push(root = root), some_other_schedule_with_a_long_name\n{\n"
            ),
            "{out}"
        );
        assert!(out.contains("    } else if rank > root {\n"), "{out}");
        assert_eq!(format_source("t", &out).unwrap(), out);
    }
}
