//! Compile a generated kernel against the host simulation (`kernels/sim`) with the system g++
//! and load it. Builds are cached by the SHA-256 of everything that goes into them (sources,
//! simulation headers, compiler flags), so a kernel is compiled once per content.

use crate::lower::Lowered;
use crate::sim::device::{LaunchArgs, SimDevice};
use crate::KernelError;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The simulation headers, embedded so a build needs nothing but this crate and g++.
pub const SIM_HEADERS: [(&str, &str); 4] = [
    (
        "symsched_device.h",
        include_str!("../sim/symsched_device.h"),
    ),
    (
        "symsched_sim_core.h",
        include_str!("../sim/symsched_sim_core.h"),
    ),
    (
        "kernel_operator.h",
        include_str!("../sim/kernel_operator.h"),
    ),
    ("shmem.h", include_str!("../sim/shmem.h")),
];

/// Flags every simulated kernel is built with.
pub const CXX_FLAGS: [&str; 7] = [
    "-std=c++17",
    "-O2",
    "-Wall",
    "-Werror",
    "-shared",
    "-fPIC",
    "-pthread",
];

/// Where compiled kernels are cached: `$SYMSCHED_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/symsched/kernels`, else `$HOME/.cache/symsched/kernels`, else the temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SYMSCHED_KERNEL_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("symsched/kernels");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache/symsched/kernels");
    }
    std::env::temp_dir().join("symsched-kernels")
}

/// The C++ compiler: `$CXX` or `g++`.
fn compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "g++".to_string())
}

/// Source files of one simulated build.
#[derive(Debug, Clone)]
pub struct SimSources {
    pub name: String,
    pub kernel: String,
    pub table: String,
    pub sim_entry: String,
}

impl From<&Lowered> for SimSources {
    fn from(l: &Lowered) -> Self {
        SimSources {
            name: l.name.clone(),
            kernel: l.kernel.clone(),
            table: l.table.clone(),
            sim_entry: l.sim_entry.clone(),
        }
    }
}

impl SimSources {
    /// Content hash of the build (hex SHA-256).
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        for part in [&self.name, &self.kernel, &self.table, &self.sim_entry] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        for (n, text) in SIM_HEADERS {
            h.update(n.as_bytes());
            h.update(text.as_bytes());
        }
        for f in CXX_FLAGS {
            h.update(f.as_bytes());
        }
        h.update(compiler().as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A compiled and loaded simulated kernel.
pub struct SimKernel {
    name: String,
    path: PathBuf,
    // Keeps the library mapped for as long as `launch_fn` may be called.
    _lib: libloading::Library,
    launch_fn: unsafe extern "C" fn(*const SimDevice, *const LaunchArgs) -> i32,
}

impl std::fmt::Debug for SimKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimKernel")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

fn write(path: &Path, text: &str) -> Result<(), KernelError> {
    std::fs::write(path, text).map_err(|e| KernelError::io(path, e))
}

/// Compile (or reuse from `cache_dir`) and load a kernel.
pub fn build(src: &SimSources, cache_dir: &Path) -> Result<SimKernel, KernelError> {
    let dir = cache_dir.join(src.hash());
    let so = dir.join(format!("{}.so", src.name));
    if !so.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
        for (n, text) in SIM_HEADERS {
            write(&dir.join(n), text)?;
        }
        write(&dir.join(format!("{}_kernel.cpp", src.name)), &src.kernel)?;
        write(&dir.join(format!("{}_table.h", src.name)), &src.table)?;
        let entry = dir.join(format!("{}_sim.cpp", src.name));
        write(&entry, &src.sim_entry)?;
        // Build under a unique name, then rename: concurrent builders never see a partial .so.
        let tmp = dir.join(format!("{}.{}.tmp.so", src.name, std::process::id()));
        let out = Command::new(compiler())
            .args(CXX_FLAGS)
            .arg("-I")
            .arg(&dir)
            .arg(&entry)
            .arg("-o")
            .arg(&tmp)
            .output()
            .map_err(|e| KernelError::io(compiler(), e))?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&tmp);
            return Err(KernelError::Compile {
                path: entry.display().to_string(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        std::fs::rename(&tmp, &so).map_err(|e| KernelError::io(&so, e))?;
    }
    load(&so, &src.name)
}

/// Load an already compiled simulated kernel.
pub fn load(so: &Path, name: &str) -> Result<SimKernel, KernelError> {
    let err = |e: libloading::Error| KernelError::Load {
        path: so.display().to_string(),
        message: e.to_string(),
    };
    // SAFETY: the library is one this module built from generated sources; loading runs only
    // static initialisers of the simulation headers, which have none with side effects.
    let lib = unsafe { libloading::Library::new(so) }.map_err(err)?;
    // SAFETY: every simulated kernel exports `symsched_sim_launch` with this signature
    // (templates/sim_entry.cpp, typedef symsched_sim_launch_fn in sim/symsched_device.h).
    let launch_fn = unsafe {
        *lib.get::<unsafe extern "C" fn(*const SimDevice, *const LaunchArgs) -> i32>(
            b"symsched_sim_launch\0",
        )
        .map_err(err)?
    };
    Ok(SimKernel {
        name: name.to_string(),
        path: so.to_path_buf(),
        _lib: lib,
        launch_fn,
    })
}

impl SimKernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run one rank's launch on the calling thread. Returns the simulation status
    /// (0 = `SYMSCHED_SIM_OK`) and, on failure, the message the kernel library wrote.
    ///
    /// # Safety
    /// `dev` must describe live memory: its callbacks must be valid for the whole launch, and
    /// every pointer in `args` must point into memory of the sizes the kernel's plan implies
    /// for the given size variables.
    pub unsafe fn launch(&self, dev: &SimDevice, args: &mut LaunchArgs) -> (i32, String) {
        let mut msg = vec![0u8; 1024];
        args.err_msg = msg.as_mut_ptr().cast();
        args.err_cap = msg.len() as u32;
        // SAFETY: forwarded from the caller's contract.
        let code = unsafe { (self.launch_fn)(dev, args) };
        args.err_msg = std::ptr::null_mut();
        args.err_cap = 0;
        let end = msg.iter().position(|b| *b == 0).unwrap_or(msg.len());
        (code, String::from_utf8_lossy(&msg[..end]).into_owned())
    }
}
