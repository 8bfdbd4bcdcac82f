//! Compiles `tests/c/smoke.c` against the committed header and the shared library, and runs it
//! on two ranks through the launcher. Skipped (with a message) when no C compiler is installed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use symsched_runtime::launcher::{launch, LaunchSpec};

#[test]
fn c_program_runs_on_two_ranks() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The test binary lives in <target>/<profile>/deps; the cdylib in <target>/<profile>.
    let exe = std::env::current_exe().expect("exe");
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("profile dir")
        .to_path_buf();
    // `cargo build` uplifts the cdylib into the profile dir; `cargo test` alone leaves it in
    // deps/ next to this test binary.
    let deps_dir = exe.parent().expect("deps dir").to_path_buf();
    let lib_dir = [&profile_dir, &deps_dir]
        .into_iter()
        .find(|d| d.join("libsymsched.so").exists())
        .unwrap_or_else(|| panic!("libsymsched.so not built in {}", profile_dir.display()))
        .clone();
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler");
        return;
    }
    let out_dir = std::env::temp_dir().join(format!("symsched-capi-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("tmp dir");
    let bin = out_dir.join("smoke");
    let st = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(crate_dir.join("tests/c/smoke.c"))
        .arg("-I")
        .arg(crate_dir.join("../include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lsymsched")
        .status()
        .expect("cc runs");
    assert!(st.success(), "C compilation failed");
    let lib = symsched_compiler::pipeline::standard_library();
    let plan = symsched_compiler::pipeline::compile(
        &lib,
        "allreduce_one_shot",
        2,
        &Default::default(),
        &Default::default(),
    )
    .expect("allreduce_one_shot compiles for 2 ranks")
    .plan;
    let plan_path = out_dir.join("plan.json");
    std::fs::write(&plan_path, plan.to_json()).expect("plan written");
    let mut spec = LaunchSpec::new(2, &bin, Vec::<String>::new());
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
    let _ = std::fs::remove_dir_all(&out_dir);
    let text: String = o
        .output
        .iter()
        .map(|(r, _, l)| format!("[rank {r}] {l}\n"))
        .collect();
    assert!(o.success(), "{:?}\n{text}", o.failure);
    assert_eq!(text.matches("C_SMOKE_OK").count(), 2, "{text}");
}
