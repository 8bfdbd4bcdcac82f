//! The [`Fabric`] contract, run over every implementation: the in-process [`LocalFabric`] and
//! the multi-process [`GroupFabric`] (here with its ranks as threads of one process, each with
//! its own `Runtime`, which exercises the same memfd heap and signal pad code as processes).
//!
//! Every rank runs the same checks: identity, bounds errors, symmetric scratch and signal slots,
//! data visible once its signal is observed (release/acquire), add and set semantics, and a
//! wait that nobody satisfies failing with a typed error that names the slot and its expected
//! signallers within the deadline; the counters' addresses (`Fabric::signal_words`) read what
//! the waits see, and the heap spans (`Fabric::heap_span`) give what `heap_ptr` gives. Every coordination wait outside the fabric is bounded too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use symsched_jit::abi::HeapView;
use symsched_plan::{Cmp, SignalMode};
use symsched_runtime::exec::{
    ExecError, Fabric, GroupFabric, LocalFabric, LocalWorld, WaitContext,
};
use symsched_runtime::{Runtime, RuntimeConfig, RuntimeError};

const P: u32 = 3;
/// Deadline of the fabric's waits in the contract run (never reached unless broken).
const LONG: Duration = Duration::from_secs(20);
/// Deadline of the fabric's waits in the expiry run.
const SHORT: Duration = Duration::from_millis(300);
/// Bound on every coordination step between the rank threads of a test.
const MEET_TIMEOUT: Duration = Duration::from_secs(60);

/// Bounded rendezvous and all-gather of one value among the rank threads of one test.
struct Meeting {
    arrived: Mutex<(u64, u32)>,
    cv: Condvar,
    board: Mutex<Vec<u64>>,
}

impl Meeting {
    fn new() -> Meeting {
        Meeting {
            arrived: Mutex::new((0, 0)),
            cv: Condvar::new(),
            board: Mutex::new(vec![0; P as usize]),
        }
    }

    /// Block until all `P` ranks have called `meet` as often as this one.
    fn meet(&self) {
        let mut g = self.arrived.lock().unwrap();
        let gen = g.0;
        g.1 += 1;
        if g.1 == P {
            *g = (gen + 1, 0);
            self.cv.notify_all();
            return;
        }
        let (g, t) = self
            .cv
            .wait_timeout_while(g, MEET_TIMEOUT, |s| s.0 == gen)
            .unwrap();
        assert!(
            !t.timed_out() || g.0 != gen,
            "ranks did not meet within {MEET_TIMEOUT:?}"
        );
    }

    /// Every rank's `v`, in rank order.
    fn share(&self, me: u32, v: u64) -> Vec<u64> {
        self.board.lock().unwrap()[me as usize] = v;
        self.meet();
        let all = self.board.lock().unwrap().clone();
        self.meet();
        all
    }
}

fn ctx<'a>(slot_name: &'a str, signallers: &'a [u32]) -> WaitContext<'a> {
    WaitContext {
        schedule: "<fabric contract>",
        step: u32::MAX,
        slot_name,
        signallers,
    }
}

fn all_equal(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// The contract every fabric meets, as seen by one rank.
fn contract<F: Fabric>(f: &F, m: &Meeting) {
    let me = f.rank();
    assert_eq!(f.size(), P);
    assert!(!f.label().is_empty());
    let label_len = m.share(me, f.label().len() as u64);
    assert!(all_equal(&label_len), "labels differ: {label_len:?}");

    // Bounds are typed errors, not memory accesses.
    assert!(matches!(
        f.heap_ptr(P, 0, 1),
        Err(ExecError::RankOutsideGroup { peer: P, size: P })
    ));
    assert!(matches!(
        f.heap_ptr(me, u64::MAX, 2),
        Err(ExecError::OffsetPastHeap { .. })
    ));
    assert!(matches!(
        f.heap_ptr(me, 1 << 62, 8),
        Err(ExecError::OffsetPastHeap { .. })
    ));

    // Scratch: the same offset on every rank per key, stable for a size not larger.
    let a = f.scratch("conformance/a", 256).expect("scratch a");
    assert_eq!(f.scratch("conformance/a", 128).expect("again"), a);
    let b = f.scratch("conformance/b", 64).expect("scratch b");
    assert!(b >= a + 256 || b + 64 <= a, "scratch a={a} b={b} overlap");
    assert!(all_equal(&m.share(me, a)) && all_equal(&m.share(me, b)));
    f.heap_ptr(me, a, 256).expect("scratch is addressable");
    // A heap span, where a fabric gives one (both do here), as a compiled kernel gets it (the
    // ABI's `HeapView`, whose rule the kernel applies in its own code): `heap_ptr`'s address
    // inside, and nothing where `heap_ptr` fails.
    assert!(f.heap_span(P).is_none());
    for q in 0..P {
        let span = f.heap_span(q).expect("every rank's heap is mapped here");
        let view = HeapView::from(span);
        let at = |o: u64, len: u64| view.address(o, 0, len);
        assert_eq!(at(a, 256), Some(f.heap_ptr(q, a, 256).expect("range")));
        // A buffer at `a`, 16 bytes into it: the kernel's form of the same address.
        assert_eq!(
            view.address(a, 16, 240),
            Some(f.heap_ptr(q, a + 16, 240).expect("inner range"))
        );
        assert_eq!(
            at(span.hi, 0),
            Some(f.heap_ptr(q, span.hi, 0).expect("end"))
        );
        assert!(at(span.hi, 1).is_none() && f.heap_ptr(q, span.hi, 1).is_err());
        assert!(view.address(span.hi - 8, 8, 1).is_none());
        assert!(at(u64::MAX, 2).is_none());
        if span.lo > 0 {
            assert!(at(span.lo - 1, 1).is_none() && f.heap_ptr(q, span.lo - 1, 1).is_err());
        }
    }

    // Signal slots: the same index on every rank per key, zero on first use.
    let s = f.signal_slots("conformance/slots", 4).expect("slots");
    assert_eq!(f.signal_slots("conformance/slots", 4).expect("again"), s);
    assert!(all_equal(&m.share(me, s as u64)));
    assert_eq!(f.wait(s, Cmp::Eq, 0, &ctx("fresh", &[])).expect("fresh"), 0);
    assert!(matches!(
        f.signal(P, s, SignalMode::Add, 1),
        Err(ExecError::RankOutsideGroup { .. })
    ));
    assert!(f.wait(u32::MAX / 2, Cmp::Ge, 0, &ctx("past", &[])).is_err());
    // Nobody signals before every rank has seen its slots fresh.
    m.meet();

    // Data written into a peer before a signal is visible once the signal is observed.
    let (next, prev) = ((me + 1) % P, (me + P - 1) % P);
    let pattern = |r: u32| -> Vec<u8> { (0..64).map(|i| (r as u8) << 6 | i as u8).collect() };
    let dst = f
        .heap_ptr(next, a + 64 * me as u64, 64)
        .expect("peer range");
    // SAFETY: a checked 64-byte range of the peer's scratch that only this rank writes.
    unsafe { std::ptr::copy_nonoverlapping(pattern(me).as_ptr(), dst, 64) };
    f.signal(next, s, SignalMode::Add, 1).expect("signal");
    assert_eq!(
        f.wait(s, Cmp::Ge, 1, &ctx("data", &[prev])).expect("data"),
        1
    );
    let src = f.heap_ptr(me, a + 64 * prev as u64, 64).expect("own range");
    // SAFETY: a checked local range, complete after the acquire above.
    let got = unsafe { std::slice::from_raw_parts(src, 64) };
    assert_eq!(
        got,
        pattern(prev).as_slice(),
        "rank {me} reads rank {prev}'s data"
    );

    // Add accumulates every rank's update; set stores.
    for q in 0..P {
        f.signal(q, s + 1, SignalMode::Add, 1).expect("add");
    }
    let all: Vec<u32> = (0..P).collect();
    assert_eq!(
        f.wait(s + 1, Cmp::Ge, P as u64, &ctx("adds", &all))
            .expect("adds"),
        P as u64
    );
    // The counters' addresses, where a fabric gives them, read what its waits see (both
    // fabrics here do; a compiled kernel's first look at a wait reads them), and only the
    // registered slots have any.
    let (words, stride) = f.signal_words(s, 4).expect("the pad is addressable");
    assert!(stride >= 8 && stride % 8 == 0, "stride {stride}");
    let word = |i: usize| {
        // SAFETY: the fabric's contract: `words` + i·stride is this rank's counter of slot
        // `s + i` for i < 4, a live, aligned u64 updated atomically.
        let a = unsafe { &*((words as *const u8).add(i * stride) as *const AtomicU64) };
        a.load(Ordering::Acquire)
    };
    assert_eq!((word(0), word(1), word(3)), (1, P as u64, 0));
    assert!(f.signal_words(s, 0).is_none());
    assert!(f.signal_words(s, u32::MAX / 2).is_none());
    m.meet();
    if me == 0 {
        for q in 0..P {
            f.signal(q, s + 2, SignalMode::Set, 7).expect("set");
            f.signal(q, s + 2, SignalMode::Set, 5).expect("set");
        }
    }
    assert_eq!(
        f.wait(s + 2, Cmp::Eq, 5, &ctx("set", &[0])).expect("set"),
        5
    );
    assert_eq!(word(2), 5);
    m.meet();
}

/// A wait nobody satisfies fails within the deadline with a typed error naming the slot.
fn expiry<F: Fabric>(f: &F, m: &Meeting) {
    let me = f.rank();
    let s = f.signal_slots("conformance/expiry", 1).expect("slots");
    m.meet();
    let prev = (me + P - 1) % P;
    let t0 = Instant::now();
    let err = f
        .wait(s, Cmp::Ge, 1, &ctx("never-signalled", &[prev]))
        .expect_err("nobody signals");
    let waited = t0.elapsed();
    assert!(waited >= SHORT / 2, "gave up after {waited:?}");
    assert!(waited < SHORT + Duration::from_secs(10), "took {waited:?}");
    let typed = match &err {
        ExecError::Timeout(t) => t.signallers == [prev],
        ExecError::Core(e) => matches!(**e, RuntimeError::SignalTimeout(_)),
        _ => false,
    };
    assert!(typed, "not a timeout: {err}");
    let msg = err.to_string();
    assert!(msg.contains("never-signalled"), "{msg}");
    assert!(msg.contains(&format!("[{prev}]")), "{msg}");
    m.meet();
}

fn on_local(timeout: Duration, body: fn(&LocalFabric, &Meeting)) {
    let world = LocalWorld::new(P, 1 << 20)
        .expect("world")
        .with_timeout(timeout);
    let group = world.world_group().expect("group");
    let m = Meeting::new();
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..P)
            .map(|r| {
                let (group, m) = (group.clone(), &m);
                sc.spawn(move || body(&group.fabric(r).expect("fabric"), m))
            })
            .collect();
        for h in hs {
            h.join().expect("rank thread");
        }
    });
}

fn on_group(timeout: Duration, body: fn(&GroupFabric, &Meeting)) {
    let dir = symsched_runtime::bootstrap::make_private_dir(std::path::Path::new("/tmp"))
        .expect("rendezvous dir");
    let m = Meeting::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..P)
                .map(|r| {
                    let (dir, m) = (dir.clone(), &m);
                    sc.spawn(move || {
                        let mut cfg =
                            RuntimeConfig::local(r as usize, P as usize, dir).expect("config");
                        cfg.heap_size = 4 << 20;
                        cfg.scratch_size = 1 << 20;
                        cfg.signal_timeout = timeout;
                        cfg.rendezvous_timeout = MEET_TIMEOUT;
                        let rt = Runtime::init(cfg).expect("runtime");
                        let world = rt.world().expect("world");
                        body(&GroupFabric::new(world.clone()), m);
                        world.barrier().expect("barrier");
                        rt.finalize().expect("finalize");
                    })
                })
                .collect();
            for h in hs {
                h.join().expect("rank thread");
            }
        })
    }));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn local_fabric_meets_the_contract() {
    on_local(LONG, contract);
}

#[test]
fn group_fabric_meets_the_contract() {
    on_group(LONG, contract);
}

#[test]
fn local_fabric_wait_expires_with_a_typed_error() {
    on_local(SHORT, expiry);
}

#[test]
fn group_fabric_wait_expires_with_a_typed_error() {
    on_group(SHORT, expiry);
}
