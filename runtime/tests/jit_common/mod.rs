#![allow(dead_code)] // each test binary uses part of it

//! The JIT against the interpreter: the same plan, launch arguments and inputs run once on
//! each backend over a fresh in-process world, every role buffer of every rank captured after
//! every launch, compared byte for byte (errors compared by message).

use std::time::Duration;
use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_plan::{BufferRole, ElemClass, LaunchSizes, Plan};
use symsched_runtime::config::{BackendKind, ExecOptions};
use symsched_runtime::exec::harness::sizes_for;
use symsched_runtime::exec::reference::fill;
use symsched_runtime::exec::{
    Binding, DType, ElemTypes, ExecError, Executor, Fabric, LaunchArgs, LocalWorld, ReduceOp,
};

/// Launches per case: the second runs with warm caches and epoch-relative signal targets, the
/// third with its heap bindings moved (a backend that keeps what it derived from the buffers'
/// placement must see the move).
pub const LAUNCHES: u64 = 3;
/// Bound on every wait of a case.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Every standard-library schedule, sorted (the JIT runs them all; a rank with several
/// channels as a kernel per channel).
pub fn names() -> Vec<String> {
    let mut v: Vec<String> = standard_library()
        .schedules()
        .into_iter()
        .map(|s| s.name)
        .collect();
    v.sort();
    v
}

/// `name` at `p` ranks, or `None` where the schedule has no instance (e.g. a ring of two
/// levels at odd P).
pub fn instance(name: &str, p: u32) -> Option<Plan> {
    compile(
        &standard_library(),
        name,
        p,
        &example_params(name),
        &CompileOptions::default(),
    )
    .ok()
    .map(|c| c.plan)
}

/// Data types, and for each the wire types it may travel as.
pub fn type_matrix() -> Vec<ElemTypes> {
    let floats = [DType::F32, DType::F64, DType::F16, DType::Bf16];
    let wires = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::F8E4M3,
        DType::F8E5M2,
    ];
    let mut v = Vec::new();
    for d in floats {
        v.push(ElemTypes::new(d, None).expect("types"));
        for w in wires {
            if w != d {
                v.push(ElemTypes::new(d, Some(w)).expect("types"));
            }
        }
    }
    for d in [DType::I32, DType::I64, DType::U8] {
        v.push(ElemTypes::new(d, None).expect("types"));
    }
    v
}

/// Whether the plan's kernels depend on the wire type / the reduce op at all.
pub fn uses_wire(plan: &Plan) -> bool {
    plan.buffers.iter().any(|b| b.elem == ElemClass::Wire)
}

pub fn reduces(plan: &Plan) -> bool {
    plan.collective.reduces()
        || plan
            .ranks
            .iter()
            .flat_map(|r| &r.steps)
            .any(|s| matches!(s.op, symsched_plan::Op::Reduce { .. }))
}

/// One case.
#[derive(Clone)]
pub struct Case<'a> {
    pub plan: &'a Plan,
    pub types: ElemTypes,
    pub op: ReduceOp,
    /// nccl-tests style element count ([`sizes_for`]).
    pub count: u64,
    /// Bind the roles as private memory (staged) instead of heap ranges.
    pub staged: bool,
    /// Ranks that start each launch this late (to expose a missing wait).
    pub late: Vec<(u32, Duration)>,
    /// The smallest streamed move on both backends (`None`: the default threshold).
    pub nt_min_bytes: Option<usize>,
}

impl Case<'_> {
    pub fn name(&self) -> String {
        format!(
            "{} P={} {}/{} {} count={}{}",
            self.plan.schedule,
            self.plan.group_size,
            self.types.data,
            self.types.wire,
            self.op,
            self.count,
            if self.staged { " staged" } else { "" }
        )
    }
}

fn sizes(plan: &Plan, count: u64) -> LaunchSizes {
    let mut s = sizes_for(plan, count, &[]);
    if s.vars.contains_key("m") {
        s.vars.insert("m".into(), 3);
        s.vars.insert("k".into(), 5);
    }
    s
}

/// Per rank, every role buffer's bytes after each launch (launch-major), or the rank's error.
pub type Outputs = Vec<Result<Vec<Vec<u8>>, String>>;

/// Run `case` on `backend`.
pub fn run(case: &Case, backend: BackendKind) -> Outputs {
    let plan = case.plan;
    let sizes = sizes(plan, case.count);
    let defaults = ExecOptions::default();
    let opts = ExecOptions {
        backend,
        nt_min_bytes: case.nt_min_bytes.unwrap_or(defaults.nt_min_bytes),
        ..defaults
    };
    let es = case.types.data.size() as u64;
    let roles: Vec<BufferRole> = plan
        .buffers
        .iter()
        .map(|b| b.role)
        .take_while(|r| *r != BufferRole::Scratch)
        .collect();
    let lens = |r: u32| -> Result<Vec<u64>, ExecError> {
        plan.buffers[..roles.len()]
            .iter()
            .map(|b| b.total_len(r, &sizes).map_err(ExecError::from))
            .collect()
    };
    let mut heap = 1 << 20;
    for r in 0..plan.group_size {
        heap += lens(r).map_or(0, |l| l.iter().sum::<u64>()) * es * 3;
    }
    let world = LocalWorld::new(plan.group_size, heap)
        .expect("in-process world")
        .with_timeout(TIMEOUT);
    let group = world.world_group().expect("world group");
    let rank = |r: u32| -> Result<Vec<Vec<u8>>, ExecError> {
        let exec = Executor::with_options(group.fabric(r)?, opts.clone());
        let fab = exec.fabric();
        let lp = exec.load(plan)?;
        let mine = lens(r)?;
        let mut cap = vec![0u64; roles.len()];
        for q in 0..plan.group_size {
            for (c, l) in cap.iter_mut().zip(lens(q)?) {
                *c = (*c).max(l);
            }
        }
        let place = |set: &str| -> Result<Vec<u64>, ExecError> {
            cap.iter()
                .enumerate()
                .map(|(i, c)| fab.scratch(&format!("eq/{set}/role{i}"), (c * es).max(1)))
                .collect()
        };
        let (first, moved) = (place("first")?, place("moved")?);
        let mut seen = Vec::new();
        for it in 0..LAUNCHES {
            let offs = if it + 1 < LAUNCHES { &first } else { &moved };
            let mut host: Vec<Vec<u8>> = mine
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let tag = if roles[i] == BufferRole::Output {
                        100 + i
                    } else {
                        i
                    };
                    fill(case.types.data, r, it, tag, *n as usize)
                })
                .collect();
            // Peers may still read our inputs of the previous launch.
            exec.barrier()?;
            if !case.staged {
                for (i, v) in host.iter().enumerate() {
                    if !v.is_empty() {
                        let p = fab.heap_ptr(r, offs[i], v.len() as u64)?;
                        // SAFETY: checked heap range; peers touch it only during the launch.
                        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
                    }
                }
            }
            exec.barrier()?;
            if let Some((_, d)) = case.late.iter().find(|(q, _)| *q == r) {
                std::thread::sleep(*d);
            }
            {
                let mut binds: Vec<Binding> = if case.staged {
                    host.iter_mut()
                        .map(|h| Binding::Host(h.as_mut_slice()))
                        .collect()
                } else {
                    offs.iter()
                        .zip(&mine)
                        .map(|(o, n)| Binding::Heap {
                            offset: *o,
                            bytes: n * es,
                        })
                        .collect()
                };
                exec.launch(
                    &lp,
                    LaunchArgs {
                        types: case.types,
                        op: case.op,
                        sizes: &sizes,
                        buffers: &mut binds,
                    },
                )?;
            }
            // Our program ends only after every write into our buffers has arrived.
            for (i, h) in host.iter().enumerate() {
                let got = if case.staged {
                    h.clone()
                } else {
                    let p = fab.heap_ptr(r, offs[i], h.len() as u64)?;
                    // SAFETY: checked heap range.
                    unsafe { std::slice::from_raw_parts(p, h.len()) }.to_vec()
                };
                seen.push(got);
            }
        }
        exec.barrier()?;
        Ok(seen)
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..plan.group_size)
            .map(|r| s.spawn(move || rank(r).map_err(|e| e.to_string())))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("rank thread panicked".into()))
            })
            .collect()
    })
}

/// The first difference between two runs of `case`, if any.
pub fn difference(a: &Outputs, b: &Outputs) -> Option<String> {
    for (r, (x, y)) in a.iter().zip(b).enumerate() {
        match (x, y) {
            (Ok(x), Ok(y)) => {
                for (k, (p, q)) in x.iter().zip(y).enumerate() {
                    if p != q {
                        let at = p.iter().zip(q).position(|(u, v)| u != v).unwrap_or(0);
                        let roles = x.len() / LAUNCHES as usize;
                        return Some(format!(
                            "rank {r} launch {} role {} byte {at}: {:02x?} vs {:02x?}",
                            k / roles,
                            k % roles,
                            &p[at..(at + 8).min(p.len())],
                            &q[at..(at + 8).min(q.len())]
                        ));
                    }
                }
                if x.len() != y.len() {
                    return Some(format!("rank {r}: {} vs {} buffers", x.len(), y.len()));
                }
            }
            (Err(e), Err(f)) if e == f => {}
            (x, y) => {
                return Some(format!(
                    "rank {r}: {:?} vs {:?}",
                    x.as_ref().map(|_| "ok"),
                    y.as_ref().map(|_| "ok")
                ))
            }
        }
    }
    None
}

/// Run `case` on both backends; `Err` names the first difference.
pub fn compare(case: &Case) -> Result<(), String> {
    let a = run(case, BackendKind::Interp);
    let b = run(case, BackendKind::Jit);
    match difference(&a, &b) {
        None => Ok(()),
        Some(d) => Err(format!("{}: interp vs jit: {d}", case.name())),
    }
}
