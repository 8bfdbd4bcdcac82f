//! Parser robustness: on arbitrary input and on mutations of the examples, `add_source` never
//! panics, and every failure carries a diagnostic with a code and a span inside the text.
//! Accepted mutants are also instantiated (P = 4, first binding) and formatted, which must not
//! panic either; formatting an accepted text must be idempotent.

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::front::fmt::format_source;
use symsched_compiler::library::Library;

fn example_texts() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut v: Vec<(PathBuf, String)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sched"))
                .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    let mut texts: Vec<String> = v.into_iter().map(|(_, t)| t).collect();
    // A built-in sample so the mutation test has input even without examples.
    texts.push(
        "schedule ag(root in 0..P) implements allgather(in: [1], out: [P]) dual identity assuming replicated {\n    signal done;\n    scratch t: [P] each n as wire;\n    group g = block(2);\n    for p in 0..P {\n        put in -> out[rank] @ p, signal done @ p += 1;\n    }\n    if rank % 2 == 0 { barrier; } else { wait done >= g.size; }\n    wait done >= P;\n}\n"
            .to_string(),
    );
    texts
}

/// Add one text; check the failure contract; on success, instantiate and format.
fn check(text: &str) -> Result<(), TestCaseError> {
    let mut lib = Library::new();
    match lib.add_source("fuzz.sched", text) {
        Err(diags) => {
            prop_assert!(!diags.is_empty(), "failure without a diagnostic");
            for d in &diags {
                prop_assert!(
                    d.code.starts_with('E') && d.code.len() == 5,
                    "bad code {}",
                    d.code
                );
                let s = d.span();
                prop_assert!(s.is_some(), "{} has no span", d.code);
                let s = s.unwrap();
                prop_assert!(
                    s.start <= s.end && (s.end as usize) <= text.len(),
                    "span {s:?} outside text"
                );
                prop_assert!(
                    text.is_char_boundary(s.start as usize)
                        && text.is_char_boundary(s.end as usize)
                );
                // Rendering never panics either.
                let _ = d.render(lib.sources());
            }
        }
        Ok(_) => {
            for s in lib.schedules() {
                if let Ok(space) = lib.param_space(&s.name, 4, &BTreeMap::new()) {
                    if let Some(b) = space.first() {
                        if let Err(diags) = lib.instantiate(&s.name, 4, b) {
                            for d in &diags {
                                prop_assert!(!d.code.is_empty());
                                if let Some(sp) = d.span() {
                                    prop_assert!((sp.end as usize) <= text.len());
                                }
                            }
                        }
                    }
                }
            }
            let once = format_source("fuzz.sched", text);
            prop_assert!(once.is_ok(), "accepted text fails to format");
            let once = once.unwrap();
            let twice = format_source("fuzz.sched", &once);
            prop_assert!(twice.is_ok(), "formatted text fails to parse:\n{once}");
            prop_assert_eq!(&once, &twice.unwrap());
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, String),
    Swap(usize, usize),
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(";".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("[".to_string()),
        Just("..".to_string()),
        Just("@".to_string()),
        Just("->".to_string()),
        Just("/*".to_string()),
        Just("//".to_string()),
        Just(" rank ".to_string()),
        Just(" P ".to_string()),
        Just("0".to_string()),
        Just("99999999999999999999".to_string()),
        Just("-".to_string()),
        Just(" / 0".to_string()),
        Just("signal ".to_string()),
        Just("é".to_string()),
        "[ -~]{1,4}",
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..8).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), token()).prop_map(|(a, t)| Mutation::Insert(a, t)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
    ]
}

/// Apply a mutation at byte positions snapped to char boundaries.
fn apply(text: &str, m: &Mutation) -> String {
    let snap = |i: usize| {
        let mut i = i % (text.len() + 1);
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match m {
        Mutation::Delete(a, n) => {
            let a = snap(*a);
            let b = snap((a + n).min(text.len()));
            let b = b.max(a);
            format!("{}{}", &text[..a], &text[b..])
        }
        Mutation::Insert(a, t) => {
            let a = snap(*a);
            format!("{}{t}{}", &text[..a], &text[a..])
        }
        Mutation::Swap(a, b) => {
            let mut bytes: Vec<char> = text.chars().collect();
            if bytes.len() > 1 {
                let (i, j) = (a % bytes.len(), b % bytes.len());
                bytes.swap(i, j);
            }
            bytes.into_iter().collect()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,200}") {
        check(&s)?;
    }

    #[test]
    fn token_soup_never_panics(parts in proptest::collection::vec(token(), 0..40)) {
        check(&parts.concat())?;
    }

    #[test]
    fn mutated_examples_never_panic(
        pick in any::<usize>(),
        muts in proptest::collection::vec(mutation(), 1..4),
    ) {
        let texts = example_texts();
        let mut t = texts[pick % texts.len()].clone();
        for m in &muts {
            t = apply(&t, m);
        }
        check(&t)?;
    }
}
