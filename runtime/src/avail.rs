//! Availability checks (`is_available`) and the plan schema version check.

use crate::config::{heap_size_from_env, RuntimeConfig};
use crate::error::RuntimeError;
use crate::heap::{Layout, DEFAULT_ARENA_BYTES, ENV_SCRATCH_SIZE, MIN_HEAP_BYTES};

/// Largest total mapping we accept: every local segment is mapped in every process.
const MAX_TOTAL_MAPPED: u64 = 1 << 46;

/// Checks that a heap of `heap_size` bytes (plus group scratch arenas of `arena` bytes), mapped
/// `local_world` times, can work here; returns the segment layout.
pub(crate) fn check(
    heap_size: u64,
    arena: u64,
    local_world: usize,
) -> Result<Layout, RuntimeError> {
    if heap_size < MIN_HEAP_BYTES {
        return Err(RuntimeError::Unavailable(format!(
            "SYMMETRIC_MEMORY_HEAP_SIZE={heap_size} is below the minimum of {MIN_HEAP_BYTES} bytes"
        )));
    }
    let layout = Layout::new(heap_size, arena).ok_or_else(|| {
        RuntimeError::Unavailable(format!(
            "heap too large for the address space: heap {heap_size} + scratch arenas {arena} overflow"
        ))
    })?;
    let total = layout.segment_bytes.saturating_mul(local_world as u64);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a local struct.
    let as_limit = if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0
        && lim.rlim_cur != libc::RLIM_INFINITY
    {
        lim.rlim_cur
    } else {
        MAX_TOTAL_MAPPED
    };
    if total > as_limit.min(MAX_TOTAL_MAPPED) {
        return Err(RuntimeError::Unavailable(format!(
            "heap too large for the address space: {local_world} segments of {} bytes \
             ({total} bytes) exceed the limit of {} bytes",
            layout.segment_bytes,
            as_limit.min(MAX_TOTAL_MAPPED)
        )));
    }
    let name = c"symsched-probe";
    // SAFETY: valid C string; the probe descriptor is closed right away.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(RuntimeError::Unavailable(format!(
            "no memfd: memfd_create failed ({})",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: closing the probe descriptor.
    unsafe { libc::close(fd) };
    Ok(layout)
}

/// Whether the runtime can work on this host with the current environment; `Err` explains why
/// not (no memfd, heap too large for the address space, malformed environment, …).
///
/// ```
/// match symsched_runtime::is_available() {
///     Ok(()) => {}
///     Err(why) => eprintln!("symmetric memory unavailable: {why}"),
/// }
/// ```
pub fn is_available() -> Result<(), String> {
    let heap = heap_size_from_env().map_err(|e| e.to_string())?;
    let local = match RuntimeConfig::from_env() {
        Ok(c) => c.local_world_size,
        Err(_) => 1,
    };
    let arena = match std::env::var(ENV_SCRATCH_SIZE) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u64>()
            .map_err(|e| format!("{ENV_SCRATCH_SIZE}=`{v}`: {e}"))?,
        _ => DEFAULT_ARENA_BYTES,
    };
    check(heap, arena, local)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Checks that a plan's schema version is the one this runtime executes.
pub fn check_plan_version(found: u32) -> Result<(), RuntimeError> {
    if found != symsched_plan::PLAN_SCHEMA_VERSION {
        return Err(RuntimeError::PlanVersion {
            found,
            expected: symsched_plan::PLAN_SCHEMA_VERSION,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks() {
        assert!(check(1 << 30, 1 << 28, 8).is_ok());
        let e = check(1 << 40, 1 << 28, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("heap too large for the address space"), "{e}");
        let e = check(u64::MAX - 5, 1 << 28, 1).unwrap_err().to_string();
        assert!(e.contains("heap too large for the address space"), "{e}");
        assert!(check(1024, 1 << 20, 1)
            .unwrap_err()
            .to_string()
            .contains("below the minimum"));
        assert!(check_plan_version(symsched_plan::PLAN_SCHEMA_VERSION).is_ok());
        assert!(matches!(
            check_plan_version(symsched_plan::PLAN_SCHEMA_VERSION + 1),
            Err(RuntimeError::PlanVersion { .. })
        ));
    }
}
