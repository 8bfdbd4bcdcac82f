//! Every standard schedule in `examples/` verifies (with its duals) for P ∈ {1, 2, 3, 4, 5, 8, 16}
//! and every binding of its params.

use std::collections::BTreeMap;
use std::path::PathBuf;
use symsched_compiler::diag::render_all;
use symsched_compiler::library::Library;
use symsched_compiler::verify;

pub fn examples_library() -> Library {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/ exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sched"))
        .collect();
    files.sort();
    let mut lib = Library::new();
    for f in &files {
        if let Err(d) = lib.add_file(f) {
            panic!("{}", render_all(&d, lib.sources()));
        }
    }
    lib
}

#[test]
fn every_example_verifies_at_every_group_size() {
    let lib = examples_library();
    let mut failures = Vec::new();
    let mut checked = 0;
    for s in lib.schedules() {
        for p in [1u32, 2, 3, 4, 5, 8, 16] {
            let space = match lib.param_space(&s.name, p, &BTreeMap::new()) {
                Ok(space) => space,
                Err(d) => {
                    failures.push(format!(
                        "{} P={p}: {}",
                        s.name,
                        render_all(&d, lib.sources())
                    ));
                    continue;
                }
            };
            for params in space {
                checked += 1;
                if let Err(d) = verify::check(&lib, &s.name, p, &params) {
                    failures.push(format!(
                        "{} P={p} {params:?}:\n{}",
                        s.name,
                        render_all(&d[..d.len().min(2)], lib.sources())
                    ));
                }
            }
        }
    }
    assert!(checked > 0, "no schedule was checked");
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
