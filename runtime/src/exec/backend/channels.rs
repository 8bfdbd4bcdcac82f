//! Running the channels of a multi-channel rank concurrently: the one runner every backend
//! uses (the interpreter and the JIT differ only in what runs one channel's steps).
//!
//! The first channel runs on the calling thread, every other one on a worker of the plan's own
//! pool ([`Workers`]): threads started at the plan's first multi-channel launch and kept, idle,
//! between launches (a launch of a one-channel rank never comes here). Each channel gets its own
//! state, so nothing mutable is shared between the threads. A failing channel marks the
//! launch's [`LaunchCancel`], which the others see at their next step or inside their current
//! wait and stop with [`ExecError::ChannelCancelled`]; a channel that panics counts as a
//! failing channel. The launch returns the first real failure in channel order, a cancellation
//! only when nothing else failed.
//!
//! Why a pool per plan and not one per process: every channel may block in a wait for another
//! (of its rank or a peer), so each needs a thread of its own for the whole launch; a shared
//! pool would let two plans launched at once from two threads take each other's workers and
//! deadlock. A plan's pool has exactly one thread per further channel. Starting a thread per
//! channel per launch instead (as before the pool) cost tens of µs per launch
//! (`docs/performance.md`, "Channels on the host").

use crate::exec::cancel::LaunchCancel;
use crate::exec::error::ExecError;
use crate::exec::resolved::ChannelSteps;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a plan keeps for its multi-channel launches: each channel's own state and the workers
/// that run every channel but the first.
pub(crate) struct Workers<S> {
    states: Vec<S>,
    /// The pool and the process that started it.
    pool: Option<(rayon::ThreadPool, u32)>,
}

impl<S> Default for Workers<S> {
    fn default() -> Self {
        Workers {
            states: Vec::new(),
            pool: None,
        }
    }
}

impl<S> Workers<S> {
    /// The pool with at least `threads` workers, started on first use. A process forked after
    /// the pool started has none of its threads (a fork copies only the calling thread), and
    /// jobs handed to it would never run: such a process starts a pool of its own.
    fn pool(&mut self, threads: usize) -> Result<&rayon::ThreadPool, ExecError> {
        let me = std::process::id();
        if self
            .pool
            .as_ref()
            .is_none_or(|(p, pid)| *pid != me || p.current_num_threads() < threads)
        {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("symsched-ch{}", i + 1))
                .build()
                .map_err(|e| {
                    ExecError::Runtime(format!("cannot start the channel workers: {e}"))
                })?;
            self.pool = Some((pool, me));
        }
        Ok(&self.pool.as_ref().expect("set above").0)
    }
}

/// Run `run_one(state, channel, cancel)` for every entry of `channels` concurrently, with
/// channel `i`'s own state (grown to `channels.len()` with `S::default()`), and return the
/// launch's result (see the module docs). `run_one` need not mark `cancel` itself: every
/// channel that returns an error or panics marks it here.
pub(crate) fn run<S, R>(
    rank: u32,
    channels: &[ChannelSteps],
    workers: &mut Workers<S>,
    run_one: R,
) -> Result<(), ExecError>
where
    S: Default + Send,
    R: Fn(&mut S, &ChannelSteps, &LaunchCancel) -> Result<(), ExecError> + Sync,
{
    if workers.states.len() < channels.len() {
        workers.states.resize_with(channels.len(), S::default);
    }
    let Some((first, rest)) = channels.split_first() else {
        return Ok(());
    };
    // Take the states out so the pool can be borrowed beside them.
    let mut states = std::mem::take(&mut workers.states);
    let result = (|| {
        let pool = workers.pool(rest.len())?;
        let (first_state, rest_states) = states.split_first_mut().expect("grown above");
        let cancel = LaunchCancel::new(rank);
        let run_one = |state: &mut S, c: &ChannelSteps| {
            let r = catch_unwind(AssertUnwindSafe(|| run_one(state, c, &cancel))).unwrap_or_else(
                |_| {
                    Err(ExecError::Runtime(format!(
                        "the worker of channel {} panicked",
                        c.channel
                    )))
                },
            );
            if r.is_err() {
                cancel.fail(c.channel);
            }
            r
        };
        let mut results: Vec<Result<(), ExecError>> = Vec::with_capacity(channels.len());
        let mut rest_results: Vec<Option<Result<(), ExecError>>> =
            rest.iter().map(|_| None).collect();
        // Sharing: the jobs get `&R` (`Sync` by the bound) and the cancel word; each owns its
        // `&mut S` (`Send` by the bound) and its result slot. What the channels do to memory
        // concurrently is ordered by their signals and waits, as between ranks (the
        // verifier's proof under the channel contract). The scope returns when every job has.
        pool.in_place_scope(|s| {
            for ((c, state), slot) in rest
                .iter()
                .zip(rest_states.iter_mut())
                .zip(rest_results.iter_mut())
            {
                let run_one = &run_one;
                s.spawn(move |_| *slot = Some(run_one(state, c)));
            }
            results.push(run_one(first_state, first));
        });
        results.extend(rest_results.into_iter().zip(rest).map(|(r, c)| {
            r.unwrap_or_else(|| {
                Err(ExecError::Runtime(format!(
                    "the worker of channel {} did not run",
                    c.channel
                )))
            })
        }));
        first_failure(results)
    })();
    workers.states = states;
    result
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
        let mut workers: Workers<Vec<u32>> = Workers::default();
        for _ in 0..2 {
            run(0, &chans(3), &mut workers, |s: &mut Vec<u32>, c, _| {
                s.push(c.channel);
                Ok(())
            })
            .expect("no failure");
        }
        assert_eq!(workers.states, vec![vec![0, 0], vec![1, 1], vec![2, 2]]);
    }

    /// A failing channel stops a sibling that polls the cancel word; the launch reports the
    /// failure, not the cancellation, even when the cancelled channel comes first.
    #[test]
    fn a_failure_cancels_the_others_and_wins_over_their_cancellation() {
        let mut workers: Workers<()> = Workers::default();
        let t0 = Instant::now();
        let e = run(5, &chans(2), &mut workers, |_: &mut (), c, cancel| {
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

    /// A fork copies only the calling thread: a child that launched on the parent's pool would
    /// wait forever for jobs no thread runs.
    #[test]
    fn a_forked_process_starts_workers_of_its_own() {
        let mut workers: Workers<()> = Workers::default();
        run(0, &chans(2), &mut workers, |_: &mut (), _, _| Ok(())).expect("parent");
        // SAFETY: the child runs the channels (glibc keeps malloc usable after fork) and leaves
        // with `_exit`, running no destructor or test-harness code.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = run(0, &chans(2), &mut workers, |_: &mut (), _, _| Ok(())).is_ok();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        // SAFETY (every call below): waits for, or ends, the child started above, by its pid.
        while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
            if Instant::now() > deadline {
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the forked child's launch did not end");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status}"
        );
    }

    #[test]
    fn a_panicking_worker_is_a_failure_of_its_channel() {
        let mut workers: Workers<()> = Workers::default();
        let e = run(0, &chans(2), &mut workers, |_: &mut (), c, _| {
            if c.channel == 1 {
                panic!("worker panics");
            }
            Ok(())
        })
        .expect_err("channel 1 panicked");
        assert!(e.to_string().contains("channel 1 panicked"), "{e}");
    }
}
