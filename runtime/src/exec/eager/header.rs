//! The eager header: the words every sender writes ahead of its payload into each peer's
//! landing slot, and the verdict every rank draws, alike, from all of them.

use crate::exec::dtype::DType;
use crate::exec::error::ExecError;

pub(super) const MAGIC: u64 = 0x5359_4d41_3241_5631; // "SYMA2AV1"
/// Header words before the two rows: magic, epoch, element size, dtype code, then (for this
/// pair) the heap offset of the chunk to pull, or [`INLINE`] when the payload follows the
/// header, then the sender's flags.
pub(super) const FIXED_WORDS: usize = 6;
pub(super) const PULL_AT: usize = 4;
pub(super) const INLINE: u64 = u64::MAX;
/// Flags word: 1 when the sender offers every chunk above [`super::PULL_MIN_BYTES`] for pulling from
/// its symmetric send buffer, whatever its size (so none of its chunks needs the rendezvous).
pub(super) const FLAGS_AT: usize = 5;

pub(super) fn dtype_code(dt: DType) -> u64 {
    DType::ALL
        .iter()
        .position(|d| *d == dt)
        .unwrap_or(usize::MAX) as u64
}

/// The first pair whose counts disagree, in (sender, receiver) order, so every rank reports the
/// same one; `rows[r]` is rank r's header words.
fn first_mismatch(rows: &[Vec<u64>], p: usize) -> Option<ExecError> {
    for (a, ra) in rows.iter().enumerate() {
        for (b, rb) in rows.iter().enumerate() {
            let sent = ra[FIXED_WORDS + b];
            let expected = rb[FIXED_WORDS + p + a];
            if sent != expected {
                return Some(ExecError::CountsMismatch {
                    sender: a as u32,
                    receiver: b as u32,
                    sent,
                    expected,
                });
            }
        }
    }
    None
}

/// The call's verdict from every rank's header words (`rows[r]` is rank r's), identical on
/// every rank: an error when a header is from another call, an element type differs or the
/// counts disagree; else whether the call must take the rendezvous (some off-diagonal chunk
/// exceeds the slot capacity and its sender did not offer it for pulling).
pub(super) fn verdict(
    rows: &[Vec<u64>],
    p: usize,
    me: usize,
    e: u64,
    dtype: DType,
    cap: u64,
) -> Result<bool, ExecError> {
    let es = dtype.size() as u64;
    for (q, row) in rows.iter().enumerate() {
        if row[0] != MAGIC || row[1] != e {
            return Err(ExecError::Runtime(format!(
                "alltoallv eager: rank {q} wrote a header for call {} (magic {:#x}) while \
                 rank {me} is at call {e}; every rank must make the same collective calls \
                 in the same order",
                row[1], row[0]
            )));
        }
        if row[2] != es || row[3] != dtype_code(dtype) {
            return Err(ExecError::DtypeMismatch(format!(
                "alltoallv: rank {q} sends a different element type (code {}, {} bytes) than \
                 rank {me} ({dtype}, {es} bytes)",
                row[3], row[2]
            )));
        }
    }
    if let Some(err) = first_mismatch(rows, p) {
        return Err(err);
    }
    Ok(rows.iter().enumerate().any(|(a, row)| {
        row[FLAGS_AT] == 0
            && row[FIXED_WORDS..FIXED_WORDS + p]
                .iter()
                .enumerate()
                .any(|(b, &c)| a != b && c.saturating_mul(es) > cap)
    }))
}
