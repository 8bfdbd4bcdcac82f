//! Environment configuration: torchrun-compatible rank variables and the runtime's own knobs.
//!
//! This is the runtime's one registry of environment knobs: each is read here, once, when a
//! [`RuntimeConfig`] (or, for in-process worlds, an [`ExecOptions`]) is built, validated — a
//! malformed value is a typed [`RuntimeError::Env`] naming the variable — and passed down as a
//! value; no module underneath reads the environment.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | required / `WORLD_SIZE` / `RANK % LOCAL_WORLD_SIZE` | torchrun rank variables ([`RuntimeConfig::from_env`]) |
//! | `MASTER_PORT`, `TORCHELASTIC_RUN_ID` | — | derive the rendezvous directory when it is not given |
//! | `SYMSCHED_RENDEZVOUS_DIR`, `SYMSCHED_JOB_ID` | derived | private rendezvous directory; job id naming it |
//! | `SYMSCHED_NODE_ID` | hostname + boot id | emulated node of a rank (hierarchical schedules) |
//! | `SYMMETRIC_MEMORY_HEAP_SIZE` | 1 GiB | symmetric heap bytes per rank |
//! | `SYMSCHED_SCRATCH_SIZE` | 256 MiB | scratch arena per group (same on every rank) |
//! | `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS` | 300000 | deadline of every signal wait (also of in-process worlds) |
//! | `SYMSCHED_RENDEZVOUS_TIMEOUT_MS` | 60000 | deadline of every rendezvous step |
//! | `SYMSCHED_LOG_DIR`, `HYPER_PARALLEL_SHMEM_LOG_LEVEL`, `SHMEM_LOG_TO_STDOUT` | see [`crate::log`] | logging |
//! | `SYMSCHED_FUSE` | `1` | `0` turns off the executor's reduce→put/cast and get→reduce fusion ([`ExecOptions::fuse`]) |
//! | `SYMSCHED_NT_COPY` | `1` | `0` turns off non-temporal stores for large plain moves into buffers no step reads ([`ExecOptions::nt_copy`]) |
//! | `SYMSCHED_NT_MIN_BYTES` | 1048576 | smallest move, in bytes, those stores are used for ([`ExecOptions::nt_min_bytes`]) |
//! | `SYMSCHED_A2A_LARGE_PULL` | `1` | `0`: alltoall chunks above the eager capacity of a symmetric send tensor take the header round + plan instead of being pulled in one round ([`ExecOptions::a2a_large_pull`]) |
//! | `SYMSCHED_TRACE` | unset | Chrome/Perfetto trace file of every executed step ([`ExecOptions::trace`]; empty is unset) |
//!
//! Switches take `0` or `1` (unset or empty: the default). The Python layer's own knobs are
//! listed in the README ("Environment knobs").

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
    /// The executor's knobs (see [`ExecOptions`]).
    pub exec: ExecOptions,
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
            exec: ExecOptions::from_env()?,
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

// ---------------------------------------------------------------------------------------------
// Executor knobs
// ---------------------------------------------------------------------------------------------

/// Executor fusion switch: `SYMSCHED_FUSE`.
pub const ENV_FUSE: &str = "SYMSCHED_FUSE";
/// Non-temporal copies switch: `SYMSCHED_NT_COPY`.
pub const ENV_NT_COPY: &str = "SYMSCHED_NT_COPY";
/// Smallest streamed move: `SYMSCHED_NT_MIN_BYTES`.
pub const ENV_NT_MIN_BYTES: &str = "SYMSCHED_NT_MIN_BYTES";
/// One-round pull of large symmetric alltoall chunks: `SYMSCHED_A2A_LARGE_PULL`.
pub const ENV_A2A_LARGE_PULL: &str = "SYMSCHED_A2A_LARGE_PULL";
/// Step trace file: `SYMSCHED_TRACE`.
pub const ENV_TRACE: &str = "SYMSCHED_TRACE";

/// Default of [`ExecOptions::nt_min_bytes`]: below it the destination likely stays in cache
/// and the ordinary copy wins.
///
/// Measured (2-rank alltoall, executor bench `alltoall_eager`, every move ≥ 128 KiB streamed
/// against none, time off ÷ on as min / median over rounds, two runs at load 6–8): 256 KiB
/// moves 0.92 / 1.03 and 1.28 / 0.89 (no gain); 512 KiB 0.96 / 1.27 and 1.92 / 1.10 (mixed);
/// 1 MiB 1.26 / 1.20 and 1.08 / 1.14; 2 MiB 1.09 / 1.13 and 0.91 / 1.19; 4 MiB 1.29 / 0.90
/// and 1.27 / 1.09. Earlier whole-perftest runs: 1.24–2.26× at 16–64 MiB messages. So 1 MiB
/// stays; 512 KiB is the candidate to re-measure on a quiet machine (`docs/performance.md`).
pub const DEFAULT_NT_MIN_BYTES: usize = 1 << 20;

/// The executor's knobs, read once into a value that is handed to the executor and, through
/// it, to every part that acts on one (the resolve passes, the backends, the eager channel,
/// the step trace). A [`RuntimeConfig`] carries the environment's; an executor may be given
/// others (`Executor::with_options`).
///
/// ```
/// use symsched_runtime::config::ExecOptions;
/// let opts = ExecOptions { fuse: false, ..ExecOptions::default() };
/// assert!(opts.nt_copy && !opts.fuse);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// Run a reduce and the puts/casts of its result as one pass, and let a reduce read the
    /// peer regions of the gets that feed it (`SYMSCHED_FUSE`; off only for A/B runs).
    pub fuse: bool,
    /// Use non-temporal stores for large plain moves whose destination no step reads
    /// (`SYMSCHED_NT_COPY`).
    pub nt_copy: bool,
    /// Smallest such move, in bytes (`SYMSCHED_NT_MIN_BYTES`).
    pub nt_min_bytes: usize,
    /// Pull the chunks of a symmetric alltoall send buffer above the eager capacity in the one
    /// round (`SYMSCHED_A2A_LARGE_PULL`); off takes the header round + plan for them.
    pub a2a_large_pull: bool,
    /// Record every executed step into this Chrome/Perfetto trace file (`SYMSCHED_TRACE`).
    pub trace: Option<PathBuf>,
}

impl Default for ExecOptions {
    /// Everything on, the measured streaming threshold, no trace.
    fn default() -> Self {
        ExecOptions {
            fuse: true,
            nt_copy: true,
            nt_min_bytes: DEFAULT_NT_MIN_BYTES,
            a2a_large_pull: true,
            trace: None,
        }
    }
}

impl ExecOptions {
    /// The knobs from the environment (see the table in the module docs); a malformed value is
    /// a [`RuntimeError::Env`].
    pub fn from_env() -> Result<ExecOptions, RuntimeError> {
        let d = ExecOptions::default();
        let nt_min = env_u64(ENV_NT_MIN_BYTES, d.nt_min_bytes as u64)?;
        Ok(ExecOptions {
            fuse: env_switch(ENV_FUSE, d.fuse)?,
            nt_copy: env_switch(ENV_NT_COPY, d.nt_copy)?,
            nt_min_bytes: usize::try_from(nt_min).map_err(|_| RuntimeError::Env {
                var: ENV_NT_MIN_BYTES,
                reason: format!("`{nt_min}` does not fit in a byte count"),
            })?,
            a2a_large_pull: env_switch(ENV_A2A_LARGE_PULL, d.a2a_large_pull)?,
            trace: std::env::var_os(ENV_TRACE)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
        })
    }
}

/// A `0`/`1` switch; unset or empty is `default`.
fn env_switch(var: &'static str, default: bool) -> Result<bool, RuntimeError> {
    match std::env::var(var) {
        Ok(v) => match v.trim() {
            "" => Ok(default),
            "0" => Ok(false),
            "1" => Ok(true),
            other => Err(RuntimeError::Env {
                var,
                reason: format!("`{other}` is not a switch (use 0 or 1)"),
            }),
        },
        Err(std::env::VarError::NotPresent) => Ok(default),
        Err(std::env::VarError::NotUnicode(_)) => Err(RuntimeError::Env {
            var,
            reason: "not valid UTF-8 (use 0 or 1)".into(),
        }),
    }
}
