//! The per-process runtime: joins the job (bootstrap, segment exchange, mapping) into a
//! `ProcessState` and keeps the cache of the groups built on it.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::allocator::HeapStats;
use crate::bootstrap::{self, PeerInfo};
use crate::config::RuntimeConfig;
use crate::error::RuntimeError;
use crate::group::Group;
use crate::heap::{read_identity, Heap, HeapAlloc};
use crate::monitor::Monitor;
use crate::process::{PeerSeg, ProcessState};
use crate::shm::{self, Mapping};

/// Cache key of a group: its members in order and whether it is hierarchical.
type GroupKey = (Vec<usize>, bool);

struct DirGuard(PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One rank's handle on the symmetric-memory runtime.
///
/// ```no_run
/// use symsched_runtime::{Runtime, SignalMode, WaitContext};
/// use symsched_plan::Cmp;
///
/// // Started by `symsched launch -n 2 -- ./prog` or torchrun.
/// let rt = Runtime::init_from_env()?;
/// let buf = rt.malloc(4096)?; // same offset on every rank
/// let world = rt.world()?;
/// let slots = world.signal_slots("example", 1)?;
/// let peer = (world.rank() + 1) % world.size();
/// world.put_bytes_with_signal(peer, buf.offset, b"hello", slots.slot(0), SignalMode::Add, 1)?;
/// world.wait(slots.slot(0), Cmp::Ge, 1, &WaitContext::new("example", "recv", "ready"))?;
/// let mut got = [0u8; 5];
/// world.get_bytes(world.rank(), buf.offset, &mut got)?;
/// assert_eq!(&got, b"hello");
/// rt.finalize()?;
/// # Ok::<(), symsched_runtime::RuntimeError>(())
/// ```
pub struct Runtime {
    pub(crate) shared: Arc<ProcessState>,
    groups: Mutex<HashMap<GroupKey, Arc<Group>>>,
    create: Mutex<()>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("rank", &self.rank())
            .field("world_size", &self.world_size())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Joins the job described by the torchrun environment (see [`RuntimeConfig::from_env`]),
    /// sets up logging (see [`crate::log`]) and checks availability.
    pub fn init_from_env() -> Result<Runtime, RuntimeError> {
        let cfg = RuntimeConfig::from_env()?;
        crate::log::init(cfg.rank);
        Runtime::init(cfg)
    }

    /// Joins the job described by `cfg`: creates this rank's heap segment, exchanges segments
    /// with the other local ranks and maps them. Blocks until every local rank has joined (or
    /// the rendezvous timeout passes).
    pub fn init(cfg: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let layout = crate::avail::check(cfg.heap_size, cfg.scratch_size, cfg.local_world_size)?;
        let dir_guard = if cfg.rendezvous_key.is_some() {
            None
        } else if cfg.owns_rendezvous_dir && cfg.local_rank == 0 {
            bootstrap::ensure_private_dir(&cfg.rendezvous_dir)?;
            Some(DirGuard(cfg.rendezvous_dir.clone()))
        } else {
            if cfg.local_world_size > 1 || cfg.rendezvous_dir.exists() {
                wait_for_dir(&cfg)?;
            }
            None
        };
        let fd = shm::create_segment(cfg.rank, layout.segment_bytes)?;
        let len = usize::try_from(layout.segment_bytes)
            .map_err(|_| RuntimeError::Unavailable("heap size exceeds the address space".into()))?;
        let own = Arc::new(Mapping::map(fd.as_raw_fd(), len)?);
        let heap = Heap::new(cfg.rank, own.clone(), layout)?;
        let me = PeerInfo {
            rank: cfg.rank,
            pid: std::process::id() as i32,
            heap_size: layout.segment_bytes,
            node_id: cfg.node_id.clone(),
        };
        let ex = bootstrap::exchange_at(
            &cfg.rendezvous_endpoint(),
            &me,
            fd.as_raw_fd(),
            cfg.local_rank,
            cfg.local_world_size,
            cfg.first_local_rank(),
            cfg.rendezvous_timeout,
        )?;
        // Everything after bootstrap goes through the segments, so a directory this rank
        // created is removed right away: nothing is left behind even if a rank is killed later.
        drop(dir_guard);
        let mut peers: Vec<Option<PeerSeg>> = (0..cfg.world_size).map(|_| None).collect();
        for (info, pfd) in ex.peers.iter().zip(&ex.fds) {
            let map = if info.rank == cfg.rank {
                own.clone()
            } else {
                let size = shm::segment_size(pfd.as_raw_fd())?;
                if size != layout.segment_bytes {
                    return Err(RuntimeError::Rendezvous {
                        rank: cfg.rank,
                        reason: format!(
                            "segment of rank {} has {size} bytes, expected {}",
                            info.rank, layout.segment_bytes
                        ),
                    });
                }
                let m = Arc::new(Mapping::map(pfd.as_raw_fd(), len)?);
                let (ok, r, pid) = read_identity(m.base());
                if !ok || r as usize != info.rank || pid as i32 != info.pid {
                    return Err(RuntimeError::Rendezvous {
                        rank: cfg.rank,
                        reason: format!("segment received for rank {} has a bad header", info.rank),
                    });
                }
                m
            };
            peers[info.rank] = Some(PeerSeg {
                map,
                pid: info.pid,
                node_id: info.node_id.clone(),
            });
        }
        let monitor = Monitor::new(ex.peers.iter().map(|p| (p.rank, p.pid)));
        tracing::info!(
            rank = cfg.rank,
            world = cfg.world_size,
            local_world = cfg.local_world_size,
            heap = cfg.heap_size,
            node = %cfg.node_id,
            "symmetric heap ready"
        );
        Ok(Runtime {
            shared: Arc::new(ProcessState::new(cfg, heap, peers, monitor, ex.nonce, fd)),
            groups: Mutex::new(HashMap::new()),
            create: Mutex::new(()),
        })
    }

    /// Global rank of this process.
    pub fn rank(&self) -> usize {
        self.shared.cfg.rank
    }

    /// Number of ranks in the job.
    pub fn world_size(&self) -> usize {
        self.shared.cfg.world_size
    }

    /// Rank among the processes of this node.
    pub fn local_rank(&self) -> usize {
        self.shared.cfg.local_rank
    }

    /// Number of processes on this node.
    pub fn local_world_size(&self) -> usize {
        self.shared.cfg.local_world_size
    }

    /// The configuration this runtime was started with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.cfg
    }

    /// This rank's heap (allocator, stats).
    pub fn heap(&self) -> &Heap {
        &self.shared.heap
    }

    /// Symmetric `malloc` (see [`Heap::malloc`]): collective in the sense that every rank must
    /// make the same calls in the same order.
    pub fn malloc(&self, size: usize) -> Result<HeapAlloc, RuntimeError> {
        self.shared.heap.malloc(size)
    }

    /// Symmetric allocation with an alignment (see [`Heap::empty`]).
    pub fn empty(&self, size: usize, align: usize) -> Result<HeapAlloc, RuntimeError> {
        self.shared.heap.empty(size, align)
    }

    /// Frees a symmetric allocation.
    pub fn free(&self, offset: usize) -> Result<(), RuntimeError> {
        self.shared.heap.free(offset)
    }

    /// Collective symmetric allocation over the world (`symm.empty`): allocates, then a world
    /// barrier compares every rank's allocator state, so a rank that asked for a different size
    /// (or made a different call before) fails with [`RuntimeError::AllocMismatch`] on **every**
    /// rank, naming the diverging calls, before anything uses the block; the allocator is then
    /// put back as it was, so the heap stays usable. A rank whose own request fails (heap
    /// exhausted, bad alignment) still takes part: when every rank failed alike each returns its
    /// error, otherwise every rank fails with the mismatch. Costs one world barrier.
    pub fn empty_collective(&self, size: usize, align: usize) -> Result<HeapAlloc, RuntimeError> {
        let world = self.world()?;
        self.shared
            .heap
            .agreed(|h| h.empty(size, align), || world.barrier())
    }

    /// Collective free over the world (`symm.free`): frees, then a world barrier, so no rank
    /// returns — and so can reuse the block in a later allocation — before every rank freed it
    /// (stopped using it); a rank that freed another block (or none) fails the call on every
    /// rank and the allocator is put back.
    pub fn free_collective(&self, offset: usize) -> Result<(), RuntimeError> {
        let world = self.world()?;
        self.shared
            .heap
            .agreed(|h| h.free(offset), || world.barrier())
    }

    /// Allocated / peak / free bytes of the symmetric heap.
    pub fn stats(&self) -> HeapStats {
        self.shared.heap.stats()
    }

    /// Pid of a local peer (global rank), if mapped.
    pub fn peer_pid(&self, rank: usize) -> Option<i32> {
        self.shared.peers.get(rank)?.as_ref().map(|p| p.pid)
    }

    /// Node identity of this rank.
    pub fn node_id(&self) -> &str {
        &self.shared.cfg.node_id
    }

    /// The group of every rank (hierarchical when the job spans several nodes).
    pub fn world(&self) -> Result<Arc<Group>, RuntimeError> {
        let all: Vec<usize> = (0..self.world_size()).collect();
        let multi = self.shared.cfg.local_world_size < self.world_size()
            || all
                .iter()
                .any(|&r| self.shared.node_of(r) != Some(self.node_id()));
        self.group(&all, multi)
    }

    /// The group of `members` (global ranks, in group-local order), created on first use and
    /// cached afterwards. Collective over the members: every member must create its groups in
    /// the same order. Creation checks that members agree on their heap allocations, and refuses
    /// a group spanning nodes unless `hierarchical` (then only same-node peers are reachable).
    pub fn group(&self, members: &[usize], hierarchical: bool) -> Result<Arc<Group>, RuntimeError> {
        let key = (members.to_vec(), hierarchical);
        if let Some(g) = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(g.clone());
        }
        let _serial = self.create.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(g.clone());
        }
        let g = Arc::new(Group::create(self.shared.clone(), members, hierarchical)?);
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, g.clone());
        Ok(g)
    }

    /// Ends this rank's participation: a barrier over the world (so no rank tears down the
    /// rendezvous directory while others still use it), then releases everything.
    pub fn finalize(self) -> Result<(), RuntimeError> {
        let r = self.world().and_then(|w| w.barrier());
        drop(self);
        r
    }
}

fn wait_for_dir(cfg: &RuntimeConfig) -> Result<(), RuntimeError> {
    let deadline = std::time::Instant::now() + cfg.rendezvous_timeout;
    loop {
        if cfg.rendezvous_dir.exists() {
            return bootstrap::check_private_dir(&cfg.rendezvous_dir);
        }
        if std::time::Instant::now() >= deadline {
            return Err(RuntimeError::RendezvousTimeout {
                rank: cfg.rank,
                step: "directory (waiting for local rank 0 to create it)".into(),
                dir: cfg.rendezvous_dir.display().to_string(),
                timeout_ms: cfg.rendezvous_timeout.as_millis() as u64,
                missing: crate::error::RankList(vec![cfg.first_local_rank()]),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
