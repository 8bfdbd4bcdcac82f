//! Test support: the intrinsics ABI implemented over plain memory (P ranks as threads of this
//! process, one byte vector per buffer per rank, atomic counters for signals), and the
//! comparison of compiled kernels against the reference simulator.

#![allow(dead_code)]

pub mod reference;

use reference::Memory;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use symsched_compiler::pipeline::{
    compile, example_params, standard_library, CompileOptions as PlanOptions,
};
use symsched_jit::abi::{self, Intrinsics, KernelArgs, Status};
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, ElemTypes, KernelScope, KernelSpec, ReduceOp};
use symsched_plan::{Cmp, LaunchSizes, Op, Plan};

/// How long a wait spins before it reports a timeout.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(20);

pub fn plan(name: &str, p: u32) -> Plan {
    let lib = standard_library();
    compile(
        &lib,
        name,
        p,
        &example_params(name),
        &PlanOptions::default(),
    )
    .unwrap_or_else(|d| panic!("{name} at P = {p}: {d:?}"))
    .plan
}

/// Every standard schedule this harness runs, sorted: all but those on channels. A rank with
/// several channels has one steps-scope kernel per channel, which only the runtime can run
/// (it starts the channels and sends the entry and exit signals around them); the runtime's
/// JIT tests run those schedules, `snapshots.rs` prints their kernels.
pub fn jit_schedules() -> Vec<String> {
    let mut v: Vec<String> = standard_library()
        .schedules()
        .into_iter()
        .map(|s| s.name)
        .filter(|n| plan(n, 4).channel_count() == 1)
        .collect();
    v.sort();
    v
}

/// Host collective contributions by (epoch, ordinal, members), one slot per member.
type HostDeposits = std::collections::HashMap<(u64, u32, Vec<u32>), Vec<Option<Vec<u8>>>>;

/// Shared state of one launch across the rank threads.
struct World<'a> {
    plan: &'a Plan,
    types: ElemTypes,
    op: ReduceOp,
    bases: Vec<Vec<(usize, usize)>>,
    signals: &'a [Vec<AtomicU64>],
    host: Mutex<HostDeposits>,
    host_cv: Condvar,
}

/// One rank's context, handed to every intrinsic.
struct RankCtx<'a> {
    world: &'a World<'a>,
    rank: u32,
    epoch: u64,
    error: Option<String>,
    staged: u32,
    /// Whether a step reached an intrinsic (an entry signal after that is misplaced).
    stepped: bool,
    /// Signals sent outside a step before and after stage_out: (peer, slot, mode, value).
    entry_sent: Vec<(u32, u32, u32, u64)>,
    exit_sent: Vec<(u32, u32, u32, u64)>,
    /// `copy_nt` calls and `trace` calls (step, flags) of this launch.
    nt_calls: u32,
    traced: Vec<(u32, u32)>,
    /// `region` calls of this launch.
    region_calls: u32,
    /// Sleep before the first wait (to make a dropped wait observable).
    delay_first_wait: Option<Duration>,
    wait_timeout: Duration,
}

unsafe fn ctx<'a>(p: *mut c_void) -> &'a mut RankCtx<'a> {
    unsafe { &mut *(p as *mut RankCtx) }
}

unsafe extern "C" fn region(c: *mut c_void, rank: u32, buf: u32, off: u64, len: u64) -> *mut u8 {
    let c = unsafe { ctx(c) };
    c.stepped = true;
    c.region_calls += 1;
    let Some(&(base, blen)) = c
        .world
        .bases
        .get(rank as usize)
        .and_then(|b| b.get(buf as usize))
    else {
        c.error.get_or_insert(format!(
            "region of rank {rank} buffer {buf} outside the group"
        ));
        return std::ptr::null_mut();
    };
    if off.checked_add(len).is_none_or(|e| e > blen as u64) {
        c.error.get_or_insert(format!(
            "heap range [{off}, {off}+{len}) is past the end {blen} of buffer {buf} on rank {rank}"
        ));
        return std::ptr::null_mut();
    }
    (base + off as usize) as *mut u8
}

unsafe extern "C" fn signal(
    c: *mut c_void,
    peer: u32,
    slot: u32,
    mode: u32,
    value: u64,
    step: u32,
) -> i32 {
    let c = unsafe { ctx(c) };
    // Outside a step: the entry signals before every step, the exit signals after stage_out.
    if step == abi::NO_STEP && c.staged == 0 && c.stepped {
        c.error
            .get_or_insert("entry signal after a step, or exit signal before stage_out".into());
        return 1;
    }
    if step != abi::NO_STEP {
        c.stepped = true;
    } else if c.staged == 0 {
        c.entry_sent.push((peer, slot, mode, value));
    } else {
        c.exit_sent.push((peer, slot, mode, value));
    }
    let Some(s) = c
        .world
        .signals
        .get(peer as usize)
        .and_then(|s| s.get(slot as usize))
    else {
        c.error.get_or_insert(format!(
            "signal to rank {peer} slot {slot} outside the plan"
        ));
        return 1;
    };
    match mode {
        abi::SIGNAL_ADD => {
            s.fetch_add(value, Ordering::Release);
        }
        _ => s.store(value, Ordering::Release),
    }
    0
}

unsafe extern "C" fn wait(c: *mut c_void, slot: u32, cmp: u32, target: u64, step: u32) -> i32 {
    let c = unsafe { ctx(c) };
    c.stepped = true;
    if let Some(d) = c.delay_first_wait.take() {
        std::thread::sleep(d);
    }
    let cmp = [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le][cmp as usize];
    let s = &c.world.signals[c.rank as usize][slot as usize];
    let deadline = Instant::now() + c.wait_timeout;
    loop {
        let v = s.load(Ordering::Acquire);
        if cmp.holds(v, target) {
            return 0;
        }
        if Instant::now() > deadline {
            c.error.get_or_insert(format!(
                "rank {}: timed out in step {step} waiting for slot {slot} {cmp:?} {target} (observed {v})",
                c.rank
            ));
            return 1;
        }
        std::thread::yield_now();
    }
}

unsafe extern "C" fn matmul(
    c: *mut c_void,
    step: u32,
    cp: *mut u8,
    ap: *const u8,
    bp: *const u8,
    m: u64,
    k: u64,
    n: u64,
) -> i32 {
    let c = unsafe { ctx(c) };
    let plan = c.world.plan;
    let Some(Op::Matmul {
        c: cr,
        a: ar,
        b: br,
    }) = plan.ranks[c.rank as usize]
        .steps
        .iter()
        .find(|s| s.id == step)
        .map(|s| &s.op)
    else {
        c.error
            .get_or_insert(format!("step {step} is not a matmul"));
        return 1;
    };
    let dt = |r: &symsched_plan::Region| c.world.types.of(plan.buffers[r.buffer as usize].elem);
    let (cd, ad, bd) = (dt(cr), dt(ar), dt(br));
    let (m, k, n) = (m as usize, k as usize, n as usize);
    // SAFETY: the kernel obtained these ranges from `region` for exactly these counts.
    let (cs, a, b) = unsafe {
        (
            std::slice::from_raw_parts_mut(cp, m * n * cd.size()),
            std::slice::from_raw_parts(ap, m * k * ad.size()),
            std::slice::from_raw_parts(bp, k * n * bd.size()),
        )
    };
    reference::matmul_bytes(cs, cd, a, ad, b, bd, (m, k, n));
    0
}

unsafe extern "C" fn host_coll(
    c: *mut c_void,
    step: u32,
    ordinal: u32,
    data: *mut u8,
    elems: u64,
) -> i32 {
    let c = unsafe { ctx(c) };
    let w = c.world;
    let Some(Op::HostColl {
        op,
        region,
        members,
    }) = w.plan.ranks[c.rank as usize]
        .steps
        .iter()
        .find(|s| s.id == step)
        .map(|s| &s.op)
    else {
        c.error
            .get_or_insert(format!("step {step} is not a host collective"));
        return 1;
    };
    let dtype = w.types.of(w.plan.buffers[region.buffer as usize].elem);
    let bytes = elems as usize * dtype.size();
    // SAFETY: the kernel obtained this range from `region` for `elems` elements.
    let mine = unsafe { std::slice::from_raw_parts_mut(data, bytes) };
    let me = members.iter().position(|m| *m == c.rank).expect("a member");
    let key = (c.epoch, ordinal, members.clone());
    let mut g = w.host.lock().unwrap();
    g.entry(key.clone())
        .or_insert_with(|| vec![None; members.len()])[me] = Some(mine.to_vec());
    w.host_cv.notify_all();
    let deadline = Instant::now() + WAIT_TIMEOUT;
    while g[&key].iter().any(|v| v.is_none()) {
        let (ng, _) = w
            .host_cv
            .wait_timeout(g, Duration::from_millis(50))
            .unwrap();
        g = ng;
        if Instant::now() > deadline {
            c.error.get_or_insert("host collective timed out".into());
            return 1;
        }
    }
    let all: Vec<Vec<u8>> = g[&key].iter().map(|v| v.clone().unwrap()).collect();
    drop(g);
    let out = reference::host_coll_result(*op, w.types, w.op, dtype, &all, me);
    mine.copy_from_slice(&out);
    0
}

unsafe extern "C" fn stage_out(c: *mut c_void) -> i32 {
    let c = unsafe { ctx(c) };
    c.stepped = true;
    c.staged += 1;
    0
}

unsafe extern "C" fn copy_nt(c: *mut c_void, dst: *mut u8, src: *const u8, bytes: u64) {
    let c = unsafe { ctx(c) };
    c.stepped = true;
    c.nt_calls += 1;
    // SAFETY: the kernel passes two disjoint ranges it obtained from `region`.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes as usize) };
}

unsafe extern "C" fn trace(c: *mut c_void, step: u32, flags: u32) {
    let c = unsafe { ctx(c) };
    c.traced.push((step, flags));
}

/// These kernels are compiled without an agreement check; a call is a failure they report.
unsafe extern "C" fn agree(_c: *mut c_void) -> i32 {
    1
}

pub const INTRINSICS: Intrinsics = Intrinsics {
    region,
    signal,
    wait,
    matmul,
    host_coll,
    stage_out,
    copy_nt,
    trace,
    agree,
};

/// What a rank's kernel did in one launch, beyond its data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub epoch: u64,
    pub rank: u32,
    pub nt_calls: u32,
    pub traced: Vec<(u32, u32)>,
    /// Addresses the kernel asked `region` for (with a [`HeapLayout`], what its views left out).
    pub region_calls: u32,
}

/// A failed launch: the decoded status and the intrinsic's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub rank: u32,
    pub status: Status,
    pub message: Option<String>,
}

/// What a launch runs under.
pub struct Launch<'a> {
    pub plan: &'a Plan,
    pub types: ElemTypes,
    pub op: ReduceOp,
    pub sizes: &'a LaunchSizes,
}

/// Options of the harness run.
#[derive(Default, Clone)]
pub struct Harness {
    pub compile: CompileOptions,
    /// Rank → sleep before its first wait.
    pub delay_first_wait: Vec<(u32, Duration)>,
    /// Bound of every wait (default [`WAIT_TIMEOUT`]).
    pub wait_timeout: Option<Duration>,
    /// Rank → how late it enters each launch: it sleeps, then writes its role buffers again
    /// (the caller's data, as before the launch), then calls its kernel. A peer that wrote into
    /// them before the entry loses that write.
    pub late_entry: Vec<(u32, Duration)>,
    /// [`KernelArgs::nt_min_bytes`] (default: never stream).
    pub nt_min_bytes: Option<u64>,
    /// Pass no counters ([`KernelArgs::signals`] null), so every wait calls the intrinsic
    /// (default: the kernel looks at the counters first). A rank with a `delay_first_wait`
    /// always gets none, so its first wait reaches the intrinsic that sleeps.
    pub call_every_wait: bool,
    /// Where to record each rank's [`Observed`] per launch.
    pub observe: Option<std::sync::Arc<Mutex<Vec<Observed>>>>,
    /// Lay every rank's buffers out as one heap and pass the kernel its offsets and views
    /// (default: null tables, so every address goes through `region`).
    pub heap: Option<HeapLayout>,
}

/// Each rank's buffers in one allocation, every buffer at the same offset on every rank (a
/// symmetric heap), described to the kernel by [`KernelArgs::offsets`] and
/// [`KernelArgs::heaps`] as the runtime does: the kernel then forms addresses itself and calls
/// `region` only for what the tables leave out, which the fields below choose.
#[derive(Default, Clone)]
pub struct HeapLayout {
    /// Buffers given as [`abi::NOT_ON_HEAP`] (a role used in place from private memory).
    pub off_heap: Vec<u32>,
    /// Ranks whose view is [`abi::HeapView::NONE`] (a heap not mapped in this process).
    pub unmapped: Vec<u32>,
    /// Every view's `lo`: offsets below it are outside (default 0, the heap's start).
    pub lo: u64,
    /// Bytes taken off every view's `hi` (default 0: `hi` is the end of the last buffer).
    pub short_by: u64,
}

/// Alignment of every buffer in a [`HeapLayout`] (whole cache lines, as the runtime's heap).
const HEAP_ALIGN: usize = 64;

/// Copies every buffer of `mem` to its place in `bases` (`into` the heaps) or back.
fn copy_heaps(mem: &mut Memory, bases: &[Vec<(usize, usize)>], into: bool) {
    for (r, bufs) in mem.bufs.iter_mut().enumerate() {
        for (b, data) in bufs.iter_mut().enumerate() {
            let (at, len) = bases[r][b];
            // SAFETY: the buffer's place in rank r's heap, `len` bytes; no rank thread runs.
            unsafe {
                if into {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), at as *mut u8, len)
                } else {
                    std::ptr::copy_nonoverlapping(at as *const u8, data.as_mut_ptr(), len)
                }
            };
        }
    }
}

/// Compile every rank's kernel and run `launches` launches (epochs 0..) on threads over `mem`.
pub fn run_jit(
    cache: &KernelCache,
    h: &Harness,
    l: &Launch,
    mem: &mut Memory,
    signals: &[Vec<AtomicU64>],
    epochs: std::ops::Range<u64>,
) -> Result<(), Vec<Failure>> {
    let p = l.plan.group_size;
    let kernels: Vec<_> = (0..p)
        .map(|r| {
            let spec = KernelSpec {
                plan: l.plan,
                rank: r,
                channel: 0,
                types: l.types,
                op: l.op,
            };
            cache
                .get(&spec)
                .unwrap_or_else(|e| panic!("compile rank {r}: {e}"))
                .0
        })
        .collect();
    let sizes: Vec<u64> = l
        .plan
        .size_vars
        .iter()
        .map(|v| l.sizes.vars[&v.name])
        .collect();
    let counts: Option<Vec<u64>> = l
        .sizes
        .counts
        .as_ref()
        .map(|m| m.iter().flatten().copied().collect());
    // With a heap layout: every buffer at the same offset on every rank, room for its largest
    // extent over the ranks.
    let layout: Option<(Vec<u64>, usize)> = h.heap.as_ref().map(|_| {
        // `end`: the last buffer's last byte, so a view's `hi` can be exactly the heap's end.
        let (mut at, mut end) = (0usize, 0usize);
        let offsets = (0..l.plan.buffers.len())
            .map(|b| {
                let o = at;
                let len = mem.bufs.iter().map(|r| r[b].len()).max().unwrap_or(0);
                end = o + len;
                at = end.next_multiple_of(HEAP_ALIGN);
                o as u64
            })
            .collect();
        (offsets, end)
    });
    // 8-byte aligned storage per rank.
    let mut heaps: Vec<Vec<u64>> = match &layout {
        Some((_, total)) => (0..p)
            .map(|_| vec![0u64; total.div_ceil(8).max(1)])
            .collect(),
        None => Vec::new(),
    };
    let heap_bases: Vec<usize> = heaps.iter_mut().map(|h| h.as_mut_ptr() as usize).collect();
    let bases: Vec<Vec<(usize, usize)>> = match &layout {
        Some((offsets, _)) => mem
            .bufs
            .iter()
            .zip(&heap_bases)
            .map(|(r, &base)| {
                r.iter()
                    .zip(offsets)
                    .map(|(b, o)| (base + *o as usize, b.len()))
                    .collect()
            })
            .collect(),
        None => mem
            .bufs
            .iter_mut()
            .map(|r| {
                r.iter_mut()
                    .map(|b| (b.as_mut_ptr() as usize, b.len()))
                    .collect()
            })
            .collect(),
    };
    // The kernel's tables: the offsets (`NOT_ON_HEAP` for the buffers left off) and a view per
    // rank.
    let tables: Option<(Vec<u64>, Vec<abi::HeapView>)> =
        h.heap
            .as_ref()
            .zip(layout.as_ref())
            .map(|(hl, (offsets, total))| {
                let offsets = offsets
                    .iter()
                    .enumerate()
                    .map(|(b, o)| {
                        if hl.off_heap.contains(&(b as u32)) {
                            abi::NOT_ON_HEAP
                        } else {
                            *o
                        }
                    })
                    .collect();
                let views = (0..p)
                    .map(|r| {
                        if hl.unmapped.contains(&r) {
                            abi::HeapView::NONE
                        } else {
                            abi::HeapView {
                                base: heap_bases[r as usize] as *mut u8,
                                lo: hl.lo,
                                hi: (*total as u64).saturating_sub(hl.short_by),
                            }
                        }
                    })
                    .collect();
                (offsets, views)
            });
    let world = World {
        plan: l.plan,
        types: l.types,
        op: l.op,
        bases,
        signals,
        host: Mutex::new(Default::default()),
        host_cv: Condvar::new(),
    };
    let mut failures = Vec::new();
    // The tables' addresses, shared by the rank threads (read only; `tables` outlives them).
    let table_addrs: (usize, usize) = tables
        .as_ref()
        .map_or((0, 0), |t| (t.0.as_ptr() as usize, t.1.as_ptr() as usize));
    for epoch in epochs {
        if layout.is_some() {
            copy_heaps(mem, &world.bases, true);
        }
        // What the late ranks' callers write just before they enter.
        let images: Vec<Option<Vec<Vec<u8>>>> = (0..p as usize)
            .map(|r| {
                h.late_entry
                    .iter()
                    .any(|(x, _)| *x as usize == r)
                    .then(|| mem.bufs[r].clone())
            })
            .collect();
        let results: Vec<Option<Failure>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..p)
                .map(|r| {
                    let (world, kernel, sizes, counts) =
                        (&world, &kernels[r as usize], &sizes, &counts);
                    let delay = h
                        .delay_first_wait
                        .iter()
                        .find(|(x, _)| *x == r)
                        .map(|(_, d)| *d);
                    let late = h.late_entry.iter().find(|(x, _)| *x == r).map(|(_, d)| *d);
                    let image = &images[r as usize];
                    s.spawn(move || {
                        if let (Some(d), Some(image)) = (late, image) {
                            std::thread::sleep(d);
                            for (b, decl) in world.plan.buffers.iter().enumerate() {
                                if decl.role == symsched_plan::BufferRole::Scratch {
                                    continue;
                                }
                                let (base, len) = world.bases[r as usize][b];
                                // SAFETY: this rank's own buffer, `len` bytes; peers write it
                                // only after this rank's entry signal (which follows).
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        image[b].as_ptr(),
                                        base as *mut u8,
                                        len,
                                    )
                                };
                            }
                        }
                        let mut rc = RankCtx {
                            world,
                            rank: r,
                            epoch,
                            error: None,
                            staged: 0,
                            stepped: false,
                            entry_sent: Vec::new(),
                            exit_sent: Vec::new(),
                            nt_calls: 0,
                            traced: Vec::new(),
                            region_calls: 0,
                            delay_first_wait: delay,
                            wait_timeout: h.wait_timeout.unwrap_or(WAIT_TIMEOUT),
                        };
                        let prog = &world.plan.ranks[r as usize];
                        let steps_only = h.compile.lower.scope == KernelScope::Steps;
                        if steps_only {
                            // The executor's part before the kernel: the entry signals.
                            for u in &prog.entry_signals {
                                apply(world, u, epoch);
                            }
                        }
                        let mut args = KernelArgs {
                            ctx: &mut rc as *mut RankCtx as *mut c_void,
                            intrinsics: &INTRINSICS,
                            sizes: sizes.as_ptr(),
                            counts: counts.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                            epoch,
                            nt_min_bytes: h.nt_min_bytes.unwrap_or(abi::NT_NEVER),
                            signals: if h.call_every_wait || delay.is_some() {
                                std::ptr::null()
                            } else {
                                world.signals[r as usize].as_ptr() as *const u64
                            },
                            signal_stride: std::mem::size_of::<AtomicU64>() as u64,
                            // Without a heap layout the buffers are not one heap per rank:
                            // every address through the `region` intrinsic.
                            offsets: table_addrs.0 as *const u64,
                            heaps: table_addrs.1 as *const abi::HeapView,
                            status: Default::default(),
                        };
                        // SAFETY: the harness implements the intrinsics over live buffers sized
                        // for these sizes, for the whole launch.
                        let st = unsafe { kernel.launch(&mut args) };
                        let status = Status::decode(&st);
                        if status != Status::Ok {
                            return Some(Failure {
                                rank: r,
                                status,
                                message: rc.error.clone(),
                            });
                        }
                        if let Some(o) = &h.observe {
                            o.lock().unwrap().push(Observed {
                                epoch,
                                rank: r,
                                nt_calls: rc.nt_calls,
                                traced: rc.traced.clone(),
                                region_calls: rc.region_calls,
                            });
                        }
                        if steps_only {
                            assert_eq!(rc.staged, 0, "rank {r}: a steps kernel stages nothing");
                            assert!(
                                rc.entry_sent.is_empty() && rc.exit_sent.is_empty(),
                                "rank {r}: a steps kernel sends no entry or exit signal"
                            );
                            // The executor's part after it: avg, then the exit signals.
                            scale_avg(world, r);
                            for u in &prog.exit_signals {
                                apply(world, u, epoch);
                            }
                            return None;
                        }
                        assert_eq!(rc.staged, 1, "rank {r}: stage_out once per launch");
                        let sent = |ups: &[symsched_plan::SignalUpdate]| -> Vec<_> {
                            ups.iter()
                                .map(|u| {
                                    let mode = match u.mode {
                                        symsched_plan::SignalMode::Add => abi::SIGNAL_ADD,
                                        symsched_plan::SignalMode::Set => abi::SIGNAL_SET,
                                    };
                                    (u.peer, u.slot, mode, u.value_at(epoch))
                                })
                                .collect()
                        };
                        assert_eq!(
                            rc.entry_sent,
                            sent(&prog.entry_signals),
                            "rank {r}: the entry signals, before every step"
                        );
                        assert_eq!(
                            rc.exit_sent,
                            sent(&prog.exit_signals),
                            "rank {r}: the exit signals, after stage_out"
                        );
                        None
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("rank thread"))
                .collect()
        });
        if layout.is_some() {
            copy_heaps(mem, &world.bases, false);
        }
        failures.extend(results.into_iter().flatten());
        if !failures.is_empty() {
            return Err(failures);
        }
    }
    Ok(())
}

/// A signal update sent by the harness itself (the executor's part around a steps kernel).
fn apply(w: &World, u: &symsched_plan::SignalUpdate, epoch: u64) {
    let s = &w.signals[u.peer as usize][u.slot as usize];
    match u.mode {
        symsched_plan::SignalMode::Add => {
            s.fetch_add(u.value, Ordering::Release);
        }
        symsched_plan::SignalMode::Set => s.store(u.value_at(epoch), Ordering::Release),
    }
}

/// `avg` after a steps kernel: every output and in-out role of `rank` divided by P.
fn scale_avg(w: &World, rank: u32) {
    if w.op != ReduceOp::Avg || !w.plan.collective.reduces() {
        return;
    }
    for (b, decl) in w.plan.buffers.iter().enumerate() {
        if !matches!(
            decl.role,
            symsched_plan::BufferRole::Output | symsched_plan::BufferRole::InOut
        ) {
            continue;
        }
        let d = w.types.of(decl.elem);
        let width = d.size();
        let (base, len) = w.bases[rank as usize][b];
        // SAFETY: this rank's own buffer; its kernel has returned and no peer writes it before
        // this rank's exit signals.
        let buf = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, len) };
        for i in 0..len / width {
            let x = &mut buf[i * width..(i + 1) * width];
            let a = reference::acc_load(w.types.acc, d, x);
            x.copy_from_slice(&reference::acc_store(
                reference::div_by(a, w.plan.group_size),
                d,
            ));
        }
    }
}

pub fn new_signals(plan: &Plan) -> Vec<Vec<AtomicU64>> {
    (0..plan.group_size)
        .map(|_| (0..plan.signals.len()).map(|_| AtomicU64::new(0)).collect())
        .collect()
}

/// Deterministic pseudo-random inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value of `d` as bytes: floats span magnitudes so that fold order shows in every
    /// precision, integers wrap. With `special`, one value in eight is NaN, ±infinity, -0 or
    /// a subnormal of the type.
    pub fn value(&mut self, d: DType, special: bool) -> Vec<u8> {
        let r = self.next();
        if d.is_float() && special && r.is_multiple_of(8) {
            let x = match (r >> 3) % 5 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => -0.0,
                _ => match d {
                    DType::F64 => 1e-310,
                    DType::F32 => 1e-40,
                    DType::Bf16 => 1e-39,
                    DType::F16 => 3e-6,
                    _ => 0.001,
                },
            };
            return reference::from_f64(d, x);
        }
        if d.is_float() {
            let mag = [1.0, 0.001, 1000.0, 3.5, 65000.0][(r % 5) as usize];
            let frac = ((r >> 8) % 10_000) as f64 / 10_000.0 + 0.5;
            let sign = if (r >> 40) & 1 == 1 { -1.0 } else { 1.0 };
            reference::from_f64(d, sign * mag * frac)
        } else {
            r.to_le_bytes()[..d.size()].to_vec()
        }
    }
}

/// Fill every role buffer of every rank with values (scratch keeps its poison).
pub fn fill(plan: &Plan, types: ElemTypes, mem: &mut Memory, seed: u64, special: bool) {
    let mut rng = Rng::new(seed);
    for (r, bufs) in mem.bufs.iter_mut().enumerate() {
        for (b, decl) in plan.buffers.iter().enumerate() {
            if decl.role == symsched_plan::BufferRole::Scratch {
                continue;
            }
            let d = types.of(decl.elem);
            let w = d.size();
            let buf = &mut bufs[b];
            for i in 0..buf.len() / w {
                let _ = r;
                buf[i * w..(i + 1) * w].copy_from_slice(&rng.value(d, special));
            }
        }
    }
}

/// The first difference between the role buffers of two memories.
pub fn first_difference(plan: &Plan, types: ElemTypes, a: &Memory, b: &Memory) -> Option<String> {
    for r in 0..a.bufs.len() {
        for (bi, decl) in plan.buffers.iter().enumerate() {
            if decl.role == symsched_plan::BufferRole::Scratch {
                continue;
            }
            let (x, y) = (&a.bufs[r][bi], &b.bufs[r][bi]);
            if x != y {
                let w = types.of(decl.elem).size();
                let at = x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(0) / w;
                return Some(format!(
                    "rank {r} buffer `{}` element {at}: {:02x?} vs {:02x?}",
                    decl.name,
                    &x[at * w..(at + 1) * w],
                    &y[at * w..(at + 1) * w]
                ));
            }
        }
    }
    None
}

/// Sizes for a plan: `n` (and m, k for the matmul collectives), counts for alltoallv.
pub fn sizes_for(plan: &Plan, n: u64, seed: u64) -> LaunchSizes {
    let mut vars = symsched_plan::Bindings::new();
    for v in &plan.size_vars {
        let x = match v.name.as_str() {
            "m" => 3,
            "k" => 5,
            _ => n,
        };
        vars.insert(v.name.clone(), x);
    }
    let counts = plan
        .buffers
        .iter()
        .any(|b| matches!(b.extent, symsched_plan::Extent::Counts { .. }))
        .then(|| {
            let mut rng = Rng::new(seed ^ 0xc0);
            let p = plan.group_size as usize;
            (0..p)
                .map(|_| (0..p).map(|_| rng.next() % (n + 1)).collect())
                .collect()
        });
    LaunchSizes { vars, counts }
}

/// Run the JIT and the reference for `epochs` launches from the same inputs; `Err` names the
/// first difference (or the failed launch).
pub fn compare(
    cache: &KernelCache,
    h: &Harness,
    l: &Launch,
    epochs: u64,
    seed: u64,
) -> Result<(), String> {
    let mut want = Memory::new(l.plan, l.types, l.sizes);
    // NaN payloads of a NaN + NaN sum depend on operand order in hardware (LLVM may commute
    // an fadd); specials go into max/min launches, where selects decide.
    let special = matches!(l.op, ReduceOp::Max | ReduceOp::Min);
    fill(l.plan, l.types, &mut want, seed, special);
    let mut got = want.clone();
    let mut ref_signals = vec![vec![0u64; l.plan.signals.len()]; l.plan.group_size as usize];
    for e in 0..epochs {
        reference::simulate(
            l.plan,
            l.types,
            l.op,
            l.sizes,
            &mut want,
            &mut ref_signals,
            e,
        );
    }
    let signals = new_signals(l.plan);
    run_jit(cache, h, l, &mut got, &signals, 0..epochs)
        .map_err(|f| format!("launch failed: {f:?}"))?;
    match first_difference(l.plan, l.types, &want, &got) {
        None => Ok(()),
        Some(d) => Err(d),
    }
}

pub fn types(data: DType, wire: Option<DType>) -> ElemTypes {
    ElemTypes::new(data, wire).expect("valid types")
}
