//! The element loops: one internal function per pass *shape* (its steps' operations over
//! numbered streams, their dtypes, which writes are dead), called from the kernel with the
//! pass's addresses and element count. Plans repeat shapes (every step of a ring, every peer of
//! an alltoall), so a module holds a handful of loops however many steps the rank has, and LLVM
//! optimises and vectorises each once.
//!
//! A loop body runs the pass's steps for element `i` in program order ([`super::fusion`] proved
//! that equivalent to running them one after the other): values written by a step stay in
//! registers for the steps after it, each stream is loaded at most once per element, and dead
//! writes are not stored. Distinct streams never overlap where one is written (identical places
//! are one stream), so their pointers are `noalias` and the loops vectorise without run-time
//! overlap checks. Loads and stores are unaligned (staged user memory may be).

use super::extents::Extents;
use super::fusion::Pass;
use super::numeric::storage;
use super::{Cg, Fault};
use crate::{DType, JitError};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::module::Linkage;
use inkwell::types::{BasicMetadataTypeEnum, BasicType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValue, BasicValueEnum, FunctionValue, IntValue, PointerValue,
};
use inkwell::IntPredicate;
use symsched_plan::{Op, Rank, Region};

type R<T> = Result<T, JitError>;

/// One step of a loop body over numbered streams.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ElemOp {
    /// `dst[i] = convert(src[i])`.
    Move { src: usize, dst: usize },
    /// `dst[i] = fold(srcs[0][i], srcs[1][i], …)` in the accumulator.
    Fold { dst: usize, srcs: Vec<usize> },
}

/// A pass's loop, without addresses: what one helper function computes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Shape {
    ops: Vec<ElemOp>,
    dtypes: Vec<DType>,
    dead: Vec<bool>,
    noalias: bool,
    /// A scalar loop over `start..end` (the tail of a step in a pass of unequal counts).
    tail: bool,
}

impl Shape {
    fn key(&self, cg: &Cg<'_, '_>) -> String {
        format!(
            "{:?}|{}|{}|{:?}",
            self, cg.spec.types.acc, cg.spec.op, cg.opts.fault
        )
    }
}

/// A place a pass touches, with its address.
struct Stream<'ctx> {
    rank: Rank,
    region: Region,
    dtype: DType,
    ptr: PointerValue<'ctx>,
}

/// Emit pass `p` at the current position of the kernel.
pub(crate) fn pass<'ctx>(cg: &Cg<'ctx, '_>, ext: &Extents<'ctx>, p: &Pass) -> R<()> {
    let plan = cg.plan();
    let me = cg.me();
    let steps = &plan.ranks[me as usize].steps;
    let mut streams: Vec<Stream<'ctx>> = Vec::new();
    // Addresses, checked for each count they are used with (a guarded pass may run steps of
    // different counts over the same place).
    let mut checked: Vec<(usize, IntValue<'ctx>)> = Vec::new();
    let mut per_step: Vec<(ElemOp, Vec<usize>, IntValue<'ctx>)> = Vec::new();
    for &si in &p.steps {
        let step = &steps[si];
        let n = ext.moved(si);
        let mut stream = |rank: Rank, region: &Region| -> R<usize> {
            let at = match streams
                .iter()
                .position(|s| s.rank == rank && s.region == *region)
            {
                Some(at) => at,
                None => {
                    let ptr = cg.region_ptr(ext, rank, region, n, step.id)?;
                    let dtype = cg.spec.types.of(plan.buffers[region.buffer as usize].elem);
                    streams.push(Stream {
                        rank,
                        region: *region,
                        dtype,
                        ptr,
                    });
                    checked.push((streams.len() - 1, n));
                    streams.len() - 1
                }
            };
            if !checked.contains(&(at, n)) {
                cg.region_ptr(ext, rank, region, n, step.id)?;
                checked.push((at, n));
            }
            Ok(at)
        };
        let (op, used) = match &step.op {
            Op::Put { src, dst, peer, .. } => {
                let s = stream(me, src)?;
                let d = stream(*peer, dst)?;
                (ElemOp::Move { src: s, dst: d }, vec![s, d])
            }
            Op::Get { src, dst, peer } => {
                let s = stream(*peer, src)?;
                let d = stream(me, dst)?;
                (ElemOp::Move { src: s, dst: d }, vec![s, d])
            }
            Op::Copy { src, dst } | Op::Cast { src, dst } => {
                let s = stream(me, src)?;
                let d = stream(me, dst)?;
                (ElemOp::Move { src: s, dst: d }, vec![s, d])
            }
            Op::Reduce { dst, srcs } => {
                // The interpreter addresses the destination first.
                let d = stream(me, dst)?;
                let mut ss = Vec::with_capacity(srcs.len());
                for s in srcs {
                    ss.push(stream(me, s)?);
                }
                let mut used = ss.clone();
                used.push(d);
                (ElemOp::Fold { dst: d, srcs: ss }, used)
            }
            _ => unreachable!("passes hold element-wise steps only"),
        };
        per_step.push((op, used, n));
    }
    let dead: Vec<bool> = streams
        .iter()
        .map(|s| {
            p.dead
                .iter()
                .any(|d| d.rank == s.rank && d.region == s.region)
        })
        .collect();
    let fused = Shape {
        ops: per_step.iter().map(|(op, _, _)| op.clone()).collect(),
        dtypes: streams.iter().map(|s| s.dtype).collect(),
        dead,
        noalias: !p.may_alias,
        tail: false,
    };
    // Every address of the pass is checked before any data moves.
    cg.flush()?;
    let Some(unread) = plain_moves(cg, p, &streams, &per_step) else {
        return fused_pass(cg, p, &fused, &streams, &per_step);
    };
    // Plain moves, some into buffers no step reads: when one of those is at least the
    // threshold long, the moves run one after the other in program order (the unfused
    // semantics), each of those through the runtime's non-temporal copy when it is that long
    // itself and a `memcpy` otherwise, as the interpreter runs them; below it, the fused loop.
    let mut big_any: Option<IntValue<'ctx>> = None;
    let mut moves = Vec::new();
    let mut sized: Vec<(IntValue<'ctx>, u64, IntValue<'ctx>)> = Vec::new();
    for ((op, _, n), unread) in per_step.iter().zip(&unread) {
        let ElemOp::Move { src, dst } = op else {
            unreachable!("checked by plain_moves")
        };
        let size = streams[*src].dtype.size() as u64;
        let bytes = match sized.iter().find(|(m, s, _)| m == n && *s == size) {
            Some((_, _, b)) => *b,
            None => {
                let b = cg.mul_k(*n, size)?;
                sized.push((*n, size, b));
                b
            }
        };
        let big = if *unread {
            let long =
                cg.b.build_int_compare(IntPredicate::UGE, bytes, cg.nt_min_bytes, "")?;
            let apart =
                cg.b.build_int_compare(IntPredicate::NE, streams[*src].ptr, streams[*dst].ptr, "")?;
            let big = cg.b.build_and(long, apart, "")?;
            big_any = Some(match big_any {
                None => big,
                Some(o) => cg.b.build_or(o, big, "")?,
            });
            Some(big)
        } else {
            None
        };
        moves.push((*src, *dst, bytes, big));
    }
    let (nt, loop_, join) = (cg.block("stream"), cg.block("fused"), cg.block("moved"));
    cg.b.build_conditional_branch(big_any.expect("a move into an unread buffer"), nt, loop_)?;
    cg.b.position_at_end(nt);
    for (src, dst, bytes, big) in moves {
        let (d, s) = (streams[dst].ptr, streams[src].ptr);
        let Some(big) = big else {
            memcpy(&cg.b, d, s, bytes)?;
            continue;
        };
        let (streamed, cached, next) = (cg.block("nt"), cg.block("cached"), cg.block("next"));
        cg.b.build_conditional_branch(big, streamed, cached)?;
        cg.b.position_at_end(streamed);
        cg.call_void(cg.intr.copy_nt, &[d.into(), s.into(), bytes.into()])?;
        cg.b.build_unconditional_branch(next)?;
        cg.b.position_at_end(cached);
        memcpy(&cg.b, d, s, bytes)?;
        cg.b.build_unconditional_branch(next)?;
        cg.b.position_at_end(next);
    }
    cg.b.build_unconditional_branch(join)?;
    cg.b.position_at_end(loop_);
    fused_pass(cg, p, &fused, &streams, &per_step)?;
    cg.b.build_unconditional_branch(join)?;
    cg.b.position_at_end(join);
    Ok(())
}

/// `bytes` from `s` to `d`, unaligned (the places never overlap: distinct streams of a pass).
fn memcpy<'ctx>(
    b: &Builder<'ctx>,
    d: PointerValue<'ctx>,
    s: PointerValue<'ctx>,
    bytes: IntValue<'ctx>,
) -> R<()> {
    b.build_memcpy(d, 1, s, 1, bytes).map_err(JitError::llvm)?;
    Ok(())
}

/// For a pass of plain moves (no conversion, distinct places, nothing kept in registers) of
/// which at least one writes a buffer no step of any rank reads: per step, whether its
/// destination is such a buffer (the interpreter's streaming rule, `resolve/streaming.rs` in
/// the runtime, which decides per step). `None` for any other pass.
fn plain_moves(
    cg: &Cg<'_, '_>,
    p: &Pass,
    streams: &[Stream<'_>],
    per_step: &[(ElemOp, Vec<usize>, IntValue<'_>)],
) -> Option<Vec<bool>> {
    if !p.dead.is_empty() {
        return None;
    }
    let mut unread = Vec::with_capacity(per_step.len());
    for (op, _, _) in per_step {
        let ElemOp::Move { src, dst } = op else {
            return None;
        };
        let (s, d) = (&streams[*src], &streams[*dst]);
        if src == dst || s.dtype != d.dtype {
            return None;
        }
        unread.push(!cg.read_buffers[d.region.buffer as usize]);
    }
    unread.contains(&true).then_some(unread)
}

/// The pass as element loops: one fused loop, plus scalar tails when its steps' counts differ.
fn fused_pass<'ctx>(
    cg: &Cg<'ctx, '_>,
    p: &Pass,
    fused: &Shape,
    streams: &[Stream<'ctx>],
    per_step: &[(ElemOp, Vec<usize>, IntValue<'ctx>)],
) -> R<()> {
    let n0 = per_step[0].2;
    let all_ptrs: Vec<PointerValue<'ctx>> = streams.iter().map(|s| s.ptr).collect();
    // Keys that differ symbolically may still be one value here (both spell `c`): then
    // nothing needs a tail.
    if !p.guarded || per_step.iter().all(|(_, _, n)| *n == n0) {
        return call_loop(cg, fused, n0, &all_ptrs);
    }
    // Different symbolic counts: the fused loop runs over the elements every step has
    // (`0..min`), then each step alone over the rest of its own (`min..n`), in program order.
    // Element `i` of a place is touched either only by the fused loop (i < min) or only by the
    // tails, and the tails touch it in program order, so every location still sees the
    // steps' accesses in program order. The tails store every write (nothing is dead there)
    // and are unoptimised scalar loops (see `loop_fn`).
    let mut min = n0;
    let mut seen = vec![n0];
    for (_, _, n) in &per_step[1..] {
        if seen.contains(n) {
            continue;
        }
        seen.push(*n);
        let lt = cg.b.build_int_compare(IntPredicate::ULT, *n, min, "")?;
        min = cg.b.build_select(lt, *n, min, "")?.into_int_value();
    }
    call_loop(cg, fused, min, &all_ptrs)?;
    for (op, used, n) in per_step {
        // Renumber the step's streams 0.. in first-use order.
        let mut local: Vec<usize> = Vec::new();
        for u in used {
            if !local.contains(u) {
                local.push(*u);
            }
        }
        let idx = |g: &usize| local.iter().position(|l| l == g).expect("listed above");
        let op = match op {
            ElemOp::Move { src, dst } => ElemOp::Move {
                src: idx(src),
                dst: idx(dst),
            },
            ElemOp::Fold { dst, srcs } => ElemOp::Fold {
                dst: idx(dst),
                srcs: srcs.iter().map(idx).collect(),
            },
        };
        let shape = Shape {
            ops: vec![op],
            dtypes: local.iter().map(|g| streams[*g].dtype).collect(),
            dead: vec![false; local.len()],
            noalias: !p.may_alias,
            tail: true,
        };
        let ptrs: Vec<PointerValue<'ctx>> = local.iter().map(|g| streams[*g].ptr).collect();
        let f = loop_fn(cg, &shape)?;
        let mut args: Vec<BasicMetadataValueEnum<'ctx>> = vec![min.into(), (*n).into()];
        args.extend(ptrs.iter().map(|p| BasicMetadataValueEnum::from(*p)));
        cg.b.build_call(f, &args, "")?;
    }
    Ok(())
}

fn call_loop<'ctx>(
    cg: &Cg<'ctx, '_>,
    shape: &Shape,
    n: IntValue<'ctx>,
    ptrs: &[PointerValue<'ctx>],
) -> R<()> {
    if super::sync::is_const_zero(n) {
        return Ok(());
    }
    let f = loop_fn(cg, shape)?;
    let mut args: Vec<BasicMetadataValueEnum<'ctx>> = vec![n.into()];
    args.extend(ptrs.iter().map(|p| BasicMetadataValueEnum::from(*p)));
    cg.b.build_call(f, &args, "")?;
    Ok(())
}

/// The helper computing `shape`, created on first use.
fn loop_fn<'ctx>(cg: &Cg<'ctx, '_>, shape: &Shape) -> R<FunctionValue<'ctx>> {
    let key = shape.key(cg);
    if let Some(f) = cg.helpers.borrow().get(&key) {
        return Ok(*f);
    }
    let name = format!(
        "{}.{}",
        if shape.tail { "tail" } else { "pass" },
        cg.helpers.borrow().len()
    );
    let first = usize::from(shape.tail);
    let mut params: Vec<BasicMetadataTypeEnum<'ctx>> = vec![cg.t.i64.into(); first + 1];
    params.extend(
        shape
            .dtypes
            .iter()
            .map(|_| BasicMetadataTypeEnum::from(cg.t.ptr)),
    );
    let f = cg.module.add_function(
        &name,
        cg.ctx.void_type().fn_type(&params, false),
        Some(Linkage::Internal),
    );
    let attr = |name: &str| {
        cg.ctx
            .create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0)
    };
    f.add_attribute(AttributeLoc::Function, attr("nounwind"));
    if shape.tail {
        // Left unoptimised (the code generator's fast path): a tail is the part of a step
        // beyond the shortest count of its pass, which the standard schedules make empty or
        // garbage transport (the wire schedule's puts of a short chunk's full slot); optimising
        // the tails was 30 % of compiling the wire two-shot at P = 8.
        f.add_attribute(AttributeLoc::Function, attr("optnone"));
        f.add_attribute(AttributeLoc::Function, attr("noinline"));
    }
    let start = if shape.tail {
        let s = f.get_nth_param(0).expect("start").into_int_value();
        s.set_name("start");
        s
    } else {
        cg.i64c(0)
    };
    let n = f
        .get_nth_param(first as u32)
        .expect("count")
        .into_int_value();
    n.set_name(if shape.tail { "end" } else { "n" });
    let mut ptrs = Vec::new();
    for (k, _) in shape.dtypes.iter().enumerate() {
        let at = (first + 1 + k) as u32;
        let p = f
            .get_nth_param(at)
            .expect("one pointer per stream")
            .into_pointer_value();
        p.set_name(&format!("s{k}"));
        if shape.noalias {
            f.add_attribute(AttributeLoc::Param(at), attr("noalias"));
        }
        ptrs.push(p);
    }
    let b = cg.ctx.create_builder();
    let entry = cg.ctx.append_basic_block(f, "entry");
    let copy_outs = if shape.tail {
        Vec::new()
    } else {
        copy_outs(shape)
    };
    // Without copy-outs one loop over `start..n`; with them, that loop runs a block at a time
    // (`block_lo..block_hi`) and each block ends with the copy-outs' `memcpy`s.
    let blocks = (!copy_outs.is_empty()).then(|| cg.ctx.append_basic_block(f, "blocks"));
    let body = cg.ctx.append_basic_block(f, "loop");
    let copied = (!copy_outs.is_empty()).then(|| cg.ctx.append_basic_block(f, "copy_out"));
    let exit = cg.ctx.append_basic_block(f, "exit");
    b.position_at_end(entry);
    // Copy-out sources the pass does not keep ([`staged_copy_out`]) live a block at a time in
    // a buffer on the stack, which the block's `memcpy`s read while it is in L1.
    let mut staged: Vec<Option<PointerValue<'ctx>>> = vec![None; shape.dtypes.len()];
    for &(src, _) in &copy_outs {
        if staged_copy_out(shape, src) && staged[src].is_none() {
            let ty = storage(&cg.t, shape.dtypes[src]).array_type(COPY_OUT_BLOCK as u32);
            let buf = b.build_alloca(ty, &format!("stage{src}"))?;
            buf.as_instruction()
                .expect("an alloca")
                .set_alignment(64)
                .map_err(JitError::llvm)?;
            staged[src] = Some(buf);
        }
    }
    let empty = b.build_int_compare(IntPredicate::UGE, start, n, "empty")?;
    b.build_conditional_branch(empty, exit, blocks.unwrap_or(body))?;
    let (lo, hi, block_phi) = match blocks {
        None => (start, n, None),
        Some(blocks) => {
            b.position_at_end(blocks);
            let lo = b.build_phi(cg.t.i64, "block_lo")?;
            lo.add_incoming(&[(&start, entry)]);
            let lo_v = lo.as_basic_value().into_int_value();
            let full = b.build_int_nuw_add(lo_v, cg.i64c(COPY_OUT_BLOCK), "")?;
            let short = b.build_int_compare(IntPredicate::ULT, n, full, "")?;
            let hi = b.build_select(short, n, full, "block_hi")?.into_int_value();
            b.build_unconditional_branch(body)?;
            (lo_v, hi, Some((lo, blocks)))
        }
    };
    let loop_entry = block_phi.map_or(entry, |(_, blocks)| blocks);
    b.position_at_end(body);
    let i = b.build_phi(cg.t.i64, "i")?;
    i.add_incoming(&[(&lo, loop_entry)]);
    let iv = i.as_basic_value().into_int_value();
    let num = cg.numeric();
    let acc = cg.spec.types.acc;
    let mut env: Vec<Option<BasicValueEnum<'ctx>>> = vec![None; shape.dtypes.len()];
    let addr = |s: usize| -> R<PointerValue<'ctx>> {
        // SAFETY (of the generated code): `i < n` and the runtime checked `n` elements.
        Ok(unsafe { b.build_gep(storage(&cg.t, shape.dtypes[s]), ptrs[s], &[iv], "")? })
    };
    let load = |env: &mut Vec<Option<BasicValueEnum<'ctx>>>, s: usize| -> R<BasicValueEnum<'ctx>> {
        if let Some(v) = env[s] {
            return Ok(v);
        }
        let v = b.build_load(storage(&cg.t, shape.dtypes[s]), addr(s)?, "")?;
        v.as_instruction_value()
            .expect("a load")
            .set_alignment(1)
            .map_err(JitError::llvm)?;
        env[s] = Some(v);
        Ok(v)
    };
    let store =
        |env: &mut Vec<Option<BasicValueEnum<'ctx>>>, s: usize, v: BasicValueEnum<'ctx>| -> R<()> {
            env[s] = Some(v);
            if let Some(buf) = staged[s] {
                let k = b.build_int_nuw_sub(iv, lo, "")?;
                // SAFETY (of the generated code): `lo <= i < lo + COPY_OUT_BLOCK`.
                let at = unsafe { b.build_gep(storage(&cg.t, shape.dtypes[s]), buf, &[k], "")? };
                b.build_store(at, v)?;
            } else if !shape.dead[s] {
                let st = b.build_store(addr(s)?, v)?;
                st.set_alignment(1).map_err(JitError::llvm)?;
            }
            Ok(())
        };
    for op in &shape.ops {
        match op {
            ElemOp::Move { src, dst } if copy_outs.contains(&(*src, *dst)) => {
                // Stored by the block's `memcpy`; a later step reading `dst` gets the value
                // from the register (an earlier step computed `src`, so no load is emitted).
                env[*dst] = env[*src];
            }
            ElemOp::Move { src, dst } => {
                let v = load(&mut env, *src)?;
                let w = num.convert(&b, v, shape.dtypes[*src], shape.dtypes[*dst])?;
                store(&mut env, *dst, w)?;
            }
            ElemOp::Fold { dst, srcs } => {
                let order: Vec<usize> = if cg.opts.fault == Some(Fault::ReverseFold) {
                    srcs.iter().rev().copied().collect()
                } else {
                    srcs.clone()
                };
                let first = load(&mut env, order[0])?;
                let mut a = num.acc_load(&b, first, shape.dtypes[order[0]], acc)?;
                for s in &order[1..] {
                    let v = load(&mut env, *s)?;
                    let x = num.acc_load(&b, v, shape.dtypes[*s], acc)?;
                    a = num.fold(&b, cg.spec.op, acc, a, x)?;
                }
                let w = num.acc_store(&b, a, acc, shape.dtypes[*dst])?;
                store(&mut env, *dst, w)?;
            }
        }
    }
    let next = b.build_int_nuw_add(iv, cg.i64c(1), "next")?;
    let here = b.get_insert_block().expect("positioned");
    i.add_incoming(&[(&next, here)]);
    let done = b.build_int_compare(IntPredicate::EQ, next, hi, "done")?;
    b.build_conditional_branch(done, copied.unwrap_or(exit), body)?;
    if let (Some(copied), Some((lo_phi, blocks))) = (copied, block_phi) {
        b.position_at_end(copied);
        let len = b.build_int_nuw_sub(hi, lo, "block_len")?;
        // Byte offset and length of the block, per element size.
        let mut sized: Vec<(usize, IntValue<'ctx>, IntValue<'ctx>)> = Vec::new();
        for &(src, dst) in &copy_outs {
            let elem = shape.dtypes[dst].size();
            let (at, bytes) = match sized.iter().find(|(e, _, _)| *e == elem) {
                Some(&(_, at, bytes)) => (at, bytes),
                None => {
                    let size = cg.i64c(elem as u64);
                    let at = b.build_int_nuw_mul(lo, size, "")?;
                    let mut bytes = b.build_int_nuw_mul(len, size, "")?;
                    if cg.opts.fault == Some(Fault::ShortCopyOut) {
                        bytes = b.build_int_nuw_sub(bytes, size, "")?;
                    }
                    sized.push((elem, at, bytes));
                    (at, bytes)
                }
            };
            // SAFETY (of the generated code): the block lies within the `n` checked elements.
            let (d, s) = unsafe {
                (
                    b.build_gep(cg.ctx.i8_type(), ptrs[dst], &[at], "")?,
                    match staged[src] {
                        Some(buf) => buf,
                        None => b.build_gep(cg.ctx.i8_type(), ptrs[src], &[at], "")?,
                    },
                )
            };
            memcpy(&b, d, s, bytes)?;
        }
        let end = b.build_int_compare(IntPredicate::EQ, hi, n, "last_block")?;
        lo_phi.add_incoming(&[(&hi, copied)]);
        b.build_conditional_branch(end, exit, blocks)?;
    }
    b.position_at_end(exit);
    b.build_return(None)?;
    cg.helpers.borrow_mut().insert(key, f);
    Ok(f)
}

/// Elements per block of a loop with copy-outs: 4 KiB of f32, small enough that the block the
/// loop just wrote is still in L1 when its `memcpy` reads it (the interpreter's fused chains
/// hand blocks of the same size to their puts).
const COPY_OUT_BLOCK: u64 = 1024;

/// The moves of a loop body that copy, unconverted, a value an earlier step of the body
/// computed into a stream nothing else in the body writes: `(src, dst)` per move.
///
/// A blocked loop stores them with one `memcpy` per block instead of a store per element.
/// Measured at 2 ranks (`allreduce_two_shot`, whose owner folds its chunk and pushes it to the
/// peer in one pass): per-element stores into the peer's buffer made that pass ~25 % slower
/// than the interpreter's fold-a-block-then-copy-it, whose `memcpy` (glibc's string moves)
/// writes the peer's lines without reading them first. Equivalent to the unblocked loop: the
/// streams are distinct places (`noalias`), so element `i` of `dst` depends on element `i`
/// of `src` only, which no later step of the body rewrites; copying it at the end of its block
/// instead of at step `k` of element `i` reorders it only against other elements' accesses.
///
/// A dead `src` qualifies when [`staged_copy_out`] stages it.
///
/// Moves from a stream the body only reads (one source fed to several places, as in
/// `allgather_push`) stay per-element stores: blocked the same way, `allgather_push` at 2 ranks
/// across processes (`symsched run … --backend jit`) was 1.07–1.3× slower at 256 KiB–1 MiB
/// and 0.83–0.89× at 4 MiB, against even with per-element stores (`docs/llvm.md`).
fn copy_outs(shape: &Shape) -> Vec<(usize, usize)> {
    if !shape.noalias {
        return Vec::new();
    }
    let writes = |s: usize, ops: &[ElemOp]| {
        ops.iter().any(|op| match op {
            ElemOp::Move { dst, .. } | ElemOp::Fold { dst, .. } => *dst == s,
        })
    };
    let mut outs = Vec::new();
    for (k, op) in shape.ops.iter().enumerate() {
        let ElemOp::Move { src, dst } = op else {
            continue;
        };
        let (earlier, later) = (&shape.ops[..k], &shape.ops[k + 1..]);
        if src != dst
            && shape.dtypes[*src] == shape.dtypes[*dst]
            && !shape.dead[*dst]
            // The `memcpy` reads `src` from memory: stored, or staged on the stack.
            && (!shape.dead[*src] || staged_copy_out(shape, *src))
            && writes(*src, earlier)
            && !writes(*src, later)
            && !writes(*dst, earlier)
            && !writes(*dst, later)
        {
            outs.push((*src, *dst));
        }
    }
    outs
}

/// Whether stream `s`, a write the pass does not keep (dead), is staged in a block buffer on
/// the stack for its copy-outs instead of being stored element by element into their
/// destinations: for elements of 4 bytes or more.
///
/// Measured on the wire two-shot's pushes of its reduced chunk (dead since the fusion analysis
/// decides dead writes per place; `jit_backend` profile mode, 2 ranks, µs per launch, three
/// turns each, per-element stores against staged): f32 on the wire 2.57–2.68 against 2.08–2.24
/// at 4 KiB, 650–680 against 588–626 at 4 MiB (per-element stores into the peer's lines cost
/// what they cost the f32 two-shot, see [`copy_outs`]); bf16 on the wire 1.69–1.84 against
/// 1.92–2.03 at 4 KiB, 132–150 against 143–155 at 1 MiB, and the same within noise at
/// 16 MiB: its 2-byte stores gain nothing from the block copy, which then only adds a pass
/// over L1 and a `memcpy` call per block.
fn staged_copy_out(shape: &Shape, s: usize) -> bool {
    shape.dead[s] && shape.dtypes[s].size() >= 4
}

/// The `avg` post-pass over role buffer `buf`: every element divided by P in the
/// accumulator (the interpreter's `scale_avg`), skipped when the buffer is empty.
pub(crate) fn scale_avg<'ctx>(cg: &Cg<'ctx, '_>, ext: &Extents<'ctx>, buf: u32) -> R<()> {
    let plan = cg.plan();
    let decl = &plan.buffers[buf as usize];
    let dt = cg.spec.types.of(decl.elem);
    let total = ext.total(buf);
    let (run, skip) = (cg.block("avg"), cg.block("avg.done"));
    let nonempty =
        cg.b.build_int_compare(IntPredicate::NE, total, cg.i64c(0), "")?;
    cg.b.build_conditional_branch(nonempty, run, skip)?;
    cg.b.position_at_end(run);
    // The whole buffer on this rank as one region for the address check.
    let size = cg.i64c(dt.size() as u64);
    let len = cg.b.build_int_mul(total, size, "")?;
    let ptr = cg
        .call(
            cg.intr.region,
            &[
                cg.i32c(cg.me()).into(),
                cg.i32c(buf).into(),
                cg.i64c(0).into(),
                len.into(),
            ],
            &format!("{}.all", decl.name),
        )?
        .into_pointer_value();
    let null = cg.b.build_is_null(ptr, "")?;
    cg.fail_if(
        null,
        crate::abi::STATUS_INTRINSIC,
        crate::abi::NO_STEP,
        cg.i64c(0),
        cg.i64c(0),
    )?;
    let f = scale_fn(cg, dt)?;
    cg.b.build_call(f, &[total.into(), ptr.into()], "")?;
    cg.b.build_unconditional_branch(skip)?;
    cg.b.position_at_end(skip);
    Ok(())
}

fn scale_fn<'ctx>(cg: &Cg<'ctx, '_>, dt: DType) -> R<FunctionValue<'ctx>> {
    let name = format!("avg.{dt}");
    if let Some(f) = cg.module.get_function(&name) {
        return Ok(f);
    }
    let f = cg.module.add_function(
        &name,
        cg.ctx
            .void_type()
            .fn_type(&[cg.t.i64.into(), cg.t.ptr.into()], false),
        Some(Linkage::Internal),
    );
    let n = f.get_nth_param(0).expect("count").into_int_value();
    let p = f.get_nth_param(1).expect("buffer").into_pointer_value();
    n.set_name("n");
    p.set_name("x");
    let b = cg.ctx.create_builder();
    let entry = cg.ctx.append_basic_block(f, "entry");
    let body = cg.ctx.append_basic_block(f, "loop");
    let exit = cg.ctx.append_basic_block(f, "exit");
    b.position_at_end(entry);
    b.build_unconditional_branch(body)?;
    b.position_at_end(body);
    let i = b.build_phi(cg.t.i64, "i")?;
    i.add_incoming(&[(&cg.i64c(0), entry)]);
    let iv = i.as_basic_value().into_int_value();
    let ty = storage(&cg.t, dt);
    // SAFETY (of the generated code): `i < n`, the whole buffer was checked.
    let at = unsafe { b.build_gep(ty, p, &[iv], "")? };
    let v = b.build_load(ty, at, "")?;
    v.as_instruction_value()
        .expect("a load")
        .set_alignment(1)
        .map_err(JitError::llvm)?;
    let num = cg.numeric();
    let acc = cg.spec.types.acc;
    let a = num.acc_load(&b, v, dt, acc)?;
    let a = num.div_by(&b, acc, a, cg.plan().group_size)?;
    let w = num.acc_store(&b, a, acc, dt)?;
    b.build_store(at, w)?
        .set_alignment(1)
        .map_err(JitError::llvm)?;
    let next = b.build_int_nuw_add(iv, cg.i64c(1), "next")?;
    i.add_incoming(&[(&next, body)]);
    let done = b.build_int_compare(IntPredicate::EQ, next, n, "done")?;
    b.build_conditional_branch(done, exit, body)?;
    b.position_at_end(exit);
    b.build_return(None)?;
    Ok(f)
}
