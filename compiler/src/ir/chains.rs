//! Program order with channels: a rank's steps split into chains, one per channel, and only the
//! steps of one chain are ordered by their position (`docs/language-spec.md`, "Channels").
//!
//! Chains are numbered `rank * width + channel`, `width` the most channels any rank uses, so a
//! program without channels has one chain per rank, numbered by rank, and every analysis built
//! on chains sees exactly the per-rank order it saw before channels existed.

use super::{Program, StepRef};

/// The chain of every step and its position in it.
#[derive(Debug, Clone)]
pub struct Chains {
    /// Channels per rank in the numbering (1 without channels).
    pub width: u32,
    /// `base[r]`: index of rank r's first step in the flat, rank-major step order.
    base: Vec<usize>,
    /// Per flat step: its chain.
    chain: Vec<u32>,
    /// Per flat step: how many steps of its chain come before it.
    pos: Vec<u32>,
    /// Per flat step: the index (within its rank) of the previous and next step of its chain.
    prev: Vec<Option<u32>>,
    next: Vec<Option<u32>>,
    /// Per rank: the first and the last step of each of its non-empty chains.
    ends: Vec<Vec<(StepRef, StepRef)>>,
}

impl Chains {
    pub fn of(prog: &Program) -> Chains {
        let width = prog.channel_count();
        let n = prog.step_count();
        let mut c = Chains {
            width,
            base: Vec::with_capacity(prog.ranks.len()),
            chain: Vec::with_capacity(n),
            pos: Vec::with_capacity(n),
            prev: Vec::with_capacity(n),
            next: vec![None; n],
            ends: Vec::with_capacity(prog.ranks.len()),
        };
        for (r, steps) in prog.ranks.iter().enumerate() {
            let base = c.chain.len();
            c.base.push(base);
            let mut len = vec![0u32; width as usize];
            let mut first: Vec<Option<u32>> = vec![None; width as usize];
            let mut last: Vec<Option<u32>> = vec![None; width as usize];
            for (i, s) in steps.iter().enumerate() {
                let ch = s.channel as usize;
                c.chain.push(r as u32 * width + s.channel);
                c.pos.push(len[ch]);
                len[ch] += 1;
                c.prev.push(last[ch]);
                if let Some(p) = last[ch] {
                    c.next[base + p as usize] = Some(i as u32);
                }
                last[ch] = Some(i as u32);
                first[ch].get_or_insert(i as u32);
            }
            let at = |index| StepRef {
                rank: r as u32,
                index,
            };
            c.ends.push(
                first
                    .iter()
                    .zip(&last)
                    .filter_map(|(f, l)| Some((at((*f)?), at((*l)?))))
                    .collect(),
            );
        }
        c
    }

    /// The first step of each channel of `rank` that has steps: once any has run, the rank has
    /// entered the launch.
    pub fn firsts(&self, rank: u32) -> impl Iterator<Item = StepRef> + '_ {
        self.ends
            .get(rank as usize)
            .into_iter()
            .flatten()
            .map(|e| e.0)
    }

    /// The last step of each channel of `rank` that has steps: the rank returns after all.
    pub fn lasts(&self, rank: u32) -> impl Iterator<Item = StepRef> + '_ {
        self.ends
            .get(rank as usize)
            .into_iter()
            .flatten()
            .map(|e| e.1)
    }

    /// Number of chains (`ranks × width`).
    pub fn count(&self) -> usize {
        self.base.len() * self.width as usize
    }

    fn flat(&self, at: StepRef) -> usize {
        self.base[at.rank as usize] + at.index as usize
    }

    /// The chain of a step.
    pub fn chain(&self, at: StepRef) -> u32 {
        self.chain[self.flat(at)]
    }

    /// How many steps of its chain come before the step.
    pub fn pos(&self, at: StepRef) -> u32 {
        self.pos[self.flat(at)]
    }

    /// The previous step of the step's chain.
    pub fn prev(&self, at: StepRef) -> Option<StepRef> {
        self.prev[self.flat(at)].map(|index| StepRef {
            rank: at.rank,
            index,
        })
    }

    /// The next step of the step's chain.
    pub fn next(&self, at: StepRef) -> Option<StepRef> {
        self.next[self.flat(at)].map(|index| StepRef {
            rank: at.rank,
            index,
        })
    }

    /// Whether `a` comes before `b` in program order (same rank and channel, earlier).
    pub fn program_before(&self, a: StepRef, b: StepRef) -> bool {
        a.rank == b.rank && a.index < b.index && self.chain(a) == self.chain(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::testutil::*;
    use symsched_plan::{Cmp, SignalMode};

    #[test]
    fn without_channels_a_chain_is_a_rank() {
        let mut b = Builder::new(2, &[], &[("s", SignalMode::Add)]);
        let u = b.signal(0, 0, 1, SignalMode::Add, 1);
        let w = b.wait(1, 0, Cmp::Ge, 1);
        let c = Chains::of(&b.build());
        assert_eq!((c.width, c.count()), (1, 2));
        assert_eq!((c.chain(u), c.chain(w)), (0, 1));
        assert_eq!(c.prev(w), None);
    }

    #[test]
    fn channels_split_a_rank_into_chains() {
        let mut b = Builder::new(1, &[], &[("s", SignalMode::Add)]);
        let a0 = b.wait(0, 0, Cmp::Ge, 1);
        let a1 = b.signal(0, 0, 0, SignalMode::Add, 1);
        let a2 = b.wait(0, 0, Cmp::Ge, 1);
        b.channel(a1, 1);
        let c = Chains::of(&b.build());
        assert_eq!((c.width, c.count()), (2, 2));
        assert_eq!((c.chain(a0), c.chain(a1), c.chain(a2)), (0, 1, 0));
        assert_eq!((c.pos(a0), c.pos(a1), c.pos(a2)), (0, 0, 1));
        assert_eq!((c.next(a0), c.prev(a2)), (Some(a2), Some(a0)));
        assert!(c.program_before(a0, a2) && !c.program_before(a0, a1));
        assert_eq!(c.firsts(0).collect::<Vec<_>>(), vec![a0, a1]);
        assert_eq!(c.lasts(0).collect::<Vec<_>>(), vec![a2, a1]);
    }
}
