//! Mapping the plan's monotonic 64-bit signal counters onto Ascend's int32 signal words.
//!
//! **Strategy: modular int32 with bounded distance.** The device word holds the plan's 64-bit
//! counter modulo 2^32 (two's-complement `ADD` on the device wraps exactly like that, and a
//! `SET` of `epoch·stride + value` is written as its low 32 bits). A wait for `target` computes
//! `d = (int32)(observed − target)` in wrapping arithmetic and tests `d ⋈ 0` instead of
//! `observed ⋈ target`. This is exact whenever the true 64-bit distance |observed − target| is
//! below 2^31. Launch credits bound how far a counter can be from a target while a rank waits:
//! a peer is at most one launch ahead and the waiter is in its current launch, so the distance is
//! below 3 · stride + offset. The lowering refuses slots with stride or offset ≥ 2^29
//! ([`MAX_STRIDE`]), which keeps that bound under 2^31 for every epoch — no reset is ever
//! needed, and epochs may run past 2^32 / stride.
//!
//! `EQ` / `NE` need no distance bound at all (equality mod 2^32 of values closer than 2^32), so
//! the generated kernel hands those straight to `aclshmem_signal_wait_until`; ordered
//! comparisons spin on `aclshmem_signal_wait_until(…, ACLSHMEM_CMP_NE, last_seen)` and test the
//! modular distance (see `SymReached` in the kernel template, which mirrors [`reached`]).

use symsched_plan::{Cmp, SignalUpdate, WaitTarget};

/// Largest per-launch stride (and offset) a slot may have: 2^29.
pub const MAX_STRIDE: u64 = 1 << 29;

/// The device word for a 64-bit counter value: its low 32 bits.
pub fn word(value: u64) -> i32 {
    value as u32 as i32
}

/// The int32 target of a wait in launch `epoch`.
pub fn target_word(t: WaitTarget, epoch: u64) -> i32 {
    word(t.at(epoch))
}

/// The int32 value a signal update delivers in launch `epoch` (the added amount for ADD).
pub fn update_word(u: SignalUpdate, epoch: u64) -> i32 {
    word(u.value_at(epoch))
}

/// Whether an observed device word satisfies `observed cmp target` under the modular rule.
pub fn reached(observed: i32, target: i32, cmp: Cmp) -> bool {
    let d = observed.wrapping_sub(target);
    match cmp {
        Cmp::Eq => d == 0,
        Cmp::Ne => d != 0,
        Cmp::Gt => d > 0,
        Cmp::Ge => d >= 0,
        Cmp::Lt => d < 0,
        Cmp::Le => d <= 0,
    }
}

/// Whether a slot's stride and offset fit the bounded-distance rule.
pub fn fits(stride: u64, offset: u64) -> bool {
    stride < MAX_STRIDE && offset < MAX_STRIDE
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The modular rule agrees with 64-bit comparison for all distances below 2^31,
    /// in particular across the int32 sign boundary and the 2^32 wrap.
    #[test]
    fn modular_compare_matches_u64_near_the_wrap() {
        let cmps = [Cmp::Eq, Cmp::Ne, Cmp::Gt, Cmp::Ge, Cmp::Lt, Cmp::Le];
        for stride in [1u64, 3, 7, 63, 64 * 63] {
            for boundary in [1u64 << 31, 1u64 << 32, 3u64 << 32] {
                let e0 = boundary / stride;
                for epoch in e0.saturating_sub(2)..e0 + 3 {
                    let t = WaitTarget {
                        stride,
                        offset: stride,
                    };
                    let target = t.at(epoch);
                    for delta in [
                        -(3 * stride as i64),
                        -1,
                        0,
                        1,
                        stride as i64,
                        2 * stride as i64,
                    ] {
                        let observed = (target as i64 + delta) as u64;
                        for cmp in cmps {
                            assert_eq!(
                                reached(word(observed), target_word(t, epoch), cmp),
                                cmp.holds(observed, target),
                                "stride {stride} epoch {epoch} delta {delta} {cmp:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn plain_signed_compare_would_fail_at_the_sign_boundary() {
        // Why the modular rule exists: counter just past 2^31 reads negative as int32.
        let observed = (1u64 << 31) + 2;
        let target = (1u64 << 31) - 1;
        assert!(word(observed) < word(target));
        assert!(reached(word(observed), word(target), Cmp::Ge));
    }

    #[test]
    fn stride_bound() {
        assert!(fits(64, 64));
        assert!(!fits(MAX_STRIDE, 0));
    }
}
