//! Step-level tracing for `SYMSCHED_TRACE=PATH`: one Chrome/Perfetto complete event (`ph: "X"`)
//! per executed plan step plus one enclosing event per launch.
//!
//! The recorder is process-wide; the first executor created with a trace file in its options
//! ([`crate::config::ExecOptions::trace`], from `SYMSCHED_TRACE`) turns it on, one created
//! without decides it off until then. [`enabled`] is one relaxed atomic load, so the
//! executor's hook costs a branch per step when tracing is off. When set, events are buffered in memory
//! (at most [`MAX_EVENTS`]; later ones are counted as dropped) and written by [`flush`], which
//! merges them into `PATH` with the same protocol as the Python layer
//! (`python/symsched/profiling.py`): take an exclusive `flock` on `PATH.lock`, read `PATH` (a
//! `{"traceEvents": [...]}` object; missing, empty or unreadable counts as empty), add a
//! `process_name` metadata event (`"rank k"`) for every rank not yet named, append, write
//! `PATH.tmp<pid>` and rename it over `PATH`. Every rank therefore ends up in one file.
//! [`flush`] also runs at process exit (registered with `atexit` on the first event).
//!
//! Event layout: `pid` = rank ([`set_process_rank`] when set, else the executing fabric's rank,
//! which keeps in-process worlds apart), `tid` = `"group <label>"` (the Python layer's op events
//! use the same lane naming), `cat` = `"step"` or `"launch"`, `name` = the op kind (`put`,
//! `put_signal`, `get`, `signal`, `wait`, `reduce`, `copy`, `cast`, `matmul`, `hostcoll`) or
//! `launch <schedule>`; `args` hold `schedule`, `step` (plan step id), `channel`, `peer`, `bytes` and, for
//! waits, `slot` and `target`. Timestamps are µs on a monotonic clock anchored once to the wall
//! clock, so ranks (processes) line up like the Python events do.

use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use symsched_plan::{Op, Plan, Rank, Step};

/// Environment variable naming the trace file (read by [`crate::config::ExecOptions::from_env`]).
pub const TRACE_ENV: &str = crate::config::ENV_TRACE;
/// Events buffered per process before further ones are dropped (and counted).
pub const MAX_EVENTS: usize = 1 << 20;

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
const NO_RANK: u32 = u32::MAX;
static PROCESS_RANK: AtomicU32 = AtomicU32::new(NO_RANK);
static RECORDER: OnceLock<Mutex<Recorder>> = OnceLock::new();
static AT_EXIT: Once = Once::new();

/// Errors writing the trace file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("trace file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("trace file {path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
}

#[derive(Debug, Default)]
struct Recorder {
    path: Option<PathBuf>,
    events: Vec<Value>,
    dropped: u64,
}

fn recorder() -> &'static Mutex<Recorder> {
    RECORDER.get_or_init(|| Mutex::new(Recorder::default()))
}

/// Process-wide time origin: (wall-clock µs at `Instant`).
fn origin() -> &'static (f64, Instant) {
    static ORIGIN: OnceLock<(f64, Instant)> = OnceLock::new();
    ORIGIN.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6);
        (wall, Instant::now())
    })
}

fn ts_us(t: Instant) -> f64 {
    let (wall, at) = origin();
    wall + t.saturating_duration_since(*at).as_secs_f64() * 1e6
}

/// Whether step tracing is on.
#[inline]
pub fn enabled() -> bool {
    STATE.load(Ordering::Relaxed) == ON
}

/// Apply an executor's trace option: a file turns tracing on into it (unless it is on
/// already); none decides it off while nothing has turned it on.
pub fn configure(path: Option<&Path>) {
    if STATE.load(Ordering::Relaxed) == ON {
        return;
    }
    match path {
        Some(p) => enable(p),
        None => {
            // `enable` may have run meanwhile; only an undecided state becomes off.
            let _ = STATE.compare_exchange(UNKNOWN, OFF, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Turn tracing on into `path` regardless of any executor's options (tests, embedders).
pub fn enable(path: impl Into<PathBuf>) {
    let mut rec = recorder().lock().unwrap_or_else(|e| e.into_inner());
    rec.path = Some(path.into());
    origin();
    STATE.store(ON, Ordering::Relaxed);
}

/// Use `rank` (the global rank) as the trace `pid` of every event of this process.
pub fn set_process_rank(rank: Rank) {
    PROCESS_RANK.store(rank, Ordering::Relaxed);
}

/// Events currently buffered and the number dropped because the buffer was full.
pub fn pending() -> (usize, u64) {
    let rec = recorder().lock().unwrap_or_else(|e| e.into_inner());
    (rec.events.len(), rec.dropped)
}

fn push(ev: Value) {
    AT_EXIT.call_once(|| {
        extern "C" fn flush_at_exit() {
            if let Err(e) = flush() {
                tracing::warn!("SYMSCHED_TRACE: {e}");
            }
        }
        // SAFETY: registering a plain `extern "C" fn()` with no captured state.
        unsafe { libc::atexit(flush_at_exit) };
    });
    let mut rec = recorder().lock().unwrap_or_else(|e| e.into_inner());
    if rec.events.len() < MAX_EVENTS {
        rec.events.push(ev);
    } else {
        rec.dropped += 1;
    }
}

/// The trace kind of a plan op.
pub fn kind(op: &Op) -> &'static str {
    match op {
        Op::Put { signal: None, .. } => "put",
        Op::Put {
            signal: Some(_), ..
        } => "put_signal",
        Op::Get { .. } => "get",
        Op::Signal { .. } => "signal",
        Op::Wait { .. } => "wait",
        Op::Reduce { .. } => "reduce",
        Op::Copy { .. } => "copy",
        Op::Cast { .. } => "cast",
        Op::Matmul { .. } => "matmul",
        Op::HostColl { .. } => "hostcoll",
    }
}

/// The buffer whose element size measures the bytes a step moves (the written region).
pub fn written_buffer(op: &Op) -> Option<u32> {
    op.writes().next().map(|w| w.region.buffer)
}

/// One launch being traced: created by the executor only when [`enabled`].
pub struct Launch<'p> {
    plan: &'p Plan,
    rank: Rank,
    pid: u32,
    tid: String,
    epoch: u64,
    start: Instant,
}

impl<'p> Launch<'p> {
    /// Start tracing a launch of `plan` on `rank` of the group labelled `label`, or `None` when
    /// tracing is off.
    #[inline]
    pub fn begin(plan: &'p Plan, rank: Rank, label: &str, epoch: u64) -> Option<Launch<'p>> {
        if !enabled() {
            return None;
        }
        let pr = PROCESS_RANK.load(Ordering::Relaxed);
        Some(Launch {
            plan,
            rank,
            pid: if pr == NO_RANK { rank } else { pr },
            tid: format!("group {label}"),
            epoch,
            start: Instant::now(),
        })
    }

    /// Record `step`, started at `t0` and finished now, that moved `bytes` (its args name the
    /// schedule, the step id, its channel and the bytes).
    pub fn step(&self, step: &Step, bytes: u64, t0: Instant) {
        let end = Instant::now();
        let mut args = json!({
            "schedule": self.plan.schedule,
            "step": step.id,
            // Steps of different channels of one rank overlap in time: say which ran this one.
            "channel": step.channel,
            "bytes": bytes,
        });
        let peer = match &step.op {
            Op::Put { peer, .. } | Op::Get { peer, .. } => Some(*peer),
            Op::Signal { update } => Some(update.peer),
            _ => None,
        };
        if let Some(p) = peer {
            args["peer"] = json!(p);
        }
        if let Op::Wait { slot, target, .. } = &step.op {
            let name = self
                .plan
                .signals
                .get(*slot as usize)
                .map(|s| s.name.as_str());
            args["slot"] = json!(name);
            args["target"] = json!(target.at(self.epoch));
        }
        push(self.event(kind(&step.op), "step", t0, end, args));
    }

    fn event(&self, name: &str, cat: &str, t0: Instant, end: Instant, args: Value) -> Value {
        complete(name, cat, self.pid, &self.tid, t0, end, args)
    }

    /// Record the enclosing launch event (call once, after the last step).
    pub fn end(self) {
        let args = json!({
            "schedule": self.plan.schedule,
            "steps": self.plan.ranks.get(self.rank as usize).map_or(0, |r| r.steps.len()),
            "epoch": self.epoch,
        });
        let name = format!("launch {}", self.plan.schedule);
        push(self.event(&name, "launch", self.start, Instant::now(), args));
    }
}

/// One complete (`ph: "X"`) event from `t0` to `end`.
fn complete(
    name: &str,
    cat: &str,
    pid: u32,
    tid: &str,
    t0: Instant,
    end: Instant,
    args: Value,
) -> Value {
    let dur = end.saturating_duration_since(t0).as_secs_f64() * 1e6;
    json!({
        "name": name, "cat": cat, "ph": "X",
        "ts": ts_us(t0), "dur": dur.max(0.001),
        "pid": pid, "tid": tid, "args": args,
    })
}

/// One call of a collective the executor runs without a plan (the eager alltoall): its steps
/// go on the same timeline and lane as plan launches, with the same kinds (`put_signal`,
/// `wait`, `get`, `copy`, `signal`), `args.schedule` naming the protocol and `args.what` the
/// protocol's part (`header`, `outbox`, `arrive`, `credit`, `pull`, `slot`, `own`).
pub struct Protocol {
    name: &'static str,
    pid: u32,
    tid: String,
    epoch: u64,
    start: Instant,
}

impl Protocol {
    /// Start tracing call `epoch` of protocol `name` on `rank` of the group labelled `label`,
    /// or `None` when tracing is off (then the caller's only cost is this branch).
    #[inline]
    pub fn begin(name: &'static str, rank: Rank, label: &str, epoch: u64) -> Option<Protocol> {
        if !enabled() {
            return None;
        }
        let pr = PROCESS_RANK.load(Ordering::Relaxed);
        Some(Protocol {
            name,
            pid: if pr == NO_RANK { rank } else { pr },
            tid: format!("group {label}"),
            epoch,
            start: Instant::now(),
        })
    }

    /// Record a step of kind `kind` (part `what`), started at `t0` and finished now, that moved
    /// `bytes` to or from `peer`.
    pub fn step(&self, kind: &str, what: &str, peer: Option<Rank>, bytes: u64, t0: Instant) {
        let mut args = json!({
            "schedule": self.name,
            "what": what,
            "bytes": bytes,
            "epoch": self.epoch,
        });
        if let Some(p) = peer {
            args["peer"] = json!(p);
        }
        self.emit(kind, "step", t0, args);
    }

    /// Record a wait on the counter `slot` fed by `peer` for `target`, started at `t0`.
    pub fn wait(&self, slot: &str, peer: Rank, target: u64, t0: Instant) {
        let args = json!({
            "schedule": self.name,
            "what": slot,
            "bytes": 0,
            "epoch": self.epoch,
            "peer": peer,
            "slot": slot,
            "target": target,
        });
        self.emit("wait", "step", t0, args);
    }

    /// Record the enclosing event of the call (`launch <name>`), with its `outcome`.
    pub fn end(self, outcome: &str) {
        let args = json!({"schedule": self.name, "epoch": self.epoch, "outcome": outcome});
        let name = format!("launch {}", self.name);
        self.emit(&name, "launch", self.start, args);
    }

    fn emit(&self, name: &str, cat: &str, t0: Instant, args: Value) {
        push(complete(
            name,
            cat,
            self.pid,
            &self.tid,
            t0,
            Instant::now(),
            args,
        ));
    }
}

/// Merge this process's buffered events into the trace file (no-op when tracing is off or
/// nothing is buffered); safe to call repeatedly.
pub fn flush() -> Result<(), TraceError> {
    let (path, events, dropped) = {
        let mut rec = recorder().lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = rec.path.clone() else {
            return Ok(());
        };
        if rec.events.is_empty() {
            return Ok(());
        }
        (
            path,
            std::mem::take(&mut rec.events),
            std::mem::take(&mut rec.dropped),
        )
    };
    if dropped > 0 {
        tracing::warn!("SYMSCHED_TRACE: {dropped} step events dropped (buffer of {MAX_EVENTS})");
    }
    merge(&path, events)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TraceError + '_ {
    move |source| TraceError::Io {
        path: path.to_owned(),
        source,
    }
}

fn merge(path: &Path, mine: Vec<Value>) -> Result<(), TraceError> {
    let mut lock_name = path.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock_path = PathBuf::from(lock_name);
    let lock = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    // SAFETY: flock on a descriptor we own; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io(&lock_path)(std::io::Error::last_os_error()));
    }
    let mut data: Value = File::open(path)
        .ok()
        .and_then(|f| serde_json::from_reader(BufReader::new(f)).ok())
        .filter(|v: &Value| v.get("traceEvents").is_some_and(Value::is_array))
        .unwrap_or_else(|| json!({"traceEvents": [], "displayTimeUnit": "ms"}));
    let events = data["traceEvents"]
        .as_array_mut()
        .expect("filtered to an array above");
    let mut named: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    for e in &mine {
        if let Some(pid) = e["pid"].as_u64() {
            if !named.contains(&pid) {
                named.push(pid);
                events.push(json!({
                    "name": "process_name", "ph": "M", "pid": pid,
                    "args": {"name": format!("rank {pid}")},
                }));
            }
        }
    }
    events.extend(mine);
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let f = File::create(&tmp).map_err(io(&tmp))?;
    let mut w = BufWriter::new(f);
    serde_json::to_writer(&mut w, &data).map_err(|source| TraceError::Json {
        path: tmp.clone(),
        source,
    })?;
    w.flush().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    drop(lock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use symsched_plan::{Region, WaitTarget};

    #[test]
    fn kinds_distinguish_put_with_signal() {
        let r = Region {
            buffer: 3,
            first: 0,
            count: 1,
        };
        let put = Op::Put {
            src: r,
            dst: r,
            peer: 1,
            signal: None,
        };
        assert_eq!(kind(&put), "put");
        assert_eq!(written_buffer(&put), Some(3));
        let wait = Op::Wait {
            slot: 0,
            cmp: symsched_plan::Cmp::Ge,
            target: WaitTarget {
                stride: 1,
                offset: 0,
            },
        };
        assert_eq!(kind(&wait), "wait");
        assert_eq!(written_buffer(&wait), None);
    }

    #[test]
    fn merge_appends_and_names_each_rank_once() {
        let dir = std::env::temp_dir().join(format!("symsched-trace-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        // A garbage file (an interrupted writer) counts as empty rather than failing the job.
        std::fs::write(&path, b"{not json").unwrap();
        let ev = |pid: u32| json!({"name": "put", "ph": "X", "ts": 1.0, "dur": 1.0, "pid": pid});
        merge(&path, vec![ev(0), ev(1)]).unwrap();
        merge(&path, vec![ev(1)]).unwrap();
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let evs = doc["traceEvents"].as_array().unwrap();
        let meta = |pid: u32| {
            evs.iter()
                .filter(|e| e["ph"] == "M" && e["pid"] == pid)
                .count()
        };
        assert_eq!((meta(0), meta(1)), (1, 1));
        assert_eq!(evs.iter().filter(|e| e["ph"] == "X").count(), 3);
        std::fs::remove_dir_all(&dir).ok();
    }
}
