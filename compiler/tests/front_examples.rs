//! Every example parses, resolves, and every schedule instantiates for the standard group
//! sizes and every binding of its params; the formatter is idempotent on every example.

use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::front::fmt::format_source;
use symsched_compiler::library::Library;

const SIZES: [u32; 7] = [1, 2, 3, 4, 5, 8, 16];

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sched"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn library() -> Library {
    let mut lib = Library::new();
    let mut failures = Vec::new();
    for path in examples() {
        if let Err(d) = lib.add_file(&path) {
            failures.push(symsched_compiler::diag::render_all(&d, lib.sources()));
        }
    }
    assert!(
        failures.is_empty(),
        "examples fail to parse:\n{}",
        failures.join("\n")
    );
    lib
}

#[test]
fn every_example_instantiates_for_every_size_and_binding() {
    let lib = library();
    assert!(!lib.schedules().is_empty(), "no examples found");
    let mut failures = Vec::new();
    for s in lib.schedules() {
        for p in SIZES {
            let space = match lib.param_space(&s.name, p, &BTreeMap::new()) {
                Ok(space) => space,
                Err(d) => {
                    failures.push(format!(
                        "{} P={p}: {}",
                        s.name,
                        symsched_compiler::diag::render_all(&d, lib.sources())
                    ));
                    continue;
                }
            };
            for binding in space {
                if let Err(d) = lib.instantiate(&s.name, p, &binding) {
                    failures.push(format!(
                        "{} P={p} {binding:?}:\n{}",
                        s.name,
                        symsched_compiler::diag::render_all(&d, lib.sources())
                    ));
                    break;
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn formatter_is_idempotent_on_examples() {
    for path in examples() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        let once = format_source(&name, &text).unwrap_or_else(|d| panic!("{name}: {d:?}"));
        let twice = format_source(&name, &once)
            .unwrap_or_else(|d| panic!("{name} (formatted): {d:?}\n{once}"));
        assert_eq!(once, twice, "{name}: format is not idempotent");
        // Formatting keeps the meaning: the formatted text defines the same schedules.
        let mut a = Library::new();
        a.add_source(&name, &text).unwrap();
        let mut b = Library::new();
        b.add_source(&name, &once)
            .unwrap_or_else(|d| panic!("{name}: formatted text fails: {d:?}\n{once}"));
        let names = |l: &Library| {
            l.schedules()
                .into_iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&a), names(&b));
        // Every comment survives.
        let comments = |t: &str| t.lines().filter(|l| l.contains("//")).count();
        assert_eq!(
            comments(&text),
            comments(&once),
            "{name}: a comment was lost\n{once}"
        );
    }
}
