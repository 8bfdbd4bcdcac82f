//! Large-message allreduce on the host: push two-shot vs pull two-shot, each with the executor's
//! fusions on and off (`SYMSCHED_FUSE=0`), and the copy kernels a large put or get could use
//! (one `memcpy`, 4 KiB `memcpy` pieces, SSE2 non-temporal stores; see `docs/performance.md` for
//! why the executor keeps `memcpy`).
//!
//! `cargo bench -p symsched-runtime --bench allreduce_pull [-- --rounds N --sizes 256K,1,8,64]`
//! (bytes of f32 data per rank: MiB, or KiB with a `K`). Two ranks run as threads of this process
//! over the in-process fabric, `x` in the heap (as for symmetric tensors); each variant runs in a
//! child process, since the executor reads its switches once per process. Variants alternate
//! within each round so all of them see the same machine load; compare ratios of one run only.

mod support;

use std::time::Instant;
use symsched_runtime::exec::{DType, ElemTypes};

const MIB: usize = 1 << 20;

/// A bench row: label, schedule, environment of its child process.
type Variant = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// Per-launch seconds of `iters` launches of `name` on 2 ranks at `kib` KiB (slowest rank).
fn launches(name: &str, kib: usize, iters: u32) -> Vec<f64> {
    let types = ElemTypes::new(DType::F32, None).expect("f32");
    let heap = (3 * kib * 1024 + 4 * MIB) as u64;
    let plan = support::standard_plan(name, 2);
    support::slowest_launches(&plan, types, (kib * 1024 / 4) as u64, heap, iters)
}

/// `name` in a child process (this binary again) with `env` set, printing its per-launch times:
/// the executor reads its switches once per process.
fn child(name: &str, env: &[(&str, &str)], kib: usize, iters: u32) -> Vec<f64> {
    let args = [name.to_string(), kib.to_string(), iters.to_string()];
    support::child_numbers(&args, env)
}

/// Copy with SSE2 streaming stores (16-byte aligned destination assumed; tail by `memcpy`).
///
/// # Safety
/// `src` and `dst` valid for `len` bytes, not overlapping, `dst` 16-byte aligned.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_nt(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let body = len & !63;
    let mut i = 0;
    while i < body {
        for k in 0..4 {
            let v = _mm_loadu_si128(src.add(i + 16 * k) as *const __m128i);
            _mm_stream_si128(dst.add(i + 16 * k) as *mut __m128i, v);
        }
        i += 64;
    }
    _mm_sfence();
    std::ptr::copy_nonoverlapping(src.add(body), dst.add(body), len - body);
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_nt(src: *const u8, dst: *mut u8, len: usize) {
    std::ptr::copy_nonoverlapping(src, dst, len);
}

/// Two threads (two ranks) each copy `bytes` from their peer's buffer into their own with
/// `kind`, at the same time; returns the slower thread's minimum seconds over `reps`.
fn copy_pair(kind: &str, bytes: usize, reps: usize) -> f64 {
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8 + 1; bytes + 64]).collect();
    let ptrs: Vec<usize> = bufs
        .iter_mut()
        .map(|b| {
            let p = b.as_mut_ptr() as usize;
            p.next_multiple_of(64)
        })
        .collect();
    let barrier = std::sync::Barrier::new(2);
    let times: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|t| {
                let (src, dst) = (ptrs[2 * (1 - t)] as *const u8, ptrs[2 * t + 1] as *mut u8);
                let (src, dst) = (src as usize, dst as usize);
                let barrier = &barrier;
                s.spawn(move || {
                    let (src, dst) = (src as *const u8, dst as *mut u8);
                    let mut best = f64::INFINITY;
                    for _ in 0..reps {
                        barrier.wait();
                        let t0 = Instant::now();
                        // SAFETY: distinct 64-byte-aligned buffers of bytes + 64 bytes each.
                        unsafe {
                            match kind {
                                "memcpy" => std::ptr::copy_nonoverlapping(src, dst, bytes),
                                "blocks" => {
                                    for at in (0..bytes).step_by(4096) {
                                        let k = 4096.min(bytes - at);
                                        std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), k);
                                    }
                                }
                                _ => copy_nt(src, dst, bytes),
                            }
                        }
                        best = best.min(t0.elapsed().as_secs_f64());
                    }
                    best
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("copy thread"))
            .collect()
    });
    drop(bufs);
    times.into_iter().fold(0.0, f64::max)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let kib: usize = args[i + 2].parse().expect("KiB");
        let iters: u32 = args[i + 3].parse().expect("iters");
        for t in launches(&args[i + 1], kib, iters) {
            println!("{t}");
        }
        return;
    }
    let opt = |name: &str| support::opt(&args, name);
    let rounds: usize = opt("--rounds").map_or(3, |v| v.parse().expect("rounds"));
    // KiB; a plain number is MiB, `NK` is KiB.
    let sizes: Vec<usize> = opt("--sizes").map_or(vec![1024, 8192, 65536], |v| {
        v.split(',')
            .map(|s| match s.strip_suffix('K') {
                Some(k) => k.parse().expect("KiB"),
                None => s.parse::<usize>().expect("MiB") * 1024,
            })
            .collect()
    });
    let variants: [Variant; 4] = [
        ("push", "allreduce_two_shot", &[]),
        ("pull", "allreduce_two_shot_pull", &[]),
        (
            "push FUSE=0",
            "allreduce_two_shot",
            &[("SYMSCHED_FUSE", "0")],
        ),
        (
            "pull FUSE=0",
            "allreduce_two_shot_pull",
            &[("SYMSCHED_FUSE", "0")],
        ),
    ];
    println!("allreduce, 2 ranks (threads), f32 sum, x in the heap; per-launch µs, min / median");
    for &kib in &sizes {
        let iters = if kib >= 32 << 10 { 6 } else { 20 };
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (k, (_, name, env)) in variants.iter().enumerate() {
                times[k].extend(child(name, env, kib, iters));
            }
        }
        let mut line = format!("{kib:>6} KiB:");
        let mut medians = Vec::new();
        for (k, (label, _, _)) in variants.iter().enumerate() {
            let mn = times[k].iter().copied().fold(f64::INFINITY, f64::min);
            let md = support::median(&mut times[k]);
            medians.push(md);
            line += &format!("  {label} {:.0}/{:.0}", mn * 1e6, md * 1e6);
        }
        println!("{line}  | push/pull median {:.2}", medians[0] / medians[1]);
    }
    println!("copy of one chunk, 2 threads at once (peer → own); slower thread's min µs");
    for mib in [1usize, 2, 4, 8, 32] {
        let bytes = mib * MIB;
        let reps = (256 / mib).clamp(4, 64);
        let mut row = Vec::new();
        for _ in 0..rounds {
            for kind in ["memcpy", "blocks", "nt"] {
                row.push((kind, copy_pair(kind, bytes, reps)));
            }
        }
        let best = |k: &str| {
            row.iter()
                .filter(|(n, _)| *n == k)
                .map(|(_, t)| *t)
                .fold(f64::INFINITY, f64::min)
        };
        let (m, b, nt) = (best("memcpy"), best("blocks"), best("nt"));
        println!(
            "{mib:>3} MiB: memcpy {:>7.0}  4 KiB blocks {:>7.0}  non-temporal {:>7.0}   memcpy/nt {:.2}  memcpy/blocks {:.2}",
            m * 1e6,
            b * 1e6,
            nt * 1e6,
            m / nt,
            m / b
        );
    }
}
