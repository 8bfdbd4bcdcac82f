//! `symsched launch`: spawns N ranks of a command with the torchrun variables and a private
//! rendezvous directory, forwards their output line by line with a `[rank k]` prefix, and when
//! one rank fails kills the others and reports which rank failed and how.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bootstrap::make_private_dir;
use crate::config::{base_runtime_dir, ENV_JOB_ID, ENV_RENDEZVOUS_DIR};
use crate::error::RuntimeError;

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

/// The first rank that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    /// Global rank.
    pub rank: usize,
    /// How it ended, e.g. `exit code 3` or `killed by signal 9 (SIGKILL)`, or `timed out`.
    pub status: String,
}

/// How a launch ended.
#[derive(Debug)]
pub struct LaunchOutcome {
    /// Final status of each rank.
    pub statuses: Vec<Option<ExitStatus>>,
    /// The first failure, if any (then the other ranks were killed).
    pub failure: Option<RankFailure>,
    /// The rendezvous directory that was used (already removed).
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

/// Describes an exit status for humans.
pub fn describe_status(s: &ExitStatus) -> String {
    if let Some(c) = s.code() {
        return format!("exit code {c}");
    }
    if let Some(sig) = s.signal() {
        // SAFETY: strsignal returns a static string (or null) for any number.
        let name = unsafe {
            let p = libc::strsignal(sig);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        return format!("killed by signal {sig} ({name})");
    }
    "unknown status".into()
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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
    // SAFETY: signalling the process group the rank leads (pgid == its pid).
    unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
    let _ = c.kill();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(29500)
}

type Captured = Arc<Mutex<Vec<(usize, Stream, String)>>>;

/// Set by SIGINT/SIGTERM/SIGHUP while a launch runs, so the launcher stops the ranks and still
/// removes the rendezvous directory instead of dying on the spot.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(sig, Ordering::SeqCst);
}

/// Installs [`on_signal`] for the termination signals, returning the previous handlers.
fn trap_signals() -> Vec<(libc::c_int, libc::sighandler_t)> {
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
        .into_iter()
        .map(|sig| {
            // SAFETY: installing a handler that only stores to an atomic.
            let old = unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
            (sig, old)
        })
        .collect()
}

fn restore_signals(old: Vec<(libc::c_int, libc::sighandler_t)>) {
    for (sig, h) in old {
        // SAFETY: restoring the handler that was installed before.
        unsafe { libc::signal(sig, h) };
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
    let dir = make_private_dir(&base_runtime_dir())?;
    let _rm = RemoveDir(dir.clone());
    let port = free_port().to_string();
    let job = format!(
        "launch-{}-{}",
        std::process::id(),
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let cap: Option<Captured> = spec.capture.then(|| Arc::new(Mutex::new(Vec::new())));
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
            .env(ENV_RENDEZVOUS_DIR, &dir)
            .env(ENV_JOB_ID, &job)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        // SAFETY: prctl and setpgid are async-signal-safe. The rank dies with the launcher, and
        // leads its own process group so stopping it also stops whatever it started.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
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
    INTERRUPTED.store(0, Ordering::SeqCst);
    let old_handlers = trap_signals();
    let start = Instant::now();
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; spec.nranks];
    let mut failure: Option<RankFailure> = None;
    let mut killed = false;
    while statuses.iter().any(Option::is_none) {
        for (rank, slot) in children.0.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if let Ok(Some(st)) = c.try_wait() {
                statuses[rank] = Some(st);
                *slot = None;
                if !st.success() && failure.is_none() && !killed {
                    failure = Some(RankFailure {
                        rank,
                        status: describe_status(&st),
                    });
                }
            }
        }
        if failure.is_none() {
            if let Some(t) = spec.timeout {
                if start.elapsed() > t {
                    failure = Some(RankFailure {
                        rank: statuses.iter().position(Option::is_none).unwrap_or(0),
                        status: format!("timed out after {} ms", t.as_millis()),
                    });
                }
            }
        }
        let sig = INTERRUPTED.load(Ordering::SeqCst);
        if sig != 0 && failure.is_none() {
            failure = Some(RankFailure {
                rank: statuses.iter().position(Option::is_none).unwrap_or(0),
                status: format!("launcher interrupted by signal {sig}"),
            });
        }
        if failure.is_some() && !killed {
            killed = true;
            for c in children.0.iter_mut().flatten() {
                kill_rank(c);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(children);
    drop(_rm);
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
    restore_signals(old_handlers);
    let output = cap
        .map(|c| std::mem::take(&mut *c.lock().unwrap_or_else(|e| e.into_inner())))
        .unwrap_or_default();
    Ok(LaunchOutcome {
        statuses,
        failure,
        rendezvous_dir: dir,
        output,
    })
}
