//! A library of schedules from many `.sched` files: parse, resolve, enumerate params and
//! instantiate. Cross-file references (`dual NAME`, `use NAME`) resolve across every file
//! added, checked when a schedule is instantiated (files arrive one by one).

use crate::diag::{Diagnostic, FileId, SourceMap, Span};
use crate::front::ast::Dual;
use crate::front::ast::Schedule;
use crate::front::codes;
use crate::front::declared::DeclaredSig;
use crate::front::resolve::{resolve_collective, resolve_with, ResolvedSchedule};
use crate::ir::instantiate::{self, ScheduleLookup};
use crate::ir::transpose;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use symsched_plan::CollectiveKind;

/// One declared param of a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    pub span: Span,
}

/// Summary of one schedule in the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    pub name: String,
    pub collective: CollectiveKind,
    pub params: Vec<ParamInfo>,
    pub file: FileId,
    /// The header (`schedule NAME … implements COLL(…)`).
    pub span: Span,
}

struct Entry {
    file: FileId,
    ast: Schedule,
    res: ResolvedSchedule,
}

/// Sources plus their parsed, resolved schedules.
#[derive(Default)]
pub struct Library {
    sources: SourceMap,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    /// Collectives the sources declare, by name; a schedule sees those of its own file and of
    /// files added before it.
    collectives: HashMap<String, Arc<DeclaredSig>>,
}

impl ScheduleLookup for Library {
    fn find(&self, name: &str) -> Option<(&Schedule, &ResolvedSchedule)> {
        self.by_name
            .get(name)
            .map(|&i| (&self.entries[i].ast, &self.entries[i].res))
    }
}

impl Library {
    pub fn new() -> Library {
        Library::default()
    }

    /// Parse and resolve one file. On any error no schedule is added (the text is still kept in
    /// [`Library::sources`] so the diagnostics render with snippets).
    pub fn add_source(&mut self, name: &str, text: &str) -> Result<FileId, Vec<Diagnostic>> {
        let file = self.sources.add(name, text);
        let ast = crate::front::parse(file, text)?;
        let mut diags = Vec::new();
        let mut declared: HashMap<String, Arc<DeclaredSig>> = HashMap::new();
        for c in &ast.collectives {
            let name = &c.name.name;
            let prev = declared
                .get(name)
                .or_else(|| self.collectives.get(name))
                .map(|d| d.decl.name.span);
            if let Some(prev) = prev {
                diags.push(
                    Diagnostic::error(
                        codes::E_DUPLICATE,
                        format!("collective `{name}` is declared twice"),
                    )
                    .with_label(c.name.span, "declared again here")
                    .with_label(prev, "first declared here"),
                );
                continue;
            }
            if CollectiveKind::from_name(name).is_some() {
                diags.push(
                    Diagnostic::error(
                        codes::E_DUPLICATE,
                        format!("`{name}` is a built-in collective"),
                    )
                    .with_label(c.name.span, "declared again here")
                    .with_help("give the declared collective another name"),
                );
                continue;
            }
            match resolve_collective(c) {
                Ok(sig) => {
                    declared.insert(name.clone(), Arc::new(sig));
                }
                Err(d) => diags.extend(d),
            }
        }
        let lookup = |n: &str| declared.get(n).or_else(|| self.collectives.get(n)).cloned();
        let mut resolved = Vec::new();
        let mut local: HashMap<&str, Span> = HashMap::new();
        for s in &ast.schedules {
            if let Some(prev) = local.get(s.name.name.as_str()) {
                diags.push(
                    Diagnostic::error(
                        codes::E_DUPLICATE,
                        format!("schedule `{}` is defined twice", s.name.name),
                    )
                    .with_label(s.name.span, "defined again here")
                    .with_label(*prev, "first defined here"),
                );
            } else if let Some(&i) = self.by_name.get(&s.name.name) {
                diags.push(
                    Diagnostic::error(
                        codes::E_DUPLICATE,
                        format!("schedule `{}` is already defined", s.name.name),
                    )
                    .with_label(s.name.span, "defined again here")
                    .with_label(self.entries[i].ast.name.span, "first defined here"),
                );
            }
            local.insert(&s.name.name, s.name.span);
            match resolve_with(s, &lookup) {
                Ok(r) => resolved.push(r),
                Err(d) => diags.extend(d),
            }
        }
        if !diags.is_empty() {
            return Err(diags);
        }
        self.collectives.extend(declared);
        for (s, r) in ast.schedules.into_iter().zip(resolved) {
            self.by_name.insert(s.name.name.clone(), self.entries.len());
            self.entries.push(Entry {
                file,
                ast: s,
                res: r,
            });
        }
        Ok(file)
    }

    /// Read and add a file; an I/O error is an E0001 diagnostic.
    pub fn add_file(&mut self, path: &std::path::Path) -> Result<FileId, Vec<Diagnostic>> {
        match std::fs::read_to_string(path) {
            Ok(text) => self.add_source(&path.display().to_string(), &text),
            Err(e) => Err(vec![Diagnostic::error(
                "E0001",
                format!("cannot read `{}`: {e}", path.display()),
            )]),
        }
    }

    pub fn sources(&self) -> &SourceMap {
        &self.sources
    }

    fn info(e: &Entry) -> ScheduleInfo {
        ScheduleInfo {
            name: e.ast.name.name.clone(),
            collective: e.res.kind,
            params: e
                .ast
                .params
                .iter()
                .map(|p| ParamInfo {
                    name: p.name.name.clone(),
                    span: p.span,
                })
                .collect(),
            file: e.file,
            span: e.ast.header_span,
        }
    }

    /// Every schedule, in file order then source order.
    pub fn schedules(&self) -> Vec<ScheduleInfo> {
        self.entries.iter().map(Self::info).collect()
    }

    /// The schedule `name`: a source schedule, or the derived dual `F.dual` of a source
    /// schedule `F` that declares `dual derived` (with the dual collective).
    pub fn schedule(&self, name: &str) -> Option<ScheduleInfo> {
        if let Some(i) = self.by_name.get(name) {
            return Some(Self::info(&self.entries[*i]));
        }
        let (fwd, kind) = self.derived(name)?;
        Some(ScheduleInfo {
            name: name.to_string(),
            collective: kind,
            ..Self::info(fwd)
        })
    }

    /// The forward entry and dual collective of a derived dual's name, when its forward says
    /// `dual derived`.
    fn derived(&self, name: &str) -> Option<(&Entry, CollectiveKind)> {
        let fwd = transpose::forward_name(name)?;
        let e = &self.entries[*self.by_name.get(fwd)?];
        let derives = e
            .ast
            .duals
            .iter()
            .any(|d| matches!(d, Dual::Derived { .. }));
        Some((
            e,
            transpose::dual_collective(e.res.kind).filter(|_| derives)?,
        ))
    }

    /// The parsed schedule (for tools that walk the AST).
    pub fn ast(&self, name: &str) -> Option<&Schedule> {
        self.find(name).map(|(s, _)| s)
    }

    fn unknown(name: &str) -> Vec<Diagnostic> {
        vec![Diagnostic::error(
            codes::E_UNKNOWN_NAME,
            format!("no schedule named `{name}`"),
        )]
    }

    /// Every param binding `check` must verify at this group size: the cartesian product of the
    /// declared ranges, with `fixed` overriding (a fixed value out of range → E0305).
    pub fn param_space(
        &self,
        name: &str,
        group_size: u32,
        fixed: &BTreeMap<String, i64>,
    ) -> Result<Vec<BTreeMap<String, i64>>, Vec<Diagnostic>> {
        if let Some((fwd, _)) = self.derived(name) {
            // The dual's binding is the forward's, mapped (sendrecv swaps src and dst).
            let kind = fwd.res.kind;
            let fixed = transpose::dual_params(kind, fixed);
            return Ok(instantiate::param_space(&fwd.ast, group_size, &fixed)?
                .iter()
                .map(|b| transpose::dual_params(kind, b))
                .collect());
        }
        let (s, _) = self.find(name).ok_or_else(|| Self::unknown(name))?;
        instantiate::param_space(s, group_size, fixed)
    }

    /// Instantiate a schedule for one group size and one complete param binding.
    pub fn instantiate(
        &self,
        name: &str,
        group_size: u32,
        params: &BTreeMap<String, i64>,
    ) -> Result<crate::ir::Program, Vec<Diagnostic>> {
        if let Some((fwd, _)) = self.derived(name) {
            let fparams = transpose::dual_params(fwd.res.kind, params);
            let prog = instantiate::instantiate(self, &fwd.ast.name.name, group_size, &fparams)?;
            let span = transpose::derived_span(&prog).unwrap_or(prog.header_span);
            return transpose::transpose(&prog, span).map_err(|d| vec![d]);
        }
        instantiate::instantiate(self, name, group_size, params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AR: &str = "schedule a implements allreduce(x: [1]) dual b { }\n";
    const BR: &str = "schedule b implements allreduce(x: [1]) dual a { }\n";

    #[test]
    fn files_resolve_across_and_fail_atomically() {
        let mut lib = Library::new();
        let fa = lib.add_source("a.sched", AR).unwrap();
        // The dual lives in a file not added yet.
        assert_eq!(
            lib.instantiate("a", 2, &BTreeMap::new()).unwrap_err()[0].code,
            "E0201"
        );
        // A file with one good and one broken schedule adds nothing.
        let bad = format!("{BR}schedule c implements nope(x: [1]) {{ }}\n");
        assert!(lib.add_source("bad.sched", &bad).is_err());
        assert!(lib.schedule("b").is_none());
        let fb = lib.add_source("b.sched", BR).unwrap();
        assert_ne!(fa, fb);
        let prog = lib.instantiate("a", 2, &BTreeMap::new()).unwrap();
        assert_eq!(prog.duals.len(), 1);
        let names: Vec<String> = lib.schedules().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(lib.schedule("b").unwrap().file, fb);
        assert_eq!(lib.sources().name(fb), "b.sched");
        // Redefinition in another file is a duplicate.
        assert_eq!(
            lib.add_source("again.sched", AR).unwrap_err()[0].code,
            "E0202"
        );
    }

    #[test]
    fn io_errors_are_diagnostics() {
        let mut lib = Library::new();
        let e = lib
            .add_file(std::path::Path::new("/nonexistent/x.sched"))
            .unwrap_err();
        assert_eq!(e[0].code, "E0001");
    }

    #[test]
    fn param_space_through_the_library() {
        let mut lib = Library::new();
        lib.add_source(
            "r.sched",
            "schedule r(root in 0..P) implements reduce(x: [1]) { }",
        )
        .unwrap();
        let info = lib.schedule("r").unwrap();
        assert_eq!(info.collective, CollectiveKind::Reduce);
        assert_eq!(info.params[0].name, "root");
        assert_eq!(lib.param_space("r", 3, &BTreeMap::new()).unwrap().len(), 3);
        let fixed: BTreeMap<String, i64> = [("root".into(), 5)].into_iter().collect();
        assert_eq!(
            lib.param_space("r", 3, &fixed).unwrap_err()[0].code,
            "E0305"
        );
        let bogus: BTreeMap<String, i64> = [("nope".into(), 0)].into_iter().collect();
        assert_eq!(
            lib.param_space("r", 3, &bogus).unwrap_err()[0].code,
            "E0201"
        );
    }
}
