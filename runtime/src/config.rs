//! Environment configuration: torchrun-compatible rank variables and the runtime's own knobs.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::RuntimeError;

/// Default symmetric heap size per rank (virtual; pages are touched on use).
pub const DEFAULT_HEAP_SIZE: u64 = 1 << 30;
/// Default signal-wait deadline.
pub const DEFAULT_SIGNAL_TIMEOUT_MS: u64 = 300_000;
/// Default deadline of every rendezvous step.
pub const DEFAULT_RENDEZVOUS_TIMEOUT_MS: u64 = 60_000;

/// Heap size: `SYMMETRIC_MEMORY_HEAP_SIZE` (bytes).
pub const ENV_HEAP_SIZE: &str = "SYMMETRIC_MEMORY_HEAP_SIZE";
/// Signal timeout: `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`.
pub const ENV_SIGNAL_TIMEOUT: &str = "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS";
/// Rendezvous step timeout: `SYMSCHED_RENDEZVOUS_TIMEOUT_MS`.
pub const ENV_RENDEZVOUS_TIMEOUT: &str = "SYMSCHED_RENDEZVOUS_TIMEOUT_MS";
/// Private rendezvous directory (set by `symsched launch`).
pub const ENV_RENDEZVOUS_DIR: &str = "SYMSCHED_RENDEZVOUS_DIR";
/// Job id used to derive the rendezvous directory when it is not given.
pub const ENV_JOB_ID: &str = "SYMSCHED_JOB_ID";
/// Node identity override (tests emulate several nodes on one host).
pub const ENV_NODE_ID: &str = "SYMSCHED_NODE_ID";

/// How this process joins the job: its ranks and where local ranks meet.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Global rank (`RANK`).
    pub rank: usize,
    /// Number of ranks in the job (`WORLD_SIZE`).
    pub world_size: usize,
    /// Rank among the processes of this node (`LOCAL_RANK`).
    pub local_rank: usize,
    /// Number of processes on this node (`LOCAL_WORLD_SIZE`).
    pub local_world_size: usize,
    /// Private directory holding the rendezvous socket (used only during bootstrap).
    pub rendezvous_dir: PathBuf,
    /// Whether local rank 0 creates the directory (and removes it right after bootstrap).
    pub owns_rendezvous_dir: bool,
    /// Symmetric heap size in bytes (`SYMMETRIC_MEMORY_HEAP_SIZE`).
    pub heap_size: u64,
    /// Scratch arena per group in bytes (`SYMSCHED_SCRATCH_SIZE`).
    pub scratch_size: u64,
    /// Deadline of every signal wait.
    pub signal_timeout: Duration,
    /// Deadline of every rendezvous step.
    pub rendezvous_timeout: Duration,
    /// This process's node identity.
    pub node_id: String,
}

impl RuntimeConfig {
    /// A configuration for `rank` of `world_size` ranks, all on this node, meeting in `dir`
    /// (which the caller creates and removes). Knobs come from the environment.
    ///
    /// ```no_run
    /// # use symsched_runtime::RuntimeConfig;
    /// let cfg = RuntimeConfig::local(0, 1, "/tmp/my-rdv".into()).unwrap();
    /// assert_eq!(cfg.world_size, 1);
    /// ```
    pub fn local(rank: usize, world_size: usize, dir: PathBuf) -> Result<Self, RuntimeError> {
        if rank >= world_size {
            return Err(RuntimeError::RankOutsideWorld {
                rank,
                world: world_size,
            });
        }
        Ok(RuntimeConfig {
            rank,
            world_size,
            local_rank: rank,
            local_world_size: world_size,
            rendezvous_dir: dir,
            owns_rendezvous_dir: false,
            heap_size: heap_size_from_env()?,
            scratch_size: env_u64(
                crate::heap::ENV_SCRATCH_SIZE,
                crate::heap::DEFAULT_ARENA_BYTES,
            )?,
            signal_timeout: Duration::from_millis(env_u64(
                ENV_SIGNAL_TIMEOUT,
                DEFAULT_SIGNAL_TIMEOUT_MS,
            )?),
            rendezvous_timeout: Duration::from_millis(env_u64(
                ENV_RENDEZVOUS_TIMEOUT,
                DEFAULT_RENDEZVOUS_TIMEOUT_MS,
            )?),
            node_id: node_id(),
        })
    }

    /// Reads the torchrun variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
    /// `MASTER_ADDR`, `MASTER_PORT`). Without `SYMSCHED_RENDEZVOUS_DIR` the directory is
    /// `${XDG_RUNTIME_DIR:-/tmp}/symsched-<uid>-<job>-<MASTER_PORT>` where `<job>` is
    /// `SYMSCHED_JOB_ID`, else `TORCHELASTIC_RUN_ID`, else `default`; local rank 0 creates it
    /// (mode 0700) and removes it as soon as the segments are exchanged.
    pub fn from_env() -> Result<Self, RuntimeError> {
        let world_size = env_usize_req("WORLD_SIZE")?;
        let rank = env_usize_req("RANK")?;
        if world_size == 0 {
            return Err(RuntimeError::Env {
                var: "WORLD_SIZE",
                reason: "must be at least 1".into(),
            });
        }
        if rank >= world_size {
            return Err(RuntimeError::RankOutsideWorld {
                rank,
                world: world_size,
            });
        }
        let local_world_size = match std::env::var("LOCAL_WORLD_SIZE") {
            Ok(_) => env_usize_req("LOCAL_WORLD_SIZE")?,
            Err(_) => world_size,
        };
        let local_rank = match std::env::var("LOCAL_RANK") {
            Ok(_) => env_usize_req("LOCAL_RANK")?,
            Err(_) => rank % local_world_size.max(1),
        };
        if local_world_size == 0 || local_rank >= local_world_size || local_world_size > world_size
        {
            return Err(RuntimeError::Env {
                var: "LOCAL_RANK",
                reason: format!(
                    "local rank {local_rank} / local world size {local_world_size} inconsistent with world size {world_size}"
                ),
            });
        }
        if rank < local_rank || rank - local_rank + local_world_size > world_size {
            return Err(RuntimeError::Env {
                var: "RANK",
                reason: format!(
                    "local ranks must be contiguous global ranks (rank {rank}, local rank {local_rank}, local world {local_world_size})"
                ),
            });
        }
        let (dir, owns) = match std::env::var_os(ENV_RENDEZVOUS_DIR) {
            Some(d) if !d.is_empty() => (PathBuf::from(d), false),
            _ => {
                let port = std::env::var("MASTER_PORT").map_err(|_| RuntimeError::Env {
                    var: "MASTER_PORT",
                    reason: format!("needed to derive the rendezvous directory when {ENV_RENDEZVOUS_DIR} is not set"),
                })?;
                if port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) {
                    return Err(RuntimeError::Env {
                        var: "MASTER_PORT",
                        reason: format!("`{port}` is not a port number"),
                    });
                }
                let job = std::env::var(ENV_JOB_ID)
                    .or_else(|_| std::env::var("TORCHELASTIC_RUN_ID"))
                    .unwrap_or_else(|_| "default".into());
                let job: String = job
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .take(64)
                    .collect();
                // SAFETY: getuid never fails.
                let uid = unsafe { libc::getuid() };
                (
                    base_runtime_dir().join(format!("symsched-{uid}-{job}-{port}")),
                    true,
                )
            }
        };
        let mut cfg = RuntimeConfig::local(rank, world_size, dir)?;
        cfg.local_rank = local_rank;
        cfg.local_world_size = local_world_size;
        cfg.owns_rendezvous_dir = owns;
        Ok(cfg)
    }

    /// Global rank of local rank 0 on this node (local ranks are contiguous, as with torchrun).
    pub fn first_local_rank(&self) -> usize {
        self.rank - self.local_rank
    }
}

/// `$XDG_RUNTIME_DIR` when set and usable, else `/tmp`.
pub fn base_runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() && std::path::Path::new(&d).is_dir() => PathBuf::from(d),
        _ => PathBuf::from("/tmp"),
    }
}

/// `SYMMETRIC_MEMORY_HEAP_SIZE` or the 1 GiB default.
pub fn heap_size_from_env() -> Result<u64, RuntimeError> {
    env_u64(ENV_HEAP_SIZE, DEFAULT_HEAP_SIZE)
}

/// The signal-wait deadline from `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`.
pub fn signal_timeout_from_env() -> Result<Duration, RuntimeError> {
    Ok(Duration::from_millis(env_u64(
        ENV_SIGNAL_TIMEOUT,
        DEFAULT_SIGNAL_TIMEOUT_MS,
    )?))
}

/// This host's node identity: `SYMSCHED_NODE_ID`, else hostname + kernel boot id.
pub fn node_id() -> String {
    if let Ok(id) = std::env::var(ENV_NODE_ID) {
        if !id.is_empty() {
            return id;
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{host}/{boot}")
}

fn env_u64(var: &'static str, default: u64) -> Result<u64, RuntimeError> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse::<u64>().map_err(|e| RuntimeError::Env {
            var,
            reason: format!("`{v}` is not a non-negative integer ({e})"),
        }),
        _ => Ok(default),
    }
}

fn env_usize_req(var: &'static str) -> Result<usize, RuntimeError> {
    let v = std::env::var(var).map_err(|_| RuntimeError::Env {
        var,
        reason: "not set (launch with `symsched launch` or torchrun)".into(),
    })?;
    v.trim().parse::<usize>().map_err(|e| RuntimeError::Env {
        var,
        reason: format!("`{v}` is not a non-negative integer ({e})"),
    })
}
