//! Launch agreement: before any data moves, the ranks of a launch agree on what they launch —
//! the launch sizes (and so every role's element count on every rank), the data, wire and
//! accumulator dtypes, the reduce op when the plan reduces, and the binding pattern (which
//! roles are symmetric and at which heap offset, which are staged) — or every rank fails with
//! the same [`Disagreement`] naming each rank's values, and nothing is written anywhere.
//!
//! **The record.** Each rank publishes, per launch, a small record in its own heap segment: a
//! sequence number, a 64-bit digest of the launch signature, the binding pattern words (see
//! [`super::binding`]), the dtype and op codes and its element count per role — or, when its
//! own arguments were already refused locally, an *invalid* digest and its error text. The
//! record is one symmetric scratch allocation of the loaded plan, two copies (by sequence
//! parity: a peer is never more than one launch ahead, since its next launch waits for this
//! rank's credits, which follow this rank's reading).
//!
//! A rank that refused its own arguments publishes its refusal and returns its own error at
//! once; its peers fail with a [`Disagreement`] that quotes it, instead of waiting for it.
//!
//! **The synchronisation.** After writing its record, a rank sets its agreement slot on every
//! peer to the sequence number (release), waits until every peer's agreement slot on it holds
//! the same number (acquire) and reads their records (the fast path reads the first line of
//! each: sequence, digest and pattern words). Nobody waits before publishing, so this cannot
//! deadlock; and every rank reads every rank's record, so every rank reaches the same verdict
//! and, on a disagreement, builds the same message. The check runs before the staging area is
//! laid out or grown (a disagreeing size would otherwise make ranks ask for different scratch)
//! and before the entry signals, so no peer writes into a rank's buffers on a disagreeing
//! launch. It covers every launch, whether or not the plan's own schedule synchronises a pair
//! before data moves. Cost: one record write, one signal and one satisfied-or-short wait per
//! peer; nothing with one rank.
//!
//! The sequence number counts launches that reached the agreement on this (group, plan),
//! successful or not, so a refused launch does not desynchronise the next one.

use super::binding::{Binding, EMPTY, STAGED};
use super::dtype::{DType, ElemTypes};
use super::error::ExecError;
use super::fabric::{Fabric, WaitContext};
use super::reduce::ReduceOp;
use std::hash::{Hash, Hasher};
use symsched_plan::{Cmp, LaunchSizes, Plan, SignalMode};

/// Digest of a rank whose own arguments were refused before the agreement.
const INVALID: u64 = u64::MAX;
/// Bytes of error text an invalid record carries.
const TEXT_BYTES: usize = 256;
/// Header words: sequence, digest, number of roles, data, wire and acc dtype codes, op code,
/// text length.
const HEADER: usize = 8;
/// Op code when the plan does not reduce (the op is then not part of the launch).
const NO_OP: u64 = u64::MAX;

/// A rank whose launch signature differs from another rank's (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the ranks of group {group} disagree on launch of `{schedule}`: {}{detail}. Every rank must \
     make the same call with the same element counts, dtype, op and tensor kinds (all symmetric \
     at the same offset, or all ordinary); nothing was written",
    .per_rank.join("; ")
)]
pub struct Disagreement {
    pub schedule: String,
    pub group: String,
    /// What each group rank launched, in rank order (`"rank 0: 100 elements f32 sum"`).
    pub per_rank: Vec<String>,
    /// When only the binding differs: which buffer, and the rule (empty otherwise).
    pub detail: String,
}

/// What a loaded plan keeps for its agreement: its slots and its record area.
#[derive(Debug)]
pub(crate) struct AgreementArea {
    /// First of P signal slots: slot `base + q` on this rank is set only by rank q.
    slot_base: u32,
    /// Symmetric heap offset of the record area (two copies).
    record: u64,
    /// Bytes of one record copy.
    record_bytes: u64,
    /// Number of role buffers of the plan.
    roles: usize,
    /// Names of the agreement slots (for timeouts).
    slot_names: Vec<String>,
}

/// This rank's launch as the agreement sees it.
pub(crate) struct Signature<'a> {
    pub(crate) types: ElemTypes,
    pub(crate) op: ReduceOp,
    /// Whether the plan reduces (so the op is part of the launch).
    pub(crate) reduces: bool,
    pub(crate) sizes: &'a LaunchSizes,
    pub(crate) buffers: &'a [Binding<'a>],
    /// Element count per role on this rank (empty when unknown).
    pub(crate) lens: &'a [u64],
}

fn dtype_code(d: DType) -> u64 {
    DType::ALL
        .iter()
        .position(|x| *x == d)
        .unwrap_or(usize::MAX) as u64
}

fn dtype_name(code: u64) -> &'static str {
    DType::ALL.get(code as usize).map_or("?", |d| d.name())
}

fn op_code(op: ReduceOp) -> u64 {
    ReduceOp::ALL.iter().position(|x| *x == op).unwrap_or(0) as u64
}

/// The binding pattern word of one binding (as [`super::binding::binding_pattern`]).
fn pattern_word(b: &Binding<'_>) -> u64 {
    match b {
        _ if b.is_empty() => EMPTY,
        Binding::Heap { offset, .. } => *offset,
        _ => STAGED,
    }
}

impl AgreementArea {
    /// Reserve the agreement slots and record area of a plan loaded under `key`.
    pub(crate) fn load<F: Fabric>(
        fabric: &F,
        key: &str,
        roles: usize,
    ) -> Result<AgreementArea, ExecError> {
        let p = fabric.size();
        let words = HEADER + 2 * roles + TEXT_BYTES / 8;
        let record_bytes = ((words * 8) as u64).next_multiple_of(64);
        let (slot_base, record) = if p > 1 {
            (
                fabric.signal_slots(&format!("plan/{key}/agree"), p)?,
                fabric.scratch(&format!("plan/{key}/agree-record"), 2 * record_bytes)?,
            )
        } else {
            (0, 0)
        };
        Ok(AgreementArea {
            slot_base,
            record,
            record_bytes,
            roles,
            slot_names: (0..p).map(|q| format!("__agree[{q}]")).collect(),
        })
    }

    fn record_ptr<F: Fabric>(
        &self,
        fabric: &F,
        rank: u32,
        seq: u64,
    ) -> Result<*mut u64, ExecError> {
        let off = self.record + (seq % 2) * self.record_bytes;
        Ok(fabric.heap_ptr(rank, off, self.record_bytes)? as *mut u64)
    }

    /// Agree on launch number `seq` (1-based) of `plan` with every rank of the group: `mine`
    /// is this rank's signature, or the error its own arguments were refused with (then it is
    /// only published, without waiting: the caller reports its own error, the peers a
    /// [`Disagreement`] naming it). Returns `Ok` only when every rank launched the same; a
    /// [`Disagreement`] (the same on every rank) otherwise.
    ///
    /// On success `bound[i]` is the group's binding of role i — its binding pattern word on the
    /// ranks where it is not empty (a heap offset or [`STAGED`]; [`EMPTY`] if empty
    /// everywhere), the same on every rank. The staging layout and the peer addresses follow it,
    /// so a rank where the role is empty lays the area out alike and addresses its peers' copy
    /// where they bound it.
    pub(crate) fn agree<F: Fabric>(
        &self,
        fabric: &F,
        plan: &Plan,
        seq: u64,
        mine: Result<&Signature<'_>, &ExecError>,
        bound: &mut Vec<u64>,
    ) -> Result<(), ExecError> {
        let (p, me) = (fabric.size(), fabric.rank());
        let roles = self.roles();
        bound.clear();
        // The members that share this rank's heaps: a group spanning nodes agrees within each
        // node (its launches stage every buffer; the nodes meet in host collectives).
        // (Iterated, not collected: no allocation on the launch path.)
        let here = || (0..p).filter(|&q| fabric.reachable(q));
        let peers = || here().filter(move |&q| q != me);
        if peers().next().is_none() {
            if let Ok(s) = mine {
                bound.extend((0..roles).map(|i| s.buffers.get(i).map_or(EMPTY, pattern_word)));
            }
            return Ok(());
        }
        let rec = self.record_ptr(fabric, me, seq)?;
        // SAFETY: `rec` is a checked range of record_bytes in this rank's own segment; only
        // this rank writes it, and peers read it only after the release below.
        unsafe { write_record(rec, roles, seq, mine) };
        for q in peers() {
            fabric.signal(q, self.slot_base + me, SignalMode::Set, seq)?;
        }
        if mine.is_err() {
            // Refused locally: the peers learn it from the record; this rank reports its own
            // error without waiting for them.
            return Ok(());
        }
        let mut ok = true;
        let digest_mine = unsafe { rec.add(1).read_volatile() };
        for q in peers() {
            let signallers = [q];
            let ctx = WaitContext {
                schedule: &plan.schedule,
                step: u32::MAX,
                slot_name: &self.slot_names[q as usize],
                signallers: &signallers,
            };
            fabric.wait(self.slot_base + q, Cmp::Ge, seq, &ctx)?;
            let peer = self.record_ptr(fabric, q, seq)?;
            // SAFETY: a checked range of the peer's record, published before its signal
            // (acquired by the wait above).
            let (pseq, pdigest) = unsafe { (peer.read_volatile(), peer.add(1).read_volatile()) };
            if pseq != seq {
                return Err(ExecError::Runtime(format!(
                    "launch agreement of `{}`: rank {q} published launch {pseq}, expected {seq}",
                    plan.schedule
                )));
            }
            ok &= pdigest == digest_mine && pdigest != INVALID;
        }
        let mut detail = String::new();
        if ok {
            // Same digest everywhere; the binding words must also agree, an empty role
            // agreeing with anything (uneven extents leave roles empty on some ranks).
            for i in 0..roles {
                let mut words = here().filter_map(|q| {
                    let r = self.record_ptr(fabric, q, seq).ok()?;
                    // SAFETY: checked record range, published (see above).
                    let w = unsafe { r.add(HEADER + i).read_volatile() };
                    (w != EMPTY).then_some(w)
                });
                let first = words.next();
                if !words.all(|w| Some(w) == first) && ok {
                    ok = false;
                    let name = plan.buffers.get(i).map_or("?", |b| b.name.as_str());
                    detail = format!(
                        ". Buffer `{name}` (argument {i}) is bound differently across the \
                         group: a tensor must be bound the same way on every rank — all \
                         symmetric (the same symm.empty allocation and offset) or all ordinary"
                    );
                }
                bound.push(first.unwrap_or(EMPTY));
            }
        }
        if ok {
            return Ok(());
        }
        let per_rank = here()
            .map(|q| {
                self.record_ptr(fabric, q, seq)
                    // SAFETY: checked record range, published (see above).
                    .map(|r| unsafe { describe(r, q, roles, plan) })
                    .unwrap_or_else(|e| format!("rank {q}: unreadable ({e})"))
            })
            .collect();
        Err(ExecError::Disagreement(Box::new(Disagreement {
            schedule: plan.schedule.clone(),
            group: fabric.label().to_string(),
            per_rank,
            detail,
        })))
    }

    fn roles(&self) -> usize {
        self.roles
    }
}

/// The digest of a signature: sizes (every role's extent on every rank follows from them),
/// dtypes, op (when the plan reduces). `DefaultHasher::new()` has fixed keys, so every process
/// of one build computes the same value.
fn digest(s: &Signature<'_>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.sizes.vars.hash(&mut h);
    s.sizes.counts.hash(&mut h);
    dtype_code(s.types.data).hash(&mut h);
    dtype_code(s.types.wire).hash(&mut h);
    dtype_code(s.types.acc).hash(&mut h);
    if s.reduces {
        op_code(s.op).hash(&mut h);
    }
    s.buffers.len().hash(&mut h);
    match h.finish() {
        INVALID => INVALID - 1,
        d => d,
    }
}

/// Write this rank's record for launch `seq` at `rec`.
///
/// # Safety
/// `rec` points to a writable record of `HEADER + 2 * roles + TEXT_BYTES / 8` words.
unsafe fn write_record(
    rec: *mut u64,
    roles: usize,
    seq: u64,
    mine: Result<&Signature<'_>, &ExecError>,
) {
    let put = |i: usize, v: u64| unsafe { rec.add(i).write_volatile(v) };
    match mine {
        Ok(s) => {
            put(1, digest(s));
            put(2, roles as u64);
            put(3, dtype_code(s.types.data));
            put(4, dtype_code(s.types.wire));
            put(5, dtype_code(s.types.acc));
            put(6, if s.reduces { op_code(s.op) } else { NO_OP });
            put(7, 0);
            for i in 0..roles {
                put(HEADER + i, s.buffers.get(i).map_or(EMPTY, pattern_word));
                put(
                    HEADER + roles + i,
                    s.lens.get(i).copied().unwrap_or(u64::MAX),
                );
            }
        }
        Err(e) => {
            put(1, INVALID);
            put(2, roles as u64);
            let text = e.to_string();
            let bytes = &text.as_bytes()[..text.len().min(TEXT_BYTES)];
            put(7, bytes.len() as u64);
            for i in 0..roles {
                put(HEADER + i, EMPTY);
            }
            let dst = unsafe { rec.add(HEADER + 2 * roles) } as *mut u8;
            for (i, b) in bytes.iter().enumerate() {
                unsafe { dst.add(i).write_volatile(*b) };
            }
        }
    }
    put(0, seq);
}

/// One rank's record as a phrase of the [`Disagreement`] message.
///
/// # Safety
/// `rec` points to a published record laid out for `roles` roles.
unsafe fn describe(rec: *const u64, rank: u32, roles: usize, plan: &Plan) -> String {
    let get = |i: usize| unsafe { rec.add(i).read_volatile() };
    if get(1) == INVALID {
        let n = (get(7) as usize).min(TEXT_BYTES);
        let src = unsafe { rec.add(HEADER + 2 * roles) } as *const u8;
        let bytes: Vec<u8> = (0..n)
            .map(|i| unsafe { src.add(i).read_volatile() })
            .collect();
        return format!(
            "rank {rank}: refused its own arguments ({})",
            String::from_utf8_lossy(&bytes)
        );
    }
    let lens: Vec<String> = (0..roles)
        .map(|i| {
            let n = get(HEADER + roles + i);
            let n = if n == u64::MAX {
                "?".to_string()
            } else {
                n.to_string()
            };
            if roles == 1 {
                format!("{n} elements")
            } else {
                let name = plan.buffers.get(i).map_or("?", |b| b.name.as_str());
                format!("`{name}` {n}")
            }
        })
        .collect();
    let mut s = format!("rank {rank}: {}", lens.join(", "));
    if roles > 1 {
        s.push_str(" elements");
    }
    s.push(' ');
    s.push_str(dtype_name(get(3)));
    if get(4) != get(3) {
        s.push_str(&format!(" (wire {})", dtype_name(get(4))));
    }
    if get(6) != NO_OP {
        s.push(' ');
        s.push_str(ReduceOp::ALL.get(get(6) as usize).map_or("?", |o| o.name()));
    }
    let binds: Vec<String> = (0..roles)
        .map(|i| match get(HEADER + i) {
            STAGED => "ordinary (staged)".to_string(),
            EMPTY => "empty".to_string(),
            off => format!("symmetric at heap offset {off}"),
        })
        .collect();
    s.push_str(&format!(" [{}]", binds.join(", ")));
    s
}
