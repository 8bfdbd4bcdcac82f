//! `symsched launch` end to end: how it ends (success, a rank failure, its timeout, a signal)
//! and what it leaves behind (no rank, no rendezvous file). Ranks are `sh` processes that
//! print their pid and then become `sleep` (`exec`, so the pid is the sleeping process).
//! Every wait is bounded; stragglers are killed by pid.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

fn launcher(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_symsched"))
        .arg("launch")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("symsched launch starts")
}

fn send(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(st.success(), "kill {sig} {pid}");
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
}

fn wait_bounded(c: &mut Child, limit: Duration) -> ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().expect("try_wait") {
            return st;
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("symsched launch did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads `n` lines `[rank k] pid=P key=K` and returns the pids and the keys.
fn rank_pids(c: &mut Child, n: usize) -> (Vec<u32>, Vec<String>) {
    let out = c.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let (mut pids, mut keys) = (Vec::new(), Vec::new());
    while pids.len() < n {
        let Some(Ok(l)) = lines.next() else { break };
        let Some(rest) = l.split("pid=").nth(1) else {
            continue;
        };
        let mut it = rest.split(" key=");
        pids.push(it.next().and_then(|p| p.trim().parse().ok()).expect("pid"));
        keys.push(it.next().unwrap_or("").trim().to_string());
    }
    // Keep draining so the launcher never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (pids, keys)
}

fn gone_within(pids: &[u32], limit: Duration) -> Duration {
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        if t.elapsed() > limit {
            for &p in pids.iter().filter(|&&p| alive(p)) {
                let _ = Command::new("kill")
                    .args(["-KILL", &p.to_string()])
                    .status();
            }
            panic!("ranks {pids:?} outlived the launcher");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    t.elapsed()
}

const SLEEPER: &str = "echo pid=$$ key=$SYMSCHED_RENDEZVOUS_KEY; exec sleep 30";

#[test]
fn sigterm_reports_an_interruption_and_stops_every_rank() {
    let mut c = launcher(&["-n", "2", "--", "sh", "-c", SLEEPER]);
    let (pids, _) = rank_pids(&mut c, 2);
    assert_eq!(pids.len(), 2);
    send(c.id(), "-TERM");
    let st = wait_bounded(&mut c, Duration::from_secs(20));
    let mut err = String::new();
    c.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    assert_eq!(st.code(), Some(128 + 15), "{err}");
    assert!(err.contains("interrupted by signal 15"), "{err}");
    assert!(err.contains("stopped ranks [0, 1]"), "{err}");
    assert!(
        !err.contains("failed"),
        "an interruption is not a rank failure: {err}"
    );
    gone_within(&pids, Duration::from_secs(5));
}

#[test]
fn sigkill_of_the_launcher_leaves_no_rank_and_no_rendezvous() {
    let mut c = launcher(&["-n", "2", "--", "sh", "-c", SLEEPER]);
    let (pids, keys) = rank_pids(&mut c, 2);
    assert_eq!(pids.len(), 2);
    assert!(
        keys.iter().all(|k| k.len() == 32 && *k == keys[0]),
        "{keys:?}"
    );
    send(c.id(), "-KILL");
    let _ = c.wait();
    let t = gone_within(&pids, Duration::from_secs(5));
    assert!(t < Duration::from_secs(5));
    // Nothing on the file system carries the job's key, and no socket is bound to it.
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    assert!(!unix.contains(&keys[0]), "socket left behind");
    let leftovers: Vec<String> = std::fs::read_dir("/tmp")
        .expect("/tmp")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&keys[0][..8]))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_failing_rank_is_named_and_exits_1() {
    let mut c = launcher(&[
        "-n",
        "3",
        "--",
        "sh",
        "-c",
        "if [ $RANK = 1 ]; then exit 3; fi; exec sleep 30",
    ]);
    let st = wait_bounded(&mut c, Duration::from_secs(20));
    let mut err = String::new();
    c.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("rank 1 failed (exit code 3)"), "{err}");
    assert!(err.contains("stopped ranks [0, 2]"), "{err}");
}

#[test]
fn the_timeout_is_reported_as_such_and_exits_124() {
    let mut c = launcher(&["-n", "2", "--timeout", "1", "--", "sleep", "30"]);
    let st = wait_bounded(&mut c, Duration::from_secs(20));
    let mut err = String::new();
    c.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    assert_eq!(st.code(), Some(124), "{err}");
    assert!(err.contains("timed out after 1000 ms"), "{err}");
    assert!(!err.contains("failed"), "{err}");
}

#[test]
fn every_rank_succeeding_exits_0() {
    let mut c = launcher(&[
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "test -n \"$SYMSCHED_RENDEZVOUS_KEY\"",
    ]);
    let st = wait_bounded(&mut c, Duration::from_secs(20));
    assert!(st.success());
}
