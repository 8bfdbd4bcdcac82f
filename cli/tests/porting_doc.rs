//! `docs/porting-from-mscclang.md` stays true: every `sched` block is verbatim in the file its
//! info string names, every `$ symsched …` command prints what the page shows, and every `diff`
//! block, applied to its file, is refused with the diagnostic shown in the `text` block after it.

use std::path::{Path, PathBuf};
use std::process::Output;

#[allow(dead_code)]
mod common;
use common::{symsched_in, text};

/// Kills `symsched run` if a rank hangs; the page's commands leave it at its default.
const RUN_TIMEOUT_SECS: &str = "120";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// A fenced block: its info string (after the backticks) and its lines.
struct Block {
    info: String,
    lines: Vec<String>,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    lines: Vec::new(),
                })
            }
            (Some(_), Some(_)) => out.push(open.take().expect("open")),
            (Some(block), None) => block.lines.push(line.to_string()),
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed fenced block");
    out
}

fn page() -> Vec<Block> {
    let page =
        std::fs::read_to_string(repo().join("docs/porting-from-mscclang.md")).expect("reads");
    blocks(&page)
}

/// `sched FILE` → FILE; `diff FILE ARGS…` → (FILE, ARGS).
fn info_args(info: &str, kind: &str) -> Option<Vec<String>> {
    let mut words = info.split_whitespace();
    (words.next() == Some(kind)).then(|| words.map(str::to_string).collect())
}

/// An expected line ending in `…` stands for any line that starts with what comes before it
/// (the timing columns of `run`).
fn assert_lines_match(command: &str, expected: &[String], actual: &str) {
    let actual: Vec<&str> = actual.lines().collect();
    assert_eq!(
        expected.len(),
        actual.len(),
        "`{command}` printed\n{}\nbut the page shows\n{}",
        actual.join("\n"),
        expected.join("\n")
    );
    for (want, got) in expected.iter().zip(&actual) {
        match want.strip_suffix('…') {
            Some(prefix) => assert!(got.starts_with(prefix), "`{command}`: {got:?} vs {want:?}"),
            None => assert_eq!(want, got, "`{command}`"),
        }
    }
}

/// Runs `symsched ARGS` in the workspace root, where the page's relative paths point.
fn symsched(args: &[&str]) -> Output {
    let mut args = args.to_vec();
    if args.first() == Some(&"run") {
        args.extend(["--timeout", RUN_TIMEOUT_SECS]);
    }
    symsched_in(&repo(), &args)
}

#[test]
fn schedules_on_the_page_are_the_files_they_name() {
    let mut seen = 0;
    for block in page() {
        let Some(args) = info_args(&block.info, "sched") else {
            continue;
        };
        let [file] = args.as_slice() else {
            panic!("`sched` block without exactly one file: {:?}", block.info);
        };
        let source = std::fs::read_to_string(repo().join(file)).expect("the named file reads");
        let shown = block.lines.join("\n");
        assert!(
            source.contains(&shown),
            "the block shown for {file} is not in it:\n{shown}"
        );
        seen += 1;
    }
    assert_eq!(seen, 4, "one schedule or declaration per block");
}

#[test]
fn commands_on_the_page_print_what_it_shows() {
    let mut commands = 0;
    for block in page().into_iter().filter(|b| b.info == "console") {
        let mut rest = block.lines.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            let command = first
                .strip_prefix("$ symsched ")
                .unwrap_or_else(|| panic!("a console block line that is no command: {first}"));
            let end = tail
                .iter()
                .position(|l| l.starts_with("$ "))
                .unwrap_or(tail.len());
            let (expected, next) = tail.split_at(end);
            let out = symsched(&command.split_whitespace().collect::<Vec<_>>());
            assert!(
                out.status.success(),
                "`{command}` failed:\n{}\n{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            assert_lines_match(command, expected, &text(&out.stdout));
            commands += 1;
            rest = next;
        }
    }
    assert_eq!(commands, 7);
}

/// Applies a diff of `-` lines (each present exactly once) optionally followed by `+` lines
/// that replace it.
fn apply(source: &str, diff: &[String]) -> String {
    let mut out = source.to_string();
    let mut i = 0;
    while i < diff.len() {
        let old = diff[i]
            .strip_prefix('-')
            .unwrap_or_else(|| panic!("a diff line that removes nothing: {}", diff[i]));
        let mut new = Vec::new();
        i += 1;
        while let Some(added) = diff.get(i).and_then(|l| l.strip_prefix('+')) {
            new.push(format!("{added}\n"));
            i += 1;
        }
        let old = format!("{old}\n");
        assert_eq!(out.matches(&old).count(), 1, "{old:?} is not there once");
        out = out.replacen(&old, &new.concat(), 1);
    }
    out
}

#[test]
fn mistakes_on_the_page_are_refused_as_shown() {
    let blocks = page();
    let mut refusals = 0;
    for (i, block) in blocks.iter().enumerate() {
        let Some(args) = info_args(&block.info, "diff") else {
            continue;
        };
        let (file, check_args) = args.split_first().expect("a diff block names its file");
        let shown = blocks
            .get(i + 1)
            .filter(|b| b.info == "text")
            .and_then(|b| b.lines.first())
            .expect("a `text` block with the refusal follows the diff");

        // `check` loads the file's sibling schedules, for `use` and duals: copy them all.
        let dir = tempfile::tempdir().expect("tempdir");
        let from = repo().join(file);
        for entry in std::fs::read_dir(from.parent().expect("a directory")).expect("lists") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "sched") {
                std::fs::copy(&path, dir.path().join(path.file_name().expect("a name")))
                    .expect("copies");
            }
        }
        let source = std::fs::read_to_string(&from).expect("reads");
        let target = dir.path().join(from.file_name().expect("a name"));
        std::fs::write(&target, apply(&source, &block.lines)).expect("writes");

        let mut argv = vec!["check", target.to_str().expect("utf-8")];
        argv.extend(check_args.iter().map(String::as_str));
        let out = symsched(&argv);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            !out.status.success(),
            "the mutant of {file} verified:\n{all}"
        );
        let first_error = all
            .lines()
            .find(|l| l.starts_with("error["))
            .unwrap_or_else(|| panic!("no error for the mutant of {file}:\n{all}"));
        assert_eq!(first_error, shown, "the mutant of {file}");
        refusals += 1;
    }
    assert_eq!(refusals, 3);
}
