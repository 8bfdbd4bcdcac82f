//! Non-temporal ("streaming") copies: the copy kernel for large plain moves whose destination
//! nobody reads. The streaming pass (`resolve::streaming`) decides which moves qualify; the
//! switch and the size threshold are [`crate::config::ExecOptions::nt_copy`] and
//! [`crate::config::ExecOptions::nt_min_bytes`].
//!
//! Streaming stores are weakly ordered, so [`copy`] ends with an `sfence`: a signal released
//! after it (a put's own signal or a later signal step) is still seen only after the data.

/// Copy `len` bytes from `src` to `dst`, streaming the aligned middle past the cache when the
/// CPU can, and fence so that later stores (a signal) become visible after these.
///
/// # Safety
/// `src` is valid for `len` bytes of reads, `dst` for `len` bytes of writes, and the ranges do
/// not overlap.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 present (checked); the caller's contract covers the ranges.
            unsafe { x86::copy_avx2(dst, src, len) };
            return;
        }
        // SSE2 is part of the x86_64 baseline.
        // SAFETY: the caller's contract covers the ranges.
        unsafe { x86::copy_sse2(dst, src, len) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_loadu_si256, _mm256_stream_si256, _mm_loadu_si128, _mm_sfence,
        _mm_stream_si128,
    };

    /// Bytes to copy ordinarily before `dst` reaches `align` (at most `len`).
    fn head(dst: *mut u8, align: usize, len: usize) -> usize {
        (dst.align_offset(align)).min(len)
    }

    /// # Safety
    /// AVX2 is available; the ranges are as for [`super::copy`].
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn copy_avx2(dst: *mut u8, src: *const u8, len: usize) {
        let h = head(dst, 32, len);
        // SAFETY (whole body): every access stays within `len` bytes of `src`/`dst`; the
        // streamed stores target 32-byte aligned addresses (`dst + h`).
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, h);
            let (mut d, mut s) = (dst.add(h), src.add(h));
            let mut left = len - h;
            while left >= 128 {
                let a = _mm256_loadu_si256(s as *const __m256i);
                let b = _mm256_loadu_si256(s.add(32) as *const __m256i);
                let c = _mm256_loadu_si256(s.add(64) as *const __m256i);
                let e = _mm256_loadu_si256(s.add(96) as *const __m256i);
                _mm256_stream_si256(d as *mut __m256i, a);
                _mm256_stream_si256(d.add(32) as *mut __m256i, b);
                _mm256_stream_si256(d.add(64) as *mut __m256i, c);
                _mm256_stream_si256(d.add(96) as *mut __m256i, e);
                (d, s, left) = (d.add(128), s.add(128), left - 128);
            }
            while left >= 32 {
                let a = _mm256_loadu_si256(s as *const __m256i);
                _mm256_stream_si256(d as *mut __m256i, a);
                (d, s, left) = (d.add(32), s.add(32), left - 32);
            }
            std::ptr::copy_nonoverlapping(s, d, left);
            _mm_sfence();
        }
    }

    /// # Safety
    /// The ranges are as for [`super::copy`].
    pub(super) unsafe fn copy_sse2(dst: *mut u8, src: *const u8, len: usize) {
        let h = head(dst, 16, len);
        // SAFETY (whole body): as for `copy_avx2`, with 16-byte aligned streamed stores.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, h);
            let (mut d, mut s) = (dst.add(h), src.add(h));
            let mut left = len - h;
            while left >= 64 {
                let a = _mm_loadu_si128(s as *const __m128i);
                let b = _mm_loadu_si128(s.add(16) as *const __m128i);
                let c = _mm_loadu_si128(s.add(32) as *const __m128i);
                let e = _mm_loadu_si128(s.add(48) as *const __m128i);
                _mm_stream_si128(d as *mut __m128i, a);
                _mm_stream_si128(d.add(16) as *mut __m128i, b);
                _mm_stream_si128(d.add(32) as *mut __m128i, c);
                _mm_stream_si128(d.add(48) as *mut __m128i, e);
                (d, s, left) = (d.add(64), s.add(64), left - 64);
            }
            while left >= 16 {
                let a = _mm_loadu_si128(s as *const __m128i);
                _mm_stream_si128(d as *mut __m128i, a);
                (d, s, left) = (d.add(16), s.add(16), left - 16);
            }
            std::ptr::copy_nonoverlapping(s, d, left);
            _mm_sfence();
        }
    }

    #[cfg(test)]
    mod tests {
        /// The SSE2 path runs on every x86_64 machine, so test it directly as well.
        #[test]
        fn sse2_matches_copy_from_slice() {
            super::super::tests::check_all(|d, s, n| unsafe { super::copy_sse2(d, s, n) });
        }
    }
}

#[cfg(test)]
mod tests {
    /// Lengths around every vector and unroll boundary, plus a large odd one.
    const LENS: &[usize] = &[
        0,
        1,
        15,
        16,
        17,
        31,
        32,
        33,
        63,
        64,
        65,
        127,
        128,
        129,
        4095,
        (1 << 20) + 7,
    ];

    /// Check `f` against `copy_from_slice` for every length and src/dst misalignment, and that
    /// bytes around the destination stay untouched.
    pub(super) fn check_all(f: impl Fn(*mut u8, *const u8, usize)) {
        let max = LENS.iter().max().copied().unwrap_or(0) + 64;
        let src: Vec<u8> = (0..max).map(|i| (i * 131 + 7) as u8).collect();
        for &n in LENS {
            for so in [0usize, 1, 3, 16, 31] {
                for dof in [0usize, 1, 5, 16, 32, 33] {
                    let mut got = vec![0xAAu8; n + 80];
                    let mut want = got.clone();
                    want[dof..dof + n].copy_from_slice(&src[so..so + n]);
                    f(got[dof..].as_mut_ptr(), src[so..].as_ptr(), n);
                    assert!(got == want, "len {n}, src offset {so}, dst offset {dof}");
                }
            }
        }
    }

    #[test]
    fn copy_matches_copy_from_slice() {
        // SAFETY: `check_all` passes in-bounds, disjoint ranges.
        check_all(|d, s, n| unsafe { super::copy(d, s, n) });
    }
}
