//! A launch the JIT cannot run reaches the C ABI as `SYMSCHED_STATUS_UNAVAILABLE`: compiles
//! `tests/c/jit_unavailable.c` against the committed header and the shared library and runs it
//! on two ranks with the JIT's disk cache under a regular file (`XDG_CACHE_HOME`), so every
//! rank's kernel fails to be stored (`JitFailure::Compile` with an i/o error). Skipped (with a
//! message) when no C compiler is installed.

use std::time::Duration;

use symsched_runtime::launcher::{launch, LaunchSpec};

mod common;

#[test]
fn a_jit_failure_is_unavailable_in_c_and_the_interpreter_runs_the_launch() {
    let Some(prog) = common::build("jit_unavailable") else {
        return;
    };
    let (out_dir, bin) = (&prog.dir, &prog.bin);
    let plan_path = prog.write_plan("allreduce_one_shot", 2);
    // The cache directory would be <file>/symsched/jit: it cannot be created.
    let not_a_dir = out_dir.join("cache-is-a-file");
    std::fs::write(&not_a_dir, b"not a directory").expect("file written");
    let mut spec = LaunchSpec::new(2, bin, Vec::<String>::new());
    for (k, v) in [
        ("SYMSCHED_JIT_PLAN", plan_path.clone().into_os_string()),
        ("XDG_CACHE_HOME", not_a_dir.clone().into_os_string()),
        ("SYMMETRIC_MEMORY_HEAP_SIZE", "4194304".into()),
        ("SYMSCHED_SCRATCH_SIZE", "1048576".into()),
        ("SHMEM_LOG_TO_STDOUT", "1".into()),
    ] {
        spec.env.push((k.into(), v));
    }
    spec.capture = true;
    spec.timeout = Some(Duration::from_secs(120));
    let o = launch(&spec).expect("launch");
    let text: String = o
        .output
        .iter()
        .map(|(r, _, l)| format!("[rank {r}] {l}\n"))
        .collect();
    assert!(o.success(), "{:?}\n{text}", o.failure);
    assert_eq!(text.matches("JIT_UNAVAILABLE rank").count(), 2, "{text}");
    assert_eq!(text.matches("C_JIT_UNAVAILABLE_OK").count(), 2, "{text}");
}
