//! The executor's view of a runtime group.
//!
//! TEMPORARY: the runtime's multi-process `Fabric` adapter (`exec::group_fabric::GroupFabric`)
//! has not landed yet; until it does, every method that the executor needs to move data fails
//! with a clear error instead of pretending. Replace this module with a re-export of the
//! runtime's adapter.

use std::sync::Arc;

use symsched_plan::{Cmp, SignalMode};
use symsched_runtime::exec::{ExecError, Fabric, WaitContext};
use symsched_runtime::Group;

/// A runtime group seen through the executor's [`Fabric`] trait.
pub struct GroupFabric {
    group: Arc<Group>,
    label: String,
}

impl GroupFabric {
    pub fn new(group: Arc<Group>) -> Self {
        let label = format!("{:?}", group.members());
        GroupFabric { group, label }
    }
}

fn missing() -> ExecError {
    ExecError::Runtime(
        "the runtime's multi-process executor adapter (exec::GroupFabric) is not available in this build".into(),
    )
}

impl Fabric for GroupFabric {
    fn rank(&self) -> u32 {
        self.group.rank() as u32
    }
    fn size(&self) -> u32 {
        self.group.size() as u32
    }
    fn label(&self) -> &str {
        &self.label
    }
    fn heap_len(&self) -> u64 {
        0
    }
    fn heap_ptr(&self, _peer: u32, _offset: u64, _len: u64) -> Result<*mut u8, ExecError> {
        Err(missing())
    }
    fn scratch(&self, _key: &str, _bytes: u64) -> Result<u64, ExecError> {
        Err(missing())
    }
    fn signal_slots(&self, _key: &str, _count: u32) -> Result<u32, ExecError> {
        Err(missing())
    }
    fn signal(&self, _peer: u32, _slot: u32, _mode: SignalMode, _value: u64) -> Result<(), ExecError> {
        Err(missing())
    }
    fn wait(&self, _slot: u32, _cmp: Cmp, _target: u64, _ctx: &WaitContext) -> Result<u64, ExecError> {
        Err(missing())
    }
}
