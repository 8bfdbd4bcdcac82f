//! Multi-process tests of the runtime core. The binary is both the runner and the ranks: the
//! runner launches copies of itself with `SYMSCHED_TEST_SCENARIO` set (through the launcher or
//! directly), each copy runs one rank of the scenario and exits 0 on success. Every launch has
//! an overall timeout and every wait a deadline; the launcher kills stragglers and removes the
//! rendezvous directory even on failure.

mod common;

use common::ranks::shm_entries;
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use symsched_runtime::launcher::{launch, LaunchOutcome, LaunchSpec};
use symsched_runtime::{Cmp, Runtime, RuntimeConfig, RuntimeError, SignalMode, WaitContext};

const SCENARIO: &str = "SYMSCHED_TEST_SCENARIO";

// ---------------------------------------------------------------------------------------------
// Rank side.

fn ctx(step: &str) -> WaitContext {
    WaitContext::new("test", step, "s")
}

fn rank_main(scenario: &str) -> Result<(), String> {
    let r = match scenario {
        "boot" => boot(),
        "alloc" => alloc(),
        "mismatch" => mismatch(),
        "cmp" => cmp(),
        "pws" => pws(),
        "overlap" => overlap(),
        "timeout" => timeout(),
        "kill9" => kill9(),
        "perm" => perm(),
        "crossnode" => crossnode(),
        "fail" => fail(),
        "rdv_timeout" => rdv_timeout(),
        other => return Err(format!("unknown scenario {other}")),
    };
    r.map_err(|e| e.to_string())
}

fn boot() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let (n, me) = (w.size(), w.rank());
    assert_eq!(rt.rank(), me);
    let buf = rt.malloc(64 * n)?;
    let s = w.signal_slots("boot", 1)?;
    for p in 0..n {
        let v = (me as u64) * 1000 + 7;
        w.put_bytes_with_signal(
            p,
            buf.offset + 64 * me,
            &v.to_le_bytes(),
            s.slot(0),
            SignalMode::Add,
            1,
        )?;
    }
    w.wait(s.slot(0), Cmp::Ge, n as u64, &ctx("boot"))?;
    for p in 0..n {
        let ptr = w.local_ptr(buf.offset + 64 * p, 8)?;
        let v = unsafe { (ptr as *const u64).read_unaligned() };
        assert_eq!(v, p as u64 * 1000 + 7, "slot of rank {p}");
        assert!(rt.peer_pid(p).is_some());
    }
    for _ in 0..20 {
        w.barrier()?;
    }
    println!("BOOT_OK rank {me}");
    rt.finalize()
}

fn alloc() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let mut offs = Vec::new();
    let mut live = Vec::new();
    for i in 0..40usize {
        let a = rt.malloc(1 + i * 97 % 5000)?;
        offs.push(a.offset as u64);
        live.push(a);
        if i % 3 == 2 {
            let f = live.remove(i % live.len());
            rt.free(f.offset)?;
        }
    }
    let b = rt.empty(3000, 4096)?;
    assert_eq!(b.offset % 4096, 0);
    offs.push(b.offset as u64);
    let st = rt.stats();
    assert!(st.allocated > 0 && st.peak >= st.allocated);
    let table = rt.malloc(offs.len() * 8)?;
    let bytes: Vec<u8> = offs.iter().flat_map(|o| o.to_le_bytes()).collect();
    w.put_bytes(w.rank(), table.offset, &bytes)?;
    w.barrier()?;
    for p in 0..w.size() {
        let mut theirs = vec![0u8; bytes.len()];
        w.get_bytes(p, table.offset, &mut theirs)?;
        assert_eq!(theirs, bytes, "offsets of rank {p} differ");
    }
    w.barrier()?;
    println!(
        "ALLOC_OK allocated={} peak={} free={}",
        st.allocated, st.peak, st.free
    );
    rt.finalize()
}

fn mismatch() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    w.barrier()?;
    let _ = rt.malloc(if rt.rank() == 1 { 128 } else { 256 })?;
    match w.barrier() {
        Err(e @ RuntimeError::AllocMismatch { .. }) => println!("BARRIER_MISMATCH {e}"),
        other => panic!("expected an allocation mismatch, got {other:?}"),
    }
    let rev: Vec<usize> = (0..rt.world_size()).rev().collect();
    match rt.group(&rev, false) {
        Err(e @ RuntimeError::AllocMismatch { .. }) => println!("CREATE_MISMATCH {e}"),
        other => panic!("expected an allocation mismatch, got {other:?}"),
    }
    Ok(())
}

fn cmp() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    // (cmp, value set by rank 0, target, self-set by rank 1 first)
    let cases = [
        (Cmp::Eq, 5u64, 5u64, None),
        (Cmp::Ne, 9, 0, None),
        (Cmp::Gt, 4, 3, None),
        (Cmp::Ge, 4, 4, None),
        (Cmp::Lt, 3, 5, Some(100u64)),
        (Cmp::Le, 3, 3, Some(100)),
    ];
    let s = w.signal_slots("cmp", cases.len() + 1)?;
    let ack = s.slot(cases.len());
    if w.rank() == 1 {
        for (i, c) in cases.iter().enumerate() {
            if let Some(v) = c.3 {
                w.signal(1, s.slot(i), SignalMode::Set, v)?;
            }
        }
    }
    w.barrier()?;
    for (i, &(cmp, value, target, _)) in cases.iter().enumerate() {
        if w.rank() == 0 {
            std::thread::sleep(Duration::from_millis(20));
            w.signal(1, s.slot(i), SignalMode::Set, value)?;
            w.wait(ack, Cmp::Ge, i as u64 + 1, &ctx("ack"))?;
        } else {
            // Not yet satisfied: a short wait must time out.
            if i == 0 {
                let e = w.wait_value_timeout(
                    s.slot(i),
                    Cmp::Eq,
                    6,
                    &ctx("neg"),
                    Duration::from_millis(50),
                );
                assert!(
                    matches!(e, Err(RuntimeError::SignalTimeout { .. })),
                    "{e:?}"
                );
            }
            let v = w.wait_value(s.slot(i), cmp, target, &ctx("cmp"))?;
            assert_eq!(v, value, "{cmp:?}");
            assert!(cmp.holds(v, target));
            w.signal(0, ack, SignalMode::Add, 1)?;
        }
    }
    println!("CMP_OK");
    rt.finalize()
}

fn pws() -> Result<(), RuntimeError> {
    const K: usize = 8;
    const BUF: usize = 4096;
    const N: u64 = 4000;
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let ring = rt.malloc(K * BUF)?;
    let stage = rt.malloc(BUF)?;
    let s = w.signal_slots("pws", 2)?;
    let (data, ack) = (s.slot(0), s.slot(1));
    let me = w.rank();
    let peer = me ^ 1;
    if me % 2 == 0 {
        let words = w.local_ptr(stage.offset, BUF)? as *mut u64;
        for i in 1..=N {
            if i > K as u64 {
                w.wait(ack, Cmp::Ge, i - K as u64, &ctx("ack"))?;
            }
            for k in 0..BUF / 8 {
                unsafe { words.add(k).write_volatile(i ^ ((k as u64) << 32)) };
            }
            let dst = ring.offset + (i as usize % K) * BUF;
            w.put_with_signal(peer, dst, stage.offset, BUF, data, SignalMode::Add, 1)?;
        }
    } else {
        for i in 1..=N {
            w.wait(data, Cmp::Ge, i, &ctx("data"))?;
            let words = w.local_ptr(ring.offset + (i as usize % K) * BUF, BUF)? as *const u64;
            for k in 0..BUF / 8 {
                let v = unsafe { words.add(k).read_volatile() };
                assert_eq!(
                    v,
                    i ^ ((k as u64) << 32),
                    "iteration {i} word {k}: data seen before its signal"
                );
            }
            w.signal(peer, ack, SignalMode::Add, 1)?;
        }
    }
    println!("PWS_OK");
    rt.finalize()
}

fn exchange_loop(
    g: &symsched_runtime::Group,
    rt: &Runtime,
    iters: u64,
    tag: &str,
) -> Result<(), RuntimeError> {
    const LEN: usize = 16;
    let recv = g.scratch(&format!("{tag}/recv"), LEN * 8)?;
    let s = g.signal_slots(tag, 2)?;
    let (data, consumed) = (s.slot(0), s.slot(1));
    let peer = 1 - g.rank();
    let me_global = rt.rank() as u64;
    let peer_global = g.global_rank(peer)? as u64;
    for it in 0..iters {
        if it > 0 {
            g.wait(consumed, Cmp::Ge, it, &ctx("consumed"))?;
        }
        let v: Vec<u8> = (0..LEN as u64)
            .flat_map(|j| ((me_global + 1) * (it + 1) + j).to_le_bytes())
            .collect();
        g.put_bytes_with_signal(peer, recv, &v, data, SignalMode::Add, 1)?;
        g.wait(data, Cmp::Ge, it + 1, &ctx("data"))?;
        let mut got = vec![0u8; LEN * 8];
        g.get_bytes(g.rank(), recv, &mut got)?;
        for j in 0..LEN {
            let x = u64::from_le_bytes(got[j * 8..j * 8 + 8].try_into().unwrap());
            let sum = x + (me_global + 1) * (it + 1) + j as u64;
            let want = (me_global + 1 + peer_global + 1) * (it + 1) + 2 * j as u64;
            assert_eq!(sum, want, "group {} iteration {it}", g.name());
        }
        g.signal(peer, consumed, SignalMode::Add, 1)?;
    }
    g.barrier()
}

fn overlap() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let r = rt.rank();
    // Pair groups r^1 (TP), r^2 (DP) and, with 8 ranks, r^4: every rank is in all of them and
    // runs each from its own thread, concurrently. Created in the same order on every rank.
    let mut groups = Vec::new();
    let mut bit = 1;
    while bit < rt.world_size() {
        let pair = [r.min(r ^ bit), r.max(r ^ bit)];
        groups.push(rt.group(&pair, false)?);
        bit <<= 1;
    }
    let ids: BTreeSet<u64> = groups.iter().map(|g| g.id()).collect();
    assert_eq!(ids.len(), groups.len());
    std::thread::scope(|sc| {
        let hs: Vec<_> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let rt = &rt;
                sc.spawn(move || exchange_loop(g, rt, 400, &format!("x{i}")))
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().expect("group thread"))
    })?;
    println!("OVERLAP_OK");
    rt.finalize()
}

fn timeout() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let s = w.signal_slots("t", 2)?;
    if w.rank() == 0 {
        let t = Instant::now();
        let c = WaitContext::new("sched_x", "step 7", "ready[3]").expecting([1]);
        let e = w
            .wait(s.slot(0), Cmp::Ge, 1, &c)
            .expect_err("nobody signals");
        let el = t.elapsed();
        let msg = e.to_string();
        println!("TIMEOUT_MSG {msg}");
        assert!(matches!(e, RuntimeError::SignalTimeout { .. }));
        for want in [
            "rank 0",
            "[0, 1]",
            "sched_x",
            "step 7",
            "ready[3]",
            "Ge 1",
            "observed 0",
            "never signalled: [1]",
            "400 ms",
        ] {
            assert!(msg.contains(want), "`{want}` missing from: {msg}");
        }
        assert!(
            el >= Duration::from_millis(400) && el < Duration::from_secs(3),
            "{el:?}"
        );
        w.signal(1, s.slot(1), SignalMode::Add, 1)?;
    } else {
        w.wait_value_timeout(
            s.slot(1),
            Cmp::Ge,
            1,
            &ctx("release"),
            Duration::from_secs(30),
        )?;
    }
    println!("TIMEOUT_OK");
    Ok(())
}

fn kill9() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let s = w.signal_slots("k", 1)?;
    w.barrier()?;
    if w.rank() == w.size() - 1 {
        std::thread::sleep(Duration::from_millis(300));
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        unreachable!();
    }
    let t = Instant::now();
    let e = w
        .wait(s.slot(0), Cmp::Ge, 1, &ctx("stuck"))
        .expect_err("nobody signals");
    let el = t.elapsed();
    println!("KILL_MSG {e}");
    match e {
        RuntimeError::PeerDied(d) if d.peer == w.size() - 1 => {}
        other => panic!("expected PeerDied naming the last rank, got {other:?}"),
    }
    assert!(el < Duration::from_millis(2300), "detected after {el:?}");
    println!("KILL_OK elapsed_ms={}", el.as_millis());
    Ok(())
}

fn memfd_fds() -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd")
        .expect("fd dir")
        .flatten()
    {
        if let (Ok(t), Some(n)) = (
            std::fs::read_link(e.path()),
            e.file_name().to_str().and_then(|s| s.parse().ok()),
        ) {
            let t = t.to_string_lossy().into_owned();
            if t.contains("memfd:symsched-heap") {
                v.push((n, t));
            }
        }
    }
    v
}

fn perm() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    w.barrier()?;
    if rt.rank() == 0 {
        let fds = memfd_fds();
        assert!(!fds.is_empty(), "no heap memfd found");
        let pid = std::process::id();
        for (fd, name) in &fds {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::fstat(*fd, &mut st) }, 0);
            assert_eq!(st.st_mode & 0o777, 0o600, "{name}");
            let path = std::ffi::CString::new(format!("/proc/{pid}/fd/{fd}")).unwrap();
            let me_can = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            assert!(me_can >= 0, "control: the owner can open its segment");
            unsafe { libc::close(me_can) };
            if unsafe { libc::getuid() } != 0 {
                println!("PERM_SKIPPED not root");
                continue;
            }
            let child = unsafe { libc::fork() };
            if child == 0 {
                unsafe {
                    let ok = libc::setgroups(0, std::ptr::null()) == 0
                        && libc::setgid(65534) == 0
                        && libc::setuid(65534) == 0;
                    if !ok {
                        libc::_exit(2);
                    }
                    let a = libc::open(path.as_ptr(), libc::O_RDWR);
                    let b = libc::open(path.as_ptr(), libc::O_RDONLY);
                    libc::_exit(if a < 0 && b < 0 { 0 } else { 1 });
                }
            }
            let mut status = 0;
            unsafe { libc::waitpid(child, &mut status, 0) };
            assert!(libc::WIFEXITED(status), "child status {status}");
            assert_eq!(
                libc::WEXITSTATUS(status),
                0,
                "user nobody could open {name} (2 = could not drop privileges)"
            );
            println!("PERM_OK {name}");
        }
    }
    w.barrier()?;
    rt.finalize()
}

fn crossnode() -> Result<(), RuntimeError> {
    // Emulate two nodes: ranks 0,1 on node-a and 2,3 on node-b (single-threaded here).
    let rank: usize = std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    std::env::set_var(
        "SYMSCHED_NODE_ID",
        if rank < 2 { "node-a" } else { "node-b" },
    );
    let rt = Runtime::init_from_env()?;
    let r = rt.rank();
    let w = rt.world()?;
    assert!(w.is_hierarchical());
    let other = if r < 2 { r + 2 } else { r - 2 };
    let pair = if r < 2 { [r, other] } else { [other, r] };
    match rt.group(&pair, false) {
        Err(e @ RuntimeError::CrossNode { .. }) => println!("CROSS_REFUSED {e}"),
        other => panic!("expected CrossNode, got {other:?}"),
    }
    let h = rt.group(&pair, true)?;
    let far = h.local_rank_of(other).unwrap();
    assert!(!h.is_reachable(far));
    assert!(matches!(
        h.peer_ptr(far, symsched_runtime::heap::USER_BASE, 8),
        Err(RuntimeError::PeerUnreachable { .. })
    ));
    assert!(matches!(
        h.signal_slots("x", 1)
            .and_then(|s| h.signal(far, s.slot(0), SignalMode::Add, 1)),
        Err(RuntimeError::PeerUnreachable { .. })
    ));
    h.barrier()?;
    // Same-node partner is reachable through the hierarchical world group.
    let near = r ^ 1;
    assert!(w.is_reachable(near));
    let not_member = if r == 0 { vec![1, 2] } else { vec![0, 3] };
    if !not_member.contains(&r) {
        assert!(matches!(
            rt.group(&not_member, true),
            Err(RuntimeError::NotAMember { .. })
        ));
    }
    w.barrier()?;
    println!("CROSSNODE_OK");
    rt.finalize()
}

/// The last rank never joins: the others must time out naming it.
fn rdv_timeout() -> Result<(), RuntimeError> {
    let rank: usize = std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let world: usize = std::env::var("WORLD_SIZE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    if rank == world - 1 {
        std::thread::sleep(Duration::from_secs(2));
        return Ok(());
    }
    match Runtime::init_from_env() {
        Err(e @ RuntimeError::RendezvousTimeout { .. }) => {
            println!("RDV_TIMEOUT {e}");
            Ok(())
        }
        other => panic!("expected a rendezvous timeout, got {:?}", other.map(|_| ())),
    }
}

fn fail() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    w.barrier()?;
    if rt.rank() == 2 {
        std::process::exit(3);
    }
    let s = w.signal_slots("f", 1)?;
    w.wait(s.slot(0), Cmp::Ge, 1, &ctx("forever"))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Runner side.

fn base_env(spec: &mut LaunchSpec, scenario: &str) {
    for (k, v) in [
        (SCENARIO, scenario),
        ("SYMMETRIC_MEMORY_HEAP_SIZE", "8388608"),
        ("SYMSCHED_SCRATCH_SIZE", "1048576"),
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

fn expect_ok(
    scenario: &str,
    n: usize,
    extra: &[(&str, &str)],
    marker: &str,
) -> Result<String, String> {
    let t = Instant::now();
    let o = run_ranks(scenario, n, extra);
    let text = output_text(&o);
    if let Some(f) = &o.failure {
        return Err(format!("rank {} failed ({}):\n{text}", f.rank, f.status));
    }
    let hits = text.matches(marker).count();
    if hits < 1 {
        return Err(format!("marker {marker} missing:\n{text}"));
    }
    if o.rendezvous_dir.exists() {
        return Err(format!(
            "rendezvous dir {} left behind",
            o.rendezvous_dir.display()
        ));
    }
    Ok(format!(
        "{n} ranks, {hits}x {marker}, {:.2} s",
        t.elapsed().as_secs_f64()
    ))
}

fn t_boot(n: usize) -> Result<String, String> {
    let r = expect_ok("boot", n, &[], "BOOT_OK")?;
    if !r.contains(&format!("{n}x BOOT_OK")) {
        return Err(format!("not every rank reported: {r}"));
    }
    Ok(r)
}

fn t_mismatch() -> Result<String, String> {
    let o = run_ranks("mismatch", 2, &[]);
    let text = output_text(&o);
    if o.failure.is_some()
        || text.matches("BARRIER_MISMATCH").count() != 2
        || text.matches("CREATE_MISMATCH").count() != 2
    {
        return Err(text);
    }
    for want in [
        "ALLOCATION MISMATCH",
        "first difference at op #",
        "size 128",
        "size 256",
    ] {
        if !text.contains(want) {
            return Err(format!("`{want}` missing:\n{text}"));
        }
    }
    Ok("detected at barrier and at group creation on both ranks".into())
}

fn t_rdv_timeout() -> Result<String, String> {
    let o = run_ranks(
        "rdv_timeout",
        3,
        &[("SYMSCHED_RENDEZVOUS_TIMEOUT_MS", "500")],
    );
    let text = output_text(&o);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("RDV_TIMEOUT")).collect();
    if lines.len() != 2 || !lines.iter().all(|l| l.contains("missing ranks [2]")) {
        return Err(format!(
            "expected both joined ranks to name rank 2:\n{text}"
        ));
    }
    if o.rendezvous_dir.exists() {
        return Err("rendezvous dir left behind".into());
    }
    Ok(lines[0].chars().take(160).collect())
}

/// Ranks started directly (torchrun style, derived rendezvous directory), one SIGKILLs itself.
fn t_kill9() -> Result<String, String> {
    let before = shm_entries();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let port = (20000 + std::process::id() % 20000).to_string();
    let job = format!("kill9test{}", std::process::id());
    let n = 4;
    let mut kids = Vec::new();
    for r in 0..n {
        let mut c = Command::new(&exe);
        c.env(SCENARIO, "kill9")
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("SYMSCHED_JOB_ID", &job)
            .env_remove("SYMSCHED_RENDEZVOUS_DIR")
            .env("SYMMETRIC_MEMORY_HEAP_SIZE", "8388608")
            .env("SYMSCHED_SCRATCH_SIZE", "1048576")
            .env("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "60000")
            .env("SHMEM_LOG_TO_STDOUT", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        kids.push(c.spawn().map_err(|e| e.to_string())?);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut outs = Vec::new();
    for (r, k) in kids.into_iter().enumerate() {
        // Bounded: a watchdog kills the child if the deadline passes.
        let pid = k.id() as i32;
        let wd = std::thread::spawn(move || {
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                if unsafe { libc::kill(pid, 0) } != 0 {
                    return;
                }
            }
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        let o = k.wait_with_output().map_err(|e| e.to_string())?;
        let _ = wd.join();
        outs.push((r, o));
    }
    let mut text = String::new();
    for (r, o) in &outs {
        text += &format!(
            "[rank {r}] status {:?}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for (r, o) in &outs {
        if *r == n - 1 {
            if o.status.signal() != Some(libc::SIGKILL) {
                return Err(format!("rank {r} should have been SIGKILLed:\n{text}"));
            }
        } else if !o.status.success() {
            return Err(format!("rank {r} failed:\n{text}"));
        }
    }
    if text.matches("KILL_OK").count() != n - 1 || !text.contains("peer rank 3") {
        return Err(text);
    }
    let dir = symsched_runtime::config::private_runtime_base()
        .map_err(|e| e.to_string())?
        .join(format!("symsched-{job}-{port}"));
    if dir.exists() {
        return Err(format!("rendezvous dir {} left behind", dir.display()));
    }
    let leaked: Vec<String> = shm_entries()
        .difference(&before)
        .filter(|e| e.contains("symsched"))
        .cloned()
        .collect();
    if !leaked.is_empty() {
        return Err(format!("/dev/shm entries left: {leaked:?}"));
    }
    let times: Vec<&str> = text.lines().filter(|l| l.starts_with("KILL_OK")).collect();
    Ok(format!("{times:?}"))
}

/// Without `SHMEM_LOG_TO_STDOUT` records go to a per-rank file in `SYMSCHED_LOG_DIR`, created
/// only by the rank that logged something.
fn t_log_file() -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("symsched-logtest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_string_lossy().into_owned();
    let r = expect_ok(
        "timeout",
        2,
        &[
            ("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "400"),
            ("SHMEM_LOG_TO_STDOUT", "0"),
            ("SYMSCHED_LOG_DIR", d.as_str()),
            ("HYPER_PARALLEL_SHMEM_LOG_LEVEL", "ERROR"),
        ],
        "TIMEOUT_OK",
    );
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map(|it| it.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let content: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    r?;
    if !content.contains("signal wait timed out") {
        return Err(format!("log content: {content}"));
    }
    let [f] = files.as_slice() else {
        return Err(format!("expected one log file, found {files:?}"));
    };
    let name = f
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.starts_with("symsched-rank0-pid") {
        return Err(format!("unexpected log file {name}"));
    }
    Ok(name)
}

fn t_fail() -> Result<String, String> {
    let t = Instant::now();
    let o = run_ranks("fail", 4, &[]);
    let el = t.elapsed();
    match &o.failure {
        Some(f) if f.rank == 2 && f.status == "exit code 3" => {}
        other => {
            return Err(format!(
                "expected rank 2 exit code 3, got {other:?}\n{}",
                output_text(&o)
            ))
        }
    }
    if o.rendezvous_dir.exists() {
        return Err("rendezvous dir left behind".into());
    }
    if el > Duration::from_secs(20) {
        return Err(format!("took {el:?}"));
    }
    for (r, st) in o.statuses.iter().enumerate() {
        if st.is_none() {
            return Err(format!("rank {r} not reaped"));
        }
    }
    Ok(format!(
        "rank 2 exit code 3 reported, others killed, {:.2} s",
        el.as_secs_f64()
    ))
}

/// The launcher forwards output line by line with a `[rank k]` prefix (run in a child process
/// so its stdout can be inspected).
fn t_prefix() -> Result<String, String> {
    if std::env::var("SYMSCHED_TEST_PREFIX_CHILD").is_ok() {
        unreachable!()
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let o = Command::new(exe)
        .env("SYMSCHED_TEST_PREFIX_CHILD", "1")
        .output()
        .map_err(|e| e.to_string())?;
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    for r in 0..3 {
        if !out.contains(&format!("[rank {r}] hello from {r}"))
            || !err.contains(&format!("[rank {r}] oops {r}"))
        {
            return Err(format!("stdout:\n{out}\nstderr:\n{err}"));
        }
    }
    Ok("stdout and stderr prefixed".into())
}

fn prefix_child() -> ExitCode {
    let spec = LaunchSpec::new(
        3,
        "sh",
        ["-c", "echo hello from $RANK; echo oops $RANK >&2"],
    );
    let o = launch(&spec).expect("launch");
    if o.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// SIGTERM to the launcher stops every rank and its descendants and reports an interruption,
/// not a rank failure (the launcher runs in a child process so it can be signalled).
fn t_term() -> Result<String, String> {
    use std::io::BufRead;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env("SYMSCHED_TEST_TERM_CHILD", "1")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done2 = done.clone();
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done2.load(std::sync::atomic::Ordering::SeqCst) {
            if Instant::now() > deadline {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut keys = BTreeSet::new();
    let mut seen = 0;
    while seen < 2 {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(k) = l.split("key=").nth(1) {
            keys.insert(k.trim().to_string());
            seen += 1;
        }
    }
    if keys.len() != 1 || keys.iter().any(|k| k.len() != 32) {
        return Err(format!(
            "expected both ranks to share one 32-digit key, got {keys:?}"
        ));
    }
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let st = child.wait();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = watchdog.join();
    let st = st.map_err(|e| e.to_string())?;
    if st.code() != Some(3) {
        return Err(format!("launcher child ended with {st}: {rest:?}"));
    }
    let report = rest.join("\n");
    if !report.contains("OUTCOME launcher interrupted by signal 15")
        || report.contains("failed")
        || !report.contains("stopped [0, 1]")
    {
        return Err(format!("interruption misreported: {report}"));
    }
    std::thread::sleep(Duration::from_millis(100));
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("61.37"))
        .collect();
    if !survivors.is_empty() {
        return Err(format!("descendants survived: {survivors:?}"));
    }
    Ok(format!("{report}; no descendants left"))
}

fn term_child() -> ExitCode {
    let spec = LaunchSpec::new(
        2,
        "sh",
        [
            "-c",
            "echo key=$SYMSCHED_RENDEZVOUS_KEY; sleep 61.37; echo never",
        ],
    );
    match launch(&spec) {
        Ok(o) if o.success() => ExitCode::SUCCESS,
        Ok(o) => {
            if let Some(f) = &o.failure {
                println!("OUTCOME {f}; stopped {:?}", o.stopped);
            }
            ExitCode::from(3)
        }
        Err(e) => {
            println!("OUTCOME launch error {e}");
            ExitCode::from(4)
        }
    }
}

/// Every bad input returns its typed error (single rank, in process).
fn t_bad_inputs() -> Result<String, String> {
    let dir = symsched_runtime::bootstrap::make_private_dir(std::path::Path::new("/tmp"))
        .map_err(|e| e.to_string())?;
    struct Rm(std::path::PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = Rm(dir.clone());
    let mut cfg = RuntimeConfig::local(0, 1, dir).map_err(|e| e.to_string())?;
    cfg.heap_size = 4 << 20;
    cfg.scratch_size = 1 << 20;
    cfg.signal_timeout = Duration::from_millis(100);
    let rt = Runtime::init(cfg).map_err(|e| e.to_string())?;
    let g = rt.world().map_err(|e| e.to_string())?;
    let a = rt.malloc(100).map_err(|e| e.to_string())?;
    let b = rt.malloc(200).map_err(|e| e.to_string())?;
    let heap_end = rt.heap().size();
    let mut n = 0;
    macro_rules! check {
        ($e:expr, $p:pat) => {{
            n += 1;
            match $e {
                Err($p) => {}
                other => return Err(format!("{}: got {:?}", stringify!($e), other.map(|_| ()))),
            }
        }};
    }
    check!(
        g.put(1, a.offset, a.offset, 8),
        RuntimeError::RankOutsideGroup { .. }
    );
    check!(g.global_rank(3), RuntimeError::RankOutsideGroup { .. });
    check!(
        g.put(0, heap_end - 4, a.offset, 8),
        RuntimeError::OffsetPastHeap { .. }
    );
    check!(
        g.get_bytes(0, usize::MAX - 2, &mut [0u8; 8]),
        RuntimeError::OffsetPastHeap { .. }
    );
    check!(g.local_ptr(0, 8), RuntimeError::ReservedRange { .. });
    check!(g.put_alloc(0, &a, &b), RuntimeError::SizeMismatch { .. });
    check!(
        g.signal(0, 0, SignalMode::Add, 1),
        RuntimeError::SlotOutOfRange { .. }
    );
    let s = g.signal_slots("k", 2).map_err(|e| e.to_string())?;
    check!(
        g.signal(0, s.slot(2), SignalMode::Add, 1),
        RuntimeError::SlotOutOfRange { .. }
    );
    check!(
        g.wait(s.slot(0), Cmp::Eq, 1, &ctx("t")),
        RuntimeError::SignalTimeout { .. }
    );
    check!(
        g.signal_slots("big", 1 << 20),
        RuntimeError::SignalPadExhausted { .. }
    );
    check!(
        g.scratch("huge", 2 << 20),
        RuntimeError::ScratchExhausted { .. }
    );
    g.cached("plan", || Ok(5u32)).map_err(|e| e.to_string())?;
    check!(
        g.cached("plan", || Ok(String::new())),
        RuntimeError::KeyConflict { .. }
    );
    check!(rt.group(&[0, 0], false), RuntimeError::InvalidGroup { .. });
    check!(rt.group(&[], false), RuntimeError::InvalidGroup { .. });
    check!(
        rt.group(&[0, 5], false),
        RuntimeError::RankOutsideWorld { .. }
    );
    check!(rt.free(a.offset + 64), RuntimeError::InvalidFree { .. });
    check!(rt.empty(8, 3), RuntimeError::BadAlignment(3));
    check!(rt.malloc(64 << 20), RuntimeError::OutOfMemory { .. });
    check!(
        symsched_runtime::check_plan_version(99),
        RuntimeError::PlanVersion { .. }
    );
    check!(
        RuntimeConfig::local(3, 2, "/tmp".into()),
        RuntimeError::RankOutsideWorld { .. }
    );
    let mut big = RuntimeConfig::local(0, 1, "/tmp/unused".into()).map_err(|e| e.to_string())?;
    big.heap_size = 1 << 62;
    check!(Runtime::init(big), RuntimeError::Unavailable(_));
    // A successful put/get round trip for contrast.
    g.put_bytes(0, a.offset, b"abc")
        .map_err(|e| e.to_string())?;
    let mut back = [0u8; 3];
    g.get_bytes(0, a.offset, &mut back)
        .map_err(|e| e.to_string())?;
    if &back != b"abc" {
        return Err("round trip".into());
    }
    let st = rt.stats();
    if st.allocated != 128 + 256 || st.free + st.allocated != 4 << 20 {
        return Err(format!("stats {st:?}"));
    }
    Ok(format!("{n} typed errors checked"))
}

/// Ranks may also be threads of one process (`Runtime::init` with `RuntimeConfig::local`), which
/// in-process tests of higher layers use.
fn t_threads() -> Result<String, String> {
    let dir = symsched_runtime::bootstrap::make_private_dir(std::path::Path::new("/tmp"))
        .map_err(|e| e.to_string())?;
    let n = 3;
    let res: Vec<Result<u64, String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let dir = dir.clone();
                sc.spawn(move || -> Result<u64, RuntimeError> {
                    let mut cfg = RuntimeConfig::local(r, n, dir)?;
                    cfg.heap_size = 4 << 20;
                    cfg.scratch_size = 1 << 20;
                    cfg.signal_timeout = Duration::from_secs(20);
                    cfg.rendezvous_timeout = Duration::from_secs(20);
                    let rt = Runtime::init(cfg)?;
                    let w = rt.world()?;
                    let a = rt.malloc(8 * n)?;
                    let s = w.signal_slots("t", 1)?;
                    for p in 0..n {
                        w.put_bytes_with_signal(
                            p,
                            a.offset + 8 * r,
                            &(r as u64 + 1).to_le_bytes(),
                            s.slot(0),
                            SignalMode::Add,
                            1,
                        )?;
                    }
                    w.wait(s.slot(0), Cmp::Ge, n as u64, &ctx("threads"))?;
                    let mut sum = 0;
                    for p in 0..n {
                        let mut b = [0u8; 8];
                        w.get_bytes(r, a.offset + 8 * p, &mut b)?;
                        sum += u64::from_le_bytes(b);
                    }
                    w.barrier()?;
                    rt.finalize()?;
                    Ok(sum)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "panic".to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
            })
            .collect()
    });
    let _ = std::fs::remove_dir_all(&dir);
    for r in &res {
        if r.as_ref().ok() != Some(&6) {
            return Err(format!("{res:?}"));
        }
    }
    Ok("3 thread ranks exchanged and summed".into())
}

/// Torchrun variables that are missing or malformed give `Env` errors (child process, so the
/// runner's own environment is untouched).
fn t_env() -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[], "WORLD_SIZE"),
        (&[("WORLD_SIZE", "2"), ("RANK", "x")], "RANK"),
        (
            &[
                ("WORLD_SIZE", "2"),
                ("RANK", "1"),
                ("LOCAL_RANK", "3"),
                ("LOCAL_WORLD_SIZE", "2"),
            ],
            "LOCAL_RANK",
        ),
        (
            &[
                ("WORLD_SIZE", "2"),
                ("RANK", "1"),
                ("SYMSCHED_RENDEZVOUS_DIR", ""),
                ("MASTER_PORT", ""),
            ],
            "MASTER_PORT",
        ),
        (
            &[
                ("WORLD_SIZE", "1"),
                ("RANK", "0"),
                ("MASTER_PORT", "1"),
                ("SYMMETRIC_MEMORY_HEAP_SIZE", "lots"),
            ],
            "SYMMETRIC_MEMORY_HEAP_SIZE",
        ),
    ];
    for (env, var) in cases {
        let mut c = Command::new(&exe);
        c.env("SYMSCHED_TEST_ENV_CHILD", "1");
        for k in [
            "WORLD_SIZE",
            "RANK",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_PORT",
            "SYMSCHED_RENDEZVOUS_DIR",
        ] {
            c.env_remove(k);
        }
        for (k, v) in *env {
            c.env(k, v);
        }
        let o = c.output().map_err(|e| e.to_string())?;
        let out = String::from_utf8_lossy(&o.stdout);
        if !out.contains("ENV_ERR") || !out.contains(var) {
            return Err(format!("{env:?}: {out}"));
        }
    }
    Ok(format!("{} malformed environments rejected", cases.len()))
}

fn env_child() -> ExitCode {
    match RuntimeConfig::from_env() {
        Err(e @ RuntimeError::Env { .. }) => println!("ENV_ERR {e}"),
        other => println!("UNEXPECTED {other:?}"),
    }
    ExitCode::SUCCESS
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
    if std::env::var("SYMSCHED_TEST_PREFIX_CHILD").is_ok() {
        return prefix_child();
    }
    if std::env::var("SYMSCHED_TEST_ENV_CHILD").is_ok() {
        return env_child();
    }
    if std::env::var("SYMSCHED_TEST_TERM_CHILD").is_ok() {
        return term_child();
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    type T = fn() -> Result<String, String>;
    let tests: Vec<(&str, T)> = vec![
        ("bad_inputs", t_bad_inputs),
        ("env_errors", t_env),
        ("ranks_as_threads", t_threads),
        ("bootstrap_1", || t_boot(1)),
        ("bootstrap_2", || t_boot(2)),
        ("bootstrap_4", || t_boot(4)),
        ("bootstrap_8_oversubscribed", || t_boot(8)),
        ("alloc_agreement", || expect_ok("alloc", 3, &[], "ALLOC_OK")),
        ("alloc_mismatch", t_mismatch),
        ("every_cmp", || expect_ok("cmp", 2, &[], "CMP_OK")),
        ("put_with_signal_ordering", || {
            expect_ok("pws", 4, &[], "PWS_OK")
        }),
        ("overlapping_groups_threads_4", || {
            expect_ok("overlap", 4, &[], "OVERLAP_OK")
        }),
        ("overlapping_groups_threads_8", || {
            expect_ok("overlap", 8, &[], "OVERLAP_OK")
        }),
        ("timeout_error_content", || {
            expect_ok(
                "timeout",
                2,
                &[("SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS", "400")],
                "TIMEOUT_OK",
            )
        }),
        ("log_to_file", t_log_file),
        ("rendezvous_timeout_names_missing", t_rdv_timeout),
        ("kill9_detected", t_kill9),
        ("segments_private", || expect_ok("perm", 2, &[], "PERM_")),
        ("cross_node_groups", || {
            expect_ok("crossnode", 4, &[], "CROSSNODE_OK")
        }),
        ("launch_failure_propagates", t_fail),
        ("launch_output_prefix", t_prefix),
        ("launch_sigterm_cleanup", t_term),
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
