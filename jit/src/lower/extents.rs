//! Chunk extents in IR, evaluated once at kernel entry from the size arguments.
//!
//! The formulas are `BufferDecl::chunk_span` / `region_span` (the remainder rule: ceil split,
//! uniform chunks, alltoallv counts laid out back to back), including which arithmetic is
//! checked: size expressions and uniform offsets overflow into [`abi::STATUS_SIZE_OVERFLOW`],
//! count prefix sums too; the rest wraps as the interpreter's does. Every region of every step is
//! evaluated in step order, as the interpreter's resolve does, and each step's "moves `n`
//! elements into a region of `have`" check follows its regions, so a bad size fails with the
//! same error at the same step before any data moves. Values are memoised (and folded when
//! constant), so a region used by many steps is computed once.

use super::Cg;
use crate::abi;
use crate::JitError;
use inkwell::values::IntValue;
use inkwell::IntPredicate;
use std::collections::HashMap;
use symsched_plan::{CountsMatrix, Extent, Op, Rank, Region, SizeExpr};

type R<T> = Result<T, JitError>;

/// Offset and length (elements) of a region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<'ctx> {
    pub off: IntValue<'ctx>,
    pub len: IntValue<'ctx>,
}

/// Every extent the kernel uses, computed in the entry block.
#[derive(Default)]
pub(crate) struct Extents<'ctx> {
    exprs: HashMap<SizeExpr, IntValue<'ctx>>,
    split: HashMap<u32, (IntValue<'ctx>, IntValue<'ctx>)>,
    prefix: HashMap<(bool, Rank), Vec<IntValue<'ctx>>>,
    spans: HashMap<(Rank, Region), Span<'ctx>>,
    /// Chunks by extent, so buffers of one shape (`land`, `gath`: `[P] of x`) share them.
    chunks: HashMap<(Extent, u32, u32, Rank), Span<'ctx>>,
    /// Per step index: elements it moves.
    moved: HashMap<usize, IntValue<'ctx>>,
    /// Per matmul step index: m, k, n.
    /// Per matmul step: m, k, n and the element counts of c, a, b (m·n, m·k, k·n).
    dims: HashMap<usize, [IntValue<'ctx>; 6]>,
    /// Products of size variables, computed once.
    products: HashMap<(IntValue<'ctx>, IntValue<'ctx>), IntValue<'ctx>>,
    totals: HashMap<u32, IntValue<'ctx>>,
    /// Loaded entries of the count matrix, by index.
    count_loads: HashMap<u64, IntValue<'ctx>>,
    checked_fits: std::cell::RefCell<std::collections::HashSet<(IntValue<'ctx>, IntValue<'ctx>)>>,
}

impl<'ctx> Extents<'ctx> {
    /// A region resolved at entry (`rank` is where it lives).
    pub fn span(&self, rank: Rank, r: &Region, plan: &symsched_plan::Plan) -> Span<'ctx> {
        let key = (Self::rank_key(plan, r.buffer, rank), *r);
        *self
            .spans
            .get(&key)
            .expect("every region a step uses is resolved at entry")
    }

    /// Elements step `i` moves.
    pub fn moved(&self, i: usize) -> IntValue<'ctx> {
        self.moved[&i]
    }

    pub fn dims(&self, i: usize) -> [IntValue<'ctx>; 6] {
        self.dims[&i]
    }

    /// Elements of buffer `b` on the kernel's rank (resolved for the `avg` pass).
    pub fn total(&self, b: u32) -> IntValue<'ctx> {
        self.totals[&b]
    }

    /// Only counts extents differ between ranks.
    fn rank_key(plan: &symsched_plan::Plan, buffer: u32, rank: Rank) -> Rank {
        match plan.buffers[buffer as usize].extent {
            Extent::Counts { .. } => rank,
            _ => 0,
        }
    }

    /// Resolve every step of the kernel (its rank's, or its channel's), in order, with the
    /// interpreter's checks.
    pub fn resolve_all(&mut self, cg: &mut Cg<'ctx, '_>) -> R<()> {
        let plan = cg.plan();
        let me = cg.me();
        let uses_counts = plan
            .buffers
            .iter()
            .any(|b| matches!(b.extent, Extent::Counts { .. }));
        if uses_counts {
            let missing = cg.b.build_is_null(cg.counts, "no_counts")?;
            cg.fail_if(
                missing,
                abi::STATUS_MISSING_COUNTS,
                abi::NO_STEP,
                cg.i64c(0),
                cg.i64c(0),
            )?;
        }
        for (i, step) in plan.ranks[me as usize].steps.iter().enumerate() {
            // Another channel's steps are another kernel's (the runtime resolved the whole
            // rank before any channel started).
            if !cg.runs(i) {
                continue;
            }
            let id = step.id;
            match &step.op {
                Op::Put { src, dst, peer, .. } => {
                    let n = self.region(cg, me, src, id)?.len;
                    let cap = self.region(cg, *peer, dst, id)?.len;
                    self.fits(cg, n, cap, id)?;
                    self.moved.insert(i, n);
                }
                Op::Get { src, dst, peer } => {
                    let n = self.region(cg, *peer, src, id)?.len;
                    let cap = self.region(cg, me, dst, id)?.len;
                    self.fits(cg, n, cap, id)?;
                    self.moved.insert(i, n);
                }
                Op::Reduce { dst, srcs } => {
                    let n = self.region(cg, me, dst, id)?.len;
                    for s in srcs {
                        let len = self.region(cg, me, s, id)?.len;
                        self.fits(cg, n, len, id)?;
                    }
                    self.moved.insert(i, n);
                }
                Op::Copy { src, dst } | Op::Cast { src, dst } => {
                    let n = self.region(cg, me, src, id)?.len;
                    let cap = self.region(cg, me, dst, id)?.len;
                    self.fits(cg, n, cap, id)?;
                    self.moved.insert(i, n);
                }
                Op::Matmul { c, a, b } => {
                    let mut dim = |v: &'static str| -> R<IntValue<'ctx>> {
                        if !plan.size_vars.iter().any(|s| s.name == v) {
                            return Err(JitError::MissingDim { step: id, var: v });
                        }
                        self.eval(cg, &SizeExpr::var(v), id)
                    };
                    let (m, k, n) = (dim("m")?, dim("k")?, dim("n")?);
                    let cl = self.region(cg, me, c, id)?.len;
                    let al = self.region(cg, me, a, id)?.len;
                    let bl = self.region(cg, me, b, id)?.len;
                    // Unchecked, as the interpreter's `m * n`.
                    let mut mul = |x: IntValue<'ctx>, y: IntValue<'ctx>| -> R<IntValue<'ctx>> {
                        if let Some(v) = self.products.get(&(x, y)) {
                            return Ok(*v);
                        }
                        let v = cg.b.build_int_mul(x, y, "")?;
                        self.products.insert((x, y), v);
                        Ok(v)
                    };
                    let (mn, mk, kn) = (mul(m, n)?, mul(m, k)?, mul(k, n)?);
                    self.fits(cg, mn, cl, id)?;
                    self.fits(cg, mk, al, id)?;
                    self.fits(cg, kn, bl, id)?;
                    self.dims.insert(i, [m, k, n, mn, mk, kn]);
                }
                Op::HostColl { region, .. } => {
                    let n = self.region(cg, me, region, id)?.len;
                    self.moved.insert(i, n);
                }
                Op::Signal { .. } | Op::Wait { .. } => {}
            }
        }
        if cg.spec.op == crate::ReduceOp::Avg && plan.collective.reduces() {
            for (b, buf) in plan.buffers.iter().enumerate() {
                if matches!(
                    buf.role,
                    symsched_plan::BufferRole::Output | symsched_plan::BufferRole::InOut
                ) {
                    let t = self.total_len(cg, b as u32, me, abi::NO_STEP)?;
                    self.totals.insert(b as u32, t);
                }
            }
        }
        Ok(())
    }

    /// "step {id} moves {need} elements into a region of {have}" unless `need <= have`.
    fn fits(
        &self,
        cg: &Cg<'ctx, '_>,
        need: IntValue<'ctx>,
        have: IntValue<'ctx>,
        id: u32,
    ) -> R<()> {
        if need == have || !self.checked_fits.borrow_mut().insert((need, have)) {
            // Trivially true, or the same comparison as an earlier step's (which fails first).
            return Ok(());
        }
        let bad =
            cg.b.build_int_compare(IntPredicate::UGT, need, have, "short")?;
        cg.defer_failure(bad, abi::STATUS_REGION_TOO_SMALL, id, need, have)
    }

    /// `a + b`, failing with a size overflow.
    fn add(
        &self,
        cg: &Cg<'ctx, '_>,
        a: IntValue<'ctx>,
        b: IntValue<'ctx>,
        id: u32,
    ) -> R<IntValue<'ctx>> {
        self.checked(cg, a, b, id, "llvm.uadd.with.overflow", u64::checked_add)
    }

    fn mul(
        &self,
        cg: &Cg<'ctx, '_>,
        a: IntValue<'ctx>,
        b: IntValue<'ctx>,
        id: u32,
    ) -> R<IntValue<'ctx>> {
        self.checked(cg, a, b, id, "llvm.umul.with.overflow", u64::checked_mul)
    }

    fn checked(
        &self,
        cg: &Cg<'ctx, '_>,
        a: IntValue<'ctx>,
        b: IntValue<'ctx>,
        id: u32,
        intrinsic: &str,
        fold: fn(u64, u64) -> Option<u64>,
    ) -> R<IntValue<'ctx>> {
        let (ca, cb) = (
            a.get_zero_extended_constant(),
            b.get_zero_extended_constant(),
        );
        // Identities that cannot overflow: x + 0, x · 1, x · 0.
        let is_add = intrinsic.contains("add");
        match (ca, cb, is_add) {
            (Some(0), _, true) => return Ok(b),
            (_, Some(0), true) => return Ok(a),
            (Some(1), _, false) => return Ok(b),
            (_, Some(1), false) => return Ok(a),
            (Some(0), _, false) | (_, Some(0), false) => return Ok(cg.i64c(0)),
            _ => {}
        }
        if let (Some(x), Some(y)) = (
            a.get_zero_extended_constant(),
            b.get_zero_extended_constant(),
        ) {
            return match fold(x, y) {
                Some(v) => Ok(cg.i64c(v)),
                None => {
                    cg.defer_failure(
                        cg.t.i1.const_int(1, false),
                        abi::STATUS_SIZE_OVERFLOW,
                        id,
                        cg.i64c(0),
                        cg.i64c(0),
                    )?;
                    Ok(cg.i64c(0))
                }
            };
        }
        let f = inkwell::intrinsics::Intrinsic::find(intrinsic)
            .and_then(|i| i.get_declaration(&cg.module, &[cg.t.i64.into()]))
            .ok_or_else(|| JitError::llvm(format!("no intrinsic {intrinsic}")))?;
        let r =
            cg.b.build_call(f, &[a.into(), b.into()], "")?
                .try_as_basic_value()
                .basic()
                .expect("overflow intrinsics return a pair")
                .into_struct_value();
        let v = cg.b.build_extract_value(r, 0, "")?.into_int_value();
        let ov = cg.b.build_extract_value(r, 1, "")?.into_int_value();
        cg.defer_failure(ov, abi::STATUS_SIZE_OVERFLOW, id, cg.i64c(0), cg.i64c(0))?;
        Ok(v)
    }
    fn umin(cg: &Cg<'ctx, '_>, a: IntValue<'ctx>, b: IntValue<'ctx>) -> R<IntValue<'ctx>> {
        if a == b {
            return Ok(a);
        }
        let lt = cg.b.build_int_compare(IntPredicate::ULT, a, b, "")?;
        Ok(cg.b.build_select(lt, a, b, "")?.into_int_value())
    }

    /// A size expression, checked.
    pub fn eval(&mut self, cg: &Cg<'ctx, '_>, e: &SizeExpr, id: u32) -> R<IntValue<'ctx>> {
        if let Some(v) = self.exprs.get(e) {
            return Ok(*v);
        }
        let v = match e {
            SizeExpr::Const(c) => cg.i64c(*c),
            SizeExpr::Var(name) => {
                let idx = cg
                    .plan()
                    .size_vars
                    .iter()
                    .position(|s| &s.name == name)
                    .ok_or_else(|| JitError::UnknownSizeVar(name.clone()))?;
                // SAFETY (of the generated code): `sizes` holds one value per size variable.
                let at = unsafe {
                    cg.b.build_in_bounds_gep(cg.t.i64, cg.sizes, &[cg.i64c(idx as u64)], "")?
                };
                cg.b.build_load(cg.t.i64, at, name)?.into_int_value()
            }
            SizeExpr::Add(x, y) => {
                let (x, y) = (self.eval(cg, x, id)?, self.eval(cg, y, id)?);
                self.add(cg, x, y, id)?
            }
            SizeExpr::Mul(x, y) => {
                let (x, y) = (self.eval(cg, x, id)?, self.eval(cg, y, id)?);
                self.mul(cg, x, y, id)?
            }
            SizeExpr::CeilDiv(x, y) => {
                let (x, y) = (self.eval(cg, x, id)?, self.eval(cg, y, id)?);
                let zero =
                    cg.b.build_int_compare(IntPredicate::EQ, y, cg.i64c(0), "")?;
                cg.defer_failure(zero, abi::STATUS_SIZE_OVERFLOW, id, cg.i64c(0), cg.i64c(0))?;
                if y.get_zero_extended_constant() == Some(1) {
                    self.exprs.insert(e.clone(), x);
                    return Ok(x);
                }
                // Never divide by zero, even on the way to the failure exit.
                let y = if y.is_const() {
                    y
                } else {
                    cg.b.build_select(zero, cg.i64c(1), y, "")?.into_int_value()
                };
                let q = cg.b.build_int_unsigned_div(x, y, "")?;
                let rem = cg.b.build_int_unsigned_rem(x, y, "")?;
                let up =
                    cg.b.build_int_compare(IntPredicate::NE, rem, cg.i64c(0), "")?;
                let up = cg.b.build_int_z_extend(up, cg.t.i64, "")?;
                cg.b.build_int_add(q, up, "")?
            }
        };
        self.exprs.insert(e.clone(), v);
        Ok(v)
    }

    /// Offset and length of chunk `i` of buffer `b` on `rank`.
    fn chunk(&mut self, cg: &Cg<'ctx, '_>, b: u32, i: u32, rank: Rank, id: u32) -> R<Span<'ctx>> {
        let plan = cg.plan();
        let decl = &plan.buffers[b as usize];
        let key = (
            decl.extent.clone(),
            decl.chunks,
            i,
            Self::rank_key(plan, b, rank),
        );
        if let Some(s) = self.chunks.get(&key) {
            return Ok(*s);
        }
        let s = self.chunk_uncached(cg, b, i, rank, id)?;
        self.chunks.insert(key, s);
        Ok(s)
    }

    fn chunk_uncached(
        &mut self,
        cg: &Cg<'ctx, '_>,
        b: u32,
        i: u32,
        rank: Rank,
        id: u32,
    ) -> R<Span<'ctx>> {
        let plan = cg.plan();
        let decl = &plan.buffers[b as usize];
        let iv = cg.i64c(i as u64);
        match &decl.extent {
            Extent::Split { total } => {
                let (t, c) = match self.split.get(&b) {
                    Some(v) => *v,
                    None => {
                        let t = self.eval(cg, total, id)?;
                        // The capacity is the scratch chunk of `[K] of x`: one value for both.
                        let k = (decl.chunks as u64).max(1);
                        let c = self.eval(cg, &total.clone().ceil_div(k), id)?;
                        self.split.insert(b, (t, c));
                        (t, c)
                    }
                };
                let start = if i == 0 {
                    cg.i64c(0)
                } else {
                    Self::umin(cg, cg.mul_k(c, i as u64)?, t)?
                };
                let end = Self::umin(cg, cg.mul_k(c, i as u64 + 1)?, t)?;
                let len = if i == 0 {
                    end
                } else {
                    cg.b.build_int_sub(end, start, "")?
                };
                Ok(Span { off: start, len })
            }
            Extent::Blocks { block, .. } => {
                // Chunk `w` of block `j`: the block's own ceil split, from `j · block`.
                let per = decl.extent.chunks_per_block(decl.chunks).max(1);
                let (t, c) = match self.split.get(&b) {
                    Some(v) => *v,
                    None => {
                        let t = self.eval(cg, block, id)?;
                        let c = self.eval(cg, &block.clone().ceil_div(per as u64), id)?;
                        self.split.insert(b, (t, c));
                        (t, c)
                    }
                };
                let (j, w) = ((i / per) as u64, (i % per) as u64);
                let start = if w == 0 {
                    cg.i64c(0)
                } else {
                    Self::umin(cg, cg.mul_k(c, w)?, t)?
                };
                let end = Self::umin(cg, cg.mul_k(c, w + 1)?, t)?;
                let len = cg.b.build_int_sub(end, start, "")?;
                let base = cg.mul_k(t, j)?;
                let off = cg.b.build_int_add(base, start, "")?;
                Ok(Span { off, len })
            }
            Extent::Uniform { chunk } => {
                let c = self.eval(cg, chunk, id)?;
                let off = match i {
                    0 | 1 => cg.mul_k(c, i as u64)?,
                    _ => self.mul(cg, iv, c, id)?,
                };
                Ok(Span { off, len: c })
            }
            Extent::Counts { matrix } => {
                let send = *matrix == CountsMatrix::Send;
                let p = plan.group_size as u64;
                let mut loads = std::mem::take(&mut self.count_loads);
                let mut at = |j: u32| -> R<IntValue<'ctx>> {
                    let (s, r) = if send { (rank, j) } else { (j, rank) };
                    let idx = s as u64 * p + r as u64;
                    if let Some(v) = loads.get(&idx) {
                        return Ok(*v);
                    }
                    // SAFETY (of the generated code): `counts` holds P × P values (checked non-null).
                    let ptr = unsafe {
                        cg.b.build_in_bounds_gep(cg.t.i64, cg.counts, &[cg.i64c(idx)], "")?
                    };
                    let v =
                        cg.b.build_load(cg.t.i64, ptr, &format!("counts.{s}.{r}"))?
                            .into_int_value();
                    loads.insert(idx, v);
                    Ok(v)
                };
                let mut pre = self
                    .prefix
                    .remove(&(send, rank))
                    .unwrap_or_else(|| vec![cg.i64c(0)]);
                while pre.len() <= i as usize {
                    let j = pre.len() as u32 - 1;
                    let next = self.add(cg, pre[j as usize], at(j)?, id)?;
                    pre.push(next);
                }
                let off = pre[i as usize];
                let len = at(i)?;
                self.prefix.insert((send, rank), pre);
                self.count_loads = loads;
                Ok(Span { off, len })
            }
        }
    }

    /// Elements of buffer `b` on `rank` (`BufferDecl::total_len`).
    fn total_len(&mut self, cg: &Cg<'ctx, '_>, b: u32, rank: Rank, id: u32) -> R<IntValue<'ctx>> {
        let decl = &cg.plan().buffers[b as usize];
        if decl.chunks == 0 {
            return Ok(cg.i64c(0));
        }
        if let Extent::Split { total } = &decl.extent {
            return self.eval(cg, total, id);
        }
        if let Extent::Blocks { block, blocks } = &decl.extent {
            let t = self.eval(cg, block, id)?;
            return cg.mul_k(t, *blocks as u64);
        }
        let last = self.chunk(cg, b, decl.chunks - 1, rank, id)?;
        Ok(cg.b.build_int_add(last.off, last.len, "")?)
    }

    /// A region on `rank` (`BufferDecl::region_span`), memoised.
    fn region(&mut self, cg: &Cg<'ctx, '_>, rank: Rank, r: &Region, id: u32) -> R<Span<'ctx>> {
        let key = (Self::rank_key(cg.plan(), r.buffer, rank), *r);
        if let Some(s) = self.spans.get(&key) {
            return Ok(*s);
        }
        let decl = &cg.plan().buffers[r.buffer as usize];
        let s = if r.count == 0 {
            let off = if r.first < decl.chunks {
                self.chunk(cg, r.buffer, r.first, rank, id)?.off
            } else {
                self.total_len(cg, r.buffer, rank, id)?
            };
            Span {
                off,
                len: cg.i64c(0),
            }
        } else {
            let a = self.chunk(cg, r.buffer, r.first, rank, id)?;
            let z = if r.count == 1 {
                a
            } else {
                self.chunk(cg, r.buffer, r.first + r.count - 1, rank, id)?
            };
            if r.count == 1 {
                a
            } else {
                let end = cg.b.build_int_add(z.off, z.len, "")?;
                Span {
                    off: a.off,
                    len: cg.b.build_int_sub(end, a.off, "")?,
                }
            }
        };
        self.spans.insert(key, s);
        Ok(s)
    }
}
