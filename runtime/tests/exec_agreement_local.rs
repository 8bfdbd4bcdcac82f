//! Launch agreement, refusal and empty roles on the in-process fabric (ranks are threads of this
//! test, every wait bounded by a 20 s timeout):
//!
//! - `speculative_stage_in_of_a_refused_launch_writes_nothing`: ranks that disagree after both
//!   staged in and sent their entry credits early (bindings that are not empty, a staging area
//!   that need not grow) fail with the same `Disagreement` naming each rank's counts, and no
//!   user buffer of any rank — symmetric or private — changed, whichever rank came late; also
//!   when rank 0 repeats the launch just agreed (its word and record then come from the cache of
//!   its last signature) and only rank 1's differs;
//! - `launches_after_refused_ones_run_in_step`: on plans with entry credits (and, for contrast,
//!   exit credits and `add` slots), agreeing launches between refusals of every kind — both
//!   ranks early, one rank refusing its own arguments, a staging area that must grow, one rank
//!   binding a role empty — give the right results, and the epochs stay equal;
//! - `empty_roles_agree_and_run`: a 0-element collective, and an alltoallv in which one rank
//!   sends nothing (its `in` role empty, bound empty against a peer's symmetric or private
//!   binding), agree and give the right results, repeatedly.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;
use symsched_plan::{LaunchSizes, Plan};
use symsched_runtime::config::{BackendKind, ExecOptions};
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, Executor, Fabric, LaunchArgs, LocalFabric, LocalGroup,
    LocalWorld, ReduceOp,
};

const P: u32 = 2;
/// Plans the refusal tests run: a gather, an exchange, a one-root push and a reduction.
const REFUSABLE: [&str; 4] = [
    "allgather_push",
    "alltoall_push",
    "broadcast_push",
    "allreduce_one_shot",
];
/// Bytes of heap per role for symmetric bindings.
const ROLE_BYTES: u64 = 4096;
/// What an output holds before a launch (no launch writes it).
const SENTINEL: f32 = -7.5;

/// How a rank binds its role buffers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mem {
    /// In the symmetric heap (one region per role, the same offset on every rank).
    Heap,
    /// Private memory (staged through the heap when a peer reaches into the role).
    Host,
}

/// The shape of one launch on one rank.
#[derive(Debug, Clone)]
enum Shape {
    /// A size-var launch with `n`.
    N(u64),
    /// An alltoallv with the full `counts[sender][receiver]` matrix.
    Counts(Vec<Vec<u64>>),
}

impl Shape {
    fn sizes(&self) -> LaunchSizes {
        let mut s = LaunchSizes::default();
        match self {
            Shape::N(n) => {
                s.vars.insert("n".into(), *n);
            }
            Shape::Counts(m) => s.counts = Some(m.clone()),
        }
        s
    }
}

/// Element k of rank r's input in round t (exact in f32, distinct per round, rank, element).
fn val(t: u64, r: u32, k: u64) -> f32 {
    (1000 * t + 100 * u64::from(r) + k) as f32
}

/// Rank r's role buffers (as f32) before launch round t of `plan`, and what they must hold
/// after it.
fn buffers(plan: &str, shape: &Shape, r: u32, t: u64) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let p = u64::from(P);
    let input = |r: u32, len: u64| (0..len).map(|k| val(t, r, k)).collect::<Vec<f32>>();
    match (plan, shape) {
        ("allreduce_one_shot", Shape::N(n)) => {
            let sum = (0..*n)
                .map(|k| (0..P).map(|q| val(t, q, k)).sum())
                .collect();
            (vec![input(r, *n)], vec![sum])
        }
        ("broadcast_push", Shape::N(n)) => (vec![input(r, *n)], vec![input(0, *n)]),
        ("allgather_push" | "allgather_one_shot", Shape::N(n)) => {
            let out = (0..P).flat_map(|q| input(q, *n)).collect();
            (
                vec![input(r, *n), vec![SENTINEL; (p * n) as usize]],
                vec![input(r, *n), out],
            )
        }
        ("alltoall_push", Shape::N(n)) => {
            // Chunk j of rank q's `in` goes to chunk q of rank j's `out`.
            let out = (0..P)
                .flat_map(|q| {
                    input(q, p * n)[(u64::from(r) * n) as usize..][..*n as usize].to_vec()
                })
                .collect();
            (
                vec![input(r, p * n), vec![SENTINEL; (p * n) as usize]],
                vec![input(r, p * n), out],
            )
        }
        ("alltoallv_push", Shape::Counts(m)) => {
            let row = |q: u32| m[q as usize].iter().sum::<u64>();
            let out: Vec<f32> = (0..P)
                .flat_map(|q| {
                    let from: u64 = m[q as usize][..r as usize].iter().sum();
                    let len = m[q as usize][r as usize];
                    input(q, row(q))[from as usize..][..len as usize].to_vec()
                })
                .collect();
            let out_len = out.len();
            (
                vec![input(r, row(r)), vec![SENTINEL; out_len]],
                vec![input(r, row(r)), out],
            )
        }
        other => panic!("no reference for {other:?}"),
    }
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// One rank: its executor and its heap regions.
struct Rank {
    ex: Executor<LocalFabric>,
    heap: Vec<u64>,
}

impl Rank {
    fn new(group: &Arc<LocalGroup>, r: u32, backend: BackendKind) -> Rank {
        let ex = Executor::with_options(
            group.fabric(r).expect("fabric"),
            ExecOptions {
                backend,
                ..ExecOptions::default()
            },
        );
        let heap = (0..2)
            .map(|i| {
                ex.fabric()
                    .scratch(&format!("test/role{i}"), ROLE_BYTES)
                    .expect("heap")
            })
            .collect();
        Rank { ex, heap }
    }

    /// Launch `plan` with `data` (one byte vector per role, the caller's view), bound as
    /// `mem`; for heap bindings the bytes are copied into the heap first and read back after,
    /// so `data` always shows what the user's buffers hold afterwards.
    fn launch(
        &self,
        plan: &Plan,
        shape: &Shape,
        mem: Mem,
        data: &mut [Vec<u8>],
    ) -> Result<(), ExecError> {
        let lp = self.ex.load(plan).expect("loads");
        let me = self.ex.fabric().rank();
        let types = ElemTypes::new(DType::F32, None).unwrap();
        let sizes = shape.sizes();
        match mem {
            Mem::Heap => {
                let mut bind = Vec::new();
                for (i, d) in data.iter().enumerate() {
                    assert!(d.len() as u64 <= ROLE_BYTES);
                    let p = self
                        .ex
                        .fabric()
                        .heap_ptr(me, self.heap[i], d.len() as u64)
                        .unwrap();
                    // SAFETY: a checked range of this rank's heap; no launch is running.
                    unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), p, d.len()) };
                    bind.push(Binding::Heap {
                        offset: self.heap[i],
                        bytes: d.len() as u64,
                    });
                }
                let r = self.ex.launch(
                    &lp,
                    LaunchArgs {
                        types,
                        op: ReduceOp::Sum,
                        sizes: &sizes,
                        buffers: &mut bind,
                    },
                );
                for (i, d) in data.iter_mut().enumerate() {
                    let p = self
                        .ex
                        .fabric()
                        .heap_ptr(me, self.heap[i], d.len() as u64)
                        .unwrap();
                    // SAFETY: as above; the launch returned.
                    unsafe { std::ptr::copy_nonoverlapping(p, d.as_mut_ptr(), d.len()) };
                }
                r
            }
            Mem::Host => {
                let mut bind: Vec<Binding> =
                    data.iter_mut().map(|d| Binding::Host(&mut d[..])).collect();
                self.ex.launch(
                    &lp,
                    LaunchArgs {
                        types,
                        op: ReduceOp::Sum,
                        sizes: &sizes,
                        buffers: &mut bind,
                    },
                )
            }
        }
    }

    /// An agreeing launch of round t: must succeed with the reference results.
    fn agreeing(&self, name: &str, plan: &Plan, shape: &Shape, mem: Mem, t: u64, what: &str) {
        let me = self.ex.fabric().rank();
        let (inputs, want) = buffers(name, shape, me, t);
        let mut data: Vec<Vec<u8>> = inputs.iter().map(|v| to_bytes(v)).collect();
        self.launch(plan, shape, mem, &mut data)
            .unwrap_or_else(|e| panic!("{what} ({name}, {mem:?}, rank {me}): {e}"));
        let got: Vec<Vec<f32>> = data.iter().map(|d| to_f32(d)).collect();
        assert_eq!(got, want, "{what} ({name}, {mem:?}, rank {me})");
    }
}

/// Run `body(rank)` on P threads of one in-process world, on the default backend.
fn on_ranks(body: impl Fn(&Rank, &Barrier) + Sync) {
    on_ranks_on(BackendKind::Auto, body)
}

/// Run `body(rank)` on P threads of one in-process world, every launch on `backend`.
fn on_ranks_on(backend: BackendKind, body: impl Fn(&Rank, &Barrier) + Sync) {
    let world = LocalWorld::new(P, 1 << 20)
        .expect("world")
        .with_timeout(Duration::from_secs(20));
    let group = world.world_group().expect("group");
    let barrier = Barrier::new(P as usize);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..P)
            .map(|r| {
                let (group, barrier, body) = (&group, &barrier, &body);
                s.spawn(move || body(&Rank::new(group, r, backend), barrier))
            })
            .collect();
        for h in hs {
            h.join().expect("a rank panicked");
        }
    });
}

fn expect_disagreement(r: Result<(), ExecError>, parts: &[String], what: &str) {
    match r {
        Err(ExecError::Disagreement(d)) => {
            let msg = d.to_string();
            for p in parts {
                assert!(msg.contains(p.as_str()), "{what}: `{p}` not in: {msg}");
            }
            assert_eq!(d.per_rank.len(), P as usize, "{what}: {msg}");
        }
        other => panic!("{what}: expected a disagreement, got {other:?}"),
    }
}

/// How each plan's records name a rank's element counts for `n` (one role, or every role).
fn counts_phrase(name: &str, r: u32, n: u64) -> String {
    match name {
        "allgather_push" | "allgather_one_shot" => {
            format!("rank {r}: `in` {n}, `out` {} elements f32", 2 * n)
        }
        "alltoall_push" => format!("rank {r}: `in` {}, `out` {} elements f32", 2 * n, 2 * n),
        _ => format!("rank {r}: {n} elements f32"),
    }
}

/// On both backends, and for `allgather_one_shot` too: its speculative prefix (the puts into the
/// peers' landing scratch) is not its whole list, so its JIT kernel checks the agreement after
/// the prefix and before the copies into `out`.
#[test]
fn speculative_stage_in_of_a_refused_launch_writes_nothing() {
    let backends = [BackendKind::Interp, BackendKind::Jit];
    for (backend, name) in backends.into_iter().flat_map(|b| {
        REFUSABLE
            .into_iter()
            .chain(["allgather_one_shot"])
            .map(move |n| (b, n))
    }) {
        let plan = common::plan(name, P);
        for mem in [Mem::Heap, Mem::Host] {
            on_ranks_on(backend, |rk, barrier| {
                let me = rk.ex.fabric().rank();
                // A larger launch first: the staging area then need not grow for the smaller
                // ones below, so every rank stages in and sends its entry credits before it
                // checks the peers' words (the speculative path).
                rk.agreeing(name, &plan, &Shape::N(64), mem, 1, "warm-up");
                for (late, t, repeat) in [
                    (1u32, 2u64, false),
                    (0, 3, false),
                    (1, 4, true),
                    (0, 5, true),
                ] {
                    if repeat {
                        // Rank 0's launch below repeats this agreed one (its cached word).
                        rk.agreeing(name, &plan, &Shape::N(16), mem, 10 + t, "agreed before");
                    }
                    let n = if me == 0 { 16 } else { 20 };
                    let shape = Shape::N(n);
                    let (inputs, _) = buffers(name, &shape, me, t);
                    let before: Vec<Vec<u8>> = inputs.iter().map(|v| to_bytes(v)).collect();
                    let mut data = before.clone();
                    barrier.wait();
                    if me == late {
                        // The other rank has published, staged in, sent its entry credits and
                        // waits in the check for this rank's word.
                        std::thread::sleep(Duration::from_millis(30));
                    }
                    let r = rk.launch(&plan, &shape, mem, &mut data);
                    let what = format!("{name} {mem:?} {backend:?} rank {late} late");
                    expect_disagreement(
                        r,
                        &[counts_phrase(name, 0, 16), counts_phrase(name, 1, 20)],
                        &what,
                    );
                    // Every rank is back: nothing can still be in flight.
                    barrier.wait();
                    let now: Vec<Vec<u8>> = data.clone();
                    if mem == Mem::Heap {
                        // Re-read the heap after every rank returned (`data` was read at this
                        // rank's return; a late write of the peer would show here).
                        for (i, d) in now.iter().enumerate() {
                            let p = rk
                                .ex
                                .fabric()
                                .heap_ptr(me, rk.heap[i], d.len() as u64)
                                .unwrap();
                            // SAFETY: checked range of this rank's heap; no launch running.
                            let s = unsafe { std::slice::from_raw_parts(p, d.len()) };
                            assert_eq!(s, &before[i][..], "{what}: rank {me} heap role {i}");
                        }
                    }
                    assert_eq!(now, before, "{what}: rank {me}'s buffers changed");
                    barrier.wait();
                }
                rk.agreeing(name, &plan, &Shape::N(16), mem, 6, "after the refusals");
            });
        }
    }
}

#[test]
fn launches_after_refused_ones_run_in_step() {
    for name in REFUSABLE {
        let plan = common::plan(name, P);
        for mem in [Mem::Host, Mem::Heap] {
            on_ranks(|rk, barrier| {
                let me = rk.ex.fabric().rank();
                let lp = rk.ex.load(&plan).expect("loads");
                let mut t = 0;
                let mut agree = |rk: &Rank, n: u64, what: &str| {
                    t += 1;
                    rk.agreeing(name, &plan, &Shape::N(n), mem, t, what);
                };
                let refused = |rk: &Rank, shape: Shape, extra: usize, what: &str| {
                    let (inputs, _) = buffers(name, &shape, me, 99);
                    let mut data: Vec<Vec<u8>> = inputs.iter().map(|v| to_bytes(v)).collect();
                    if extra > 0 {
                        // Bytes that fit no element count: refused on this rank alone.
                        data[0].extend(std::iter::repeat_n(0, extra));
                    }
                    let r = rk.launch(&plan, &shape, mem, &mut data);
                    assert!(r.is_err(), "{what} ({name}, {mem:?}): launched");
                    if extra == 0 {
                        assert!(
                            matches!(r, Err(ExecError::Disagreement(_))),
                            "{what}: {r:?}"
                        );
                    }
                    barrier.wait();
                };
                agree(rk, 8, "first");
                // Both ranks stage in and send entry credits before the check.
                refused(rk, Shape::N(if me == 0 { 8 } else { 6 }), 0, "counts");
                agree(rk, 8, "after counts");
                // Rank 1 refuses its own arguments (sends every credit in `finish_refused`);
                // rank 0 went the speculative way.
                refused(
                    rk,
                    Shape::N(8),
                    if me == 1 { 4 } else { 0 },
                    "local refusal",
                );
                agree(rk, 8, "after a local refusal");
                // The area must grow: neither rank stages before the check.
                refused(rk, Shape::N(if me == 0 { 200 } else { 201 }), 0, "growth");
                agree(rk, 200, "after a refused growth");
                // Rank 0 binds every role empty (checks first), rank 1 is speculative.
                refused(rk, Shape::N(if me == 0 { 0 } else { 8 }), 0, "empty vs not");
                for _ in 0..3 {
                    agree(rk, 8, "after an empty-vs-not refusal");
                }
                let epochs = rk
                    .ex
                    .allgather_u64("test/epochs", &[lp.epoch()])
                    .expect("allgather");
                assert_eq!(epochs, vec![vec![11]; P as usize], "{name} {mem:?}");
            });
        }
    }
}

#[test]
fn empty_roles_agree_and_run() {
    // A 0-element collective: every role empty on every rank.
    for name in ["allreduce_one_shot", "allgather_push", "broadcast_push"] {
        let plan = common::plan(name, P);
        for mem in [Mem::Heap, Mem::Host] {
            on_ranks(|rk, _| {
                for t in 1..=3 {
                    rk.agreeing(name, &plan, &Shape::N(0), mem, t, "0 elements");
                    rk.agreeing(name, &plan, &Shape::N(3), mem, t, "after 0 elements");
                }
            });
        }
    }
    // An alltoallv where rank 1 sends nothing: its `in` is empty, bound empty against rank 0's
    // symmetric or private `in` (the words differ, the records agree); then one where nobody
    // sends anything, then a full one, then the first again.
    let name = "alltoallv_push";
    let plan = common::plan(name, P);
    for mem in [Mem::Heap, Mem::Host] {
        on_ranks(|rk, _| {
            for (t, m) in [
                vec![vec![2, 3], vec![0, 0]],
                vec![vec![2, 3], vec![0, 0]],
                vec![vec![0, 0], vec![0, 0]],
                vec![vec![1, 4], vec![5, 2]],
                vec![vec![2, 3], vec![0, 0]],
            ]
            .into_iter()
            .enumerate()
            {
                let what = format!("counts {m:?}");
                rk.agreeing(name, &plan, &Shape::Counts(m), mem, t as u64 + 1, &what);
            }
        });
    }
}
