//! Running generated kernels on the host simulation.
//!
//! - [`device`]: the C device table (`kernels/sim/symsched_device.h`) in Rust;
//! - [`heap`]: the symmetric layout of a plan's buffers and signal pad;
//! - [`inproc`]: an in-process launcher — P threads, one heap segment each — that fills in the
//!   device table with atomics, for tests and for runtimes that do not provide their own;
//! - [`hostcoll`]: the host collectives a launch stub calls between kernel segments;
//! - `table`: the device-table callbacks both launchers share (peer addressing, signals, waits).

pub mod device;
pub mod fabric;
pub mod harness;
pub mod heap;
pub mod hostcoll;
pub mod inproc;
pub(crate) mod table;
