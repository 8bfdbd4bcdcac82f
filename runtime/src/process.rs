//! This process's attachment to the job, shared by the [`crate::Runtime`] and every
//! [`crate::Group`] built on it: the configuration it joined with, its heap, the mapped
//! segments of its local peers, their liveness monitor and the job's bootstrap nonce.
//!
//! It sits below both: the runtime creates it once at init, groups only read it, so data
//! flows runtime → group → process state and never back.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::config::RuntimeConfig;
use crate::heap::Heap;
use crate::monitor::Monitor;
use crate::shm::Mapping;

/// A mapped local peer (or this rank).
#[derive(Debug)]
pub(crate) struct PeerSeg {
    pub(crate) map: Arc<Mapping>,
    pub(crate) pid: i32,
    pub(crate) node_id: String,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct ProcessState {
    pub(crate) cfg: RuntimeConfig,
    pub(crate) heap: Heap,
    /// Indexed by global rank; `None` for ranks on other nodes.
    pub(crate) peers: Vec<Option<PeerSeg>>,
    pub(crate) monitor: Monitor,
    pub(crate) nonce: u64,
    /// This rank's heap segment, open for the life of the process state.
    _fd: OwnedFd,
}

impl ProcessState {
    pub(crate) fn new(
        cfg: RuntimeConfig,
        heap: Heap,
        peers: Vec<Option<PeerSeg>>,
        monitor: Monitor,
        nonce: u64,
        fd: OwnedFd,
    ) -> ProcessState {
        ProcessState {
            cfg,
            heap,
            peers,
            monitor,
            nonce,
            _fd: fd,
        }
    }

    /// Node identity of a global rank (`None`: a rank of another node whose identity this
    /// node never learned).
    pub(crate) fn node_of(&self, rank: usize) -> Option<&str> {
        self.peers.get(rank)?.as_ref().map(|p| p.node_id.as_str())
    }
}
