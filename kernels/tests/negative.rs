//! Hand-broken generated kernels: the simulation must stop each with its named error.

mod common;
use common::*;
use symsched_kernels::{lower, DType, KernelError, LowerOptions, ReduceOp};
use symsched_plan::{Op, Plan};

fn o() -> LowerOptions {
    opts(DType::F32, DType::F32, ReduceOp::Sum, 4096)
}

/// allgather with the signal split from the put: a plain nbi put, then a separate signal, so
/// the lowering must put `aclshmem_quiet` between them.
fn put_then_signal(p: u32) -> Plan {
    let mut plan = allgather_direct(p);
    for r in &mut plan.ranks {
        let mut steps = vec![];
        for s in r.steps.drain(..) {
            if let Op::Put {
                src,
                dst,
                peer,
                signal: Some(u),
            } = s.op
            {
                steps.push(symsched_plan::Step {
                    op: Op::Put {
                        src,
                        dst,
                        peer,
                        signal: None,
                    },
                    ..s.clone()
                });
                steps.push(symsched_plan::Step {
                    op: Op::Signal { update: u },
                    ..s
                });
            } else {
                steps.push(s);
            }
        }
        for (i, s) in steps.iter_mut().enumerate() {
            s.id = i as u32;
        }
        r.steps = steps;
    }
    plan.check_consistency().unwrap();
    plan
}

/// Build `plan`'s kernel with `from` replaced by `to` in its source, run it, return the error.
fn run_broken(plan: &Plan, from: &str, to: &str) -> KernelError {
    let k = build_edited(plan, &o(), |s| &mut s.kernel, from, to);
    run_fresh(&k, plan, &o(), 100, std::time::Duration::from_secs(20))
        .expect_err("the broken kernel must fail")
}

fn assert_status(e: &KernelError, name: &str) {
    assert_eq!(e.sim_status(), Some(name), "{e}");
}

#[test]
fn the_unbroken_put_then_signal_kernel_runs() {
    let plan = put_then_signal(3);
    let k = build(&plan, &o());
    compare(&k, &plan, &o(), 100, 0..2).unwrap();
    let l = lower(&plan, &o()).unwrap();
    assert!(
        l.table_data.rows.iter().any(|r| r.words[1] & 1 == 1),
        "the lowering must mark a quiet"
    );
}

#[test]
fn remote_datacopy_is_caught() {
    let e = run_broken(
        &allgather_direct(2),
        "aclshmem_putmem_signal_nbi(to, from, bytes, Sig(w[9]), SignalValue(w), w[10], pe);",
        "CopyBytes(static_cast<GM_ADDR>(aclshmem_ptr(to, pe)), from, bytes); aclshmemx_signal_op(Sig(w[9]), SignalValue(w), w[10], pe);",
    );
    assert_status(&e, "SYMSCHED_SIM_E_REMOTE_DATACOPY");
}

#[test]
fn signal_without_quiet_is_caught() {
    let e = run_broken(
        &put_then_signal(2),
        "if (w[1] & kQuietBefore) {",
        "if (false) {",
    );
    assert_status(&e, "SYMSCHED_SIM_E_SIGNAL_BEFORE_QUIET");
}

#[test]
fn ub_overflow_is_caught() {
    let e = run_broken(
        &allgather_direct(2),
        "constexpr uint32_t kUbBytes = 4096;",
        "constexpr uint32_t kUbBytes = 1048576;",
    );
    assert_status(&e, "SYMSCHED_SIM_E_UB_OVERFLOW");
}

#[test]
fn unaligned_datacopy_is_caught() {
    // Dropping the DataCopyPad fallback leaves DataCopy with a ragged tail.
    let e = run_broken(
        &allreduce_rs_ag(2, false),
        "if ((len * sizeof(T)) % 32 == 0) {",
        "if (true) {",
    );
    assert_status(&e, "SYMSCHED_SIM_E_UNALIGNED");
}
