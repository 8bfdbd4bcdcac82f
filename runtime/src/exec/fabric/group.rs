//! The multi-process fabric: the executor on top of the runtime core's [`Group`] (ranks are
//! processes sharing memfd heap segments).
//!
//! Range and rank errors are mapped to the executor's own variants so callers see the same typed
//! errors on both fabrics; everything else (signal timeouts naming the silent peers, dead peers,
//! exhausted pads) is passed through as [`ExecError::Core`].

use super::{Fabric, HeapSpan, WaitContext as ExecWaitContext};
use crate::config::ExecOptions;
use crate::error::{RuntimeError, WaitContext};
use crate::exec::cancel::LaunchCancel;
use crate::exec::error::ExecError;
use crate::group::Group;
use std::sync::Arc;
use std::time::{Duration, Instant};
use symsched_plan::{Cmp, SignalMode};

/// One rank's [`Fabric`] over a runtime [`Group`].
#[derive(Clone)]
pub struct GroupFabric {
    group: Arc<Group>,
    spin: Duration,
}

/// How long to poll the signal line before handing a wait to the runtime core (which spins
/// briefly, yields, then sleeps on a futex whose wake-up costs tens of microseconds). A peer's
/// signal usually lands within microseconds, so polling first is far cheaper than a futex round
/// trip. After [`PURE_SPIN`] the poll loop yields between polls: on a loaded machine the peer may
/// be waiting for this very core, and yielding hands it over instead of burning the time slice.
/// When ranks outnumber cores, polling only steals the peer's time slice: hand over at once.
const SPIN_DEDICATED: Duration = Duration::from_micros(200);
const SPIN_OVERSUBSCRIBED: Duration = Duration::ZERO;
/// Pure polling before the loop starts yielding.
const PURE_SPIN: Duration = Duration::from_micros(10);

impl GroupFabric {
    pub fn new(group: Arc<Group>) -> GroupFabric {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let spin = if group.size() <= cores {
            SPIN_DEDICATED
        } else {
            SPIN_OVERSUBSCRIBED
        };
        GroupFabric { group, spin }
    }

    pub fn group(&self) -> &Arc<Group> {
        &self.group
    }
}

fn map(e: RuntimeError) -> ExecError {
    match e {
        RuntimeError::RankOutsideGroup { peer, size } => ExecError::RankOutsideGroup {
            peer: peer as u32,
            size: size as u32,
        },
        RuntimeError::OffsetPastHeap {
            offset,
            len,
            heap_len,
        } => ExecError::OffsetPastHeap {
            offset,
            len,
            heap_len,
        },
        e => ExecError::Core(Box::new(e)),
    }
}

fn usize_of(v: u64) -> Result<usize, ExecError> {
    usize::try_from(v).map_err(|_| ExecError::OffsetPastHeap {
        offset: v,
        len: 0,
        heap_len: usize::MAX as u64,
    })
}

impl Fabric for GroupFabric {
    fn rank(&self) -> u32 {
        self.group.rank() as u32
    }

    fn size(&self) -> u32 {
        self.group.size() as u32
    }

    fn label(&self) -> &str {
        self.group.name()
    }

    fn exec_options(&self) -> &ExecOptions {
        &self.group.shared.cfg.exec
    }

    fn heap_ptr(&self, peer: u32, offset: u64, len: u64) -> Result<*mut u8, ExecError> {
        let (o, l) = (usize_of(offset)?, usize_of(len)?);
        if peer as usize == self.group.rank() {
            self.group.local_ptr(o, l).map_err(map)
        } else {
            self.group.peer_ptr(peer as usize, o, l).map_err(map)
        }
    }

    fn heap_span(&self, peer: u32) -> Option<HeapSpan> {
        let (base, lo, hi) = self.group.heap_span(peer as usize)?;
        Some(HeapSpan {
            base,
            lo: lo as u64,
            hi: hi as u64,
        })
    }

    fn scratch(&self, key: &str, bytes: u64) -> Result<u64, ExecError> {
        Ok(self.group.scratch(key, usize_of(bytes)?).map_err(map)? as u64)
    }

    fn signal_slots(&self, key: &str, count: u32) -> Result<u32, ExecError> {
        Ok(self
            .group
            .signal_slots(key, count as usize)
            .map_err(map)?
            .start as u32)
    }

    fn signal(&self, peer: u32, slot: u32, mode: SignalMode, value: u64) -> Result<(), ExecError> {
        self.group
            .signal(peer as usize, slot as usize, mode, value)
            .map_err(map)
    }

    fn wait(
        &self,
        slot: u32,
        cmp: Cmp,
        target: u64,
        ctx: &ExecWaitContext,
    ) -> Result<u64, ExecError> {
        // Most waits are already satisfied (credits, late waiters): check before building the
        // core's owned context, so the fast path allocates nothing.
        let v = self.group.read_signal(slot as usize).map_err(map)?;
        if cmp.holds(v, target) {
            return Ok(v);
        }
        if !self.spin.is_zero() {
            let start = Instant::now();
            loop {
                for _ in 0..32 {
                    std::hint::spin_loop();
                    let v = self.group.read_signal(slot as usize).map_err(map)?;
                    if cmp.holds(v, target) {
                        return Ok(v);
                    }
                }
                let waited = start.elapsed();
                if waited >= self.spin {
                    break;
                }
                if waited >= PURE_SPIN {
                    std::thread::yield_now();
                }
            }
        }
        let step = if ctx.step == u32::MAX {
            "executor".to_string()
        } else {
            format!("step {}", ctx.step)
        };
        let c = WaitContext::new(ctx.schedule, step, ctx.slot_name)
            .expecting(ctx.signallers.iter().map(|r| *r as usize));
        self.group
            .wait_value(slot as usize, cmp, target, &c)
            .map_err(map)
    }

    /// The wait of a channel in a multi-channel launch: the core's wait, which probes `cancel`
    /// with the group's abort word (before every sleep), so it stops within a sleep slice of
    /// another channel failing; its deadline, dead-peer detection and timeout message are
    /// every wait's.
    fn wait_cancellable(
        &self,
        slot: u32,
        cmp: Cmp,
        target: u64,
        ctx: &ExecWaitContext,
        cancel: &LaunchCancel,
        channel: u32,
    ) -> Result<u64, ExecError> {
        cancel.check(channel)?;
        let v = self.group.read_signal(slot as usize).map_err(map)?;
        if cmp.holds(v, target) {
            return Ok(v);
        }
        let step = if ctx.step == u32::MAX {
            "executor".to_string()
        } else {
            format!("step {}", ctx.step)
        };
        let c = WaitContext::new(ctx.schedule, step, ctx.slot_name)
            .expecting(ctx.signallers.iter().map(|r| *r as usize));
        let cancelled = || cancel.failed().is_some();
        match self.group.wait_value_or_cancel(
            slot as usize,
            cmp,
            target,
            &c,
            self.group.signal_timeout(),
            &cancelled,
        ) {
            Ok(Some(v)) => Ok(v),
            // Cancelled: the check names the failing channel.
            Ok(None) => cancel.check(channel).and_then(|()| {
                Err(ExecError::ChannelCancelled {
                    rank: self.group.rank() as u32,
                    channel,
                    failed: channel,
                })
            }),
            Err(e) => Err(map(e)),
        }
    }

    /// The counters of this rank's pad: slot `s` is the first word of pad line
    /// `SLOT_BASE + s` of this rank's own segment, which stays mapped for as long as the group
    /// is, so consecutive slots lie one line apart. What a kernel reads there is what
    /// [`Group::read_signal`] returns (an acquire load of the same word); a wait whose first
    /// look fails still goes through [`Fabric::wait`], so deadlines, dead-peer detection, the
    /// abort check and the timeout message are unchanged.
    fn signal_words(&self, first: u32, count: u32) -> Option<(*const u64, usize)> {
        let last = first.checked_add(count.checked_sub(1)?)?;
        let me = self.group.rank();
        // Both ends registered on this rank (the lines in between are then too).
        let a = self.group.slot_line(me, first as usize).ok()?.as_ptr();
        let b = self.group.slot_line(me, last as usize).ok()?.as_ptr();
        let stride = crate::heap::LINE;
        if (b as usize).wrapping_sub(a as usize) != (count as usize - 1) * stride {
            return None;
        }
        Some((a as *const u64, stride))
    }

    fn check_usable(&self) -> Result<(), ExecError> {
        self.group.check_usable().map_err(map)
    }

    fn abort(&self, message: &str) {
        self.group.abort(message);
    }

    fn generation(&self) -> u64 {
        self.group.generation()
    }
    fn reachable(&self, peer: u32) -> bool {
        self.group.is_reachable(peer as usize)
    }
}
