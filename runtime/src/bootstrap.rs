//! Local bootstrap: the ranks of one node exchange their heap segments as memfd descriptors over
//! a `SOCK_SEQPACKET` Unix socket (SCM_RIGHTS). Local rank 0 listens; every other local rank
//! sends `hello` with its descriptor; rank 0 answers each with the full table and every
//! descriptor. Every step is bounded by the rendezvous timeout and a timeout names the ranks
//! that never showed up.
//!
//! **Where the ranks meet** ([`Endpoint`]): `symsched launch` hands its ranks a random 128-bit
//! key and they meet on the *abstract* socket `@symsched-<key>` — nothing on the file system, so
//! nothing is left behind whatever kills the launcher or the ranks, and nobody who does not know
//! the key can find it. Ranks started by torchrun meet in a directory derived from the job id
//! and port inside a *private* per-user base directory ([`private_base`]): a base another user
//! pre-created is skipped (never waited on), so a predictable name cannot be hijacked or used to
//! block the job. Both ends check the other's credentials (`SO_PEERCRED`): only processes of
//! this user take part.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{RankList, RuntimeError};

/// Name of the socket inside the rendezvous directory.
pub const SOCKET_NAME: &str = "rdv.sock";
/// Most descriptors one message can carry (kernel SCM_MAX_FD is 253).
const MAX_FDS: usize = 250;

/// What one local rank tells the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Global rank.
    pub rank: usize,
    /// Process id (for liveness checks).
    pub pid: i32,
    /// Segment size.
    pub heap_size: u64,
    /// Node identity.
    pub node_id: String,
}

impl PeerInfo {
    fn encode(&self) -> String {
        let node: String = self
            .node_id
            .chars()
            .map(|c| if c == '\n' { ' ' } else { c })
            .collect();
        format!("{}\t{}\t{}\t{}", self.rank, self.pid, self.heap_size, node)
    }

    fn decode(line: &str) -> Option<Self> {
        let mut it = line.splitn(4, '\t');
        Some(PeerInfo {
            rank: it.next()?.parse().ok()?,
            pid: it.next()?.parse().ok()?,
            heap_size: it.next()?.parse().ok()?,
            node_id: it.next()?.to_string(),
        })
    }
}

/// The outcome of the exchange: every local rank's info and segment descriptor, ordered by
/// local rank.
#[derive(Debug)]
pub struct Exchanged {
    /// Local ranks' info.
    pub peers: Vec<PeerInfo>,
    /// Their segment descriptors (this rank's own included).
    pub fds: Vec<OwnedFd>,
    /// A random number chosen by local rank 0, identical on every local rank: names this
    /// incarnation of the job so group ids of different runs never collide.
    pub nonce: u64,
}

/// A random 64-bit number from the kernel.
pub fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writing 8 bytes into a u64.
    let n = unsafe { libc::getrandom(&mut v as *mut u64 as *mut libc::c_void, 8, 0) };
    if n != 8 {
        // Entropy is only used to tell incarnations apart; time and pid are enough then.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ ((std::process::id() as u64) << 32);
    }
    v
}

fn sock() -> Result<OwnedFd, RuntimeError> {
    // SAFETY: plain socket creation; result checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(RuntimeError::last_os("socket(AF_UNIX, SOCK_SEQPACKET)"));
    }
    // SAFETY: fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where the local ranks of a job meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The socket `rdv.sock` in this private directory.
    Dir(PathBuf),
    /// The abstract socket with this name (no file system entry).
    Abstract(String),
}

impl Endpoint {
    /// A printable description for messages (an abstract name is shortened: it is a secret).
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Dir(d) => d.display().to_string(),
            Endpoint::Abstract(n) => {
                format!(
                    "abstract socket @{}…",
                    n.chars().take(17).collect::<String>()
                )
            }
        }
    }
}

fn sockaddr(ep: &Endpoint) -> Result<(libc::sockaddr_un, libc::socklen_t), RuntimeError> {
    // SAFETY: zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let (bytes, lead): (Vec<u8>, usize) = match ep {
        Endpoint::Dir(d) => (d.join(SOCKET_NAME).into_os_string().into_vec(), 0),
        // Abstract names start with a NUL byte and are not NUL-terminated.
        Endpoint::Abstract(n) => (n.as_bytes().to_vec(), 1),
    };
    if lead + bytes.len() >= addr.sun_path.len() {
        return Err(RuntimeError::InvalidArgument(format!(
            "rendezvous socket {} is longer than {} bytes",
            ep.describe(),
            addr.sun_path.len() - 1
        )));
    }
    for (d, s) in addr.sun_path[lead..].iter_mut().zip(&bytes) {
        *d = *s as libc::c_char;
    }
    // A path counts its terminating NUL, an abstract name its leading one.
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// Runs a closure when dropped.
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Refuses a connection whose other end is not a process of this user (`SO_PEERCRED`).
fn check_peer_user(fd: RawFd, rank: usize, who: &str) -> Result<(), RuntimeError> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a local ucred of the advertised size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(RuntimeError::last_os(
            "SO_PEERCRED on the rendezvous socket",
        ));
    }
    // SAFETY: geteuid never fails.
    let me = unsafe { libc::geteuid() };
    if cred.uid != me {
        return Err(RuntimeError::Rendezvous {
            rank,
            reason: format!(
                "{who} (pid {}) runs as uid {}, not as this job's uid {me}: refused",
                cred.pid, cred.uid
            ),
        });
    }
    Ok(())
}

/// Waits until `fd` is readable or `deadline` passes (true = readable).
fn poll_in(fd: RawFd, deadline: Instant) -> Result<bool, RuntimeError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(RuntimeError::io("poll on the rendezvous socket", e));
        }
        return Ok(n > 0);
    }
}

fn send_msg(fd: RawFd, data: &[u8], fds: &[RawFd]) -> Result<(), RuntimeError> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
    let mut cbuf = vec![0u8; space.max(1)];
    // SAFETY: msghdr zeroed then filled with valid pointers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer has room for one cmsg carrying `fds`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(c) as *mut RawFd,
                fds.len(),
            );
        }
    }
    // SAFETY: msg is valid for the call.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 || n as usize != data.len() {
        return Err(RuntimeError::last_os("sendmsg on the rendezvous socket"));
    }
    Ok(())
}

fn recv_msg(fd: RawFd) -> Result<(Vec<u8>, Vec<OwnedFd>), RuntimeError> {
    let mut buf = vec![0u8; 1 << 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let space =
        unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: msghdr zeroed then filled with valid buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: valid msghdr; CMSG_CLOEXEC so received fds are not inherited by children.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(RuntimeError::last_os("recvmsg on the rendezvous socket"));
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(RuntimeError::Rendezvous {
            rank: usize::MAX,
            reason: "rendezvous message truncated".into(),
        });
    }
    buf.truncate(n as usize);
    Ok((buf, fds))
}

/// Exchanges segments among the `local_world` ranks of this node through the socket in `dir`
/// (see [`exchange_at`]).
pub fn exchange(
    dir: &Path,
    me: &PeerInfo,
    my_fd: RawFd,
    local_rank: usize,
    local_world: usize,
    first_rank: usize,
    timeout: Duration,
) -> Result<Exchanged, RuntimeError> {
    exchange_at(
        &Endpoint::Dir(dir.to_path_buf()),
        me,
        my_fd,
        local_rank,
        local_world,
        first_rank,
        timeout,
    )
}

/// Exchanges segments among the `local_world` ranks of this node. `me` is this rank's info,
/// `first_rank` the global rank of local rank 0, `ep` where they meet.
pub fn exchange_at(
    ep: &Endpoint,
    me: &PeerInfo,
    my_fd: RawFd,
    local_rank: usize,
    local_world: usize,
    first_rank: usize,
    timeout: Duration,
) -> Result<Exchanged, RuntimeError> {
    if local_world > MAX_FDS {
        return Err(RuntimeError::Rendezvous {
            rank: me.rank,
            reason: format!("{local_world} local ranks exceed the supported {MAX_FDS}"),
        });
    }
    let deadline = Instant::now() + timeout;
    if local_world == 1 {
        // SAFETY: duplicating our own descriptor.
        let dup = unsafe { libc::fcntl(my_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(RuntimeError::last_os("dup of the heap segment"));
        }
        return Ok(Exchanged {
            peers: vec![me.clone()],
            // SAFETY: fresh descriptor.
            fds: vec![unsafe { OwnedFd::from_raw_fd(dup) }],
            nonce: random_u64(),
        });
    }
    let r = if local_rank == 0 {
        serve(ep, me, my_fd, local_world, first_rank, deadline, timeout)
    } else {
        join(ep, me, my_fd, local_world, first_rank, deadline, timeout)
    };
    match &r {
        Ok(_) => tracing::debug!(rank = me.rank, at = %ep.describe(), "segments exchanged"),
        Err(e) => {
            tracing::error!(rank = me.rank, at = %ep.describe(), error = %e, "bootstrap failed")
        }
    }
    r
}

fn serve(
    ep: &Endpoint,
    me: &PeerInfo,
    my_fd: RawFd,
    local_world: usize,
    first_rank: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<Exchanged, RuntimeError> {
    let listener = sock()?;
    let (addr, len) = sockaddr(ep)?;
    let path = match ep {
        Endpoint::Dir(d) => Some(d.join(SOCKET_NAME)),
        Endpoint::Abstract(_) => None,
    };
    if let Some(p) = &path {
        // A socket left by a killed run of the same job (the directory is private: only this
        // user's processes can have made it).
        let _ = std::fs::remove_file(p);
    }
    // SAFETY: valid address.
    if unsafe {
        libc::bind(
            listener.as_raw_fd(),
            &addr as *const _ as *const libc::sockaddr,
            len,
        )
    } != 0
    {
        return Err(RuntimeError::last_os(format!("bind {}", ep.describe())));
    }
    let _unlink = path.map(Unlink);
    // SAFETY: valid listening socket.
    if unsafe { libc::listen(listener.as_raw_fd(), local_world as i32) } != 0 {
        return Err(RuntimeError::last_os("listen on the rendezvous socket"));
    }
    let mut infos: Vec<Option<PeerInfo>> = vec![None; local_world];
    let mut fds: Vec<Option<OwnedFd>> = (0..local_world).map(|_| None).collect();
    let mut conns: Vec<OwnedFd> = Vec::new();
    infos[0] = Some(me.clone());
    // SAFETY: duplicating our own descriptor.
    let dup = unsafe { libc::fcntl(my_fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(RuntimeError::last_os("dup of the heap segment"));
    }
    // SAFETY: fresh descriptor.
    fds[0] = Some(unsafe { OwnedFd::from_raw_fd(dup) });
    let missing = |infos: &[Option<PeerInfo>]| {
        RankList(
            infos
                .iter()
                .enumerate()
                .filter(|(_, i)| i.is_none())
                .map(|(l, _)| first_rank + l)
                .collect(),
        )
    };
    let refused = std::cell::Cell::new(0u64);
    let _report = Defer(|| {
        if refused.get() > 1 {
            let refused = refused.get();
            tracing::warn!(
                rank = me.rank,
                refused,
                "foreign rendezvous connections refused"
            );
        }
    });
    while infos.iter().any(Option::is_none) {
        if !poll_in(listener.as_raw_fd(), deadline)? {
            let missing = missing(&infos);
            // Tell the ranks that did join who is missing, so every rank reports the same.
            let note = format!(
                "missing\t{}",
                missing
                    .0
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            for c in &conns {
                let _ = send_msg(c.as_raw_fd(), note.as_bytes(), &[]);
            }
            return Err(RuntimeError::RendezvousTimeout {
                rank: me.rank,
                step: "hello (local rank 0 waiting for its peers)".into(),
                dir: ep.describe(),
                timeout_ms: timeout.as_millis() as u64,
                missing,
            });
        }
        // SAFETY: accepting on a valid listener.
        let c = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if c < 0 {
            continue;
        }
        // SAFETY: fresh descriptor.
        let c = unsafe { OwnedFd::from_raw_fd(c) };
        if let Err(e) = check_peer_user(
            c.as_raw_fd(),
            me.rank,
            "a process connecting to the rendezvous",
        ) {
            // Not one of ours: drop it and keep listening (it must not block the job). Said
            // once, then counted: a flood must not flood the log too.
            if refused.get() == 0 {
                tracing::warn!(rank = me.rank, error = %e, "foreign rendezvous connection refused");
            }
            refused.set(refused.get() + 1);
            continue;
        }
        if !poll_in(c.as_raw_fd(), deadline)? {
            continue;
        }
        let (data, mut got) = recv_msg(c.as_raw_fd())?;
        let text = String::from_utf8_lossy(&data);
        let info = text.strip_prefix("hello\t").and_then(PeerInfo::decode);
        let (Some(info), 1) = (info, got.len()) else {
            return Err(RuntimeError::Rendezvous {
                rank: me.rank,
                reason: format!("malformed hello `{text}` with {} descriptors", got.len()),
            });
        };
        let Some(l) = info
            .rank
            .checked_sub(first_rank)
            .filter(|&l| l < local_world)
        else {
            return Err(RuntimeError::Rendezvous {
                rank: me.rank,
                reason: format!("rank {} is not a local rank of this node", info.rank),
            });
        };
        if infos[l].is_some() {
            return Err(RuntimeError::Rendezvous {
                rank: me.rank,
                reason: format!(
                    "rank {} joined twice (two processes with the same RANK?)",
                    info.rank
                ),
            });
        }
        if info.heap_size != me.heap_size {
            return Err(RuntimeError::Rendezvous {
                rank: me.rank,
                reason: format!(
                    "rank {} has a segment of {} bytes but rank {} has {} (set SYMMETRIC_MEMORY_HEAP_SIZE and SYMSCHED_SCRATCH_SIZE alike on every rank)",
                    info.rank, info.heap_size, me.rank, me.heap_size
                ),
            });
        }
        infos[l] = Some(info);
        fds[l] = got.pop();
        conns.push(c);
    }
    let peers: Vec<PeerInfo> = infos.into_iter().map(|i| i.expect("all present")).collect();
    let fds: Vec<OwnedFd> = fds.into_iter().map(|f| f.expect("all present")).collect();
    let nonce = random_u64();
    let mut table = format!("table\t{nonce}");
    for p in &peers {
        table.push('\n');
        table.push_str(&p.encode());
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    for c in &conns {
        send_msg(c.as_raw_fd(), table.as_bytes(), &raw)?;
    }
    Ok(Exchanged { peers, fds, nonce })
}

fn join(
    ep: &Endpoint,
    me: &PeerInfo,
    my_fd: RawFd,
    local_world: usize,
    first_rank: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<Exchanged, RuntimeError> {
    let (addr, len) = sockaddr(ep)?;
    let dir = ep.describe();
    let server_missing = |step: &str| RuntimeError::RendezvousTimeout {
        rank: me.rank,
        step: step.into(),
        dir: dir.clone(),
        timeout_ms: timeout.as_millis() as u64,
        missing: RankList(vec![first_rank]),
    };
    let conn = loop {
        let s = sock()?;
        // SAFETY: valid address.
        if unsafe {
            libc::connect(
                s.as_raw_fd(),
                &addr as *const _ as *const libc::sockaddr,
                len,
            )
        } == 0
        {
            break s;
        }
        if Instant::now() >= deadline {
            return Err(server_missing("connect (local rank 0 never listened)"));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    check_peer_user(
        conn.as_raw_fd(),
        me.rank,
        "the process listening on the rendezvous socket",
    )?;
    let hello = format!("hello\t{}", me.encode());
    send_msg(conn.as_raw_fd(), hello.as_bytes(), &[my_fd])?;
    // A little longer than local rank 0's own deadline, so its "missing" note arrives first.
    let table_step = "table (waiting for local rank 0 to collect every local rank)";
    if !poll_in(conn.as_raw_fd(), deadline + Duration::from_secs(1))? {
        return Err(RuntimeError::RendezvousTimeout {
            rank: me.rank,
            step: table_step.into(),
            dir,
            timeout_ms: timeout.as_millis() as u64,
            missing: RankList(Vec::new()),
        });
    }
    let (data, fds) = recv_msg(conn.as_raw_fd())?;
    let text = String::from_utf8_lossy(&data);
    if let Some(list) = text.strip_prefix("missing\t") {
        return Err(RuntimeError::RendezvousTimeout {
            rank: me.rank,
            step: table_step.into(),
            dir,
            timeout_ms: timeout.as_millis() as u64,
            missing: RankList(list.split(',').filter_map(|r| r.parse().ok()).collect()),
        });
    }
    let mut lines = text.lines();
    let nonce = lines
        .next()
        .and_then(|l| l.strip_prefix("table\t"))
        .and_then(|n| n.parse::<u64>().ok());
    let Some(nonce) = nonce else {
        return Err(RuntimeError::Rendezvous {
            rank: me.rank,
            reason: if data.is_empty() {
                format!("local rank 0 (rank {first_rank}) closed the connection (it failed or timed out)")
            } else {
                format!("unexpected message `{text}`")
            },
        });
    };
    let peers: Option<Vec<PeerInfo>> = lines.map(PeerInfo::decode).collect();
    match peers {
        Some(peers) if peers.len() == local_world && fds.len() == local_world => {
            if peers.get(me.rank - first_rank) != Some(me) {
                return Err(RuntimeError::Rendezvous {
                    rank: me.rank,
                    reason: "the table does not list this rank where expected".into(),
                });
            }
            Ok(Exchanged { peers, fds, nonce })
        }
        _ => Err(RuntimeError::Rendezvous {
            rank: me.rank,
            reason: format!("malformed table with {} descriptors", fds.len()),
        }),
    }
}

struct Unlink(PathBuf);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Creates `dir` with mode 0700, or checks that an existing one is ours and private.
pub fn ensure_private_dir(dir: &Path) -> Result<(), RuntimeError> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| RuntimeError::InvalidArgument(format!("NUL in path {}", dir.display())))?;
    // SAFETY: valid C string.
    if unsafe { libc::mkdir(c.as_ptr(), 0o700) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EEXIST) {
        return Err(RuntimeError::io(format!("mkdir {}", dir.display()), e));
    }
    check_private_dir(dir)
}

/// Checks that `dir` is a directory (not a symbolic link) owned by this user that nobody else
/// can read or write (mode 0700 or stricter).
pub fn check_private_dir(dir: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(dir)
        .map_err(|e| RuntimeError::io(format!("stat {}", dir.display()), e))?;
    // SAFETY: geteuid never fails.
    let uid = unsafe { libc::geteuid() };
    if !md.is_dir() || md.uid() != uid || md.mode() & 0o077 != 0 {
        let kind = if md.file_type().is_symlink() {
            "a symbolic link"
        } else if md.is_dir() {
            "a directory"
        } else {
            "not a directory"
        };
        return Err(RuntimeError::Unavailable(format!(
            "rendezvous directory {} must be a directory owned by uid {uid} with mode 0700 (found {kind} of uid {}, mode {:o})",
            dir.display(),
            md.uid(),
            md.mode() & 0o7777
        )));
    }
    Ok(())
}

/// A candidate base directory for derived rendezvous directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseCandidate {
    /// Use this directory if it exists and is private to this user (e.g. `$XDG_RUNTIME_DIR`).
    Existing(PathBuf),
    /// Create this directory (0700) or use it if it already is private to this user.
    Create(PathBuf),
}

/// The first usable candidate: a directory only this user can enter, so names inside it may be
/// predictable. A candidate another user created (or with a loose mode) is skipped with a
/// warning — never waited on — so pre-creating it cannot block the job. Every local rank
/// evaluates the same list and reaches the same answer: once one of them created a candidate,
/// it is theirs for good (`/tmp` is sticky).
pub fn private_base(candidates: &[BaseCandidate]) -> Result<PathBuf, RuntimeError> {
    let mut why = Vec::new();
    for c in candidates {
        let (dir, r) = match c {
            BaseCandidate::Existing(d) => (d, check_private_dir(d)),
            BaseCandidate::Create(d) => (d, ensure_private_dir(d)),
        };
        match r {
            Ok(()) => return Ok(dir.clone()),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "rendezvous base skipped");
                why.push(e.to_string());
            }
        }
    }
    Err(RuntimeError::Unavailable(format!(
        "no private directory for the rendezvous (set SYMSCHED_RENDEZVOUS_DIR): {}",
        why.join("; ")
    )))
}

/// Creates a fresh private directory `<base>/symsched-XXXXXX` (mode 0700, random name).
pub fn make_private_dir(base: &Path) -> Result<PathBuf, RuntimeError> {
    let mut tmpl = base.join("symsched-XXXXXX").into_os_string().into_vec();
    tmpl.push(0);
    // SAFETY: NUL-terminated writable template.
    let p = unsafe { libc::mkdtemp(tmpl.as_mut_ptr() as *mut libc::c_char) };
    if p.is_null() {
        return Err(RuntimeError::last_os(format!(
            "mkdtemp in {}",
            base.display()
        )));
    }
    tmpl.pop();
    Ok(PathBuf::from(std::ffi::OsString::from_vec(tmpl)))
}
