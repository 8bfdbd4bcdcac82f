//! The interpreter: runs one rank's resolved steps one after the other, each step a call into
//! the conversion, reduction, matmul and copy kernels, and the reference every other backend is
//! compared with.
//!
//! **Fusion.** A reduce runs together with the consumers the reduce-chain pass fused into it
//! ([`Resolved::chain`]): block by block, each finished block is handed to the puts, casts and
//! one-operand reduces after it while still in cache; gets the get-fold pass folded
//! ([`Resolved::get_folds`]) are not run, and the reduce reads their sources on the peers
//! instead. Plain moves the streaming pass marked ([`Resolved::nt`]) use non-temporal stores
//! from [`ExecOptions::nt_min_bytes`] on.
//!
//! **Channels.** A rank whose steps run on one channel runs them on the calling thread, as
//! always. With several ([`Resolved::channels`]), the shared runner ([`super::channels`]) runs
//! each channel's sequence concurrently with its own scratch; a failing channel cancels the
//! others through the launch's [`LaunchCancel`] (looked at before each step and inside each
//! wait), and the launch returns the first real failure in channel order.
//!
//! [`Resolved::chain`]: crate::exec::resolved::Resolved::chain
//! [`Resolved::channels`]: crate::exec::resolved::Resolved::channels
//! [`Resolved::get_folds`]: crate::exec::resolved::Resolved::get_folds
//! [`Resolved::nt`]: crate::exec::resolved::Resolved::nt
//! [`ExecOptions::nt_min_bytes`]: crate::config::ExecOptions::nt_min_bytes

use super::{channels, Backend, StepContext, Steps};
use crate::exec::cancel::LaunchCancel;
use crate::exec::dtype::{convert, DType};
use crate::exec::error::ExecError;
use crate::exec::fabric::Fabric;
use crate::exec::hostcoll::HostCollRequest;
use crate::exec::matmul;
use crate::exec::reduce::{convert_via_acc, reduce_raw, reduce_raw_then, Operand};
use crate::exec::resolved::{ChannelSteps, RStep};
use crate::exec::stream_copy;
use crate::exec::trace;

/// The interpreter backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct Interpreter;

/// Scratch the interpreter reuses across launches of one plan, so a launch allocates nothing:
/// one set for a single-channel rank, and one per channel of a multi-channel rank.
#[derive(Default)]
pub struct InterpState {
    main: Scratch,
    channels: channels::Workers<Scratch>,
}

/// What one channel's sequence needs between steps.
#[derive(Default)]
struct Scratch {
    operands: Vec<Operand>,
    /// The consumers of a fused reduce.
    links: Vec<Link>,
    /// Accumulator rows of the built-in matmul.
    mm: Vec<f64>,
}

/// One fused consumer of a reduce, resolved to addresses for a launch: convert each finished
/// block from `src` into `dst` (a peer's memory for a put, local for a copy or a one-operand
/// reduce).
#[derive(Debug, Clone, Copy)]
struct Link {
    src: *const u8,
    src_dtype: DType,
    dst: *mut u8,
    dst_dtype: DType,
    /// A one-operand reduce: convert through the accumulator as the reduce does (which, unlike
    /// a same-type copy, quiets NaNs), not with a plain conversion.
    via_acc: bool,
}

// SAFETY: addresses into symmetric memory, only dereferenced by the launch that resolved them
// while it holds the plan's state lock (the same rule as reduce operands).
unsafe impl Send for Link {}

impl Backend for Interpreter {
    type PlanState = InterpState;

    #[inline]
    fn run<F: Fabric>(
        &self,
        ctx: &StepContext<'_, F>,
        state: &mut InterpState,
        part: Steps<'_>,
    ) -> Result<(), ExecError> {
        let len = ctx.resolved.steps.len();
        match part {
            Steps::All if !ctx.resolved.multi_channel() => {
                run_channel(ctx, &mut state.main, 0..len, None, false)
            }
            Steps::All => run_channels(ctx, state),
            Steps::Speculating { prefix, check } if !ctx.resolved.multi_channel() => {
                let n = prefix.min(len);
                run_channel(ctx, &mut state.main, 0..n, None, true)?;
                check()?;
                if n < len {
                    run_channel(ctx, &mut state.main, n..len, None, false)?;
                }
                Ok(())
            }
            Steps::Speculating { .. } => Err(ExecError::Runtime(
                "a speculative launch on a rank with several channels".into(),
            )),
        }
    }
}

/// A multi-channel rank: each channel's sequence with its own scratch, on the shared runner
/// ([`channels::run`]: a worker per further channel, cancel on failure, first real failure in
/// channel order).
fn run_channels<F: Fabric>(
    ctx: &StepContext<'_, F>,
    state: &mut InterpState,
) -> Result<(), ExecError> {
    // Sharing: the workers get `&StepContext`, which is `Sync` without any new `unsafe impl`
    // (the fabric is `Send + Sync` by its trait, the launch memory, signals, plan and trace are
    // shared references to `Sync` data, the host library is `Sync` by its trait); each worker
    // owns its `Scratch`, whose addresses are `Send` under the rule on `Link`.
    channels::run(
        ctx.fabric.rank(),
        &ctx.resolved.channels,
        &mut state.channels,
        |scratch: &mut Scratch, c: &ChannelSteps, cancel: &LaunchCancel| {
            run_channel(
                ctx,
                scratch,
                c.steps.clone(),
                Some((cancel, c.channel)),
                false,
            )
        },
    )
}

/// Run steps `range` of the resolved list (one channel's sequence) in order. `cancel`: the
/// launch's cancel word and this channel, for a multi-channel rank (`None`: the only channel,
/// nothing extra on the hot path). `skip_waits`: a speculative prefix, whose waits are exit
/// credits that the check of the last agreed launch already made unnecessary.
#[inline]
fn run_channel<F: Fabric>(
    ctx: &StepContext<'_, F>,
    state: &mut Scratch,
    range: std::ops::Range<usize>,
    cancel: Option<(&LaunchCancel, u32)>,
    skip_waits: bool,
) -> Result<(), ExecError> {
    let (plan, res, mem, tr) = (ctx.plan, ctx.resolved, ctx.memory, ctx.trace);
    let me = ctx.fabric.rank();
    // A plain move of `n` elements: streamed past the cache when step `si` qualifies.
    let mv = |si: usize, sd: DType, s: *mut u8, dd: DType, d: *mut u8, n: u64| {
        let bytes = n as usize * sd.size();
        if sd == dd
            && bytes >= ctx.opts.nt_min_bytes
            && !std::ptr::eq(s, d)
            && res.nt.get(si).copied().unwrap_or(false)
        {
            // SAFETY: both ranges were bounds-checked for `n` elements of this type, and
            // distinct regions of moves never overlap (as `convert` assumes).
            unsafe { stream_copy::copy(d, s, bytes) };
        } else {
            // SAFETY: both ranges are bounds-checked heap ranges; distinct buffers or
            // ranks, or the identical range (a self-put), which `convert` allows.
            unsafe { convert(sd, s, dd, d, n as usize) };
        }
    };
    let my_steps = &plan.ranks[me as usize].steps;
    // Steps still to pass over because they ran fused into the reduce before them.
    let mut skip = 0usize;
    for si in range {
        let Some(step) = res.steps.get(si) else {
            break;
        };
        if let Some((c, channel)) = cancel {
            c.check(channel)?;
        }
        let t0 = tr.as_ref().map(|_| std::time::Instant::now());
        if skip > 0 {
            skip -= 1;
        } else {
            match step {
                RStep::Put {
                    src,
                    dst,
                    peer,
                    n,
                    signal,
                } => {
                    let (s, sd) = mem.ptr(me, src, *n)?;
                    let (d, dd) = mem.ptr(*peer, dst, *n)?;
                    mv(si, sd, s, dd, d, *n);
                    if let Some(u) = signal {
                        ctx.signals.send(ctx.fabric, u)?;
                    }
                }
                // Read by the reduce it feeds, straight from the peer.
                RStep::Get { .. } if res.get_folds.folded(si) => {}
                RStep::Get { src, dst, peer, n } => {
                    let (s, sd) = mem.ptr(*peer, src, *n)?;
                    let (d, dd) = mem.ptr(me, dst, *n)?;
                    mv(si, sd, s, dd, d, *n);
                }
                RStep::Signal(u) => ctx.signals.send(ctx.fabric, u)?,
                RStep::Wait {
                    slot,
                    cmp,
                    target,
                    id,
                } => {
                    if !skip_waits {
                        ctx.signals
                            .wait_in(ctx.fabric, plan, *slot, *cmp, *target, *id, cancel)?;
                    }
                }
                RStep::Reduce { dst, srcs, n } => {
                    let (d, dd) = mem.ptr(me, dst, *n)?;
                    state.operands.clear();
                    for s in srcs {
                        let (p, dt) = mem.ptr(me, s, *n)?;
                        state.operands.push(Operand { ptr: p, dtype: dt });
                    }
                    for pull in res.get_folds.pulls(si) {
                        let (p, dt) = mem.ptr(pull.peer, &pull.src, *n)?;
                        state.operands[pull.operand] = Operand { ptr: p, dtype: dt };
                    }
                    let fused = res.chain.get(si).copied().unwrap_or(0) as usize;
                    if fused == 0 {
                        // SAFETY: all ranges checked; the verifier guarantees `dst` is either
                        // one of the operands or disjoint from all of them.
                        unsafe {
                            reduce_raw(ctx.types.acc, ctx.op, d, dd, &state.operands, *n as usize)?
                        };
                    } else {
                        state.links.clear();
                        for next in &res.steps[si + 1..=si + fused] {
                            let (src, dst, peer, via_acc) = match next {
                                    RStep::Put { src, dst, peer, .. } => (src, dst, *peer, false),
                                    RStep::Copy { src, dst, .. } => (src, dst, me, false),
                                    RStep::Reduce { srcs, dst, .. } => (&srcs[0], dst, me, true),
                                    _ => unreachable!(
                                        "fuse::reduce_chains admits puts, copies and one-operand reduces only"
                                    ),
                                };
                            let (sp, sd) = mem.ptr(me, src, *n)?;
                            let (dp, ddt) = mem.ptr(peer, dst, *n)?;
                            state.links.push(Link {
                                src: sp as *const u8,
                                src_dtype: sd,
                                dst: dp,
                                dst_dtype: ddt,
                                via_acc,
                            });
                        }
                        let links = &state.links;
                        // SAFETY: as above for the reduce; every link range was checked for `n`
                        // elements, and `fuse::reduce_chains` admitted only links that write
                        // outside every local operand and the destination (peer memory or
                        // disjoint local regions), reading blocks the reduce (or an earlier link)
                        // has just made final. A link may write a peer operand of a folded get
                        // only as the identical region (`fuse_get`): block by block, after the
                        // reduce has read it. A fused one-operand reduce may also rewrite exactly
                        // a region the chain produced (the destination included), only within
                        // the block `reduce_raw_then` has finished.
                        unsafe {
                            reduce_raw_then(
                                ctx.types.acc,
                                ctx.op,
                                d,
                                dd,
                                &state.operands,
                                *n as usize,
                                &mut |first, len| {
                                    for l in links {
                                        let src = l.src.add(first * l.src_dtype.size());
                                        let dst = l.dst.add(first * l.dst_dtype.size());
                                        if l.via_acc {
                                            convert_via_acc(
                                                ctx.types.acc,
                                                src,
                                                l.src_dtype,
                                                dst,
                                                l.dst_dtype,
                                                len,
                                            );
                                        } else {
                                            convert(l.src_dtype, src, l.dst_dtype, dst, len);
                                        }
                                    }
                                },
                            )?
                        };
                        // Each put's signal follows all of its data, as unfused.
                        for next in &res.steps[si + 1..=si + fused] {
                            if let RStep::Put {
                                signal: Some(u), ..
                            } = next
                            {
                                ctx.signals.send(ctx.fabric, u)?;
                            }
                        }
                        skip = fused;
                    }
                }
                RStep::Copy { src, dst, n } => {
                    let (s, sd) = mem.ptr(me, src, *n)?;
                    let (d, dd) = mem.ptr(me, dst, *n)?;
                    mv(si, sd, s, dd, d, *n);
                }
                RStep::Matmul { c, a, b, m, k, n } => {
                    let (cp, cd) = mem.ptr(me, c, m * n)?;
                    let (ap, ad) = mem.ptr(me, a, m * k)?;
                    let (bp, bd) = mem.ptr(me, b, k * n)?;
                    let mm = matmul::MatmulStep {
                        c: (cp, cd),
                        a: (ap, ad),
                        b: (bp, bd),
                        m: *m as usize,
                        k: *k as usize,
                        n: *n as usize,
                    };
                    // SAFETY: the three ranges were just bounds-checked for their element counts.
                    unsafe { matmul::run(&mm, &mut state.mm)? };
                }
                RStep::HostColl {
                    op,
                    reg,
                    n,
                    members,
                    ordinal,
                } => {
                    let (p, dt) = mem.ptr(me, reg, *n)?;
                    let len = *n as usize * dt.size();
                    // SAFETY: checked local heap range; no peer touches it during a host
                    // collective (the verifier forbids mixing shmem traffic on it).
                    let data = unsafe { std::slice::from_raw_parts_mut(p, len) };
                    let req = HostCollRequest {
                        op: *op,
                        data,
                        dtype: dt,
                        wire: ctx.types.wire,
                        acc: ctx.types.acc,
                        reduce: ctx.op,
                        members,
                        key: ctx.key,
                        ordinal: *ordinal,
                    };
                    ctx.host_collective(req)?;
                }
            }
        }
        let ps = res
            .plan_index
            .get(si)
            .and_then(|&i| my_steps.get(i as usize));
        if let (Some(tr), Some(t0), Some(ps)) = (&tr, t0, ps) {
            let size = trace::written_buffer(&ps.op).map_or(0, |b| {
                ctx.types.of(plan.buffers[b as usize].elem).size() as u64
            });
            tr.step(ps, step.elems() * size, t0);
        }
    }
    Ok(())
}
