//! Redundant-wait elimination: on one rank (one channel of it, with channels), a wait on an add-signal slot is implied by an earlier
//! wait on the same slot whose threshold is at least as strong, because add-counters only grow
//! within and across launches. Both targets are `epoch·stride + offset` with the same stride
//! (one slot, one rank), so comparing offsets compares the targets in every epoch.
//!
//! Only `>=` and `>` waits are considered: `==`, `!=`, `<`, `<=` are not monotone, and set-signal
//! slots can be overwritten with smaller values.

use crate::ir::Program;
use std::collections::HashMap;
use symsched_plan::{Cmp, Op, SignalMode};

/// The smallest counter value that satisfies `cmp offset`, for the monotone comparisons.
fn threshold(cmp: Cmp, offset: u64) -> Option<u64> {
    match cmp {
        Cmp::Ge => Some(offset),
        Cmp::Gt => offset.checked_add(1),
        _ => None,
    }
}

/// Remove every implied wait. Returns the number removed.
pub fn remove_redundant_waits(prog: &mut Program) -> usize {
    let mut removed = 0;
    let add_slot: Vec<bool> = prog
        .signals
        .iter()
        .map(|s| s.mode == SignalMode::Add)
        .collect();
    for steps in &mut prog.ranks {
        // (channel, slot) -> strongest threshold already waited for on that channel: a wait of
        // another channel orders nothing for this one.
        let mut reached: HashMap<(u32, u32), u64> = HashMap::new();
        steps.retain(|step| {
            let Op::Wait { slot, cmp, target } = &step.op else {
                return true;
            };
            if !add_slot.get(*slot as usize).copied().unwrap_or(false) {
                return true;
            }
            let Some(t) = threshold(*cmp, target.offset) else {
                return true;
            };
            match reached.get(&(step.channel, *slot)) {
                Some(&have) if have >= t => {
                    removed += 1;
                    false
                }
                _ => {
                    reached.insert((step.channel, *slot), t);
                    true
                }
            }
        });
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::back::plan::tests::tiny_program;

    fn add_wait(prog: &mut Program, cmp: Cmp, offset: u64) {
        let mut w = prog.ranks[1][0].clone();
        if let Op::Wait { cmp: c, target, .. } = &mut w.op {
            *c = cmp;
            target.offset = offset;
        }
        prog.ranks[1].push(w);
    }

    #[test]
    fn weaker_later_wait_is_removed() {
        let mut prog = tiny_program(); // rank 1: wait ready >= 1
        add_wait(&mut prog, Cmp::Ge, 1);
        add_wait(&mut prog, Cmp::Gt, 0);
        assert_eq!(remove_redundant_waits(&mut prog), 2);
        assert_eq!(prog.ranks[1].len(), 1);
    }

    #[test]
    fn stronger_or_non_monotone_wait_is_kept() {
        let mut prog = tiny_program();
        add_wait(&mut prog, Cmp::Ge, 2);
        add_wait(&mut prog, Cmp::Eq, 1);
        assert_eq!(remove_redundant_waits(&mut prog), 0);
        assert_eq!(prog.ranks[1].len(), 3);
    }

    #[test]
    fn set_slots_are_left_alone() {
        let mut prog = tiny_program();
        prog.signals[0].mode = SignalMode::Set;
        add_wait(&mut prog, Cmp::Ge, 1);
        assert_eq!(remove_redundant_waits(&mut prog), 0);
    }
}
