//! The one-round (eager) alltoallv on the real multi-process runtime: ranks are processes
//! started by the launcher (this test binary re-executed with `SYMSCHED_A2A_TEST_ROLE` set,
//! running only `rank_entry`). Every launch is bounded by the launcher's timeout and every wait
//! by the signal timeout; the launcher kills the other ranks when one fails and removes the
//! rendezvous directory.
//!
//! - `eager_correct_*`: zero-size chunks, chunks exactly at and just over the eager capacity
//!   (the latter through the plan), at and just over the pull threshold, send data private and
//!   symmetric (pulled), and 300 back-to-back calls with changing counts (slot reuse,
//!   switching between inline, pull and rendezvous), bit-exact;
//! - `eager_mismatch`: counts that disagree between a sender and its receiver (both eager,
//!   and eager against over-capacity) and element types that disagree are the same typed
//!   error on every rank, leave the outputs untouched, and the channel works afterwards;
//! - `eager_dead_peer`: a peer that exits makes the waiting rank fail within the signal
//!   timeout, naming the peer;
//! - `eager_large_*`: multi-MiB alltoallv with uneven counts at P = 2, 3, 4 — a symmetric send
//!   buffer goes in one round at any size, an ordinary one above the capacity takes the
//!   rendezvous, ranks may mix the two (the headers decide), back-to-back calls stay bit-exact,
//!   and a mismatch at these sizes is still the same typed error on every rank with no output
//!   written;
//! - `eager_trace_*`: with `SYMSCHED_TRACE` set, every rank's eager steps (header writes,
//!   arrive and credit waits, outbox copies, pulls, slot copy-outs, own-block copies, credits)
//!   land in the merged trace file with their peers and sizes; with it unset, none are
//!   recorded.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_plan::LaunchSizes;
use symsched_runtime::exec::eager::{eager_capacity, PULL_MIN_BYTES};
use symsched_runtime::exec::{
    AlltoallvOutcome, Binding, DType, ElemTypes, ExecError, Executor, Fabric, GroupFabric,
    LaunchArgs, LoadedPlan, ReduceOp,
};

const ROLE: &str = "SYMSCHED_A2A_TEST_ROLE";
const SENTINEL: u8 = 0xAB;

/// Start `n` ranks of this test binary in `role` with the given signal timeout; panics with
/// their output if any fails, else returns the captured lines.
fn run_ranks(n: usize, role: &str, timeout: Duration, signal_ms: u64) -> Vec<String> {
    run_ranks_env(n, role, timeout, signal_ms, &[])
}

/// As [`run_ranks`], with `env` added to every rank's environment.
fn run_ranks_env(
    n: usize,
    role: &str,
    timeout: Duration,
    signal_ms: u64,
    env: &[(&str, &std::ffi::OsStr)],
) -> Vec<String> {
    let job = common::RankJob {
        signal_timeout_ms: signal_ms,
        timeout,
        heap_bytes: 256 << 20,
        env,
    };
    let out = common::run_rank_processes_with(n, ROLE, role, &job);
    assert!(
        !out.rendezvous_dir.exists(),
        "rendezvous directory left behind"
    );
    common::output_lines(&out)
}

/// The rank program. Outside a launch (no role set) it has nothing to do.
#[test]
fn rank_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let rt = symsched_runtime::Runtime::init_from_env().expect("joins the job");
    let exec = Executor::new(GroupFabric::new(rt.world().expect("world")));
    match role.as_str() {
        "correct" => correct(&exec),
        "mismatch" => mismatch(&exec),
        "dead" => dead(&exec),
        "large" => large(&exec),
        "trace" => traced(&exec),
        r => panic!("unknown role {r}"),
    }
    drop(exec);
    rt.finalize().expect("finalize");
}

fn plan(p: u32) -> symsched_plan::Plan {
    compile(
        &standard_library(),
        "alltoallv_push",
        p,
        &BTreeMap::new(),
        &CompileOptions::default(),
    )
    .expect("alltoallv_push verifies")
    .plan
}

/// One alltoallv: eager, or the plan with the matrix the header round agreed. Returns whether
/// it went eagerly.
#[allow(clippy::too_many_arguments)] // one argument per part of the call
fn a2a(
    exec: &Executor<GroupFabric>,
    lp: &LoadedPlan,
    dt: DType,
    sc: &[u64],
    rc: &[u64],
    send: &[u8],
    send_heap: Option<u64>,
    recv: &mut [u8],
) -> Result<bool, ExecError> {
    match exec.alltoallv_eager(dt, sc, rc, send, send_heap, recv)? {
        AlltoallvOutcome::Done => Ok(true),
        AlltoallvOutcome::Rendezvous(m) => {
            let sizes = LaunchSizes {
                vars: Default::default(),
                counts: Some(m),
            };
            let first = match send_heap {
                Some(offset) => Binding::Heap {
                    offset,
                    bytes: send.len() as u64,
                },
                None => Binding::HostRead(send),
            };
            let mut b = [first, Binding::Host(recv)];
            exec.launch(
                lp,
                LaunchArgs {
                    types: ElemTypes::new(dt, None)?,
                    op: ReduceOp::Sum,
                    sizes: &sizes,
                    buffers: &mut b,
                },
            )?;
            Ok(false)
        }
    }
}

/// The i32 value element `k` of the chunk `src` sends `dst` in call `it`.
fn val(it: u64, src: usize, dst: usize, k: u64) -> i32 {
    (it.wrapping_mul(7919) ^ (src as u64) << 40 ^ (dst as u64) << 32 ^ k) as i32
}

/// Bytes of the symmetric send buffer the `heap` calls use (the large calls' send buffer has
/// its own scratch key and size).
const HEAP_SEND: u64 = 4 << 20;
const HEAP_SEND_LARGE: u64 = 48 << 20;

/// Run one call with the matrix `m[src][dst]` (i32 elements) on this rank and check the
/// output bit-exactly; the send data lives in the symmetric heap when `heap` (large chunks are
/// then pulled), else in private memory. Returns whether it went eagerly.
fn call_and_check(
    exec: &Executor<GroupFabric>,
    lp: &LoadedPlan,
    it: u64,
    m: &[Vec<u64>],
    heap: bool,
) -> bool {
    let me = exec.fabric().rank() as usize;
    let p = m.len();
    let sc: Vec<u64> = m[me].clone();
    let rc: Vec<u64> = (0..p).map(|s| m[s][me]).collect();
    let send: Vec<u8> = (0..p)
        .flat_map(|d| (0..sc[d]).map(move |k| val(it, me, d, k)))
        .flat_map(i32::to_le_bytes)
        .collect();
    let mut recv = vec![SENTINEL; (rc.iter().sum::<u64>() * 4) as usize];
    let r = if heap {
        let f = exec.fabric();
        // The scratch key must be the same on every rank (offsets follow the order of keys).
        let widest = m
            .iter()
            .map(|r| r.iter().sum::<u64>() * 4)
            .max()
            .unwrap_or(0);
        let off = if widest <= HEAP_SEND {
            f.scratch("alltoall-test/send", HEAP_SEND)
        } else {
            f.scratch("alltoall-test/send-large", HEAP_SEND_LARGE)
        }
        .expect("scratch");
        assert!(send.len() as u64 <= HEAP_SEND_LARGE);
        let ptr = f
            .heap_ptr(f.rank(), off, send.len() as u64)
            .expect("heap range");
        // SAFETY: a checked range of our own heap segment, which only this call's receivers
        // read (and only until their credits, which the call waits for).
        let hs = unsafe { std::slice::from_raw_parts_mut(ptr, send.len()) };
        hs.copy_from_slice(&send);
        a2a(exec, lp, DType::I32, &sc, &rc, hs, Some(off), &mut recv)
    } else {
        a2a(exec, lp, DType::I32, &sc, &rc, &send, None, &mut recv)
    };
    let eager = r.unwrap_or_else(|e| panic!("call {it} matrix {m:?} heap={heap}: {e}"));
    let want: Vec<u8> = (0..p)
        .flat_map(|s| (0..rc[s]).map(move |k| val(it, s, me, k)))
        .flat_map(i32::to_le_bytes)
        .collect();
    assert!(
        recv == want,
        "call {it} matrix {m:?}: wrong output on rank {me}"
    );
    eager
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn correct(exec: &Executor<GroupFabric>) {
    let p = exec.fabric().size() as usize;
    let lp = exec.load(&plan(p as u32)).expect("loads");
    let cap_elems = eager_capacity(p as u32) / 4;
    let full = |f: &dyn Fn(usize, usize) -> u64| -> Vec<Vec<u64>> {
        (0..p).map(|s| (0..p).map(|d| f(s, d)).collect()).collect()
    };
    // (matrix, expected to go eagerly)
    let cases: Vec<(Vec<Vec<u64>>, bool)> = vec![
        (full(&|_, _| 0), true),
        (full(&|s, d| (s + d + 1) as u64), true),
        (full(&|s, d| if s == d { 0 } else { 1 }), true),
        (full(&|s, _| if s == 0 { 0 } else { 5 }), true),
        (full(&|_, _| cap_elems), true),
        (full(&|_, _| PULL_MIN_BYTES / 4), true),
        (full(&|s, d| PULL_MIN_BYTES / 4 + (s + d) as u64), true),
        (full(&|s, d| if s == d { 3 * cap_elems } else { 2 }), true),
        (full(&|_, _| cap_elems + 1), false),
        (
            full(&|s, d| {
                if s == 0 && d == p - 1 {
                    cap_elems + 1
                } else {
                    7
                }
            }),
            false,
        ),
        (full(&|s, _| if s == 1 { 0 } else { cap_elems + 1 }), false),
    ];
    for (i, (m, eager)) in cases.iter().enumerate() {
        // twice: the second call reuses the cached plan resolution and the other slot set
        for rep in 0..4 {
            let heap = rep >= 2;
            let got = call_and_check(exec, &lp, (i * 4 + rep) as u64, m, heap);
            // A symmetric send buffer is pulled at any size: never a rendezvous.
            assert_eq!(
                got,
                *eager || heap,
                "case {i} {m:?}: eager path taken = {got}"
            );
        }
    }
    // Back to back, counts changing every call (every rank derives the same matrix), with an
    // over-capacity pair every 37th call: slots alternate and credits gate reuse.
    let mut seed = 7u64;
    let mut eager_calls = 0;
    let mut rendezvous_expected = 0;
    for it in 0..300u64 {
        let m: Vec<Vec<u64>> = (0..p)
            .map(|_| {
                (0..p)
                    .map(|_| {
                        seed = mix(seed);
                        // mostly small, sometimes past the pull threshold
                        if seed.is_multiple_of(5) {
                            PULL_MIN_BYTES / 4 + seed % 3000
                        } else {
                            seed % 41
                        }
                    })
                    .collect()
            })
            .collect();
        let mut m = m;
        let heap = it % 3 != 0;
        if it % 37 == 36 {
            m[p - 1][0] = cap_elems + 1 + it;
            rendezvous_expected += u64::from(!heap);
        }
        if call_and_check(exec, &lp, 1000 + it, &m, heap) {
            eager_calls += 1;
        }
    }
    assert!(rendezvous_expected > 0);
    assert_eq!(eager_calls, 300 - rendezvous_expected);
    println!("EAGER-CORRECT-OK rank {}", exec.fabric().rank());
}

fn expect_mismatch(r: Result<bool, ExecError>, sender: u32, receiver: u32, sent: u64, exp: u64) {
    match r {
        Err(ExecError::CountsMismatch {
            sender: s,
            receiver: d,
            sent: n,
            expected: e,
        }) => assert_eq!(
            (s, d, n, e),
            (sender, receiver, sent, exp),
            "wrong pair reported"
        ),
        other => panic!("expected CountsMismatch({sender}->{receiver}), got {other:?}"),
    }
}

fn mismatch(exec: &Executor<GroupFabric>) {
    let p = exec.fabric().size() as usize;
    let me = exec.fabric().rank() as usize;
    let lp = exec.load(&plan(p as u32)).expect("loads");
    let cap_elems = eager_capacity(p as u32) / 4;
    let run = |sc: Vec<u64>, rc: Vec<u64>, dt: DType| {
        let es = dt.size() as u64;
        let send = vec![1u8; (sc.iter().sum::<u64>() * es) as usize];
        let mut recv = vec![SENTINEL; (rc.iter().sum::<u64>() * es) as usize];
        let r = a2a(exec, &lp, dt, &sc, &rc, &send, None, &mut recv);
        assert!(
            recv.iter().all(|b| *b == SENTINEL),
            "rank {me}: output written by a refused call"
        );
        r
    };
    // Both eager: rank 0 sends 3 elements to rank 1, which expects 4.
    let sc: Vec<u64> = (0..p)
        .map(|d| if me == 0 && d == 1 { 3 } else { 4 })
        .collect();
    expect_mismatch(run(sc, vec![4; p], DType::I32), 0, 1, 3, 4);
    // Over capacity on the sender's side only: it alone would choose the rendezvous.
    let big = cap_elems + 1;
    let sc: Vec<u64> = (0..p)
        .map(|d| if me == 0 && d == 1 { big } else { 5 })
        .collect();
    expect_mismatch(run(sc, vec![5; p], DType::I32), 0, 1, big, 5);
    // ...and on the receiver's side only.
    let rc: Vec<u64> = (0..p)
        .map(|s| if me == 1 && s == 0 { big } else { 5 })
        .collect();
    expect_mismatch(run(vec![5; p], rc, DType::I32), 0, 1, 5, big);
    // Element types that differ: the same counts, 4-byte against 8-byte elements.
    let dt = if me == 0 { DType::F32 } else { DType::I64 };
    match run(vec![2; p], vec![2; p], dt) {
        Err(ExecError::DtypeMismatch(msg)) => assert!(msg.contains("element type"), "{msg}"),
        other => panic!("expected DtypeMismatch, got {other:?}"),
    }
    // The channel (and the group) stay usable.
    let m: Vec<Vec<u64>> = (0..p)
        .map(|s| (0..p).map(|d| (s * p + d) as u64).collect())
        .collect();
    for it in 0..4 {
        assert!(call_and_check(exec, &lp, it, &m, it % 2 == 0));
    }
    println!("EAGER-MISMATCH-OK rank {me}");
}

fn dead(exec: &Executor<GroupFabric>) {
    let me = exec.fabric().rank();
    let p = exec.fabric().size() as usize;
    exec.barrier().expect("barrier");
    if me == 1 {
        // Leave without a word (no finalize): the peer must not hang.
        std::process::exit(0);
    }
    let send = vec![0u8; p * 4];
    let mut recv = vec![0u8; p * 4];
    let t0 = Instant::now();
    let r = exec.alltoallv_eager(DType::I32, &vec![1; p], &vec![1; p], &send, None, &mut recv);
    let took = t0.elapsed();
    let msg = match r {
        Err(e) => e.to_string(),
        Ok(o) => panic!("alltoallv with a dead peer returned {o:?}"),
    };
    assert!(
        msg.contains("peer rank 1") || msg.contains("never signalled: [1]") || msg.contains("[1]"),
        "error does not name the dead peer: {msg}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    println!("EAGER-DEAD-OK {:.2}s {msg}", took.as_secs_f64());
    // The world barrier of finalize cannot complete without rank 1.
    std::process::exit(0);
}

#[test]
fn eager_correct_two_ranks() {
    let out = run_ranks(2, "correct", Duration::from_secs(120), 20_000);
    assert_eq!(
        out.iter()
            .filter(|l| l.contains("EAGER-CORRECT-OK"))
            .count(),
        2
    );
}

#[test]
fn eager_correct_three_ranks() {
    let out = run_ranks(3, "correct", Duration::from_secs(180), 20_000);
    assert_eq!(
        out.iter()
            .filter(|l| l.contains("EAGER-CORRECT-OK"))
            .count(),
        3
    );
}

#[test]
fn eager_mismatch() {
    for n in [2, 3] {
        let out = run_ranks(n, "mismatch", Duration::from_secs(120), 20_000);
        assert_eq!(
            out.iter()
                .filter(|l| l.contains("EAGER-MISMATCH-OK"))
                .count(),
            n
        );
    }
}

#[test]
fn eager_dead_peer() {
    let out = run_ranks(2, "dead", Duration::from_secs(60), 2_000);
    assert!(
        out.iter().any(|l| l.contains("EAGER-DEAD-OK")),
        "{}",
        out.join("\n")
    );
}

/// Multi-MiB calls (i32 elements, uneven counts, zero chunks among them): symmetric send
/// buffers in one round, ordinary ones through the rendezvous, mixed per rank, back to back;
/// then a large mismatch.
fn large(exec: &Executor<GroupFabric>) {
    let p = exec.fabric().size() as usize;
    let me = exec.fabric().rank() as usize;
    let lp = exec.load(&plan(p as u32)).expect("loads");
    let mib = (1u64 << 20) / 4;
    let cap_elems = eager_capacity(p as u32) / 4;
    // 0.25–3.3 MiB per chunk, different for every pair; the first matrix has a zero chunk
    // and an own block of 3 MiB.
    let shapes: [&dyn Fn(usize, usize) -> u64; 3] = [
        &|s, d| {
            if s == 1 && d == 0 {
                0
            } else {
                mib / 4 + ((s * 5 + d * 3) % 7) as u64 * (mib / 2) + 13 * s as u64 + d as u64
            }
        },
        &|s, d| (1 + s + 2 * d) as u64 * mib / 2 + 1,
        &|s, d| if s == d { 3 * mib } else { mib + 7 },
    ];
    let mats: Vec<Vec<Vec<u64>>> = shapes
        .iter()
        .map(|f| (0..p).map(|s| (0..p).map(|d| f(s, d)).collect()).collect())
        .collect();
    // Back to back: heap and private alternate; the same matrix twice in a row reuses both
    // slot parities and the plan's cached resolution.
    for it in 0..12u64 {
        let m = &mats[(it / 2) as usize % mats.len()];
        let heap = it % 4 < 2;
        let eager = call_and_check(exec, &lp, 5000 + it, m, heap);
        let over = (0..p).any(|s| (0..p).any(|d| s != d && m[s][d] > cap_elems));
        assert_eq!(eager, heap || !over, "call {it} heap={heap}");
    }
    // Ranks mixing the two: even ranks send large chunks from the heap, odd ranks only small
    // ones from private memory; every rank reads the same headers, so all go in one round.
    let mixed: Vec<Vec<u64>> = (0..p)
        .map(|s| {
            (0..p)
                .map(|d| {
                    if s % 2 == 0 {
                        2 * mib + d as u64
                    } else {
                        100 + s as u64
                    }
                })
                .collect()
        })
        .collect();
    let mixed_heap = me.is_multiple_of(2);
    for it in 0..3u64 {
        let eager = call_and_check(exec, &lp, 6000 + it, &mixed, mixed_heap);
        assert!(eager, "mixed call {it} took the rendezvous");
    }
    // A large mismatch from a symmetric send buffer: rank 0 sends one element more to rank 1
    // than it expects; every rank fails alike and no output is written.
    let big = 2 * mib;
    let sc: Vec<u64> = (0..p)
        .map(|d| if me == 0 && d == 1 { big + 1 } else { big })
        .collect();
    let rc = vec![big; p];
    let f = exec.fabric();
    let bytes = sc.iter().sum::<u64>() * 4;
    let off = f
        .scratch("alltoall-test/send-large", HEAP_SEND_LARGE)
        .expect("scratch");
    let ptr = f.heap_ptr(f.rank(), off, bytes).expect("heap range");
    // SAFETY: a checked range of our own heap segment, read by peers only within the call.
    let hs = unsafe { std::slice::from_raw_parts_mut(ptr, bytes as usize) };
    hs.fill(1);
    let mut recv = vec![SENTINEL; (big * 4) as usize * p];
    let r = a2a(exec, &lp, DType::I32, &sc, &rc, hs, Some(off), &mut recv);
    assert!(
        recv.iter().all(|b| *b == SENTINEL),
        "rank {me}: output written by a refused call"
    );
    expect_mismatch(r, 0, 1, big + 1, big);
    // ...and the channel works afterwards, at a large size.
    assert!(call_and_check(exec, &lp, 7000, &mats[1], true));
    println!("EAGER-LARGE-OK rank {me}");
}

fn large_on(n: usize) {
    let out = run_ranks(n, "large", Duration::from_secs(240), 30_000);
    assert_eq!(
        out.iter().filter(|l| l.contains("EAGER-LARGE-OK")).count(),
        n
    );
}

#[test]
fn eager_large_two_ranks() {
    large_on(2);
}

#[test]
fn eager_large_three_ranks() {
    large_on(3);
}

#[test]
fn eager_large_four_ranks() {
    large_on(4);
}

/// Calls of every kind of chunk for the trace tests: inline (16 B), outbox-pulled (8 KiB,
/// private), heap-pulled above the capacity (2 MiB, symmetric); each twice; then report what
/// the recorder holds and flush it.
fn traced(exec: &Executor<GroupFabric>) {
    use symsched_runtime::exec::trace;
    let p = exec.fabric().size() as usize;
    let me = exec.fabric().rank();
    let lp = exec.load(&plan(p as u32)).expect("loads");
    let cases: [(u64, bool); 3] = [(4, false), (2048, false), (512 << 10, true)];
    let mut it = 0;
    for (elems, heap) in cases {
        let m = vec![vec![elems; p]; p];
        for _ in 0..2 {
            assert!(call_and_check(exec, &lp, 8000 + it, &m, heap));
            it += 1;
        }
    }
    let (pending, dropped) = trace::pending();
    println!(
        "TRACE-DONE rank {me} enabled={} pending={pending} dropped={dropped}",
        trace::enabled()
    );
    trace::flush().expect("trace flush");
}

fn trace_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("symsched-a2a-trace-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn eager_trace_records_every_rank_s_steps() {
    use serde_json::Value;
    let p = 2usize;
    let dir = trace_dir("on");
    let path = dir.join("trace.json");
    let out = run_ranks_env(
        p,
        "trace",
        Duration::from_secs(120),
        20_000,
        &[("SYMSCHED_TRACE", path.as_os_str())],
    );
    let text = std::fs::read_to_string(&path);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        out.iter()
            .filter(|l| l.contains("TRACE-DONE") && l.contains("enabled=true"))
            .count(),
        p,
        "{}",
        out.join("\n")
    );
    let doc: Value = serde_json::from_str(&text.expect("trace file written")).expect("json");
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    let calls = 6;
    for r in 0..p as u64 {
        let peer = 1 - r;
        let mine: Vec<&Value> = events
            .iter()
            .filter(|e| e["pid"] == r && e["args"]["schedule"] == "alltoallv_eager")
            .collect();
        let n = |name: &str, what: &str| {
            mine.iter()
                .filter(|e| e["name"] == name && e["args"]["what"] == what)
                .count()
        };
        let launches = mine
            .iter()
            .filter(|e| e["cat"] == "launch" && e["name"] == "launch alltoallv_eager")
            .count();
        assert_eq!(launches, calls, "rank {r}");
        assert!(mine
            .iter()
            .filter(|e| e["cat"] == "launch")
            .all(|e| e["args"]["outcome"] == "done"));
        assert_eq!(n("put_signal", "header"), calls, "rank {r}");
        assert_eq!(n("wait", "arrive"), calls, "rank {r}");
        assert_eq!(n("signal", "credit"), calls, "rank {r}");
        assert_eq!(n("copy", "own"), calls, "rank {r}");
        // 16 B inline twice; 8 KiB through the outbox twice; 2 MiB pulled from the heap twice.
        assert_eq!(n("copy", "slot"), 2, "rank {r}");
        assert_eq!(n("copy", "outbox"), 2, "rank {r}");
        assert_eq!(n("get", "pull"), 4, "rank {r}");
        // Credit waits: before reusing a slot (calls 2..) and after each pulled call.
        assert_eq!(n("wait", "consumed"), (calls - 2) + 4, "rank {r}");
        for e in &mine {
            if e["cat"] == "launch" {
                continue;
            }
            assert_eq!(e["ph"], "X");
            assert!(e["dur"].as_f64().unwrap() > 0.0, "{e}");
            let what = e["args"]["what"].as_str().unwrap();
            let want_peer = if what == "own" { r } else { peer };
            assert_eq!(e["args"]["peer"], want_peer, "{e}");
        }
        let bytes = |name: &str, what: &str| -> Vec<u64> {
            mine.iter()
                .filter(|e| e["name"] == name && e["args"]["what"] == what)
                .map(|e| e["args"]["bytes"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(bytes("copy", "slot"), [16, 16]);
        assert_eq!(bytes("copy", "outbox"), [8192, 8192]);
        assert_eq!(bytes("get", "pull"), [8192, 8192, 2 << 20, 2 << 20]);
        assert_eq!(bytes("copy", "own"), [16, 16, 8192, 8192, 2 << 20, 2 << 20]);
    }
}

#[test]
fn eager_trace_off_records_nothing() {
    // Empty means off (as unset does).
    let out = run_ranks_env(
        2,
        "trace",
        Duration::from_secs(120),
        20_000,
        &[("SYMSCHED_TRACE", std::ffi::OsStr::new(""))],
    );
    assert_eq!(
        out.iter()
            .filter(|l| l.contains("TRACE-DONE") && l.contains("enabled=false pending=0 dropped=0"))
            .count(),
        2,
        "{}",
        out.join("\n")
    );
}
