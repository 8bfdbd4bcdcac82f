//! Peer liveness. Pids are exchanged at bootstrap; each peer is watched through a pidfd (which
//! becomes readable when the process exits, zombie or not) or, on kernels without pidfd, with
//! `kill(pid, 0)`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Watches a set of peer processes.
#[derive(Debug, Default)]
pub struct Monitor {
    peers: Vec<Watched>,
}

#[derive(Debug)]
struct Watched {
    rank: usize,
    pid: i32,
    pidfd: Option<OwnedFd>,
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: raw syscall with plain integer arguments; result checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just handed us this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // pidfd_open does not set CLOEXEC-free semantics ambiguously: it is always O_CLOEXEC.
    Some(fd)
}

impl Monitor {
    /// Watches `(global rank, pid)` pairs; this process itself is skipped.
    pub fn new(peers: impl IntoIterator<Item = (usize, i32)>) -> Self {
        let me = std::process::id() as i32;
        Monitor {
            peers: peers
                .into_iter()
                .filter(|&(_, pid)| pid != me && pid > 0)
                .map(|(rank, pid)| Watched {
                    rank,
                    pid,
                    pidfd: pidfd_open(pid),
                })
                .collect(),
        }
    }

    /// Pid of a watched global rank.
    pub fn pid_of(&self, rank: usize) -> Option<i32> {
        self.peers.iter().find(|w| w.rank == rank).map(|w| w.pid)
    }

    /// Whether the process of global rank `rank` is gone (false for unknown ranks).
    pub fn is_dead(&self, rank: usize) -> bool {
        self.peers.iter().find(|w| w.rank == rank).is_some_and(dead)
    }

    /// The first dead rank among `ranks`, with its pid.
    pub fn first_dead(&self, ranks: impl IntoIterator<Item = usize>) -> Option<(usize, i32)> {
        for r in ranks {
            if let Some(w) = self.peers.iter().find(|w| w.rank == r) {
                if dead(w) {
                    return Some((w.rank, w.pid));
                }
            }
        }
        None
    }
}

fn dead(w: &Watched) -> bool {
    match &w.pidfd {
        Some(fd) => {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: polling one valid descriptor without blocking.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            n > 0 && (p.revents & (libc::POLLIN | libc::POLLHUP)) != 0
        }
        None => {
            // SAFETY: signal 0 only checks existence.
            let r = unsafe { libc::kill(w.pid, 0) };
            r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_exited_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let m = Monitor::new([(1, child.id() as i32)]);
        assert!(!m.is_dead(1));
        child.kill().unwrap();
        // The pidfd is readable as soon as the child exits, even before it is reaped.
        let t = std::time::Instant::now();
        while !m.is_dead(1) {
            assert!(t.elapsed().as_secs() < 5);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(m.first_dead([0, 1]), Some((1, child.id() as i32)));
        child.wait().unwrap();
    }
}
