//! Diagnostics shared by every compiler stage: a stable code, a message, labelled source spans,
//! rendered with source snippets by `codespan-reporting`.
//!
//! Codes are stable and documented in `grammar/README.md`: E01xx syntax, E02xx names and types,
//! E03xx instantiation, E04xx verification (E040x postcondition, E041x races, E042x deadlock,
//! E043x bounds, E044x duals, E045x host-collective mixing, E046x node placement).

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor::Buffer, Config};
use std::fmt;

/// Index of a file in a [`SourceMap`].
pub type FileId = usize;

/// A byte range in one source file.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct Span {
    pub file: FileId,
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(file: FileId, start: usize, end: usize) -> Span {
        Span {
            file,
            start: start as u32,
            end: end as u32,
        }
    }

    /// The smallest span covering both (same file assumed).
    pub fn join(self, other: Span) -> Span {
        Span {
            file: self.file,
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// All source files of one compilation, for rendering diagnostics.
#[derive(Clone)]
pub struct SourceMap {
    files: SimpleFiles<String, String>,
    names: Vec<String>,
}

impl Default for SourceMap {
    fn default() -> Self {
        SourceMap {
            files: SimpleFiles::new(),
            names: Vec::new(),
        }
    }
}

impl SourceMap {
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        let name = name.into();
        self.names.push(name.clone());
        self.files.add(name, text.into())
    }

    pub fn text(&self, file: FileId) -> &str {
        self.files
            .get(file)
            .map(|f| f.source().as_str())
            .unwrap_or("")
    }

    pub fn name(&self, file: FileId) -> &str {
        self.names
            .get(file)
            .map(String::as_str)
            .unwrap_or("<unknown>")
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// 1-based line and column of a byte offset.
    pub fn line_col(&self, file: FileId, offset: u32) -> (usize, usize) {
        let text = self.text(file);
        let upto = &text[..(offset as usize).min(text.len())];
        let line = upto.matches('\n').count() + 1;
        let col = upto
            .rsplit('\n')
            .next()
            .map(|s| s.chars().count())
            .unwrap_or(0)
            + 1;
        (line, col)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
    Note,
}

/// One finding of any stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable code, e.g. `E0411`.
    pub code: &'static str,
    pub message: String,
    /// The first label is the primary one.
    pub labels: Vec<(Span, String)>,
    pub notes: Vec<String>,
    /// One-line fix hint.
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            help: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    pub fn with_label(mut self, span: Span, text: impl Into<String>) -> Diagnostic {
        self.labels.push((span, text.into()));
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// The primary span, if any.
    pub fn span(&self) -> Option<Span> {
        self.labels.first().map(|(s, _)| *s)
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Render with source snippets (no colour), as the CLI prints it.
    pub fn render(&self, sources: &SourceMap) -> String {
        let mut cs = match self.severity {
            Severity::Error => CsDiagnostic::error(),
            Severity::Warning => CsDiagnostic::warning(),
            Severity::Note => CsDiagnostic::note(),
        }
        .with_code(self.code)
        .with_message(&self.message);
        let labels = self
            .labels
            .iter()
            .enumerate()
            .map(|(i, (span, text))| {
                let range = span.start as usize..span.end as usize;
                if i == 0 {
                    Label::primary(span.file, range).with_message(text)
                } else {
                    Label::secondary(span.file, range).with_message(text)
                }
            })
            .collect();
        cs = cs.with_labels(labels);
        let mut notes = self.notes.clone();
        if let Some(h) = &self.help {
            notes.push(format!("help: {h}"));
        }
        cs = cs.with_notes(notes);
        let mut buf = Buffer::no_color();
        if term::emit(&mut buf, &Config::default(), &sources.files, &cs).is_err() {
            return self.to_string();
        }
        String::from_utf8_lossy(buf.as_slice()).into_owned()
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        write!(f, "{sev}[{}]: {}", self.code, self.message)
    }
}

/// Render a list of diagnostics, one after another.
pub fn render_all(diags: &[Diagnostic], sources: &SourceMap) -> String {
    diags.iter().map(|d| d.render(sources)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_code_message_and_snippet() {
        let mut sm = SourceMap::default();
        let f = sm.add("a.sched", "schedule x {\n  wait s >= 1;\n}\n");
        let d = Diagnostic::error("E0421", "wait can never be satisfied")
            .with_label(Span::new(f, 15, 26), "no signal reaches `s`")
            .with_help("add a matching `signal s @ rank += 1`");
        let out = d.render(&sm);
        assert!(out.contains("error[E0421]"), "{out}");
        assert!(out.contains("wait s >= 1"), "{out}");
        assert!(out.contains("help: add a matching"), "{out}");
        assert_eq!(sm.line_col(f, 15), (2, 3));
    }
}
