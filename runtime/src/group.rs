//! Groups: an ordered list of global ranks with its own signal pad, signal-slot registry,
//! scratch buffers and per-key caches (the executor caches loaded plans here).

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{RankList, RuntimeError};
use crate::heap::{describe_divergence, AllocState, LINE, PAD_COUNT, PAD_LINES};
use crate::mailbox::{self, GroupRecord};
use crate::process::ProcessState;
use crate::shm::Mapping;
use crate::signal::SignalLine;

/// Pad line of the barrier counter.
pub(crate) const BARRIER_LINE: usize = 0;
/// Pad lines of the barrier agreement records (by epoch parity).
pub(crate) const RECORD_LINE: usize = 1;
/// First pad line handed out by [`Group::signal_slots`].
pub const SLOT_BASE: usize = 16;
/// Signal slots available to one group.
pub const SLOT_CAPACITY: usize = PAD_LINES - SLOT_BASE;

/// A range of signal slots reserved for one key in one group; the same on every member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotRange {
    /// First slot index (pass slot indices to [`Group::signal`] / [`Group::wait`]).
    pub start: usize,
    /// Number of slots.
    pub count: usize,
}

impl SlotRange {
    /// Slot `i` of the range (`start + i`). Indices past `count` are caught when used only if
    /// they are past every slot the group registered, so callers should stay below `count`.
    pub fn slot(&self, i: usize) -> usize {
        self.start + i
    }
}

#[derive(Debug, Default)]
struct Slots {
    by_key: HashMap<String, SlotRange>,
    next: usize,
    hash: u64,
}

#[derive(Debug, Default)]
struct ScratchState {
    by_key: HashMap<String, (usize, usize)>,
    next: usize,
}

/// A group of ranks. Obtain one with [`crate::Runtime::group`]; ranks passed to its methods
/// are group-local (`0..size()`).
pub struct Group {
    pub(crate) shared: Arc<ProcessState>,
    members: Vec<usize>,
    me: usize,
    hierarchical: bool,
    name: String,
    gid: u64,
    pad: usize,
    arena: (usize, usize),
    pub(crate) reach: Vec<Option<Arc<Mapping>>>,
    /// Global ranks of the reachable members other than this rank (watched while waiting).
    watch: Vec<usize>,
    nodes: Vec<Option<String>>,
    slots: Mutex<Slots>,
    slots_used: AtomicUsize,
    cache: Mutex<HashMap<String, Arc<dyn Any + Send + Sync>>>,
    scratch: Mutex<ScratchState>,
    barrier_epoch: Mutex<u64>,
    timeout: Duration,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("members", &self.members)
            .field("rank", &self.me)
            .field("hierarchical", &self.hierarchical)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn fnv(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Group {
    pub(crate) fn create(
        shared: Arc<ProcessState>,
        members: &[usize],
        hierarchical: bool,
    ) -> Result<Group, RuntimeError> {
        let me_global = shared.cfg.rank;
        let world = shared.cfg.world_size;
        let list = || RankList(members.to_vec());
        if members.is_empty() {
            return Err(RuntimeError::InvalidGroup {
                members: list(),
                reason: "a group needs at least one rank".into(),
            });
        }
        for (i, &r) in members.iter().enumerate() {
            if r >= world {
                return Err(RuntimeError::RankOutsideWorld { rank: r, world });
            }
            if members[..i].contains(&r) {
                return Err(RuntimeError::InvalidGroup {
                    members: list(),
                    reason: format!("rank {r} is listed twice"),
                });
            }
        }
        let Some(me) = members.iter().position(|&r| r == me_global) else {
            return Err(RuntimeError::NotAMember {
                rank: me_global,
                members: list(),
            });
        };
        let my_node = shared.cfg.node_id.clone();
        let nodes: Vec<Option<String>> = members
            .iter()
            .map(|&r| shared.node_of(r).map(str::to_string))
            .collect();
        if !hierarchical && nodes.iter().any(|n| n.as_deref() != Some(my_node.as_str())) {
            let desc: Vec<String> = members
                .iter()
                .zip(&nodes)
                .map(|(r, n)| format!("rank {r} on {}", n.as_deref().unwrap_or("another node")))
                .collect();
            return Err(RuntimeError::CrossNode {
                members: list(),
                nodes: desc.join(", "),
            });
        }
        let mut key = Vec::new();
        key.extend_from_slice(&shared.nonce.to_le_bytes());
        for r in members {
            key.extend_from_slice(&(*r as u64).to_le_bytes());
        }
        key.push(hierarchical as u8);
        let gid = fnv(&key, 0);
        let name = if hierarchical {
            format!("{members:?}(hierarchical)")
        } else {
            format!("{members:?}")
        };
        let pad_idx = match Self::agree(&shared, members, gid, &name) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(rank = me_global, group = %name, error = %e, "group creation failed");
                return Err(e);
            }
        };
        let pad = shared.heap.pad_alloc_at(pad_idx)?;
        let (a0, a1) = shared.heap.layout().arena(pad_idx);
        let reach: Vec<Option<Arc<Mapping>>> = members
            .iter()
            .zip(&nodes)
            .map(|(&r, n)| {
                if n.as_deref() == Some(my_node.as_str()) {
                    shared.peers[r].as_ref().map(|p| p.map.clone())
                } else {
                    None
                }
            })
            .collect();
        let watch = (0..members.len())
            .filter(|&p| p != me && reach[p].is_some())
            .map(|p| members[p])
            .collect();
        tracing::debug!(rank = me_global, group = %name, pad, "group created");
        Ok(Group {
            timeout: shared.cfg.signal_timeout,
            shared,
            members: members.to_vec(),
            me,
            hierarchical,
            name,
            gid,
            pad,
            arena: (a0 as usize, a1 as usize),
            reach,
            watch,
            nodes,
            slots: Mutex::new(Slots::default()),
            slots_used: AtomicUsize::new(0),
            cache: Mutex::new(HashMap::new()),
            scratch: Mutex::new(ScratchState::default()),
            barrier_epoch: Mutex::new(0),
        })
    }

    /// Exchanges allocator state and signal-pad occupancy with the mapped members and picks
    /// the lowest pad index free on all of them (so pads and scratch arenas are symmetric).
    fn agree(
        shared: &ProcessState,
        members: &[usize],
        gid: u64,
        name: &str,
    ) -> Result<usize, RuntimeError> {
        let rank = shared.cfg.rank;
        let mine = shared.heap.alloc_state();
        let seq = shared.heap.next_group_seq();
        let rec = GroupRecord {
            ops: mine.ops,
            hash: mine.hash,
            used_pads: shared.heap.used_pads(),
        };
        // SAFETY: posting into this rank's own header.
        unsafe { mailbox::post(shared.heap.base(), seq, gid, rec)? };
        let mapped: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&r| r != rank && shared.peers[r].is_some())
            .collect();
        let bases: Vec<(usize, *mut u8)> = mapped
            .iter()
            .filter_map(|&r| shared.peers[r].as_ref().map(|p| (r, p.map.base())))
            .collect();
        let recs = mailbox::collect(
            &bases,
            gid,
            rank,
            &shared.monitor,
            shared.cfg.rendezvous_timeout,
            &format!("create group {name}"),
        )?;
        let mut used = rec.used_pads;
        for (&r, rec) in mapped.iter().zip(&recs) {
            used = used.union(&rec.used_pads);
            let theirs = AllocState {
                ops: rec.ops,
                hash: rec.hash,
            };
            if theirs != mine {
                let detail = match shared.peers[r].as_ref() {
                    Some(p) => {
                        describe_divergence(shared.heap.base(), p.map.base(), mine.ops, theirs.ops)
                    }
                    None => String::new(),
                };
                return Err(RuntimeError::AllocMismatch {
                    point: format!("creation of group {name}"),
                    rank,
                    peer: r,
                    ops: mine.ops,
                    hash: mine.hash,
                    peer_ops: theirs.ops,
                    peer_hash: theirs.hash,
                    detail,
                });
            }
        }
        let Some(idx) = used.first_free() else {
            return Err(RuntimeError::TooManyGroups(PAD_COUNT));
        };
        Ok(idx)
    }

    /// This rank's group-local rank.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Global ranks of the members, in group-local order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Global rank of group-local rank `local`.
    pub fn global_rank(&self, local: usize) -> Result<usize, RuntimeError> {
        self.members
            .get(local)
            .copied()
            .ok_or(RuntimeError::RankOutsideGroup {
                peer: local,
                size: self.members.len(),
            })
    }

    /// Group-local rank of global rank `global`, if a member.
    pub fn local_rank_of(&self, global: usize) -> Option<usize> {
        self.members.iter().position(|&r| r == global)
    }

    /// Whether this group was created as hierarchical (may span nodes).
    pub fn is_hierarchical(&self) -> bool {
        self.hierarchical
    }

    /// Whether group-local rank `peer` is reachable through shared memory (same node).
    pub fn is_reachable(&self, peer: usize) -> bool {
        self.reach.get(peer).is_some_and(Option::is_some)
    }

    /// Node identity of a member (`None` when on a node this rank never heard of).
    pub fn node_of(&self, peer: usize) -> Option<&str> {
        self.nodes.get(peer)?.as_deref()
    }

    /// Printable name (the member list).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A stable identifier of this group in this job.
    pub fn id(&self) -> u64 {
        self.gid
    }

    /// Bytes of every member's segment (every valid offset is below this).
    pub fn heap_len(&self) -> usize {
        self.shared.heap.size()
    }

    /// The signal-wait deadline used by [`Group::wait`].
    pub fn signal_timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn mapping(&self, peer: usize) -> Result<&Mapping, RuntimeError> {
        match self.reach.get(peer) {
            None => Err(RuntimeError::RankOutsideGroup {
                peer,
                size: self.members.len(),
            }),
            Some(None) => Err(RuntimeError::PeerUnreachable {
                peer,
                global: self.members[peer],
            }),
            Some(Some(m)) => Ok(m),
        }
    }

    /// The signal line `line` of `peer`'s pad for this group.
    pub(crate) fn pad_line(&self, peer: usize, line: usize) -> Result<SignalLine, RuntimeError> {
        let m = self.mapping(peer)?;
        debug_assert!(line < PAD_LINES);
        // SAFETY: the pad lies inside the peer's mapped segment and lines are 64-byte aligned.
        Ok(unsafe { SignalLine::new(m.base().add(self.pad + line * LINE)) })
    }

    /// The line of signal slot `slot` on `peer`, bounds-checked against registered slots.
    pub(crate) fn slot_line(&self, peer: usize, slot: usize) -> Result<SignalLine, RuntimeError> {
        let used = self.slots_used.load(Ordering::Acquire);
        if slot >= used {
            return Err(RuntimeError::SlotOutOfRange { slot, count: used });
        }
        self.pad_line(peer, SLOT_BASE + slot)
    }

    /// Reserves `count` signal slots for `key` (cached: asking again with a count not larger
    /// returns the same range; a larger count reserves a new range for the key). Every member
    /// must register the same keys and counts in the same order; barriers check it. Fresh slots
    /// read 0.
    ///
    /// ```no_run
    /// # fn f(g: &symsched_runtime::Group) -> Result<(), symsched_runtime::RuntimeError> {
    /// let r = g.signal_slots("ring_allreduce", 4)?;
    /// assert_eq!(g.signal_slots("ring_allreduce", 4)?, r);
    /// # Ok(()) }
    /// ```
    pub fn signal_slots(&self, key: &str, count: usize) -> Result<SlotRange, RuntimeError> {
        let mut s = lock(&self.slots);
        if let Some(r) = s.by_key.get(key) {
            if r.count >= count {
                return Ok(*r);
            }
        }
        let free = SLOT_CAPACITY - s.next;
        if count > free {
            return Err(RuntimeError::SignalPadExhausted {
                group: self.name.clone(),
                key: key.into(),
                requested: count,
                free,
            });
        }
        let r = SlotRange {
            start: s.next,
            count,
        };
        s.next += count;
        s.hash = fnv(key.as_bytes(), s.hash ^ (count as u64).rotate_left(17));
        drop(s);
        let mut s = lock(&self.slots);
        s.by_key.insert(key.into(), r);
        self.slots_used.store(s.next, Ordering::Release);
        Ok(r)
    }

    /// A per-group cached value for `key`, created by `init` on first use (e.g. a loaded plan).
    /// Asking for the same key with another type is a [`RuntimeError::KeyConflict`].
    pub fn cached<T: Any + Send + Sync>(
        &self,
        key: &str,
        init: impl FnOnce() -> Result<T, RuntimeError>,
    ) -> Result<Arc<T>, RuntimeError> {
        if let Some(v) = lock(&self.cache).get(key) {
            return v
                .clone()
                .downcast::<T>()
                .map_err(|_| RuntimeError::KeyConflict {
                    group: self.name.clone(),
                    key: key.into(),
                    first: "another type".into(),
                    now: std::any::type_name::<T>().into(),
                });
        }
        let v = Arc::new(init()?);
        let mut c = lock(&self.cache);
        let entry = c
            .entry(key.to_string())
            .or_insert_with(|| v.clone() as Arc<dyn Any + Send + Sync>);
        entry
            .clone()
            .downcast::<T>()
            .map_err(|_| RuntimeError::KeyConflict {
                group: self.name.clone(),
                key: key.into(),
                first: "another type".into(),
                now: std::any::type_name::<T>().into(),
            })
    }

    /// Symmetric scratch of at least `len` bytes for `key`: the same offset on every member,
    /// carved from this group's scratch arena (`SYMSCHED_SCRATCH_SIZE` bytes, default 256 MiB,
    /// virtual). Asking again with a length not larger returns the same offset; a larger one
    /// moves the key to a new range. No communication: every member must ask for the same keys
    /// and lengths in the same order (barriers check it).
    ///
    /// ```no_run
    /// # fn f(g: &symsched_runtime::Group) -> Result<(), symsched_runtime::RuntimeError> {
    /// let off = g.scratch("stage", 1 << 20)?;
    /// let p = g.local_ptr(off, 1 << 20)?;
    /// # Ok(()) }
    /// ```
    pub fn scratch(&self, key: &str, len: usize) -> Result<usize, RuntimeError> {
        let mut st = lock(&self.scratch);
        if let Some(&(off, l)) = st.by_key.get(key) {
            if l >= len {
                return Ok(off);
            }
        }
        let start = self.arena.0 + st.next;
        let size = len.max(1).next_multiple_of(256);
        let free = self.arena.1 - start;
        if size > free {
            return Err(RuntimeError::ScratchExhausted {
                group: self.name.clone(),
                key: key.into(),
                requested: len as u64,
                free: free as u64,
            });
        }
        st.next += size;
        st.by_key.insert(key.into(), (start, len));
        drop(st);
        let mut s = lock(&self.slots);
        s.hash = fnv(key.as_bytes(), s.hash ^ (len as u64).rotate_left(29) ^ 0x5c);
        Ok(start)
    }

    /// Current value of this rank's signal slot `slot` (acquire).
    pub fn read_signal(&self, slot: usize) -> Result<u64, RuntimeError> {
        Ok(self.slot_line(self.me, slot)?.load())
    }
}

impl Group {
    /// Byte offset of this group's signal pad in every member's heap segment.
    pub(crate) fn pad_offset(&self) -> usize {
        self.pad
    }

    /// The group's barrier epoch, held for the whole barrier so two threads of a rank cannot
    /// interleave their barriers.
    pub(crate) fn barrier_epoch(&self) -> MutexGuard<'_, u64> {
        lock(&self.barrier_epoch)
    }

    /// Hash of the signal-slot registrations so far (compared at barriers).
    pub(crate) fn slot_hash(&self) -> u64 {
        lock(&self.slots).hash
    }

    /// Global ranks of the reachable members other than this rank (watched while waiting).
    pub(crate) fn watched(&self) -> &[usize] {
        &self.watch
    }

    /// Signal slots registered on this rank (lines `SLOT_BASE..SLOT_BASE + n` of the pad).
    pub(crate) fn registered_slots(&self) -> usize {
        self.slots_used.load(Ordering::Acquire)
    }

    /// Forgets the barrier epoch, the cached per-key values and the slot and scratch
    /// registries (a group reset, see [`Group::reset_after_abort`]). The registries go too because ranks
    /// may have registered different keys before the failure (one failed before loading a
    /// plan its peers loaded): kept, they would differ for good. Every holder of a slot range
    /// or scratch offset registers again in the new generation — the executor at each plan's
    /// first launch after the reset, in the order of the collective calls, which is the same
    /// on every rank.
    pub(crate) fn reset_local_state(&self) {
        *lock(&self.barrier_epoch) = 0;
        lock(&self.cache).clear();
        *lock(&self.slots) = Slots::default();
        *lock(&self.scratch) = ScratchState::default();
        self.slots_used.store(0, Ordering::Release);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.shared.heap.pad_release(self.pad);
    }
}
