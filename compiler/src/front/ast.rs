//! The typed syntax tree of a `.sched` file, with a source span on every node.
//!
//! The tree is exactly what was written (no desugaring) so the formatter can print it back;
//! name resolution ([`super::resolve`]) and instantiation work on it directly.

use crate::diag::Span;

/// A name as written, with its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// One parsed source file.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    pub schedules: Vec<Schedule>,
    /// `collective NAME(…)(…) { … }` declarations, in source order.
    pub collectives: Vec<CollectiveDecl>,
}

/// `collective NAME(PARAMS) (ROLES) { ITEMS }`: a collective declared by its chunk map. The
/// items are `let`, `for`, `if` and [`StmtKind::Map`] statements (the resolver refuses others).
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveDecl {
    pub name: Ident,
    pub params: Vec<Param>,
    pub has_param_parens: bool,
    pub roles: Vec<RoleDecl>,
    pub items: Vec<Stmt>,
    /// From `collective` to the `)` closing the role list.
    pub header_span: Span,
    pub span: Span,
    pub body_open: u32,
    pub close_brace: u32,
}

/// `ROLE[INDEX] @ RANK`: one block of a role on one rank, in a chunk map.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkAst {
    pub role: Ident,
    pub index: Expr,
    pub rank: Expr,
    pub span: Span,
}

/// `schedule NAME(PARAMS) implements COLL(ROLES) [over nodes(L)] [dual …] { ITEMS }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub name: Ident,
    pub params: Vec<Param>,
    /// Whether the parameter list was written with parentheses (kept by the formatter).
    pub has_param_parens: bool,
    pub collective: Ident,
    pub roles: Vec<RoleDecl>,
    pub over_nodes: Option<Expr>,
    pub duals: Vec<Dual>,
    pub items: Vec<Stmt>,
    /// From `schedule` to the `)` closing the role list.
    pub header_span: Span,
    /// The whole schedule, braces included.
    pub span: Span,
    /// Offset of the opening brace of the body.
    pub body_open: u32,
    /// Offset of the closing brace (comments before it belong inside the body).
    pub close_brace: u32,
}

/// `NAME in RANGE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub range: ParamRange,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ParamRange {
    /// `a..b`: a, a+1, …, b-1.
    Span(Expr, Expr),
    /// `divisors(e)`: the positive divisors of e, ascending.
    Divisors(Expr),
}

/// `[inout] NAME: [K]` — one role of the collective, K chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleDecl {
    pub name: Ident,
    pub chunks: Expr,
    /// Written `inout`: the schedule may overwrite this input role.
    pub inout: bool,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Dual {
    /// `identity WORDS…`; valid only when WORDS are exactly `assuming replicated` (checked by
    /// the resolver so a misspelling gets a precise diagnostic).
    Identity { words: Vec<Ident>, span: Span },
    /// `derived`: the compiler builds the backward schedule by transposing this one
    /// (`crate::ir::transpose`).
    Derived { span: Span },
    /// `NAME` or `NAME(param = EXPR, …)`.
    Named {
        name: Ident,
        args: Vec<(Ident, Expr)>,
        has_parens: bool,
        span: Span,
    },
}

impl Dual {
    pub fn span(&self) -> Span {
        match self {
            Dual::Identity { span, .. } | Dual::Derived { span } | Dual::Named { span, .. } => {
                *span
            }
        }
    }
}

/// Element class of a scratch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemClassAst {
    Data,
    Wire,
    Acc,
}

/// Chunk capacity of a scratch buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum ScratchSize {
    /// `of BUF`: one chunk of BUF.
    Of(Ident),
    /// `each SIZE`.
    Each(SizeAst),
}

/// A size expression: sums of products of integers, `P`, params and size variables.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeAst {
    Int(i64, Span),
    P(Span),
    Name(Ident),
    Add(Box<SizeAst>, Box<SizeAst>),
    Mul(Box<SizeAst>, Box<SizeAst>),
    Paren(Box<SizeAst>, Span),
}

impl SizeAst {
    pub fn span(&self) -> Span {
        match self {
            SizeAst::Int(_, s) | SizeAst::P(s) | SizeAst::Paren(_, s) => *s,
            SizeAst::Name(i) => i.span,
            SizeAst::Add(a, b) | SizeAst::Mul(a, b) => a.span().join(b.span()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupKind {
    Block,
    Stride,
}

/// How a statement updates a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOp {
    Add,
    Set,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn text(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// `BUF`, `BUF[e]` or `BUF[a..b]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionAst {
    pub buffer: Ident,
    pub index: Option<IndexAst>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum IndexAst {
    One(Expr),
    Range(Expr, Expr),
}

/// `SIG` or `SIG[e]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalRef {
    pub name: Ident,
    pub index: Option<Expr>,
    pub span: Span,
}

/// The signal part of a put-with-signal.
#[derive(Debug, Clone, PartialEq)]
pub struct PutSignal {
    pub signal: SignalRef,
    /// Written `@ PEER`; must evaluate to the put's peer.
    pub peer: Option<Expr>,
    pub op: UpdateOp,
    pub value: Expr,
    pub span: Span,
}

/// A `use` argument value: a region for a role, an integer for a callee param. A bare name is
/// parsed as a region and reinterpreted by the resolver when it binds a param.
#[derive(Debug, Clone, PartialEq)]
pub enum UseValue {
    Region(RegionAst),
    Expr(Expr),
}

#[derive(Debug, Clone, PartialEq)]
pub struct UseArg {
    pub name: Ident,
    pub value: UseValue,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LocalOp {
    Reduce(Vec<RegionAst>),
    Copy(RegionAst),
    Cast(RegionAst),
}

/// A declaration or statement; declarations only appear at the top level of a schedule body.
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    Scratch {
        name: Ident,
        chunks: Expr,
        size: ScratchSize,
        class: Option<ElemClassAst>,
    },
    /// `signal NAME[;|[K];]` or `signals a, b[K], …;` (`plural` keeps the spelling).
    Signals {
        decls: Vec<(Ident, Option<Expr>)>,
        plural: bool,
    },
    Group {
        name: Ident,
        kind: GroupKind,
        arg: Expr,
    },
    /// `require COND;`: a condition on P and the params (a declaration, checked once per
    /// instantiation).
    Require {
        cond: Expr,
    },
    Let {
        name: Ident,
        value: Expr,
    },
    For {
        var: Ident,
        from: Expr,
        to: Expr,
        body: Block,
    },
    /// `if C { … } else if C { … } … else { … }`: the first arm whose condition holds runs.
    If {
        arms: Vec<(Expr, Block)>,
        otherwise: Option<Block>,
    },
    /// `channel C { … }`: the body's steps run on channel C of the rank.
    Channel {
        channel: Expr,
        body: Block,
    },
    Put {
        src: RegionAst,
        dst: RegionAst,
        peer: Expr,
        signal: Option<PutSignal>,
    },
    Get {
        src: RegionAst,
        peer: Expr,
        dst: RegionAst,
    },
    Signal {
        signal: SignalRef,
        peer: Expr,
        op: UpdateOp,
        value: Expr,
    },
    Wait {
        signal: SignalRef,
        cmp: CmpOp,
        value: Expr,
    },
    Assign {
        dst: RegionAst,
        op: LocalOp,
    },
    Matmul {
        c: RegionAst,
        a: RegionAst,
        b: RegionAst,
    },
    HostColl {
        op: Ident,
        region: RegionAst,
        group: Ident,
    },
    Barrier,
    /// `DST = SRC;` (DST holds SRC after the call) or `DST += SRC;` (SRC is one more operand of
    /// DST's reduction); only in a collective declaration.
    Map {
        dst: ChunkAst,
        op: UpdateOp,
        src: ChunkAst,
    },
    Use {
        callee: Ident,
        args: Vec<UseArg>,
        group: Ident,
    },
}

/// `{ stmt* }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    /// `**`: integer power, exponent >= 0.
    Pow,
    /// `^`: bitwise exclusive or.
    Xor,
    /// `<<`, `>>`: shifts by 0..=62 bits (`>>` rounds toward minus infinity).
    Shl,
    Shr,
    And,
    Or,
    Cmp(CmpOp),
}

impl BinOp {
    pub fn text(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
            BinOp::Xor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::Cmp(c) => c.text(),
        }
    }

    /// Binding strength; higher binds tighter.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Cmp(_) => 3,
            BinOp::Xor => 4,
            BinOp::Shl | BinOp::Shr => 5,
            BinOp::Add | BinOp::Sub => 6,
            BinOp::Mul | BinOp::Div | BinOp::Mod => 7,
            BinOp::Pow => 8,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupAttr {
    Rank,
    Size,
}

/// An integer or boolean expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    Int(i64),
    Bool(bool),
    Rank,
    P,
    Name(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Min(Box<Expr>, Box<Expr>),
    Max(Box<Expr>, Box<Expr>),
    /// `log2(e)`: the floor of the base-2 logarithm of a positive integer.
    Log2(Box<Expr>),
    /// `is_pow2(e)`: whether e is a positive power of two.
    IsPow2(Box<Expr>),
    /// `if c1 { a } else if c2 { b } else { z }`: the arms in order, then the `else` value.
    Cond(Vec<(Expr, Expr)>, Box<Expr>),
    GroupAttr(Ident, GroupAttr),
    GroupMember(Ident, Box<Expr>),
    Paren(Box<Expr>),
}
