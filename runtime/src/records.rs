//! Small control-plane records exchanged through files in the private rendezvous directory:
//! group creation (pids, allocator state, signal-pad offsets) and per-group scratch offsets.
//! These exchanges are rare (once per group or scratch key), so files are simple and robust;
//! every collection is bounded and names the ranks that never published.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{RankList, RuntimeError};
use crate::monitor::Monitor;

/// Publishes `content` as record `name` of `rank` (atomically: write then rename).
pub(crate) fn publish(
    dir: &Path,
    name: &str,
    rank: usize,
    content: &str,
) -> Result<(), RuntimeError> {
    let tmp = dir.join(format!(".{name}.r{rank}.tmp"));
    let fin = dir.join(format!("{name}.r{rank}"));
    std::fs::write(&tmp, content)
        .map_err(|e| RuntimeError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &fin)
        .map_err(|e| RuntimeError::io(format!("rename to {}", fin.display()), e))
}

/// Collects record `name` of every rank in `ranks` (in that order).
pub(crate) fn collect(
    dir: &Path,
    name: &str,
    ranks: &[usize],
    me: usize,
    monitor: &Monitor,
    timeout: Duration,
    step: &str,
) -> Result<Vec<String>, RuntimeError> {
    let deadline = Instant::now() + timeout;
    let mut out: Vec<Option<String>> = vec![None; ranks.len()];
    let mut nap = Duration::from_micros(200);
    let mut last_check = Instant::now();
    loop {
        for (i, &r) in ranks.iter().enumerate() {
            if out[i].is_none() {
                if let Ok(s) = std::fs::read_to_string(dir.join(format!("{name}.r{r}"))) {
                    out[i] = Some(s);
                }
            }
        }
        if out.iter().all(Option::is_some) {
            return Ok(out.into_iter().map(|s| s.unwrap_or_default()).collect());
        }
        let missing: Vec<usize> = ranks
            .iter()
            .zip(&out)
            .filter(|(_, o)| o.is_none())
            .map(|(&r, _)| r)
            .collect();
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            if let Some((peer, pid)) = monitor.first_dead(missing.iter().copied()) {
                return Err(RuntimeError::PeerDied(Box::new(
                    crate::error::PeerDiedError {
                        rank: me,
                        group: name.to_string(),
                        peer,
                        pid,
                        schedule: String::new(),
                        step: step.to_string(),
                        signal: String::new(),
                    },
                )));
            }
        }
        if Instant::now() >= deadline {
            return Err(RuntimeError::RendezvousTimeout {
                rank: me,
                step: step.to_string(),
                dir: dir.display().to_string(),
                timeout_ms: timeout.as_millis() as u64,
                missing: RankList(missing),
            });
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(5));
    }
}
