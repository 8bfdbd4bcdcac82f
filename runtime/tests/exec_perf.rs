//! Single-thread cost of the executor's hot kernels, unfused vs fused (informational, ignored:
//! `cargo test --release -p symsched-runtime --test exec_perf -- --ignored --nocapture`).
//!
//! One thread plays one rank of a 2-rank two-shot allreduce on `n` f32 elements: the reduce of
//! its chunk (its own half plus the peer's landed half) and the push of the result into the
//! peer's buffer. On a loaded 2-core machine whole-collective timings swing by 10×, so this
//! measures the memory-bound work alone and reports the minimum over many repetitions.

use std::time::Instant;
use symsched_runtime::exec::dtype::{convert, DType};
use symsched_runtime::exec::reduce::{reduce_raw, reduce_raw_then, Operand, ReduceOp};

fn min_time(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}

fn report(what: &str, bytes: usize, unfused: f64, fused: f64) {
    eprintln!(
        "{what} {:>5} KiB chunk: unfused {:8.1} us, fused {:8.1} us, ratio {:.2}",
        bytes >> 10,
        unfused * 1e6,
        fused * 1e6,
        unfused / fused
    );
}

#[test]
#[ignore]
fn reduce_then_push_unfused_vs_fused() {
    for chunk in [1usize << 16, 1 << 18, 1 << 20, 1 << 21] {
        let mut x = vec![1.5f32; chunk];
        let land = vec![0.25f32; chunk];
        let mut peer = vec![0f32; chunk];
        let mut peer_wire = vec![0u16; chunk];
        let mut gath = vec![0u16; chunk];
        let reps = (64 << 20) / (chunk * 4);
        let xp = x.as_mut_ptr() as *mut u8;
        let ops = [
            Operand {
                ptr: land.as_ptr() as *const u8,
                dtype: DType::F32,
            },
            Operand {
                ptr: xp,
                dtype: DType::F32,
            },
        ];
        let pp = peer.as_mut_ptr() as *mut u8;
        let unfused = min_time(reps, || unsafe {
            reduce_raw(DType::F32, ReduceOp::Max, xp, DType::F32, &ops, chunk).unwrap();
            convert(DType::F32, xp, DType::F32, pp, chunk);
        });
        let fused = min_time(reps, || unsafe {
            reduce_raw_then(
                DType::F32,
                ReduceOp::Max,
                xp,
                DType::F32,
                &ops,
                chunk,
                &mut |i, k| convert(DType::F32, xp.add(i * 4), DType::F32, pp.add(i * 4), k),
            )
            .unwrap();
        });
        report("f32 reduce+push", chunk * 4, unfused, fused);

        // The wire variant: reduce two bf16 operands into x, cast x to gath, push gath.
        let wa = vec![0x3f80u16; chunk];
        let wb = vec![0x3f00u16; chunk];
        let wops = [
            Operand {
                ptr: wa.as_ptr() as *const u8,
                dtype: DType::Bf16,
            },
            Operand {
                ptr: wb.as_ptr() as *const u8,
                dtype: DType::Bf16,
            },
        ];
        let gp = gath.as_mut_ptr() as *mut u8;
        let pw = peer_wire.as_mut_ptr() as *mut u8;
        let unfused = min_time(reps, || unsafe {
            reduce_raw(DType::F32, ReduceOp::Sum, xp, DType::F32, &wops, chunk).unwrap();
            convert(DType::F32, xp, DType::Bf16, gp, chunk);
            convert(DType::Bf16, gp, DType::Bf16, pw, chunk);
        });
        let fused = min_time(reps, || unsafe {
            reduce_raw_then(
                DType::F32,
                ReduceOp::Sum,
                xp,
                DType::F32,
                &wops,
                chunk,
                &mut |i, k| {
                    convert(DType::F32, xp.add(i * 4), DType::Bf16, gp.add(i * 2), k);
                    convert(DType::Bf16, gp.add(i * 2), DType::Bf16, pw.add(i * 2), k);
                },
            )
            .unwrap();
        });
        report("bf16 reduce+cast+push", chunk * 4, unfused, fused);
        assert!(peer.iter().all(|v| *v == 1.5));
        assert!(peer_wire.iter().all(|v| *v == 0x3fc0));
    }
}

#[test]
#[ignore]
fn conversion_throughput() {
    let n = 1usize << 18;
    let vals: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) * 0.01).collect();
    let mut wire = vec![0u8; n * 2];
    let mut back = vec![0f32; n];
    let reps = 200;
    let copy = min_time(reps, || unsafe {
        convert(
            DType::F32,
            vals.as_ptr() as *const u8,
            DType::F32,
            back.as_mut_ptr() as *mut u8,
            n,
        )
    });
    eprintln!("f32 copy {:6.1} GB/s of f32", (n * 4) as f64 / copy / 1e9);
    for dt in [DType::Bf16, DType::F16, DType::F8E4M3, DType::F8E5M2] {
        let enc = min_time(reps, || unsafe {
            convert(
                DType::F32,
                vals.as_ptr() as *const u8,
                dt,
                wire.as_mut_ptr(),
                n,
            )
        });
        let dec = min_time(reps, || unsafe {
            convert(
                dt,
                wire.as_ptr(),
                DType::F32,
                back.as_mut_ptr() as *mut u8,
                n,
            )
        });
        eprintln!(
            "{dt:>5}: encode {:6.1} GB/s of f32, decode {:6.1} GB/s of f32",
            (n * 4) as f64 / enc / 1e9,
            (n * 4) as f64 / dec / 1e9
        );
    }
}

/// Copy with non-temporal stores, for comparison with `memcpy` (puts use `memcpy`).
#[cfg(target_arch = "x86_64")]
unsafe fn streaming_copy(src: *const u8, dst: *mut u8, bytes: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let mut i = 0;
    // `_mm_stream_si128` needs a 16-byte aligned destination: copy the head plainly.
    let head = (dst as usize).wrapping_neg() & 15;
    if head > 0 {
        let h = head.min(bytes);
        std::ptr::copy_nonoverlapping(src, dst, h);
        i = h;
    }
    while i + 64 <= bytes {
        for j in (0..64).step_by(16) {
            let v = _mm_loadu_si128(src.add(i + j) as *const __m128i);
            _mm_stream_si128(dst.add(i + j) as *mut __m128i, v);
        }
        i += 64;
    }
    std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), bytes - i);
    _mm_sfence();
}

#[test]
#[ignore]
#[cfg(target_arch = "x86_64")]
fn memcpy_vs_streaming_copy() {
    for mib in [1usize, 4, 8, 16] {
        let bytes = mib << 20;
        let src = vec![7u8; bytes];
        let mut dst = vec![0u8; bytes];
        let reps = (256 << 20) / bytes;
        let plain = min_time(reps, || unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), bytes)
        });
        dst.fill(0);
        let nt = min_time(reps, || unsafe {
            streaming_copy(src.as_ptr(), dst.as_mut_ptr(), bytes)
        });
        eprintln!(
            "copy {mib:>2} MiB: memcpy {:8.1} us ({:5.1} GB/s), streaming {:8.1} us ({:5.1} GB/s)",
            plain * 1e6,
            bytes as f64 / plain / 1e9,
            nt * 1e6,
            bytes as f64 / nt / 1e9
        );
        assert!(dst.iter().all(|b| *b == 7));
    }
}
