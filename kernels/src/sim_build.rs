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
pub const SIM_HEADERS: [(&str, &str); 8] = [
    (
        "symsched_device.h",
        include_str!("../sim/symsched_device.h"),
    ),
    (
        "symsched_sim_remote.h",
        include_str!("../sim/symsched_sim_remote.h"),
    ),
    (
        "symsched_sim_pipes.h",
        include_str!("../sim/symsched_sim_pipes.h"),
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
    ("cube.h", include_str!("../sim/cube.h")),
    ("hccl.h", include_str!("../sim/hccl.h")),
];

/// Flags every simulated kernel is built with (plus one [`OptLevel`]).
///
/// `-fno-gnu-unique`: without it g++ emits the function-local statics of the simulation
/// headers (the sync-site registry, the current core, the launch context) as STB_GNU_UNIQUE
/// symbols, which the dynamic loader binds to one instance for the whole process however the
/// library is opened. Every kernel library then shared them, and the registry was destroyed
/// when the library whose code first initialised it was unloaded (a dropped [`SimKernel`])
/// while other kernels still used it: heap corruption in whatever test ran next
/// (`tests/sim_unload.rs`). With the flag each library owns its statics and destroys them
/// when it is unloaded, after its last launch has joined every core thread.
pub const CXX_FLAGS: [&str; 7] = [
    "-std=c++17",
    "-Wall",
    "-Werror",
    "-shared",
    "-fPIC",
    "-pthread",
    "-fno-gnu-unique",
];

/// Optimisation level of a simulated build.
///
/// Results do not depend on it: on x86-64 every float operation the simulation does is a scalar
/// SSE operation at any level (no x87 excess precision, no FMA contraction without `-mfma`), and
/// the kernels have no undefined behaviour the optimiser could exploit (integer wrap goes through
/// unsigned arithmetic). What differs is the cost. Measured on one generated kernel
/// (reduce_push, P = 4) on this 2-core machine at load average 6.4: `-O2` 5.4 s, `-O1` 3.3 s,
/// `-O0` 1.9 s per build. A precompiled umbrella header of the simulation saved only ~10 % more
/// at `-O0` (1.27 s vs 1.38 s, most of the time is code generation for the kernel itself), so
/// it is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OptLevel {
    /// `-O0`: cheapest build; what the test suites use (small launches).
    O0,
    /// `-O2`: what `symsched run --backend sim` uses (large launches run faster).
    #[default]
    O2,
}

impl OptLevel {
    /// The g++ flag.
    pub fn flag(self) -> &'static str {
        match self {
            OptLevel::O0 => "-O0",
            OptLevel::O2 => "-O2",
        }
    }
}

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
    /// Content hash of the `-O2` build (hex SHA-256).
    pub fn hash(&self) -> String {
        self.hash_with(OptLevel::O2)
    }

    /// Content hash of the build at `opt` (hex SHA-256).
    pub fn hash_with(&self, opt: OptLevel) -> String {
        let mut h = Sha256::new();
        for part in [&self.name, &self.kernel, &self.table, &self.sim_entry] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        for (n, text) in SIM_HEADERS {
            h.update(n.as_bytes());
            h.update(text.as_bytes());
        }
        for f in CXX_FLAGS.iter().chain([&opt.flag()]) {
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
    // Keeps the library mapped for as long as `launch_fn` may be called (shared by the kernels
    // of one batch build).
    _lib: std::sync::Arc<libloading::Library>,
    launch_fn: unsafe extern "C" fn(*const SimDevice, *const LaunchArgs) -> i32,
    sync_sites_fn: unsafe extern "C" fn(*mut u32, u32) -> u32,
    ordering_sites_fn: unsafe extern "C" fn(*mut u32, u32) -> u32,
}

impl std::fmt::Debug for SimKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimKernel")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

/// Write through a unique temporary and rename, so a concurrent g++ reading `path` never sees a
/// half-written file.
fn write(path: &Path, text: &str) -> Result<(), KernelError> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.{seq}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| KernelError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| KernelError::io(path, e))
}

/// Compile at `-O2` (or reuse from `cache_dir`) and load a kernel.
pub fn build(src: &SimSources, cache_dir: &Path) -> Result<SimKernel, KernelError> {
    build_with(src, cache_dir, OptLevel::O2)
}

/// Compile at `opt` (or reuse from `cache_dir`) and load a kernel.
pub fn build_with(
    src: &SimSources,
    cache_dir: &Path,
    opt: OptLevel,
) -> Result<SimKernel, KernelError> {
    let dir = cache_dir.join(src.hash_with(opt));
    let so = dir.join(format!("{}.so", src.name));
    if !so.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
        let entry = write_sources(&dir, src, true)?;
        compile(&entry, &dir, opt, &so)?;
    }
    load(&so, &src.name)
}

/// Write `src` (and, when `headers`, the simulation headers) into `dir`; returns the entry file.
fn write_sources(dir: &Path, src: &SimSources, headers: bool) -> Result<PathBuf, KernelError> {
    if headers {
        for (n, text) in SIM_HEADERS {
            write(&dir.join(n), text)?;
        }
    }
    write(&dir.join(format!("{}_kernel.cpp", src.name)), &src.kernel)?;
    write(&dir.join(format!("{}_table.h", src.name)), &src.table)?;
    let entry = dir.join(format!("{}_sim.cpp", src.name));
    write(&entry, &src.sim_entry)?;
    Ok(entry)
}

/// Compile `entry` into the shared library `so`.
fn compile(entry: &Path, include: &Path, opt: OptLevel, so: &Path) -> Result<(), KernelError> {
    // Build under a unique name, then rename: concurrent builders never see a partial .so.
    // Unique per process and per call: test threads may build the same kernel at once.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = so.as_os_str().to_owned();
    tmp.push(format!(".{}.{seq}.tmp.so", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let out = Command::new(compiler())
        .args(CXX_FLAGS)
        .arg(opt.flag())
        .arg("-I")
        .arg(include)
        .arg(entry)
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
    std::fs::rename(&tmp, so).map_err(|e| KernelError::io(so, e))
}

/// Kernels [`build_many`] compiles in one g++ process.
///
/// At `-O0` more than half of a kernel's compile time is parsing the simulation and the C++
/// library headers (g++ -ftime-report on one kernel: parsing + deferred 1.05 s of 1.83 s CPU),
/// which one translation unit of several kernels pays once. Measured on this machine (8
/// kernels of the P = 4 dtype/op/wire matrix at -O0, load average 18): one by one 12.3 s CPU,
/// as one batch 2.8 s CPU (4.4x).
pub const BATCH: usize = 8;

/// Build (or reuse) one batch of kernels as one shared library; each kernel's entry points are
/// renamed with the preprocessor so they coexist (`symsched_sim_launch_<i>`). A batch that does
/// not compile is rebuilt kernel by kernel, so each error names its kernel.
fn build_batch(
    srcs: &[&SimSources],
    cache_dir: &Path,
    opt: OptLevel,
) -> Vec<Result<SimKernel, KernelError>> {
    let mut h = Sha256::new();
    for s in srcs {
        h.update(s.hash_with(opt).as_bytes());
    }
    let key: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = cache_dir.join(format!("batch-{key}"));
    let so = dir.join("batch.so");
    let made = (|| -> Result<(), KernelError> {
        if so.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&dir).map_err(|e| KernelError::io(&dir, e))?;
        let mut tu = String::from(
            "// Generated by symsched_kernels::sim_build: several simulated kernels in one unit.\n",
        );
        for (i, s) in srcs.iter().enumerate() {
            write_sources(&dir, s, i == 0)?;
            tu.push_str(&format!(
                "#define symsched_sim_launch symsched_sim_launch_{i}\n\
                 #define symsched_sim_table_words symsched_sim_table_words_{i}\n\
                 #define symsched_sim_sync_sites symsched_sim_sync_sites_{i}\n\
                 #define symsched_sim_ordering_sites symsched_sim_ordering_sites_{i}\n\
                 #include \"{}_sim.cpp\"\n\
                 #undef symsched_sim_launch\n\
                 #undef symsched_sim_table_words\n\
                 #undef symsched_sim_sync_sites\n\
                 #undef symsched_sim_ordering_sites\n",
                s.name
            ));
        }
        let entry = dir.join("batch.cpp");
        write(&entry, &tu)?;
        compile(&entry, &dir, opt, &so)
    })();
    let lib = made.and_then(|()| {
        // SAFETY: as in `load`: a library this module built from generated sources.
        unsafe { libloading::Library::new(&so) }
            .map(std::sync::Arc::new)
            .map_err(|e| KernelError::Load {
                path: so.display().to_string(),
                message: e.to_string(),
            })
    });
    match lib {
        Ok(lib) => srcs
            .iter()
            .enumerate()
            .map(|(i, s)| from_library(lib.clone(), &so, &s.name, &format!("_{i}")))
            .collect(),
        Err(_) => srcs.iter().map(|s| build_with(s, cache_dir, opt)).collect(),
    }
}

/// Default parallelism of [`build_many`]: `$SYMSCHED_SIM_JOBS`, else the number of CPUs.
pub fn default_jobs() -> usize {
    std::env::var("SYMSCHED_SIM_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n: &usize| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Build (or reuse) many kernels with up to `jobs` g++ processes at once, [`BATCH`] kernels
/// per process; results are in the order of `srcs`. Kernels already in the cache on their own
/// are loaded from there. Each g++ is single-threaded, so on this 2-core machine two jobs
/// roughly halve the wall time of a cold matrix.
pub fn build_many(
    srcs: &[SimSources],
    cache_dir: &Path,
    opt: OptLevel,
    jobs: usize,
) -> Vec<Result<SimKernel, KernelError>> {
    let mut out: Vec<Option<Result<SimKernel, KernelError>>> =
        (0..srcs.len()).map(|_| None).collect();
    let mut missing = vec![];
    for (i, s) in srcs.iter().enumerate() {
        let so = cache_dir
            .join(s.hash_with(opt))
            .join(format!("{}.so", s.name));
        if so.exists() {
            out[i] = Some(load(&so, &s.name));
        } else {
            missing.push(i);
        }
    }
    let chunks: Vec<&[usize]> = missing.chunks(BATCH).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots = std::sync::Mutex::new(&mut out);
    std::thread::scope(|sc| {
        for _ in 0..jobs.clamp(1, chunks.len().max(1)) {
            sc.spawn(|| loop {
                let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(idx) = chunks.get(c) else { break };
                let batch: Vec<&SimSources> = idx.iter().map(|&i| &srcs[i]).collect();
                let built = build_batch(&batch, cache_dir, opt);
                let mut slots = slots.lock().unwrap_or_else(|e| e.into_inner());
                for (&i, r) in idx.iter().zip(built) {
                    slots[i] = Some(r);
                }
            });
        }
    });
    out.into_iter()
        .map(|r| r.unwrap_or_else(|| Err(KernelError::Run("build worker stopped".into()))))
        .collect()
}

/// Load an already compiled simulated kernel.
pub fn load(so: &Path, name: &str) -> Result<SimKernel, KernelError> {
    // SAFETY: the library is one this module built from generated sources; loading runs only
    // static initialisers of the simulation headers, which have none with side effects.
    let lib = unsafe { libloading::Library::new(so) }.map_err(|e| KernelError::Load {
        path: so.display().to_string(),
        message: e.to_string(),
    })?;
    from_library(std::sync::Arc::new(lib), so, name, "")
}

/// `suffix`: what a batch build appended to the entry points' names ("" for a single build).
fn from_library(
    lib: std::sync::Arc<libloading::Library>,
    so: &Path,
    name: &str,
    suffix: &str,
) -> Result<SimKernel, KernelError> {
    let err = |e: libloading::Error| KernelError::Load {
        path: so.display().to_string(),
        message: e.to_string(),
    };
    let sym = format!("symsched_sim_launch{suffix}\0").into_bytes();
    let sites = format!("symsched_sim_sync_sites{suffix}\0").into_bytes();
    let ordering = format!("symsched_sim_ordering_sites{suffix}\0").into_bytes();
    // SAFETY: every simulated kernel exports `symsched_sim_launch` (renamed per kernel in a
    // batch) with this signature (templates/sim_entry.cpp, typedef symsched_sim_launch_fn in
    // sim/symsched_device.h).
    let launch_fn = unsafe {
        *lib.get::<unsafe extern "C" fn(*const SimDevice, *const LaunchArgs) -> i32>(&sym)
            .map_err(err)?
    };
    // SAFETY: exported by every simulated kernel with this signature (templates/sim_entry.cpp).
    let sync_sites_fn = unsafe {
        *lib.get::<unsafe extern "C" fn(*mut u32, u32) -> u32>(&sites)
            .map_err(err)?
    };
    // SAFETY: as above.
    let ordering_sites_fn = unsafe {
        *lib.get::<unsafe extern "C" fn(*mut u32, u32) -> u32>(&ordering)
            .map_err(err)?
    };
    Ok(SimKernel {
        name: name.to_string(),
        path: so.to_path_buf(),
        _lib: lib,
        launch_fn,
        sync_sites_fn,
        ordering_sites_fn,
    })
}

/// The lines a library's site registry (`symsched_sim_sync_sites` and alike) reports.
fn read_sites(f: unsafe extern "C" fn(*mut u32, u32) -> u32) -> Vec<u32> {
    // SAFETY: the function only reads the library's own registry; a null buffer of capacity 0
    // asks for the count.
    let n = unsafe { f(std::ptr::null_mut(), 0) };
    let mut v = vec![0u32; n as usize];
    // SAFETY: `v` holds `n` writable words.
    let m = unsafe { f(v.as_mut_ptr(), n) };
    v.truncate(m.min(n) as usize);
    v.sort_unstable();
    v.dedup();
    v
}

impl SimKernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Source lines of this kernel's sync calls (SetFlag, WaitFlag, PipeBarrier, cross-core
    /// flags) that have run in this process so far, ascending.
    pub fn sync_sites(&self) -> Vec<u32> {
        read_sites(self.sync_sites_fn)
    }

    /// The subset of [`SimKernel::sync_sites`] that, at least once, ordered something the sync
    /// calls before them had not: the engine (or core) a call holds back learned that an
    /// instruction had finished that it did not know of. A site that ran but is not listed only
    /// repeats orders that other calls give (deleting it changes no happens-before relation
    /// of the runs so far), ascending.
    pub fn ordering_sync_sites(&self) -> Vec<u32> {
        read_sites(self.ordering_sites_fn)
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
