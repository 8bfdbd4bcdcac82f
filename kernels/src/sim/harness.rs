//! The simulated counterpart of `symsched_runtime::exec::harness::run_rank`: one rank's side of
//! a checked, timed `symsched run --backend sim`, with the runtime's input filling, barriers and
//! sequential reference check, but the launches done by the generated kernel ([`SimBackend`]).

use super::fabric::SimBackend;
use crate::KernelError;
use std::time::Instant;
use symsched_plan::{BufferRole, Plan};
use symsched_runtime::exec::harness::{RankReport, RunSpec};
use symsched_runtime::exec::reference::{count_wrong, expected, fill, role_lens, tolerance};
use symsched_runtime::exec::{Executor, Fabric};

/// Run `spec` on this rank with the generated kernel. Collective over the executor's group;
/// role buffers live in the heap (`spec.staged` is refused: the kernel works in place).
pub fn run_rank<F: Fabric>(
    exec: &Executor<F>,
    backend: &SimBackend,
    plan: &Plan,
    spec: &RunSpec,
) -> Result<RankReport, KernelError> {
    let err = |e: symsched_runtime::exec::ExecError| KernelError::Run(e.to_string());
    if spec.staged {
        return Err(KernelError::Run(
            "the sim backend binds role buffers in the heap; staged runs are not supported".into(),
        ));
    }
    let want_types = (
        backend.options().dtype.name(),
        backend.options().wire.name(),
    );
    if (spec.types.data.name(), spec.types.wire.name()) != want_types {
        return Err(KernelError::Run(format!(
            "kernel built for {}/{} but the run asks for {}/{}",
            want_types.0,
            want_types.1,
            spec.types.data.name(),
            spec.types.wire.name()
        )));
    }
    let fab = exec.fabric();
    let me = fab.rank();
    let p = fab.size();
    let sizes = &spec.sizes;
    let roles: Vec<BufferRole> = plan
        .buffers
        .iter()
        .map(|b| b.role)
        .take_while(|r| *r != BufferRole::Scratch)
        .collect();
    let es = spec.types.data.size();
    let my_lens = role_lens(plan, me, sizes).map_err(err)?;
    let mut offs = Vec::with_capacity(roles.len());
    for i in 0..roles.len() {
        let mut cap = 0;
        for r in 0..p {
            cap = cap.max(role_lens(plan, r, sizes).map_err(err)?[i]);
        }
        let bytes = (cap * es as u64).max(1);
        let key = format!("sim-run/{}/role{i}/{bytes}", plan.schedule);
        offs.push(fab.scratch(&key, bytes).map_err(err)?);
    }
    let mut bind = backend.prepare(fab, sizes, &offs)?;
    exec.barrier().map_err(err)?;
    let tol = tolerance(plan, spec.types, sizes);
    let mut report = RankReport::default();
    for it in 0..(spec.warmup + spec.iters) as u64 {
        let contents = |r: u32| -> Result<Vec<Vec<u8>>, KernelError> {
            let lens = role_lens(plan, r, sizes).map_err(err)?;
            Ok(lens
                .iter()
                .enumerate()
                .map(|(i, n)| {
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
        exec.barrier().map_err(err)?;
        for (i, v) in contents(me)?.iter().enumerate() {
            if !v.is_empty() {
                let dst = fab.heap_ptr(me, offs[i], v.len() as u64).map_err(err)?;
                // SAFETY: checked heap range; peers do not touch it before the barrier below.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()) };
            }
        }
        exec.barrier().map_err(err)?;
        let t0 = Instant::now();
        backend.launch(fab, &mut bind, sizes)?;
        let dt = t0.elapsed().as_secs_f64();
        if it >= spec.warmup as u64 {
            report.times.push(dt);
        }
        if spec.check {
            let before: Vec<Vec<Vec<u8>>> = (0..p).map(contents).collect::<Result<_, _>>()?;
            let want = expected(plan, spec.types, spec.op, sizes, &before).map_err(err)?;
            for (i, w) in want[me as usize].iter().enumerate() {
                let Some(w) = w else { continue };
                let len = (my_lens[i] as usize * es).min(w.len());
                let src = fab.heap_ptr(me, offs[i], len as u64).map_err(err)?;
                // SAFETY: checked heap range; our program has finished.
                let got = unsafe { std::slice::from_raw_parts(src, len) };
                report.wrong += count_wrong(spec.types.data, got, w, tol);
            }
        }
    }
    exec.barrier().map_err(err)?;
    Ok(report)
}
