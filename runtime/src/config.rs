//! Environment configuration: the one registry of the runtime's knobs. Every variable is read
//! here, once, validated, and handed to the module that needs it as a typed value (a
//! [`RuntimeConfig`], or for in-process worlds an [`ExecOptions`]); a malformed value is a
//! [`RuntimeError::Env`] naming the variable, the value and what is accepted (never a silent
//! default). No module underneath reads the environment.
//!
//! Sections (one per owner):
//! - **Runtime core** — torchrun rank variables, rendezvous, heap, waits, logs
//!   (`docs/reliability.md` says what each does when things fail).
//! - **Executor knobs** — fusion, non-temporal copies, the alltoall pull, the step trace
//!   ([`ExecOptions`]; `docs/performance.md` has the measurements behind the defaults).
//!
//! Every knob, in one table (the Python layer's own knobs are in `python/README.md`):
//!
//! | variable | accepts (refused, e.g.) | default | effect |
//! |---|---|---|---|
//! | `RANK`, `WORLD_SIZE` | integers, `RANK < WORLD_SIZE`, `WORLD_SIZE ≥ 1` (`x`, `RANK=3 WORLD_SIZE=2`) | required | torchrun rank variables ([`RuntimeConfig::from_env`]) |
//! | `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | integers consistent with the above, contiguous local ranks (`LOCAL_RANK=3 LOCAL_WORLD_SIZE=2`) | `RANK mod LOCAL_WORLD_SIZE`, `WORLD_SIZE` | the ranks of this node |
//! | `MASTER_PORT` | 1–65535 (`http`, `0`, `70000`) | — | derives the rendezvous directory when neither key nor directory is given |
//! | `SYMSCHED_RENDEZVOUS_KEY` | 32 hex digits (`xyz`) | unset | directory-free rendezvous on an abstract socket (set by `symsched launch`) |
//! | `SYMSCHED_RENDEZVOUS_DIR` | absolute path, socket path ≤ 107 bytes, must be ours, 0700 (`rdv`, 120-byte paths) | derived | private rendezvous directory |
//! | `SYMSCHED_JOB_ID` | 1–64 of `A-Z a-z 0-9 - _ .`, not starting with `.` (`../../etc`) | `TORCHELASTIC_RUN_ID` (made file-name safe), else `default` | the job part of a derived rendezvous directory |
//! | `SYMMETRIC_MEMORY_HEAP_SIZE` | bytes, 1 MiB – 64 TiB (`1.5G`, `100`) | 1 GiB | symmetric heap bytes per rank |
//! | `SYMSCHED_SCRATCH_SIZE` | bytes, 4 KiB – 1 TiB (`12`, `-1`) | 256 MiB | scratch arena per group (same on every rank) |
//! | `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS` | 1 – 2 592 000 000, 30 days (`0`: every wait would time out; `-5`) | 300 000 | deadline of every signal wait (also of in-process worlds) |
//! | `SYMSCHED_RENDEZVOUS_TIMEOUT_MS` | 1 – 2 592 000 000 (`0`, `garbage`) | 60 000 | deadline of every rendezvous step |
//! | `SYMSCHED_NODE_ID` | 1–255 printable characters, no whitespace (`a b`) | hostname + boot id | emulated node of a rank (hierarchical schedules); the ranks of each emulated node bootstrap on their own (a derived rendezvous directory gets a per-node suffix; set `LOCAL_RANK`/`LOCAL_WORLD_SIZE` per node) |
//! | `HYPER_PARALLEL_SHMEM_LOG_LEVEL` | `DEBUG`, `INFO`, `WARNING`/`WARN`, `ERROR`, any case (`LOUD`) | `WARNING` | most verbose level logged ([`crate::log`]; `DEBUG` records every launch) |
//! | `SHMEM_LOG_TO_STDOUT` | `0`, `1` (`yes`, `2`) | `0` | log to stdout instead of a per-rank file |
//! | `SYMSCHED_LOG_DIR` | absolute path, created 0700 if missing (`logs`) | per-user default | directory of the per-rank log files |
//! | `SYMSCHED_FUSE` | `0`, `1` (`maybe`) | `1` | `0` turns off the executor's reduce→put/cast and get→reduce fusion ([`ExecOptions::fuse`]) |
//! | `SYMSCHED_NT_COPY` | `0`, `1` (`yes`) | `1` | `0` turns off non-temporal stores for large plain moves into buffers no step reads ([`ExecOptions::nt_copy`]) |
//! | `SYMSCHED_NT_MIN_BYTES` | bytes (`abc`, `-1`) | 8 MiB | smallest move those stores are used for ([`ExecOptions::nt_min_bytes`]) |
//! | `SYMSCHED_A2A_LARGE_PULL` | `0`, `1` (`2`) | `1` | `0`: alltoall chunks above the eager capacity of a symmetric send tensor take the header round + plan instead of being pulled in one round ([`ExecOptions::a2a_large_pull`]) |
//! | `SYMSCHED_TRACE` | a path | unset | Chrome/Perfetto trace file of every executed step ([`ExecOptions::trace`]) |
//! | `SYMSCHED_BACKEND` | `interp`, `jit`, `auto`, any case (`llvm`) | `auto` | what runs a launch's steps: the interpreter, kernels compiled through LLVM (cached in memory and in `$XDG_CACHE_HOME/symsched/jit`, else `$HOME/.cache/symsched/jit`), or per launch the one measured faster, falling back to the interpreter when no kernel can be made ([`ExecOptions::backend`], `docs/llvm.md`) |
//!
//! "bytes" is a whole number with an optional `K`, `M` or `G` suffix (`KiB`, `MiB`, `GiB`, any
//! case; binary multiples), as in the Python layer's byte knobs ([`parse_byte_count`]).
//! An empty value means "unset" everywhere (so `VAR= cmd` restores the default).
//! `XDG_RUNTIME_DIR`, `TMPDIR`, `HOME` and `TORCHELASTIC_RUN_ID` belong to other programs: used
//! when usable, skipped otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::Level;

use crate::error::RuntimeError;

// =============================================================================================
// Runtime core: rank variables, rendezvous, heap, waits, logs.
// =============================================================================================

/// Default symmetric heap size per rank (virtual; pages are touched on use).
pub const DEFAULT_HEAP_SIZE: u64 = 1 << 30;
/// Default signal-wait deadline.
pub const DEFAULT_SIGNAL_TIMEOUT_MS: u64 = 300_000;
/// Default deadline of every rendezvous step.
pub const DEFAULT_RENDEZVOUS_TIMEOUT_MS: u64 = 60_000;
/// Longest accepted timeout (30 days): larger values would overflow deadline arithmetic.
pub const MAX_TIMEOUT_MS: u64 = 30 * 24 * 3600 * 1000;
/// Largest accepted heap size (64 TiB, the most the runtime ever maps).
pub const MAX_HEAP_SIZE: u64 = 1 << 46;
/// Smallest accepted scratch arena per group.
pub const MIN_SCRATCH_SIZE: u64 = 4096;
/// Largest accepted scratch arena per group (every group of a rank has one).
pub const MAX_SCRATCH_SIZE: u64 = 1 << 40;

/// Heap size: `SYMMETRIC_MEMORY_HEAP_SIZE` (bytes).
pub const ENV_HEAP_SIZE: &str = "SYMMETRIC_MEMORY_HEAP_SIZE";
/// Signal timeout: `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`.
pub const ENV_SIGNAL_TIMEOUT: &str = "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS";
/// Rendezvous step timeout: `SYMSCHED_RENDEZVOUS_TIMEOUT_MS`.
pub const ENV_RENDEZVOUS_TIMEOUT: &str = "SYMSCHED_RENDEZVOUS_TIMEOUT_MS";
/// Private rendezvous directory chosen by the caller.
pub const ENV_RENDEZVOUS_DIR: &str = "SYMSCHED_RENDEZVOUS_DIR";
/// Random key naming a directory-free (abstract Unix socket) rendezvous; set by
/// `symsched launch`.
pub const ENV_RENDEZVOUS_KEY: &str = "SYMSCHED_RENDEZVOUS_KEY";
/// Job id used to derive the rendezvous directory when it is not given.
pub const ENV_JOB_ID: &str = "SYMSCHED_JOB_ID";
/// Node identity override (tests emulate several nodes on one host).
pub const ENV_NODE_ID: &str = "SYMSCHED_NODE_ID";
/// Scratch arena per group: `SYMSCHED_SCRATCH_SIZE` (bytes).
pub const ENV_SCRATCH_SIZE: &str = crate::heap::ENV_SCRATCH_SIZE;
/// Log level.
pub const ENV_LOG_LEVEL: &str = "HYPER_PARALLEL_SHMEM_LOG_LEVEL";
/// Log to stdout instead of a per-rank file (`0` or `1`).
pub const ENV_LOG_TO_STDOUT: &str = "SHMEM_LOG_TO_STDOUT";
/// Log directory.
pub const ENV_LOG_DIR: &str = "SYMSCHED_LOG_DIR";

/// Longest Unix socket path (`sun_path` is 108 bytes with the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;
/// Bytes of a rendezvous key (hex digits).
pub const RENDEZVOUS_KEY_LEN: usize = 32;

/// Where log records go, from `HYPER_PARALLEL_SHMEM_LOG_LEVEL`, `SHMEM_LOG_TO_STDOUT` and
/// `SYMSCHED_LOG_DIR` (see [`crate::log`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Most verbose level recorded.
    pub level: Level,
    /// Records go to stdout (else to a per-rank file).
    pub to_stdout: bool,
    /// Directory given by `SYMSCHED_LOG_DIR` (else a per-user default, see [`crate::log`]).
    pub dir: Option<PathBuf>,
    /// Candidate bases of the per-user default log directory: `$XDG_RUNTIME_DIR`, then the
    /// system temporary directory (`$TMPDIR`, else `/tmp`).
    pub default_bases: Vec<PathBuf>,
}

impl LogConfig {
    /// Reads and validates the log knobs.
    pub fn from_env() -> Result<Self, RuntimeError> {
        Self::from_lookup(&env_lookup)
    }

    /// Like [`LogConfig::from_env`] with an explicit variable lookup (tests).
    pub fn from_lookup(get: &dyn Fn(&str) -> Lookup) -> Result<Self, RuntimeError> {
        let level = match value(get, ENV_LOG_LEVEL)? {
            None => Level::WARN,
            Some(v) => parse_level(&v).ok_or_else(|| RuntimeError::Env {
                var: ENV_LOG_LEVEL,
                reason: format!("`{v}` is not a log level (DEBUG, INFO, WARNING, WARN or ERROR)"),
            })?,
        };
        let to_stdout = match value(get, ENV_LOG_TO_STDOUT)?.as_deref() {
            None | Some("0") => false,
            Some("1") => true,
            Some(v) => {
                return Err(RuntimeError::Env {
                    var: ENV_LOG_TO_STDOUT,
                    reason: format!("`{v}` is not 0 or 1"),
                })
            }
        };
        let dir = value(get, ENV_LOG_DIR)?
            .map(|v| absolute_path(ENV_LOG_DIR, &v))
            .transpose()?;
        let mut default_bases = Vec::new();
        if let Some(x) = foreign(get, "XDG_RUNTIME_DIR") {
            default_bases.push(PathBuf::from(x));
        }
        default_bases.push(std::env::temp_dir());
        if default_bases.last().is_none_or(|t| t != Path::new("/tmp")) {
            default_bases.push(PathBuf::from("/tmp"));
        }
        Ok(LogConfig {
            level,
            to_stdout,
            dir,
            default_bases,
        })
    }
}

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
    /// Private directory holding the rendezvous socket (used only during bootstrap; empty when
    /// [`RuntimeConfig::rendezvous_key`] names a directory-free rendezvous).
    pub rendezvous_dir: PathBuf,
    /// Whether local rank 0 creates the directory (and removes it right after bootstrap).
    pub owns_rendezvous_dir: bool,
    /// Key of a directory-free rendezvous (`SYMSCHED_RENDEZVOUS_KEY`, set by `symsched
    /// launch`): the ranks meet on an abstract Unix socket, so nothing exists on the file system
    /// and nothing can be left behind, whatever kills the job.
    pub rendezvous_key: Option<String>,
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
    /// Log sink and level.
    pub log: LogConfig,
    /// The executor's knobs (see [`ExecOptions`]).
    pub exec: ExecOptions,
}

/// The result of looking up one environment variable.
pub type Lookup = Result<Option<String>, std::ffi::OsString>;

fn env_lookup(var: &str) -> Lookup {
    match std::env::var(var) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(raw)) => Err(raw),
    }
}

/// The value of `var` (trimmed), `None` when unset or empty; non-UTF-8 is an error.
fn value(get: &dyn Fn(&str) -> Lookup, var: &'static str) -> Result<Option<String>, RuntimeError> {
    match get(var) {
        Ok(Some(v)) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
        Ok(_) => Ok(None),
        Err(raw) => Err(RuntimeError::Env {
            var,
            reason: format!("`{}` is not valid UTF-8", raw.to_string_lossy()),
        }),
    }
}

/// A variable owned by another program (torchrun, the desktop session): used when usable,
/// ignored otherwise.
fn foreign(get: &dyn Fn(&str) -> Lookup, var: &str) -> Option<String> {
    get(var).ok().flatten().filter(|v| !v.trim().is_empty())
}

/// An unsigned integer in `min..=max`; `what` says what the number counts.
fn int_in(
    get: &dyn Fn(&str) -> Lookup,
    var: &'static str,
    default: u64,
    min: u64,
    max: u64,
    what: &str,
) -> Result<u64, RuntimeError> {
    let Some(v) = value(get, var)? else {
        return Ok(default);
    };
    let n = v.parse::<u64>().map_err(|_| RuntimeError::Env {
        var,
        reason: format!("`{v}` is not a whole number of {what} (expected {min}..={max})"),
    })?;
    if n < min || n > max {
        let why = if n == 0 && var.ends_with("_MS") {
            " (0 would make every wait time out at once)"
        } else {
            ""
        };
        return Err(RuntimeError::Env {
            var,
            reason: format!("{n} {what} is outside {min}..={max}{why}"),
        });
    }
    Ok(n)
}

/// A whole number of bytes with an optional `K`/`M`/`G` (also `KiB`/`MiB`/`GiB`, any case)
/// binary suffix, spaces allowed before it: the dialect of the Python layer's byte knobs
/// (`python/symsched/core/knobs.py`, `byte_count`), so one value means the same everywhere.
/// `None` when malformed or past `u64`.
pub fn parse_byte_count(text: &str) -> Option<u64> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// A byte knob ([`parse_byte_count`]) in `min..=max`.
fn bytes_in(
    get: &dyn Fn(&str) -> Lookup,
    var: &'static str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, RuntimeError> {
    let Some(v) = value(get, var)? else {
        return Ok(default);
    };
    let n = parse_byte_count(&v).ok_or_else(|| RuntimeError::Env {
        var,
        reason: format!(
            "`{v}` is not a number of bytes (a whole number, optionally with a K, M or G \
             suffix; expected {min}..={max})"
        ),
    })?;
    if n < min || n > max {
        return Err(RuntimeError::Env {
            var,
            reason: format!("{n} bytes is outside {min}..={max}"),
        });
    }
    Ok(n)
}

fn timeout_ms(
    get: &dyn Fn(&str) -> Lookup,
    var: &'static str,
    default: u64,
) -> Result<Duration, RuntimeError> {
    int_in(get, var, default, 1, MAX_TIMEOUT_MS, "milliseconds").map(Duration::from_millis)
}

fn required_index(get: &dyn Fn(&str) -> Lookup, var: &'static str) -> Result<usize, RuntimeError> {
    let v = value(get, var)?.ok_or_else(|| RuntimeError::Env {
        var,
        reason: "not set (launch with `symsched launch` or torchrun)".into(),
    })?;
    v.parse::<usize>().map_err(|_| RuntimeError::Env {
        var,
        reason: format!("`{v}` is not a non-negative integer"),
    })
}

fn absolute_path(var: &'static str, v: &str) -> Result<PathBuf, RuntimeError> {
    let p = PathBuf::from(v);
    if !p.is_absolute() {
        return Err(RuntimeError::Env {
            var,
            reason: format!("`{v}` is not an absolute path"),
        });
    }
    Ok(p)
}

fn check_socket_room(var: &'static str, dir: &Path) -> Result<(), RuntimeError> {
    let len = dir.join(crate::bootstrap::SOCKET_NAME).as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(RuntimeError::Env {
            var,
            reason: format!(
                "`{}` is too long: the socket path inside it would be {len} bytes, the limit is {MAX_SOCKET_PATH}",
                dir.display()
            ),
        });
    }
    Ok(())
}

/// A short stable tag of a node id for file names (FNV-1a).
fn node_tag(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Node identity: `SYMSCHED_NODE_ID` (1–255 printable characters without whitespace), else
/// hostname + kernel boot id.
fn node_id_from(get: &dyn Fn(&str) -> Lookup) -> Result<String, RuntimeError> {
    if let Some(id) = value(get, ENV_NODE_ID)? {
        if id.len() > 255 || id.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(RuntimeError::Env {
                var: ENV_NODE_ID,
                reason: format!(
                    "`{}` must be 1 to 255 printable characters without spaces",
                    id.escape_debug()
                ),
            });
        }
        return Ok(id);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Ok(format!("{host}/{boot}"))
}

/// The job part of a derived rendezvous directory name: `SYMSCHED_JOB_ID` (validated), else
/// torchrun's `TORCHELASTIC_RUN_ID` (made file-name safe), else `default`.
fn job_id_from(get: &dyn Fn(&str) -> Lookup) -> Result<String, RuntimeError> {
    if let Some(job) = value(get, ENV_JOB_ID)? {
        if job.len() > 64
            || !job
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || job.starts_with('.')
        {
            return Err(RuntimeError::Env {
                var: ENV_JOB_ID,
                reason: format!(
                    "`{}` must be 1 to 64 of A-Z a-z 0-9 - _ . (not starting with .)",
                    job.escape_debug()
                ),
            });
        }
        return Ok(job);
    }
    let job = foreign(get, "TORCHELASTIC_RUN_ID").unwrap_or_else(|| "default".into());
    Ok(job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect())
}

/// The knobs every rank reads, whether it joins through torchrun variables or not.
struct Knobs {
    heap_size: u64,
    scratch_size: u64,
    signal_timeout: Duration,
    rendezvous_timeout: Duration,
    node_id: String,
    log: LogConfig,
    exec: ExecOptions,
}

impl Knobs {
    fn from_lookup(get: &dyn Fn(&str) -> Lookup) -> Result<Knobs, RuntimeError> {
        Ok(Knobs {
            heap_size: heap_size_from(get)?,
            scratch_size: bytes_in(
                get,
                ENV_SCRATCH_SIZE,
                crate::heap::DEFAULT_ARENA_BYTES,
                MIN_SCRATCH_SIZE,
                MAX_SCRATCH_SIZE,
            )?,
            signal_timeout: timeout_ms(get, ENV_SIGNAL_TIMEOUT, DEFAULT_SIGNAL_TIMEOUT_MS)?,
            rendezvous_timeout: timeout_ms(
                get,
                ENV_RENDEZVOUS_TIMEOUT,
                DEFAULT_RENDEZVOUS_TIMEOUT_MS,
            )?,
            node_id: node_id_from(get)?,
            log: LogConfig::from_lookup(get)?,
            exec: ExecOptions::from_lookup(get)?,
        })
    }
}

fn heap_size_from(get: &dyn Fn(&str) -> Lookup) -> Result<u64, RuntimeError> {
    bytes_in(
        get,
        ENV_HEAP_SIZE,
        DEFAULT_HEAP_SIZE,
        crate::heap::MIN_HEAP_BYTES,
        MAX_HEAP_SIZE,
    )
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
        Self::local_with(rank, world_size, dir, &env_lookup)
    }

    fn local_with(
        rank: usize,
        world_size: usize,
        dir: PathBuf,
        get: &dyn Fn(&str) -> Lookup,
    ) -> Result<Self, RuntimeError> {
        if rank >= world_size {
            return Err(RuntimeError::RankOutsideWorld {
                rank,
                world: world_size,
            });
        }
        let k = Knobs::from_lookup(get)?;
        Ok(RuntimeConfig {
            rank,
            world_size,
            local_rank: rank,
            local_world_size: world_size,
            rendezvous_dir: dir,
            owns_rendezvous_dir: false,
            rendezvous_key: None,
            heap_size: k.heap_size,
            scratch_size: k.scratch_size,
            signal_timeout: k.signal_timeout,
            rendezvous_timeout: k.rendezvous_timeout,
            node_id: k.node_id,
            log: k.log,
            exec: k.exec,
        })
    }

    /// Reads the torchrun variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
    /// `MASTER_PORT`) and every runtime knob. The ranks meet on the abstract socket named by
    /// `SYMSCHED_RENDEZVOUS_KEY` when set (`symsched launch`), else in `SYMSCHED_RENDEZVOUS_DIR`
    /// when set, else in `<base>/symsched-<job>-<MASTER_PORT>` where `<job>` is
    /// `SYMSCHED_JOB_ID`, else `TORCHELASTIC_RUN_ID`, else `default`, and `<base>` is the first
    /// private per-user directory of `$XDG_RUNTIME_DIR`, `/tmp/symsched-<uid>` and
    /// `$HOME/.symsched` (see [`crate::bootstrap::private_base`]): a directory another user
    /// pre-created is skipped, never waited on. Local rank 0 creates the job directory (0700)
    /// and removes it as soon as the segments are exchanged.
    pub fn from_env() -> Result<Self, RuntimeError> {
        Self::from_lookup(&env_lookup)
    }

    /// Like [`RuntimeConfig::from_env`] with an explicit variable lookup (tests).
    pub fn from_lookup(get: &dyn Fn(&str) -> Lookup) -> Result<Self, RuntimeError> {
        let world_size = required_index(get, "WORLD_SIZE")?;
        let rank = required_index(get, "RANK")?;
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
        let local_world_size = match value(get, "LOCAL_WORLD_SIZE")? {
            Some(_) => required_index(get, "LOCAL_WORLD_SIZE")?,
            None => world_size,
        };
        let local_rank = match value(get, "LOCAL_RANK")? {
            Some(_) => required_index(get, "LOCAL_RANK")?,
            None => rank % local_world_size.max(1),
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
        let key = value(get, ENV_RENDEZVOUS_KEY)?;
        if let Some(k) = &key {
            if k.len() != RENDEZVOUS_KEY_LEN || !k.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(RuntimeError::Env {
                    var: ENV_RENDEZVOUS_KEY,
                    reason: format!(
                        "`{}` is not {RENDEZVOUS_KEY_LEN} hexadecimal digits",
                        k.escape_debug()
                    ),
                });
            }
        }
        let given_dir = value(get, ENV_RENDEZVOUS_DIR)?;
        let (dir, owns) = match (&key, given_dir) {
            (Some(_), _) => (PathBuf::new(), false),
            (None, Some(d)) => {
                let d = absolute_path(ENV_RENDEZVOUS_DIR, &d)?;
                check_socket_room(ENV_RENDEZVOUS_DIR, &d)?;
                (d, false)
            }
            (None, None) => {
                let port = value(get, "MASTER_PORT")?.ok_or_else(|| RuntimeError::Env {
                    var: "MASTER_PORT",
                    reason: format!(
                        "needed to derive the rendezvous directory when {ENV_RENDEZVOUS_DIR} is not set"
                    ),
                })?;
                match port.parse::<u16>() {
                    Ok(p) if p > 0 && port.chars().all(|c| c.is_ascii_digit()) => {}
                    _ => {
                        return Err(RuntimeError::Env {
                            var: "MASTER_PORT",
                            reason: format!("`{port}` is not a port number (1..=65535)"),
                        })
                    }
                }
                let job = job_id_from(get)?;
                let base = crate::bootstrap::private_base(&private_base_candidates(get))?;
                // Nodes emulated on one host (`SYMSCHED_NODE_ID`) bootstrap separately, each
                // node its own heaps: each meets in a directory of its own.
                let node = match value(get, ENV_NODE_ID)? {
                    Some(id) => format!("-n{:016x}", node_tag(&id)),
                    None => String::new(),
                };
                let dir = base.join(format!("symsched-{job}-{port}{node}"));
                check_socket_room(ENV_JOB_ID, &dir)?;
                (dir, true)
            }
        };
        let mut cfg = RuntimeConfig::local_with(rank, world_size, dir, get)?;
        cfg.local_rank = local_rank;
        cfg.local_world_size = local_world_size;
        cfg.owns_rendezvous_dir = owns;
        cfg.rendezvous_key = key;
        Ok(cfg)
    }

    /// Global rank of local rank 0 on this node (local ranks are contiguous, as with torchrun).
    pub fn first_local_rank(&self) -> usize {
        self.rank - self.local_rank
    }

    /// Where the local ranks meet for bootstrap.
    pub fn rendezvous_endpoint(&self) -> crate::bootstrap::Endpoint {
        match &self.rendezvous_key {
            Some(k) => crate::bootstrap::Endpoint::Abstract(format!("symsched-{k}")),
            None => crate::bootstrap::Endpoint::Dir(self.rendezvous_dir.clone()),
        }
    }
}

/// Candidate bases of derived rendezvous directories, in order of preference: the session's
/// `$XDG_RUNTIME_DIR`, a per-user directory in `/tmp`, `$HOME/.symsched`.
fn private_base_candidates(get: &dyn Fn(&str) -> Lookup) -> Vec<crate::bootstrap::BaseCandidate> {
    use crate::bootstrap::BaseCandidate;
    // SAFETY: geteuid never fails.
    let uid = unsafe { libc::geteuid() };
    let mut c = Vec::new();
    if let Some(x) = foreign(get, "XDG_RUNTIME_DIR") {
        c.push(BaseCandidate::Existing(PathBuf::from(x)));
    }
    c.push(BaseCandidate::Create(PathBuf::from(format!(
        "/tmp/symsched-{uid}"
    ))));
    if let Some(h) = foreign(get, "HOME").filter(|h| h.starts_with('/')) {
        c.push(BaseCandidate::Create(PathBuf::from(h).join(".symsched")));
    }
    c
}

/// Base directory for the rendezvous directory `symsched launch` used to create: kept for
/// callers that make private directories of their own (`$XDG_RUNTIME_DIR` when set and a
/// directory, else `/tmp`).
pub fn base_runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() && Path::new(&d).is_dir() => PathBuf::from(d),
        _ => PathBuf::from("/tmp"),
    }
}

/// The private base directory a derived rendezvous directory is created in (see
/// [`RuntimeConfig::from_env`]).
pub fn private_runtime_base() -> Result<PathBuf, RuntimeError> {
    crate::bootstrap::private_base(&private_base_candidates(&env_lookup))
}

/// `SYMMETRIC_MEMORY_HEAP_SIZE` or the 1 GiB default.
pub fn heap_size_from_env() -> Result<u64, RuntimeError> {
    heap_size_from(&env_lookup)
}

/// The signal-wait deadline from `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`.
pub fn signal_timeout_from_env() -> Result<Duration, RuntimeError> {
    timeout_ms(&env_lookup, ENV_SIGNAL_TIMEOUT, DEFAULT_SIGNAL_TIMEOUT_MS)
}

/// This host's node identity: `SYMSCHED_NODE_ID`, else hostname + kernel boot id. A malformed
/// `SYMSCHED_NODE_ID` is reported by [`RuntimeConfig::from_env`]; here it falls back to the host.
pub fn node_id() -> String {
    node_id_from(&env_lookup).unwrap_or_else(|_| node_id_from(&|_| Ok(None)).unwrap_or_default())
}

// =============================================================================================
// Executor knobs: fusion, non-temporal copies, the alltoall pull, the step trace.
// =============================================================================================

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
/// Backend running the steps: `SYMSCHED_BACKEND`.
pub const ENV_BACKEND: &str = "SYMSCHED_BACKEND";

/// What runs the resolved steps of a launch ([`ExecOptions::backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BackendKind {
    /// The interpreter (the reference).
    Interp,
    /// Kernels compiled through LLVM per launch signature (`docs/llvm.md`).
    Jit,
    /// Per launch, the backend the benchmarks measured faster for its schedule and size
    /// (`docs/llvm.md`, "Backend choice"); the interpreter when the JIT cannot make a kernel.
    /// The default.
    #[default]
    Auto,
}

impl BackendKind {
    /// `interp`, `jit` or `auto`, any case.
    ///
    /// ```
    /// use symsched_runtime::config::BackendKind;
    /// assert_eq!(BackendKind::parse("JIT"), Some(BackendKind::Jit));
    /// assert_eq!(BackendKind::parse("llvm"), None);
    /// ```
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "interp" => Some(BackendKind::Interp),
            "jit" => Some(BackendKind::Jit),
            "auto" => Some(BackendKind::Auto),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Interp => "interp",
            BackendKind::Jit => "jit",
            BackendKind::Auto => "auto",
        }
    }
}

/// Default of [`ExecOptions::nt_min_bytes`]: below it the destination likely stays in cache
/// and the ordinary copy wins.
///
/// Measured on a quiet machine (perftest, 2 ranks, alltoall and all-gather, 2 rounds, load
/// 1.9–2.3; AMD EPYC with 2 MiB L2 per core and 32 MiB L3): streaming 1 MiB and 2 MiB moves
/// made 2 and 4 MiB messages 2.5–2.8× slower than ordinary stores (alltoall 2 MiB 175–220 µs
/// against 66–102 µs), 16 MiB moves gained 1.7× (alltoall 32 MiB 1.7–3.1 ms against 4.8–5.0 ms
/// unstreamed). 4 MiB moves, a tie in that run, lost in a later one (8 MiB messages: all-gather
/// 339–627 µs streamed against 360–412 µs not, alltoall 630–650 against 388–473 µs), and 8 MiB
/// moves won (16 MiB messages: all-gather 658–1229 µs against 1410–1666, alltoall 671–1294
/// against 1677–1773), so the smallest streamed move is 8 MiB. An earlier choice of 1 MiB came
/// from runs at load 5–14 on another VM (`docs/performance.md`, "The non-temporal threshold").
pub const DEFAULT_NT_MIN_BYTES: usize = 8 << 20;

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
    /// What runs the steps (`SYMSCHED_BACKEND`).
    pub backend: BackendKind,
    /// Disk cache of compiled kernels (`None`: memory only); from the environment
    /// `$XDG_CACHE_HOME/symsched/jit`, else `$HOME/.cache/symsched/jit`.
    pub jit_cache_dir: Option<PathBuf>,
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
            backend: BackendKind::Auto,
            jit_cache_dir: None,
        }
    }
}

impl ExecOptions {
    /// The knobs from the environment (see the table in the module docs); a malformed value is
    /// a [`RuntimeError::Env`] naming the variable.
    pub fn from_env() -> Result<ExecOptions, RuntimeError> {
        Self::from_lookup(&env_lookup)
    }

    /// Like [`ExecOptions::from_env`] with an explicit variable lookup (tests).
    pub fn from_lookup(get: &dyn Fn(&str) -> Lookup) -> Result<ExecOptions, RuntimeError> {
        let d = ExecOptions::default();
        let nt_min = bytes_in(
            get,
            ENV_NT_MIN_BYTES,
            d.nt_min_bytes as u64,
            0,
            usize::MAX as u64,
        )?;
        Ok(ExecOptions {
            fuse: switch(get, ENV_FUSE, d.fuse)?,
            nt_copy: switch(get, ENV_NT_COPY, d.nt_copy)?,
            nt_min_bytes: nt_min as usize,
            a2a_large_pull: switch(get, ENV_A2A_LARGE_PULL, d.a2a_large_pull)?,
            // A path need not be UTF-8, and is not trimmed.
            trace: match get(ENV_TRACE) {
                Ok(Some(p)) if !p.trim().is_empty() => Some(PathBuf::from(p)),
                Ok(_) => None,
                Err(raw) => Some(PathBuf::from(raw)),
            },
            backend: match value(get, ENV_BACKEND)? {
                None => d.backend,
                Some(v) => BackendKind::parse(&v).ok_or_else(|| RuntimeError::Env {
                    var: ENV_BACKEND,
                    reason: format!("`{v}` is not a backend (use interp, jit or auto)"),
                })?,
            },
            jit_cache_dir: foreign(get, "XDG_CACHE_HOME")
                .filter(|d| Path::new(d).is_absolute())
                .map(|d| PathBuf::from(d).join("symsched/jit"))
                .or_else(|| {
                    foreign(get, "HOME")
                        .filter(|d| Path::new(d).is_absolute())
                        .map(|d| PathBuf::from(d).join(".cache/symsched/jit"))
                }),
        })
    }
}

/// A `0`/`1` switch; unset or empty is `default`.
fn switch(
    get: &dyn Fn(&str) -> Lookup,
    var: &'static str,
    default: bool,
) -> Result<bool, RuntimeError> {
    match value(get, var)?.as_deref() {
        None => Ok(default),
        Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(v) => Err(RuntimeError::Env {
            var,
            reason: format!("`{v}` is not a switch (use 0 or 1)"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Lookup {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| Ok(m.get(k).cloned())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        let base = [
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
            ("SYMSCHED_RENDEZVOUS_DIR", "/tmp/x"),
        ];
        let all: Vec<(&str, &str)> = base.iter().chain(vars).copied().collect();
        match RuntimeConfig::from_lookup(&with(&all)) {
            Err(e @ RuntimeError::Env { .. }) => e.to_string(),
            other => panic!("{vars:?}: expected an Env error, got {other:?}"),
        }
    }

    #[test]
    fn every_malformed_core_knob_is_refused_with_its_name() {
        let cases: &[(&str, &str, &str)] = &[
            (ENV_LOG_LEVEL, "LOUD", "not a log level"),
            (ENV_LOG_TO_STDOUT, "yes", "not 0 or 1"),
            (ENV_LOG_TO_STDOUT, "2", "not 0 or 1"),
            (ENV_LOG_DIR, "relative/logs", "not an absolute path"),
            (ENV_SIGNAL_TIMEOUT, "0", "every wait time out"),
            (ENV_SIGNAL_TIMEOUT, "-5", "not a whole number"),
            (ENV_SIGNAL_TIMEOUT, "18446744073709551615", "outside"),
            (ENV_RENDEZVOUS_TIMEOUT, "soon", "not a whole number"),
            (ENV_RENDEZVOUS_TIMEOUT, "0", "outside 1..="),
            (ENV_HEAP_SIZE, "1.5G", "not a number of bytes"),
            (ENV_HEAP_SIZE, "1T", "not a number of bytes"),
            (ENV_HEAP_SIZE, "1024", "outside 1048576..="),
            (
                ENV_HEAP_SIZE,
                "99999999999999999999",
                "not a number of bytes",
            ),
            (ENV_SCRATCH_SIZE, "12", "outside 4096..="),
            (ENV_SCRATCH_SIZE, "lots", "not a number of bytes"),
            (ENV_NODE_ID, "node a", "printable characters without spaces"),
            (ENV_RENDEZVOUS_KEY, "abc", "hexadecimal digits"),
            (ENV_RENDEZVOUS_DIR, "rdv", "not an absolute path"),
            ("LOCAL_WORLD_SIZE", "x", "not a non-negative integer"),
        ];
        for (var, v, want) in cases {
            let e = err(&[(var, v)]);
            assert!(e.contains(var) && e.contains(want), "{var}={v}: {e}");
        }
        let long = format!("/tmp/{}", "d".repeat(120));
        assert!(err(&[(ENV_RENDEZVOUS_DIR, &long)]).contains("too long"));
    }

    /// The Python layer's dialect (`byte_count` in `python/symsched/core/knobs.py`).
    #[test]
    fn byte_counts_take_binary_suffixes_in_any_case() {
        let ok: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            ("4k", 4096),
            ("4 KiB", 4096),
            ("3M", 3 << 20),
            ("2mib", 2 << 20),
            ("1G", 1 << 30),
            ("16GiB", 16 << 30),
        ];
        for (text, want) in ok {
            assert_eq!(parse_byte_count(text), Some(*want), "{text}");
        }
        for bad in [
            "",
            "k",
            "-1",
            "1.5G",
            "1T",
            "1 k b",
            " 1k",
            "1e3",
            "18446744073709551616",
            "17179869184G",
        ] {
            assert_eq!(parse_byte_count(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_malformed_executor_knob_is_refused_with_its_name() {
        let cases: &[(&str, &str, &str)] = &[
            (ENV_FUSE, "maybe", "not a switch"),
            (ENV_NT_COPY, "yes", "not a switch"),
            (ENV_A2A_LARGE_PULL, "2", "not a switch"),
            (ENV_NT_MIN_BYTES, "abc", "not a number of bytes"),
            (ENV_NT_MIN_BYTES, "-1", "not a number of bytes"),
            (ENV_NT_MIN_BYTES, "99999999999G", "not a number of bytes"),
            (ENV_BACKEND, "llvm", "not a backend"),
        ];
        for (var, v, want) in cases {
            let e = err(&[(var, v)]);
            assert!(e.contains(var) && e.contains(want), "{var}={v}: {e}");
        }
        let opts = ExecOptions::from_lookup(&with(&[
            (ENV_FUSE, " 0 "),
            (ENV_NT_COPY, ""),
            (ENV_NT_MIN_BYTES, "4k"),
            (ENV_TRACE, "/tmp/t.json"),
        ]))
        .unwrap();
        assert_eq!(
            opts,
            ExecOptions {
                fuse: false,
                nt_min_bytes: 4096,
                trace: Some(PathBuf::from("/tmp/t.json")),
                ..ExecOptions::default()
            }
        );
        assert_eq!(
            ExecOptions::from_lookup(&with(&[(ENV_TRACE, "  ")])).unwrap(),
            ExecOptions::default()
        );
        let jit = ExecOptions::from_lookup(&with(&[
            (ENV_BACKEND, " JIT "),
            ("XDG_CACHE_HOME", "relative"),
            ("HOME", "/home/u"),
        ]))
        .unwrap();
        assert_eq!(jit.backend, BackendKind::Jit);
        assert_eq!(
            jit.jit_cache_dir.as_deref(),
            Some(Path::new("/home/u/.cache/symsched/jit"))
        );
    }

    #[test]
    fn torchrun_derivation_validates_port_and_job() {
        let base = [("WORLD_SIZE", "1"), ("RANK", "0")];
        let run = |extra: &[(&str, &str)]| {
            let all: Vec<(&str, &str)> = base.iter().chain(extra).copied().collect();
            RuntimeConfig::from_lookup(&with(&all))
        };
        for port in ["", "http", "0", "70000", "+80"] {
            let r = run(&[("MASTER_PORT", port)]);
            assert!(
                matches!(
                    &r,
                    Err(RuntimeError::Env {
                        var: "MASTER_PORT",
                        ..
                    })
                ),
                "{port}: {r:?}"
            );
        }
        let r = run(&[("MASTER_PORT", "29500"), (ENV_JOB_ID, "../../etc")]);
        assert!(
            matches!(
                &r,
                Err(RuntimeError::Env {
                    var: ENV_JOB_ID,
                    ..
                })
            ),
            "{r:?}"
        );
        let cfg = run(&[("MASTER_PORT", "29500"), (ENV_JOB_ID, "job-1.a")]).unwrap();
        assert!(cfg.owns_rendezvous_dir);
        assert!(cfg.rendezvous_dir.ends_with("symsched-job-1.a-29500"));
        // The rendezvous key takes precedence and needs no directory.
        let key = "0123456789abcdef0123456789ABCDEF";
        let cfg = run(&[(ENV_RENDEZVOUS_KEY, key)]).unwrap();
        assert_eq!(cfg.rendezvous_key.as_deref(), Some(key));
        assert!(!cfg.owns_rendezvous_dir);
    }

    #[test]
    fn defaults_and_accepted_values() {
        let cfg = RuntimeConfig::from_lookup(&with(&[
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
            (ENV_RENDEZVOUS_DIR, "/tmp/x"),
            (ENV_LOG_LEVEL, " debug "),
            (ENV_LOG_TO_STDOUT, "1"),
            (ENV_SIGNAL_TIMEOUT, ""),
            (ENV_HEAP_SIZE, "2097152"),
        ]))
        .unwrap();
        assert_eq!(cfg.log.level, Level::DEBUG);
        assert!(cfg.log.to_stdout);
        assert_eq!(
            cfg.signal_timeout,
            Duration::from_millis(DEFAULT_SIGNAL_TIMEOUT_MS)
        );
        assert_eq!(cfg.heap_size, 2 << 20);
        assert_eq!(parse_level("WARNING"), Some(Level::WARN));
        assert_eq!(parse_level("loud"), None);
    }
}
