//! A launch the JIT cannot run reaches the C ABI as `SYMSCHED_STATUS_UNAVAILABLE`: compiles
//! `tests/c/jit_unavailable.c` against the committed header and the shared library and runs it
//! on two ranks with the JIT's disk cache under a regular file (`XDG_CACHE_HOME`), so every
//! rank's kernel fails to be stored (`JitFailure::Compile` with an i/o error). Skipped (with a
//! message) when no C compiler is installed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use symsched_runtime::launcher::{launch, LaunchSpec};

#[test]
fn a_jit_failure_is_unavailable_in_c_and_the_interpreter_runs_the_launch() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // `cargo build` uplifts the cdylib into the profile dir; `cargo test` alone leaves it in
    // deps/ next to this test binary.
    let exe = std::env::current_exe().expect("exe");
    let deps_dir = exe.parent().expect("deps dir").to_path_buf();
    let profile_dir = deps_dir.parent().expect("profile dir").to_path_buf();
    let lib_dir = [&profile_dir, &deps_dir]
        .into_iter()
        .find(|d| d.join("libsymsched.so").exists())
        .unwrap_or_else(|| panic!("libsymsched.so not built in {}", profile_dir.display()))
        .clone();
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler");
        return;
    }
    let out_dir = std::env::temp_dir().join(format!("symsched-capi-jit-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("tmp dir");
    let bin = out_dir.join("jit_unavailable");
    let st = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(crate_dir.join("tests/c/jit_unavailable.c"))
        .arg("-I")
        .arg(crate_dir.join("../include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lsymsched")
        .status()
        .expect("cc runs");
    assert!(st.success(), "C compilation failed");
    let plan = symsched_compiler::pipeline::compile(
        &symsched_compiler::pipeline::standard_library(),
        "allreduce_one_shot",
        2,
        &Default::default(),
        &Default::default(),
    )
    .expect("allreduce_one_shot compiles for 2 ranks")
    .plan;
    let plan_path = out_dir.join("plan.json");
    std::fs::write(&plan_path, plan.to_json()).expect("plan written");
    // The cache directory would be <file>/symsched/jit: it cannot be created.
    let not_a_dir = out_dir.join("cache-is-a-file");
    std::fs::write(&not_a_dir, b"not a directory").expect("file written");
    let mut spec = LaunchSpec::new(2, &bin, Vec::<String>::new());
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
    let _ = std::fs::remove_dir_all(&out_dir);
    let text: String = o
        .output
        .iter()
        .map(|(r, _, l)| format!("[rank {r}] {l}\n"))
        .collect();
    assert!(o.success(), "{:?}\n{text}", o.failure);
    assert_eq!(text.matches("JIT_UNAVAILABLE rank").count(), 2, "{text}");
    assert_eq!(text.matches("C_JIT_UNAVAILABLE_OK").count(), 2, "{text}");
}
