//! Launch agreement: before any data moves, the ranks of a launch agree on what they launch —
//! the launch sizes (and so every role's element count on every rank), the data, wire and
//! accumulator dtypes, the reduce op when the plan reduces, and the binding pattern (which
//! roles are symmetric and at which heap offset, which are staged) — or every rank fails with
//! the same [`Disagreement`] naming each rank's values, and nothing is written anywhere.
//!
//! **The signal word.** Each rank sets, per launch, one agreement slot on every peer to a
//! single 64-bit word: the low 8 bits of the launch's sequence number (a *tag*), the
//! [`ENTERED`] flag (bit 8), the [`SPECULATED`] flag (bit 9) and a 54-bit digest of its launch signature — sizes, dtypes, op when the plan reduces, number of
//! bindings and the binding pattern word of every role (see [`super::binding`]). A peer waits
//! for that slot, and the one cache line it then holds carries everything the common case
//! needs: the slot's word equals its own word exactly when the peer launched the same (with a
//! digest collision probability of 2^-55 per disagreeing pair; the flag is not compared).
//! Slots come in two copies by sequence parity: a peer is never more than one launch ahead of
//! this rank's reading (it publishes launch e + 2 only after it has seen this rank's word of
//! e + 1 — in its check of e + 1, or, when it refused its own arguments there and so checked
//! nothing, in a wait before it publishes e + 2 — and this rank publishes e + 1 after reading
//! the peer's word of e), so the slot of this launch's parity holds either this launch's word
//! or an older one, told apart by the tag.
//!
//! **The record.** Before that signal each rank also writes a record in its own heap segment:
//! the sequence number, the digest, the binding pattern words, the dtype and op codes and its
//! element count per role — or, when its own arguments were already refused locally, an
//! *invalid* digest and its error text. Peers read a record only when a word differs (so in
//! the common case the record's lines never leave the writer's cache and writing them costs
//! a few cached stores): then every rank reads every record, decides exactly — an empty role
//! agrees with any binding, which the digest cannot express — and on a real disagreement
//! builds the same message. (If any two words differ, every rank sees at least one word that
//! differs from its own, so every rank takes that path together.) The record is one symmetric
//! scratch allocation of the loaded plan, two copies by sequence parity like the slots.
//!
//! A rank that refused its own arguments publishes its refusal and returns its own error at
//! once; its peers fail with a [`Disagreement`] that quotes it, instead of waiting for it.
//! Before it publishes its next launch of the plan it waits for its peers' words of the refused
//! one ([`AgreementArea::refused_unread`]), which it did not read, so it cannot overwrite its
//! word of the launch before while a peer has yet to read it.
//!
//! **Ordering.** Nobody waits before publishing, except for peers' words of an older launch
//! (after a refusal of its own arguments, above), which every rank publishes without waiting
//! for anything newer, so this cannot deadlock. When a rank binds no
//! role empty and its staging area need not grow, it stages in under its own binding before
//! the check — before publishing ([`AgreementArea::publish`]), with the [`ENTERED`] flag, when
//! it has entry credits for peers that check its word, else right after publishing — and only
//! then checks the peers' words ([`AgreementArea::check`]), before its first step; otherwise
//! it publishes without the flag, checks, stages under the agreed binding and sends its entry
//! credits. Staging writes only the rank's own area
//! and never takes scratch before the check (a disagreeing size would otherwise make ranks ask
//! for different scratch), and every rank checks every peer's word before its first step —
//! but for a *speculative prefix* (puts into the peers' scratch copy of this launch's parity
//! and their signals, flagged [`SPECULATED`]; "Speculative scratch puts" in `super::loaded`) —
//! so no peer writes into a rank's role buffers on a disagreeing launch. A refused launch is finished
//! as one whose steps did nothing on every rank (see `super::loaded`), since some ranks may
//! have sent entry credits. Cost per launch: a compare with the last signature (a digest of a
//! few words when it changed), one record store, one signal and one satisfied-or-short wait
//! per peer, whose line is the only one read; nothing with one rank. The common case — a
//! launch that repeats the last one, whose peers' words are already here — takes an inline
//! path: the sequence stored into its record, its word signalled, and each peer's word read
//! where the fabric keeps it ([`Fabric::signal_words`]) instead of through its wait.
//!
//! **Credits.** The word carries the peer's exit credits of the previous launch (it is
//! published after them) and, when flagged [`ENTERED`], its entry credits of this launch (it
//! is published after the stage-in they follow). Neither is sent: the checking rank applies
//! them to its own slots ("Exit credits" and "Entry credits" in `super::loaded`), so in the
//! common case the word replaces two remote updates and two remote reads per pair, and the
//! agreement costs less than the credits it carries. [`AgreementArea::check`] tells per peer
//! what its word implies ([`PeerEntry`]). A rank that refused its own arguments publishes no
//! flag, sends its own entry credits and applies none by word, so a flagged peer sends it
//! the credits its word would have implied.
//!
//! The sequence number counts launches that reached the agreement on this (group, plan),
//! successful or not, so a refused launch does not desynchronise the next one.

use super::binding::{Binding, EMPTY, STAGED};
use super::dtype::{DType, ElemTypes};
pub use super::error::Disagreement;
use super::error::ExecError;
use super::fabric::{Fabric, WaitContext};
use super::reduce::ReduceOp;
use std::sync::atomic::{AtomicU64, Ordering};
use symsched_plan::{Cmp, LaunchSizes, Plan, SignalMode};

/// Record digest of a rank whose own arguments were refused before the agreement.
const INVALID: u64 = u64::MAX;
/// The digest part of a signal word (the low 8 bits are the sequence tag, bit 8 the
/// [`ENTERED`] flag, bit 9 the [`SPECULATED`] flag).
const DIGEST_MASK: u64 = !0x3ff;
/// Signal word flag: the rank published after staging in, so its word also implies its entry
/// credits to the peer that reads it (see "Entry credits" in the module docs).
const ENTERED: u64 = 0x100;
/// Signal word flag: the rank runs its speculative prefix of this launch before its check —
/// puts into its peers' scratch and their signals (see "Speculative scratch puts" in
/// `super::loaded`) — so a refused launch's accounting counts those signals as sent.
const SPECULATED: u64 = 0x200;
/// The flags a word may carry beside its digest and tag (not compared).
const FLAGS: u64 = ENTERED | SPECULATED;
/// Signal word digest of a refused rank.
const INVALID_WORD: u64 = DIGEST_MASK;
/// Bytes of error text an invalid record carries.
const TEXT_BYTES: usize = 256;
/// Header words: sequence, digest, number of roles, data, wire and acc dtype codes, op code,
/// text length.
const HEADER: usize = 8;
/// Op code when the plan does not reduce (the op is then not part of the launch).
const NO_OP: u64 = u64::MAX;

/// What a loaded plan keeps for its agreement: its slots and its record area.
#[derive(Debug)]
pub(crate) struct AgreementArea {
    /// First of 2P signal slots: slots `base + 2q` and `base + 2q + 1` (by sequence parity) on
    /// this rank are set only by rank q.
    slot_base: u32,
    /// Symmetric heap offset of the record area (two copies).
    record: u64,
    /// Bytes of one record copy.
    record_bytes: u64,
    /// Number of role buffers of the plan.
    roles: usize,
    /// Names of the agreement slots (for timeouts).
    slot_names: Vec<String>,
    /// The peers this rank agrees with: the other members that share its heaps (decided once:
    /// reachability does not change while the group lives).
    peers: Vec<u32>,
    /// Addresses of this rank's two record copies (its own segment stays mapped where it is
    /// for the group's life; the checked `heap_ptr` per launch cost ~30 instructions).
    own_records: [usize; 2],
    /// Where this rank's 2P agreement counters lie, when the fabric says
    /// ([`Fabric::signal_words`]): the first counter's address and the stride. A check looks
    /// at a peer's word there first and calls [`Fabric::wait`] only when it is not yet this
    /// launch's (the wait's context and call were ~90 instructions a peer).
    words: Option<(usize, usize)>,
    /// The last valid signature published and its digests.
    last: LastSignature,
    /// Per record copy (sequence parity): the word digest of the valid record it holds.
    written: [Option<u64>; 2],
    /// The last launch was refused here on its own arguments, so this rank did not read its
    /// peers' words of it: the next [`Self::publish`] waits for them first.
    unread: bool,
    /// The word digest of the last launch every rank agreed on, while no launch was refused
    /// since: a launch that repeats it may speculate ([`Self::repeats_agreed`]).
    last_agreed: Option<u64>,
    /// The peers whose words of the launch refused here on its own arguments carried the
    /// [`SPECULATED`] flag, read by the next [`Self::publish`] ([`Self::take_speculators`]).
    unread_speculators: Vec<u32>,
}

/// What this rank published for one launch ([`AgreementArea::publish`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Published {
    seq: u64,
    /// The signal word (digest and sequence tag) without the [`ENTERED`] flag: what every
    /// rank's word must equal.
    word: u64,
    /// The signature digest of the record ([`INVALID`] for a local refusal).
    core: u64,
    /// The word carries [`SPECULATED`].
    speculated: bool,
    /// No peer shares this rank's heaps: nothing to agree on.
    alone: bool,
}

impl Published {
    /// Whether this rank's word carries the [`SPECULATED`] flag.
    pub(crate) fn speculated(&self) -> bool {
        self.speculated
    }

    /// The word this rank signals: its word with the [`ENTERED`] flag when `entered`, and the
    /// [`SPECULATED`] flag when it speculates.
    #[inline]
    fn signalled(&self, entered: bool) -> u64 {
        let mut w = self.word;
        if entered {
            w |= ENTERED;
        }
        if self.speculated {
            w |= SPECULATED;
        }
        w
    }
}

/// The digests of one launch's signature ([`AgreementArea::digests`]): computed once per
/// launch, and used by both [`AgreementArea::repeats_agreed`] and [`AgreementArea::publish`]
/// (the cached compare with the last signature, a memcmp of its resolution key among others,
/// measured ~100 instructions per launch when it ran twice).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Digests {
    /// The signature digest of the record.
    core: u64,
    /// The word digest (no sequence tag, no flags).
    word: u64,
}

/// What a peer's word of this launch says about its entry credits to this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum PeerEntry {
    /// The peer sends them (it published before staging in, or does not check words).
    #[default]
    Sent,
    /// Its word is flagged [`ENTERED`]: the word implies them, and this rank applies them.
    ByWord,
    /// It refused its own arguments: it sends its entry credits and applies none by word, so
    /// a rank whose flagged word would imply its credits to it sends them after all.
    Refused,
}

/// The last valid signature this rank published, so a repeated launch — the common case —
/// compares a few words instead of digesting its signature again.
#[derive(Debug, Default)]
struct LastSignature {
    types: Option<ElemTypes>,
    op: Option<ReduceOp>,
    reduces: bool,
    /// The serial of the resolution whose key the sizes were digested by
    /// ([`Signature::resolution`]); `None` when the sizes had no resolution key.
    resolution: Option<u64>,
    patterns: Vec<u64>,
    bindings: usize,
    core: u64,
    word: u64,
}

impl LastSignature {
    /// The signature digest and word digest of `s`, whose binding pattern words are `pattern`
    /// ([`own_pattern_into`]), from the cache when `s` repeats the last signature.
    #[inline]
    fn digests(&mut self, s: &Signature<'_>, pattern: &[u64]) -> (u64, u64) {
        let same = self.types == Some(s.types)
            && (!s.reduces || self.op == Some(s.op))
            && self.reduces == s.reduces
            && self.bindings == s.buffers.len()
            && s.key.is_some()
            && self.resolution == Some(s.resolution)
            && same_words(&self.patterns, pattern);
        if !same {
            self.core = digest(s);
            self.word = word_digest(self.core, pattern);
            self.types = Some(s.types);
            self.op = Some(s.op);
            self.reduces = s.reduces;
            self.bindings = s.buffers.len();
            self.resolution = s.key.is_some().then_some(s.resolution);
            self.patterns.clear();
            self.patterns.extend_from_slice(pattern);
        }
        (self.core, self.word)
    }
}

/// `a == b` for the few words of a binding pattern: a loop, where the slice compare calls
/// `memcmp` (~25 instructions a launch for one or two roles).
#[inline]
fn same_words(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// This rank's binding pattern word of every role, into `out` (cleared first); returns
/// whether it binds some role empty (its word then agrees with any binding of that role, which
/// only the records tell: its staging waits for the group's binding). One loop: the patterns by
/// `extend` and a separate scan for empty roles were ~60 instructions a launch for two roles.
pub(crate) fn own_pattern_into(s: &Signature<'_>, roles: usize, out: &mut Vec<u64>) -> bool {
    out.clear();
    let mut empty = false;
    for i in 0..roles {
        // `pattern_word` is EMPTY exactly for an empty binding.
        let w = s.buffers.get(i).map_or(EMPTY, pattern_word);
        empty |= w == EMPTY;
        out.push(w);
    }
    empty
}

/// This rank's launch as the agreement sees it.
pub(crate) struct Signature<'a> {
    pub(crate) types: ElemTypes,
    pub(crate) op: ReduceOp,
    /// Whether the plan reduces (so the op is part of the launch).
    pub(crate) reduces: bool,
    pub(crate) sizes: &'a LaunchSizes,
    /// The resolution key of `sizes`: the values of the plan's size variables in plan order,
    /// then the alltoallv counts when its extents take them (`Resolved::key`) — everything of
    /// the sizes that the launch depends on, in a few words a repeated launch compares cheaply
    /// (a map of variable names took ~70 instructions per launch).
    pub(crate) key: Option<&'a [u64]>,
    /// The serial of the resolution `key` belongs to (`Resolved::serial`): the same serial,
    /// the same key.
    pub(crate) resolution: u64,
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
                fabric.signal_slots(&format!("plan/{key}/agree"), 2 * p)?,
                fabric.scratch(&format!("plan/{key}/agree-record"), 2 * record_bytes)?,
            )
        } else {
            (0, 0)
        };
        let me = fabric.rank();
        let peers: Vec<u32> = (0..p).filter(|&q| q != me && fabric.reachable(q)).collect();
        let mut own_records = [0usize; 2];
        if !peers.is_empty() {
            for (parity, addr) in own_records.iter_mut().enumerate() {
                *addr = fabric.heap_ptr(me, record + parity as u64 * record_bytes, record_bytes)?
                    as usize;
            }
        }
        let words = (!peers.is_empty())
            .then(|| fabric.signal_words(slot_base, 2 * p))
            .flatten()
            .map(|(at, stride)| (at as usize, stride));
        Ok(AgreementArea {
            slot_base,
            words,
            record,
            record_bytes,
            roles,
            peers,
            own_records,
            slot_names: (0..p).map(|q| format!("__agree[{q}]")).collect(),
            last: LastSignature::default(),
            written: [None; 2],
            unread: false,
            last_agreed: None,
            unread_speculators: Vec::new(),
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

    /// [`Self::publish`] of a valid launch with digests `d` in the common case, inline: the
    /// record copy of this parity already holds the signature (only the sequence changes),
    /// nothing is unread and somebody shares this rank's heaps. `None` (nothing done) in
    /// every other case: then [`Self::publish`].
    #[inline]
    pub(crate) fn publish_repeated<F: Fabric>(
        &mut self,
        fabric: &F,
        seq: u64,
        d: Digests,
        entered: bool,
        speculate: bool,
    ) -> Result<Option<Published>, ExecError> {
        let parity = (seq % 2) as usize;
        if self.unread || self.with_nobody() || self.written[parity] != Some(d.word) {
            return Ok(None);
        }
        let published = Published {
            seq,
            word: d.word | (seq & 0xff),
            core: d.core,
            speculated: speculate,
            alone: false,
        };
        // SAFETY: a checked record range in this rank's own segment, holding this signature's
        // record from two launches ago.
        unsafe { (self.own_records[parity] as *mut u64).write_volatile(seq) };
        self.signal_peers(fabric, parity, published.signalled(entered))?;
        Ok(Some(published))
    }

    /// Publish this rank's part of launch number `seq` (1-based) of the plan: its record, then
    /// its word on every peer's slot. `mine` is this rank's signature, or the error its own
    /// arguments were refused with (published as an invalid record the peers quote). Never
    /// waits. The word of a repeated launch (the same signature as the last one) and its record
    /// (the same as two launches ago, the copy of this parity) are reused, so a repeated launch
    /// publishes with one store per peer and one into its record. `entered`: this rank has
    /// staged in, so its word may carry the [`ENTERED`] flag (a refusal never does);
    /// `speculate`: it will run its speculative prefix before its check ([`SPECULATED`]; only
    /// after [`Self::repeats_agreed`] said so for this signature).
    #[allow(clippy::too_many_arguments)] // the launch's number, signature and two flags
    pub(crate) fn publish<F: Fabric>(
        &mut self,
        fabric: &F,
        plan: &Plan,
        seq: u64,
        mine: Result<(&Signature<'_>, Digests), &ExecError>,
        entered: bool,
        speculate: bool,
    ) -> Result<Published, ExecError> {
        let roles = self.roles();
        // The measurement baseline (`scripts/bench_agreement.sh`) launches as if alone: no
        // word, no check, and every exit credit sent (`super::loaded`).
        if self.with_nobody() {
            return Ok(Published {
                seq,
                word: 0,
                core: 0,
                speculated: false,
                alone: true,
            });
        }
        if self.unread {
            // The peers' words of the launch refused here: once each has published it, none
            // still reads this rank's word two launches back, which this one overwrites.
            self.unread_speculators.clear();
            for &q in &self.peers {
                let word = self.peer_word(fabric, plan, q, seq - 1)?;
                if word.is_some_and(|w| w & SPECULATED != 0) {
                    self.unread_speculators.push(q);
                }
            }
            self.unread = false;
        }
        let (core, word) = match mine {
            Ok((_, d)) => (d.core, d.word),
            Err(_) => (INVALID, INVALID_WORD),
        };
        let mine = mine.map(|(sig, _)| sig);
        let speculated = speculate && mine.is_ok();
        let published = Published {
            seq,
            word: word | (seq & 0xff),
            core,
            speculated,
            alone: false,
        };
        let signalled = published.signalled(entered && mine.is_ok());
        let parity = (seq % 2) as usize;
        let rec = self.own_records[parity] as *mut u64;
        if mine.is_ok() && self.written[parity] == Some(word) {
            // SAFETY: `rec` is a checked record range in this rank's own segment, holding
            // this signature's record from two launches ago; only the sequence changes.
            unsafe { rec.write_volatile(seq) };
        } else {
            // SAFETY: `rec` is a checked range of record_bytes in this rank's own segment;
            // only this rank writes it, and peers read it only after the release below.
            unsafe { write_record(rec, roles, seq, core, mine) };
            self.written[parity] = mine.is_ok().then_some(word);
        }
        self.signal_peers(fabric, parity, signalled)?;
        Ok(published)
    }

    /// Set this rank's slot of sequence parity `parity` on every peer to `word`.
    #[inline]
    fn signal_peers<F: Fabric>(
        &self,
        fabric: &F,
        parity: usize,
        word: u64,
    ) -> Result<(), ExecError> {
        let slot = self.slot_base + 2 * fabric.rank() + parity as u32;
        for &q in &self.peers {
            fabric.signal(q, slot, SignalMode::Set, word)?;
        }
        Ok(())
    }

    /// The launch's agreement: [`Self::agreed_already`], else [`Self::check`] (which waits for
    /// the words not there yet). `Err(ExecError::Disagreement)`: the ranks refuse the launch.
    #[inline]
    pub(crate) fn agree<F: Fabric>(
        &mut self,
        fabric: &F,
        plan: &Plan,
        mine: &Published,
        bound: &mut Vec<u64>,
        entries: &mut Vec<PeerEntry>,
        speculated: &mut Vec<bool>,
    ) -> Result<(), ExecError> {
        if self.agreed_already(fabric.size(), mine, entries, speculated) {
            return Ok(());
        }
        self.check(fabric, plan, mine, bound, entries, speculated)
    }

    /// The common case of [`Self::check`], inline: every peer's word of this launch is already
    /// in its slot and equals this rank's. Then `entries` and `speculated` are set from the
    /// words, as `check` sets them, and the launch is agreed; `false` (and nothing decided)
    /// otherwise: then `check`.
    #[inline(always)]
    pub(crate) fn agreed_already(
        &mut self,
        p: u32,
        mine: &Published,
        entries: &mut Vec<PeerEntry>,
        speculated: &mut Vec<bool>,
    ) -> bool {
        if mine.alone || self.words.is_none() {
            return false;
        }
        // Every peer's entry is written below.
        size_per_peer(p, entries, speculated);
        for &q in &self.peers {
            match self.peek(q, mine.seq) {
                Some(w) if w & !FLAGS == mine.word => {
                    (entries[q as usize], speculated[q as usize]) = word_says(w);
                }
                _ => return false,
            }
        }
        self.last_agreed = Some(mine.word & DIGEST_MASK);
        true
    }

    /// Decide launch `mine.seq` with every rank of the group, after [`Self::publish`] of a
    /// valid signature whose pattern ([`own_pattern_into`]) `bound` holds: `Ok` only when
    /// every rank launched the same; a [`Disagreement`] (the same on every rank) otherwise.
    /// Waits for every peer's word; reads the records only when a word differs (see the module
    /// docs). Either way, `entries[q]` then tells what peer q's word implies about its entry
    /// credits ([`PeerEntry`]; `Sent` for this rank and ranks it does not check), and
    /// `speculated[q]` whether q ran its speculative prefix ([`SPECULATED`]).
    ///
    /// On success `bound[i]` is the group's binding of role i — its binding pattern word on the
    /// ranks where it is not empty (a heap offset or [`STAGED`]; [`EMPTY`] if empty
    /// everywhere), the same on every rank. The staging layout and the peer addresses follow it,
    /// so a rank where the role is empty lays the area out alike and addresses its peers' copy
    /// where they bound it. When this rank binds no role empty, that is its own pattern, which
    /// `bound` keeps.
    #[allow(clippy::too_many_arguments)] // the launch and its three per-peer outputs
    pub(crate) fn check<F: Fabric>(
        &mut self,
        fabric: &F,
        plan: &Plan,
        mine: &Published,
        bound: &mut Vec<u64>,
        entries: &mut Vec<PeerEntry>,
        speculated: &mut Vec<bool>,
    ) -> Result<(), ExecError> {
        let (p, seq) = (fabric.size(), mine.seq);
        let roles = self.roles();
        // The loop below writes every peer's entry.
        size_per_peer(p, entries, speculated);
        if mine.alone {
            return Ok(());
        }
        // Speculation needs a launch agreed since the last refusal: cleared until this one is.
        self.last_agreed = None;
        // The members that share this rank's heaps: a group spanning nodes agrees within each
        // node (its launches stage every buffer; the nodes meet in host collectives).
        let here = || (0..p).filter(|&q| fabric.reachable(q));
        let peers = || self.peers.iter().copied();
        let (core_mine, word_mine) = (mine.core, mine.word);
        let mut ok = true;
        for q in peers() {
            let word = match self.peek(q, seq) {
                Some(w) => Some(w),
                None => self.peer_word(fabric, plan, q, seq)?,
            };
            let (word, (entry, spec)) = match word {
                Some(w) => (w, word_says(w)),
                None => (!word_mine, (PeerEntry::Refused, false)),
            };
            (entries[q as usize], speculated[q as usize]) = (entry, spec);
            ok &= word & !FLAGS == word_mine;
        }
        if ok {
            // The same word everywhere: the same signature and binding pattern everywhere.
            self.last_agreed = Some(word_mine & DIGEST_MASK);
            return Ok(());
        }
        bound.clear();
        // Some word differs: every rank is here (see the module docs). Decide from the
        // records, published before the words (acquired by the waits above): the same
        // signature digest (sizes, dtypes, op) everywhere, and binding patterns that agree.
        ok = true;
        for q in peers() {
            let peer = self.record_ptr(fabric, q, seq)?;
            // SAFETY: a checked range of the peer's record, published before its signal.
            let (pseq, pdigest) = unsafe { (peer.read_volatile(), peer.add(1).read_volatile()) };
            if pseq != seq {
                return Err(ExecError::Runtime(format!(
                    "launch agreement of `{}`: rank {q} published launch {pseq}, expected {seq}",
                    plan.schedule
                )));
            }
            ok &= pdigest == core_mine && pdigest != INVALID;
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
            // Agreed from the records (an empty role somewhere): not a repeatable word, so no
            // speculation follows it.
            return Ok(());
        }
        bound.clear();
        Err(self.disagreement(fabric, plan, seq, detail))
    }

    /// This rank refused its own arguments in the launch it just published, and returns
    /// without reading its peers' words of it: its next [`Self::publish`] reads them first.
    pub(crate) fn refused_unread(&mut self) {
        self.unread = true;
        self.last_agreed = None;
    }

    /// Whether a launch with digests `d` repeats the last launch every rank agreed on, with no
    /// launch refused since: it may then run its speculative prefix before its check (its
    /// scratch layout and its peers' are that launch's, and its check of that launch's words
    /// implied every exit credit its prefix's puts need; see "Speculative scratch puts" in
    /// `super::loaded`).
    pub(crate) fn repeats_agreed(&self, d: Digests) -> bool {
        if self.with_nobody() {
            return false;
        }
        self.last_agreed == Some(d.word)
    }

    /// The digests of signature `s`, whose binding pattern words are `pattern`
    /// ([`own_pattern_into`]), for [`Self::repeats_agreed`] and [`Self::publish`]: from the
    /// cache when `s` repeats the last signature; nothing is digested when no peer shares this
    /// rank's heaps (the launch then agrees with nobody).
    #[inline]
    pub(crate) fn digests(&mut self, s: &Signature<'_>, pattern: &[u64]) -> Digests {
        if self.with_nobody() {
            return Digests { core: 0, word: 0 };
        }
        let (core, word) = self.last.digests(s, pattern);
        Digests { core, word }
    }

    /// The peers that speculated in the launch this rank refused on its own arguments, as its
    /// last [`Self::publish`] read them (empty otherwise); their prefix signals reached this
    /// rank on top of what its refusal added for them.
    pub(crate) fn take_speculators(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.unread_speculators)
    }

    /// Peer q's word of launch `seq` when its slot already holds it, read without waiting;
    /// `None` otherwise (not published yet, or no address to read it at): then
    /// [`Self::peer_word`] decides.
    #[inline]
    fn peek(&self, q: u32, seq: u64) -> Option<u64> {
        let (at, stride) = self.words?;
        let slot = 2 * q as usize + (seq % 2) as usize;
        // SAFETY: `signal_words` gave 2P counters at this stride, in memory that stays mapped
        // while the fabric lives (the area is taken again after a group reset); slot < 2P.
        let word = unsafe { (*((at + slot * stride) as *const AtomicU64)).load(Ordering::Acquire) };
        (word & 0xff == seq & 0xff).then_some(word)
    }

    /// Peer q's word of launch `seq`, waited for; `None` when q's slot already holds a later
    /// launch's word.
    fn peer_word<F: Fabric>(
        &self,
        fabric: &F,
        plan: &Plan,
        q: u32,
        seq: u64,
    ) -> Result<Option<u64>, ExecError> {
        let signallers = [q];
        let ctx = WaitContext {
            schedule: &plan.schedule,
            step: u32::MAX,
            slot_name: &self.slot_names[q as usize],
            signallers: &signallers,
        };
        let slot = self.slot_base + 2 * q + (seq % 2) as u32;
        // The slot holds this launch's word or the one two launches older: read it, and
        // wait for a change until the tag is this launch's. A tag ahead cannot happen (see the
        // module docs); were it to, the records tell.
        let mut word = fabric.wait(slot, Cmp::Ge, 0, &ctx)?;
        loop {
            match (word & 0xff).wrapping_sub(seq & 0xff) & 0xff {
                0 => return Ok(Some(word)),
                1..=127 => return Ok(None),
                _ => word = fabric.wait(slot, Cmp::Ne, word, &ctx)?,
            }
        }
    }

    /// The [`Disagreement`] of launch `seq`, from every record (published).
    #[cold]
    fn disagreement<F: Fabric>(
        &self,
        fabric: &F,
        plan: &Plan,
        seq: u64,
        detail: String,
    ) -> ExecError {
        let roles = self.roles();
        let per_rank = (0..fabric.size())
            .filter(|&q| fabric.reachable(q))
            .map(|q| {
                self.record_ptr(fabric, q, seq)
                    // SAFETY: checked record range, published (see `check`).
                    .map(|r| unsafe { describe(r, q, roles, plan) })
                    .unwrap_or_else(|e| format!("rank {q}: unreadable ({e})"))
            })
            .collect();
        ExecError::Disagreement(Box::new(Disagreement {
            schedule: plan.schedule.clone(),
            group: fabric.label().to_string(),
            per_rank,
            detail,
        }))
    }

    fn roles(&self) -> usize {
        self.roles
    }

    /// No peer shares this rank's heaps (or the measurement baseline,
    /// `scripts/bench_agreement.sh`, launches as if alone): nothing to publish, digest or check.
    fn with_nobody(&self) -> bool {
        cfg!(symsched_bench_no_agreement) || self.peers.is_empty()
    }
}

/// `entries` and `speculated` sized for `p` ranks, every rank `Sent` and not speculating when
/// they are (re)sized (what [`AgreementArea::check`] leaves for this rank and the ranks it does
/// not check). Their callers write every peer's entry and nothing writes the others, so vectors
/// already of this size are left as they are: resetting them anyway cost two `memset` calls a
/// launch (~30 instructions).
#[inline]
fn size_per_peer(p: u32, entries: &mut Vec<PeerEntry>, speculated: &mut Vec<bool>) {
    if entries.len() == p as usize && speculated.len() == p as usize {
        return;
    }
    entries.clear();
    entries.resize(p as usize, PeerEntry::Sent);
    speculated.clear();
    speculated.resize(p as usize, false);
}

/// What a peer's word of this launch says: its entry credits ([`PeerEntry`]) and whether it
/// ran its speculative prefix (never for a refusal).
#[inline]
fn word_says(w: u64) -> (PeerEntry, bool) {
    if w & DIGEST_MASK == INVALID_WORD {
        (PeerEntry::Refused, false)
    } else if w & ENTERED != 0 {
        (PeerEntry::ByWord, w & SPECULATED != 0)
    } else {
        (PeerEntry::Sent, w & SPECULATED != 0)
    }
}

/// Multiplier of the digest's rounds (2^64 / golden ratio, odd).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// One round: `(h ^ w) * K` is a bijection of `h` for a fixed `w` and of `w` for a fixed
/// `h` (K is odd), so two word sequences of one length that differ in a single word always
/// end in different states. That is the case that matters here — ranks that disagree on one
/// count, one dtype or one binding — and the inputs are a handful of words chosen by the
/// program, not an adversary, so nothing stronger (SipHash) is needed; the rotation feeds
/// the high bits, which the multiplication mixes, back into the low ones. Measured with
/// `cargo bench -p symsched-runtime --bench launch_overhead` (docs/performance.md).
#[inline]
fn round(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(K).rotate_left(29)
}

/// Final avalanche (the 64-bit finaliser of MurmurHash3, a bijection), so the 54 bits a
/// signal word keeps depend on every input bit.
#[inline]
fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The signature digest a record carries: sizes (every role's extent on every rank follows
/// from them: the resolution key when there is one, else every variable and the counts),
/// dtypes, op (when the plan reduces), number of bindings. Every process of every build
/// computes the same value for the same signature; never [`INVALID`].
fn digest(s: &Signature<'_>) -> u64 {
    let mut h = K;
    match s.key {
        Some(key) => {
            h = round(h, key.len() as u64);
            for w in key {
                h = round(h, *w);
            }
        }
        None => h = sizes_digest(h, s.sizes),
    }
    h = round(h, dtype_code(s.types.data));
    h = round(h, dtype_code(s.types.wire));
    h = round(h, dtype_code(s.types.acc));
    h = round(h, if s.reduces { op_code(s.op) } else { NO_OP });
    h = round(h, s.buffers.len() as u64);
    match finish(h) {
        INVALID => INVALID - 1,
        d => d,
    }
}

/// `h` advanced over every size variable (name and value) and the counts matrix (a launch
/// without a resolution key; the ranks agree on having one or not, as on the sizes).
fn sizes_digest(mut h: u64, sizes: &LaunchSizes) -> u64 {
    h = round(h, u64::MAX - 1);
    h = round(h, sizes.vars.len() as u64);
    for (k, v) in &sizes.vars {
        h = round(h, k.len() as u64);
        for chunk in k.as_bytes().chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            h = round(h, u64::from_le_bytes(b));
        }
        h = round(h, *v);
    }
    match &sizes.counts {
        None => h = round(h, u64::MAX),
        Some(rows) => {
            h = round(h, rows.len() as u64);
            for row in rows {
                h = round(h, row.len() as u64);
                for c in row {
                    h = round(h, *c);
                }
            }
        }
    }
    h
}

/// The digest part of the signal word: the signature digest and the binding pattern word of
/// every role (`pattern`, [`own_pattern_into`]), in the high 54 bits; never [`INVALID_WORD`].
fn word_digest(core: u64, pattern: &[u64]) -> u64 {
    let mut h = round(K, core);
    for w in pattern {
        h = round(h, *w);
    }
    match finish(h) & DIGEST_MASK {
        INVALID_WORD => INVALID_WORD - 0x400,
        d => d,
    }
}

/// Write this rank's record for launch `seq` at `rec`, with its signature `digest`.
///
/// # Safety
/// `rec` points to a writable record of `HEADER + 2 * roles + TEXT_BYTES / 8` words.
unsafe fn write_record(
    rec: *mut u64,
    roles: usize,
    seq: u64,
    digest: u64,
    mine: Result<&Signature<'_>, &ExecError>,
) {
    let put = |i: usize, v: u64| unsafe { rec.add(i).write_volatile(v) };
    put(1, digest);
    match mine {
        Ok(s) => {
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
