//! `#[repr(C)]` mirrors of `struct symsched_device` and `struct symsched_launch_args`.

use std::ffi::{c_char, c_void};

/// Must equal `SYMSCHED_DEVICE_ABI` in `sim/symsched_device.h`.
pub const DEVICE_ABI: u32 = 5;

/// Status codes of `symsched_sim_launch` (names as in the C header).
pub mod status {
    pub const OK: i32 = 0;
    pub const REMOTE_DATACOPY: i32 = 1;
    pub const UB_OVERFLOW: i32 = 2;
    pub const SIGNAL_BEFORE_QUIET: i32 = 3;
    pub const NBI_SOURCE_REUSED: i32 = 4;
    pub const QUEUE_MISUSE: i32 = 5;
    pub const EVENT_MISUSE: i32 = 6;
    pub const BAD_ADDRESS: i32 = 7;
    pub const WAIT_FAILED: i32 = 8;
    pub const UNALIGNED: i32 = 9;
    pub const CAST_MODE: i32 = 10;
    pub const UNQUIETED_AT_EXIT: i32 = 11;
    pub const ABI: i32 = 12;
    pub const UNSUPPORTED: i32 = 13;
    pub const CUBE_OVERFLOW: i32 = 14;
    pub const CUBE_POSITION: i32 = 15;
    pub const HOST_COLL: i32 = 16;
    pub const PIPE_RACE: i32 = 17;
    pub const CORE_TYPE: i32 = 18;
    pub const OPERAND_OVERLAP: i32 = 19;
    pub const GM_RACE: i32 = 20;
    pub const CTRL: i32 = 21;
}

/// The device's float overflow mode, as `aclrtSetDeviceSatMode` sets it for a process
/// (`symsched_launch_args::overflow_mode`): every simulated core's CTRL[48] starts as it. The
/// generated kernels pin the Inf/NaN mode for their own run, so they give the runtime's bits in
/// both (`tests/numerics.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum OverflowMode {
    /// `ACL_RT_OVERFLOW_MODE_SATURATION`: an inf result of a half/bf16 conversion becomes the
    /// largest finite value of its sign, a NaN result 0.
    Saturation = 0,
    /// `ACL_RT_OVERFLOW_MODE_INFNAN`, the Atlas A2 default: IEEE 754 results.
    #[default]
    InfNan = 1,
}

/// The device table a launcher fills in (see the C header for each callback's contract).
#[repr(C)]
pub struct SimDevice {
    pub abi_version: u32,
    pub ctx: *mut c_void,
    pub my_pe: i32,
    pub n_pes: i32,
    pub peer_ptr:
        unsafe extern "C" fn(ctx: *mut c_void, local_sym: *const c_void, pe: i32) -> *mut c_void,
    pub addr_pe: unsafe extern "C" fn(ctx: *mut c_void, addr: *const c_void, len: u64) -> i32,
    pub signal_op:
        unsafe extern "C" fn(ctx: *mut c_void, local_sig: *mut i32, value: i32, op: i32, pe: i32),
    pub signal_wait_until: unsafe extern "C" fn(
        ctx: *mut c_void,
        local_sig: *mut i32,
        cmp: i32,
        value: i32,
        observed: *mut i32,
    ) -> i32,
    pub quiet: unsafe extern "C" fn(ctx: *mut c_void),
    pub barrier: unsafe extern "C" fn(ctx: *mut c_void) -> i32,
    /// Host collective between kernel segments (see [`HostCollFn`]); `None` when the launcher
    /// has none (plans with `hostcoll` steps then fail with `SYMSCHED_SIM_E_HOST_COLL`).
    pub host_coll: Option<HostCollFn>,
    /// Called once when a core of this rank fails (see the C header); `None` if the launcher
    /// has nothing to wake.
    pub abort: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
}

/// `host_coll(ctx, op, data, count, dtype, reduce_op, members, n_members, ordinal)`: `op` 0
/// allreduce, 1 allgather, 2 reduce_scatter, 3 broadcast, in place on `count` elements at the
/// local address `data`; `dtype` and `reduce_op` are the runtime's names as C strings.
pub type HostCollFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    op: i32,
    data: *mut c_void,
    count: u64,
    dtype: *const c_char,
    reduce_op: *const c_char,
    members: *const i32,
    n_members: i32,
    ordinal: i32,
) -> i32;

/// Arguments of one rank's launch.
#[repr(C)]
pub struct LaunchArgs {
    pub abi_version: u32,
    pub n_buffers: u32,
    pub buffers: *const *mut u8,
    pub signals: *mut u8,
    pub sizes: *const u64,
    pub counts: *const u64,
    pub epoch: u64,
    pub send_exit_signals: i32,
    /// Seed of the simulated engine interleaving.
    pub seed: u64,
    /// GM scratch of kernels with matmul steps (null otherwise).
    pub workspace: *mut u8,
    pub workspace_bytes: u64,
    /// The launch group: equal on every rank of one group, never reused by another group in
    /// the process (see [`new_world`]). The simulation records the puts of a group and checks
    /// reads of their bytes against their completion (`SYMSCHED_SIM_E_GM_RACE`); 0 records no
    /// put (the ABI allows it; the launchers here always pass a [`new_world`]).
    pub world: u64,
    /// The device's float overflow mode ([`OverflowMode`] as its `u32`).
    pub overflow_mode: u32,
    pub err_msg: *mut c_char,
    pub err_cap: u32,
}

/// A launch group id no other group of this process has had (the process id in the high bits,
/// so groups of different processes that share a heap differ too).
pub fn new_world() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    (u64::from(std::process::id()) << 32)
        | (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xffff_ffff)
}

/// Signed int32 comparison with the CANN / OpenSHMEM codes (EQ=0 … LE=5).
pub fn cmp_i32(observed: i32, cmp: i32, value: i32) -> bool {
    match cmp {
        0 => observed == value,
        1 => observed != value,
        2 => observed > value,
        3 => observed >= value,
        4 => observed < value,
        _ => observed <= value,
    }
}
