//! The step table: each rank's plan steps encoded as fixed-width int32 rows the generic kernel
//! interprets, plus the static analysis that decides where `aclshmem_quiet` must precede a row.
//!
//! Layout (int32 words): `[magic, P, rows, first_row[0..=P], row…]`; a row is
//! [`ROW_WORDS`] words: `kind, flags, a.buf, a.first, a.count, b.buf, b.first, b.count, peer,
//! slot, aux, value_lo32, stride_lo32`. Only the low 32 bits of signal values and strides are
//! stored: the device computes `epoch·stride + value` modulo 2^32 (see [`crate::signal32`]).
//!
//! A rank's rows start with its entry signals (the plan's `entry_signals`, entry credits) as
//! plain [`Kind::Signal`] rows, so they are sent when the kernel starts (in the first launch
//! segment); its exit signals are [`Kind::ExitSignal`] rows at the end.
//!
//! A plan with C > 1 channels has `first_row[0..=P·(C+2)]` instead: rank r's rows are C + 2
//! runs starting at `first_row[r·(C+2) + i]`: i = 0 its entry signals, i = 1 + c channel c's
//! steps, i = C + 1 its exit signals (the next entry ends each run). The kernel's channel-c
//! cores interpret only run 1 + c; channel 0's cores also send the entry and exit signals,
//! around barriers over every core (see docs/ascendc.md, "Channels").

use super::Classes;
use crate::signal32;
use crate::KernelError;
use symsched_plan::{ElemClass, HostCollOp, Op, Plan, Region, SignalMode, SignalUpdate};

/// "SYM1": version tag of the table layout, checked by nothing but humans reading dumps.
pub const MAGIC: i32 = 0x5359_4D31;
/// Words per row.
pub const ROW_WORDS: usize = 13;

/// Row kinds (the `kind` word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Kind {
    Put = 1,
    PutSignal = 2,
    Get = 3,
    Signal = 4,
    Wait = 5,
    Reduce = 6,
    Operand = 7,
    Copy = 8,
    ExitSignal = 9,
    /// `c = a × b` on the Cube unit: `c` at word 2, `a` at word 5; one [`Kind::Operand`] row
    /// with `b` follows.
    Matmul = 10,
    /// A host collective on the region at word 2 (op code at word 8, see [`hostcoll_code`],
    /// ordinal at word 11): the kernel ends a launch segment here and the launch stub runs the
    /// collective before launching the next segment.
    HostColl = 11,
}

/// `flags` bit: complete outstanding non-blocking puts before this row.
pub const QUIET_BEFORE: i32 = 1;
/// `flags` bit: with more than one vector core, every core finishes what it issued before
/// this row (see [`Splits`]).
pub const BARRIER_BEFORE: i32 = 2;

/// Where the vector cores' splits of two steps disagree.
///
/// Each step's elements are split over the cores by one region of the step, its *key* (a
/// reduce's or get's destination, a copy's or put's source), in blocks aligned in the key's
/// buffer; the
/// other regions of the step follow the key element for element. Two accesses to overlapping
/// chunks of a buffer, at least one writing, land on the same core element for element only
/// when both access the same region through the same key; otherwise a core may read what
/// another has not written yet (or overwrite what it still reads), and the later step needs
/// a barrier first. Signals and matmul steps synchronise every core themselves.
#[derive(Default)]
struct Splits {
    /// (region accessed, key region, writes) since the last synchronisation.
    since: Vec<(Region, Region, bool)>,
}

impl Splits {
    /// Whether a step with these accesses needs a barrier first; records them.
    fn step(&mut self, accesses: &[(Region, Region, bool)]) -> bool {
        let conflict = accesses.iter().any(|(r, k, w)| {
            self.since
                .iter()
                .any(|(pr, pk, pw)| (*w || *pw) && overlaps(r, pr) && !(same(r, pr) && same(k, pk)))
        });
        if conflict {
            self.since.clear();
        }
        self.since.extend_from_slice(accesses);
        conflict
    }
    fn synchronised(&mut self) {
        self.since.clear();
    }
}

fn same(a: &Region, b: &Region) -> bool {
    a.buffer == b.buffer && a.first == b.first && a.count == b.count
}

/// One encoded row and a human-readable description for the generated comment.
#[derive(Debug, Clone)]
pub struct Row {
    pub words: [i32; ROW_WORDS],
    pub comment: String,
}

/// The whole table.
#[derive(Debug, Clone)]
pub struct Table {
    pub group_size: u32,
    /// Channels per rank ([`Plan::channel_count`]); more than one changes `rank_first`.
    pub channels: u32,
    pub rank_first: Vec<u32>,
    pub rows: Vec<Row>,
}

impl Table {
    /// All words in layout order.
    pub fn words(&self) -> Vec<i32> {
        let mut w = vec![MAGIC, self.group_size as i32, self.rows.len() as i32];
        w.extend(self.rank_first.iter().map(|&x| x as i32));
        for r in &self.rows {
            w.extend_from_slice(&r.words);
        }
        w
    }
}

fn overlaps(a: &Region, b: &Region) -> bool {
    a.buffer == b.buffer
        && a.count > 0
        && b.count > 0
        && a.first < b.first + b.count
        && b.first < a.first + a.count
}

fn mode_code(m: SignalMode) -> i32 {
    match m {
        SignalMode::Set => 0,
        SignalMode::Add => 1,
    }
}

/// Per-rank state of the quiet analysis: sources of non-blocking puts not yet completed.
#[derive(Default)]
struct Pending {
    sources: Vec<Region>,
    undelivered: bool,
}

impl Pending {
    fn flags_for_write(&mut self, writes: &[Region]) -> i32 {
        if self
            .sources
            .iter()
            .any(|s| writes.iter().any(|w| overlaps(s, w)))
        {
            self.clear();
            QUIET_BEFORE
        } else {
            0
        }
    }
    fn flags_for_signal(&mut self) -> i32 {
        if self.undelivered {
            self.clear();
            QUIET_BEFORE
        } else {
            0
        }
    }
    fn clear(&mut self) {
        self.sources.clear();
        self.undelivered = false;
    }
}

struct Builder<'a> {
    plan: &'a Plan,
    classes: &'a Classes,
    rows: Vec<Row>,
}

impl Builder<'_> {
    fn region_name(&self, r: &Region) -> String {
        let b = &self.plan.buffers[r.buffer as usize];
        format!("{}[{}..{}]", b.name, r.first, r.first + r.count)
    }

    fn slot_name(&self, slot: u32) -> &str {
        &self.plan.signals[slot as usize].name
    }

    fn check_slot(&self, slot: u32, stride: u64, offset: u64) -> Result<(), KernelError> {
        if signal32::fits(stride, offset) {
            Ok(())
        } else {
            Err(KernelError::SignalRange {
                slot: self.slot_name(slot).to_string(),
                stride,
                offset,
            })
        }
    }

    fn push(
        &mut self,
        kind: Kind,
        flags: i32,
        fill: impl FnOnce(&mut [i32; ROW_WORDS]),
        comment: String,
    ) {
        let mut words = [0i32; ROW_WORDS];
        words[0] = kind as i32;
        words[1] = flags;
        fill(&mut words);
        self.rows.push(Row { words, comment });
    }

    fn signal_row(&mut self, kind: Kind, flags: i32, u: &SignalUpdate) -> Result<(), KernelError> {
        let offset = if u.mode == SignalMode::Set {
            u.value
        } else {
            0
        };
        self.check_slot(u.slot, u.stride, offset.max(u.value))?;
        let comment = format!(
            "{} {}@{} {} {}{}",
            if kind == Kind::ExitSignal {
                "exit-signal"
            } else {
                "signal"
            },
            self.slot_name(u.slot),
            u.peer,
            if u.mode == SignalMode::Add { "+=" } else { "=" },
            u.value,
            if u.mode == SignalMode::Set {
                format!(" + epoch*{}", u.stride)
            } else {
                String::new()
            }
        );
        self.push(
            kind,
            flags,
            |w| {
                w[8] = u.peer as i32;
                w[9] = u.slot as i32;
                w[10] = mode_code(u.mode);
                w[11] = u.value as u32 as i32;
                w[12] = u.stride as u32 as i32;
            },
            comment,
        );
        Ok(())
    }
}

/// Code of a host collective in a [`Kind::HostColl`] row and in the launch stub's table.
pub fn hostcoll_code(op: HostCollOp) -> i32 {
    match op {
        HostCollOp::Allreduce => 0,
        HostCollOp::Allgather => 1,
        HostCollOp::ReduceScatter => 2,
        HostCollOp::Broadcast => 3,
    }
}

/// Whether the Cube lowering handles this element type (Mmad on f32 / f16 / bf16 operands).
fn cube_type(t: crate::DType) -> bool {
    matches!(
        t,
        crate::DType::F32 | crate::DType::F16 | crate::DType::Bf16
    )
}

fn set_region(w: &mut [i32; ROW_WORDS], at: usize, r: &Region) {
    w[at] = r.buffer as i32;
    w[at + 1] = r.first as i32;
    w[at + 2] = r.count as i32;
}

/// The two-region rows (put, get, copy, matmul): the first region at word 2, the second at 5.
fn set_regions(w: &mut [i32; ROW_WORDS], first: &Region, second: &Region) {
    set_region(w, 2, first);
    set_region(w, 5, second);
}

/// Encode every rank's steps; fails on steps the Ascend lowering does not support.
pub fn build(plan: &Plan, classes: &Classes) -> Result<Table, KernelError> {
    let mut b = Builder {
        plan,
        classes,
        rows: Vec::new(),
    };
    let channels = plan.channel_count();
    let mut rank_first = Vec::with_capacity(plan.ranks.len() * (channels as usize + 2) + 1);
    for prog in &plan.ranks {
        rank_first.push(b.rows.len() as u32);
        // Entry credits, sent as the kernel starts: a runtime that stages inputs in copies them
        // before it launches the kernel, so peers may then write into this rank's role buffers.
        for u in &prog.entry_signals {
            b.signal_row(Kind::Signal, 0, u)?;
            let last = b.rows.last_mut().expect("row just pushed");
            last.comment = format!("r{}: entry-{}", prog.rank, last.comment);
        }
        let mut pend = Pending::default();
        let mut host_ordinal = 0i32;
        // Channel c's rows are the rank's steps of channel c in program order; the quiet and
        // split analyses run per channel, since a channel's cores issue only its own rows.
        for chan in 0..channels {
            if channels > 1 {
                rank_first.push(b.rows.len() as u32);
                pend = Pending::default();
            }
            let mut splits = Splits::default();
            for step in prog.steps.iter().filter(|s| s.channel == chan) {
                let tag = if channels > 1 {
                    format!("r{} c{} s{}", prog.rank, chan, step.id)
                } else {
                    format!("r{} s{}", prog.rank, step.id)
                };
                match &step.op {
                    Op::Put {
                        src,
                        dst,
                        peer,
                        signal,
                    } => {
                        let convert = b.classes.differ(b.plan, src, dst);
                        let fused = signal.filter(|u| u.peer == *peer);
                        let mut flags = 0;
                        if fused.is_some() || convert {
                            // Its signal (or the staged put's internal quiet) publishes everything
                            // before it, so earlier plain puts must be complete first.
                            flags |= pend.flags_for_signal();
                        }
                        let comment = format!(
                            "{tag}: put {} -> {} @{}{}{}",
                            b.region_name(src),
                            b.region_name(dst),
                            peer,
                            if convert { " (convert via UB)" } else { "" },
                            fused
                                .map(|u| format!(", signal {}", b.slot_name(u.slot)))
                                .unwrap_or_default()
                        );
                        let kind = if fused.is_some() {
                            Kind::PutSignal
                        } else {
                            Kind::Put
                        };
                        if splits.step(&[(*src, *src, false)]) {
                            flags |= BARRIER_BEFORE;
                        }
                        if fused.is_some() || convert {
                            // Its signal (or the converted tiles' quiets and a signal) meet the cores.
                            splits.synchronised();
                        }
                        if let Some(u) = fused {
                            let offset = if u.mode == SignalMode::Set {
                                u.value
                            } else {
                                0
                            };
                            b.check_slot(u.slot, u.stride, offset.max(u.value))?;
                        }
                        let (src, dst, peer) = (*src, *dst, *peer);
                        b.push(
                            kind,
                            flags,
                            |w| {
                                set_regions(w, &src, &dst);
                                w[8] = peer as i32;
                                if let Some(u) = fused {
                                    w[9] = u.slot as i32;
                                    w[10] = mode_code(u.mode);
                                    w[11] = u.value as u32 as i32;
                                    w[12] = u.stride as u32 as i32;
                                }
                            },
                            comment,
                        );
                        if convert {
                            pend.clear();
                        } else {
                            pend.sources.push(src);
                            if fused.is_none() {
                                pend.undelivered = true;
                            }
                        }
                        if let Some(u) = signal.filter(|u| u.peer != peer) {
                            splits.synchronised();
                            let f = pend.flags_for_signal();
                            b.signal_row(Kind::Signal, f, &u)?;
                        }
                    }
                    Op::Get { src, dst, peer } => {
                        let mut flags = pend.flags_for_write(&[*dst]);
                        if splits.step(&[(*dst, *dst, true)]) {
                            flags |= BARRIER_BEFORE;
                        }
                        let convert = b.classes.differ(b.plan, src, dst);
                        let comment = format!(
                            "{tag}: get {} @{} -> {}{}",
                            b.region_name(src),
                            peer,
                            b.region_name(dst),
                            if convert { " (convert via UB)" } else { "" }
                        );
                        let (src, dst, peer) = (*src, *dst, *peer);
                        b.push(
                            Kind::Get,
                            flags,
                            |w| {
                                set_regions(w, &src, &dst);
                                w[8] = peer as i32;
                            },
                            comment,
                        );
                        if convert {
                            pend.clear();
                        }
                    }
                    Op::Signal { update } => {
                        splits.synchronised();
                        let f = pend.flags_for_signal();
                        b.signal_row(Kind::Signal, f, update)?;
                        let last = b.rows.last_mut().expect("row just pushed");
                        last.comment = format!("{tag}: {}", last.comment);
                    }
                    Op::Wait { slot, cmp, target } => {
                        b.check_slot(*slot, target.stride, target.offset)?;
                        let comment = format!(
                            "{tag}: wait {} {:?} epoch*{} + {}",
                            b.slot_name(*slot),
                            cmp,
                            target.stride,
                            target.offset
                        );
                        let (slot, cmp, target) = (*slot, *cmp, *target);
                        b.push(
                            Kind::Wait,
                            0,
                            |w| {
                                w[9] = slot as i32;
                                w[10] = cmp.code() as i32;
                                w[11] = target.offset as u32 as i32;
                                w[12] = target.stride as u32 as i32;
                            },
                            comment,
                        );
                    }
                    Op::Reduce { dst, srcs } => {
                        let mut flags = pend.flags_for_write(&[*dst]);
                        let mut acc: Vec<(Region, Region, bool)> =
                            srcs.iter().map(|s| (*s, *dst, false)).collect();
                        acc.push((*dst, *dst, true));
                        if splits.step(&acc) {
                            flags |= BARRIER_BEFORE;
                        }
                        let names: Vec<String> = srcs.iter().map(|s| b.region_name(s)).collect();
                        let comment = format!(
                            "{tag}: {} = reduce({})",
                            b.region_name(dst),
                            names.join(", ")
                        );
                        let (dst, n) = (*dst, srcs.len() as i32);
                        if n == 0 {
                            return Err(KernelError::Unsupported {
                                what: "a reduce without operands".into(),
                                rank: prog.rank,
                                step: step.id,
                            });
                        }
                        b.push(
                            Kind::Reduce,
                            flags,
                            |w| {
                                set_region(w, 2, &dst);
                                w[10] = n;
                            },
                            comment,
                        );
                        for s in srcs {
                            let s = *s;
                            b.push(
                                Kind::Operand,
                                0,
                                |w| set_region(w, 2, &s),
                                "  operand".into(),
                            );
                        }
                    }
                    Op::Copy { src, dst } | Op::Cast { src, dst } => {
                        let mut flags = pend.flags_for_write(&[*dst]);
                        if splits.step(&[(*src, *src, false), (*dst, *src, true)]) {
                            flags |= BARRIER_BEFORE;
                        }
                        let what = if matches!(step.op, Op::Copy { .. }) {
                            "copy"
                        } else {
                            "cast"
                        };
                        let comment = format!(
                            "{tag}: {} = {what}({})",
                            b.region_name(dst),
                            b.region_name(src)
                        );
                        let (src, dst) = (*src, *dst);
                        b.push(
                            Kind::Copy,
                            flags,
                            |w| {
                                set_regions(w, &src, &dst);
                            },
                            comment,
                        );
                    }
                    Op::Matmul { c, a, b: bm } => {
                        let ty = |r: &Region| b.classes.of(class_of(b.plan, r));
                        let (tc, ta, tb) = (ty(c), ty(a), ty(bm));
                        if !(cube_type(tc) && cube_type(ta) && ta == tb) {
                            return Err(KernelError::Unsupported {
                                what: format!(
                                "matmul of {ta} x {tb} into {tc} (the Cube lowering multiplies two \
                                 operands of one type among f32, f16, bf16 into f32, f16 or bf16)"
                            ),
                                rank: prog.rank,
                                step: step.id,
                            });
                        }
                        let flags = pend.flags_for_write(&[*c]);
                        // The step meets every vector and Cube core before and after.
                        splits.synchronised();
                        let comment = format!(
                            "{tag}: {} = matmul({}, {})",
                            b.region_name(c),
                            b.region_name(a),
                            b.region_name(bm)
                        );
                        let (c, a, bm) = (*c, *a, *bm);
                        b.push(
                            Kind::Matmul,
                            flags,
                            |w| {
                                set_regions(w, &c, &a);
                            },
                            comment,
                        );
                        b.push(
                            Kind::Operand,
                            0,
                            |w| set_region(w, 2, &bm),
                            "  operand b".into(),
                        );
                    }
                    Op::HostColl {
                        op,
                        region,
                        members,
                    } => {
                        if matches!(
                            b.plan.buffers[region.buffer as usize].extent,
                            symsched_plan::Extent::Counts { .. }
                        ) {
                            return Err(KernelError::Unsupported {
                                what: "a hostcoll on a counts-sized buffer (the launch stub \
                                   computes host-collective extents from the size variables only)"
                                    .into(),
                                rank: prog.rank,
                                step: step.id,
                            });
                        }
                        let comment = format!(
                            "{tag}: hostcoll {:?}({}) over {:?} (ends a launch segment)",
                            op,
                            b.region_name(region),
                            members
                        );
                        let (code, region) = (hostcoll_code(*op), *region);
                        let ordinal = host_ordinal;
                        host_ordinal += 1;
                        b.push(
                            Kind::HostColl,
                            0,
                            |w| {
                                set_region(w, 2, &region);
                                w[8] = code;
                                w[9] = members.len() as i32;
                                w[11] = ordinal;
                            },
                            comment,
                        );
                        // The segment ends with aclshmem_quiet: nothing is outstanding after it.
                        pend.clear();
                        splits.synchronised();
                    }
                }
            }
        }
        if channels > 1 {
            // Every channel's cores quiet and meet before channel 0 sends the exit signals.
            pend.clear();
            rank_first.push(b.rows.len() as u32);
        }
        for u in &prog.exit_signals {
            let f = pend.flags_for_signal();
            b.signal_row(Kind::ExitSignal, f, u)?;
            let last = b.rows.last_mut().expect("row just pushed");
            last.comment = format!("r{}: {}", prog.rank, last.comment);
        }
    }
    rank_first.push(b.rows.len() as u32);
    Ok(Table {
        group_size: plan.group_size,
        channels,
        rank_first,
        rows: b.rows,
    })
}

/// The element class of a region's buffer (helper for other modules).
pub fn class_of(plan: &Plan, r: &Region) -> ElemClass {
    plan.buffers[r.buffer as usize].elem
}
