//! Where a launch's buffers are: the symmetric staging/scratch area of a loaded plan, the copies
//! of staged roles into it and back out, and the resulting address map every backend reads
//! ([`LaunchMemory`]).
//!
//! Memory already in the symmetric heap is used in place (its offset must be the same on every
//! rank, as for any symmetric tensor); private memory bound to a role that no rank puts into or
//! gets from (e.g. reduce-scatter's `in` and `out`, the wire allreduce's `x`) is used in place
//! too, since only its owner ever addresses it; private memory bound to any other role is
//! *staged*: copied into the area before the steps (inputs and in-out roles) and back after them
//! (outputs and in-out roles). No peer touches a rank's area before its copy-in is done: the
//! executor sends the plan's entry signals only after it, and every peer access to a role
//! buffer waits for one of them or follows a later signal of the owner (the verifier's entry
//! rule); nor after the copy-out starts, since the exit signals come after it. The area holds the staged roles and the scratch buffers, each
//! sized for the largest rank, so its layout agrees on every rank as long as every rank binds a
//! remotely accessed role the same way (the binding rule, [`super::binding`]); it is one area
//! per (group, plan), grown geometrically so a sweep over sizes allocates O(largest) in total.

use super::binding::{self, Binding};
use super::dtype::{DType, ElemTypes};
use super::error::ExecError;
use super::fabric::Fabric;
use super::resolved::{RReg, Resolved};
use symsched_plan::{BufferRole, Plan, PlanError, Rank};

/// Alignment of each buffer in the area.
const AREA_ALIGN: u64 = 64;

/// Largest layout (staged roles and scratch, one copy) whose scratch is kept twice, by launch
/// parity: then a launch's puts into a peer's scratch land in the copy the peer last read two
/// launches before, which a speculative prefix relies on (see "Speculative scratch puts" in
/// `super::loaded`). Small launches are the ones whose latency the speculation shortens; the
/// second copy costs at most this much heap per plan.
const TWIN_MAX: u64 = 64 << 10;

/// Which roles of a loaded plan peers reach into, decided once at load.
#[derive(Debug, Clone)]
pub(crate) struct RoleAccess {
    /// Number of role buffers (they come first among the plan's buffers).
    pub(crate) roles: usize,
    /// Per role: whether any rank puts into, or gets from, a peer's copy of it. Only such roles
    /// need to live in the heap; private memory bound to any other role is used in place.
    pub(crate) remote: Vec<bool>,
    /// The plan has scratch buffers (they follow the roles).
    pub(crate) scratch: bool,
}

impl RoleAccess {
    pub(crate) fn of(plan: &Plan) -> RoleAccess {
        let roles = plan
            .buffers
            .iter()
            .take_while(|b| b.role != BufferRole::Scratch)
            .count();
        let mut remote = plan.remote_buffers();
        remote.truncate(roles);
        RoleAccess {
            roles,
            remote,
            scratch: plan.buffers.len() > roles,
        }
    }
}

/// A loaded plan's area and this launch's layout of it; the vectors are kept between launches
/// so a repeated launch allocates nothing.
#[derive(Debug)]
pub(crate) struct Staging {
    /// Scratch key prefix of the area (its capacity completes it).
    area_key: String,
    /// Symmetric offset and capacity of the area.
    area: Option<(u64, u64)>,
    /// Per buffer: its offset in the area (unused for buffers not in it).
    area_off: Vec<u64>,
    /// Per buffer: bound to private memory that is used in place.
    in_place: Vec<bool>,
    /// Per launch parity, per buffer: its symmetric offset (heap binding or area slot;
    /// [`NOT_ON_HEAP`] for a role used in place). The two differ only in the scratch buffers
    /// of a twinned layout.
    base: [Vec<u64>; 2],
    /// This launch's parity in `base` (0 unless the layout is twinned).
    parity: usize,
    /// Per role: address and length of private memory used in place.
    private: Vec<Option<(usize, u64)>>,
    /// The roles used in place from private memory; the roles copied in before the steps and
    /// out after them (from the layout: a launch on symmetric memory copies nothing and looks
    /// at no binding).
    direct: Vec<usize>,
    copy_in: Vec<usize>,
    copy_out: Vec<usize>,
    /// This launch's layout keeps scratch twice ([`TWIN_MAX`]); the same on every rank, since
    /// the layout is.
    twinned: bool,
    /// What the layout above was computed from, when it is complete: a launch with the same
    /// inputs (a repeated launch) keeps it and only copies.
    laid_out: Option<LayoutInputs>,
    /// Layouts computed so far (the tests see a repeated launch keep its layout).
    layouts: u64,
}

/// The inputs of a layout besides the plan: the resolution (its serial fixes every buffer's
/// extent), the dtypes, the group's binding of each role and where this rank's bindings are.
/// Laying the area out again per launch was ~150 instructions of a launch's ~1 700 at 8 B
/// (callgrind, `scripts/launch_instructions.sh`), comparing these a few dozen.
#[derive(Debug)]
struct LayoutInputs {
    resolution: u64,
    types: ElemTypes,
    bound: Vec<u64>,
    /// Per binding: its heap offset, or a marker for private memory ([`binding_word`]).
    bindings: Vec<u64>,
}

impl LayoutInputs {
    fn of(res: &Resolved, types: ElemTypes, bound: &[u64], buffers: &[Binding<'_>]) -> Self {
        LayoutInputs {
            resolution: res.serial,
            types,
            bound: bound.to_vec(),
            bindings: buffers.iter().map(binding_word).collect(),
        }
    }

    /// Whether a launch with these inputs has this layout. Element loops rather than slice
    /// compares: a `memcmp` call costs more than the few words compared.
    #[inline]
    fn fit(
        &self,
        res: &Resolved,
        types: ElemTypes,
        bound: &[u64],
        buffers: &[Binding<'_>],
    ) -> bool {
        self.resolution == res.serial
            && self.types == types
            && self.bound.len() == bound.len()
            && self.bound.iter().zip(bound).all(|(a, b)| a == b)
            && self.bindings.len() == buffers.len()
            && self
                .bindings
                .iter()
                .zip(buffers)
                .all(|(w, b)| *w == binding_word(b))
    }
}

/// A binding's heap offset, or [`NOT_ON_HEAP`] for writable private memory and the word
/// below it for read-only private memory (no heap offset comes near either).
#[inline]
fn binding_word(b: &Binding<'_>) -> u64 {
    match b {
        Binding::Heap { offset, .. } => *offset,
        Binding::Host(_) => NOT_ON_HEAP,
        Binding::HostRead(_) => NOT_ON_HEAP - 1,
    }
}

impl Staging {
    /// The staging of the plan loaded under `key`; its area is allocated by the first launch.
    pub(crate) fn new(key: &str) -> Staging {
        Staging {
            area_key: format!("plan/{key}/area"),
            area: None,
            area_off: Vec::new(),
            in_place: Vec::new(),
            base: [Vec::new(), Vec::new()],
            parity: 0,
            private: Vec::new(),
            direct: Vec::new(),
            copy_in: Vec::new(),
            copy_out: Vec::new(),
            twinned: false,
            laid_out: None,
            layouts: 0,
        }
    }

    /// How many times [`Staging::stage_in`] laid the area out (not counting launches that kept
    /// the layout of the one before).
    pub(crate) fn layouts(&self) -> u64 {
        self.layouts
    }

    /// Whether the last [`Staging::stage_in`] laid scratch out twice, by launch parity.
    #[inline]
    pub(crate) fn twinned(&self) -> bool {
        self.twinned
    }

    /// Lay the area out for this launch (or keep the last layout when this launch has the same
    /// resolution, dtypes and bindings), grow the area if needed and `may_grow`, and copy the
    /// staged inputs in; the bindings were checked before ([`binding::check`]). The layout
    /// follows the group's binding of each role (`bound`, pattern words), not this rank's
    /// alone: a role empty here but symmetric on the other ranks takes no slot here either and
    /// is addressed at their heap offset, so every rank asks for the same area, lays it out
    /// alike and finds its peers' copies.
    ///
    /// Returns `false`, having copied nothing, when the area would have to grow and
    /// `!may_grow`: a launch that stages before the agreement ([`super::agreement`]) must not
    /// take scratch its peers may not take (a refused launch would leave the registries apart),
    /// so it stages after the agreement instead.
    ///
    /// A small layout keeps its scratch buffers twice ([`TWIN_MAX`]): launch `epoch` uses the
    /// copy of its parity.
    #[allow(clippy::too_many_arguments)] // the launch's parts the layout depends on
    #[inline]
    pub(crate) fn stage_in<F: Fabric>(
        &mut self,
        fabric: &F,
        plan: &Plan,
        access: &RoleAccess,
        res: &Resolved,
        types: ElemTypes,
        bound: &[u64],
        buffers: &mut [Binding<'_>],
        may_grow: bool,
        epoch: u64,
    ) -> Result<bool, ExecError> {
        let known = self
            .laid_out
            .as_ref()
            .is_some_and(|l| l.fit(res, types, bound, buffers));
        if !known {
            self.laid_out = None;
            if !self.lay_out(fabric, plan, access, res, types, bound, buffers, may_grow)? {
                return Ok(false);
            }
            self.laid_out = Some(LayoutInputs::of(res, types, bound, buffers));
            self.layouts += 1;
        }
        self.parity = usize::from(self.twinned && epoch % 2 == 1);
        // Addresses of the roles used in place from private memory, with their byte lengths;
        // the plan only reads `HostRead` memory (checked above).
        for &i in &self.direct {
            self.private[i] = match &mut buffers[i] {
                Binding::Host(s) => Some((s.as_mut_ptr() as usize, s.len() as u64)),
                Binding::HostRead(s) => Some((s.as_ptr() as usize, s.len() as u64)),
                Binding::Heap { .. } => None,
            };
        }
        let me = fabric.rank();
        let base = &self.base[self.parity];
        for &i in &self.copy_in {
            let src: &[u8] = match &buffers[i] {
                Binding::Host(s) => s,
                Binding::HostRead(s) => s,
                Binding::Heap { .. } => continue,
            };
            if src.is_empty() {
                continue;
            }
            let dst = fabric.heap_ptr(me, base[i], src.len() as u64)?;
            // SAFETY: `dst` is a checked heap range of src.len() bytes, disjoint from `src`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        }
        Ok(true)
    }

    /// The layout part of [`Self::stage_in`]: which roles are used in place, each buffer's slot
    /// in the area (grown if needed and `may_grow`; `false` when it would have to grow and may
    /// not), and each buffer's offset for both launch parities. Out of line: a repeated launch
    /// keeps its layout.
    #[allow(clippy::too_many_arguments)] // the layout's inputs
    #[inline(never)]
    fn lay_out<F: Fabric>(
        &mut self,
        fabric: &F,
        plan: &Plan,
        access: &RoleAccess,
        res: &Resolved,
        types: ElemTypes,
        bound: &[u64],
        buffers: &[Binding<'_>],
        may_grow: bool,
    ) -> Result<bool, ExecError> {
        // The group's heap offset of a role symmetric on the ranks where it is not empty.
        let group_heap = |i: usize| {
            bound
                .get(i)
                .copied()
                .filter(|w| *w != binding::STAGED && *w != binding::EMPTY)
        };
        let heap_bound = |i: usize| {
            group_heap(i).is_some() || matches!(buffers.get(i), Some(Binding::Heap { .. }))
        };
        // Private memory bound to a role no peer touches is worked on in place (no staging).
        self.in_place.clear();
        self.in_place.extend(
            (0..plan.buffers.len())
                .map(|i| !heap_bound(i) && i < access.roles && !access.remote[i]),
        );
        self.direct.clear();
        self.copy_in.clear();
        self.copy_out.clear();
        self.private.clear();
        for (i, b) in buffers.iter().enumerate() {
            self.private.push(None);
            let role = plan.buffers[i].role;
            match b {
                _ if self.in_place[i] => self.direct.push(i),
                Binding::Heap { .. } => {}
                _ => {
                    if role != BufferRole::Output {
                        self.copy_in.push(i);
                    }
                    if role != BufferRole::Input && matches!(b, Binding::Host(_)) {
                        self.copy_out.push(i);
                    }
                }
            }
        }
        // Staged roles and scratch buffers, each sized for the largest rank; heap-bound and
        // in-place roles need no slot.
        self.area_off.clear();
        let mut need = 0u64;
        for (i, b) in plan.buffers.iter().enumerate() {
            self.area_off.push(need);
            if heap_bound(i) || self.in_place[i] {
                continue;
            }
            need = res.max_len[i]
                .checked_mul(types.of(b.elem).size() as u64)
                .and_then(|bytes| need.checked_add(bytes.next_multiple_of(AREA_ALIGN)))
                .ok_or(PlanError::SizeOverflow)?;
        }
        let twinned = access.scratch && need <= TWIN_MAX;
        let copy = need;
        if twinned {
            need *= 2;
        }
        let area = match self.area {
            Some((off, cap)) if cap >= need => off,
            _ if !may_grow => return Ok(false),
            old => {
                // Grow geometrically so a sweep over sizes allocates O(largest) in total.
                let cap = need.max(AREA_ALIGN).max(old.map_or(0, |(_, c)| 2 * c));
                let off = fabric.scratch(&format!("{}/{cap}", self.area_key), cap)?;
                self.area = Some((off, cap));
                off
            }
        };
        self.twinned = twinned;
        for (parity, base) in self.base.iter_mut().enumerate() {
            let second = if twinned && parity == 1 { copy } else { 0 };
            base.clear();
            for (i, b) in plan.buffers.iter().enumerate() {
                base.push(match (buffers.get(i), group_heap(i)) {
                    (Some(Binding::Heap { offset, .. }), _) => *offset,
                    (_, Some(offset)) => offset,
                    _ if self.in_place[i] => NOT_ON_HEAP,
                    _ if b.role == BufferRole::Scratch => area + self.area_off[i] + second,
                    _ => area + self.area_off[i],
                });
            }
        }
        Ok(true)
    }

    /// Where every buffer is this launch (valid after [`Staging::stage_in`]).
    #[inline]
    pub(crate) fn memory<'a, F: Fabric>(
        &'a self,
        fabric: &'a F,
        plan: &'a Plan,
        types: ElemTypes,
    ) -> LaunchMemory<'a, F> {
        LaunchMemory {
            fabric,
            plan,
            types,
            me: fabric.rank(),
            base: &self.base[self.parity],
            private: &self.private,
        }
    }

    /// Copy the staged outputs back into the caller's memory.
    #[inline]
    pub(crate) fn stage_out<F: Fabric>(
        &self,
        fabric: &F,
        buffers: &mut [Binding<'_>],
    ) -> Result<(), ExecError> {
        let me = fabric.rank();
        for &i in &self.copy_out {
            if let Some(Binding::Host(dst)) = buffers.get_mut(i) {
                if dst.is_empty() {
                    continue;
                }
                let src = fabric.heap_ptr(me, self.base[self.parity][i], dst.len() as u64)?;
                // SAFETY: checked heap range, disjoint from the private slice.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
            }
        }
        Ok(())
    }
}

/// [`LaunchMemory::heap_offsets`] of a buffer that is not in the heap this launch (above every
/// heap offset, so a range check against a heap rejects it).
pub const NOT_ON_HEAP: u64 = u64::MAX;

/// The address map of one launch: where each resolved region is, on this rank or a peer.
pub struct LaunchMemory<'a, F: Fabric> {
    fabric: &'a F,
    plan: &'a Plan,
    types: ElemTypes,
    me: Rank,
    base: &'a [u64],
    private: &'a [Option<(usize, u64)>],
}

impl<F: Fabric> LaunchMemory<'_, F> {
    /// The rank whose launch this is.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Per buffer: its symmetric byte offset this launch, or [`NOT_ON_HEAP`] for a role used in
    /// place from private memory. What [`LaunchMemory::ptr`] adds a region's bytes to before
    /// asking the fabric.
    #[inline]
    pub fn heap_offsets(&self) -> &[u64] {
        self.base
    }

    /// Address and element type of `n` elements of region `r` in `rank`'s memory,
    /// bounds-checked (a role used in place from private memory exists on this rank only).
    #[inline]
    pub fn ptr(&self, rank: Rank, r: &RReg, n: u64) -> Result<(*mut u8, DType), ExecError> {
        let dt = self.types.of(self.plan.buffers[r.buf as usize].elem);
        let sz = dt.size() as u64;
        if let Some(Some((p, len))) = self.private.get(r.buf as usize) {
            let (at, bytes) = (r.elem * sz, n * sz);
            if rank != self.me || at.checked_add(bytes).is_none_or(|end| end > *len) {
                return Err(PlanError::Inconsistent(format!(
                    "region of `{}` on rank {rank} outside this rank's private binding",
                    self.plan.buffers[r.buf as usize].name
                ))
                .into());
            }
            // In bounds of the caller's binding (checked just above), live for the launch.
            return Ok(((*p + at as usize) as *mut u8, dt));
        }
        let p = self
            .fabric
            .heap_ptr(rank, self.base[r.buf as usize] + r.elem * sz, n * sz)?;
        Ok((p, dt))
    }
}
