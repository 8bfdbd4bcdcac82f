//! The group barrier: every reachable member signals every other and waits for all of them,
//! and the barrier's records double as the check that every member made the same heap
//! allocations and signal-slot registrations (the first place a divergence becomes visible).

use std::sync::atomic::Ordering;

use symsched_plan::Cmp;

use crate::error::{RuntimeError, WaitContext};
use crate::group::{Group, BARRIER_LINE, RECORD_LINE};
use crate::group_wait::wait_line;
use crate::heap::{atomic_u64, describe_divergence, read_alloc_state, LINE};
use crate::signal::SignalMode;

impl Group {
    /// Barrier over the reachable members; also checks that every member made the same heap
    /// allocations and registered the same signal slots (loud error otherwise).
    pub fn barrier(&self) -> Result<(), RuntimeError> {
        self.check_usable()?;
        let mut ep = self.barrier_epoch();
        *ep += 1;
        let e = *ep;
        let state = self.shared.heap.alloc_state();
        let slot_hash = self.slot_hash();
        let rec_off = RECORD_LINE + (e % 2) as usize;
        let pad = self.pad_offset();
        let base = self.shared.heap.base();
        // SAFETY: the record line is inside this rank's own pad; only this rank writes it, and
        // peers read it only after the barrier signal below (release/acquire).
        unsafe {
            let at = pad + rec_off * LINE;
            atomic_u64(base, at + 8).store(state.ops, Ordering::Relaxed);
            atomic_u64(base, at + 16).store(state.hash, Ordering::Relaxed);
            atomic_u64(base, at + 24).store(slot_hash, Ordering::Relaxed);
            atomic_u64(base, at).store(e, Ordering::Release);
        }
        let others: Vec<usize> = (0..self.size())
            .filter(|&p| p != self.rank() && self.is_reachable(p))
            .collect();
        for &p in &others {
            self.pad_line(p, BARRIER_LINE)?
                .update(SignalMode::Add, 1, self.rank());
        }
        let line = self.pad_line(self.rank(), BARRIER_LINE)?;
        let ctx = WaitContext::new("barrier", format!("barrier #{e}"), "barrier")
            .expecting(others.iter().copied());
        wait_line(
            self,
            &line,
            usize::MAX,
            Cmp::Ge,
            e * others.len() as u64,
            &ctx,
            self.signal_timeout(),
        )?;
        for &p in &others {
            let m = self.mapping(p)?;
            let ppad = self.pad_offset();
            // SAFETY: peer's record line inside its pad; published before its barrier signal.
            let (pe, pops, phash, pslots) = unsafe {
                let at = ppad + rec_off * LINE;
                (
                    atomic_u64(m.base(), at).load(Ordering::Acquire),
                    atomic_u64(m.base(), at + 8).load(Ordering::Relaxed),
                    atomic_u64(m.base(), at + 16).load(Ordering::Relaxed),
                    atomic_u64(m.base(), at + 24).load(Ordering::Relaxed),
                )
            };
            if pe != e {
                continue;
            }
            if pops != state.ops || phash != state.hash {
                let peer_now = read_alloc_state(m.base());
                let err = RuntimeError::AllocMismatch {
                    point: format!("barrier #{e} of group {}", self.name()),
                    rank: self.shared.cfg.rank,
                    peer: self.members()[p],
                    ops: state.ops,
                    hash: state.hash,
                    peer_ops: pops,
                    peer_hash: phash,
                    detail: describe_divergence(base, m.base(), state.ops, peer_now.ops.min(pops)),
                };
                tracing::error!("{err}");
                return Err(err);
            }
            if pslots != slot_hash {
                let err = RuntimeError::SlotMismatch {
                    group: self.name().to_string(),
                    rank: self.shared.cfg.rank,
                    peer: self.members()[p],
                    hash: slot_hash,
                    peer_hash: pslots,
                };
                tracing::error!("{err}");
                return Err(err);
            }
        }
        Ok(())
    }
}
