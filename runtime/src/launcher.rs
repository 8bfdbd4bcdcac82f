//! `symsched launch`: spawns N ranks of a command with the torchrun variables and a random
//! rendezvous key, forwards their output line by line with a `[rank k]` prefix, and when one
//! rank fails stops the others and reports which rank failed and how.
//!
//! **Nothing is left behind.** The ranks meet on an abstract Unix socket named by the key
//! (`SYMSCHED_RENDEZVOUS_KEY`, see [`crate::bootstrap`]), so the launch creates no file or
//! directory at all; heap segments are memfds the kernel frees with the last process; every rank
//! dies with the launcher (`PR_SET_PDEATHSIG`), so even `kill -9` of the launcher leaves neither
//! processes nor files.
//!
//! **Stopping.** On a rank failure, the timeout or SIGINT/SIGTERM/SIGHUP to the launcher, every
//! rank still running gets SIGTERM (its whole process group), then SIGKILL after
//! [`STOP_GRACE`]. The outcome says which happened ([`FailureCause`]): an interrupted launch is
//! reported as interrupted, not as a failure of some rank.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bootstrap::random_u64;
use crate::config::{ENV_JOB_ID, ENV_RENDEZVOUS_DIR, ENV_RENDEZVOUS_KEY};
use crate::error::RuntimeError;

/// How long stopped ranks get between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// Number of ranks.
    pub nranks: usize,
    /// Program to run.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Extra environment for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// Kill everything and fail after this long (none: no limit).
    pub timeout: Option<Duration>,
    /// Collect output in the outcome instead of forwarding it to this process's stdout/stderr.
    pub capture: bool,
}

impl LaunchSpec {
    /// `nranks` copies of `program args...`.
    pub fn new(
        nranks: usize,
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Self {
        LaunchSpec {
            nranks,
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            timeout: None,
            capture: false,
        }
    }
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Why a launch did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCause {
    /// A rank exited with a non-zero status or was killed by a signal.
    RankFailed,
    /// [`LaunchSpec::timeout`] passed.
    TimedOut,
    /// The launcher received this signal (SIGINT, SIGTERM or SIGHUP).
    Interrupted {
        /// Signal number.
        signal: i32,
    },
}

/// Why the launch ended early: the first rank that failed, or the timeout, or an interruption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    /// Global rank that failed ([`FailureCause::RankFailed`]); for a timeout or an interruption
    /// the lowest rank that was still running.
    pub rank: usize,
    /// How it ended, e.g. `exit code 3`, `killed by signal 9 (Killed)`, `timed out after 5000
    /// ms`, `launcher interrupted by signal 15 (Terminated)`.
    pub status: String,
    /// What ended the launch.
    pub cause: FailureCause,
}

impl std::fmt::Display for RankFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cause {
            FailureCause::RankFailed => write!(f, "rank {} failed ({})", self.rank, self.status),
            FailureCause::TimedOut | FailureCause::Interrupted { .. } => {
                write!(f, "{}", self.status)
            }
        }
    }
}

/// How a launch ended.
#[derive(Debug)]
pub struct LaunchOutcome {
    /// Final status of each rank.
    pub statuses: Vec<Option<ExitStatus>>,
    /// The first failure, if any (then the other ranks were stopped).
    pub failure: Option<RankFailure>,
    /// Ranks that were still running when the launcher stopped them (ascending).
    pub stopped: Vec<usize>,
    /// Always empty: the launch uses a directory-free rendezvous (kept so callers that check
    /// that no directory is left keep working).
    pub rendezvous_dir: PathBuf,
    /// Captured `(rank, stream, line)` when [`LaunchSpec::capture`] was set.
    pub output: Vec<(usize, Stream, String)>,
}

impl LaunchOutcome {
    /// Whether every rank exited with status 0.
    pub fn success(&self) -> bool {
        self.failure.is_none()
    }
}

/// Names a signal for humans: `15 (Terminated)`.
pub fn describe_signal(sig: i32) -> String {
    // SAFETY: strsignal returns a static string (or null) for any number.
    let name = unsafe {
        let p = libc::strsignal(sig);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    format!("{sig} ({name})")
}

/// Describes an exit status for humans.
pub fn describe_status(s: &ExitStatus) -> String {
    if let Some(c) = s.code() {
        return format!("exit code {c}");
    }
    if let Some(sig) = s.signal() {
        return format!("killed by signal {}", describe_signal(sig));
    }
    "unknown status".into()
}

struct KillOnDrop(Vec<Option<Child>>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            kill_rank(c);
            let _ = c.wait();
        }
    }
}

/// Kills a rank and everything it started (each rank leads its own process group).
fn kill_rank(c: &mut Child) {
    signal_rank(c, libc::SIGKILL);
    let _ = c.kill();
}

/// Sends `sig` to a rank's process group (the rank and what it started).
fn signal_rank(c: &Child, sig: i32) {
    // SAFETY: signalling the process group the rank leads (pgid == its pid), which this
    // launcher created; the rank is not reaped yet, so the id is still ours.
    unsafe { libc::kill(-(c.id() as i32), sig) };
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(29500)
}

type Captured = Arc<Mutex<Vec<(usize, Stream, String)>>>;

/// Set by SIGINT/SIGTERM/SIGHUP while a launch runs, so the launcher stops the ranks it started
/// and reports the interruption instead of dying on the spot.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);
/// How many of those signals arrived.
static SIGNALS: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(sig, Ordering::SeqCst);
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// The termination signals trapped while a launch runs; the previous handlers come back when
/// this is dropped.
struct Trapped(Vec<(libc::c_int, libc::sighandler_t)>);

/// Installs [`on_signal`] for the termination signals.
fn trap_signals() -> Trapped {
    INTERRUPTED.store(0, Ordering::SeqCst);
    SIGNALS.store(0, Ordering::SeqCst);
    Trapped(
        [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
            .into_iter()
            .map(|sig| {
                // SAFETY: installing a handler that only stores to atomics.
                let old =
                    unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
                (sig, old)
            })
            .collect(),
    )
}

impl Drop for Trapped {
    fn drop(&mut self) {
        for &(sig, h) in &self.0 {
            // SAFETY: restoring the handler that was installed before.
            unsafe { libc::signal(sig, h) };
        }
    }
}

fn forward(
    rank: usize,
    stream: Stream,
    src: impl Read + Send + 'static,
    cap: Option<Captured>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            let text = String::from_utf8_lossy(&line);
            match &cap {
                Some(c) => c.lock().unwrap_or_else(|e| e.into_inner()).push((
                    rank,
                    stream,
                    text.into_owned(),
                )),
                None => {
                    let msg = format!("[rank {rank}] {text}\n");
                    let _ = match stream {
                        Stream::Stdout => std::io::stdout().lock().write_all(msg.as_bytes()),
                        Stream::Stderr => std::io::stderr().lock().write_all(msg.as_bytes()),
                    };
                }
            }
        }
    })
}

/// Runs `spec` to completion. Returns `Err` only when the launch itself could not start;
/// rank failures are reported in [`LaunchOutcome::failure`].
pub fn launch(spec: &LaunchSpec) -> Result<LaunchOutcome, RuntimeError> {
    if spec.nranks == 0 {
        return Err(RuntimeError::InvalidArgument(
            "launch needs at least one rank".into(),
        ));
    }
    let port = free_port().to_string();
    let key = format!("{:016x}{:016x}", random_u64(), random_u64());
    let job = format!("launch-{}-{}", std::process::id(), &key[..8]);
    let cap: Option<Captured> = spec.capture.then(|| Arc::new(Mutex::new(Vec::new())));
    // Trapped before the first rank exists, so no signal can end the launcher between spawning
    // a rank and watching it.
    let trapped = trap_signals();
    // SAFETY: getpid never fails.
    let launcher_pid = unsafe { libc::getpid() };
    let mut children = KillOnDrop(Vec::new());
    let mut readers = Vec::new();
    let n = spec.nranks.to_string();
    for rank in 0..spec.nranks {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", &n)
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", &n)
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env(ENV_RENDEZVOUS_KEY, &key)
            .env_remove(ENV_RENDEZVOUS_DIR)
            .env(ENV_JOB_ID, &job)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        // SAFETY: prctl, getppid and setpgid are async-signal-safe. The rank dies with the
        // launcher (also if the launcher died before prctl took effect: then the parent is no
        // longer the launcher), and leads its own process group so stopping it also stops
        // whatever it started.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != launcher_pid {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            RuntimeError::io(
                format!("spawning rank {rank}: {}", spec.program.to_string_lossy()),
                e,
            )
        })?;
        if let Some(o) = child.stdout.take() {
            readers.push(forward(rank, Stream::Stdout, o, cap.clone()));
        }
        if let Some(e) = child.stderr.take() {
            readers.push(forward(rank, Stream::Stderr, e, cap.clone()));
        }
        children.0.push(Some(child));
    }
    let start = Instant::now();
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; spec.nranks];
    let mut failure: Option<RankFailure> = None;
    let mut stopped: Vec<usize> = Vec::new();
    let mut stop_at: Option<Instant> = None;
    let mut killed = false;
    let running = |st: &[Option<ExitStatus>]| st.iter().position(Option::is_none).unwrap_or(0);
    while statuses.iter().any(Option::is_none) {
        for (rank, slot) in children.0.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if let Ok(Some(st)) = c.try_wait() {
                statuses[rank] = Some(st);
                *slot = None;
                if !st.success() && failure.is_none() {
                    failure = Some(RankFailure {
                        rank,
                        status: describe_status(&st),
                        cause: FailureCause::RankFailed,
                    });
                }
            }
        }
        if failure.is_none() {
            if let Some(t) = spec.timeout {
                if start.elapsed() > t {
                    failure = Some(RankFailure {
                        rank: running(&statuses),
                        status: format!("timed out after {} ms", t.as_millis()),
                        cause: FailureCause::TimedOut,
                    });
                }
            }
        }
        let sig = INTERRUPTED.load(Ordering::SeqCst);
        if sig != 0 && failure.is_none() {
            failure = Some(RankFailure {
                rank: running(&statuses),
                status: format!("launcher interrupted by signal {}", describe_signal(sig)),
                cause: FailureCause::Interrupted { signal: sig },
            });
        }
        if failure.is_some() && stop_at.is_none() {
            // Ask every rank still running to stop, then force it after the grace period.
            stop_at = Some(Instant::now() + STOP_GRACE);
            for (rank, c) in children.0.iter().enumerate() {
                if let Some(c) = c {
                    stopped.push(rank);
                    signal_rank(c, libc::SIGTERM);
                }
            }
        }
        // A second signal while the ranks are being stopped: do not wait for the grace period.
        let again = SIGNALS.load(Ordering::SeqCst) >= 2;
        if !killed && (stop_at.is_some_and(|t| Instant::now() >= t) || again) {
            killed = true;
            for c in children.0.iter_mut().flatten() {
                kill_rank(c);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(children);
    // Output still buffered in the pipes is forwarded; a descendant that escaped its process
    // group and keeps a pipe open must not hang the launcher, so joining is bounded.
    let join_deadline = Instant::now() + Duration::from_secs(2);
    for r in readers {
        while !r.is_finished() && Instant::now() < join_deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if r.is_finished() {
            let _ = r.join();
        }
    }
    drop(trapped);
    let output = cap
        .map(|c| std::mem::take(&mut *c.lock().unwrap_or_else(|e| e.into_inner())))
        .unwrap_or_default();
    Ok(LaunchOutcome {
        statuses,
        failure,
        stopped,
        rendezvous_dir: PathBuf::new(),
        output,
    })
}
