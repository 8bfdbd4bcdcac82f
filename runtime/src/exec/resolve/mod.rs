//! Resolving a loaded plan for one launch's sizes: the front every backend shares.
//!
//! As in MSCCL++, loading a plan (its slots and caches, [`super::Executor::load`]) and
//! resolving it are split from running it: `resolve_or_reuse` evaluates every step's regions
//! for the launch sizes into the [`Resolved`] representation and runs the passes that choose
//! how the steps execute, once per set of sizes; a repeated launch with the same sizes reuses
//! the result and allocates nothing.
//!
//! **Extents** come from [`BufferDecl::chunk_span`] / [`BufferDecl::region_span`]; a region on a
//! peer (put destination, get source) is measured with the *peer's* extents, which differ from
//! ours only for alltoallv counts. A step moves the length of its data region (source of
//! put/get/copy/cast, destination of reduce); every other region must be at least as long.
//!
//! **Passes** (each a function of the resolved steps, the plan unchanged):
//! - `fuse`: a reduce and the puts/casts of its result right after it run as one pass over
//!   the data;
//! - `fuse_get`: gets whose landing slot only feeds the reduce after them are read by the
//!   reduce straight from the peer;
//! - `streaming`: plain moves whose destination nobody reads may stream past the cache.
//!
//! **Channels.** A rank's steps are grouped by channel first (channel order, plan order within
//! one; see [`Resolved::channels`]) and every pass runs on one channel's sequence: "the step
//! right after" means the next step of the same channel, since another channel's steps may run
//! at any time relative to it. The get fold also treats the other channels' steps as
//! concurrent: a landing region any of them touches keeps its get.
//!
//! **Cache key.** A resolution is reused when the launch's size variables (plan order) are the
//! same; a plan whose extents take alltoallv counts also compares the counts matrix row by row
//! (the usual training loop repeats its splits), and one launched with a matrix that is not
//! `P × P` is resolved afresh every time (and fails there).
//!
//! [`BufferDecl::chunk_span`]: symsched_plan::BufferDecl::chunk_span
//! [`BufferDecl::region_span`]: symsched_plan::BufferDecl::region_span

mod fuse;
mod fuse_get;
mod streaming;

use super::error::ExecError;
use super::resolved::{ChannelSteps, GetFolds, RReg, RStep, Resolved};
use crate::config::ExecOptions;
use std::sync::atomic::{AtomicU64, Ordering};
use symsched_plan::{LaunchSizes, Op, Plan, Rank};

/// The resolution of `plan` for `sizes` on rank `me`: `cached` when it was made for the same
/// sizes, else a fresh one stored there. `uses_counts`: the plan's extents take alltoallv
/// counts (the caller has checked that `sizes.counts` is present). `opts` says which passes
/// run (fusion and streaming may be switched off for A/B runs).
#[inline]
pub(crate) fn resolve_or_reuse<'a>(
    cached: &'a mut Option<Resolved>,
    plan: &Plan,
    me: Rank,
    sizes: &LaunchSizes,
    uses_counts: bool,
    opts: &ExecOptions,
) -> Result<&'a Resolved, ExecError> {
    let counts = if uses_counts {
        counts_matrix(plan, sizes)
    } else {
        None
    };
    let nv = plan.size_vars.len();
    let pp = counts.map_or(0, |_| (plan.group_size as usize).pow(2));
    // Compared in place: collecting the matrix into a key first allocated and freed a vector
    // on every launch (~350 instructions of an `alltoallv_push` launch at 8 B).
    let hit = (!uses_counts || counts.is_some())
        && cached.as_ref().is_some_and(|r| {
            r.key.as_ref().is_some_and(|k| {
                k.len() == nv + pp
                    && plan
                        .size_vars
                        .iter()
                        .zip(k)
                        .all(|(v, x)| sizes.vars.get(&v.name) == Some(x))
                    && counts.is_none_or(|m| m.iter().flatten().eq(&k[nv..]))
            })
        });
    if !hit {
        let key = if uses_counts && counts.is_none() {
            None
        } else {
            let mut k = Vec::with_capacity(nv + pp);
            for v in &plan.size_vars {
                k.push(
                    *sizes
                        .vars
                        .get(&v.name)
                        .ok_or_else(|| symsched_plan::PlanError::UnboundSize(v.name.clone()))?,
                );
            }
            if let Some(m) = counts {
                k.extend(m.iter().flatten());
            }
            Some(k)
        };
        *cached = Some(resolve(plan, me, sizes, key, opts)?);
    }
    Ok(cached.as_ref().expect("resolved above"))
}

/// The counts matrix of a counts plan's launch when it is `P × P` (only then part of the cache
/// key, flattened row by row); `None` (never cached) otherwise.
fn counts_matrix<'s>(plan: &Plan, sizes: &'s LaunchSizes) -> Option<&'s [Vec<u64>]> {
    let m = sizes.counts.as_deref()?;
    let p = plan.group_size as usize;
    (m.len() == p && m.iter().all(|r| r.len() == p)).then_some(m)
}

fn resolve(
    plan: &Plan,
    me: Rank,
    sizes: &LaunchSizes,
    key: Option<Vec<u64>>,
    opts: &ExecOptions,
) -> Result<Resolved, ExecError> {
    let p = plan.group_size;
    let bufs = &plan.buffers;
    let span = |r: &symsched_plan::Region, on: Rank| -> Result<(RReg, u64), ExecError> {
        let s = bufs[r.buffer as usize].region_span(r.first, r.count, on, sizes)?;
        Ok((
            RReg {
                buf: r.buffer,
                elem: s.offset,
            },
            s.len,
        ))
    };
    let fits = |need: u64, have: u64, id: u32| -> Result<(), ExecError> {
        if have < need {
            return Err(symsched_plan::PlanError::Inconsistent(format!(
                "step {id} moves {need} elements into a region of {have}"
            ))
            .into());
        }
        Ok(())
    };
    let var = |name: &str| -> Result<u64, ExecError> {
        sizes
            .vars
            .get(name)
            .copied()
            .ok_or_else(|| symsched_plan::PlanError::UnboundSize(name.into()).into())
    };
    let mut steps = Vec::with_capacity(plan.ranks[me as usize].steps.len());
    let mut host_ordinal = 0u32;
    for step in &plan.ranks[me as usize].steps {
        let id = step.id;
        steps.push(match &step.op {
            Op::Put {
                src,
                dst,
                peer,
                signal,
            } => {
                let (s, n) = span(src, me)?;
                let (d, cap) = span(dst, *peer)?;
                fits(n, cap, id)?;
                RStep::Put {
                    src: s,
                    dst: d,
                    peer: *peer,
                    n,
                    signal: *signal,
                }
            }
            Op::Get { src, dst, peer } => {
                let (s, n) = span(src, *peer)?;
                let (d, cap) = span(dst, me)?;
                fits(n, cap, id)?;
                RStep::Get {
                    src: s,
                    dst: d,
                    peer: *peer,
                    n,
                }
            }
            Op::Signal { update } => RStep::Signal(*update),
            Op::Wait { slot, cmp, target } => RStep::Wait {
                slot: *slot,
                cmp: *cmp,
                target: *target,
                id,
            },
            Op::Reduce { dst, srcs } => {
                let (d, n) = span(dst, me)?;
                let mut rs = Vec::with_capacity(srcs.len());
                for s in srcs {
                    let (r, len) = span(s, me)?;
                    fits(n, len, id)?;
                    rs.push(r);
                }
                RStep::Reduce {
                    dst: d,
                    srcs: rs,
                    n,
                }
            }
            Op::Copy { src, dst } | Op::Cast { src, dst } => {
                let (s, n) = span(src, me)?;
                let (d, cap) = span(dst, me)?;
                fits(n, cap, id)?;
                RStep::Copy { src: s, dst: d, n }
            }
            Op::Matmul { c, a, b } => {
                let (m, k, n) = (var("m")?, var("k")?, var("n")?);
                let (cr, cl) = span(c, me)?;
                let (ar, al) = span(a, me)?;
                let (br, bl) = span(b, me)?;
                fits(m * n, cl, id)?;
                fits(m * k, al, id)?;
                fits(k * n, bl, id)?;
                RStep::Matmul {
                    c: cr,
                    a: ar,
                    b: br,
                    m,
                    k,
                    n,
                }
            }
            Op::HostColl {
                op,
                region,
                members,
            } => {
                let (r, n) = span(region, me)?;
                host_ordinal += 1;
                RStep::HostColl {
                    op: *op,
                    reg: r,
                    n,
                    members: members.clone(),
                    ordinal: host_ordinal - 1,
                }
            }
        });
    }
    let mut my_len = Vec::with_capacity(bufs.len());
    let mut max_len = Vec::with_capacity(bufs.len());
    for b in bufs {
        my_len.push(b.total_len(me, sizes)?);
        let mut mx = 0;
        for r in 0..p {
            mx = mx.max(b.total_len(r, sizes)?);
        }
        max_len.push(mx);
    }
    let prog = &plan.ranks[me as usize];
    let (steps, plan_index, channels) = by_channel(steps, prog);
    let (chain, get_folds) = if opts.fuse {
        let mut chain = Vec::with_capacity(steps.len());
        for c in &channels {
            chain.extend(fuse::reduce_chains(&steps[c.steps.clone()], me));
        }
        let folds = if channels.len() > 1 {
            channel_folds(plan, &steps, &channels, me, &chain)
        } else {
            fuse_get::get_folds(plan, &steps, me, &chain)
        };
        (chain, folds)
    } else {
        (vec![0; steps.len()], GetFolds::default())
    };
    let nt = if opts.nt_copy {
        let mut nt = Vec::with_capacity(steps.len());
        for c in &channels {
            let r = c.steps.clone();
            nt.extend(streaming::nt_steps(plan, &steps[r.clone()], &chain[r]));
        }
        nt
    } else {
        vec![false; steps.len()]
    };
    Ok(Resolved {
        key,
        serial: next_serial(),
        steps,
        my_len,
        max_len,
        chain,
        get_folds,
        nt,
        channels,
        plan_index,
    })
}

/// A resolution number not given before in this process ([`Resolved::serial`]).
fn next_serial() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Group the resolved steps (in plan order) by channel: channel order, plan order within a
/// channel. Returns the regrouped steps, each one's plan index, and each non-empty channel's
/// range. A single-channel rank keeps its order (nothing moves).
fn by_channel(
    steps: Vec<RStep>,
    prog: &symsched_plan::RankProgram,
) -> (Vec<RStep>, Vec<u32>, Vec<ChannelSteps>) {
    let channel = |i: usize| prog.steps.get(i).map_or(0, |s| s.channel);
    let mut order: Vec<u32> = (0..steps.len() as u32).collect();
    // Stable: plan order holds within a channel.
    order.sort_by_key(|&i| channel(i as usize));
    let mut channels: Vec<ChannelSteps> = Vec::new();
    for (pos, &i) in order.iter().enumerate() {
        let c = channel(i as usize);
        match channels.last_mut() {
            Some(last) if last.channel == c => last.steps.end = pos + 1,
            _ => channels.push(ChannelSteps {
                channel: c,
                steps: pos..pos + 1,
            }),
        }
    }
    if channels.len() <= 1 {
        return (steps, order, channels);
    }
    let mut slots: Vec<Option<RStep>> = steps.into_iter().map(Some).collect();
    let grouped = order
        .iter()
        .map(|&i| {
            slots[i as usize]
                .take()
                .expect("a permutation takes each step once")
        })
        .collect();
    (grouped, order, channels)
}

/// The get-fold pass of a multi-channel rank: run within each channel, with the other
/// channels' steps as concurrent ones (a landing region any of them touches stays a get, since
/// such a step may run at any point of the channel's sequence).
fn channel_folds(
    plan: &Plan,
    steps: &[RStep],
    channels: &[ChannelSteps],
    me: Rank,
    chain: &[u32],
) -> GetFolds {
    let mut out = GetFolds::default();
    for c in channels {
        let r = c.steps.clone();
        let others: Vec<RStep> = channels
            .iter()
            .filter(|o| o.channel != c.channel)
            .flat_map(|o| steps[o.steps.clone()].iter().cloned())
            .collect();
        let f = fuse_get::get_folds_among(plan, &steps[r.clone()], &others, me, &chain[r.clone()]);
        for i in 0..r.len() {
            if f.folded(i) {
                out.folded.resize(steps.len(), false);
                out.folded[r.start + i] = true;
            }
            if !f.pulls(i).is_empty() {
                out.pulls.resize(steps.len(), Vec::new());
                out.pulls[r.start + i] = f.pulls(i).to_vec();
            }
        }
    }
    out
}

#[cfg(test)]
mod channel_tests {
    //! The passes decide within one channel: steps are grouped by channel, and a chain or fold
    //! never takes a step of another channel.

    use super::*;
    use crate::exec::harness::sizes_for;
    use crate::exec::test_plans::standard;

    fn plan(name: &str) -> Plan {
        standard(name, 2)
    }

    fn resolved(plan: &Plan) -> Resolved {
        let sizes = sizes_for(plan, 64, &[]);
        resolve(plan, 0, &sizes, None, &ExecOptions::default()).expect("resolves")
    }

    #[test]
    fn a_single_channel_resolves_in_plan_order() {
        // Rank 0 of the two-shot: wait, put, wait, reduce, put (fused into the reduce), wait.
        let p = plan("allreduce_two_shot");
        let r = resolved(&p);
        assert_eq!(r.chain, [0, 0, 0, 1, 0, 0]);
        assert_eq!(r.plan_index, [0, 1, 2, 3, 4, 5]);
        assert_eq!(
            r.channels,
            [ChannelSteps {
                channel: 0,
                steps: 0..6
            }]
        );
        assert!(!r.multi_channel());
    }

    #[test]
    fn a_reduce_chain_stops_at_its_channel() {
        // The push after the reduce moved to channel 1: channel 0 is wait, put, wait, reduce,
        // wait; channel 1 the push alone. The reduce is last-but-one of its channel and the
        // wait after it ends its chain.
        let mut p = plan("allreduce_two_shot");
        p.ranks[0].steps[4].channel = 1;
        let r = resolved(&p);
        assert_eq!(r.plan_index, [0, 1, 2, 3, 5, 4]);
        assert_eq!(
            r.channels,
            [
                ChannelSteps {
                    channel: 0,
                    steps: 0..5
                },
                ChannelSteps {
                    channel: 1,
                    steps: 5..6
                }
            ]
        );
        assert!(matches!(r.steps[3], RStep::Reduce { .. }));
        assert!(matches!(r.steps[5], RStep::Put { .. }));
        assert_eq!(r.chain, [0; 6]);
        assert!(r.multi_channel());
        // Both on channel 1 (the rest on 0): the chain forms again, inside channel 1.
        p.ranks[0].steps[3].channel = 1;
        let r = resolved(&p);
        assert_eq!(r.plan_index, [0, 1, 2, 5, 3, 4]);
        let places: Vec<Option<usize>> = (0..7).map(|i| r.position_of(i)).collect();
        assert_eq!(
            places,
            [0, 1, 2, 4, 5, 3]
                .map(Some)
                .into_iter()
                .chain([None])
                .collect::<Vec<_>>()
        );
        assert_eq!(r.chain, [0, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn a_get_folds_only_into_a_reduce_of_its_channel() {
        // Rank 0 of the pull two-shot: wait, signal, wait, get, reduce, put, wait; the get
        // folds into the reduce.
        let mut p = plan("allreduce_two_shot_pull");
        let r = resolved(&p);
        assert!(r.get_folds.folded(3));
        assert_eq!(r.get_folds.pulls(4).len(), 1);
        // The get on channel 1: another channel's step, kept as a get.
        p.ranks[0].steps[3].channel = 1;
        let r = resolved(&p);
        assert!(
            (0..r.steps.len()).all(|i| !r.get_folds.folded(i) && r.get_folds.pulls(i).is_empty())
        );
        // Get and reduce on channel 1, a step touching the landing slot on channel 0: kept.
        p.ranks[0].steps[4].channel = 1;
        let r = resolved(&p);
        let (g, red) = (r.position_of(3), r.position_of(4));
        assert_eq!((g, red), (Some(5), Some(6)));
        assert!(r.get_folds.folded(5), "the fold holds within channel 1");
        let RStep::Get { dst: land, n, .. } = r.steps[5] else {
            panic!("step 5 is the get");
        };
        let mut steps = r.steps.clone();
        steps[0] = RStep::Copy {
            src: land,
            dst: RReg { buf: 0, elem: 0 },
            n,
        };
        let chans = r.channels.clone();
        let f = channel_folds(&p, &steps, &chans, 0, &r.chain);
        assert!(!f.folded(5), "a concurrent step reads the landing slot");
    }
}
