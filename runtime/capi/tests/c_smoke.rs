//! Compiles `tests/c/smoke.c` against the committed header and the shared library, and runs it
//! on two ranks through the launcher. Skipped (with a message) when no C compiler is installed.

use std::time::Duration;

use symsched_runtime::launcher::{launch, LaunchSpec};

mod common;

#[test]
fn c_program_runs_on_two_ranks() {
    let Some(prog) = common::build("smoke") else {
        return;
    };
    let bin = &prog.bin;
    let plan_path = prog.write_plan("allreduce_one_shot", 2);
    let mut spec = LaunchSpec::new(2, bin, Vec::<String>::new());
    spec.env.push((
        "SYMSCHED_SMOKE_PLAN".into(),
        plan_path.clone().into_os_string(),
    ));
    spec.capture = true;
    spec.timeout = Some(Duration::from_secs(60));
    for (k, v) in [
        ("SYMMETRIC_MEMORY_HEAP_SIZE", "4194304"),
        ("SYMSCHED_SCRATCH_SIZE", "1048576"),
        ("SHMEM_LOG_TO_STDOUT", "1"),
    ] {
        spec.env.push((k.into(), v.into()));
    }
    let o = launch(&spec).expect("launch");
    let text: String = o
        .output
        .iter()
        .map(|(r, _, l)| format!("[rank {r}] {l}\n"))
        .collect();
    assert!(o.success(), "{:?}\n{text}", o.failure);
    assert_eq!(text.matches("C_SMOKE_OK").count(), 2, "{text}");
}
