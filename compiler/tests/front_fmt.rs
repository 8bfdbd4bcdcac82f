//! Formatter properties on generated programs: idempotent, keeps every comment, insensitive to
//! the original whitespace, and the formatted text still parses to the same schedules.

use proptest::prelude::*;
use symsched_compiler::front::fmt::format_source;
use symsched_compiler::library::Library;

fn simple_stmt() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(
            "put x[rank] -> land[rank] @ (rank + 1) % P, signal s @ (rank + 1) % P += 1;"
                .to_string()
        ),
        Just("put x -> land[0] @ 0;".to_string()),
        Just("get x @ P - 1 -> land[rank];".to_string()),
        Just("signal s @ rank += 1;".to_string()),
        Just("wait s >= P - 1;".to_string()),
        Just("wait s != 0;".to_string()),
        Just("x = reduce(x, land[0..rank], land[rank + 1..P]);".to_string()),
        Just("land[rank] = copy(x);".to_string()),
        Just("land[0] = cast(x);".to_string()),
        Just("hostcoll allreduce(x) over g;".to_string()),
        Just("barrier;".to_string()),
        Just("wait s >= max(-rank, 0) * 2 / (1 + 1) % 3;".to_string()),
        Just("{ let q = min(rank, P - 1); }".replace("{ ", "if true { ")),
        Just("if true { let h = -2 ** log2(P) ** 2 + (rank ^ 1) * (1 << 3 >> 1); }".to_string()),
        Just(
            "if true { let c = if is_pow2(P) { P >> 1 } else if P > 2 { 1 } else { 0 }; }"
                .to_string()
        ),
    ]
}

fn stmt(depth: u32) -> BoxedStrategy<String> {
    let leaf = simple_stmt().boxed();
    if depth == 0 {
        return leaf;
    }
    let inner = proptest::collection::vec(stmt(depth - 1), 0..3);
    prop_oneof![
        3 => leaf,
        1 => inner.clone().prop_map(|b| format!("for i in 0..P {{ {} }}", b.join(" "))),
        1 => (inner.clone(), inner).prop_map(|(a, b)| format!(
            "if rank == 0 || !(g.rank < g.size) {{ {} }} else {{ {} }}",
            a.join(" "),
            b.join(" ")
        )),
    ]
    .boxed()
}

const HEADER: &str = "schedule a implements allreduce(x: [1]) dual identity assuming replicated {";

/// A schedule body (the header is fixed: the formatter keeps an author's line break before
/// `dual`, which is not whitespace-insensitive on purpose).
fn body() -> impl Strategy<Value = String> {
    proptest::collection::vec(stmt(2), 0..6).prop_map(|body| {
        format!(
            " scratch land: [P] of x as wire; signals s; group g = block(2); require P >= 1; {} }}",
            body.join(" ")
        )
    })
}

/// Blank lines are kept (at most one) by design; compare without them.
fn without_blank_lines(t: &str) -> String {
    t.lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Replace each single space by random whitespace (spaces, tabs, newlines) and sprinkle comments.
fn reshape(text: &str, noise: &[u8], comments: bool) -> String {
    let mut out = String::new();
    let mut k = 0usize;
    for c in text.chars() {
        if c == ' ' {
            let n = noise.get(k % noise.len().max(1)).copied().unwrap_or(0);
            k += 1;
            out.push_str(match n % 5 {
                0 => " ",
                1 => "  ",
                2 => "\n",
                3 => "\t ",
                _ => "\n\n   ",
            });
            if comments && n >= 232 {
                out.push_str("/* c */ ");
            }
        } else {
            out.push(c);
            if comments && c == ';' && k % 3 == 2 {
                out.push_str(" // trailing\n");
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn formatting_ignores_whitespace_and_is_idempotent(b in body(), noise in proptest::collection::vec(any::<u8>(), 1..64)) {
        let p = format!("{HEADER}{b}");
        let canon = format_source("a", &p).expect("generated program parses");
        let shaken = format!("{HEADER}{}", reshape(&b, &noise, false));
        let f = format_source("a", &shaken).expect("reshaped program parses");
        prop_assert_eq!(without_blank_lines(&f), without_blank_lines(&canon));
        prop_assert!(!f.contains("\n\n\n"), "more than one blank line:\n{}", f);
        prop_assert_eq!(format_source("a", &f).unwrap(), f.clone());
        let mut lib = Library::new();
        prop_assert!(lib.add_source("a", &f).is_ok(), "formatted program does not resolve:\n{}", f);
    }

    #[test]
    fn formatting_keeps_comments_and_is_idempotent(b in body(), noise in proptest::collection::vec(any::<u8>(), 1..64)) {
        let text = reshape(&format!("{HEADER}{b}"), &noise, true);
        let once = format_source("a", &text).expect("commented program parses");
        let count = |t: &str, pat: &str| t.matches(pat).count();
        prop_assert_eq!(count(&text, "/* c */"), count(&once, "/* c */"));
        prop_assert_eq!(count(&text, "// trailing"), count(&once, "// trailing"));
        let twice = format_source("a", &once).unwrap();
        prop_assert_eq!(&twice, &once);
    }
}

/// Long `else if` chains are a repetition, not a recursion: no stack is exhausted anywhere.
#[test]
fn long_else_if_chains_parse_instantiate_and_format() {
    let mut text = String::from("schedule a implements allreduce(x: [1]) {\n    signal s;\n    if rank == 0 {\n        barrier;\n    }");
    for i in 1..5000 {
        text.push_str(&format!(
            " else if rank == {i} {{\n        signal s @ 0 += 1;\n    }}"
        ));
    }
    text.push_str(" else {\n        barrier;\n    }\n}\n");
    let mut lib = Library::new();
    lib.add_source("a", &text).unwrap();
    let prog = lib.instantiate("a", 4, &Default::default()).unwrap();
    assert_eq!(prog.ranks.len(), 4);
    let once = format_source("a", &text).unwrap();
    assert_eq!(once, text);
}

/// Thousands of operators in one expression are refused, not a stack overflow.
#[test]
fn huge_expressions_are_refused() {
    for body in [
        "-".repeat(20000) + "1",
        vec!["1"; 20000].join(" + "),
        "!".repeat(20000) + "true",
    ] {
        let text = format!("schedule a implements allreduce(x: [1]) {{\n    let y = {body};\n}}\n");
        let mut lib = Library::new();
        let e = lib.add_source("a", &text).unwrap_err();
        assert_eq!(e[0].code, "E0104");
    }
}
