//! Logging (DFX). Levels come from `HYPER_PARALLEL_SHMEM_LOG_LEVEL` (DEBUG / INFO / WARNING /
//! ERROR, default WARNING). With `SHMEM_LOG_TO_STDOUT=1` records go to stdout; otherwise to a
//! per-rank file `<dir>/symsched-rank<R>-pid<P>.log` where `<dir>` is `SYMSCHED_LOG_DIR`, by
//! default `${TMPDIR:-/tmp}/symsched-logs`. If the file cannot be created records go to stderr.
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
    let dir = log_dir();
    let file = std::fs::create_dir_all(&dir).and_then(|_| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("symsched-rank{rank}-pid{}.log", std::process::id())))
    });
    match file {
        Ok(f) => {
            let _ = builder
                .with_ansi(false)
                .with_writer(Mutex::new(f))
                .try_init();
        }
        Err(_) => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
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
