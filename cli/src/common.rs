//! Helpers shared by the subcommands: loading sources into a library, parsing `--param`, choosing
//! a schedule and its parameter binding, printing diagnostics.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use symsched_compiler::diag::{render_all, Diagnostic, FileId};
use symsched_compiler::library::Library;

/// `--param k=v` parsed by clap.
pub fn parse_param(s: &str) -> Result<(String, i64), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=VALUE, got `{s}`"))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("expected NAME=VALUE, got `{s}`"));
    }
    let v: i64 = v
        .trim()
        .parse()
        .map_err(|_| format!("value of `{k}` must be an integer, got `{}`", v.trim()))?;
    Ok((k.to_string(), v))
}

/// The `--param` list as a map; a name given twice is an error.
pub fn param_map(params: &[(String, i64)]) -> Result<BTreeMap<String, i64>> {
    let mut map = BTreeMap::new();
    for (k, v) in params {
        if map.insert(k.clone(), *v).is_some() {
            bail!("--param {k} is given more than once");
        }
    }
    Ok(map)
}

/// Sources loaded for one command: the library and the file ids of the files named on the
/// command line (as opposed to their `.sched` neighbours, loaded so cross-file duals and `use`
/// resolve).
pub struct Loaded {
    pub lib: Library,
    pub named: BTreeSet<FileId>,
}

/// Load `files`, plus every other `.sched` file in their directories. Returns the rendered
/// diagnostics as the error when a named file does not parse or resolve; a neighbour that does
/// not load is skipped with a one-line warning, so one broken file does not block checking the
/// others.
pub fn load(files: &[PathBuf]) -> Result<Loaded, String> {
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let key = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let mut named_paths: Vec<PathBuf> = Vec::new();
    for f in files {
        if seen.insert(key(f)) {
            named_paths.push(f.clone());
        }
    }
    let mut neighbours: Vec<PathBuf> = Vec::new();
    for f in files {
        let dir = match f.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "sched"))
            .collect();
        found.sort();
        for s in found {
            if seen.insert(key(&s)) {
                neighbours.push(s);
            }
        }
    }
    let mut lib = Library::new();
    let mut named = BTreeSet::new();
    let mut errors: Vec<Diagnostic> = Vec::new();
    // Named files first: their definitions win over a neighbour defining the same name.
    for path in &named_paths {
        match lib.add_file(path) {
            Ok(id) => {
                named.insert(id);
            }
            Err(mut d) => errors.append(&mut d),
        }
    }
    if !errors.is_empty() {
        return Err(render_all(&errors, lib.sources()));
    }
    for path in &neighbours {
        if let Err(d) = lib.add_file(path) {
            eprintln!(
                "warning: skipping {} (loaded for cross-file references): {} error(s), run `symsched check` on it",
                path.display(),
                d.len()
            );
        }
    }
    Ok(Loaded { lib, named })
}

/// The schedule to compile from `file`'s schedules: `--schedule NAME`, or the only one.
pub fn pick_schedule(loaded: &Loaded, wanted: Option<&str>) -> Result<String> {
    let in_file: Vec<String> = loaded
        .lib
        .schedules()
        .into_iter()
        .filter(|s| loaded.named.contains(&s.file))
        .map(|s| s.name)
        .collect();
    match wanted {
        Some(w) => {
            if loaded.lib.schedule(w).is_some() {
                Ok(w.to_string())
            } else {
                bail!(
                    "no schedule named `{w}` (the file defines: {})",
                    in_file.join(", ")
                )
            }
        }
        None => match in_file.as_slice() {
            [one] => Ok(one.clone()),
            [] => bail!("the file defines no schedule"),
            many => bail!(
                "the file defines {} schedules ({}); choose one with --schedule",
                many.len(),
                many.join(", ")
            ),
        },
    }
}

/// The single parameter binding `fixed` selects for `name` at `p`: every parameter must be
/// either given or have exactly one admissible value.
pub fn single_binding(
    lib: &Library,
    name: &str,
    p: u32,
    fixed: &BTreeMap<String, i64>,
) -> Result<BTreeMap<String, i64>> {
    let space = lib
        .param_space(name, p, fixed)
        .map_err(|d| anyhow!("{}", render_all(&d, lib.sources()).trim_end()))?;
    match space.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no admissible parameter binding for `{name}` at P = {p}"),
        [first, ..] => {
            let free: Vec<&String> = first.keys().filter(|k| !fixed.contains_key(*k)).collect();
            let names: Vec<String> = free.iter().map(|k| format!("--param {k}=V")).collect();
            bail!(
                "`{name}` has {} parameter bindings at P = {p}; bind {}",
                space.len(),
                names.join(" ")
            )
        }
    }
}

/// Render diagnostics to stderr.
pub fn print_diagnostics(lib: &Library, diags: &[Diagnostic]) {
    if !diags.is_empty() {
        eprint!("{}", render_all(diags, lib.sources()));
    }
}

/// `P = 4, root = 0` for headers and summaries.
pub fn describe_binding(p: u32, params: &BTreeMap<String, i64>) -> String {
    let mut s = format!("P = {p}");
    for (k, v) in params {
        s.push_str(&format!(", {k} = {v}"));
    }
    s
}

/// Write `text` to `path`, or stdout when `path` is `None` or `-`.
pub fn write_output(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) if p != Path::new("-") => {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))
        }
        _ => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .context("cannot write to stdout")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_parse_and_reject() {
        assert_eq!(parse_param("root=3"), Ok(("root".into(), 3)));
        assert_eq!(parse_param(" L = -2"), Ok(("L".into(), -2)));
        assert!(parse_param("root").is_err());
        assert!(parse_param("=3").is_err());
        assert!(parse_param("root=x").is_err());
        assert!(param_map(&[("a".into(), 1), ("a".into(), 2)]).is_err());
    }
}
