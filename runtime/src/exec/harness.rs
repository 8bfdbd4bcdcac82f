//! One rank's side of a checked, timed run of a plan: what `symsched run` and the executor tests
//! do on every rank.
//!
//! Each iteration fills the inputs deterministically (different per rank and per iteration),
//! fills outputs with a sentinel, waits at a barrier, times one launch, and with `check` compares
//! this rank's buffers against the sequential reference (every rank can compute every other
//! rank's inputs, so the check needs no communication).

use super::dtype::ElemTypes;
use super::error::ExecError;
use super::fabric::Fabric;
use super::reduce::ReduceOp;
use super::reference::{
    count_wrong, counts_for, expected, fill, first_wrong, role_lens, tolerance,
};
use super::{Binding, Executor, LaunchArgs};
use std::time::Instant;
use symsched_plan::{BufferRole, CollectiveKind, LaunchSizes, Plan};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub types: ElemTypes,
    pub op: ReduceOp,
    pub sizes: LaunchSizes,
    pub warmup: u32,
    pub iters: u32,
    pub check: bool,
    /// Bind role buffers as private memory (staged) instead of in the heap.
    pub staged: bool,
}

/// What one rank measured.
#[derive(Debug, Clone, Default)]
pub struct RankReport {
    /// Seconds per timed launch.
    pub times: Vec<f64>,
    /// Elements that differ from the reference, over all checked iterations.
    pub wrong: u64,
    /// The first of them: role buffer and element index in this rank's buffer.
    pub first_wrong: Option<(u32, u64)>,
}

/// Launch sizes for a nccl-tests style element `count`: the element count of the collective's
/// largest role (allreduce: n; allgather: P·n output; reduce_scatter: P·n input; alltoall: P·n;
/// broadcast/reduce/sendrecv: n; matmul collectives: n with `m`, `k` from `extra`, default 16).
/// Counts that are not a multiple of P are rounded down per rank (`n = count / P`). For
/// alltoallv, `counts` is filled with [`counts_for`]`(P, count / P)`.
pub fn sizes_for(plan: &Plan, count: u64, extra: &[(String, u64)]) -> LaunchSizes {
    let p = plan.group_size as u64;
    let n = match plan.collective {
        CollectiveKind::Allgather
        | CollectiveKind::ReduceScatter
        | CollectiveKind::Alltoall
        | CollectiveKind::Alltoallv => count / p.max(1),
        _ => count,
    };
    let mut s = LaunchSizes::default();
    s.vars.insert("n".into(), n);
    if matches!(
        plan.collective,
        CollectiveKind::AllgatherMatmul | CollectiveKind::MatmulReduceScatter
    ) {
        s.vars.insert("m".into(), 16);
        s.vars.insert("k".into(), 16);
    }
    for (k, v) in extra {
        s.vars.insert(k.clone(), *v);
    }
    if plan.collective == CollectiveKind::Alltoallv {
        s.counts = Some(counts_for(plan.group_size, n));
    }
    s
}

/// Bytes the run moves per rank for algbw (nccl-tests `size`): the largest role in data bytes.
pub fn message_bytes(plan: &Plan, spec: &RunSpec) -> Result<u64, ExecError> {
    let lens = role_lens(plan, 0, &spec.sizes)?;
    Ok(lens.into_iter().max().unwrap_or(0) * spec.types.data.size() as u64)
}

/// Where heap-bound role buffers come from: the user heap of the runtime (symmetric `malloc` /
/// `free`) or, by default, keyed group scratch.
pub struct RoleMemory<'a> {
    pub alloc: Box<dyn FnMut(u64) -> Result<u64, ExecError> + 'a>,
    pub free: Box<dyn FnMut(u64) -> Result<(), ExecError> + 'a>,
}

/// Run `spec` on this rank. Collective over the executor's group.
pub fn run_rank<F: Fabric>(
    exec: &Executor<F>,
    plan: &Plan,
    spec: &RunSpec,
) -> Result<RankReport, ExecError> {
    run_rank_with(exec, plan, spec, None)
}

/// [`run_rank`] with role buffers from `mem` (freed again at the end).
pub fn run_rank_with<F: Fabric>(
    exec: &Executor<F>,
    plan: &Plan,
    spec: &RunSpec,
    mut mem: Option<&mut RoleMemory>,
) -> Result<RankReport, ExecError> {
    let fab = exec.fabric();
    let me = fab.rank();
    let p = fab.size();
    let lp = exec.load(plan)?;
    let mut sizes = spec.sizes.clone();
    if let Some(counts) = &spec.sizes.counts {
        // Exercise the real path: every rank contributes only its own row.
        let row = counts.get(me as usize).cloned().unwrap_or_default();
        sizes.counts = Some(exec.gather_counts(&row)?);
        if sizes.counts.as_ref() != Some(counts) {
            return Err(ExecError::Runtime(
                "gathered counts differ from the inputs".into(),
            ));
        }
    }
    let roles: Vec<BufferRole> = plan
        .buffers
        .iter()
        .map(|b| b.role)
        .take_while(|r| *r != BufferRole::Scratch)
        .collect();
    let es = spec.types.data.size();
    let my_lens = role_lens(plan, me, &sizes)?;
    // Role buffers in the heap: symmetric, capacity = the largest rank's size.
    let mut heap_offs = Vec::new();
    let mut host: Vec<Vec<u8>> = Vec::new();
    for (i, _) in roles.iter().enumerate() {
        let mut cap = 0;
        for r in 0..p {
            cap = cap.max(role_lens(plan, r, &sizes)?[i]);
        }
        let bytes = (cap * es as u64).max(1);
        if spec.staged {
            host.push(vec![0u8; (my_lens[i] as usize) * es]);
        } else {
            heap_offs.push(match mem.as_mut() {
                Some(m) => (m.alloc)(bytes)?,
                None => fab.scratch(&format!("run/{}/role{i}/{bytes}", plan.schedule), bytes)?,
            });
        }
    }
    let tol = tolerance(plan, spec.types, &sizes);
    let mut report = RankReport::default();
    for it in 0..(spec.warmup + spec.iters) as u64 {
        let contents = |r: u32| -> Result<Vec<Vec<u8>>, ExecError> {
            let lens = role_lens(plan, r, &sizes)?;
            Ok(lens
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    // Outputs start as a sentinel (other values) so unwritten elements show.
                    let tag = if roles[i] == BufferRole::Output {
                        100 + i
                    } else {
                        i
                    };
                    fill(spec.types.data, r, it, tag, *n as usize)
                })
                .collect())
        };
        // Peers may still read our inputs of the previous launch (get-based schedules).
        exec.barrier()?;
        let mine = contents(me)?;
        for (i, v) in mine.iter().enumerate() {
            if spec.staged {
                host[i].copy_from_slice(v);
            } else if !v.is_empty() {
                let dst = fab.heap_ptr(me, heap_offs[i], v.len() as u64)?;
                // SAFETY: checked heap range; peers do not touch it before the barrier below.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()) };
            }
        }
        exec.barrier()?;
        let t0 = Instant::now();
        {
            let mut binds: Vec<Binding> = if spec.staged {
                host.iter_mut()
                    .map(|h| Binding::Host(h.as_mut_slice()))
                    .collect()
            } else {
                heap_offs
                    .iter()
                    .zip(&my_lens)
                    .map(|(o, n)| Binding::Heap {
                        offset: *o,
                        bytes: n * es as u64,
                    })
                    .collect()
            };
            exec.launch(
                &lp,
                LaunchArgs {
                    types: spec.types,
                    op: spec.op,
                    sizes: &sizes,
                    buffers: &mut binds,
                },
            )?;
        }
        let dt = t0.elapsed().as_secs_f64();
        if it >= spec.warmup as u64 {
            report.times.push(dt);
        }
        if spec.check {
            let before: Vec<Vec<Vec<u8>>> = (0..p).map(contents).collect::<Result<_, _>>()?;
            let want = expected(plan, spec.types, spec.op, &sizes, &before)?;
            // Our program ends only after every write into our buffers has arrived (the
            // verifier proves the postcondition per rank), so they are final here.
            for (i, w) in want[me as usize].iter().enumerate() {
                let Some(w) = w else { continue };
                let got: Vec<u8> = if spec.staged {
                    host[i].clone()
                } else {
                    let len = w.len() as u64;
                    let src = fab.heap_ptr(me, heap_offs[i], len)?;
                    // SAFETY: checked heap range.
                    unsafe { std::slice::from_raw_parts(src, len as usize) }.to_vec()
                };
                let wrong = count_wrong(spec.types.data, &got, w, tol);
                if wrong > 0 && report.first_wrong.is_none() {
                    report.first_wrong =
                        first_wrong(spec.types.data, &got, w, tol).map(|e| (i as u32, e as u64));
                }
                report.wrong += wrong;
            }
        }
    }
    // Nobody may reuse the role buffers (next size) while a peer still reads them.
    exec.barrier()?;
    if let Some(m) = mem {
        for off in heap_offs.into_iter().rev() {
            (m.free)(off)?;
        }
    }
    Ok(report)
}

/// Run `spec` on `plan.group_size` threads over a fresh in-process world with `heap` bytes per
/// rank; returns every rank's report (rank order). A rank's error is returned as soon as all
/// threads have ended (peers waiting on a failed rank time out after `timeout`).
pub fn run_local(
    plan: &Plan,
    spec: &RunSpec,
    heap: u64,
    timeout: std::time::Duration,
) -> Result<Vec<RankReport>, ExecError> {
    let world = super::LocalWorld::new(plan.group_size, heap)?.with_timeout(timeout);
    run_in_world(plan, spec, &world)
}

/// [`run_local`] over a world the caller made (its options: backend, timeout, heap size).
pub fn run_in_world(
    plan: &Plan,
    spec: &RunSpec,
    world: &std::sync::Arc<super::LocalWorld>,
) -> Result<Vec<RankReport>, ExecError> {
    let group = world.world_group()?;
    let results: Vec<Result<RankReport, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.group_size)
            .map(|r| {
                let group = group.clone();
                s.spawn(move || {
                    let exec = Executor::new(group.fabric(r)?);
                    run_rank(&exec, plan, spec)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ExecError::Runtime("rank thread panicked".into())))
            })
            .collect()
    });
    // Report the root cause rather than the peers' timeouts it caused.
    if let Some(e) = results
        .iter()
        .position(|r| matches!(r, Err(e) if !matches!(e, ExecError::Timeout(_))))
    {
        return Err(results
            .into_iter()
            .nth(e)
            .and_then(|r| r.err())
            .expect("an error"));
    }
    results.into_iter().collect()
}
