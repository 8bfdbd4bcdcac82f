//! The simulated launch stub's host collectives: the device table's `host_coll` callback.
//!
//! A generated kernel cannot call a framework collective, so the launch stub of a plan with
//! `hostcoll` steps runs kernel segments with HCCL calls in between; the simulation's HCCL
//! (`kernels/sim/hccl.h`) forwards each call here. Semantics are the runtime's
//! (`symsched_runtime::exec::hostcoll`): in place on the region, blocks by the ceil split, folds
//! in member order in the accumulator type. [`SimBackend`](super::fabric::SimBackend) runs them
//! with the runtime's own heap exchange over its fabric; the in-process launcher
//! ([`super::inproc`]) with [`Rendezvous`] between its threads.

use super::table::HeapView;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use symsched_plan::HostCollOp;
use symsched_runtime::exec::reduce::{reduce_raw, Operand};
use symsched_runtime::exec::{DType, ReduceOp};

/// One decoded `host_coll` call.
pub struct HostCall<'a> {
    pub op: HostCollOp,
    /// This rank's region, in place.
    pub data: &'a mut [u8],
    pub dtype: DType,
    pub reduce: ReduceOp,
    pub members: Vec<u32>,
    pub ordinal: u32,
}

/// A launcher's per-rank context behind the device table's `host_coll` callback: the
/// launchers differ only in how the members' bytes meet.
pub(crate) trait HostCollCtx: HeapView {
    /// Run one decoded host collective on this rank.
    fn run_host_coll(&self, call: &mut HostCall) -> Result<(), String>;
}

/// The device table's `host_coll` callback for a launcher whose context is a `C`.
///
/// # Safety
/// `ctx` must be the `C` the launcher put in the table, alive for the call; `data` must be
/// valid for `count` elements of `dtype` and not otherwise accessed during the call (the
/// simulated HCCL passes this rank's checked heap region); `dtype` and `reduce_op` must be
/// NUL-terminated strings; `members` must hold `n_members` ints.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn host_coll<C: HostCollCtx>(
    ctx: *mut c_void,
    op: i32,
    data: *mut c_void,
    count: u64,
    dtype: *const c_char,
    reduce_op: *const c_char,
    members: *const i32,
    n_members: i32,
    ordinal: i32,
) -> i32 {
    // SAFETY: see the function's contract.
    let c = unsafe { &*(ctx as *const C) };
    let res = || -> Result<(), String> {
        let name = |p: *const c_char| -> Result<String, String> {
            if p.is_null() {
                return Err("null name".into());
            }
            // SAFETY: the caller passes NUL-terminated strings.
            Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        let dtype = DType::parse(&name(dtype)?).map_err(|e| e.to_string())?;
        let reduce = ReduceOp::parse(&name(reduce_op)?).map_err(|e| e.to_string())?;
        let op = match op {
            0 => HostCollOp::Allreduce,
            1 => HostCollOp::Allgather,
            2 => HostCollOp::ReduceScatter,
            3 => HostCollOp::Broadcast,
            o => return Err(format!("unknown host collective code {o}")),
        };
        if n_members < 1 || members.is_null() || ordinal < 0 {
            return Err("no members".into());
        }
        // SAFETY: the caller passes n_members ints.
        let members: Vec<u32> = unsafe { std::slice::from_raw_parts(members, n_members as usize) }
            .iter()
            .map(|&m| m as u32)
            .collect();
        let len = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(dtype.size()))
            .ok_or("region too large")?;
        let data = if len == 0 {
            &mut [][..]
        } else {
            // SAFETY: the caller guarantees `len` valid, exclusively used bytes.
            unsafe { std::slice::from_raw_parts_mut(data as *mut u8, len) }
        };
        c.run_host_coll(&mut HostCall {
            op,
            data,
            dtype,
            reduce,
            members,
            ordinal: ordinal as u32,
        })
    };
    match res() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sim rank {}: host collective failed: {e}", c.me());
            1
        }
    }
}

/// Apply a host collective to `call.data` given every member's bytes before it (`all`, member
/// order); the same rules as the runtime's heap host collective.
pub fn apply(call: &mut HostCall, me: u32, all: &[u8]) -> Result<(), String> {
    let m = call.members.len();
    let idx = call.members.iter().position(|x| *x == me).ok_or_else(|| {
        format!(
            "rank {me} is not a member of host collective {}",
            call.ordinal
        )
    })?;
    let es = call.dtype.size();
    let len = call.data.len();
    let n = len / es;
    if all.len() != m * len {
        return Err("members passed regions of different lengths".into());
    }
    let block = n.div_ceil(m.max(1));
    let span = |i: usize| {
        let s = (i * block).min(n);
        (s, ((i + 1) * block).min(n) - s)
    };
    // `avg` folds as a sum here; the launch divides once at its end.
    let op = match call.reduce {
        ReduceOp::Avg => ReduceOp::Sum,
        o => o,
    };
    let acc = call.dtype.accumulator();
    let fold = |data: &mut [u8], start: usize, count: usize| -> Result<(), String> {
        let srcs: Vec<Operand> = (0..m)
            .map(|j| Operand {
                ptr: all[j * len + start * es..].as_ptr(),
                dtype: call.dtype,
            })
            .collect();
        // SAFETY: `all` holds m regions of `len` bytes; `data` is a distinct allocation.
        unsafe {
            reduce_raw(
                acc,
                op,
                data.as_mut_ptr().add(start * es),
                call.dtype,
                &srcs,
                count,
            )
        }
        .map_err(|e| e.to_string())
    };
    match call.op {
        HostCollOp::Allreduce => fold(call.data, 0, n)?,
        HostCollOp::ReduceScatter => {
            let (s, c) = span(idx);
            fold(call.data, s, c)?;
        }
        HostCollOp::Allgather => {
            for j in 0..m {
                let (s, c) = span(j);
                call.data[s * es..(s + c) * es]
                    .copy_from_slice(&all[j * len + s * es..j * len + (s + c) * es]);
            }
        }
        HostCollOp::Broadcast => call.data.copy_from_slice(&all[..len]),
    }
    Ok(())
}

/// In-process meeting point of the members of one host collective: each deposits a copy of its
/// region, waits for the others', and takes everything (so no member reads a region another is
/// already overwriting).
#[derive(Default)]
pub struct Rendezvous {
    slots: Mutex<HashMap<String, Slot>>,
    cv: Condvar,
}

struct Slot {
    parts: Vec<Option<Vec<u8>>>,
    taken: usize,
}

impl Rendezvous {
    /// Deposit `mine` as member `idx` of `m` under `key`; return all members' bytes in member
    /// order. Gives up at `deadline` or when `abort()` turns true.
    pub fn meet(
        &self,
        key: &str,
        idx: usize,
        m: usize,
        mine: &[u8],
        deadline: Instant,
        abort: &dyn Fn() -> bool,
    ) -> Result<Vec<u8>, String> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.entry(key.to_string()).or_insert_with(|| Slot {
            parts: vec![None; m],
            taken: 0,
        });
        if slot.parts.len() != m || idx >= m || slot.parts[idx].is_some() {
            return Err(format!("host collective `{key}`: inconsistent members"));
        }
        slot.parts[idx] = Some(mine.to_vec());
        self.cv.notify_all();
        loop {
            let slot = slots.get_mut(key).ok_or("rendezvous slot vanished")?;
            if slot.parts.iter().all(Option::is_some) {
                let all: Vec<u8> = slot.parts.iter().flatten().flatten().copied().collect();
                slot.taken += 1;
                if slot.taken == m {
                    slots.remove(key);
                }
                return Ok(all);
            }
            if abort() || Instant::now() > deadline {
                return Err(format!("host collective `{key}`: members did not arrive"));
            }
            let (g, _) = self
                .cv
                .wait_timeout(slots, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner());
            slots = g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn allreduce_and_allgather_follow_member_order_and_ceil_blocks() {
        let a = f32s(&[1.0, 2.0, 3.0]);
        let b = f32s(&[10.0, 20.0, 30.0]);
        let all: Vec<u8> = a.iter().chain(&b).copied().collect();
        let mut mine = b.clone();
        let mut call = HostCall {
            op: HostCollOp::Allreduce,
            data: &mut mine,
            dtype: DType::F32,
            reduce: ReduceOp::Sum,
            members: vec![4, 7],
            ordinal: 0,
        };
        apply(&mut call, 7, &all).unwrap();
        assert_eq!(mine, f32s(&[11.0, 22.0, 33.0]));
        // Blocks of ceil(3 / 2) = 2: member 0 owns [0, 2), member 1 owns [2, 3).
        let mut mine = b.clone();
        let mut call = HostCall {
            op: HostCollOp::Allgather,
            data: &mut mine,
            dtype: DType::F32,
            reduce: ReduceOp::Sum,
            members: vec![4, 7],
            ordinal: 0,
        };
        assert!(apply(&mut call, 5, &all).is_err(), "non-member");
        apply(&mut call, 7, &all).unwrap();
        assert_eq!(mine, f32s(&[1.0, 2.0, 30.0]));
    }

    #[test]
    fn rendezvous_hands_every_member_all_parts_and_times_out_alone() {
        let r = Rendezvous::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u8)
                .map(|i| {
                    let r = &r;
                    s.spawn(move || r.meet("k", i as usize, 3, &[i, i], deadline, &|| false))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        for g in got {
            assert_eq!(g, vec![0, 0, 1, 1, 2, 2]);
        }
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(r.meet("lonely", 0, 2, &[1], soon, &|| false).is_err());
    }
}
