//! No push lands before its receiver has entered the collective.
//!
//! A user writes its symmetric buffer and only then hands it to the collective; a peer that
//! entered earlier must not write into that buffer before. The scenario makes the race
//! deterministic: the receivers write their buffers 50 ms after the root (or the other ranks)
//! entered and pushed, so a push that is not gated on the receiver's entry always lands first
//! and is clobbered by the receiver's own write. Ranks are processes of this test binary
//! started by the launcher (`SYMSCHED_ENTRY_RACE_ROLE` set), bounded by the launcher's timeout
//! and the signal timeout; the launcher kills the other ranks when one fails and removes the
//! rendezvous directory.
//!
//! The `refusals` variants put a refused launch before each raced one — the root or another
//! rank refuses its own arguments, or the ranks disagree on the size — so the next launch must
//! race as any other: a refusing root that ran on into its next launch before a late peer read
//! its word failed here ("launch agreement: rank 0 published launch 8, expected 6"). The
//! counters a refusal leaves are checked exactly by the unit tests of `exec::loaded`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_plan::{BufferRole, LaunchSizes, Plan};
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, Executor, Fabric, GroupFabric, LaunchArgs, ReduceOp,
};

const ROLE: &str = "SYMSCHED_ENTRY_RACE_ROLE";
/// Elements per rank.
const N: usize = 256;
/// How long a late rank sleeps before it writes its buffers and enters.
const LATE: Duration = Duration::from_millis(50);
const ITERS: u64 = 4;

fn plan(name: &str, p: u32, params: &[(&str, i64)]) -> Plan {
    let params: BTreeMap<String, i64> = params.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    compile(
        &standard_library(),
        name,
        p,
        &params,
        &CompileOptions::default(),
    )
    .unwrap_or_else(|d| panic!("{name} P={p} does not verify: {d:?}"))
    .plan
}

fn run_ranks(n: usize, role: &str) {
    let out = common::run_rank_processes(n, ROLE, role, 30_000, Duration::from_secs(120));
    assert!(
        !out.rendezvous_dir.exists(),
        "rendezvous directory left behind"
    );
}

/// The rank program. Outside a launch (no role set) it has nothing to do.
#[test]
fn rank_entry() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let rt = symsched_runtime::Runtime::init_from_env().expect("joins the job");
    let exec = Executor::new(GroupFabric::new(rt.world().expect("world")));
    let (kind, staged) = role.split_once('/').expect("role is SCHEDULE/heap|staged");
    let staged = staged == "staged";
    let wrong = match kind {
        "broadcast" => broadcast(&exec, staged, false),
        "broadcast_refusals" => broadcast(&exec, staged, true),
        "allgather" => allgather(&exec, staged),
        r => panic!("unknown role {r}"),
    };
    assert_eq!(wrong, 0, "rank {}: {wrong} element(s) wrong", rt.rank());
    exec.barrier().expect("final barrier");
    rt.finalize().expect("finalize");
}

fn sizes() -> LaunchSizes {
    let mut s = LaunchSizes::default();
    s.vars.insert("n".into(), N as u64);
    s
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

/// One role buffer of `bytes`: symmetric heap memory written through the fabric, or private
/// memory (staged by the executor).
enum Buf {
    Heap(u64, u64),
    Host(Vec<u8>),
}

impl Buf {
    fn new(exec: &Executor<GroupFabric>, key: &str, bytes: u64, staged: bool) -> Buf {
        if staged {
            Buf::Host(vec![0; bytes as usize])
        } else {
            let off = exec
                .fabric()
                .scratch(&format!("entry_race/{key}"), bytes)
                .expect("scratch");
            Buf::Heap(off, bytes)
        }
    }
    /// The user's own write, before it calls the collective.
    fn write(&mut self, exec: &Executor<GroupFabric>, data: &[u8]) {
        match self {
            Buf::Host(v) => v.copy_from_slice(data),
            Buf::Heap(off, len) => {
                assert_eq!(data.len() as u64, *len);
                let f = exec.fabric();
                let p = f.heap_ptr(f.rank(), *off, *len).expect("heap range");
                // SAFETY: a checked range of this rank's heap.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
            }
        }
    }
    fn read(&self, exec: &Executor<GroupFabric>) -> Vec<u8> {
        match self {
            Buf::Host(v) => v.clone(),
            Buf::Heap(off, len) => {
                let f = exec.fabric();
                let p = f.heap_ptr(f.rank(), *off, *len).expect("heap range");
                // SAFETY: a checked range of this rank's heap; the launch has returned.
                unsafe { std::slice::from_raw_parts(p, *len as usize) }.to_vec()
            }
        }
    }
    fn binding(&mut self) -> Binding<'_> {
        match self {
            Buf::Heap(offset, bytes) => Binding::Heap {
                offset: *offset,
                bytes: *bytes,
            },
            Buf::Host(v) => Binding::Host(v.as_mut_slice()),
        }
    }
}

fn launch_plan(exec: &Executor<GroupFabric>, plan: &Plan, bufs: &mut [&mut Buf]) {
    launch_sized(exec, plan, bufs, &sizes()).expect("launch");
}

fn launch_sized(
    exec: &Executor<GroupFabric>,
    plan: &Plan,
    bufs: &mut [&mut Buf],
    sizes: &LaunchSizes,
) -> Result<(), symsched_runtime::exec::ExecError> {
    let lp = exec.load(plan).expect("load");
    let mut binds: Vec<Binding> = bufs.iter_mut().map(|b| b.binding()).collect();
    exec.launch(
        &lp,
        LaunchArgs {
            types: ElemTypes::new(DType::F32, None).expect("types"),
            op: ReduceOp::Sum,
            sizes,
            buffers: &mut binds,
        },
    )
}

/// A launch every rank refuses, by iteration: the root (rank 0), then rank 1, refuses its own
/// arguments (a buffer one element short for the size; the others stage in and publish as
/// usual), then the root launches one element fewer than the others.
fn refused_launch(exec: &Executor<GroupFabric>, plan: &Plan, x: &mut Buf, it: u64) {
    let me = exec.fabric().rank();
    let mut sizes = sizes();
    let mut short = None;
    if it % 3 == me as u64 {
        let full = x.read(exec);
        short = Some(Buf::Host(full[..full.len() - 4].to_vec()));
    } else if it % 3 == 2 && me == 0 {
        sizes.vars.insert("n".into(), N as u64 - 1);
    }
    let buf = short.as_mut().unwrap_or(x);
    let r = launch_sized(exec, plan, &mut [buf], &sizes);
    assert!(r.is_err(), "rank {me} iteration {it}: a refused launch ran");
}

/// Root 0 writes `x = 1000·(it+1) + i` and enters at once; every other rank sleeps, writes its
/// own `x = -1` and enters. Every rank must end with the root's data.
fn broadcast(exec: &Executor<GroupFabric>, staged: bool, refusals: bool) -> usize {
    let f = exec.fabric();
    let (me, p) = (f.rank(), f.size());
    let plan = plan("broadcast_push", p, &[("root", 0)]);
    assert_eq!(plan.buffers[0].role, BufferRole::InOut);
    let mut x = Buf::new(exec, "bcast/x", (N * 4) as u64, staged);
    let mut wrong = 0;
    for it in 0..ITERS {
        let root: Vec<f32> = (0..N)
            .map(|i| (1000 * (it + 1)) as f32 + i as f32)
            .collect();
        if refusals {
            refused_launch(exec, &plan, &mut x, it);
        }
        if me == 0 {
            x.write(exec, &f32_bytes(&root));
        } else {
            std::thread::sleep(LATE);
            x.write(exec, &f32_bytes(&vec![-1.0; N]));
        }
        launch_plan(exec, &plan, &mut [&mut x]);
        let got = f32s(&x.read(exec));
        let bad = got.iter().zip(&root).filter(|(a, b)| a != b).count();
        if bad > 0 {
            println!(
                "rank {me} iteration {it}: {bad} of {N} elements are not the root's (x[0] = {})",
                got[0]
            );
        }
        wrong += bad;
    }
    wrong
}

/// Rank 0 enters at once; the others sleep, then zero their `out` (as a caller allocating the
/// output would) and enter. Every rank must end with every rank's `in`.
fn allgather(exec: &Executor<GroupFabric>, staged: bool) -> usize {
    let f = exec.fabric();
    let (me, p) = (f.rank(), f.size());
    let plan = plan("allgather_push", p, &[]);
    let mut input = Buf::new(exec, "ag/in", (N * 4) as u64, staged);
    let mut out = Buf::new(exec, "ag/out", (N * 4) as u64 * p as u64, staged);
    let mut wrong = 0;
    for it in 0..ITERS {
        let mine = |r: u32| -> Vec<f32> {
            (0..N)
                .map(|i| (r as u64 * 100_000 + it * 1000 + i as u64) as f32)
                .collect()
        };
        if me != 0 {
            std::thread::sleep(LATE);
        }
        input.write(exec, &f32_bytes(&mine(me)));
        out.write(exec, &f32_bytes(&vec![0.0; N * p as usize]));
        launch_plan(exec, &plan, &mut [&mut input, &mut out]);
        let got = f32s(&out.read(exec));
        let want: Vec<f32> = (0..p).flat_map(mine).collect();
        let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        if bad > 0 {
            println!(
                "rank {me} iteration {it}: {bad} of {} elements wrong",
                want.len()
            );
        }
        wrong += bad;
    }
    wrong
}

#[test]
fn broadcast_push_waits_for_late_receivers_heap() {
    run_ranks(2, "broadcast/heap");
    run_ranks(3, "broadcast/heap");
}

#[test]
fn broadcast_push_waits_for_late_receivers_after_refused_launches() {
    run_ranks(3, "broadcast_refusals/heap");
    run_ranks(3, "broadcast_refusals/staged");
}

#[test]
fn broadcast_push_waits_for_late_receivers_staged() {
    run_ranks(3, "broadcast/staged");
}

#[test]
fn allgather_push_waits_for_late_receivers_heap() {
    run_ranks(3, "allgather/heap");
}

#[test]
fn allgather_push_waits_for_late_receivers_staged() {
    run_ranks(3, "allgather/staged");
}
