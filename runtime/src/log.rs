//! Logging (DFX). Levels come from `HYPER_PARALLEL_SHMEM_LOG_LEVEL` (DEBUG / INFO / WARNING /
//! ERROR, default WARNING; validated in [`crate::config`]). With `SHMEM_LOG_TO_STDOUT=1` records
//! go to stdout, coloured only when stdout is a terminal; otherwise to a per-rank file
//! `symsched-rank<R>-pid<P>.log` (no colour) in `SYMSCHED_LOG_DIR`, by default the per-user
//! directory `symsched-logs-<uid>` in `$XDG_RUNTIME_DIR`, else in the temporary directory. The
//! file is created on the first record, so quiet runs leave nothing behind.
//!
//! **What is logged.** `INFO`: the one-time choices (runtime version, log sink, heap size, node,
//! rendezvous). `DEBUG`: also every launch ([`launch_record`]: schedule, group, bytes, duration,
//! outcome), group creation, allocations. `WARNING`/`ERROR`: refused inputs, failed waits,
//! aborts.
//!
//! **Hostile file systems.** The log directory must be a directory (not a link) owned by this
//! user that nobody else can write; the default one is created with mode 0700 and must be
//! private (0700) if it already exists. The file is opened relative to the checked directory
//! with `O_NOFOLLOW` (mode 0600) and must be a regular file of ours with one link. A directory or
//! file that fails a check is not used: records go to stderr after one line saying why — so
//! another user who pre-creates the directory or plants `symsched-rank<R>-pid<P>.log` links
//! cannot make the ranks write anywhere else.
//!
//! If the process already installed a global tracing subscriber, it is kept.

use std::ffi::CString;
use std::fmt::Display;
use std::io::IsTerminal;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tracing::Level;

pub use crate::config::{parse_level, LogConfig, ENV_LOG_DIR, ENV_LOG_LEVEL, ENV_LOG_TO_STDOUT};

/// Name of the per-user default log directory (`symsched-logs-<uid>`).
pub fn default_dir_name() -> String {
    // SAFETY: geteuid never fails.
    format!("symsched-logs-{}", unsafe { libc::geteuid() })
}

/// The log directory used when logging to files: `SYMSCHED_LOG_DIR`, else the per-user
/// directory in the first default base.
pub fn log_dir() -> PathBuf {
    match LogConfig::from_env() {
        Ok(c) => dir_of(&c),
        Err(_) => std::env::temp_dir().join(default_dir_name()),
    }
}

fn dir_of(cfg: &LogConfig) -> PathBuf {
    match &cfg.dir {
        Some(d) => d.clone(),
        None => cfg
            .default_bases
            .iter()
            .find(|b| b.is_dir())
            .cloned()
            .unwrap_or_else(std::env::temp_dir)
            .join(default_dir_name()),
    }
}

/// Installs the global subscriber for `rank` as configured by the environment (once). The
/// configuration was validated by [`crate::RuntimeConfig::from_env`]; if it is malformed here
/// the defaults are used and the reason is logged.
pub fn init(rank: usize) {
    match LogConfig::from_env() {
        Ok(cfg) => init_with(rank, &cfg),
        Err(e) => {
            init_with(
                rank,
                &LogConfig::from_lookup(&|_| Ok(None)).expect("defaults"),
            );
            tracing::error!("{e}; logging with the defaults");
        }
    }
}

/// Installs the global subscriber for `rank` with `cfg` (once per process).
pub fn init_with(rank: usize, cfg: &LogConfig) {
    let builder = tracing_subscriber::fmt()
        .with_max_level(cfg.level)
        .with_target(false)
        .with_thread_names(true);
    let sink;
    let installed = if cfg.to_stdout {
        let colour = std::io::stdout().is_terminal();
        sink = format!("stdout (colour {})", if colour { "on" } else { "off" });
        builder
            .with_ansi(colour)
            .with_writer(std::io::stdout)
            .try_init()
            .is_ok()
    } else {
        let dir = dir_of(cfg);
        let name = format!("symsched-rank{rank}-pid{}.log", std::process::id());
        sink = dir.join(&name).display().to_string();
        builder
            .with_ansi(false)
            .with_writer(LazyFile {
                dir,
                name,
                private: cfg.dir.is_none(),
                file: Mutex::new(None),
            })
            .try_init()
            .is_ok()
    };
    if installed {
        tracing::info!(
            rank,
            version = %env!("CARGO_PKG_VERSION"),
            level = %cfg.level,
            sink = %sink,
            "symsched runtime logging"
        );
    }
}

/// Whether [`launch_record`] would record anything (lets callers skip measuring).
pub fn launch_records_enabled() -> bool {
    tracing::enabled!(Level::DEBUG)
}

/// Records one launch at `DEBUG`: the schedule, the group, the bytes this rank bound, how long
/// it took and how it ended. The executor calls it at the end of every launch.
///
/// ```
/// use std::time::Duration;
/// symsched_runtime::log::launch_record("ring_allreduce", "[0, 1]", 4096, Duration::from_micros(35), Ok(()));
/// ```
pub fn launch_record(
    schedule: &str,
    group: &str,
    bytes: u64,
    duration: Duration,
    outcome: Result<(), &dyn Display>,
) {
    match outcome {
        Ok(()) => tracing::debug!(
            schedule,
            group,
            bytes,
            duration_us = duration.as_micros() as u64,
            outcome = "ok",
            "launch"
        ),
        Err(e) => tracing::debug!(
            schedule,
            group,
            bytes,
            duration_us = duration.as_micros() as u64,
            outcome = %format_args!("error: {e}"),
            "launch"
        ),
    }
}

/// Opens (creating if needed) the log directory and file with the checks described in the
/// module docs. `private`: the directory is the per-user default (created 0700, must be 0700).
pub fn open_log_file(dir: &Path, name: &str, private: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::DirBuilderExt;
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    match std::fs::DirBuilder::new()
        .recursive(!private)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let cdir = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| refuse(format!("NUL in {}", dir.display())))?;
    // SAFETY: valid C string; the result is checked.
    let dfd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if dfd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(refuse(format!(
            "log directory {} cannot be opened without following links: {e}",
            dir.display()
        )));
    }
    // SAFETY: fresh descriptor.
    let dfd = unsafe { OwnedFd::from_raw_fd(dfd) };
    let st = fstat(dfd.as_raw_fd())?;
    // SAFETY: geteuid never fails.
    let me = unsafe { libc::geteuid() };
    let loose = if private { 0o077 } else { 0o022 };
    if st.st_uid != me || st.st_mode & loose != 0 {
        return Err(refuse(format!(
            "log directory {} belongs to uid {} with mode {:o}; it must belong to uid {me} and {}",
            dir.display(),
            st.st_uid,
            st.st_mode & 0o7777,
            if private {
                "have mode 0700"
            } else {
                "not be writable by group or others"
            }
        )));
    }
    let cname = CString::new(name).map_err(|_| refuse(format!("NUL in {name}")))?;
    // SAFETY: valid directory descriptor and C string; the result is checked.
    let fd = unsafe {
        libc::openat(
            dfd.as_raw_fd(),
            cname.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(refuse(format!(
            "log file {} cannot be opened without following links: {e}",
            dir.join(name).display()
        )));
    }
    // SAFETY: fresh descriptor.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let st = fstat(file.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != me || st.st_nlink != 1 {
        return Err(refuse(format!(
            "log file {} is not a regular file of uid {me} with one link",
            dir.join(name).display()
        )));
    }
    Ok(file)
}

fn fstat(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed struct; the result is checked.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

/// A log file created on the first record (so quiet runs leave no empty files); falls back to
/// stderr, after one line saying why, when it cannot be opened safely.
struct LazyFile {
    dir: PathBuf,
    name: String,
    private: bool,
    file: Mutex<Option<Result<std::fs::File, ()>>>,
}

/// One record's writer: the file (under its lock) or stderr.
enum LazyWriter<'a> {
    File(std::sync::MutexGuard<'a, Option<Result<std::fs::File, ()>>>),
    Stderr(std::io::Stderr),
}

impl std::io::Write for LazyWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            LazyWriter::File(g) => match g.as_mut() {
                Some(Ok(f)) => f.write(buf),
                _ => std::io::stderr().write(buf),
            },
            LazyWriter::Stderr(e) => e.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            LazyWriter::File(g) => match g.as_mut() {
                Some(Ok(f)) => f.flush(),
                _ => Ok(()),
            },
            LazyWriter::Stderr(e) => e.flush(),
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LazyFile {
    type Writer = LazyWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        let mut g = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match &*g {
            Some(Ok(_)) => LazyWriter::File(g),
            Some(Err(())) => LazyWriter::Stderr(std::io::stderr()),
            None => match open_log_file(&self.dir, &self.name, self.private) {
                Ok(f) => {
                    *g = Some(Ok(f));
                    LazyWriter::File(g)
                }
                Err(e) => {
                    *g = Some(Err(()));
                    eprintln!("symsched: not logging to a file ({e}); logging to stderr");
                    LazyWriter::Stderr(std::io::stderr())
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tmp(tag: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("symsched-logunit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        Tmp(d)
    }

    #[test]
    fn private_dir_is_created_0700_and_file_0600() {
        let t = tmp("create");
        let dir = t.0.join("logs");
        let mut f = open_log_file(&dir, "a.log", true).unwrap();
        writeln!(f, "x").unwrap();
        let dm = std::fs::metadata(&dir).unwrap().permissions().mode();
        let fm = std::fs::metadata(dir.join("a.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!((dm & 0o777, fm & 0o777), (0o700, 0o600));
        // Appends, does not truncate.
        drop(f);
        let mut f = open_log_file(&dir, "a.log", true).unwrap();
        writeln!(f, "y").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("a.log")).unwrap(),
            "x\ny\n"
        );
    }

    #[test]
    fn loose_dirs_links_and_hard_links_are_refused() {
        let t = tmp("refuse");
        let open_dir = t.0.join("open");
        std::fs::create_dir(&open_dir).unwrap();
        std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = open_log_file(&open_dir, "a.log", true).unwrap_err();
        assert!(e.to_string().contains("must belong to uid"), "{e}");
        assert!(open_log_file(&open_dir, "a.log", false).is_err());
        // An explicit directory may be readable by others, but not writable.
        let shared = t.0.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_log_file(&shared, "a.log", false).is_ok());
        assert!(open_log_file(&shared, "a.log", true).is_err());
        // A planted symbolic link (to a file or as the directory itself) is never followed.
        let dir = t.0.join("mine");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let victim = t.0.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("l.log")).unwrap();
        let e = open_log_file(&dir, "l.log", true).unwrap_err();
        assert!(e.to_string().contains("without following links"), "{e}");
        std::os::unix::fs::symlink(&dir, t.0.join("dirlink")).unwrap();
        assert!(open_log_file(&t.0.join("dirlink"), "a.log", true).is_err());
        std::fs::hard_link(&victim, dir.join("h.log")).unwrap();
        let e = open_log_file(&dir, "h.log", true).unwrap_err();
        assert!(e.to_string().contains("one link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }
}
