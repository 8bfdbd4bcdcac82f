//! Ping-pong between ranks 0 and 1 with `put_with_signal` + `wait`: one-way latency for small
//! messages and put bandwidth for large ones. Run with
//! `symsched launch -n 2 -- target/release/examples/pingpong`.

use std::time::Instant;

use symsched_runtime::{Cmp, Runtime, RuntimeError, SignalMode, WaitContext};

fn main() -> Result<(), RuntimeError> {
    let rt = Runtime::init_from_env()?;
    let w = rt.world()?;
    let me = w.rank();
    let peer = 1 - me;
    let max = 64 << 20;
    let src = rt.malloc(max)?;
    let dst = rt.malloc(max)?;
    let s = w.signal_slots("pingpong", 1)?;
    let ctx = WaitContext::new("pingpong", "pong", "flag");
    let mut seq = 0u64;
    for &size in &[8usize, 4096, 1 << 20, 64 << 20] {
        let iters = if size <= 4096 {
            20000
        } else if size <= 1 << 20 {
            200
        } else {
            10
        };
        w.barrier()?;
        let t = Instant::now();
        for _ in 0..iters {
            seq += 1;
            if me == 0 {
                w.put_with_signal(
                    peer,
                    dst.offset,
                    src.offset,
                    size,
                    s.slot(0),
                    SignalMode::Set,
                    seq,
                )?;
                w.wait(s.slot(0), Cmp::Ge, seq, &ctx)?;
            } else {
                w.wait(s.slot(0), Cmp::Ge, seq, &ctx)?;
                w.put_with_signal(
                    peer,
                    dst.offset,
                    src.offset,
                    size,
                    s.slot(0),
                    SignalMode::Set,
                    seq,
                )?;
            }
        }
        let el = t.elapsed().as_secs_f64();
        if me == 0 {
            let one_way = el / (2.0 * iters as f64);
            println!(
                "size {size:>9} B  one-way {:>9.2} us  bandwidth {:>7.2} GB/s",
                one_way * 1e6,
                size as f64 / one_way / 1e9
            );
        }
    }
    rt.finalize()
}
