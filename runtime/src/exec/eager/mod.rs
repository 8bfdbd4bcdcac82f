//! All-to-all-v in one round: the *eager* protocol, with the counts exchange folded into it.
//!
//! The plan `alltoallv_push` needs the whole `counts[sender][receiver]` matrix before its data
//! round (where a rank writes into a peer's output depends on what every other rank sends that
//! peer), and each rank only knows its own row. Exchanging the rows first costs a full
//! synchronisation round per call, as much as the data round itself for small messages. Here
//! the rows travel *with* the data instead, MPI-eager style:
//!
//! - every rank owns, in a symmetric scratch area, one landing slot per (epoch parity, source
//!   rank): a header followed by `capacity` bytes of payload;
//! - at epoch `e` a sender writes into slot `(e % 2, me)` of every peer its header (magic,
//!   epoch, element type, its send row and its receive row) and, when its chunk for that peer is
//!   at most `capacity` bytes, the chunk itself; then it sets the peer's `arrive[me]` counter to
//!   `e + 1` (a release: the header and payload are visible first);
//! - a receiver waits for `arrive[q] >= e + 1` of every peer `q`, reads the headers and so holds
//!   every rank's send *and* receive row: it checks the whole matrix (`send_a[b] == recv_b[a]`
//!   for every pair, the same element type everywhere) — every rank sees the same rows, so every
//!   rank reaches the same verdict and a mismatch is the same typed error
//!   ([`ExecError::CountsMismatch`](crate::exec::ExecError::CountsMismatch), naming sender and receiver) on every rank, with nothing
//!   written to any output;
//! - when every off-diagonal chunk fits the capacity or is pulled (below), the receiver copies
//!   the payloads into its output ([`AlltoallvOutcome::Done`]); otherwise nothing is copied and
//!   the caller runs the plan with the matrix the headers carried
//!   ([`AlltoallvOutcome::Rendezvous`]): a chunk above the capacity of an ordinary (private)
//!   send buffer keeps the plan's data movement and pays one header round, as it paid one
//!   counts round before. The decision is a function of the (checked) headers — each carries
//!   a flag saying whether its sender pulls at any size — so every rank makes it alike;
//! - a chunk of more than [`PULL_MIN_BYTES`] is not copied into the slot: the header publishes
//!   its heap offset instead — in the send buffer itself when that lies in the symmetric heap
//!   (at any size: a multi-MiB alltoall of a symmetric tensor is one round too), else, up to
//!   the capacity, in the sender's outbox (a local copy) — and the receiver copies it straight
//!   into its output (one cross-core pass over the data instead of two); such a sender returns
//!   only after the receiver's `consumed` credit (below) for that call, so the caller may reuse
//!   its send buffer (and the outbox is free) at once. Large pulled chunks and the own
//!   (diagonal) block are copied with non-temporal stores (`stream_copy`), since nothing of the
//!   call re-reads the output;
//! - after reading (in every outcome, errors included) the receiver sets the sender's
//!   `consumed[me]` counter to `e + 1` — right after copying that sender's chunk, before the
//!   own block, so a pulled-from sender's final wait overlaps the receiver's remaining copies.
//!   A sender waits for `consumed[q] >= e - 1` before writing slot `(e % 2, me)` of `q` again,
//!   i.e. until `q` has copied out what it wrote there at `e - 2`: with two slot sets
//!   alternating by parity a fast rank runs at most one call ahead and never overwrites a slot
//!   the receiver has not read.
//!
//! Safety of a mismatched call: a receiver copies only after the whole matrix checked out, and
//! then exactly its own receive count from each slot (at most `capacity`, the slot's size) or
//! from the checked heap range the sender published, and it lands inside its output (whose
//! length was checked against its receive counts). A peer that never arrives (dead, or calling
//! something else) leaves the receiver in a bounded wait that fails with the fabric's timeout
//! naming that peer.
//!
//! With `SYMSCHED_TRACE` set, every call records its steps on the launch timeline
//! ([`crate::exec::trace::Protocol`]): the header write to each peer (`put_signal`, with the inline
//! bytes), each outbox copy, the `arrive` and `consumed` waits per peer, each pull (`get`) or
//! slot copy-out, the own block's copy and each credit given (`signal`), and one enclosing
//! `launch alltoallv_eager` event with the outcome.
//!
//! Every rank of a group must call this in the same order (like any collective); one channel
//! serves every dtype and size on a group, so it allocates once.
//!
//! Layout: `header` is the header's word layout and the verdict every rank reaches from the
//! headers; `channel` is one group's channel (slots, landing area, outbox) and the protocol
//! run over a [`crate::exec::Fabric`]. The executor owns one channel per group
//! ([`crate::exec::Executor::alltoallv_eager`]).

mod channel;
mod header;

pub use channel::EagerChannel;

/// Largest chunk (bytes, per ordered pair of ranks) moved eagerly.
pub const EAGER_MAX_CHUNK: u64 = 64 * 1024;

/// Chunks larger than this (bytes) are pulled by the receiver from the sender's heap (the
/// symmetric send buffer, or the sender's outbox): copying twice across cores (into the slot,
/// out of it) then costs more than the sender's extra wait for the receiver's credit.
pub const PULL_MIN_BYTES: u64 = 4 * 1024;

/// Upper bound on the landing area of one rank (both parities, every source): for large
/// groups the per-pair capacity shrinks so the area stays at this size.
const AREA_BUDGET: u64 = 16 << 20;

/// Alignment of slots, headers and capacities.
const ALIGN: u64 = 64;

/// What a call of [`EagerChannel::alltoallv`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlltoallvOutcome {
    /// Every chunk moved eagerly; the output is complete.
    Done,
    /// Some chunk exceeds the eager capacity: nothing was written; run the alltoallv plan with
    /// this `counts[sender][receiver]` matrix (agreed by every rank).
    Rendezvous(Vec<Vec<u64>>),
}

/// Per-pair payload capacity of the eager slots for a group of `p` ranks.
pub fn eager_capacity(p: u32) -> u64 {
    let per = AREA_BUDGET / (2 * u64::from(p.max(1)));
    (per.min(EAGER_MAX_CHUNK) / ALIGN * ALIGN).max(ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_64k_for_small_groups_and_shrinks_for_large_ones() {
        assert_eq!(eager_capacity(2), EAGER_MAX_CHUNK);
        assert_eq!(eager_capacity(64), EAGER_MAX_CHUNK);
        assert_eq!(eager_capacity(1024), AREA_BUDGET / 2048);
        assert_eq!(eager_capacity(1 << 20), ALIGN);
    }
}
