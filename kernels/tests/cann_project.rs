//! The CANN build project written beside every generated kernel (`CMakeLists.txt`) is
//! well-formed, since no CANN toolchain runs here: it parses as CMake (command invocations with
//! quoted, bracket and unquoted arguments, comments), it declares the documented Ascend C layout
//! (`find_package(ASC)`, `project(<kernel> LANGUAGES ASC CXX)`, the sources set to LANGUAGE ASC,
//! `--npu-arch`), every source and header it names is a generated file, every file the stub
//! includes (transitively) is generated or a CANN header, and one target name is used
//! throughout. Checked for every standard schedule at P = 4, f32 and bf16 wire.

mod common;
use std::collections::{BTreeMap, BTreeSet};
use symsched_kernels::{lower, DType, LowerOptions, Lowered, ReduceOp};

/// One command invocation: name (lower case, as CMake compares them) and its arguments.
#[derive(Debug)]
struct Command {
    name: String,
    args: Vec<String>,
    line: usize,
}

/// Parse CMake source into command invocations (the grammar of cmake-language(7): commands
/// `ident(args)`, arguments quoted `"…"` with escapes, bracket `[[…]]`, or unquoted with
/// balanced parentheses; `#` line comments and `#[[…]]` bracket comments).
fn parse_cmake(src: &str) -> Result<Vec<Command>, String> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut out = vec![];
    let skip_bracket = |i: &mut usize, line: &mut usize| -> Result<bool, String> {
        // At `[`: `[=*[` … `]=*]`.
        let start = *i;
        let mut j = *i + 1;
        while j < b.len() && b[j] == b'=' {
            j += 1;
        }
        if j >= b.len() || b[j] != b'[' {
            return Ok(false);
        }
        let close = format!("]{}]", "=".repeat(j - start - 1));
        let rest = &src[j + 1..];
        let end = rest
            .find(&close)
            .ok_or(format!("line {line}: unterminated bracket"))?;
        *line += rest[..end].matches('\n').count();
        *i = j + 1 + end + close.len();
        Ok(true)
    };
    // Whitespace, a line comment or a bracket comment at `i`: skipped, true; else false.
    let skip_blank = |i: &mut usize, line: &mut usize| -> Result<bool, String> {
        match b[*i] {
            b'\n' => {
                *line += 1;
                *i += 1;
            }
            c if c.is_ascii_whitespace() => *i += 1,
            b'#' => {
                *i += 1;
                if *i < b.len() && b[*i] == b'[' && skip_bracket(i, line)? {
                    return Ok(true);
                }
                while *i < b.len() && b[*i] != b'\n' {
                    *i += 1;
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    };
    while i < b.len() {
        if skip_blank(&mut i, &mut line)? {
            continue;
        }
        match b[i] {
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let at = line;
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let name = src[s..i].to_ascii_lowercase();
                while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                    i += 1;
                }
                if i >= b.len() || b[i] != b'(' {
                    return Err(format!("line {at}: `{name}` is not followed by `(`"));
                }
                i += 1;
                let mut args = vec![];
                let mut depth = 0usize;
                loop {
                    if i >= b.len() {
                        return Err(format!("line {at}: `{name}(` is not closed"));
                    }
                    if skip_blank(&mut i, &mut line)? {
                        continue;
                    }
                    match b[i] {
                        b')' if depth == 0 => {
                            i += 1;
                            break;
                        }
                        b'"' => {
                            let mut v = String::new();
                            i += 1;
                            loop {
                                match b.get(i) {
                                    None => return Err(format!("line {line}: unterminated quote")),
                                    Some(b'"') => break,
                                    Some(b'\\') => {
                                        v.push(*b.get(i + 1).ok_or("dangling escape")? as char);
                                        i += 2;
                                    }
                                    Some(&c) => {
                                        if c == b'\n' {
                                            line += 1;
                                        }
                                        v.push(c as char);
                                        i += 1;
                                    }
                                }
                            }
                            i += 1;
                            args.push(v);
                        }
                        _ => {
                            let s = i;
                            if b[i] == b'[' {
                                let mut t = i;
                                if skip_bracket(&mut t, &mut line)? {
                                    args.push(src[s..t].to_string());
                                    i = t;
                                    continue;
                                }
                            }
                            while i < b.len() {
                                match b[i] {
                                    b'(' => depth += 1,
                                    b')' if depth == 0 => break,
                                    b')' => depth -= 1,
                                    c if c.is_ascii_whitespace() && depth == 0 => break,
                                    b'"' | b'#' if depth == 0 => break,
                                    _ => {}
                                }
                                i += 1;
                            }
                            args.push(src[s..i].to_string());
                        }
                    }
                }
                out.push(Command {
                    name,
                    args,
                    line: at,
                });
            }
            c => return Err(format!("line {line}: unexpected `{}`", c as char)),
        }
    }
    Ok(out)
}

/// Files a CANN installation provides (the stub and kernel include them by these names).
const CANN_HEADERS: [&str; 4] = ["acl/acl.h", "kernel_operator.h", "shmem.h", "hccl/hccl.h"];

fn includes(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("#include \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect()
}

/// Every problem with `l`'s project, empty when it is well-formed.
fn check_project(l: &Lowered) -> Vec<String> {
    let mut bad = vec![];
    let files: BTreeMap<String, &str> = l.project_files().into_iter().collect();
    let Some(cmake) = files.get("CMakeLists.txt") else {
        return vec!["no CMakeLists.txt in the project".into()];
    };
    let cmds = match parse_cmake(cmake) {
        Ok(c) => c,
        Err(e) => return vec![format!("CMakeLists.txt does not parse: {e}")],
    };
    let by = |n: &'static str| cmds.iter().filter(move |c| c.name == n);
    if cmds.first().map(|c| c.name.as_str()) != Some("cmake_minimum_required") {
        bad.push("cmake_minimum_required is not the first command".into());
    }
    if !by("find_package").any(|c| c.args.first().map(String::as_str) == Some("ASC")) {
        bad.push("no find_package(ASC)".into());
    }
    match by("project").next() {
        Some(p) if p.args.first() == Some(&l.name) => {
            let langs: BTreeSet<&str> = p.args.iter().skip(2).map(String::as_str).collect();
            if p.args.get(1).map(String::as_str) != Some("LANGUAGES")
                || !langs.contains("ASC")
                || !langs.contains("CXX")
            {
                bad.push(format!("project() languages are {:?}", p.args));
            }
        }
        other => bad.push(format!("project() is not named {}: {other:?}", l.name)),
    }
    // The one target, its sources, and the ASC language of each source.
    let libs: Vec<&Command> = by("add_library").collect();
    if libs.len() != 1 || libs[0].args.first() != Some(&l.name) {
        bad.push(format!(
            "expected one add_library({} …), got {libs:?}",
            l.name
        ));
        return bad;
    }
    let sources: Vec<&String> = libs[0].args.iter().skip(2).collect();
    if libs[0].args.get(1).map(String::as_str) != Some("SHARED") || sources.is_empty() {
        bad.push(format!(
            "add_library is not a SHARED library of sources: {:?}",
            libs[0]
        ));
    }
    let asc: BTreeSet<&String> = by("set_source_files_properties")
        .filter(|c| {
            c.args
                .windows(3)
                .any(|w| w[0] == "PROPERTIES" && w[1] == "LANGUAGE" && w[2] == "ASC")
        })
        .flat_map(|c| c.args.iter().take_while(|a| *a != "PROPERTIES"))
        .collect();
    for s in &sources {
        if !files.contains_key(s.as_str()) {
            bad.push(format!("source {s} is not a generated file"));
        }
        if !asc.contains(s) {
            bad.push(format!("source {s} is not compiled as LANGUAGE ASC"));
        }
    }
    for c in &cmds {
        let targets = c.name.starts_with("target_") || c.name == "set_target_properties";
        if targets && c.args.first() != Some(&l.name) {
            bad.push(format!(
                "line {}: {} names target {:?}",
                c.line,
                c.name,
                c.args.first()
            ));
        }
        if c.name == "install" && !c.args.contains(&l.name) {
            bad.push(format!("line {}: install() of another target", c.line));
        }
    }
    if !by("target_compile_options").any(|c| c.args.iter().any(|a| a.contains("--npu-arch="))) {
        bad.push("no --npu-arch for the ASC sources".into());
    }
    let header = format!("{}.h", l.name);
    if !by("set_target_properties").any(|c| c.args.contains(&header))
        || !files.contains_key(&header)
    {
        bad.push(format!(
            "the public header {header} is not declared or not generated"
        ));
    }
    // Everything the compiled sources include, transitively, is generated or CANN's.
    let mut todo: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    let mut seen = BTreeSet::new();
    let mut cann = BTreeSet::new();
    while let Some(f) = todo.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        let Some(text) = files.get(&f) else {
            continue; // a source that is not generated, reported above
        };
        for inc in includes(text) {
            if CANN_HEADERS.contains(&inc.as_str()) {
                cann.insert(inc);
            } else if files.contains_key(&inc) {
                todo.push(inc);
            } else {
                bad.push(format!(
                    "{f} includes {inc}, which is neither generated nor CANN's"
                ));
            }
        }
    }
    for part in [
        format!("{}_kernel.cpp", l.name),
        format!("{}_table.h", l.name),
        header.clone(),
    ] {
        if !seen.contains(&part) {
            bad.push(format!(
                "{part} is not part of the build (not included by a source)"
            ));
        }
    }
    // The libraries follow from what the sources use.
    let linked: BTreeSet<&str> = by("target_link_libraries")
        .flat_map(|c| c.args.iter().skip(2).map(String::as_str))
        .collect();
    for (lib, needed) in [
        ("ascendcl", true),
        ("shmem", cann.contains("shmem.h")),
        ("hccl", cann.contains("hccl/hccl.h")),
    ] {
        if linked.contains(lib) != needed {
            bad.push(format!(
                "links {lib}: {}, uses it: {needed}",
                linked.contains(lib)
            ));
        }
    }
    bad
}

#[test]
fn the_cann_project_of_every_standard_schedule_is_well_formed() {
    let mut bad = vec![];
    let mut n = 0;
    let mut hccl = 0;
    for plan in common::standard_plans(4) {
        for wire in [DType::F32, DType::Bf16] {
            let o = LowerOptions {
                dtype: DType::F32,
                wire,
                op: ReduceOp::Sum,
                ..LowerOptions::default()
            };
            let Ok(l) = lower(&plan, &o) else { continue };
            n += 1;
            hccl += l.cmake.contains("hccl") as usize;
            bad.extend(
                check_project(&l)
                    .into_iter()
                    .map(|e| format!("{}: {e}", l.name)),
            );
        }
    }
    assert!(n >= 2 * 21, "{n} projects checked");
    assert!(hccl > 0, "some project links HCCL (host collectives)");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The checker is not vacuous: a project naming a source that is not generated, a wrong target,
/// or an unbalanced command is reported.
#[test]
fn a_broken_project_is_reported() {
    let plan = common::standard_plans(2)
        .into_iter()
        .find(|p| p.schedule == "allgather_push")
        .unwrap();
    let l = lower(&plan, &LowerOptions::default()).unwrap();
    assert!(check_project(&l).is_empty(), "{:?}", check_project(&l));
    let launch = format!("{}_launch.cpp", l.name);
    for (from, to, want) in [
        (
            format!("    {launch}\n)"),
            format!("    {launch}\n    extra.cpp\n)"),
            "extra.cpp is not a generated file",
        ),
        (
            format!("target_link_libraries({} PRIVATE", l.name),
            "target_link_libraries(other PRIVATE".to_string(),
            "names target",
        ),
        (
            "cmake_minimum_required(VERSION 3.16)".to_string(),
            "cmake_minimum_required(VERSION 3.16".to_string(),
            "does not parse",
        ),
    ] {
        let mut broken = l.clone();
        assert!(
            broken.cmake.contains(&from),
            "{from} in the generated CMake"
        );
        broken.cmake = broken.cmake.replace(&from, &to);
        let errs = check_project(&broken);
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "expected `{want}` in {errs:?}"
        );
    }
}

/// Snapshots of the generated CMake for a vector-only kernel, a kernel with host collectives
/// (links HCCL) and a matmul kernel, under snapshots/ascendc/.
#[test]
fn cmake_snapshots() {
    for (schedule, file) in [
        ("allreduce_two_shot", "cmake_allreduce_two_shot_p4"),
        ("allreduce_hier", "cmake_allreduce_hier_p4"),
        ("allgather_matmul", "cmake_allgather_matmul_p4"),
    ] {
        let plan = common::standard_plans(4)
            .into_iter()
            .find(|p| p.schedule == schedule)
            .unwrap();
        let l = lower(&plan, &LowerOptions::default()).unwrap();
        insta::with_settings!({
            snapshot_path => "../../snapshots/ascendc",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(file, l.cmake);
        });
    }
}
