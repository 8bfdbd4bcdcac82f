//! One group's eager alltoallv channel and the protocol run over it (see the module docs of
//! [`super`]).

use super::header::{dtype_code, verdict, FIXED_WORDS, FLAGS_AT, INLINE, MAGIC, PULL_AT};
use super::{eager_capacity, AlltoallvOutcome, ALIGN, PULL_MIN_BYTES};
use crate::config::ExecOptions;
use crate::exec::dtype::DType;
use crate::exec::error::ExecError;
use crate::exec::fabric::{Fabric, WaitContext};
use crate::exec::trace::Protocol;
use std::time::Instant;
use symsched_plan::{Cmp, SignalMode};

/// The eager channel of one group: its knobs, and its slots and areas, created on its first
/// call.
pub struct EagerChannel {
    /// Pull a symmetric send buffer's chunks above the slot capacity in the one round
    /// ([`ExecOptions::a2a_large_pull`]); off takes the header round + plan for them. Ranks may
    /// disagree: each announces its choice in its header, and the rendezvous decision reads the
    /// headers.
    large_pull: bool,
    /// Stream large pulled chunks and the own block past the cache from this many bytes on
    /// (`None`: never; [`ExecOptions::nt_copy`], [`ExecOptions::nt_min_bytes`]).
    nt_from: Option<usize>,
    chan: Option<Channel>,
    /// The group's reset generation `chan` belongs to: a reset zeroes the counters and forgets
    /// the registries, so the first call of a new generation takes a new channel (epoch 0,
    /// slots and areas registered again), never reading what an aborted call left.
    generation: u64,
}

struct Channel {
    epoch: u64,
    /// First of `2P` signal slots: `arrive[0..P]`, then `consumed[0..P]`.
    slots: u32,
    /// Symmetric offset of the landing area (`2P` slots of `stride` bytes).
    area: u64,
    cap: u64,
    /// Header bytes (rounded up to the alignment).
    hdr: u64,
    stride: u64,
    /// Header words received from each rank this call (own included), reused across calls.
    words: Vec<Vec<u64>>,
    /// Symmetric offset of the outbox: `P` chunks of `cap` bytes where chunks of a private
    /// send buffer wait to be pulled.
    outbox: u64,
    /// Byte offset of each chunk in the send and in the receive buffer this call (kept to
    /// spare two allocations per call).
    send_at: Vec<u64>,
    recv_at: Vec<u64>,
}

/// Fill `at` with the byte offset of each of `counts`' chunks (already checked not to overflow:
/// they sum to a buffer's length).
fn offsets(at: &mut Vec<u64>, counts: &[u64], es: u64) {
    at.clear();
    let mut acc = 0u64;
    for &c in counts {
        at.push(acc);
        acc += c * es;
    }
}

fn bytes_of(count: u64, es: u64, what: &str) -> Result<u64, ExecError> {
    count.checked_mul(es).ok_or_else(|| {
        ExecError::Plan(symsched_plan::PlanError::Inconsistent(format!(
            "{what}: {count} elements overflow a byte count"
        )))
    })
}

fn total_bytes(counts: &[u64], es: u64, what: &str) -> Result<u64, ExecError> {
    let mut sum = 0u64;
    for &c in counts {
        sum = sum
            .checked_add(bytes_of(c, es, what)?)
            .ok_or(symsched_plan::PlanError::SizeOverflow)?;
    }
    Ok(sum)
}

/// Wait until `slot` (fed by peer `q` alone) reaches `target`, naming the slot and the peer
/// in a timeout or dead-peer error.
fn wait_on<F: Fabric>(
    fab: &F,
    q: usize,
    slot: u32,
    slot_name: &str,
    target: u64,
) -> Result<u64, ExecError> {
    let who = [q as u32];
    let c = WaitContext {
        schedule: "<alltoallv eager>",
        step: u32::MAX,
        slot_name,
        signallers: &who,
    };
    fab.wait(slot, Cmp::Ge, target, &c)
}

impl EagerChannel {
    /// A channel with the knobs of `opts`; its slots and areas are allocated on the first call.
    pub fn new(opts: &ExecOptions) -> EagerChannel {
        EagerChannel {
            large_pull: opts.a2a_large_pull,
            nt_from: opts.nt_copy.then_some(opts.nt_min_bytes),
            chan: None,
            generation: 0,
        }
    }

    /// All-to-all-v of `dtype` elements in one round when every chunk is small or pulled (see
    /// the module docs): `send` holds this rank's chunks for ranks 0..P in order
    /// (`send_counts[j]` elements for rank j), `recv` receives `recv_counts[j]` elements from
    /// each rank j in order.
    ///
    /// Collective over the group. Returns [`AlltoallvOutcome::Rendezvous`] with the agreed
    /// counts matrix when a chunk of an ordinary (non-heap) send buffer is too large to go
    /// eagerly; the caller then runs the plan. Counts that disagree between a sender and its
    /// receiver fail on every rank with [`ExecError::CountsMismatch`] and leave every output
    /// untouched.
    ///
    /// `send_heap` is the symmetric heap offset of `send` when it lies in this rank's heap
    /// segment (its chunks above [`PULL_MIN_BYTES`] are then pulled by the receivers, at any
    /// size), else `None`.
    #[allow(clippy::too_many_arguments)] // one argument per part of the call, as the caller has them
    pub fn alltoallv<F: Fabric>(
        &mut self,
        fab: &F,
        dtype: DType,
        send_counts: &[u64],
        recv_counts: &[u64],
        send: &[u8],
        send_heap: Option<u64>,
        recv: &mut [u8],
    ) -> Result<AlltoallvOutcome, ExecError> {
        let p = fab.size() as usize;
        let me = fab.rank() as usize;
        let es = dtype.size() as u64;
        for (counts, what) in [
            (send_counts, "send counts"),
            (recv_counts, "receive counts"),
        ] {
            if counts.len() != p {
                return Err(ExecError::SizeMismatch {
                    buffer: format!("alltoallv {what}"),
                    expected: p as u64,
                    found: counts.len() as u64,
                });
            }
        }
        for (buf, counts, name) in [
            (send.len(), send_counts, "alltoallv send buffer"),
            (recv.len(), recv_counts, "alltoallv receive buffer"),
        ] {
            let expected = total_bytes(counts, es, name)?;
            if buf as u64 != expected {
                return Err(ExecError::SizeMismatch {
                    buffer: name.into(),
                    expected,
                    found: buf as u64,
                });
            }
        }
        if let Some(off) = send_heap {
            // The published offsets must name `send` itself, or a receiver would read elsewhere.
            let at = fab.heap_ptr(me as u32, off, send.len() as u64)?;
            if !send.is_empty() && !std::ptr::eq(at, send.as_ptr()) {
                return Err(ExecError::Runtime(format!(
                    "alltoallv: heap offset {off} does not address the send buffer"
                )));
            }
        }
        let generation = fab.generation();
        if generation != self.generation {
            self.chan = None;
            self.generation = generation;
        }
        if self.chan.is_none() {
            let cap = eager_capacity(p as u32);
            let hdr = (((FIXED_WORDS + 2 * p) * 8) as u64).next_multiple_of(ALIGN);
            let stride = hdr + cap;
            let slots = fab.signal_slots("alltoallv/eager", 2 * p as u32)?;
            let area = fab.scratch(&format!("alltoallv/eager/{cap}"), 2 * p as u64 * stride)?;
            let outbox = fab.scratch(&format!("alltoallv/eager-out/{cap}"), p as u64 * cap)?;
            self.chan = Some(Channel {
                epoch: 0,
                slots,
                area,
                cap,
                hdr,
                stride,
                words: vec![vec![0; FIXED_WORDS + 2 * p]; p],
                outbox,
                send_at: Vec::with_capacity(p),
                recv_at: Vec::with_capacity(p),
            });
        }
        let ch = self.chan.as_mut().expect("created above");
        let e = ch.epoch;
        let par = e % 2;
        let slot_off = |src: usize| ch.area + (par * p as u64 + src as u64) * ch.stride;
        // Tracing off costs this one branch per call, and a test of `tr` per step.
        let tr = Protocol::begin("alltoallv_eager", me as u32, fab.label(), e);
        let now = || tr.as_ref().map(|_| Instant::now());
        let step = |t0: Option<Instant>, kind: &str, what: &str, peer: usize, bytes: u64| {
            if let (Some(tr), Some(t0)) = (&tr, t0) {
                tr.step(kind, what, Some(peer as u32), bytes, t0);
            }
        };
        let wait = |q: usize, slot: u32, name: &str, target: u64| {
            let t0 = now();
            let r = wait_on(fab, q, slot, name, target);
            if let (Some(tr), Some(t0)) = (&tr, t0) {
                tr.wait(name, q as u32, target, t0);
            }
            r
        };
        // Offsets of each chunk in the send buffer (the vector is the channel's, reused).
        let mut send_at = std::mem::take(&mut ch.send_at);
        offsets(&mut send_at, send_counts, es);
        let pull_any = send_heap.is_some() && self.large_pull;
        {
            let mine = &mut ch.words[me];
            mine[0] = MAGIC;
            mine[1] = e;
            mine[2] = es;
            mine[3] = dtype_code(dtype);
            mine[FLAGS_AT] = u64::from(pull_any);
            mine[FIXED_WORDS..FIXED_WORDS + p].copy_from_slice(send_counts);
            mine[FIXED_WORDS + p..].copy_from_slice(recv_counts);
        }
        let mut pulled = false;
        for i in 1..p {
            let q = (me + i) % p;
            if e >= 2 {
                wait(q, ch.slots + (p + q) as u32, "consumed", e - 1)?;
            }
            let bytes = send_counts[q] * es;
            let pull = match send_heap {
                _ if bytes <= PULL_MIN_BYTES => None,
                Some(off) if bytes <= ch.cap || pull_any => Some(off + send_at[q]),
                None if bytes <= ch.cap => {
                    // A private chunk waits in our outbox: a local copy, then one cross-core
                    // pass by the receiver, instead of two cross-core passes through the slot.
                    let t0 = now();
                    let at = ch.outbox + q as u64 * ch.cap;
                    let dst = fab.heap_ptr(me as u32, at, bytes)?;
                    // SAFETY: a checked range of our outbox slot for q, which q last read in a
                    // call whose credit we waited for before returning; `bytes` of chunk q lie
                    // inside `send` (its length was checked against the counts).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            send.as_ptr().add(send_at[q] as usize),
                            dst,
                            bytes as usize,
                        )
                    };
                    step(t0, "copy", "outbox", q, bytes);
                    Some(at)
                }
                // Too large for the slot and not pullable: the rendezvous (decided below from
                // the headers alone) moves it.
                _ => None,
            };
            pulled |= pull.is_some();
            let inline = if pull.is_none() && bytes <= ch.cap {
                bytes
            } else {
                0
            };
            let t0 = now();
            ch.words[me][PULL_AT] = pull.unwrap_or(INLINE);
            let dst = fab.heap_ptr(q as u32, slot_off(me), ch.hdr + inline)?;
            let words = &ch.words[me];
            // SAFETY: `dst` is a checked range of hdr + inline bytes in q's landing slot for
            // this rank, which q does not read until our arrive signal and which we only write
            // after q consumed it (the credit wait above); the header fits `hdr` bytes by
            // construction and `inline` bytes of chunk q lie inside `send` (its length was
            // checked against the counts).
            unsafe {
                std::ptr::copy_nonoverlapping(words.as_ptr() as *const u8, dst, words.len() * 8);
                if inline > 0 {
                    std::ptr::copy_nonoverlapping(
                        send.as_ptr().add(send_at[q] as usize),
                        dst.add(ch.hdr as usize),
                        inline as usize,
                    );
                }
            }
            fab.signal(q as u32, ch.slots + me as u32, SignalMode::Set, e + 1)?;
            step(t0, "put_signal", "header", q, ch.hdr + inline);
        }
        let nwords = FIXED_WORDS + 2 * p;
        for i in 1..p {
            let q = (me + p - i) % p;
            wait(q, ch.slots + q as u32, "arrive", e + 1)?;
            let src = fab.heap_ptr(me as u32, slot_off(q), ch.hdr)?;
            let row = &mut ch.words[q];
            // SAFETY: checked local range of `hdr >= nwords * 8` bytes, complete after the
            // arrive wait (acquire); read unaligned-safe word by word.
            for (k, w) in row.iter_mut().enumerate().take(nwords) {
                *w = unsafe { std::ptr::read_unaligned((src as *const u64).add(k)) };
            }
        }
        let verdict = verdict(&ch.words, p, me, e, dtype, ch.cap);
        // Offsets of each chunk in `recv`.
        let mut recv_at = std::mem::take(&mut ch.recv_at);
        offsets(&mut recv_at, recv_counts, es);
        let nt = self.nt_from;
        let mut copied: Result<(), ExecError> = Ok(());
        // Peers `(me + i) % p` for `i < credited` got their credit already (right after we read
        // their chunk, so a sender waiting on it returns while we copy the rest).
        let mut credited = 1;
        let credit = |q: usize| {
            let t0 = now();
            let r = fab.signal(q as u32, ch.slots + (p + me) as u32, SignalMode::Set, e + 1);
            step(t0, "signal", "credit", q, 0);
            r
        };
        if let Ok(false) = verdict {
            for i in 1..p {
                let q = (me + i) % p;
                let n = recv_counts[q] * es;
                if n > 0 {
                    let t0 = now();
                    let at = recv_at[q] as usize;
                    let dst = &mut recv[at..at + n as usize];
                    let (from, what) = match ch.words[q][PULL_AT] {
                        INLINE => (fab.heap_ptr(me as u32, slot_off(q) + ch.hdr, n), "slot"),
                        off => (fab.heap_ptr(q as u32, off, n), "pull"),
                    };
                    match from {
                        // SAFETY: a checked range of n bytes: q's payload in our slot (n <=
                        // cap), or q's send chunk in its heap, which q leaves alone until our
                        // credit; complete after the arrive wait; disjoint from `recv` (a
                        // pulled chunk is q's memory, never ours; the slot is the landing
                        // area, never a user tensor).
                        Ok(src) => unsafe { copy_out(dst, src, nt) },
                        Err(err) => {
                            copied = Err(err);
                            break;
                        }
                    }
                    step(t0, if what == "pull" { "get" } else { "copy" }, what, q, n);
                }
                credit(q)?;
                credited = i + 1;
            }
            let n = recv_counts[me] * es;
            if copied.is_ok() && n > 0 {
                let t0 = now();
                let (s, at) = (send_at[me] as usize, recv_at[me] as usize);
                let src = &send[s..s + n as usize];
                // SAFETY: `src` and the destination are the checked slices of `send` and
                // `recv`, which the caller hands over as separate (non-aliasing) slices.
                unsafe { copy_out(&mut recv[at..at + n as usize], src.as_ptr(), nt) };
                step(t0, "copy", "own", me, n);
            }
        }
        // Hand the slots back in every outcome so the channel stays usable after an error.
        for i in credited..p {
            credit((me + i) % p)?;
        }
        ch.send_at = send_at;
        ch.recv_at = recv_at;
        ch.epoch += 1;
        if pulled {
            // Receivers may still be reading our send buffer: wait for every credit of this
            // call (each peer gives it in every outcome).
            for i in 1..p {
                let q = (me + i) % p;
                wait(q, ch.slots + (p + q) as u32, "consumed", e + 1)?;
            }
        }
        let outcome = copied.and(verdict).map(|big| {
            if big {
                AlltoallvOutcome::Rendezvous(
                    ch.words
                        .iter()
                        .map(|r| r[FIXED_WORDS..FIXED_WORDS + p].to_vec())
                        .collect(),
                )
            } else {
                AlltoallvOutcome::Done
            }
        });
        if let Some(tr) = tr {
            tr.end(match &outcome {
                Ok(AlltoallvOutcome::Done) => "done",
                Ok(AlltoallvOutcome::Rendezvous(_)) => "rendezvous",
                Err(_) => "error",
            });
        }
        outcome
    }
}

/// Copy `dst.len()` bytes from `src` into `dst`, streaming past the cache when the chunk is at
/// least `nt` bytes (nothing of the call re-reads the output; `None`: never).
///
/// # Safety
/// `src` is valid for `dst.len()` bytes of reads and does not overlap `dst`.
unsafe fn copy_out(dst: &mut [u8], src: *const u8, nt: Option<usize>) {
    if nt.is_some_and(|min| dst.len() >= min) {
        // SAFETY: the caller's contract; `dst` is a live exclusive slice.
        unsafe { crate::exec::stream_copy::copy(dst.as_mut_ptr(), src, dst.len()) };
    } else {
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{LocalFabric, LocalWorld};
    use std::sync::Mutex;
    use std::time::Duration;

    /// One rank's fabric and channel, as the executor holds them per group.
    struct Ex {
        fab: LocalFabric,
        chan: Mutex<EagerChannel>,
    }

    impl Ex {
        fn fabric(&self) -> &LocalFabric {
            &self.fab
        }

        fn alltoallv_eager(
            &self,
            dtype: DType,
            send_counts: &[u64],
            recv_counts: &[u64],
            send: &[u8],
            send_heap: Option<u64>,
            recv: &mut [u8],
        ) -> Result<AlltoallvOutcome, ExecError> {
            let mut chan = self.chan.lock().expect("channel");
            chan.alltoallv(
                &self.fab,
                dtype,
                send_counts,
                recv_counts,
                send,
                send_heap,
                recv,
            )
        }
    }

    /// Run `f(rank, channel)` on `p` threads of one in-process group.
    fn on_ranks<T: Send>(p: u32, f: impl Fn(u32, &Ex) -> T + Sync) -> Vec<T> {
        let world = LocalWorld::new(p, 8 << 20)
            .expect("world")
            .with_timeout(Duration::from_secs(20));
        let group = world.world_group().expect("group");
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..p)
                .map(|r| {
                    let (group, f) = (group.clone(), &f);
                    s.spawn(move || {
                        let fab = group.fabric(r).expect("fabric");
                        f(
                            r,
                            &Ex {
                                fab,
                                chan: Mutex::new(EagerChannel::new(&ExecOptions::default())),
                            },
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("rank")).collect()
        })
    }

    /// Rank r sends `m[r][d]` bytes of value `16 r + d` to rank d, from the heap when `heap`.
    fn exchange(
        ex: &Ex,
        m: &[Vec<u64>],
        heap: bool,
    ) -> (Result<AlltoallvOutcome, ExecError>, Vec<u8>) {
        let me = ex.fabric().rank() as usize;
        let p = m.len();
        let send: Vec<u8> = (0..p)
            .flat_map(|d| vec![(16 * me + d) as u8; m[me][d] as usize])
            .collect();
        let rc: Vec<u64> = (0..p).map(|s| m[s][me]).collect();
        let mut recv = vec![0xEEu8; rc.iter().sum::<u64>() as usize];
        let r = if heap {
            let f = ex.fabric();
            let off = f.scratch("eager-test/send", 1 << 20).expect("scratch");
            let ptr = f.heap_ptr(f.rank(), off, send.len() as u64).expect("range");
            // SAFETY: a checked range of our own heap segment, read by peers only within the call.
            let hs = unsafe { std::slice::from_raw_parts_mut(ptr, send.len()) };
            hs.copy_from_slice(&send);
            ex.alltoallv_eager(DType::U8, &m[me], &rc, hs, Some(off), &mut recv)
        } else {
            ex.alltoallv_eager(DType::U8, &m[me], &rc, &send, None, &mut recv)
        };
        (r, recv)
    }

    #[test]
    fn inline_pull_large_pull_and_rendezvous_on_three_ranks() {
        let cap = eager_capacity(3);
        let cases = [
            (vec![vec![0, 1, 2], vec![3, 0, 5], vec![7, 8, 9]], true),
            (vec![vec![5000; 3]; 3], true),
            (vec![vec![cap; 3]; 3], true),
            (vec![vec![1, cap + 1, 1], vec![1; 3], vec![1; 3]], false),
        ];
        let out = on_ranks(3, |me, ex| {
            let mut seen = Vec::new();
            for (m, eager) in &cases {
                for heap in [false, true] {
                    let (r, recv) = exchange(ex, m, heap);
                    let r = r.expect("call");
                    // A symmetric send buffer is pulled at any size.
                    assert_eq!(r == AlltoallvOutcome::Done, *eager || heap, "{m:?}");
                    if let AlltoallvOutcome::Rendezvous(got) = &r {
                        assert_eq!(got, m);
                        assert!(recv.iter().all(|b| *b == 0xEE), "rendezvous wrote");
                    } else {
                        let want: Vec<u8> = (0..3)
                            .flat_map(|s| {
                                vec![(16 * s + me as usize) as u8; m[s][me as usize] as usize]
                            })
                            .collect();
                        assert!(recv == want, "rank {me} {m:?} heap={heap}");
                    }
                    seen.push(r == AlltoallvOutcome::Done);
                }
            }
            seen
        });
        assert!(out.iter().all(|s| s.len() == 8));
    }

    #[test]
    fn mismatch_is_the_same_error_everywhere_and_the_channel_survives() {
        let errs = on_ranks(2, |me, ex| {
            // rank 1 expects 3 bytes from rank 0, which sends 2
            let send = vec![1u8; 4];
            let rc = if me == 1 { vec![3, 2] } else { vec![2, 2] };
            let mut recv = vec![0xEEu8; rc.iter().sum::<u64>() as usize];
            let e = ex
                .alltoallv_eager(DType::U8, &[2, 2], &rc, &send, None, &mut recv)
                .expect_err("mismatch");
            assert!(recv.iter().all(|b| *b == 0xEE));
            let (ok, _) = exchange(ex, &[vec![1, 2], vec![3, 4]], me == 0);
            assert_eq!(ok.expect("valid call after"), AlltoallvOutcome::Done);
            e.to_string()
        });
        assert_eq!(errs[0], errs[1]);
        assert!(errs[0].contains("rank 0 sends 2 elements to rank 1, which expects 3"));
    }
}
