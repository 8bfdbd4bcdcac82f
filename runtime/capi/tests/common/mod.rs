//! Building a C test program against the committed header and the shared library, and the
//! plan file it launches.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A C test program compiled from `tests/c/<name>.c` into its own temporary directory.
pub struct CProgram {
    /// The temporary directory (the program and anything a test writes beside it).
    pub dir: PathBuf,
    /// The compiled program.
    pub bin: PathBuf,
}

impl Drop for CProgram {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Compiles `tests/c/<name>.c` with `-Wall -Werror`, linked against `libsymsched.so`; `None`
/// (after saying so) when no C compiler is installed.
pub fn build(name: &str) -> Option<CProgram> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // `cargo build` uplifts the cdylib into the profile dir; `cargo test` alone leaves it in
    // deps/ next to this test binary.
    let exe = std::env::current_exe().expect("exe");
    let deps_dir = exe.parent().expect("deps dir").to_path_buf();
    let profile_dir = deps_dir.parent().expect("profile dir").to_path_buf();
    let lib_dir: &Path = [&profile_dir, &deps_dir]
        .into_iter()
        .find(|d| d.join("libsymsched.so").exists())
        .unwrap_or_else(|| panic!("libsymsched.so not built in {}", profile_dir.display()));
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no C compiler");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("symsched-capi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let bin = dir.join(name);
    let st = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(crate_dir.join(format!("tests/c/{name}.c")))
        .arg("-I")
        .arg(crate_dir.join("../include"))
        .arg("-L")
        .arg(lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lsymsched")
        .status()
        .expect("cc runs");
    assert!(st.success(), "C compilation failed");
    Some(CProgram { dir, bin })
}

impl CProgram {
    /// Writes the standard library's `schedule` for `p` ranks as `plan.json` beside the program
    /// and returns its path.
    pub fn write_plan(&self, schedule: &str, p: u32) -> PathBuf {
        let plan = symsched_compiler::pipeline::compile(
            &symsched_compiler::pipeline::standard_library(),
            schedule,
            p,
            &Default::default(),
            &Default::default(),
        )
        .unwrap_or_else(|e| panic!("{schedule} compiles for {p} ranks: {e:?}"))
        .plan;
        let path = self.dir.join("plan.json");
        std::fs::write(&path, plan.to_json()).expect("plan written");
        path
    }
}
