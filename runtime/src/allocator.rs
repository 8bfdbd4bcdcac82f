//! Deterministic first-fit allocator over a byte range. Given the same sequence of calls it
//! returns the same offsets on every rank; it also keeps a running hash of (op, size, offset) so
//! ranks can cheaply check that they made the same calls.

use std::collections::BTreeMap;

use crate::error::RuntimeError;

/// Minimum alignment (and granularity) of every block: one cache line.
pub const MIN_ALIGN: u64 = 64;

/// Memory accounting of an allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeapStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Highest `allocated` ever seen.
    pub peak: u64,
    /// Bytes not allocated.
    pub free: u64,
}

/// Kind of a recorded allocator operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum AllocOp {
    /// `malloc` / `empty`.
    Malloc = 1,
    /// `free`.
    Free = 2,
}

/// One recorded operation, for mismatch reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRecord {
    /// Sequence number (0-based).
    pub index: u64,
    /// What was done.
    pub op: AllocOp,
    /// Requested size (malloc) or freed size.
    pub size: u64,
    /// Resulting / freed offset.
    pub offset: u64,
}

/// A first-fit allocator over `[base, end)` with coalescing free.
#[derive(Debug, Clone)]
pub struct Allocator {
    base: u64,
    end: u64,
    free: BTreeMap<u64, u64>,
    live: BTreeMap<u64, u64>,
    allocated: u64,
    peak: u64,
    ops: u64,
    hash: u64,
}

fn mix(mut z: u64) -> u64 {
    // splitmix64 finaliser: cheap, well distributed, identical on every platform.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Allocator {
    /// An allocator owning `[base, end)`; both are rounded inwards to [`MIN_ALIGN`].
    pub fn new(base: u64, end: u64) -> Self {
        let b = base.div_ceil(MIN_ALIGN) * MIN_ALIGN;
        let e = (end / MIN_ALIGN) * MIN_ALIGN;
        let mut free = BTreeMap::new();
        if e > b {
            free.insert(b, e - b);
        }
        Allocator {
            base: b,
            end: e.max(b),
            free,
            live: BTreeMap::new(),
            allocated: 0,
            peak: 0,
            ops: 0,
            hash: 0x5359_4d53_4348_4544,
        }
    }

    /// First usable offset.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// One past the last usable offset.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Number of operations recorded so far.
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Running hash of all operations so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Accounting.
    pub fn stats(&self) -> HeapStats {
        HeapStats {
            allocated: self.allocated,
            peak: self.peak,
            free: (self.end - self.base) - self.allocated,
        }
    }

    /// Size of the live block starting at `offset`, if any.
    pub fn block_size(&self, offset: u64) -> Option<u64> {
        self.live.get(&offset).copied()
    }

    fn record(&mut self, op: AllocOp, size: u64, offset: u64) -> OpRecord {
        let rec = OpRecord {
            index: self.ops,
            op,
            size,
            offset,
        };
        self.hash = mix(self.hash ^ mix((op as u64) ^ mix(size ^ mix(offset))));
        self.ops += 1;
        rec
    }

    /// Allocates `size` bytes (0 is treated as one line) aligned to `align` (a power of two,
    /// at least [`MIN_ALIGN`] is used). Returns the offset and the record of the operation.
    pub fn malloc(
        &mut self,
        rank: usize,
        size: u64,
        align: u64,
    ) -> Result<(u64, OpRecord), RuntimeError> {
        if align == 0 || !align.is_power_of_two() {
            return Err(RuntimeError::BadAlignment(align));
        }
        let align = align.max(MIN_ALIGN);
        let rounded = size
            .max(1)
            .checked_next_multiple_of(MIN_ALIGN)
            .unwrap_or(u64::MAX);
        let mut found = None;
        for (&off, &len) in &self.free {
            let start = match off.checked_next_multiple_of(align) {
                Some(s) => s,
                None => continue,
            };
            let pad = start - off;
            if len >= pad && len - pad >= rounded {
                found = Some((off, len, start));
                break;
            }
        }
        let Some((off, len, start)) = found else {
            let largest = self.free.values().copied().max().unwrap_or(0);
            return Err(RuntimeError::OutOfMemory {
                rank,
                requested: size,
                free: self.stats().free,
                largest,
            });
        };
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        let tail = off + len - (start + rounded);
        if tail > 0 {
            self.free.insert(start + rounded, tail);
        }
        self.live.insert(start, rounded);
        self.allocated += rounded;
        self.peak = self.peak.max(self.allocated);
        let rec = self.record(AllocOp::Malloc, size, start);
        Ok((start, rec))
    }

    /// Frees the block starting at `offset`, merging it with free neighbours.
    pub fn free(&mut self, rank: usize, offset: u64) -> Result<OpRecord, RuntimeError> {
        let Some(len) = self.live.remove(&offset) else {
            return Err(RuntimeError::InvalidFree { rank, offset });
        };
        self.allocated -= len;
        let mut start = offset;
        let mut size = len;
        if let Some((&poff, &plen)) = self.free.range(..offset).next_back() {
            if poff + plen == offset {
                self.free.remove(&poff);
                start = poff;
                size += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(offset + len)) {
            self.free.remove(&(offset + len));
            size += nlen;
        }
        self.free.insert(start, size);
        Ok(self.record(AllocOp::Free, len, offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_coalescing() {
        let mut a = Allocator::new(1000, 1000 + 64 * 100);
        let mut b = a.clone();
        let ops = |x: &mut Allocator| {
            let (p, _) = x.malloc(0, 100, 64).unwrap();
            let (q, _) = x.malloc(0, 1, 256).unwrap();
            x.free(0, p).unwrap();
            let (r, _) = x.malloc(0, 64, 64).unwrap();
            (p, q, r, x.hash())
        };
        assert_eq!(ops(&mut a), ops(&mut b));
        assert_eq!(a.base() % 64, 0);
        let (_, q, r, _) = ops(&mut b);
        assert_eq!(q % 256, 0);
        assert!(r < q);
        // Free everything and the range coalesces back to one block.
        let live: Vec<u64> = a.live.keys().copied().collect();
        for off in live {
            a.free(0, off).unwrap();
        }
        assert_eq!(a.free.len(), 1);
        assert_eq!(a.stats().allocated, 0);
        assert!(a.stats().peak >= 128 + 64);
    }

    #[test]
    fn different_sizes_give_different_hashes() {
        let mut a = Allocator::new(0, 1 << 20);
        let mut b = Allocator::new(0, 1 << 20);
        a.malloc(0, 128, 64).unwrap();
        b.malloc(0, 192, 64).unwrap();
        assert_ne!(a.hash(), b.hash());
    }

    #[test]
    fn errors_are_typed() {
        let mut a = Allocator::new(0, 4096);
        assert!(matches!(
            a.malloc(0, 8192, 64),
            Err(RuntimeError::OutOfMemory { .. })
        ));
        assert!(matches!(
            a.malloc(0, 8, 3),
            Err(RuntimeError::BadAlignment(3))
        ));
        assert!(matches!(
            a.free(0, 64),
            Err(RuntimeError::InvalidFree { .. })
        ));
        assert!(matches!(
            a.malloc(0, u64::MAX, 64),
            Err(RuntimeError::OutOfMemory { .. })
        ));
    }
}
