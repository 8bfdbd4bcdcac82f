//! `symsched compile … --emit ascendc -o DIR` writes the CANN project: the kernel, step table,
//! launch stub, header and the CMakeLists.txt that builds them, all for one kernel name.

use std::path::Path;
use std::process::Command;

#[test]
fn emit_ascendc_writes_the_cann_project() {
    let dir = tempfile::tempdir().unwrap();
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/allreduce_two_shot_wire.sched");
    let out = Command::new(env!("CARGO_BIN_EXE_symsched"))
        .args([
            "compile",
            example.to_str().unwrap(),
            "--ranks",
            "4",
            "--emit",
            "ascendc",
        ])
        .args(["--dtype", "f32", "--wire", "bf16", "-o"])
        .arg(dir.path())
        .output()
        .expect("symsched runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let stem = "symsched_allreduce_two_shot_wire_p4_f32_bf16_sum";
    let want = [
        "CMakeLists.txt".to_string(),
        format!("{stem}.h"),
        format!("{stem}_kernel.cpp"),
        format!("{stem}_launch.cpp"),
        format!("{stem}_table.h"),
    ];
    assert_eq!(names, want);
    let cmake = std::fs::read_to_string(dir.path().join("CMakeLists.txt")).unwrap();
    assert!(
        cmake.contains(&format!("project({stem} LANGUAGES ASC CXX)")),
        "{cmake}"
    );
    assert!(cmake.contains(&format!("{stem}_launch.cpp")), "{cmake}");
}
