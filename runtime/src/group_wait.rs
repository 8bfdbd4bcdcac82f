//! Waiting on one line of a group's signal pad: the wait watches the group's abort records
//! ([`crate::abort`]) and its peers' liveness ([`crate::monitor`]), and when the deadline passes
//! names, from the line's per-sender tallies ([`crate::signal`]), exactly the ranks whose update
//! is missing.
//!
//! **Who is missing.** Counters are never reset between launches, so "who signalled" only means
//! something relative to the target. For an ADD slot each expected sender owes its share of the
//! target: `need × weight / Σ weights` (equal weights unless the caller gives the amounts per
//! launch with [`WaitContext::expecting_weighted`]); a sender whose tally is below its share is
//! missing. For a SET slot a sender is missing when the last value it stored does not satisfy
//! the comparison. Either way the message shows each sender's tally next to what it owed.

use std::time::{Duration, Instant};

use symsched_plan::Cmp;

use crate::abort::AbortWatch;
use crate::error::{PeerDiedError, RankList, RuntimeError, SignalTimeoutError, WaitContext};
use crate::group::Group;
use crate::signal::{SignalLine, MODE_ADD, MODE_SET};
use crate::wait::{wait_watching, WaitFailure};

/// How long a wait keeps going after noticing a dead peer (its signals may all have arrived).
const DEATH_GRACE: Duration = Duration::from_millis(600);
/// Senders listed one by one in a timeout message.
const DETAIL_SENDERS: usize = 16;

/// What one expected sender contributed to a line, against what the wait needs from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SenderAccount {
    /// Group-local rank.
    pub local: usize,
    /// Its tally (None: not tallied).
    pub got: Option<u32>,
    /// Its share of the target (ADD slots with a reachable target).
    pub need: Option<u64>,
    /// Whether its update is missing.
    pub missing: bool,
}

/// Expands a 32-bit tally of a SET value to the 64-bit value nearest to `near`.
fn widen(low: u32, near: u64) -> u64 {
    let c = (near & !0xffff_ffff) | low as u64;
    if c > near.saturating_add(1 << 31) && c >= 1 << 32 {
        c - (1 << 32)
    } else if c.saturating_add(1 << 31) < near {
        c.saturating_add(1 << 32)
    } else {
        c
    }
}

impl Group {
    /// Waits until signal slot `slot` of this rank satisfies `cmp target`. On expiry of the
    /// deadline (`SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`) returns [`RuntimeError::SignalTimeout`]
    /// naming this rank, the group, `ctx`'s schedule/step/signal, expected vs observed and the
    /// peers that did not signal; a dead peer is reported as [`RuntimeError::PeerDied`].
    ///
    /// ```no_run
    /// # use symsched_runtime::{Group, WaitContext};
    /// # use symsched_plan::Cmp;
    /// # fn f(g: &Group) -> Result<(), symsched_runtime::RuntimeError> {
    /// let s = g.signal_slots("demo", 1)?;
    /// g.wait(s.slot(0), Cmp::Ge, 1, &WaitContext::new("demo", "step 3", "ready[0]"))?;
    /// # Ok(()) }
    /// ```
    pub fn wait(
        &self,
        slot: usize,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
    ) -> Result<(), RuntimeError> {
        self.wait_value(slot, cmp, target, ctx).map(|_| ())
    }

    /// Like [`Group::wait`] with an explicit timeout, returning the observed value.
    pub fn wait_value_timeout(
        &self,
        slot: usize,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
        timeout: Duration,
    ) -> Result<u64, RuntimeError> {
        let line = self.slot_line(self.rank(), slot)?;
        wait_line(self, &line, slot, cmp, target, ctx, timeout)
    }

    /// Like [`Group::wait_value_timeout`], also stopping with `Ok(None)` as soon as `cancelled`
    /// returns true (it is probed with the group's abort word, before every sleep). Dead-peer
    /// detection, the abort check and the timeout message are those of every wait.
    pub fn wait_value_or_cancel(
        &self,
        slot: usize,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
        timeout: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Option<u64>, RuntimeError> {
        let line = self.slot_line(self.rank(), slot)?;
        wait_line_or_cancel(self, &line, slot, cmp, target, ctx, timeout, cancelled)
    }

    /// Like [`Group::wait`], returning the observed value.
    pub fn wait_value(
        &self,
        slot: usize,
        cmp: Cmp,
        target: u64,
        ctx: &WaitContext,
    ) -> Result<u64, RuntimeError> {
        self.wait_value_timeout(slot, cmp, target, ctx, self.signal_timeout())
    }
}

/// Accounts every expected sender of `line` for a wait `cmp target`.
pub(crate) fn account(
    g: &Group,
    line: &SignalLine,
    cmp: Cmp,
    target: u64,
    ctx: &WaitContext,
) -> Vec<SenderAccount> {
    let expected: Vec<usize> = if ctx.expected_from.is_empty() {
        (0..g.size()).filter(|&p| p != g.rank()).collect()
    } else {
        ctx.expected_from.clone()
    };
    let modes = line.modes();
    let weights: Vec<u64> =
        if ctx.weights.len() == expected.len() && ctx.weights.iter().any(|&w| w > 0) {
            ctx.weights.clone()
        } else {
            vec![1; expected.len()]
        };
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    let need_total = match cmp {
        Cmp::Ge | Cmp::Eq => Some(target),
        Cmp::Gt => target.checked_add(1),
        _ => None,
    };
    expected
        .iter()
        .zip(&weights)
        .map(|(&local, &w)| {
            let got = line.tally(local);
            if modes == MODE_SET {
                let missing = match got {
                    Some(v) => !cmp.holds(widen(v, target), target),
                    None => true,
                };
                return SenderAccount {
                    local,
                    got,
                    need: None,
                    missing,
                };
            }
            let need = need_total.map(|n| (n as u128 * w as u128).div_ceil(total) as u64);
            let missing = match (got, need) {
                (None, _) => true,
                (Some(v), Some(n)) => ((n as u32).wrapping_sub(v) as i32) > 0,
                (Some(v), None) => v == 0,
            };
            SenderAccount {
                local,
                got,
                need,
                missing,
            }
        })
        .collect()
}

/// The per-sender part of a timeout message.
fn describe(g: &Group, line: &SignalLine, cmp: Cmp, target: u64, acc: &[SenderAccount]) -> String {
    let modes = line.modes();
    if modes == 0 {
        return "; no update ever reached this slot".into();
    }
    let who = |a: &SenderAccount| {
        let global = g.members().get(a.local).copied().unwrap_or(usize::MAX);
        format!("rank {global} (local {})", a.local)
    };
    let mut parts: Vec<String> = acc
        .iter()
        .take(DETAIL_SENDERS)
        .map(|a| match (a.got, modes == MODE_SET, a.need) {
            (None, _, _) => format!("{} not tallied", who(a)),
            (Some(v), true, _) => format!(
                "{} last set {} (needs {cmp:?} {target})",
                who(a),
                widen(v, target)
            ),
            (Some(v), false, Some(n)) => format!("{} added {v} of {n}", who(a)),
            (Some(v), false, None) => format!("{} added {v}", who(a)),
        })
        .collect();
    if acc.len() > DETAIL_SENDERS {
        parts.push(format!("… and {} more", acc.len() - DETAIL_SENDERS));
    }
    let mixed = if modes == MODE_SET | MODE_ADD {
        " (the slot received both SET and ADD updates)"
    } else {
        ""
    };
    format!("; per sender{mixed}: {}", parts.join(", "))
}

fn noticed(ctx: &WaitContext) -> String {
    format!(
        "while waiting in schedule `{}` step `{}` on signal `{}`",
        ctx.schedule, ctx.step, ctx.signal
    )
}

enum Stop {
    Aborted,
    Died(usize, i32),
    Cancelled,
}

/// Waits until `line` (slot `slot` of this rank's pad, `usize::MAX` for the barrier line)
/// satisfies `cmp target`; see the module docs for the errors.
pub(crate) fn wait_line(
    g: &Group,
    line: &SignalLine,
    slot: usize,
    cmp: Cmp,
    target: u64,
    ctx: &WaitContext,
    timeout: Duration,
) -> Result<u64, RuntimeError> {
    let never = || false;
    wait_line_or_cancel(g, line, slot, cmp, target, ctx, timeout, &never)?.ok_or_else(|| {
        RuntimeError::InvalidArgument(format!("a wait on `{}` stopped uncancelled", ctx.signal))
    })
}

/// [`wait_line`] that also stops with `Ok(None)` once `cancelled` returns true.
#[allow(clippy::too_many_arguments)]
fn wait_line_or_cancel(
    g: &Group,
    line: &SignalLine,
    slot: usize,
    cmp: Cmp,
    target: u64,
    ctx: &WaitContext,
    timeout: Duration,
    cancelled: &dyn Fn() -> bool,
) -> Result<Option<u64>, RuntimeError> {
    let aborts = AbortWatch::new(g);
    if aborts.probe() {
        if let Some(e) = g.aborted_error(&noticed(ctx)) {
            return Err(e);
        }
    }
    let deadline = Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365));
    let watch = g.watched();
    let monitor = &g.shared.monitor;
    // A peer that exits right after delivering its signals (e.g. after its last barrier)
    // is not a failure: a death only aborts the wait once it has lasted DEATH_GRACE without
    // the wait completing and the dead peer is among those whose update is missing.
    // The first peer seen dead is reported: later deaths are usually its consequences.
    let mut first_dead: Option<(Instant, usize, i32)> = None;
    let r = wait_watching(
        line,
        cmp,
        target,
        deadline,
        || {
            if aborts.probe() {
                Some(Stop::Aborted)
            } else {
                cancelled().then_some(Stop::Cancelled)
            }
        },
        || {
            let (peer, pid) = monitor.first_dead(watch.iter().copied())?;
            let (since, first, first_pid) = *first_dead.get_or_insert((Instant::now(), peer, pid));
            if since.elapsed() < DEATH_GRACE {
                return None;
            }
            let acc = account(g, line, cmp, target, ctx);
            let unsignalled = |global: usize| {
                g.local_rank_of(global)
                    .is_some_and(|p| acc.iter().any(|a| a.local == p && a.missing))
            };
            if unsignalled(first) || since.elapsed() >= 2 * DEATH_GRACE {
                return Some(Stop::Died(first, first_pid));
            }
            watch
                .iter()
                .find(|&&w| unsignalled(w) && monitor.is_dead(w))
                .map(|&w| Stop::Died(w, monitor.pid_of(w).unwrap_or(pid)))
        },
    );
    match r {
        Ok(v) => Ok(Some(v)),
        Err(WaitFailure::Aborted(Stop::Cancelled)) => Ok(None),
        Err(WaitFailure::Aborted(Stop::Aborted)) => {
            let e = g.aborted_error(&noticed(ctx)).unwrap_or_else(|| {
                // Cleared between the probe and now (a concurrent reset): report it as such.
                RuntimeError::InvalidArgument(format!(
                    "group {} was reset while rank {} waited on `{}`",
                    g.name(),
                    g.shared.cfg.rank,
                    ctx.signal
                ))
            });
            tracing::error!("{e}");
            Err(e)
        }
        Err(WaitFailure::Aborted(Stop::Died(peer, pid))) => {
            let e = RuntimeError::PeerDied(Box::new(PeerDiedError {
                rank: g.shared.cfg.rank,
                group: g.name().to_string(),
                peer,
                pid,
                schedule: ctx.schedule.clone(),
                step: ctx.step.clone(),
                signal: ctx.signal.clone(),
            }));
            tracing::error!("{e}");
            Err(e)
        }
        Err(WaitFailure::Timeout { observed }) => {
            let acc = account(g, line, cmp, target, ctx);
            let missing = acc.iter().filter(|a| a.missing).map(|a| a.local).collect();
            let e = RuntimeError::SignalTimeout(Box::new(SignalTimeoutError {
                rank: g.shared.cfg.rank,
                local_rank: g.rank(),
                group: g.name().to_string(),
                schedule: ctx.schedule.clone(),
                step: ctx.step.clone(),
                signal: ctx.signal.clone(),
                slot,
                cmp,
                expected: target,
                observed,
                missing: RankList(missing),
                detail: describe(g, line, cmp, target, &acc),
                timeout_ms: timeout.as_millis() as u64,
            }));
            tracing::error!("{e}");
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn widening_a_set_tally_picks_the_nearest_value() {
        assert_eq!(widen(7, 9), 7);
        assert_eq!(widen(7, (5 << 32) + 9), (5 << 32) + 7);
        // Just below a 2^32 boundary while the target is just above it.
        assert_eq!(widen(u32::MAX, (1 << 32) + 2), (1 << 32) - 1);
        assert_eq!(widen(3, (1 << 32) - 2), (1 << 32) + 3);
    }
}
