//! Failure propagation, timeout diagnostics, logs and hostile environments, across processes.
//! The binary is both the runner and the ranks (like `multiproc`): the runner starts copies of
//! itself with `SYMSCHED_REL_SCENARIO` set, each copy runs one rank and exits 0 on success.
//! Every launch has an overall timeout, every wait a deadline; the launcher stops stragglers.
//! Tests that need a second user (`nobody`, uid 65534) to play the attacker run only as root
//! and say so when skipped.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use symsched_runtime::abort::monotonic_ns;
use symsched_runtime::launcher::{launch, LaunchOutcome, LaunchSpec};
use symsched_runtime::{Cmp, Group, Runtime, RuntimeError, SignalMode, WaitContext};

const SCENARIO: &str = "SYMSCHED_REL_SCENARIO";
const NOBODY: u32 = 65534;

fn ctx(step: &str) -> WaitContext {
    WaitContext::new("rel", step, "s")
}

// ---------------------------------------------------------------------------------------------
// Rank side.

fn rank_main(scenario: &str) -> Result<(), String> {
    let r = match scenario {
        "abort" => abort(),
        "reset_fails" => reset_fails(),
        "skip_add_set" => skip_add_set(),
        "skip_alltoall" => skip_alltoall(),
        "exec_alltoall_skip" => exec_alltoall_skip(),
        "log_debug" => log_debug(),
        "log_line" => log_line(),
        "log_symlink" => log_symlink(),
        "env_bad" => env_bad(),
        "boot" => boot(),
        "sleeper" => sleeper(),
        other => return Err(format!("unknown scenario {other}")),
    };
    r.map_err(|e| e.to_string())
}

/// The latency from the abort record's timestamp to now, in milliseconds.
fn since_abort_ms(g: &Group) -> f64 {
    let at = g.aborted().map_or(0, |a| a.at_monotonic_ns);
    (monotonic_ns().saturating_sub(at)) as f64 / 1e6
}

fn expect_aborted(
    r: Result<impl std::fmt::Debug, RuntimeError>,
    by: usize,
    what: &str,
) -> Result<String, RuntimeError> {
    match r {
        Err(RuntimeError::GroupAborted(a)) if a.by_rank == by => Ok(a.to_string()),
        other => panic!("{what}: expected GroupAborted by rank {by}, got {other:?}"),
    }
}

/// One member aborts while the others wait (on slots, in a barrier); every wait fails within
/// 100 ms naming it; afterwards every operation fails at once until a collective reset, after
/// which the group works again (twice: generations 1 and 2). A group that was not aborted is
/// not affected.
fn abort() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let (n, me) = (w.size(), w.rank());
    let last = n - 1;
    let pair = if me < 2 {
        Some(rt.group(&[0, 1], false)?)
    } else {
        None
    };
    let s = w.signal_slots("abort", 2)?;
    w.barrier()?;
    let long = format!(
        "IndexError: all_to_all got a 2-D input with 0 rows on rank {me} {}",
        "x".repeat(2000)
    );
    if me == last {
        // Long enough for every peer to be asleep on its futex.
        std::thread::sleep(Duration::from_millis(400));
        w.abort(&long);
        let e = expect_aborted(w.wait(s.slot(0), Cmp::Ge, 1, &ctx("own")), last, "aborter")?;
        println!("ABORTER_OWN_WAIT {e}");
    } else {
        let r = match me {
            0 => w.wait(s.slot(0), Cmp::Ge, 1, &ctx("stuck on slot 0")),
            1 => w.barrier(),
            _ => w
                .wait_value(s.slot(1), Cmp::Eq, 7, &ctx("stuck on slot 1"))
                .map(|_| ()),
        };
        let latency = since_abort_ms(&w);
        let msg = expect_aborted(r, last, "waiter")?;
        println!("ABORT_SEEN rank {me} latency_ms={latency:.2} {msg}");
        assert!(
            msg.contains(&format!("group aborted by rank {last}: IndexError")),
            "{msg}"
        );
        assert!(
            latency < 100.0,
            "rank {me} noticed the abort after {latency} ms"
        );
    }
    let a = w.aborted().expect("aborted");
    assert!(a.message.len() <= symsched_runtime::abort::MESSAGE_BYTES);
    assert!(a.message.starts_with("IndexError") && a.message.ends_with('x'));
    // Everything that waits now fails at once, with the same cause.
    let t = Instant::now();
    expect_aborted(
        w.wait(s.slot(0), Cmp::Ge, 1, &ctx("after")),
        last,
        "later wait",
    )?;
    expect_aborted(w.barrier(), last, "later barrier")?;
    expect_aborted(w.check_usable(), last, "check_usable")?;
    let refused_in = t.elapsed();
    assert!(refused_in < Duration::from_millis(100), "{refused_in:?}");
    println!("REFUSED_AT_ONCE rank {me} in {:?}", refused_in);
    if let Some(p) = &pair {
        p.barrier()?;
        println!("OTHER_GROUP_OK rank {me}");
    }
    for generation in 1..=2u64 {
        let g = w.reset_after_abort()?;
        assert_eq!((g, w.generation()), (generation, generation));
        w.check_usable()?;
        assert!(w.aborted().is_none());
        // The reset forgot the slot registry: the same key is registered again (the same
        // range on every member), and its counters start again from zero: a ring exchange
        // with target 1 works.
        let s = w.signal_slots("abort", 2)?;
        let next = (me + 1) % n;
        w.signal(next, s.slot(0), SignalMode::Add, 1)?;
        w.wait(s.slot(0), Cmp::Ge, 1, &ctx("after reset"))?;
        w.barrier()?;
        w.barrier()?;
        println!("RESET_OK rank {me} generation {g}");
        if generation == 1 {
            // Abort again, this time from rank 0 without any delay.
            if me == 0 {
                w.abort("second failure");
            }
            let r = w.wait(s.slot(1), Cmp::Ge, 1, &ctx("second"));
            expect_aborted(r, 0, "second abort")?;
        }
    }
    rt.finalize()
}

/// A reset that not every member joins fails on those who called it and makes the group
/// unusable for good, on every member.
fn reset_fails() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let me = w.rank();
    w.barrier()?;
    if me == 0 {
        w.abort("boom");
    }
    if me < 2 {
        let t = Instant::now();
        match w.reset_after_abort_timeout(Duration::from_millis(500)) {
            Err(e @ RuntimeError::ResetTimeout { .. }) => {
                let m = e.to_string();
                assert!(m.contains("did not get there: [2]"), "{m}");
                println!("RESET_TIMEOUT rank {me} {m}");
            }
            Err(RuntimeError::GroupAborted(a))
                if a.message.contains("reset_after_abort failed") =>
            {
                println!("RESET_REFUSED rank {me} {a}");
            }
            other => panic!("expected the reset to fail, got {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(5));
    } else {
        std::thread::sleep(Duration::from_millis(1500));
    }
    let t = Instant::now();
    match w.reset_after_abort() {
        Err(RuntimeError::GroupAborted(a)) if a.message.contains("reset_after_abort failed") => {}
        other => panic!("a second reset must be refused at once, got {other:?}"),
    }
    match w.barrier() {
        Err(RuntimeError::GroupAborted(a)) if a.message.contains("reset_after_abort failed") => {}
        other => panic!("expected the group to be refused for good, got {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    println!("REFUSED_FOR_GOOD rank {me}");
    Ok(())
}

fn timeout_of(r: Result<u64, RuntimeError>) -> (Vec<usize>, String) {
    match r {
        Err(RuntimeError::SignalTimeout(t)) => (t.missing.0.clone(), t.to_string()),
        other => panic!("expected a signal timeout, got {other:?}"),
    }
}

/// Ranks 1 and 2 feed rank 0's slots for five rounds, then one of them skips a round: the
/// timeout names exactly the skipper, for an ADD slot (equal and weighted shares) and a SET
/// slot.
fn skip_add_set() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let me = w.rank();
    let s = w.signal_slots("skip", 5)?;
    let (add, set, weighted, ack, release) =
        (s.slot(0), s.slot(1), s.slot(2), s.slot(3), s.slot(4));
    let short = Duration::from_millis(300);
    for it in 1..=6u64 {
        if me == 0 {
            let c = ctx("add").expecting([1, 2]);
            if it < 6 {
                w.wait(add, Cmp::Ge, 2 * it, &c)?;
                w.wait(set, Cmp::Ge, it, &ctx("set").expecting([1]))?;
                w.wait(weighted, Cmp::Ge, 3 * it, &c)?;
                for p in [1, 2] {
                    w.signal(p, ack, SignalMode::Add, 1)?;
                }
                continue;
            }
            let (missing, msg) = timeout_of(w.wait_value_timeout(add, Cmp::Ge, 12, &c, short));
            println!("ADD_TIMEOUT {msg}");
            assert_eq!(missing, [2], "{msg}");
            assert!(msg.contains("rank 1 (local 1) added 6 of 6"), "{msg}");
            assert!(msg.contains("rank 2 (local 2) added 5 of 6"), "{msg}");
            let (missing, msg) = timeout_of(w.wait_value_timeout(
                set,
                Cmp::Ge,
                6,
                &ctx("set").expecting([1]),
                short,
            ));
            println!("SET_TIMEOUT {msg}");
            assert_eq!(missing, [1], "{msg}");
            assert!(
                msg.contains("rank 1 (local 1) last set 5 (needs Ge 6)"),
                "{msg}"
            );
            // Rank 1 adds 2 per round, rank 2 adds 1; rank 1 skipped round 6. With equal
            // shares the accounting blames rank 2; with the real amounts, rank 1.
            let (equal, msg) = timeout_of(w.wait_value_timeout(weighted, Cmp::Ge, 18, &c, short));
            println!("EQUAL_SHARES {msg}");
            assert_eq!(equal, [2], "{msg}");
            let cw = ctx("weighted").expecting_weighted([(1, 2), (2, 1)]);
            let (missing, msg) =
                timeout_of(w.wait_value_timeout(weighted, Cmp::Ge, 18, &cw, short));
            println!("WEIGHTED_TIMEOUT {msg}");
            assert_eq!(missing, [1], "{msg}");
            assert!(
                msg.contains("added 10 of 12") && msg.contains("added 6 of 6"),
                "{msg}"
            );
            for p in [1, 2] {
                w.signal(p, release, SignalMode::Add, 1)?;
            }
        } else {
            if it > 1 {
                w.wait(ack, Cmp::Ge, it - 1, &ctx("ack"))?;
            }
            let skip_add = me == 2 && it == 6;
            let skip_set = me == 1 && it == 6;
            if !skip_add {
                w.signal(0, add, SignalMode::Add, 1)?;
            }
            if me == 1 && !skip_set {
                w.signal(0, set, SignalMode::Set, it)?;
            }
            if !(me == 1 && it == 6) {
                w.signal(0, weighted, SignalMode::Add, if me == 1 { 2 } else { 1 })?;
            }
        }
    }
    if me != 0 {
        w.wait(release, Cmp::Ge, 1, &ctx("release"))?;
    }
    w.barrier()?;
    println!("SKIP_OK rank {me}");
    rt.finalize()
}

/// Four ranks exchange with everybody ten times (an alltoall of signals), then rank 3 skips
/// round eleven: every other rank's timeout names rank 3, not `[]`.
fn skip_alltoall() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let (n, me) = (w.size(), w.rank());
    let s = w.signal_slots("a2a", 1)?;
    for it in 1..=11u64 {
        if me == 3 && it == 11 {
            break;
        }
        for p in (0..n).filter(|&p| p != me) {
            w.signal(p, s.slot(0), SignalMode::Add, 1)?;
        }
        let target = (n as u64 - 1) * it;
        if it < 11 {
            w.wait(s.slot(0), Cmp::Ge, target, &ctx("a2a"))?;
            continue;
        }
        let (missing, msg) = timeout_of(w.wait_value_timeout(
            s.slot(0),
            Cmp::Ge,
            target,
            &ctx("a2a"),
            Duration::from_millis(400),
        ));
        println!("A2A_TIMEOUT rank {me} {msg}");
        assert_eq!(missing, [3], "{msg}");
        assert!(msg.contains("rank 3 (local 3) added 10 of 11"), "{msg}");
    }
    w.barrier()?;
    println!("A2A_OK rank {me}");
    rt.finalize()
}

/// The same through the executor: three checked alltoall launches, then rank 3 stays away.
fn exec_alltoall_skip() -> Result<(), RuntimeError> {
    use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
    use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
    use symsched_runtime::exec::{DType, ElemTypes, Executor, GroupFabric, ReduceOp};
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let me = w.rank();
    let p = w.size() as u32;
    let plan = compile(
        &standard_library(),
        "alltoall_push",
        p,
        &example_params("alltoall_push"),
        &CompileOptions::default(),
    )
    .expect("alltoall_push verifies")
    .plan;
    let exec = Executor::new(GroupFabric::new(w.clone()));
    let spec = RunSpec {
        types: ElemTypes::new(DType::F32, None).expect("f32"),
        op: ReduceOp::Sum,
        sizes: sizes_for(&plan, 64, &[]),
        warmup: 0,
        iters: 3,
        check: true,
        staged: false,
    };
    let rep = run_rank(&exec, &plan, &spec).expect("three alltoalls");
    assert_eq!(rep.wrong, 0);
    if me == 3 {
        // Longer than the others' signal timeout, shorter than the launch timeout.
        std::thread::sleep(Duration::from_millis(2500));
        return Ok(());
    }
    let e = run_rank(&exec, &plan, &spec).expect_err("rank 3 never comes");
    let msg = e.to_string();
    println!("EXEC_TIMEOUT rank {me} {msg}");
    assert!(msg.contains("never signalled: [3]"), "{msg}");
    Ok(())
}

/// DEBUG to stdout: a few executor launches, so every launch is logged.
fn log_debug() -> Result<(), RuntimeError> {
    use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
    use symsched_runtime::exec::harness::{run_rank, sizes_for, RunSpec};
    use symsched_runtime::exec::{DType, ElemTypes, Executor, GroupFabric, ReduceOp};
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let plan = compile(
        &standard_library(),
        "allreduce_one_shot",
        w.size() as u32,
        &example_params("allreduce_one_shot"),
        &CompileOptions::default(),
    )
    .expect("verifies")
    .plan;
    let exec = Executor::new(GroupFabric::new(w.clone()));
    let spec = RunSpec {
        types: ElemTypes::new(DType::F32, None).expect("f32"),
        op: ReduceOp::Sum,
        sizes: sizes_for(&plan, 256, &[]),
        warmup: 0,
        iters: 3,
        check: true,
        staged: false,
    };
    assert_eq!(run_rank(&exec, &plan, &spec).expect("launches").wrong, 0);
    println!("LOG_DEBUG_DONE");
    rt.finalize()
}

/// One rank, one INFO record (the log sink decides colour and place).
fn log_line() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    rt.world()?.barrier()?;
    println!("LOG_LINE_DONE");
    rt.finalize()
}

/// A link named like this rank's log file, planted before the runtime starts, must not be
/// followed: the victim keeps its content and records go to stderr.
fn log_symlink() -> Result<(), RuntimeError> {
    let dir = PathBuf::from(std::env::var("SYMSCHED_LOG_DIR").expect("log dir"));
    let victim = PathBuf::from(std::env::var("REL_VICTIM").expect("victim"));
    let name = format!("symsched-rank0-pid{}.log", std::process::id());
    std::os::unix::fs::symlink(&victim, dir.join(name)).expect("plant link");
    let rt = Runtime::init_from_env()?;
    rt.world()?.barrier()?;
    println!("LOG_SYMLINK_DONE");
    rt.finalize()
}

/// Runtime::init_from_env with whatever malformed knob the runner set.
fn env_bad() -> Result<(), RuntimeError> {
    match Runtime::init_from_env() {
        Err(e @ RuntimeError::Env { .. }) => {
            println!("ENV_ERR {e}");
            Ok(())
        }
        other => panic!("expected an Env error, got {:?}", other.map(|_| ())),
    }
}

/// Bootstrap, one exchange, report where the ranks met.
fn boot() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let s = w.signal_slots("b", 1)?;
    for p in (0..w.size()).filter(|&p| p != w.rank()) {
        w.signal(p, s.slot(0), SignalMode::Add, 1)?;
    }
    w.wait(s.slot(0), Cmp::Ge, w.size() as u64 - 1, &ctx("boot"))?;
    println!(
        "BOOT_OK rank {} dir={} key={}",
        rt.rank(),
        rt.config().rendezvous_dir.display(),
        rt.config().rendezvous_key.as_deref().unwrap_or("-")
    );
    rt.finalize()
}

/// Joins the job, says so, then waits to be killed.
fn sleeper() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    rt.world()?.barrier()?;
    println!(
        "READY pid={} key={}",
        std::process::id(),
        rt.config().rendezvous_key.as_deref().unwrap_or("-")
    );
    std::thread::sleep(Duration::from_secs(60));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Runner side.

fn base_env(spec: &mut LaunchSpec, scenario: &str) {
    for (k, v) in [
        (SCENARIO, scenario),
        ("SYMMETRIC_MEMORY_HEAP_SIZE", "8388608"),
        ("SYMSCHED_SCRATCH_SIZE", "2097152"),
        ("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "30000"),
        ("SYMSCHED_RENDEZVOUS_TIMEOUT_MS", "30000"),
        ("SHMEM_LOG_TO_STDOUT", "1"),
        ("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "WARNING"),
    ] {
        spec.env.push((k.into(), v.into()));
    }
}

fn run_ranks(scenario: &str, n: usize, extra: &[(&str, &str)]) -> LaunchOutcome {
    let exe = std::env::current_exe().expect("current exe");
    let mut spec = LaunchSpec::new(n, exe, Vec::<String>::new());
    base_env(&mut spec, scenario);
    for (k, v) in extra {
        spec.env.push(((*k).into(), (*v).into()));
    }
    spec.timeout = Some(Duration::from_secs(120));
    spec.capture = true;
    launch(&spec).expect("launch")
}

fn output_text(o: &LaunchOutcome) -> String {
    o.output
        .iter()
        .map(|(r, s, l)| format!("[rank {r} {s:?}] {l}\n"))
        .collect()
}

/// Runs the scenario and requires success and `count` lines with `marker`; returns the output.
fn expect_ok(
    scenario: &str,
    n: usize,
    extra: &[(&str, &str)],
    marker: &str,
    count: usize,
) -> Result<String, String> {
    let o = run_ranks(scenario, n, extra);
    let text = output_text(&o);
    if let Some(f) = &o.failure {
        return Err(format!("{f}:\n{text}"));
    }
    let hits = text.lines().filter(|l| l.contains(marker)).count();
    if hits != count {
        return Err(format!("expected {count}x {marker}, got {hits}:\n{text}"));
    }
    Ok(text)
}

fn lines_with<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(marker)).collect()
}

fn t_abort(n: usize) -> Result<String, String> {
    let text = expect_ok("abort", n, &[], "RESET_OK", 2 * n)?;
    let seen = lines_with(&text, "ABORT_SEEN");
    if seen.len() != n - 1 || lines_with(&text, "REFUSED_AT_ONCE").len() != n {
        return Err(text);
    }
    if lines_with(&text, "OTHER_GROUP_OK").len() != 2 {
        return Err(format!("the unaffected group failed:\n{text}"));
    }
    let lat: Vec<String> = seen
        .iter()
        .filter_map(|l| l.split("latency_ms=").nth(1))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    Ok(format!(
        "peers noticed after {lat:?} ms; refused at once; reset twice"
    ))
}

fn t_reset_fails() -> Result<String, String> {
    let text = expect_ok("reset_fails", 3, &[], "REFUSED_FOR_GOOD", 3)?;
    if lines_with(&text, "RESET_TIMEOUT").is_empty() {
        return Err(format!("no rank reported the reset timeout:\n{text}"));
    }
    Ok("timed-out reset names rank 2; the group is refused for good on every rank".into())
}

fn t_skip_add_set() -> Result<String, String> {
    let text = expect_ok("skip_add_set", 3, &[], "SKIP_OK", 3)?;
    let add = lines_with(&text, "ADD_TIMEOUT");
    Ok(add
        .first()
        .map_or(String::new(), |l| l.chars().skip(40).take(200).collect()))
}

fn t_skip_alltoall() -> Result<String, String> {
    let text = expect_ok("skip_alltoall", 4, &[], "A2A_OK", 4)?;
    if lines_with(&text, "A2A_TIMEOUT").len() != 3 {
        return Err(text);
    }
    Ok("ranks 0, 1, 2 name rank 3".into())
}

fn t_exec_alltoall_skip() -> Result<String, String> {
    let text = expect_ok(
        "exec_alltoall_skip",
        4,
        &[("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "800")],
        "EXEC_TIMEOUT",
        3,
    )?;
    Ok(lines_with(&text, "EXEC_TIMEOUT")[0]
        .chars()
        .take(220)
        .collect())
}

fn t_log_debug() -> Result<String, String> {
    let text = expect_ok(
        "log_debug",
        2,
        &[("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "DEBUG")],
        "LOG_DEBUG_DONE",
        2,
    )?;
    if text.contains('\x1b') {
        return Err(format!("ANSI codes in redirected output:\n{text}"));
    }
    for want in [
        "symsched runtime logging",
        concat!("version=", env!("CARGO_PKG_VERSION")),
        "colour off",
        "symmetric heap ready",
    ] {
        if !text.contains(want) {
            return Err(format!("`{want}` missing:\n{text}"));
        }
    }
    let launches: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" launch ") && l.contains("schedule=\"allreduce_one_shot\""))
        .collect();
    // Three launches per rank, each with its group, bytes, duration and outcome.
    if launches.len() != 6
        || !launches.iter().all(|l| {
            l.contains("group=\"[0, 1]\"")
                && l.contains("bytes=")
                && l.contains("duration_us=")
                && l.contains("outcome=\"ok\"")
        })
    {
        return Err(format!("launch records {launches:?}:\n{text}"));
    }
    Ok(format!("{} launch records, no ANSI", launches.len()))
}

/// One rank with its stdout on a pseudo-terminal: the log is coloured there.
fn t_log_tty() -> Result<String, String> {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors.
    if unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    } != 0
    {
        return Err(format!("openpty: {}", std::io::Error::last_os_error()));
    }
    use std::os::fd::FromRawFd;
    // SAFETY: fresh descriptors owned here.
    let (master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(SCENARIO, "log_line")
        .envs(single_rank_env())
        .env("SHMEM_LOG_TO_STDOUT", "1")
        .env("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "INFO")
        .stdout(Stdio::from(slave))
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut m = master;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the child closed the terminal.
        while let Ok(k) = m.read(&mut buf) {
            if k == 0 {
                break;
            }
            out.extend_from_slice(&buf[..k]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    let st = wait_bounded(&mut child, Duration::from_secs(30))?;
    let out = reader.join().map_err(|_| "reader panicked")?;
    if !st.success() || !out.contains("LOG_LINE_DONE") {
        return Err(format!("{st}: {out}"));
    }
    if !out.contains("\x1b[") || !out.contains("colour on") {
        return Err(format!("no colour on a terminal: {out:?}"));
    }
    Ok("ANSI colour on a terminal".into())
}

fn single_rank_env() -> Vec<(String, String)> {
    [
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("LOCAL_RANK", "0"),
        ("LOCAL_WORLD_SIZE", "1"),
        (
            "SYMSCHED_RENDEZVOUS_KEY",
            "00000000000000000000000000000001",
        ),
        ("SYMMETRIC_MEMORY_HEAP_SIZE", "8388608"),
        ("SYMSCHED_SCRATCH_SIZE", "2097152"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn wait_bounded(
    child: &mut std::process::Child,
    limit: Duration,
) -> Result<std::process::ExitStatus, String> {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(st);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("child {} did not finish in {limit:?}", child.id()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A scratch directory removed on drop.
struct Sandbox(PathBuf);

impl Sandbox {
    fn new(tag: &str, mode: u32) -> Sandbox {
        let d = std::env::temp_dir().join(format!("symsched-reltest-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).expect("sandbox");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).expect("chmod");
        Sandbox(d)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid never fails.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `f` in a forked child as user nobody; returns its exit code.
fn as_nobody(f: impl FnOnce() -> i32) -> Result<i32, String> {
    // SAFETY: the runner is single-threaded here; the child only makes system calls and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork".into());
    }
    if pid == 0 {
        // SAFETY: dropping privileges in the child, then plain system calls.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                libc::_exit(100);
            }
            libc::_exit(f());
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Ok(libc::WEXITSTATUS(status))
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL")
}

/// A planted link named like the rank's log file is not followed; the victim is untouched.
fn t_log_symlink() -> Result<String, String> {
    let sb = Sandbox::new("logsym", 0o700);
    let dir = sb.0.join("logs");
    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| e.to_string())?;
    let victim = sb.0.join("victim");
    std::fs::write(&victim, "precious\n").map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(SCENARIO, "log_symlink")
        .envs(single_rank_env())
        .env("SHMEM_LOG_TO_STDOUT", "0")
        .env("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "INFO")
        .env("SYMSCHED_LOG_DIR", &dir)
        .env("REL_VICTIM", &victim)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let st = wait_bounded(&mut child, Duration::from_secs(30))?;
    let o = child.wait_with_output().map_err(|e| e.to_string())?;
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    if !st.success() || !out.contains("LOG_SYMLINK_DONE") {
        return Err(format!("{st}\n{out}\n{err}"));
    }
    let content = std::fs::read_to_string(&victim).map_err(|e| e.to_string())?;
    if content != "precious\n" {
        return Err(format!("the victim was written: {content:?}"));
    }
    if !err.contains("not logging to a file") || !err.contains("without following links") {
        return Err(format!("no refusal on stderr:\n{err}"));
    }
    if !err.contains("symsched runtime logging") {
        return Err(format!("records did not reach stderr:\n{err}"));
    }
    Ok("link not followed, records on stderr".into())
}

/// User nobody pre-creates the default per-user log directory in a shared (sticky, 1777)
/// temporary directory and plants links in it: the rank refuses the directory.
fn t_log_dir_hijacked() -> Result<String, String> {
    if !is_root() {
        return Ok("SKIPPED (needs root to play user nobody)".into());
    }
    let sb = Sandbox::new("loghijack", 0o1777);
    let uid = unsafe { libc::geteuid() };
    let hijacked = sb.0.join(format!("symsched-logs-{uid}"));
    let victim = sb.0.join("victim");
    std::fs::write(&victim, "precious\n").map_err(|e| e.to_string())?;
    let (cdir, cvictim) = (cpath(&hijacked), cpath(&victim));
    let links: Vec<CString> = (0..64)
        .map(|r| cpath(&hijacked.join(format!("symsched-rank{r}-pid{r}.log"))))
        .collect();
    let code = as_nobody(move || unsafe {
        if libc::mkdir(cdir.as_ptr(), 0o777) != 0 || libc::chmod(cdir.as_ptr(), 0o777) != 0 {
            return 1;
        }
        for l in &links {
            libc::symlink(cvictim.as_ptr(), l.as_ptr());
        }
        0
    })?;
    if code != 0 {
        return Err(format!("nobody could not set the trap ({code})"));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(SCENARIO, "log_line")
        .envs(single_rank_env())
        .env("SHMEM_LOG_TO_STDOUT", "0")
        .env("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "INFO")
        .env("TMPDIR", &sb.0)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("SYMSCHED_LOG_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let st = wait_bounded(&mut child, Duration::from_secs(30))?;
    let o = child.wait_with_output().map_err(|e| e.to_string())?;
    let err = String::from_utf8_lossy(&o.stderr);
    if !st.success() {
        return Err(format!("{st}\n{err}"));
    }
    if !err.contains(&format!("belongs to uid {NOBODY}")) {
        return Err(format!("the hijacked directory was not refused:\n{err}"));
    }
    let entries = std::fs::read_dir(&hijacked)
        .map_err(|e| e.to_string())?
        .count();
    let content = std::fs::read_to_string(&victim).map_err(|e| e.to_string())?;
    if entries != 64 || content != "precious\n" {
        return Err(format!("{entries} entries, victim {content:?}"));
    }
    Ok("directory of uid 65534 refused, links untouched, records on stderr".into())
}

/// Every malformed runtime knob stops `Runtime::init_from_env` with an error naming it.
fn t_env_refused() -> Result<String, String> {
    let cases: &[(&str, &str, &str)] = &[
        ("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "LOUD", "not a log level"),
        (
            "SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS",
            "0",
            "every wait time out",
        ),
        ("SHMEM_LOG_TO_STDOUT", "yes", "not 0 or 1"),
        (
            "SYMSCHED_RENDEZVOUS_TIMEOUT_MS",
            "garbage",
            "not a whole number",
        ),
        (
            "SYMMETRIC_MEMORY_HEAP_SIZE",
            "1.5G",
            "not a number of bytes",
        ),
        ("SYMMETRIC_MEMORY_HEAP_SIZE", "100", "outside"),
        ("SYMSCHED_SCRATCH_SIZE", "-1", "not a number of bytes"),
        ("SYMSCHED_NODE_ID", "a b", "without spaces"),
        ("SYMSCHED_LOG_DIR", "logs", "absolute"),
        ("SYMSCHED_RENDEZVOUS_KEY", "xyz", "hexadecimal"),
    ];
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    for (var, value, want) in cases {
        let mut c = Command::new(&exe);
        c.env(SCENARIO, "env_bad")
            .envs(single_rank_env())
            .env(var, value);
        let o = c.output().map_err(|e| e.to_string())?;
        let out = String::from_utf8_lossy(&o.stdout);
        if !o.status.success()
            || !out.contains("ENV_ERR")
            || !out.contains(var)
            || !out.contains(want)
        {
            return Err(format!(
                "{var}={value}: {out}{}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    Ok(format!("{} malformed values refused", cases.len()))
}

/// Starts `n` ranks torchrun-style (no launcher, derived rendezvous directory) with `env`;
/// returns their combined output once all exited (bounded).
fn torchrun_style(scenario: &str, n: usize, env: &[(&str, &Path)]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let port = (20000 + std::process::id() % 20000 + 7).to_string();
    let job = format!("reltest{}", std::process::id());
    let mut kids = Vec::new();
    for r in 0..n {
        let mut c = Command::new(&exe);
        c.env(SCENARIO, scenario)
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .env("MASTER_PORT", &port)
            .env("SYMSCHED_JOB_ID", &job)
            .env_remove("SYMSCHED_RENDEZVOUS_DIR")
            .env_remove("SYMSCHED_RENDEZVOUS_KEY")
            .env("SYMMETRIC_MEMORY_HEAP_SIZE", "8388608")
            .env("SYMSCHED_SCRATCH_SIZE", "1048576")
            .env("SYMSCHED_RENDEZVOUS_TIMEOUT_MS", "20000")
            .env("SHMEM_LOG_TO_STDOUT", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        kids.push(c.spawn().map_err(|e| e.to_string())?);
    }
    let mut text = String::new();
    let mut failed = false;
    for (r, mut k) in kids.into_iter().enumerate() {
        let st = wait_bounded(&mut k, Duration::from_secs(40));
        let o = k.wait_with_output().map_err(|e| e.to_string())?;
        failed |= !st.as_ref().is_ok_and(|s| s.success());
        text += &format!(
            "[rank {r}] {st:?}\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    if failed {
        return Err(text);
    }
    Ok(text)
}

/// A rendezvous base another user made (`$XDG_RUNTIME_DIR` of someone else, or one with a loose
/// mode) is skipped at once: the job still meets, elsewhere, without waiting.
fn t_rendezvous_base_hijacked() -> Result<String, String> {
    let sb = Sandbox::new("rdvhijack", 0o755);
    let xdg = sb.0.join("xdg");
    std::fs::create_dir(&xdg).map_err(|e| e.to_string())?;
    let how = if is_root() {
        // SAFETY: chown of a directory we just created.
        if unsafe { libc::chown(cpath(&xdg).as_ptr(), NOBODY, NOBODY) } != 0 {
            return Err("chown".into());
        }
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        "owned by uid 65534"
    } else {
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| e.to_string())?;
        "mode 0777"
    };
    let t = Instant::now();
    let text = torchrun_style("boot", 2, &[("XDG_RUNTIME_DIR", &xdg), ("HOME", &sb.0)])?;
    let dirs: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split("dir=").nth(1))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    if dirs.len() != 1
        || dirs
            .iter()
            .any(|d| d.starts_with(xdg.to_str().unwrap_or("?")))
    {
        return Err(format!("ranks met in {dirs:?}:\n{text}"));
    }
    let dir = PathBuf::from(dirs.iter().next().copied().unwrap_or_default());
    if dir.exists() {
        return Err(format!("{} left behind", dir.display()));
    }
    Ok(format!(
        "base {how} skipped, met in {} in {:.2} s, removed",
        dir.display(),
        t.elapsed().as_secs_f64()
    ))
}

/// User nobody connects to the job's rendezvous socket and sends a hello: refused, and the
/// job still completes.
fn t_foreign_peer_refused() -> Result<String, String> {
    if !is_root() {
        return Ok("SKIPPED (needs root to play user nobody)".into());
    }
    let key = format!("{:032x}", (std::process::id() as u128) << 64 | 0xfeed);
    let name = format!("symsched-{key}");
    // The intruder: keeps connecting for two seconds, sending a plausible hello each time.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *d = *s as libc::c_char;
    }
    let alen = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    let hello = b"hello\t1\t1\t1\tnode";
    // SAFETY: fork in the single-threaded runner; the intruder child only makes system calls.
    let intruder = unsafe { libc::fork() };
    if intruder == 0 {
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                libc::_exit(100);
            }
            let mut connected = 0;
            let start = libc::time(std::ptr::null_mut());
            while libc::time(std::ptr::null_mut()) - start < 3 {
                let s = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
                if libc::connect(s, &addr as *const _ as *const libc::sockaddr, alen) == 0 {
                    connected += 1;
                    libc::send(s, hello.as_ptr() as *const libc::c_void, hello.len(), 0);
                }
                libc::close(s);
                libc::usleep(2000);
            }
            libc::_exit(if connected > 0 { 0 } else { 1 });
        }
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut kids = Vec::new();
    for r in 0..2 {
        if r == 1 {
            // Give the intruder time to reach the listener first.
            std::thread::sleep(Duration::from_millis(600));
        }
        kids.push(
            Command::new(&exe)
                .env(SCENARIO, "boot")
                .envs(single_rank_env())
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("LOCAL_WORLD_SIZE", "2")
                .env("SYMSCHED_RENDEZVOUS_KEY", &key)
                .env("SYMSCHED_RENDEZVOUS_TIMEOUT_MS", "20000")
                .env("SHMEM_LOG_TO_STDOUT", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| e.to_string())?,
        );
    }
    let mut text = String::new();
    let mut ok = true;
    for mut k in kids {
        let st = wait_bounded(&mut k, Duration::from_secs(30));
        let o = k.wait_with_output().map_err(|e| e.to_string())?;
        ok &= st.as_ref().is_ok_and(|s| s.success());
        text += &String::from_utf8_lossy(&o.stdout);
        text += &String::from_utf8_lossy(&o.stderr);
    }
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(intruder, &mut status, 0) };
    if !ok || text.matches("BOOT_OK").count() != 2 {
        return Err(text);
    }
    if libc::WEXITSTATUS(status) != 0 {
        return Err(format!(
            "the intruder never connected (status {status}):\n{text}"
        ));
    }
    if !text.contains("foreign rendezvous connection refused") || !text.contains("uid 65534") {
        return Err(format!("no refusal logged:\n{text}"));
    }
    Ok("intruder of uid 65534 refused, job completed".into())
}

/// `kill -9` of the launcher: its ranks die with it, and nothing remains — no process, no
/// socket, no file or directory (the sandbox that served as TMPDIR and XDG_RUNTIME_DIR stays
/// empty, and no entry of /tmp carries the job's key).
fn t_sigkill_launcher() -> Result<String, String> {
    use std::io::BufRead;
    let sb = Sandbox::new("sigkill", 0o700);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut launcher = Command::new(exe)
        .env("SYMSCHED_REL_LAUNCHER", "sleeper")
        .env("TMPDIR", &sb.0)
        .env("XDG_RUNTIME_DIR", &sb.0)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let lpid = launcher.id() as i32;
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        // SAFETY: our own child; harmless if it is already gone and reaped by then (the
        // runner waits for it before this fires in every passing run).
        unsafe { libc::kill(lpid, libc::SIGKILL) };
    });
    let mut lines = std::io::BufReader::new(launcher.stdout.take().ok_or("stdout")?).lines();
    let (mut pids, mut keys) = (Vec::new(), BTreeSet::new());
    while pids.len() < 2 {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(rest) = l.split("READY pid=").nth(1) {
            let mut it = rest.split(" key=");
            pids.push(
                it.next()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                    .ok_or("pid")?,
            );
            keys.insert(it.next().unwrap_or("").trim().to_string());
        }
    }
    if pids.len() != 2 || keys.len() != 1 {
        // SAFETY: our own child.
        unsafe { libc::kill(lpid, libc::SIGKILL) };
        let _ = launcher.wait();
        return Err(format!("ranks did not start: {pids:?} {keys:?}"));
    }
    let key = keys.into_iter().next().unwrap_or_default();
    // SAFETY: our own child.
    unsafe { libc::kill(lpid, libc::SIGKILL) };
    let _ = launcher.wait();
    drop(watchdog);
    let t = Instant::now();
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
    };
    while pids.iter().any(|&p| alive(p)) {
        if t.elapsed() > Duration::from_secs(5) {
            return Err(format!("ranks {pids:?} outlived the launcher"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let died_in = t.elapsed();
    let sockets = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    if sockets.contains(&key) {
        return Err(format!("socket @symsched-{key} still exists"));
    }
    let left: Vec<_> = std::fs::read_dir(&sb.0)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .collect();
    if !left.is_empty() {
        return Err(format!("left in TMPDIR/XDG_RUNTIME_DIR: {left:?}"));
    }
    let in_tmp: Vec<_> = std::fs::read_dir("/tmp")
        .map_err(|e| e.to_string())?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&key[..8]))
        .map(|e| e.path())
        .collect();
    if !in_tmp.is_empty() {
        return Err(format!("left in /tmp: {in_tmp:?}"));
    }
    Ok(format!(
        "ranks gone {died_in:?} after kill -9; no socket, no file"
    ))
}

/// The child that plays the launcher for [`t_sigkill_launcher`].
fn launcher_child(scenario: &str) -> ExitCode {
    let exe = std::env::current_exe().expect("exe");
    let mut spec = LaunchSpec::new(2, exe, Vec::<String>::new());
    base_env(&mut spec, scenario);
    spec.timeout = Some(Duration::from_secs(90));
    match launch(&spec) {
        Ok(o) if o.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

fn main() -> ExitCode {
    if let Ok(s) = std::env::var(SCENARIO) {
        return match rank_main(&s) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("RANK_ERROR {e}");
                ExitCode::from(1)
            }
        };
    }
    if let Ok(s) = std::env::var("SYMSCHED_REL_LAUNCHER") {
        return launcher_child(&s);
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    type T = fn() -> Result<String, String>;
    let tests: Vec<(&str, T)> = vec![
        ("abort_3_ranks", || t_abort(3)),
        ("abort_4_ranks", || t_abort(4)),
        ("failed_reset_refuses_for_good", t_reset_fails),
        ("timeout_names_skipper_add_set_weighted", t_skip_add_set),
        ("timeout_names_skipper_repeated_alltoall", t_skip_alltoall),
        (
            "timeout_names_skipper_executor_alltoall",
            t_exec_alltoall_skip,
        ),
        ("log_debug_every_launch_no_colour_redirected", t_log_debug),
        ("log_colour_on_terminal", t_log_tty),
        ("log_symlink_not_followed", t_log_symlink),
        ("log_dir_of_other_user_refused", t_log_dir_hijacked),
        ("env_values_refused", t_env_refused),
        (
            "rendezvous_base_of_other_user_skipped",
            t_rendezvous_base_hijacked,
        ),
        ("rendezvous_foreign_peer_refused", t_foreign_peer_refused),
        ("sigkill_launcher_leaves_nothing", t_sigkill_launcher),
    ];
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in tests {
        if !filters.is_empty() && !filters.iter().any(|x| name.contains(x.as_str())) {
            continue;
        }
        let t = Instant::now();
        match f() {
            Ok(note) => {
                passed += 1;
                println!(
                    "test {name} ... ok ({note}; {:.2} s)",
                    t.elapsed().as_secs_f64()
                );
            }
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED\n{e}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
