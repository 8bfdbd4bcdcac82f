//! Compiled kernels cached per launch signature: in memory for the process, on disk across
//! processes (like the simulated Ascend C kernels of `kernels/src/sim_build.rs`).
//!
//! The key is the SHA-256 of everything the machine code depends on: this crate's version and
//! codegen revision, the LLVM version, the target (triple, CPU, features), the compile options,
//! the plan (its JSON, which includes the source hash, P and the params), the rank (and the
//! channel, for a rank with several), the three dtypes and the reduce op. A disk entry is `<dir>/<key>.o`: a header naming the key, then the
//! object; one that does not match its key, or that the linker refuses, is compiled again and
//! replaced. Files are written through a unique temporary and renamed, so concurrent processes
//! never read half an object. The directory is passed in (the runtime's configuration decides
//! it); `None` keeps kernels in memory only.

use crate::abi::{KernelArgs, KernelFn, KernelStatus};
use crate::compile::{self, CompileOptions, HostTarget};
use crate::lower::KernelSpec;
use crate::JitError;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bumped whenever the generated code changes meaning for the same inputs.
pub const CODEGEN_REVISION: u32 = 9;

const MAGIC: &[u8; 16] = b"symsched-jit-obj";

/// Where a kernel came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already loaded in this process.
    Memory,
    /// Compiled by an earlier process, loaded from the disk cache.
    Disk,
    /// Compiled now.
    Compiled,
}

/// A callable kernel.
#[derive(Debug)]
pub struct Kernel {
    pub key: String,
    pub symbol: String,
    entry: KernelFn,
    /// Time spent compiling it in this process (zero when it came from disk).
    pub compile_time: Duration,
}

impl Kernel {
    /// Run one launch.
    ///
    /// # Safety
    /// `args` must satisfy the ABI ([`crate::abi`]): a live intrinsic table whose functions
    /// honour their contracts for the whole call, `sizes` holding one value per size variable
    /// of the plan, `counts` null or `P × P` values.
    // Inline: the call is on every launch's path, across the crate boundary.
    #[inline]
    pub unsafe fn launch(&self, args: &mut KernelArgs) -> KernelStatus {
        args.status = KernelStatus::default();
        // SAFETY: forwarded from the caller's contract.
        let code = unsafe { (self.entry)(args) };
        debug_assert_eq!(code, args.status.code);
        args.status
    }
}

/// The two-level cache.
pub struct KernelCache {
    dir: Option<PathBuf>,
    opts: CompileOptions,
    target: HostTarget,
    mem: Mutex<HashMap<String, Arc<Kernel>>>,
}

impl KernelCache {
    /// A cache compiling with `opts` for the host, storing objects under `dir`.
    pub fn new(dir: Option<PathBuf>, opts: CompileOptions) -> Result<KernelCache, JitError> {
        let target = HostTarget::of(&opts)?;
        Ok(KernelCache {
            dir,
            opts,
            target,
            mem: Mutex::new(HashMap::new()),
        })
    }

    pub fn target(&self) -> &HostTarget {
        &self.target
    }

    /// The cache key of `spec` (hex SHA-256).
    pub fn key(&self, spec: &KernelSpec<'_>) -> String {
        let mut h = Sha256::new();
        let mut part = |s: &str| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        let (a, b, c) = inkwell::support::get_llvm_version();
        part(env!("CARGO_PKG_VERSION"));
        part(&CODEGEN_REVISION.to_string());
        part(&format!("llvm {a}.{b}.{c}"));
        part(&self.target.triple);
        part(&self.target.cpu);
        part(&self.target.features);
        part(&format!("{:?}", self.opts));
        part(&spec.plan.to_json());
        part(&format!(
            "rank {} data {} wire {} acc {} op {}",
            spec.rank, spec.types.data, spec.types.wire, spec.types.acc, spec.op
        ));
        // Only a rank with several channels has more than one kernel per signature; a
        // one-channel rank keeps the key it always had.
        if spec.multi_channel() {
            part(&format!("channel {}", spec.channel));
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The kernel for `spec`: from memory, else from disk, else compiled (and stored).
    pub fn get(&self, spec: &KernelSpec<'_>) -> Result<(Arc<Kernel>, Source), JitError> {
        let key = self.key(spec);
        let mut mem = self.mem.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = mem.get(&key) {
            return Ok((k.clone(), Source::Memory));
        }
        let symbol = format!("symsched_jit_{}", &key[..32]);
        let path = self.dir.as_ref().map(|d| d.join(format!("{key}.o")));
        if let Some(bytes) = path.as_deref().and_then(|p| read_entry(p, &key)) {
            if let Ok(entry) = compile::load_bytes(&bytes, &symbol) {
                let k = Arc::new(Kernel {
                    key: key.clone(),
                    symbol,
                    entry,
                    compile_time: Duration::ZERO,
                });
                mem.insert(key, k.clone());
                return Ok((k, Source::Disk));
            }
        }
        let obj = compile::compile_object(spec, &self.opts, &self.target, &symbol)?;
        if let (Some(dir), Some(path)) = (&self.dir, &path) {
            write_entry(dir, path, &key, &obj.bytes)?;
        }
        let entry = compile::load(&obj)?;
        let k = Arc::new(Kernel {
            key: key.clone(),
            symbol,
            entry,
            compile_time: obj.compile_time(),
        });
        mem.insert(key, k.clone());
        Ok((k, Source::Compiled))
    }
}

/// The object stored for `key`, if the file is one.
fn read_entry(path: &Path, key: &str) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    let head = MAGIC.len() + key.len();
    (data.len() > head
        && &data[..MAGIC.len()] == MAGIC
        && &data[MAGIC.len()..head] == key.as_bytes())
    .then(|| data[head..].to_vec())
}

fn write_entry(dir: &Path, path: &Path, key: &str, obj: &[u8]) -> Result<(), JitError> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::fs::create_dir_all(dir).map_err(|e| JitError::io(dir, e))?;
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.{seq}.tmp", std::process::id()));
    let mut data = Vec::with_capacity(MAGIC.len() + key.len() + obj.len());
    data.extend_from_slice(MAGIC);
    data.extend_from_slice(key.as_bytes());
    data.extend_from_slice(obj);
    std::fs::write(&tmp, &data).map_err(|e| JitError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| JitError::io(path, e))
}
