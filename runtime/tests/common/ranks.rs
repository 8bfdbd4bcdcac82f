//! Rank processes started by the test itself instead of the launcher, for tests that kill a
//! rank and watch the others carry on (the launcher stops every rank as soon as one dies).
//! Each rank is this test binary re-executed to run only its `rank_entry` test, with the same
//! environment the launcher gives (a directory-free rendezvous, so nothing is left on disk),
//! logs to its own stdout, and dies with the test's thread (`PR_SET_PDEATHSIG`). Dropping a
//! [`RankProcesses`] kills and reaps every rank still running, so a failing test leaves no
//! process behind.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ranks this test started; see the module docs.
pub struct RankProcesses {
    kids: Vec<Child>,
    /// Each rank's exit status, once reaped.
    statuses: Vec<Option<ExitStatus>>,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

impl RankProcesses {
    /// Starts `n` ranks of this test binary's `rank_entry` with `role_var` set to `role`,
    /// waits that give up after `signal_timeout_ms` and a 16 MiB heap.
    pub fn start(n: usize, role_var: &str, role: &str, signal_timeout_ms: u64) -> RankProcesses {
        let exe = std::env::current_exe().expect("test binary path");
        let key = format!(
            "{:016x}{:016x}",
            symsched_runtime::bootstrap::random_u64(),
            symsched_runtime::bootstrap::random_u64()
        );
        let job = format!("test-{}-{}", std::process::id(), &key[..8]);
        let mut ranks = RankProcesses {
            kids: Vec::new(),
            statuses: vec![None; n],
            lines: Arc::new(Mutex::new(Vec::new())),
            readers: Vec::new(),
        };
        for r in 0..n {
            let mut cmd = Command::new(&exe);
            cmd.args(["rank_entry", "--exact", "--nocapture", "--test-threads=1"])
                .env(role_var, role)
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("LOCAL_WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", "29500")
                .env("SYMSCHED_RENDEZVOUS_KEY", &key)
                .env_remove("SYMSCHED_RENDEZVOUS_DIR")
                .env("SYMSCHED_JOB_ID", &job)
                .env(
                    "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS",
                    signal_timeout_ms.to_string(),
                )
                .env("SYMMETRIC_MEMORY_HEAP_SIZE", (16u64 << 20).to_string())
                .env("SHMEM_LOG_TO_STDOUT", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            // SAFETY: prctl is async-signal-safe; the rank dies if the thread that started it
            // (this test's) ends without reaping it.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            // On failure, dropping `ranks` stops the ranks already started.
            let mut kid = cmd.spawn().expect("starts a rank");
            let out = kid.stdout.take().expect("piped stdout");
            let err = kid.stderr.take().expect("piped stderr");
            ranks.kids.push(kid);
            ranks.readers.push(collect(r, out, ranks.lines.clone()));
            ranks.readers.push(collect(r, err, ranks.lines.clone()));
        }
        ranks
    }

    /// Process id of rank `r`.
    pub fn pid(&self, r: usize) -> u32 {
        self.kids[r].id()
    }

    /// Waits up to `timeout` until rank `r` runs a thread named `name`; panics with every
    /// rank's output if it does not (or exits first).
    pub fn wait_for_thread(&mut self, r: usize, name: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if thread_names(self.pid(r)).iter().any(|t| t == name) {
                return;
            }
            if let Ok(Some(st)) = self.kids[r].try_wait() {
                self.statuses[r] = Some(st);
                panic!(
                    "rank {r} ended ({st}) before running thread `{name}`:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "rank {r} ran no thread `{name}` within {timeout:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends SIGKILL to rank `r` (its own pid: a child of this process, not reaped yet).
    pub fn kill(&self, r: usize) {
        assert!(self.statuses[r].is_none(), "rank {r} was reaped already");
        // SAFETY: signalling our own unreaped child; its pid cannot have been reused.
        let rc = unsafe { libc::kill(self.pid(r) as i32, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill rank {r}: {}", std::io::Error::last_os_error());
    }

    /// Waits up to `timeout` for rank `r` to exit and returns its status; panics with every
    /// rank's output if it does not.
    pub fn wait(&mut self, r: usize, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.statuses[r] {
                return st;
            }
            if let Some(st) = self.kids[r].try_wait().expect("try_wait") {
                self.statuses[r] = Some(st);
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "rank {r} still runs after {timeout:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every line the ranks wrote so far, each prefixed with `[rank r]`. Once every rank was
    /// reaped, what was still in the pipes is read first (bounded: a pipe some escaped
    /// descendant keeps open does not hang the test).
    pub fn output(&mut self) -> String {
        if self.statuses.iter().all(Option::is_some) {
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.readers.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }
}

impl Drop for RankProcesses {
    fn drop(&mut self) {
        for (kid, st) in self.kids.iter_mut().zip(&self.statuses) {
            if st.is_none() {
                // Child::kill sends SIGKILL to the child's own pid; then it is reaped.
                let _ = kid.kill();
                let _ = kid.wait();
            }
        }
    }
}

fn collect(
    r: usize,
    src: impl Read + Send + 'static,
    to: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(src).lines() {
            let Ok(line) = line else { break };
            to.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("[rank {r}] {line}"));
        }
    })
}

/// The names of the threads of process `pid` (empty once it is gone).
pub fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim_end().to_string())
        .collect()
}

/// The names in `/dev/shm`.
pub fn shm_entries() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
