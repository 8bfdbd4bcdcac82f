//! Cancelling the other channels of a launch when one fails.
//!
//! A rank whose plan splits its steps into several channels runs each channel on its own worker
//! (see [`super::backend::interp`]). When one channel fails, the launch fails with that error;
//! the other channels must not then sit in a wait for a signal the failed channel will never
//! send (they would hold the launch until the fabric's deadline). Every worker shares one
//! [`LaunchCancel`]: the failing worker marks it, and the others see it at their next step or
//! inside the bounded poll loop of a wait ([`super::Fabric::wait_cancellable`]) and stop with
//! [`ExecError::ChannelCancelled`].
//!
//! Single-channel launches never build one: their hot path has no atomics from this module.

use super::error::ExecError;
use std::sync::atomic::{AtomicU32, Ordering};

/// No channel has failed.
const NONE: u32 = u32::MAX;

/// The shared cancel word of one multi-channel launch on one rank.
#[derive(Debug)]
pub struct LaunchCancel {
    rank: u32,
    /// The first channel that failed, or [`NONE`].
    failed: AtomicU32,
}

impl LaunchCancel {
    pub fn new(rank: u32) -> LaunchCancel {
        LaunchCancel {
            rank,
            failed: AtomicU32::new(NONE),
        }
    }

    /// Record that `channel` failed; the first failure wins (it names the cause in the other
    /// channels' errors).
    pub fn fail(&self, channel: u32) {
        // Relaxed is enough: the flag carries no data, only "stop"; the error itself travels
        // back through the worker's join.
        let _ = self
            .failed
            .compare_exchange(NONE, channel, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The channel that failed first, if any.
    #[inline]
    pub fn failed(&self) -> Option<u32> {
        match self.failed.load(Ordering::Relaxed) {
            NONE => None,
            c => Some(c),
        }
    }

    /// `Err(ChannelCancelled)` for `channel` once another channel has failed.
    #[inline]
    pub fn check(&self, channel: u32) -> Result<(), ExecError> {
        match self.failed() {
            None => Ok(()),
            Some(failed) => Err(ExecError::ChannelCancelled {
                rank: self.rank,
                channel,
                failed,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_wins_and_names_itself() {
        let c = LaunchCancel::new(3);
        assert!(c.check(0).is_ok());
        c.fail(2);
        c.fail(1);
        assert_eq!(c.failed(), Some(2));
        let e = c.check(0).expect_err("cancelled");
        assert!(matches!(
            e,
            ExecError::ChannelCancelled {
                rank: 3,
                channel: 0,
                failed: 2
            }
        ));
        assert!(e.to_string().contains("channel 2 failed"), "{e}");
    }
}
