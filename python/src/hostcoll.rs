//! Groups that span nodes, with the inter-node step of their hierarchical schedules on the
//! framework's own collective library.
//!
//! A cross-node group (`symsched._native.CrossNodeGroup`) is a hierarchical runtime group:
//! members on this rank's node are reached through shared memory, the others not at all (each
//! node has its own heaps). Its executor runs the hierarchical schedules (`allreduce_hier`,
//! `reduce_scatter_hier`, `allgather_hier`), and their `HostColl` steps call back into a Python
//! object the framework adapter supplies (torch: `torch.distributed` on gloo sub-groups;
//! MindSpore: mccl) — [`FrameworkHostColl`], the runtime's
//! [`HostCollectives`] implemented over that callback.
//!
//! **The GIL.** A launch runs with the GIL released (`py.detach`); the host step re-acquires it
//! for the callback only ([`Python::attach`]) and releases it again when the callback returns,
//! so in-node peers and other Python threads are never held up by the launch itself. A Python
//! exception in the callback becomes [`HostCollFailure`] (the exception's type and message,
//! the collective, the global ranks), a typed executor error, which the launch returns as a
//! `RuntimeError` to Python. The callback's own blocking is bounded by the framework (the
//! sub-groups are made with the signal timeout as their timeout); in-node waits stay bounded by
//! the signal timeout.
//!
//! **Bindings.** Every role buffer of a cross-node launch is staged through the heap (bound as
//! host memory, whatever it is), so every rank binds every role the same way by construction:
//! the binding rule needs no exchange, which the heap could not carry across nodes anyway.

use std::collections::BTreeMap;
use std::sync::Arc;

use pyo3::prelude::*;
use symsched_plan::{HostCollOp, LaunchSizes};
use symsched_runtime::exec::{
    DType, ElemTypes, ExecError, Executor, GroupFabric, HostCollFailure, HostCollRequest,
    HostCollectives, LaunchArgs, LoadedPlan, ReduceOp,
};
use symsched_runtime::{Group, Runtime};

use crate::errors;
use crate::plans::{self, Dual};
use crate::prepared;
use crate::runtime::PyRuntime;

/// The name a host collective has on the Python side.
fn op_name(op: HostCollOp) -> &'static str {
    match op {
        HostCollOp::Allreduce => "allreduce",
        HostCollOp::Allgather => "allgather",
        HostCollOp::ReduceScatter => "reduce_scatter",
        HostCollOp::Broadcast => "broadcast",
    }
}

/// [`HostCollectives`] over a Python callable:
/// `host(op, address, nbytes, dtype, wire, acc, reduce, members, key, ordinal)`, in place on the
/// `nbytes` at `address` (this rank's region), with `members` the global ranks taking part in
/// member order; semantics as in `symsched_runtime::exec::hostcoll` (`reduce` is never `avg`:
/// the executor divides once at the end of the launch).
pub struct FrameworkHostColl {
    callback: Py<PyAny>,
    library: String,
    /// Global rank of each group-local rank.
    members: Vec<usize>,
}

impl HostCollectives for FrameworkHostColl {
    fn run(&self, req: HostCollRequest) -> Result<(), ExecError> {
        let globals: Vec<usize> = req
            .members
            .iter()
            .map(|&m| {
                self.members
                    .get(m as usize)
                    .copied()
                    .ok_or(ExecError::RankOutsideGroup {
                        peer: m,
                        size: self.members.len() as u32,
                    })
            })
            .collect::<Result<_, _>>()?;
        let reduce = match req.reduce {
            ReduceOp::Avg => ReduceOp::Sum,
            r => r,
        };
        let address = req.data.as_mut_ptr() as usize;
        let nbytes = req.data.len();
        let failure = |reason: String| -> ExecError {
            HostCollFailure {
                op: req.op,
                library: self.library.clone(),
                members: globals.clone(),
                key: req.key.to_string(),
                ordinal: req.ordinal,
                reason,
            }
            .into()
        };
        // The region stays borrowed (`req.data`) for the whole call: the callback writes it
        // through `address` and nothing else touches it meanwhile (the verifier keeps shmem
        // traffic off a host collective's region).
        Python::attach(|py| {
            self.callback
                .call1(
                    py,
                    (
                        op_name(req.op),
                        address,
                        nbytes,
                        req.dtype.name(),
                        req.wire.name(),
                        req.acc.name(),
                        reduce.name(),
                        globals.clone(),
                        req.key,
                        req.ordinal,
                    ),
                )
                .map(|_| ())
                .map_err(|e| failure(e.to_string()))
        })
    }
}

/// A group whose members span nodes (`symsched._native.CrossNodeGroup`); see the module docs.
#[pyclass(name = "CrossNodeGroup", module = "symsched._native", frozen)]
pub struct PyCrossNodeGroup {
    group: Arc<Group>,
    exec: Arc<Executor<GroupFabric>>,
    /// What builds the bridge again for a renewed handle.
    host: Py<PyAny>,
    library: String,
}

/// The executor of a cross-node group: host collectives through the framework's `host`.
fn bridged_executor(
    group: &Arc<Group>,
    host: Py<PyAny>,
    library: String,
) -> Arc<Executor<GroupFabric>> {
    let bridge = FrameworkHostColl {
        callback: host,
        library,
        members: group.members().to_vec(),
    };
    Arc::new(Executor::new(GroupFabric::new(group.clone())).with_host_collectives(Box::new(bridge)))
}

/// A prepared launch on a cross-node group (`symsched._native.CrossNodePrepared`): the loaded
/// hierarchical plan, element types and sizes; `run(buffers)` stages and launches.
#[pyclass(name = "CrossNodePrepared", module = "symsched._native", frozen)]
pub struct PyCrossNodePrepared {
    exec: Arc<Executor<GroupFabric>>,
    plan: Arc<LoadedPlan>,
    types: ElemTypes,
    op: ReduceOp,
    sizes: LaunchSizes,
}

/// Create the cross-node group of `members` (global ranks, group order): collective over the
/// members on this node (they agree their heap state; the other nodes' members do the same on
/// theirs). `host` is the framework's host-collective callable (see [`FrameworkHostColl`]),
/// `library` its name for messages (`gloo`, `mccl`).
#[pyfunction]
pub fn cross_node_group(
    py: Python<'_>,
    runtime: &PyRuntime,
    members: Vec<usize>,
    host: Py<PyAny>,
    library: String,
) -> PyResult<PyCrossNodeGroup> {
    let rt: Arc<Runtime> = runtime.runtime.clone();
    let group = py
        .detach(move || rt.group(&members, true).map_err(Box::new))
        .map_err(errors::rt_boxed)?;
    let exec = bridged_executor(&group, host.clone_ref(py), library.clone());
    Ok(PyCrossNodeGroup {
        group,
        exec,
        host,
        library,
    })
}

/// `(node id, local world size, signal timeout in ms)` of this process: the node the runtime
/// was started on (`SYMSCHED_NODE_ID`, else the host), how many ranks share its heaps, and the
/// deadline the framework's host steps get too.
#[pyfunction]
pub fn node_info(runtime: &PyRuntime) -> (String, usize, u64) {
    let rt = &runtime.runtime;
    let timeout = u64::try_from(rt.config().signal_timeout.as_millis()).unwrap_or(u64::MAX);
    (rt.node_id().to_string(), rt.local_world_size(), timeout)
}

/// One declared dual as Python sees it: `(kind, name, params, collective)`.
type DualRow = (String, String, BTreeMap<String, i64>, String);

/// The duals `schedule` declares at `size` ranks, as `(kind, name, params, collective)`
/// tuples (`kind` is "schedule" or "identity_assuming_replicated"; the other fields are empty
/// for the identity).
#[pyfunction]
pub fn schedule_duals(
    py: Python<'_>,
    schedule: &str,
    size: u32,
    params: BTreeMap<String, i64>,
) -> PyResult<Vec<DualRow>> {
    let plan = py
        .detach(|| plans::plan(schedule, size, &params))
        .map_err(errors::value)?;
    let ds = plans::duals(&plan).map_err(errors::value)?;
    Ok(ds
        .into_iter()
        .map(|d| match d {
            Dual::Schedule {
                name,
                params,
                collective,
            } => ("schedule".to_string(), name, params, collective),
            Dual::IdentityAssumingReplicated => (
                "identity_assuming_replicated".to_string(),
                String::new(),
                BTreeMap::new(),
                String::new(),
            ),
        })
        .collect())
}

#[pymethods]
impl PyCrossNodeGroup {
    /// This rank's index in the group.
    #[getter]
    fn rank(&self) -> usize {
        self.group.rank()
    }

    /// Number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.group.size()
    }

    /// The runtime's name of the group (`[0, 1, 2, 3](hierarchical)`).
    #[getter]
    fn name(&self) -> String {
        self.group.name().to_string()
    }

    /// Global ranks in group order.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.group.members().to_vec()
    }

    /// Whether group-local rank `peer` shares this rank's node (reachable through the heap).
    fn same_node(&self, peer: usize) -> bool {
        self.group.is_reachable(peer)
    }

    /// Mark the group aborted by this rank with `message` on this node (the abort record lives
    /// in the node's heap; the other nodes learn of a failure from the framework's library).
    fn abort(&self, message: &str) {
        self.group.abort(message);
    }

    /// The abort this node's members report, as `PyGroup.aborted` does, or None.
    fn aborted(&self) -> Option<crate::group::AbortRow> {
        crate::group::abort_row(&self.group)
    }

    /// Make the aborted group usable again: collective over this node's members, bounded by
    /// `timeout_ms` (default: the signal timeout). Returns the new generation.
    #[pyo3(signature = (timeout_ms=None))]
    fn reset_after_abort(&self, py: Python<'_>, timeout_ms: Option<u64>) -> PyResult<u64> {
        crate::group::reset_after_abort(py, &self.group, timeout_ms)
    }

    /// A new handle on the same group with a fresh executor (see `PyGroup.renewed`).
    fn renewed(&self, py: Python<'_>) -> PyCrossNodeGroup {
        PyCrossNodeGroup {
            group: self.group.clone(),
            exec: bridged_executor(&self.group, self.host.clone_ref(py), self.library.clone()),
            host: self.host.clone_ref(py),
            library: self.library.clone(),
        }
    }

    /// Completed resets of this group on this rank.
    fn generation(&self) -> u64 {
        self.group.generation()
    }

    /// Barrier over the members on this node (the other nodes are not reached).
    fn node_barrier(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.group.clone();
        py.detach(move || g.barrier().map_err(Box::new))
            .map_err(errors::rt_boxed)
    }

    /// Prepare launches of the hierarchical `schedule` (its plan must be one: `over nodes`)
    /// with `params`, element types, reduce op and `sizes`.
    #[pyo3(signature = (schedule, params, dtype, op, wire, sizes))]
    #[allow(clippy::too_many_arguments)] // mirrors the Python call: one argument per launch property
    fn prepare(
        &self,
        py: Python<'_>,
        schedule: &str,
        params: BTreeMap<String, i64>,
        dtype: &str,
        op: Option<&str>,
        wire: Option<&str>,
        sizes: BTreeMap<String, u64>,
    ) -> PyResult<PyCrossNodePrepared> {
        let size =
            u32::try_from(self.group.size()).map_err(|_| errors::value("group too large"))?;
        let plan = py
            .detach(|| plans::plan(schedule, size, &params))
            .map_err(errors::value)?;
        if plan.hierarchy.is_none() {
            return Err(errors::value(format!(
                "schedule `{schedule}` is not hierarchical (`over nodes`): it cannot run on group {} \
                 whose members span nodes",
                self.group.name()
            )));
        }
        let data = DType::parse(dtype).map_err(|e| errors::exec(e.into()))?;
        let wire = wire
            .map(DType::parse)
            .transpose()
            .map_err(|e| errors::exec(e.into()))?;
        let types = ElemTypes::new(data, wire).map_err(errors::exec)?;
        let rop = ReduceOp::parse(op.unwrap_or("sum")).map_err(|e| errors::exec(e.into()))?;
        let exec = self.exec.clone();
        let lp = py.detach(|| exec.load(&plan)).map_err(errors::exec)?;
        Ok(PyCrossNodePrepared {
            exec: self.exec.clone(),
            plan: lp,
            types,
            op: rop,
            sizes: LaunchSizes {
                vars: sizes,
                counts: None,
            },
        })
    }
}

#[pymethods]
impl PyCrossNodePrepared {
    /// The schedule this launch runs.
    #[getter]
    fn schedule(&self) -> String {
        self.plan.plan().schedule.clone()
    }

    /// Launch with `buffers` ((address, bytes) of the role buffers in signature order), every
    /// one staged (see the module docs). Returns None, like `Prepared.run`.
    fn run(
        &self,
        py: Python<'_>,
        buffers: Vec<(usize, usize)>,
    ) -> PyResult<Option<Vec<Py<PyAny>>>> {
        let exec = self.exec.clone();
        let lp = self.plan.clone();
        let (types, op) = (self.types, self.op);
        let sizes = &self.sizes;
        py.detach(move || {
            // SAFETY: (ptr, n) describe live contiguous tensors the caller keeps alive for the
            // launch; no other Rust reference aliases them. The empty heap range binds every
            // buffer as host memory (staged).
            let mut binds = unsafe { prepared::bind((0, 0), &buffers) };
            exec.launch(
                &lp,
                LaunchArgs {
                    types,
                    op,
                    sizes,
                    buffers: &mut binds,
                },
            )
        })
        .map_err(errors::exec)?;
        Ok(None)
    }
}

/// Register the cross-node classes and functions on the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCrossNodeGroup>()?;
    m.add_class::<PyCrossNodePrepared>()?;
    m.add_function(wrap_pyfunction!(cross_node_group, m)?)?;
    m.add_function(wrap_pyfunction!(node_info, m)?)?;
    m.add_function(wrap_pyfunction!(schedule_duals, m)?)?;
    Ok(())
}
