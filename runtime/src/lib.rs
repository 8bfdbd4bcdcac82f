//! symsched host runtime: ranks are processes of one node sharing a symmetric heap.
//!
//! Module map (one concept each): [`shm`] heap segments (memfd), [`bootstrap`] segment exchange
//! over a Unix socket, [`launcher`] `symsched launch`, [`config`] environment, [`heap`] +
//! [`allocator`] the symmetric allocator, [`signal`] + [`wait`] signal lines (with per-sender
//! tallies) and waiting, [`group_wait`] a group's waits and their diagnostics, [`group_barrier`] its barrier, [`abort`]
//! failure propagation within a group, [`monitor`] peer liveness, `process` this process's
//! attachment to the job (below both [`runtime`] and [`group`]), [`group`] + [`primitives`]
//! groups and one-sided operations, [`log`] diagnostics, [`avail`] availability and version
//! checks, [`exec`] the executor of compiled plans.
//!
//! Entry points: [`Runtime::init_from_env`], [`Runtime::group`], the [`Group`] methods
//! (including [`Group::abort`], [`Group::check_usable`], [`Group::reset_after_abort`]).
//!
//! Environment: every knob is read once, validated and documented in one table by [`config`]
//! (the registry; values accepted, defaults, what is refused), and passed down as values
//! ([`RuntimeConfig`], [`config::ExecOptions`]).

pub mod abort;
pub mod allocator;
pub mod avail;
pub mod bootstrap;
pub mod config;
pub mod error;
pub mod exec;
pub mod group;
pub mod group_barrier;
pub mod group_wait;
pub mod heap;
pub mod launcher;
pub mod log;
pub mod mailbox;
pub mod monitor;
pub mod primitives;
mod process;
pub mod runtime;
pub mod shm;
pub mod signal;
pub mod wait;

pub use abort::AbortInfo;
pub use allocator::HeapStats;
pub use avail::{check_plan_version, is_available};
pub use config::RuntimeConfig;
pub use error::{
    GroupAbortedError, PeerDiedError, RankList, RuntimeError, SignalTimeoutError, WaitContext,
};
pub use group::{Group, SlotRange};
pub use heap::{Heap, HeapAlloc};
pub use runtime::Runtime;
pub use signal::SignalMode;
pub use symsched_plan::Cmp;
pub mod capi_hook;
