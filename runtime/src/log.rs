//! Logging (DFX). Levels come from `HYPER_PARALLEL_SHMEM_LOG_LEVEL` (DEBUG / INFO / WARNING /
//! ERROR, default WARNING). With `SHMEM_LOG_TO_STDOUT=1` records go to stdout; otherwise to a
//! per-rank file `<dir>/symsched-rank<R>-pid<P>.log` where `<dir>` is `SYMSCHED_LOG_DIR`, by
//! default `${TMPDIR:-/tmp}/symsched-logs`; the file is created on the first record. If it
//! cannot be created records go to stderr.
//! If the process already installed a global tracing subscriber, it is kept.

use std::path::PathBuf;
use std::sync::Mutex;

use tracing::Level;

/// Level variable.
pub const ENV_LOG_LEVEL: &str = "HYPER_PARALLEL_SHMEM_LOG_LEVEL";
/// Stdout switch.
pub const ENV_LOG_TO_STDOUT: &str = "SHMEM_LOG_TO_STDOUT";
/// Log directory.
pub const ENV_LOG_DIR: &str = "SYMSCHED_LOG_DIR";

/// Parses a level name (case-insensitive; WARN and WARNING both accepted).
pub fn parse_level(s: &str) -> Option<Level> {
    match s.trim().to_ascii_uppercase().as_str() {
        "DEBUG" => Some(Level::DEBUG),
        "INFO" => Some(Level::INFO),
        "WARNING" | "WARN" => Some(Level::WARN),
        "ERROR" => Some(Level::ERROR),
        _ => None,
    }
}

/// The log directory used when logging to files.
pub fn log_dir() -> PathBuf {
    match std::env::var_os(ENV_LOG_DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => std::env::temp_dir().join("symsched-logs"),
    }
}

/// Installs the global subscriber for `rank` as configured by the environment (once).
pub fn init(rank: usize) {
    let level = std::env::var(ENV_LOG_LEVEL)
        .ok()
        .and_then(|v| parse_level(&v))
        .unwrap_or(Level::WARN);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .with_thread_names(true);
    if std::env::var(ENV_LOG_TO_STDOUT).is_ok_and(|v| v.trim() == "1") {
        let _ = builder.with_writer(std::io::stdout).try_init();
        return;
    }
    let path = log_dir().join(format!("symsched-rank{rank}-pid{}.log", std::process::id()));
    let _ = builder
        .with_ansi(false)
        .with_writer(LazyFile {
            path,
            file: Mutex::new(None),
        })
        .try_init();
}

/// A log file created on the first record (so quiet runs leave no empty files); falls back to
/// stderr when it cannot be created.
struct LazyFile {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

/// One record's writer: the file (under its lock) or stderr.
enum LazyWriter<'a> {
    File(std::sync::MutexGuard<'a, Option<std::fs::File>>),
    Stderr(std::io::Stderr),
}

impl std::io::Write for LazyWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            LazyWriter::File(g) => match g.as_mut() {
                Some(f) => f.write(buf),
                None => std::io::stderr().write(buf),
            },
            LazyWriter::Stderr(e) => e.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LazyWriter::File(g) => g.as_mut().map_or(Ok(()), |f| f.flush()),
            LazyWriter::Stderr(e) => e.flush(),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LazyFile {
    type Writer = LazyWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        let mut g = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            let opened = self
                .path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.path)
                });
            match opened {
                Ok(f) => *g = Some(f),
                Err(_) => return LazyWriter::Stderr(std::io::stderr()),
            }
        }
        LazyWriter::File(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(parse_level("debug"), Some(Level::DEBUG));
        assert_eq!(parse_level("WARNING"), Some(Level::WARN));
        assert_eq!(parse_level("ERROR"), Some(Level::ERROR));
        assert_eq!(parse_level("loud"), None);
    }
}
