//! `HostColl` steps: collectives done by the framework's own library (gloo, HCCL, …), and the
//! built-in stand-in that does them through the symmetric heap.
//!
//! The stand-in ([`HeapHostColl`]) is only correct when all members share one node's heap; it
//! exists so hierarchical schedules can be executed and checked without a framework. The Python
//! layer plugs the real library in with [`super::Executor::with_host_collectives`].
//!
//! In-place semantics on the step's region (`m` = number of members, blocks = ceil split of the
//! region into `m` parts, member index = position in `members`):
//! - allreduce: every member's region becomes the fold of all members' regions in member order;
//! - allgather: block i of every member's region becomes block i of member i's region;
//! - reduce_scatter: block i of member i's region becomes the fold of block i over all members;
//! - broadcast: every member's region becomes member 0's region.
//!
//! `avg` launches fold with `sum` here: the executor divides once at the end of the launch.

use super::dtype::DType;
use super::error::ExecError;
pub use super::error::HostCollFailure;
use super::fabric::{Fabric, WaitContext};
use super::reduce::{reduce_raw, Operand, ReduceOp};
use std::collections::HashMap;
use symsched_plan::{Cmp, HostCollOp, SignalMode};

/// One host collective to perform.
pub struct HostCollRequest<'a> {
    pub op: HostCollOp,
    /// This rank's region (in the symmetric heap), in place.
    pub data: &'a mut [u8],
    pub dtype: DType,
    /// The launch's wire format (`dtype` when none): a library that narrows what travels
    /// between nodes sends this and accumulates in `acc`.
    pub wire: DType,
    pub acc: DType,
    pub reduce: ReduceOp,
    /// Group-local ranks taking part, this rank included.
    pub members: &'a [u32],
    /// Plan key, and the position of this host collective among the launch's host collectives
    /// (the same on every rank, unlike step ids): together they name the collective.
    pub key: &'a str,
    pub ordinal: u32,
}

/// A collective library for `HostColl` steps.
pub trait HostCollectives: Send + Sync {
    /// Perform the collective; every member calls it with the same op and region length.
    fn run(&self, req: HostCollRequest) -> Result<(), ExecError>;
    /// True only for [`HeapHostColl`], which the executor runs itself over its fabric.
    fn is_builtin(&self) -> bool {
        false
    }
}

/// The built-in stand-in: exchanges through the heap of the executor's own group.
pub struct HeapHostColl;

impl HostCollectives for HeapHostColl {
    fn run(&self, _req: HostCollRequest) -> Result<(), ExecError> {
        Err(ExecError::Runtime(
            "the heap host collective runs inside the executor".into(),
        ))
    }
    fn is_builtin(&self) -> bool {
        true
    }
}

struct ExState {
    epoch: u64,
    slots: u32,
    area: u64,
    buf: Vec<u8>,
}

/// Bytes of one exchange area. The same on every rank whatever the exchange's length: the
/// group's scratch is laid out by the order and sizes of its registrations, which must agree
/// on every rank, and the members of one tag differ between ranks (node-strided sub-groups
/// whose regions have different lengths, e.g. `allreduce_hier` with a short last chunk); a
/// longer exchange takes several rounds through the area. 64 KiB, not more: every tag (the
/// barrier too) reserves one area in the group's scratch, and heaps of 1 MiB must still hold
/// the plans' own areas.
const AREA_BYTES: u64 = 64 << 10;

/// Epoch-counted all-to-all byte exchanges through the heap (used for counts, barriers and the
/// heap host collectives). Every member writes its bytes into slot `index` of every member's
/// exchange area, then adds 1 to its `arrive` counter; after reading, it adds 1 to each peer's
/// `done` counter, which a member waits for before overwriting that area in the next round.
///
/// A group reset ([`crate::abort`]) zeroes the counters and forgets the registries, so the
/// first exchange of a new generation drops every tag's state (epoch, slots, area) and takes
/// them again: the bytes an aborted exchange left behind are never read as a new one's.
#[derive(Default)]
pub struct Exchanges {
    states: Vec<ExState>,
    /// Tag → index into `states`.
    by_tag: HashMap<String, usize>,
    /// Host collective (plan key, ordinal) → index into `states`: a repeated launch finds its
    /// exchange by comparing a few strings, where formatting its tag and hashing it (SipHash
    /// of ~60 bytes) cost ~1 500 instructions per host collective (callgrind of
    /// `allreduce_hier` at 8 B).
    host: Vec<(String, u32, usize)>,
    /// The operands of a host collective's fold, kept between calls (one allocation less per
    /// call).
    operands: Vec<Operand>,
    /// The group's reset generation the states belong to.
    generation: u64,
}

impl Exchanges {
    /// Exchange `bytes` (same length on every member) among `members`; returns all members'
    /// bytes concatenated in member order. `tag` names the exchange: every rank of the group
    /// uses the same tags in the same order (members may differ between ranks, e.g. node-strided
    /// sub-groups).
    pub fn exchange<F: Fabric>(
        &mut self,
        fabric: &F,
        tag: &str,
        members: &[u32],
        bytes: &[u8],
    ) -> Result<&[u8], ExecError> {
        let idx = member_index(fabric, members)?;
        self.follow_generation(fabric);
        let at = self.state_for(fabric, tag)?;
        exchange_at(&mut self.states[at], fabric, idx, members, bytes)?;
        Ok(&self.states[at].buf)
    }

    /// Drop every state of an older reset generation (see the type's docs).
    #[inline]
    fn follow_generation<F: Fabric>(&mut self, fabric: &F) {
        let generation = fabric.generation();
        if generation != self.generation {
            self.states.clear();
            self.by_tag.clear();
            self.host.clear();
            self.generation = generation;
        }
    }

    /// The index of exchange `tag`'s state, its slots and area taken at its first use.
    fn state_for<F: Fabric>(&mut self, fabric: &F, tag: &str) -> Result<usize, ExecError> {
        if let Some(&at) = self.by_tag.get(tag) {
            return Ok(at);
        }
        // The registered names name the exchange, not its members: the runtime checks that
        // every rank of the group registers the same names, and a host collective over
        // node-strided sub-groups is one exchange with different members on different ranks.
        let key = format!("exchange/{tag}");
        let slots = fabric.signal_slots(&key, 2)?;
        let area = fabric.scratch(&format!("{key}/area"), AREA_BYTES)?;
        self.states.push(ExState {
            epoch: 0,
            slots,
            area,
            buf: Vec::new(),
        });
        let at = self.states.len() - 1;
        self.by_tag.insert(tag.to_string(), at);
        Ok(at)
    }

    /// The index of the state of host collective `ordinal` of the plan loaded under `key`.
    #[inline]
    fn host_state<F: Fabric>(
        &mut self,
        fabric: &F,
        key: &str,
        ordinal: u32,
    ) -> Result<usize, ExecError> {
        if let Some(&(_, _, at)) = self.host.iter().find(|(k, o, _)| *o == ordinal && k == key) {
            return Ok(at);
        }
        let at = self.state_for(fabric, &format!("hostcoll/{key}/{ordinal}"))?;
        self.host.push((key.to_string(), ordinal, at));
        Ok(at)
    }

    /// A barrier over `members` (an exchange of nothing).
    pub fn barrier<F: Fabric>(&mut self, fabric: &F, members: &[u32]) -> Result<(), ExecError> {
        self.exchange(fabric, "barrier", members, &[]).map(|_| ())
    }

    /// Run a host collective through the heap (see the module docs for the semantics).
    pub fn run<F: Fabric>(&mut self, fabric: &F, req: HostCollRequest) -> Result<(), ExecError> {
        let idx = member_index(fabric, req.members)?;
        let m = req.members.len();
        let es = req.dtype.size();
        let n = req.data.len() / es;
        let len = req.data.len();
        self.follow_generation(fabric);
        let at = self.host_state(fabric, req.key, req.ordinal)?;
        exchange_at(&mut self.states[at], fabric, idx, req.members, req.data)?;
        let (all, operands) = (&self.states[at].buf, &mut self.operands);
        let block = n.div_ceil(m.max(1));
        let span = |i: usize| {
            let s = (i * block).min(n);
            let e = ((i + 1) * block).min(n);
            (s, e - s)
        };
        let op = match req.reduce {
            ReduceOp::Avg => ReduceOp::Sum,
            o => o,
        };
        let mut fold = |data: &mut [u8], start: usize, count: usize| -> Result<(), ExecError> {
            operands.clear();
            operands.extend((0..m).map(|j| Operand {
                // SAFETY: `all` holds m regions of `len` bytes each.
                ptr: unsafe { all.as_ptr().add(j * len + start * es) },
                dtype: req.dtype,
            }));
            // SAFETY: ranges within `all` and `data`, which are disjoint.
            unsafe {
                reduce_raw(
                    req.acc,
                    op,
                    data.as_mut_ptr().add(start * es),
                    req.dtype,
                    operands,
                    count,
                )
            }
        };
        match req.op {
            HostCollOp::Allreduce => fold(req.data, 0, n)?,
            HostCollOp::ReduceScatter => {
                let (s, c) = span(idx);
                fold(req.data, s, c)?;
            }
            HostCollOp::Allgather => {
                for j in 0..m {
                    let (s, c) = span(j);
                    let from = &all[j * len + s * es..j * len + (s + c) * es];
                    req.data[s * es..(s + c) * es].copy_from_slice(from);
                }
            }
            HostCollOp::Broadcast => req.data.copy_from_slice(&all[..len]),
        }
        Ok(())
    }
}

/// This rank's index in `members`, every member checked to be in the group: before an
/// exchange takes its slots or sends anything.
fn member_index<F: Fabric>(fabric: &F, members: &[u32]) -> Result<usize, ExecError> {
    let me = fabric.rank();
    let outside = |peer| ExecError::RankOutsideGroup {
        peer,
        size: fabric.size(),
    };
    let idx = members
        .iter()
        .position(|m| *m == me)
        .ok_or_else(|| outside(me))?;
    match members.iter().find(|&&m| m >= fabric.size()) {
        Some(&m) => Err(outside(m)),
        None => Ok(idx),
    }
}

/// One exchange of `bytes` among `members` (this rank at `idx`, [`member_index`]) through
/// `st`'s slots and area ([`Exchanges`]); the result is left in `st.buf`.
fn exchange_at<F: Fabric>(
    st: &mut ExState,
    fabric: &F,
    idx: usize,
    members: &[u32],
    bytes: &[u8],
) -> Result<(), ExecError> {
    let me = fabric.rank();
    let m = members.len() as u64;
    let len = bytes.len() as u64;
    // Each round moves one piece of every member's bytes.
    let piece = (AREA_BYTES / m.max(1)).max(1);
    let rounds = len.div_ceil(piece).max(1);
    let ctx = |name: &'static str| WaitContext {
        schedule: "<executor exchange>",
        step: u32::MAX,
        slot_name: name,
        signallers: members,
    };
    st.buf.clear();
    st.buf.resize((m * len) as usize, 0);
    for k in 0..rounds {
        let off = k * piece;
        let l = piece.min(len - off.min(len));
        let e = st.epoch;
        if e > 0 && m > 1 {
            fabric.wait(st.slots + 1, Cmp::Ge, e * (m - 1), &ctx("done"))?;
        }
        for &q in members {
            if l > 0 {
                let dst = fabric.heap_ptr(q, st.area + idx as u64 * piece, l)?;
                // SAFETY: checked heap range; nobody reads it until our arrive signal.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr().add(off as usize), dst, l as usize)
                };
            }
            fabric.signal(q, st.slots, SignalMode::Add, 1)?;
        }
        fabric.wait(st.slots, Cmp::Ge, (e + 1) * m, &ctx("arrive"))?;
        if l > 0 {
            for j in 0..m {
                let src = fabric.heap_ptr(me, st.area + j * piece, l)?;
                let at = (j * len + off) as usize;
                // SAFETY: checked local range, complete after the arrive wait.
                st.buf[at..at + l as usize]
                    .copy_from_slice(unsafe { std::slice::from_raw_parts(src, l as usize) });
            }
        }
        for &q in members {
            if q != me {
                fabric.signal(q, st.slots + 1, SignalMode::Add, 1)?;
            }
        }
        st.epoch += 1;
    }
    Ok(())
}
