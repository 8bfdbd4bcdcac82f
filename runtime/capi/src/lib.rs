//! C ABI of the symsched host runtime. Every function returns a [`SymschedStatus`] (or a
//! sentinel) and records a message retrievable with [`symsched_last_error`] on failure. No panic
//! crosses the boundary; every pointer is checked for null. The header `runtime/include/symsched.h`
//! is generated from this file by cbindgen (a test checks it is current).
//!
//! Offsets are byte offsets into the symmetric heap (the same on every rank); ranks passed to
//! group functions are group-local.

#![allow(clippy::missing_safety_doc)]

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use symsched_plan::{Cmp, SignalMode};
use symsched_runtime::{Group, Runtime, RuntimeError, WaitContext};

/// Result of every call.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymschedStatus {
    /// Success.
    Ok = 0,
    /// A null pointer, bad string, unknown enum value or other malformed argument.
    InvalidArgument = 1,
    /// A rank outside the group or the world, or the caller is not a member.
    RankOutOfRange = 2,
    /// An offset/length outside the heap or in the reserved area.
    OffsetOutOfRange = 3,
    /// Lengths that should agree do not.
    SizeMismatch = 4,
    /// A signal wait or rendezvous step timed out.
    Timeout = 5,
    /// A peer process died.
    PeerDied = 6,
    /// Heap, scratch, signal pad or group table exhausted.
    OutOfMemory = 7,
    /// Ranks made different allocations or slot registrations.
    Mismatch = 8,
    /// The group spans nodes (or the peer is on another node).
    CrossNode = 9,
    /// The runtime cannot work here, or the environment is malformed.
    Unavailable = 10,
    /// The plan's schema version is not supported.
    Version = 11,
    /// Anything else (system call failure, internal error).
    Internal = 12,
    /// The ranks of a plan launch disagree on it (element counts, dtypes, op or how a buffer is
    /// bound); every rank gets this status, nothing was written, the group stays usable. The
    /// message names each rank's values.
    Disagreement = 13,
    /// A member aborted the group (`symsched_group_abort`), or its reset failed: every wait
    /// fails with this status, naming the rank and its message, until every member called
    /// `symsched_group_reset_after_abort`.
    Aborted = 14,
}

/// Signal update modes (values for the `mode` parameters).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymschedSignalMode {
    /// Store the value.
    Set = 0,
    /// Add the value.
    Add = 1,
}

/// Wait comparisons (values for the `cmp` parameter; CANN / OpenSHMEM numbering).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymschedCmp {
    /// Equal.
    Eq = 0,
    /// Not equal.
    Ne = 1,
    /// Greater than.
    Gt = 2,
    /// Greater or equal.
    Ge = 3,
    /// Less than.
    Lt = 4,
    /// Less or equal.
    Le = 5,
}

/// Memory accounting of the symmetric heap.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SymschedStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Highest `allocated` so far.
    pub peak: u64,
    /// Bytes not allocated.
    pub free: u64,
}

/// Opaque handle on this rank's runtime.
pub struct SymschedRuntime {
    rt: Runtime,
}

/// Opaque handle on a group.
pub struct SymschedGroup {
    g: Arc<Group>,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn status_of(e: &RuntimeError) -> SymschedStatus {
    use RuntimeError as E;
    match e {
        E::InvalidArgument(_)
        | E::BadAlignment(_)
        | E::InvalidFree { .. }
        | E::InvalidGroup { .. }
        | E::KeyConflict { .. } => SymschedStatus::InvalidArgument,
        E::RankOutsideGroup { .. }
        | E::RankOutsideWorld { .. }
        | E::NotAMember { .. }
        | E::SlotOutOfRange { .. } => SymschedStatus::RankOutOfRange,
        E::OffsetPastHeap { .. } | E::ReservedRange { .. } => SymschedStatus::OffsetOutOfRange,
        E::SizeMismatch { .. } => SymschedStatus::SizeMismatch,
        E::SignalTimeout { .. } | E::RendezvousTimeout { .. } => SymschedStatus::Timeout,
        E::PeerDied { .. } => SymschedStatus::PeerDied,
        E::OutOfMemory { .. }
        | E::SignalPadExhausted { .. }
        | E::ScratchExhausted { .. }
        | E::TooManyGroups(_) => SymschedStatus::OutOfMemory,
        E::AllocMismatch { .. } | E::SlotMismatch { .. } => SymschedStatus::Mismatch,
        E::CrossNode { .. } | E::PeerUnreachable { .. } => SymschedStatus::CrossNode,
        E::Unavailable(_) | E::Env { .. } => SymschedStatus::Unavailable,
        E::PlanVersion { .. } => SymschedStatus::Version,
        E::GroupAborted(_) | E::ResetTimeout { .. } => SymschedStatus::Aborted,
        _ => SymschedStatus::Internal,
    }
}

/// Runs `f`, converting errors and panics into a status plus the last-error message.
fn guard(f: impl FnOnce() -> Result<(), RuntimeError>) -> SymschedStatus {
    guard_status(|| f().map_err(|e| (status_of(&e), e.to_string())))
}

/// [`guard`] for calls that choose their own failure status.
fn guard_status(f: impl FnOnce() -> Result<(), (SymschedStatus, String)>) -> SymschedStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SymschedStatus::Ok,
        Ok(Err((status, msg))) => {
            set_error(&msg);
            status
        }
        Err(_) => {
            set_error("internal error (panic) in the symsched runtime");
            SymschedStatus::Internal
        }
    }
}

fn null(what: &str) -> RuntimeError {
    RuntimeError::InvalidArgument(format!("{what} is NULL"))
}

unsafe fn rt_ref<'a>(rt: *const SymschedRuntime) -> Result<&'a Runtime, RuntimeError> {
    rt.as_ref().map(|r| &r.rt).ok_or_else(|| null("runtime"))
}

unsafe fn group_ref<'a>(g: *const SymschedGroup) -> Result<&'a Arc<Group>, RuntimeError> {
    g.as_ref().map(|h| &h.g).ok_or_else(|| null("group"))
}

unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, RuntimeError> {
    p.as_mut().ok_or_else(|| null(what))
}

fn mode_of(mode: u32) -> Result<SignalMode, RuntimeError> {
    match mode {
        0 => Ok(SignalMode::Set),
        1 => Ok(SignalMode::Add),
        m => Err(RuntimeError::InvalidArgument(format!(
            "signal mode {m} (expected 0 = SET or 1 = ADD)"
        ))),
    }
}

fn cmp_of(cmp: u32) -> Result<Cmp, RuntimeError> {
    Ok(match cmp {
        0 => Cmp::Eq,
        1 => Cmp::Ne,
        2 => Cmp::Gt,
        3 => Cmp::Ge,
        4 => Cmp::Lt,
        5 => Cmp::Le,
        c => {
            return Err(RuntimeError::InvalidArgument(format!(
                "comparison {c} (expected 0..=5)"
            )))
        }
    })
}

unsafe fn str_arg<'a>(s: *const c_char, what: &str) -> Result<&'a str, RuntimeError> {
    if s.is_null() {
        return Err(null(what));
    }
    CStr::from_ptr(s)
        .to_str()
        .map_err(|_| RuntimeError::InvalidArgument(format!("{what} is not UTF-8")))
}

/// The message of the last failed call on this thread (empty if none). Valid until the next
/// failing call on this thread.
#[no_mangle]
pub extern "C" fn symsched_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Whether symmetric memory can work here; on failure the reason is in `symsched_last_error`.
#[no_mangle]
pub extern "C" fn symsched_is_available() -> SymschedStatus {
    guard(|| symsched_runtime::is_available().map_err(RuntimeError::Unavailable))
}

/// Checks a plan's schema version against the runtime's.
#[no_mangle]
pub extern "C" fn symsched_check_plan_version(version: u32) -> SymschedStatus {
    guard(|| symsched_runtime::check_plan_version(version))
}

/// Joins the job from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, …). On success
/// `*out` receives a handle to release with `symsched_finalize`.
#[no_mangle]
pub unsafe extern "C" fn symsched_init_from_env(
    out_rt: *mut *mut SymschedRuntime,
) -> SymschedStatus {
    guard(|| {
        let slot = out(out_rt, "out")?;
        let rt = Runtime::init_from_env()?;
        symsched_runtime::exec::capi_launch::register();
        *slot = Box::into_raw(Box::new(SymschedRuntime { rt }));
        Ok(())
    })
}

/// Barrier over the world, then releases the runtime (the handle is invalid afterwards, even
/// on failure). Groups obtained from it stay valid until destroyed.
#[no_mangle]
pub unsafe extern "C" fn symsched_finalize(rt: *mut SymschedRuntime) -> SymschedStatus {
    guard(|| {
        if rt.is_null() {
            return Err(null("runtime"));
        }
        let b = Box::from_raw(rt);
        b.rt.finalize()
    })
}

/// Global rank, or -1 for a NULL handle.
#[no_mangle]
pub unsafe extern "C" fn symsched_rank(rt: *const SymschedRuntime) -> i32 {
    rt_ref(rt).map(|r| r.rank() as i32).unwrap_or(-1)
}

/// World size, or -1 for a NULL handle.
#[no_mangle]
pub unsafe extern "C" fn symsched_world_size(rt: *const SymschedRuntime) -> i32 {
    rt_ref(rt).map(|r| r.world_size() as i32).unwrap_or(-1)
}

/// Symmetric allocation of `size` bytes (64-byte aligned); every rank must make the same calls.
#[no_mangle]
pub unsafe extern "C" fn symsched_malloc(
    rt: *const SymschedRuntime,
    size: usize,
    offset: *mut usize,
) -> SymschedStatus {
    guard(|| {
        let o = out(offset, "offset")?;
        *o = rt_ref(rt)?.malloc(size)?.offset;
        Ok(())
    })
}

/// Frees a symmetric allocation by offset.
#[no_mangle]
pub unsafe extern "C" fn symsched_free(
    rt: *const SymschedRuntime,
    offset: usize,
) -> SymschedStatus {
    guard(|| rt_ref(rt)?.free(offset))
}

/// Allocated / peak / free bytes of the symmetric heap.
#[no_mangle]
pub unsafe extern "C" fn symsched_stats(
    rt: *const SymschedRuntime,
    stats: *mut SymschedStats,
) -> SymschedStatus {
    guard(|| {
        let o = out(stats, "stats")?;
        let s = rt_ref(rt)?.stats();
        *o = SymschedStats {
            allocated: s.allocated,
            peak: s.peak,
            free: s.free,
        };
        Ok(())
    })
}

/// Creates (or returns the cached) group of `n` global ranks; collective over its members.
/// Release the handle with `symsched_group_destroy`.
#[no_mangle]
pub unsafe extern "C" fn symsched_group_create(
    rt: *const SymschedRuntime,
    ranks: *const u32,
    n: usize,
    hierarchical: bool,
    out_group: *mut *mut SymschedGroup,
) -> SymschedStatus {
    guard(|| {
        let slot = out(out_group, "out")?;
        if ranks.is_null() && n > 0 {
            return Err(null("ranks"));
        }
        let members: Vec<usize> = if n == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(ranks, n)
                .iter()
                .map(|&r| r as usize)
                .collect()
        };
        let g = rt_ref(rt)?.group(&members, hierarchical)?;
        *slot = Box::into_raw(Box::new(SymschedGroup { g }));
        Ok(())
    })
}

/// Releases a group handle (the group itself stays cached in the runtime).
#[no_mangle]
pub unsafe extern "C" fn symsched_group_destroy(g: *mut SymschedGroup) {
    if !g.is_null() {
        drop(Box::from_raw(g));
    }
}

/// Group-local rank of the caller, or -1 for a NULL handle.
#[no_mangle]
pub unsafe extern "C" fn symsched_group_rank(g: *const SymschedGroup) -> i32 {
    group_ref(g).map(|g| g.rank() as i32).unwrap_or(-1)
}

/// Group size, or -1 for a NULL handle.
#[no_mangle]
pub unsafe extern "C" fn symsched_group_size(g: *const SymschedGroup) -> i32 {
    group_ref(g).map(|g| g.size() as i32).unwrap_or(-1)
}

/// Address of `len` bytes at `offset` of group-local rank `peer`'s heap (this process's
/// mapping); NULL on error.
#[no_mangle]
pub unsafe extern "C" fn symsched_peer_ptr(
    g: *const SymschedGroup,
    peer: u32,
    offset: usize,
    len: usize,
) -> *mut c_void {
    let mut p = std::ptr::null_mut();
    let st = guard(|| {
        p = group_ref(g)?.peer_ptr(peer as usize, offset, len)? as *mut c_void;
        Ok(())
    });
    if st == SymschedStatus::Ok {
        p
    } else {
        std::ptr::null_mut()
    }
}

/// Copies `len` bytes from this rank's heap at `src_offset` to `peer`'s heap at `dst_offset`.
#[no_mangle]
pub unsafe extern "C" fn symsched_put(
    g: *const SymschedGroup,
    peer: u32,
    dst_offset: usize,
    src_offset: usize,
    len: usize,
) -> SymschedStatus {
    guard(|| group_ref(g)?.put(peer as usize, dst_offset, src_offset, len))
}

/// Copies `len` bytes from `peer`'s heap at `src_offset` to this rank's heap at `dst_offset`.
#[no_mangle]
pub unsafe extern "C" fn symsched_get(
    g: *const SymschedGroup,
    peer: u32,
    src_offset: usize,
    dst_offset: usize,
    len: usize,
) -> SymschedStatus {
    guard(|| group_ref(g)?.get(peer as usize, src_offset, dst_offset, len))
}

/// Reserves (or returns) `count` signal slots for `key`; `*first` receives the first index.
#[no_mangle]
pub unsafe extern "C" fn symsched_signal_slots(
    g: *const SymschedGroup,
    key: *const c_char,
    count: u32,
    first: *mut u32,
) -> SymschedStatus {
    guard(|| {
        let o = out(first, "first")?;
        let key = str_arg(key, "key")?;
        *o = group_ref(g)?.signal_slots(key, count as usize)?.start as u32;
        Ok(())
    })
}

/// Updates signal `slot` on `peer` (`mode`: a `SymschedSignalMode`) with release ordering.
#[no_mangle]
pub unsafe extern "C" fn symsched_signal(
    g: *const SymschedGroup,
    peer: u32,
    slot: u32,
    mode: u32,
    value: u64,
) -> SymschedStatus {
    guard(|| group_ref(g)?.signal(peer as usize, slot as usize, mode_of(mode)?, value))
}

/// Waits until this rank's `slot` compares true (`cmp`: a `SymschedCmp`) against `target`,
/// up to `SYMMETRIC_MEMORY_SIGNAL_TIMEOUT_MS`.
#[no_mangle]
pub unsafe extern "C" fn symsched_wait(
    g: *const SymschedGroup,
    slot: u32,
    cmp: u32,
    target: u64,
) -> SymschedStatus {
    guard(|| {
        let ctx = WaitContext::new("c-api", "symsched_wait", format!("slot {slot}"));
        group_ref(g)?.wait(slot as usize, cmp_of(cmp)?, target, &ctx)
    })
}

/// `symsched_put` then `symsched_signal`: the data is visible before the signal.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn symsched_put_with_signal(
    g: *const SymschedGroup,
    peer: u32,
    dst_offset: usize,
    src_offset: usize,
    len: usize,
    slot: u32,
    mode: u32,
    value: u64,
) -> SymschedStatus {
    guard(|| {
        let m = mode_of(mode)?;
        group_ref(g)?.put_with_signal(
            peer as usize,
            dst_offset,
            src_offset,
            len,
            slot as usize,
            m,
            value,
        )
    })
}

/// Barrier over the group's members (also checks allocation agreement).
#[no_mangle]
pub unsafe extern "C" fn symsched_barrier(g: *const SymschedGroup) -> SymschedStatus {
    guard(|| group_ref(g)?.barrier())
}

/// Runs a compiled plan (JSON) on the group with launch arguments (JSON), through the launcher
/// the plan executor registered (`symsched_runtime::capi_hook`). Collective: every rank agrees
/// on the launch first; a disagreement is [`SymschedStatus::Disagreement`] on every rank. A
/// launch that fails on one rank after that aborts the group, so its peers fail at once with
/// [`SymschedStatus::Aborted`].
#[no_mangle]
pub unsafe extern "C" fn symsched_launch_plan(
    g: *const SymschedGroup,
    plan_json: *const c_char,
    args_json: *const c_char,
) -> SymschedStatus {
    use symsched_runtime::capi_hook::PlanLaunchError as L;
    guard_status(|| {
        let invalid = |e: RuntimeError| (status_of(&e), e.to_string());
        let g = group_ref(g).map_err(invalid)?;
        let plan = str_arg(plan_json, "plan_json").map_err(invalid)?;
        let args = str_arg(args_json, "args_json").map_err(invalid)?;
        let launcher = symsched_runtime::capi_hook::plan_launcher().ok_or_else(|| {
            invalid(RuntimeError::Unavailable(
                "no plan executor is registered in this build".into(),
            ))
        })?;
        launcher(g, plan, args).map_err(|e| match e {
            L::Disagreement(m) => (SymschedStatus::Disagreement, m),
            L::Core(e) => invalid(e),
            L::Invalid(m) => (SymschedStatus::InvalidArgument, m),
        })
    })
}

/// Marks the group aborted with `message` (this rank failed inside a collective): every
/// member's waits on the group fail at once with [`SymschedStatus::Aborted`], naming this rank
/// and the message, until every member called [`symsched_group_reset_after_abort`].
#[no_mangle]
pub unsafe extern "C" fn symsched_group_abort(
    g: *const SymschedGroup,
    message: *const c_char,
) -> SymschedStatus {
    guard(|| {
        let g = group_ref(g)?;
        g.abort(str_arg(message, "message")?);
        Ok(())
    })
}

/// Collective reset of an aborted group, bounded by the signal timeout; on success the group
/// works again and `*generation` (if not NULL) receives its new reset generation. If a member
/// does not take part in time the group is refused for good ([`SymschedStatus::Aborted`]).
/// The reset forgets the group's slot registry: slot indices from [`symsched_signal_slots`]
/// taken before it are void; register the keys again afterwards.
#[no_mangle]
pub unsafe extern "C" fn symsched_group_reset_after_abort(
    g: *const SymschedGroup,
    generation: *mut u64,
) -> SymschedStatus {
    guard(|| {
        let gen = group_ref(g)?.reset_after_abort()?;
        if let Some(out) = generation.as_mut() {
            *out = gen;
        }
        Ok(())
    })
}

/// How many times the group was reset after an abort (0 at first; 0 for a NULL group).
#[no_mangle]
pub unsafe extern "C" fn symsched_group_generation(g: *const SymschedGroup) -> u64 {
    group_ref(g).map_or(0, |g| g.generation())
}
