//! How a launch binds memory to a plan's role buffers, and the rules a binding must follow.
//!
//! A role buffer is bound per launch ([`Binding`]): memory already in the symmetric heap is
//! used in place; private memory is used in place when no rank reaches into that role on a
//! peer, and staged through the heap otherwise (see [`super::staging`]).
//!
//! **On one rank** (checked at every launch): one binding per role, each exactly as long as the plan's
//! extents make that role on this rank, read-only memory only for roles the plan never writes,
//! heap ranges inside the heap.
//!
//! **Across the group** (the *binding rule*): every rank binds a role the same way — the same
//! heap offset when symmetric, or staged everywhere. The executor derives every peer's buffer
//! addresses from its own bindings, so a mismatch would silently write into the wrong place of
//! a peer's heap. Checking it takes an exchange, which the caller folds into one it makes
//! anyway: each rank computes its [`binding_pattern`] (one word per role), the words travel
//! (e.g. with [`super::Executor::allgather_u64`]), and [`check_patterns`] gives every rank the
//! same verdict. The Python layer does this on the first launch of each pattern.
//!
//! ```
//! use symsched_runtime::exec::binding::{binding_pattern, STAGED, EMPTY};
//! let heap = (0x1000, 0x1000); // base, length
//! let pattern = binding_pattern(heap, &[(0x1400, 64), (0x9000, 64), (0x1400, 0)]);
//! assert_eq!(pattern, [0x400, STAGED, EMPTY]);
//! ```

use super::dtype::ElemTypes;
use super::error::ExecError;
use super::fabric::Fabric;
use super::resolved::Resolved;
use symsched_plan::{BufferRole, Plan};

/// How one role buffer is bound for a launch.
#[derive(Debug)]
pub enum Binding<'a> {
    /// The tensor is in the symmetric heap at `offset` (the same on every rank), `bytes` long;
    /// used in place.
    Heap { offset: u64, bytes: u64 },
    /// Private memory; staged through heap scratch.
    Host(&'a mut [u8]),
    /// Private read-only memory for an input role; staged in.
    HostRead(&'a [u8]),
}

impl Binding<'_> {
    /// Bytes bound.
    #[inline]
    pub fn len(&self) -> u64 {
        match self {
            Binding::Heap { bytes, .. } => *bytes,
            Binding::Host(s) => s.len() as u64,
            Binding::HostRead(s) => s.len() as u64,
        }
    }

    /// Whether nothing is bound (an empty role).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn is_heap(&self) -> bool {
        matches!(self, Binding::Heap { .. })
    }
}

/// Check this rank's `buffers` against the plan resolved for this launch (see the module docs).
#[inline]
pub(crate) fn check<F: Fabric>(
    fabric: &F,
    plan: &Plan,
    res: &Resolved,
    types: ElemTypes,
    buffers: &[Binding<'_>],
) -> Result<(), ExecError> {
    for (i, bnd) in buffers.iter().enumerate() {
        let expected = res.my_len[i] * types.of(plan.buffers[i].elem).size() as u64;
        let found = bnd.len();
        if found != expected {
            return Err(ExecError::SizeMismatch {
                buffer: plan.buffers[i].name.clone(),
                expected,
                found,
            });
        }
        if let Binding::HostRead(_) = bnd {
            if plan.buffers[i].role != BufferRole::Input {
                return Err(ExecError::DtypeMismatch(format!(
                    "buffer `{}` is written by the plan but was bound read-only",
                    plan.buffers[i].name
                )));
            }
        }
        if let Binding::Heap { offset, bytes } = bnd {
            fabric.heap_ptr(fabric.rank(), *offset, *bytes)?;
        }
    }
    Ok(())
}

/// Pattern word of a role buffer bound to private memory (staged through scratch); a
/// heap-bound one is its heap offset.
pub const STAGED: u64 = u64::MAX;
/// Pattern word of an empty role buffer (bound neither way; nothing is transferred).
pub const EMPTY: u64 = u64::MAX - 1;

/// The binding pattern of `buffers` ((address, bytes) each) against this rank's heap
/// `(base, len)`: per role buffer its heap offset, [`STAGED`] or [`EMPTY`].
pub fn binding_pattern(heap: (usize, usize), buffers: &[(usize, usize)]) -> Vec<u64> {
    let (base, len) = heap;
    buffers
        .iter()
        .map(|&(ptr, n)| {
            if n == 0 {
                EMPTY
            } else if ptr >= base && ptr + n <= base + len {
                (ptr - base) as u64
            } else {
                STAGED
            }
        })
        .collect()
}

fn describe(v: u64) -> String {
    match v {
        STAGED => "ordinary (staged)".to_string(),
        EMPTY => "empty".to_string(),
        off => format!("symmetric at heap offset {off}"),
    }
}

/// A role buffer bound differently across the group (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "buffer `{buffer}` (argument {index}) of `{schedule}` is bound differently across the group \
     {members:?}: {}. A tensor must be bound the same way on every rank: all symmetric (the same \
     symm.empty allocation and offset) or all ordinary tensors",
    .per_rank.join(", ")
)]
pub struct BindingMismatch {
    pub buffer: String,
    /// Position of the role among the launch's arguments.
    pub index: usize,
    pub schedule: String,
    /// The group's members (global ranks).
    pub members: Vec<usize>,
    /// How each group rank bound it.
    pub per_rank: Vec<String>,
}

/// Fail (on every rank alike, since every rank sees the same `rows`) when the gathered binding
/// patterns of `plan`'s roles disagree; `rows[r]` is group rank r's pattern. An empty buffer
/// agrees with anything: uneven extents legitimately leave a role empty on some ranks only,
/// and nothing is transferred through it.
pub fn check_patterns(
    rows: &[&[u64]],
    plan: &Plan,
    members: &[usize],
) -> Result<(), BindingMismatch> {
    let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    for i in 0..width {
        let mut bound = rows
            .iter()
            .filter_map(|r| r.get(i))
            .filter(|v| **v != EMPTY);
        let first = bound.next();
        if bound.any(|v| Some(v) != first) {
            let per_rank = rows
                .iter()
                .enumerate()
                .map(|(r, row)| {
                    format!(
                        "group rank {r}: {}",
                        row.get(i).map_or("?".into(), |v| describe(*v))
                    )
                })
                .collect();
            return Err(BindingMismatch {
                buffer: plan
                    .buffers
                    .get(i)
                    .map_or("?", |b| b.name.as_str())
                    .to_string(),
                index: i,
                schedule: plan.schedule.clone(),
                members: members.to_vec(),
                per_rank,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        crate::exec::test_plans::standard("allreduce_two_shot", 2)
    }

    #[test]
    fn empty_roles_agree_with_anything_and_the_rest_must_match() {
        let p = plan();
        assert!(check_patterns(&[&[64], &[64]], &p, &[0, 1]).is_ok());
        assert!(check_patterns(&[&[EMPTY], &[STAGED]], &p, &[0, 1]).is_ok());
        assert!(check_patterns(&[&[STAGED], &[STAGED]], &p, &[0, 1]).is_ok());
        let e = check_patterns(&[&[64], &[STAGED]], &p, &[4, 5]).unwrap_err();
        assert_eq!((e.index, e.members.as_slice()), (0, &[4usize, 5][..]));
        assert_eq!(
            e.to_string(),
            "buffer `x` (argument 0) of `allreduce_two_shot` is bound differently across the \
             group [4, 5]: group rank 0: symmetric at heap offset 64, group rank 1: ordinary \
             (staged). A tensor must be bound the same way on every rank: all symmetric (the \
             same symm.empty allocation and offset) or all ordinary tensors"
        );
        assert!(check_patterns(&[&[64], &[128]], &p, &[0, 1]).is_err());
    }
}
