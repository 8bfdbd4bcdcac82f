//! The GM-race bookkeeping (`kernels/sim/symsched_sim_remote.h`) driven directly, in the order
//! of events that back-to-back launches produce when one rank runs ahead: deterministic, where
//! the kernel runs that showed it depend on the threads' timing.
//!
//! Launches are not separated by a barrier: once PE 1 sent its launch credits at the end of
//! epoch 0, PE 0 may start epoch 1, put into PE 1 and signal it before PE 1's epoch-0 launch has
//! returned. PE 1's end of epoch 0 must not drop that signal's record, or PE 1's wait for it in
//! epoch 1 learns nothing and its read of the put is reported as a GM race.

use std::process::Command;

const DRIVER: &str = r#"
#include "symsched_sim_remote.h"
#include <cstdio>
using namespace symsim;

#define CHECK(c) do { if (!(c)) { std::printf("failed line %d: %s\n", __LINE__, #c); return 1; } } while (0)

int main() {
    const uint64_t world = 7;
    static unsigned char gm1[256];  // PE 1's buffer
    static unsigned char gm5[256];  // PE 5's buffer (a PE whose launches end in another process)
    static int32_t word = 0;        // PE 1's signal word
    auto lo = reinterpret_cast<uintptr_t>(gm1);

    // Epoch 0: both PEs launch; PE 1 signals its credit to PE 0 at its end (not traced here).
    uint64_t run0 = remote_run_begin();  // PE 0, epoch 0
    uint64_t run1 = remote_run_begin();  // PE 1, epoch 0
    CHECK(!remote_run_end(world, 0, 0, run0, false, nullptr).found);
    // PE 0, epoch 1: putmem_signal_nbi into PE 1 (sequence 1 of core 0), before PE 1 returned.
    uint64_t run0b = remote_run_begin();
    PutRec p;
    p.src = put_source(run0b, 0);
    p.seq = 1;
    p.run = run0b;
    p.world = world;
    p.epoch = 1;
    p.recv_pe = 1;
    p.sender_pe = 0;
    p.seg = 1;
    p.what = "put";
    record_put(lo, lo + 64, p);
    KnowPtr k = know_with(nullptr, p.src, p.seq);
    publish_signal(&word, world, 1, 1, 1, 1, k, [&]() { word += 1; });
    // PE 1's epoch-0 launch returns now: the epoch-1 put is not its business yet.
    CHECK(!remote_run_end(world, 1, 0, run1, false, nullptr).found);
    // PE 1, epoch 1: its wait observed the signal, then it reads the bytes.
    uint64_t run1b = remote_run_begin();
    KnowPtr seen = acquire_signal(reinterpret_cast<uintptr_t>(&word), world, word);
    PutRec bad;
    uintptr_t at = 0;
    CHECK(seen != nullptr);
    CHECK(!unordered_put(lo, lo + 64, world, seen, &bad, &at));
    // Without the wait the read races.
    CHECK(unordered_put(lo, lo + 64, world, nullptr, &bad, &at));
    CHECK(!remote_run_end(world, 1, 1, run1b, false, seen).found);
    CHECK(!remote_run_end(world, 0, 1, run0b, false, k).found);
    CHECK(remote_state().n_puts.load() == 0);

    // A put and a signal into a PE whose launches never end here are dropped a few epochs on.
    uint64_t run = remote_run_begin();
    PutRec q = p;
    q.src = put_source(run, 0);
    q.run = run;
    q.epoch = 2;
    q.recv_pe = 5;
    auto lo5 = reinterpret_cast<uintptr_t>(gm5);
    record_put(lo5, lo5 + 64, q);
    publish_signal(&word, world, 2, 5, 1, 1, k, [&]() {});
    for (uint64_t e = 2; e <= 2 + kUncheckedEpochs; ++e) {
        CHECK(!remote_run_end(world, 0, e, run, false, k).found);
        CHECK(remote_state().n_puts.load() == 1);
    }
    CHECK(!remote_run_end(world, 0, 3 + kUncheckedEpochs, run, false, k).found);
    CHECK(remote_state().n_puts.load() == 0);
    CHECK(remote_state().sigs.empty());
    std::printf("ok\n");
    return 0;
}
"#;

#[test]
fn a_signal_of_the_next_launch_survives_the_receivers_launch_end() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("driver.cpp");
    let exe = dir.path().join("driver");
    std::fs::write(&src, DRIVER).expect("writing the driver");
    let sim = concat!(env!("CARGO_MANIFEST_DIR"), "/sim");
    let out = Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".to_string()))
        .args([
            "-std=c++17",
            "-O0",
            "-Wall",
            "-Werror",
            "-pthread",
            "-I",
            sim,
        ])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("running the C++ compiler");
    assert!(
        out.status.success(),
        "driver does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("running the driver");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}
