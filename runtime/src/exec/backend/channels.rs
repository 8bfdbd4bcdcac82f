//! Running the channels of a multi-channel rank concurrently: the one runner every backend
//! uses (the interpreter and the JIT differ only in what runs one channel's steps).
//!
//! The first channel runs on the calling thread, every other one on a scoped worker thread
//! started for this launch (a launch of a one-channel rank never comes here). Each channel gets
//! its own state from the caller's per-plan vector, so nothing mutable is shared between the
//! threads. A failing channel marks the launch's [`LaunchCancel`], which the others see at
//! their next step or inside their current wait and stop with
//! [`ExecError::ChannelCancelled`]; a worker that panics or cannot be started counts as a
//! failing channel. The launch returns the first real failure in channel order, a cancellation
//! only when nothing else failed.
//!
//! How the workers are obtained is this module's business alone (today a thread per extra
//! channel per launch; a persistent pool would replace [`run`]'s body, not its callers).

use crate::exec::cancel::LaunchCancel;
use crate::exec::error::ExecError;
use crate::exec::resolved::ChannelSteps;

/// Run `run_one(state, channel, cancel)` for every entry of `channels` concurrently, with
/// `states[i]` as channel `i`'s own state (grown to `channels.len()` with `S::default()`), and
/// return the launch's result (see the module docs). `run_one` need not mark `cancel` itself:
/// every channel that returns an error marks it here.
pub(crate) fn run<S, R>(
    rank: u32,
    channels: &[ChannelSteps],
    states: &mut Vec<S>,
    run_one: R,
) -> Result<(), ExecError>
where
    S: Default + Send,
    R: Fn(&mut S, &ChannelSteps, &LaunchCancel) -> Result<(), ExecError> + Sync,
{
    if states.len() < channels.len() {
        states.resize_with(channels.len(), S::default);
    }
    let (Some((first, rest)), Some((first_state, rest_states))) =
        (channels.split_first(), states.split_first_mut())
    else {
        return Ok(());
    };
    let cancel = LaunchCancel::new(rank);
    let run_one = |state: &mut S, c: &ChannelSteps| {
        let r = run_one(state, c, &cancel);
        if r.is_err() {
            cancel.fail(c.channel);
        }
        r
    };
    // Sharing: the workers get `&R` (`Sync` by the bound) and the cancel word; each owns its
    // `&mut S` (`Send` by the bound). What the channels do to memory concurrently is ordered by
    // their signals and waits, as between ranks (the verifier's proof under the channel
    // contract).
    let results: Vec<Result<(), ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = rest
            .iter()
            .zip(rest_states.iter_mut())
            .map(|(c, state)| {
                let run_one = &run_one;
                let h = std::thread::Builder::new()
                    .name(format!("symsched-ch{}", c.channel))
                    .spawn_scoped(s, move || run_one(state, c));
                if h.is_err() {
                    // The workers already started stop at their next step or wait.
                    cancel.fail(c.channel);
                }
                (c.channel, h)
            })
            .collect();
        let mut results = vec![run_one(first_state, first)];
        for (channel, h) in handles {
            results.push(match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    cancel.fail(channel);
                    Err(ExecError::Runtime(format!(
                        "the worker of channel {channel} panicked"
                    )))
                }),
                Err(e) => Err(ExecError::Runtime(format!(
                    "cannot start the worker of channel {channel}: {e}"
                ))),
            });
        }
        results
    });
    first_failure(results)
}

/// The first real failure in channel order, else the first cancellation, else success.
fn first_failure(results: Vec<Result<(), ExecError>>) -> Result<(), ExecError> {
    let mut cancelled = None;
    for r in results {
        match r {
            Ok(()) => {}
            Err(e @ ExecError::ChannelCancelled { .. }) => {
                cancelled.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    cancelled.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn chans(n: u32) -> Vec<ChannelSteps> {
        (0..n)
            .map(|c| ChannelSteps {
                channel: c,
                steps: c as usize..c as usize + 1,
            })
            .collect()
    }

    #[test]
    fn every_channel_runs_once_on_its_own_state() {
        let mut states: Vec<Vec<u32>> = Vec::new();
        run(0, &chans(3), &mut states, |s: &mut Vec<u32>, c, _| {
            s.push(c.channel);
            Ok(())
        })
        .expect("no failure");
        assert_eq!(states, vec![vec![0], vec![1], vec![2]]);
    }

    /// A failing channel stops a sibling that polls the cancel word; the launch reports the
    /// failure, not the cancellation, even when the cancelled channel comes first.
    #[test]
    fn a_failure_cancels_the_others_and_wins_over_their_cancellation() {
        let mut states: Vec<()> = Vec::new();
        let t0 = Instant::now();
        let e = run(5, &chans(2), &mut states, |_: &mut (), c, cancel| {
            if c.channel == 1 {
                return Err(ExecError::Runtime("boom".into()));
            }
            while t0.elapsed() < Duration::from_secs(20) {
                cancel.check(c.channel)?;
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })
        .expect_err("channel 1 fails");
        assert!(matches!(&e, ExecError::Runtime(m) if m == "boom"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_panicking_worker_is_a_failure_of_its_channel() {
        let mut states: Vec<()> = Vec::new();
        let e = run(0, &chans(2), &mut states, |_: &mut (), c, _| {
            if c.channel == 1 {
                panic!("worker panics");
            }
            Ok(())
        })
        .expect_err("channel 1 panicked");
        assert!(e.to_string().contains("channel 1 panicked"), "{e}");
    }
}
