//! Steps that go through the runtime: waits, signals, matmul, host collectives, the kernel's
//! entry (entry credits) and its exit (stage-out, then the exit credits).

use super::extents::Extents;
use super::Cg;
use crate::abi;
use crate::JitError;
use inkwell::values::{BasicValue, IntValue, PointerValue};
use inkwell::{AtomicOrdering, IntPredicate};
use symsched_plan::{Cmp, Op, Rank, Region, SignalMode, SignalUpdate, Step};

type R<T> = Result<T, JitError>;

impl<'ctx> Cg<'ctx, '_> {
    /// The address of `n` elements of region `r` on `rank`: formed in the kernel when the
    /// buffer is on the heap and the range inside the rank's mapping, else through the
    /// `region` intrinsic (which bounds-checks it); leaves with [`abi::STATUS_INTRINSIC`] on
    /// null.
    pub fn region_ptr(
        &self,
        ext: &Extents<'ctx>,
        rank: Rank,
        r: &Region,
        n: IntValue<'ctx>,
        step: u32,
    ) -> R<PointerValue<'ctx>> {
        // The kernel is straight-line between its checks, so an address taken earlier (for the
        // same count) dominates every later use: ask the runtime once.
        if let Some(p) = self.regions.borrow().get(&(rank, *r, n)) {
            return Ok(*p);
        }
        let plan = self.plan();
        let decl = &plan.buffers[r.buffer as usize];
        let size = self.spec.types.of(decl.elem).size() as u64;
        let span = ext.span(rank, r, plan);
        let off = self.mul_k(span.off, size)?;
        let len = self.mul_k(n, size)?;
        let mut name = format!("{}[{}", decl.name, r.first);
        if r.count != 1 {
            name.push_str(&format!("+{}", r.count));
        }
        name.push(']');
        if rank != self.me() {
            name.push_str(&format!("@{rank}"));
        }
        let p = self.address(rank, r.buffer, off, len, &name)?;
        let null = self.b.build_is_null(p, "")?;
        // Checked with the step's other addresses, before any of them is used.
        self.defer_failure(
            null,
            abi::STATUS_INTRINSIC,
            step,
            self.i64c(0),
            self.i64c(0),
        )?;
        self.regions.borrow_mut().insert((rank, *r, n), p);
        Ok(p)
    }

    /// `len` bytes at byte `off` of `buffer` on `rank`: formed from the buffer's heap offset
    /// and the rank's heap mapping ([`abi::HeapView`]) when both are given and the range is
    /// inside, else what the `region` intrinsic returns (an address, or null with the runtime
    /// holding the error). The intrinsic costs ~40 instructions per address at 8 B; the
    /// check here a few loads and compares.
    fn address(
        &self,
        rank: Rank,
        buffer: u32,
        off: IntValue<'ctx>,
        len: IntValue<'ctx>,
        name: &str,
    ) -> R<PointerValue<'ctx>> {
        let ask_region = |name: &str| -> R<PointerValue<'ctx>> {
            Ok(self
                .call(
                    self.intr.region,
                    &[
                        self.i32c(rank).into(),
                        self.i32c(buffer).into(),
                        off.into(),
                        len.into(),
                    ],
                    name,
                )?
                .into_pointer_value())
        };
        if !self.opts.heap_addresses {
            return ask_region(name);
        }
        let b = &self.b;
        let (look, inside, ask, done) = (
            self.block("heap"),
            self.block("on_heap"),
            self.block("ask"),
            self.block("addressed"),
        );
        let given = b.build_and(
            b.build_is_not_null(self.offsets, "")?,
            b.build_is_not_null(self.heaps, "")?,
            "",
        )?;
        b.build_conditional_branch(given, look, ask)?;
        b.position_at_end(look);
        let load = |table: PointerValue<'ctx>,
                    at: u64,
                    ty: inkwell::types::BasicTypeEnum<'ctx>,
                    what: &str|
         -> R<inkwell::values::BasicValueEnum<'ctx>> {
            // SAFETY (of the generated code): non-null tables hold an entry per plan buffer
            // and per group rank, and `buffer` and `rank` are the plan's.
            let p = unsafe { b.build_in_bounds_gep(self.t.i8, table, &[self.i64c(at)], "")? };
            Ok(b.build_load(ty, p, what)?)
        };
        let o = load(self.offsets, 8 * u64::from(buffer), self.t.i64.into(), "o")?.into_int_value();
        let h = u64::from(rank) * abi::offsets::HEAP_SIZE;
        let base = load(
            self.heaps,
            h + abi::offsets::HEAP_BASE,
            self.t.ptr.into(),
            "base",
        )?
        .into_pointer_value();
        let bound = |at: u64, what: &str| -> R<IntValue<'ctx>> {
            Ok(load(self.heaps, h + at, self.t.i64.into(), what)?.into_int_value())
        };
        let (lo, hi) = (
            bound(abi::offsets::HEAP_LO, "lo")?,
            bound(abi::offsets::HEAP_HI, "hi")?,
        );
        // lo <= o and o + off + len <= hi, without forming a sum that could wrap
        // (`NOT_ON_HEAP` is above every `hi`).
        let ule = |x, y| b.build_int_compare(IntPredicate::ULE, x, y, "");
        let room = b.build_int_sub(hi, o, "")?;
        let rest = b.build_int_sub(room, off, "")?;
        let checks = [
            b.build_is_not_null(base, "")?,
            ule(lo, o)?,
            ule(o, hi)?,
            ule(off, room)?,
            ule(len, rest)?,
        ];
        let mut fits = checks[0];
        for c in &checks[1..] {
            fits = b.build_and(fits, *c, "")?;
        }
        b.build_conditional_branch(fits, inside, ask)?;
        b.position_at_end(inside);
        let at = b.build_int_add(o, off, "")?;
        // SAFETY (of the generated code): inside the rank's mapping (checked just above).
        let formed = unsafe { b.build_gep(self.t.i8, base, &[at], "")? };
        b.build_unconditional_branch(done)?;
        b.position_at_end(ask);
        let asked = ask_region("")?;
        b.build_unconditional_branch(done)?;
        b.position_at_end(done);
        let p = b.build_phi(self.t.ptr, name)?;
        p.add_incoming(&[(&formed, inside), (&asked, ask)]);
        Ok(p.as_basic_value().into_pointer_value())
    }

    fn send(&self, u: &SignalUpdate, step: u32) -> R<()> {
        let value = match u.mode {
            SignalMode::Add => self.i64c(u.value),
            SignalMode::Set => {
                let e = self.mul_k(self.epoch, u.stride)?;
                self.add_k(e, u.value)?
            }
        };
        let mode = match u.mode {
            SignalMode::Add => abi::SIGNAL_ADD,
            SignalMode::Set => abi::SIGNAL_SET,
        };
        let st = self
            .call(
                self.intr.signal,
                &[
                    self.i32c(u.peer).into(),
                    self.i32c(u.slot).into(),
                    self.i32c(mode).into(),
                    value.into(),
                    self.i32c(step).into(),
                ],
                "sig",
            )?
            .into_int_value();
        self.check_status(st, step)
    }
}

/// `wait slot cmp epoch·stride + offset`.
pub(crate) fn wait(cg: &Cg<'_, '_>, step: &Step) -> R<()> {
    let Op::Wait { slot, cmp, target } = &step.op else {
        unreachable!("a wait action holds a wait step")
    };
    let e = cg.mul_k(cg.epoch, target.stride)?;
    let t = cg.add_k(e, target.offset)?;
    // First look at the counter inline (most waits are satisfied when reached: credits, a
    // peer that signalled earlier); only a wait that must block calls the runtime, which
    // bounds it, detects dead peers and names the step on a timeout.
    let b = &cg.b;
    let (look, call, done) = (cg.block("look"), cg.block("block"), cg.block("waited"));
    let inline = b.build_is_not_null(cg.signals, "")?;
    b.build_conditional_branch(inline, look, call)?;
    b.position_at_end(look);
    let at = b.build_int_mul(cg.signal_stride, cg.i64c(u64::from(*slot)), "")?;
    // SAFETY (of the generated code): `signals` + slot · stride is this rank's counter of the
    // slot (the ABI's contract for a non-null `signals`).
    let addr = unsafe { b.build_gep(cg.t.i8, cg.signals, &[at], "counter")? };
    let v = b.build_load(cg.t.i64, addr, "seen")?.into_int_value();
    let load = v.as_instruction_value().expect("a load is an instruction");
    load.set_alignment(8).map_err(JitError::llvm)?;
    load.set_atomic_ordering(AtomicOrdering::Acquire)
        .map_err(JitError::llvm)?;
    let pred = match cmp {
        Cmp::Eq => IntPredicate::EQ,
        Cmp::Ne => IntPredicate::NE,
        Cmp::Gt => IntPredicate::UGT,
        Cmp::Ge => IntPredicate::UGE,
        Cmp::Lt => IntPredicate::ULT,
        Cmp::Le => IntPredicate::ULE,
    };
    let holds = b.build_int_compare(pred, v, t, "holds")?;
    b.build_conditional_branch(holds, done, call)?;
    b.position_at_end(call);
    let st = cg
        .call(
            cg.intr.wait,
            &[
                cg.i32c(*slot).into(),
                cg.i32c(cmp.code()).into(),
                t.into(),
                cg.i32c(step.id).into(),
            ],
            "waited",
        )?
        .into_int_value();
    b.build_unconditional_branch(done)?;
    b.position_at_end(done);
    let status = b.build_phi(cg.t.i32, "wait_status")?;
    status.add_incoming(&[(&cg.t.i32.const_zero(), look), (&st, call)]);
    cg.check_status(status.as_basic_value().into_int_value(), step.id)
}

/// A standalone signal step.
pub(crate) fn signal_step(cg: &Cg<'_, '_>, step: &Step) -> R<()> {
    let Op::Signal { update } = &step.op else {
        unreachable!("a signal action holds a signal step")
    };
    cg.send(update, step.id)
}

/// The signal of a put whose data a pass has moved.
pub(crate) fn put_signal(cg: &Cg<'_, '_>, step: &Step) -> R<()> {
    let Op::Put {
        signal: Some(u), ..
    } = &step.op
    else {
        unreachable!("put signals are listed for puts with a signal")
    };
    cg.send(u, step.id)
}

pub(crate) fn matmul<'ctx>(cg: &Cg<'ctx, '_>, ext: &Extents<'ctx>, step: &Step) -> R<()> {
    let Op::Matmul { c, a, b } = &step.op else {
        unreachable!("a matmul action holds a matmul step")
    };
    let i = cg.plan().ranks[cg.me() as usize]
        .steps
        .iter()
        .position(|s| s.id == step.id)
        .expect("the step is the rank's");
    let [m, k, n, mn, mk, kn] = ext.dims(i);
    let me = cg.me();
    let cp = cg.region_ptr(ext, me, c, mn, step.id)?;
    let ap = cg.region_ptr(ext, me, a, mk, step.id)?;
    let bp = cg.region_ptr(ext, me, b, kn, step.id)?;
    cg.flush()?;
    let st = cg
        .call(
            cg.intr.matmul,
            &[
                cg.i32c(step.id).into(),
                cp.into(),
                ap.into(),
                bp.into(),
                m.into(),
                k.into(),
                n.into(),
            ],
            "mm",
        )?
        .into_int_value();
    cg.check_status(st, step.id)
}

pub(crate) fn host_coll<'ctx>(
    cg: &Cg<'ctx, '_>,
    ext: &Extents<'ctx>,
    step: &Step,
    ordinal: u32,
) -> R<()> {
    let Op::HostColl { region, .. } = &step.op else {
        unreachable!("a host collective action holds a host collective step")
    };
    let i = cg.plan().ranks[cg.me() as usize]
        .steps
        .iter()
        .position(|s| s.id == step.id)
        .expect("the step is the rank's");
    let n = ext.moved(i);
    let p = cg.region_ptr(ext, cg.me(), region, n, step.id)?;
    cg.flush()?;
    let st = cg
        .call(
            cg.intr.host_coll,
            &[
                cg.i32c(step.id).into(),
                cg.i32c(ordinal).into(),
                p.into(),
                n.into(),
            ],
            "hc",
        )?
        .into_int_value();
    cg.check_status(st, step.id)
}

/// The entry signals (entry credits): the runtime copied staged inputs in before it called the
/// kernel, and no step has run yet, so peers may now write into this rank's role buffers.
/// Sent after the extent checks (a launch that fails them sends nothing, as in the
/// interpreter) and before every wait (a wait hoisted to the entry may need a peer's entry
/// signal, and the peer ours).
pub(crate) fn enter(cg: &Cg<'_, '_>) -> R<()> {
    cg.flush()?;
    for u in &cg.plan().ranks[cg.me() as usize].entry_signals {
        cg.send(u, abi::NO_STEP)?;
    }
    // No step runs after a failed entry signal.
    cg.flush()
}

/// The launch's agreement check, after its speculative prefix
/// ([`crate::LowerOptions::check_after`]): every earlier step's failure is looked at first (a
/// failed prefix must not be taken for an agreed one), and a refusal stops the kernel.
pub(crate) fn agree(cg: &Cg<'_, '_>) -> R<()> {
    cg.flush()?;
    let st = cg.call(cg.intr.agree, &[], "agreed")?.into_int_value();
    cg.check_status(st, abi::NO_STEP)?;
    cg.flush()
}

/// Stage-out, then the exit signals (the launch credits), in that order.
pub(crate) fn finish(cg: &Cg<'_, '_>) -> R<()> {
    cg.flush()?;
    let st = cg.call(cg.intr.stage_out, &[], "staged")?.into_int_value();
    cg.check_status(st, abi::NO_STEP)?;
    // No credit goes out after a failed stage-out.
    cg.flush()?;
    for u in &cg.plan().ranks[cg.me() as usize].exit_signals {
        cg.send(u, abi::NO_STEP)?;
    }
    Ok(())
}

/// Whether `v` is the constant zero.
pub(crate) fn is_const_zero(v: IntValue<'_>) -> bool {
    v.get_zero_extended_constant() == Some(0)
}
