//! The executor behind the C ABI's `symsched_launch_plan`: frameworks embedding us from C/C++
//! hand over a compiled plan (JSON) and launch arguments (JSON) for a group, and this runs it
//! with the same executor the Rust and Python front ends use.
//!
//! Launch arguments, all but `dtype` and `buffers` optional:
//! ```json
//! {"dtype": "f32", "wire": "bf16", "op": "sum", "sizes": {"n": 1024},
//!  "counts": [[1, 2], [3, 4]], "buffers": [{"offset": 4096, "bytes": 4096}]}
//! ```
//! `buffers` are the role buffers in signature order, as symmetric-heap offsets (the same on
//! every rank, from `symsched_malloc`); `counts` is the full alltoallv matrix
//! `counts[sender][receiver]`; `backend` (`interp`, `jit` or `auto`) runs this launch on that
//! backend instead of the one `SYMSCHED_BACKEND` chose (every rank should pass the same).

use super::{Binding, DType, ElemTypes, ExecError, Executor, GroupFabric, LaunchArgs, ReduceOp};
use crate::capi_hook::PlanLaunchError;
use crate::group::Group;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use symsched_plan::{LaunchSizes, Plan};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LaunchRequest {
    dtype: String,
    #[serde(default)]
    wire: Option<String>,
    #[serde(default = "default_op")]
    op: String,
    #[serde(default)]
    sizes: BTreeMap<String, u64>,
    #[serde(default)]
    counts: Option<Vec<Vec<u64>>>,
    buffers: Vec<HeapBuffer>,
    #[serde(default)]
    backend: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeapBuffer {
    offset: u64,
    bytes: u64,
}

fn default_op() -> String {
    "sum".into()
}

/// Key of the per-group executor: it keeps each plan's epoch, signal slots and scratch, so it
/// must outlive single launches (back-to-back launches rely on the epoch counters).
const EXECUTOR_KEY: &str = "capi/executor";

fn launch_plan(
    group: &Arc<Group>,
    plan_json: &str,
    args_json: &str,
) -> Result<(), PlanLaunchError> {
    let req: LaunchRequest = serde_json::from_str(args_json)
        .map_err(|e| PlanLaunchError::Invalid(format!("launch arguments JSON: {e}")))?;
    let plan = Plan::from_json(plan_json).map_err(|e| PlanLaunchError::Invalid(e.to_string()))?;
    let exec = group
        .cached(EXECUTOR_KEY, || {
            Ok(Executor::new(GroupFabric::new(group.clone())))
        })
        .map_err(PlanLaunchError::Core)?;
    let run = || -> Result<(), ExecError> {
        let lp = exec.load(&plan)?;
        let wire = req.wire.as_deref().map(DType::parse).transpose()?;
        let types = ElemTypes::new(DType::parse(&req.dtype)?, wire)?;
        let op = ReduceOp::parse(&req.op)?;
        let sizes = LaunchSizes {
            vars: req.sizes.clone(),
            counts: req.counts.clone(),
        };
        let mut buffers: Vec<Binding> = req
            .buffers
            .iter()
            .map(|b| Binding::Heap {
                offset: b.offset,
                bytes: b.bytes,
            })
            .collect();
        exec.launch(
            &lp,
            LaunchArgs {
                types,
                op,
                sizes: &sizes,
                buffers: &mut buffers,
            },
        )
    };
    let backend = match req.backend.as_deref() {
        None => None,
        Some(b) => Some(crate::config::BackendKind::parse(b).ok_or_else(|| {
            PlanLaunchError::Invalid(format!("unknown backend `{b}` (interp, jit or auto)"))
        })?),
    };
    super::backend::launches_on(backend, run).map_err(|e| match e {
        ExecError::Disagreement(d) => PlanLaunchError::Disagreement(d.to_string()),
        ExecError::Core(c) => PlanLaunchError::Core(*c),
        // The JIT cannot run this launch here; the interpreter can.
        ExecError::Jit(f) => {
            PlanLaunchError::Core(crate::error::RuntimeError::Unavailable(f.to_string()))
        }
        e => PlanLaunchError::Invalid(e.to_string()),
    })
}

/// Make the executor available to `symsched_launch_plan`; called by the C ABI at init.
pub fn register() {
    // A second registration (a second init in one process) keeps the first: same function.
    let _ = crate::capi_hook::register_plan_launcher(launch_plan);
}
