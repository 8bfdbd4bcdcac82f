//! `auto`: which backend runs a launch, decided from what the plan says and the launch's sizes
//! and dtypes only.
//!
//! Every rank must make the same choice for the same launch (a rank that mixes backends still
//! runs the plan's signal protocol, but nothing tests it), so the rule may look only at what all
//! ranks agree on: the plan, the launch sizes (through [`Resolved::max_len`], the largest count
//! of each buffer over *all* ranks), the dtypes and the reduce op. Never at timings, load, or
//! this rank's own steps.
//!
//! **The rule** (measured by `cargo bench -p symsched-runtime --bench jit_backend`, 2 ranks,
//! f32 sum, one run at load average 1.5–1.8; the table is in `docs/llvm.md`, "Backend
//! choice"): the JIT runs a launch when
//!
//! - the plan has a reduce step on some rank ([`PlanTraits::reduces`]): that is where the
//!   JIT's fused passes do less work than the interpreter (reduce chains, casts and puts in one
//!   pass); plans without one (gathers, all-to-alls, broadcasts, send/recv) are plain moves
//!   both backends run at memory speed, and the interpreter's lower overhead per step wins at
//!   small sizes (JIT ÷ interpreter 0.98–1.37 below 256 KiB, 0.90–1.07 above);
//! - its largest role buffer holds at least [`JIT_MIN_BYTES`] ([`message_bytes`]): from
//!   256 KiB on, the reducing schedules measured JIT ÷ interpreter 0.70–1.02 at 256 KiB and
//!   64 MiB (mean 0.91 and 0.87), 0.95–1.11 at 4 MiB (mean 1.01); at 8 B the
//!   interpreter's overhead per launch is lower (mean 1.08, up to 1.22), at 4 KiB the two
//!   tie (mean 1.00) and the interpreter needs no compile;
//! - the dtypes and op are the measured ones ([`measured_types`]): f32 data, on the wire as
//!   itself or as bf16, reduced by `sum` or `avg` (`avg` runs the same steps; its division is
//!   the executor's, after either backend). Other dtypes and ops run on the interpreter, the
//!   reference, until a measurement says otherwise.
//!
//! Everything else runs on the interpreter. Channels do not enter the rule: both backends run a
//! multi-channel rank's channels on the same runner (a worker per further channel).
//!
//! [`Resolved::max_len`]: crate::exec::resolved::Resolved::max_len

use crate::exec::dtype::{DType, ElemTypes};
use crate::exec::reduce::ReduceOp;
use symsched_plan::{BufferRole, Op, Plan};

/// Smallest largest-role buffer, in bytes, at which `auto` runs a reducing plan on the JIT.
pub const JIT_MIN_BYTES: u64 = 256 << 10;

/// What the rule asks of a plan; the same on every rank (it reads every rank's steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanTraits {
    /// Some rank has a reduce step (where the interpreter's fusion starts too).
    pub reduces: bool,
}

impl PlanTraits {
    pub fn of(plan: &Plan) -> PlanTraits {
        PlanTraits {
            reduces: plan
                .ranks
                .iter()
                .flat_map(|r| &r.steps)
                .any(|s| matches!(s.op, Op::Reduce { .. })),
        }
    }
}

/// Bytes of the launch's largest role buffer on any rank (the benchmark's message size, as
/// nccl-tests count it), from `max_len`, the largest element count of each buffer over all
/// ranks ([`Resolved::max_len`](crate::exec::resolved::Resolved::max_len)).
pub fn message_bytes(plan: &Plan, max_len: &[u64], types: ElemTypes) -> u64 {
    plan.buffers
        .iter()
        .zip(max_len)
        .filter(|(b, _)| b.role != BufferRole::Scratch)
        .map(|(b, n)| n.saturating_mul(types.of(b.elem).size() as u64))
        .max()
        .unwrap_or(0)
}

/// Whether the benchmark behind the rule measured these dtypes and this op (see the module
/// docs).
pub fn measured_types(types: ElemTypes, op: ReduceOp) -> bool {
    types.data == DType::F32
        && matches!(types.wire, DType::F32 | DType::Bf16)
        && matches!(op, ReduceOp::Sum | ReduceOp::Avg)
}

/// The rule: whether `auto` runs a launch of a plan with `traits` and a largest role buffer of
/// `bytes` on the JIT.
pub fn prefers_jit(traits: PlanTraits, bytes: u64, types: ElemTypes, op: ReduceOp) -> bool {
    traits.reduces && bytes >= JIT_MIN_BYTES && measured_types(types, op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::harness::sizes_for;
    use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};

    fn f32() -> ElemTypes {
        ElemTypes::new(DType::F32, None).unwrap()
    }

    #[test]
    fn the_rule_follows_the_measurement() {
        let red = PlanTraits { reduces: true };
        let mov = PlanTraits { reduces: false };
        let sum = ReduceOp::Sum;
        // Reducing plans: the JIT from 256 KiB on, the interpreter below.
        assert!(prefers_jit(red, JIT_MIN_BYTES, f32(), sum));
        assert!(prefers_jit(red, 64 << 20, f32(), ReduceOp::Avg));
        assert!(!prefers_jit(red, JIT_MIN_BYTES - 1, f32(), sum));
        assert!(!prefers_jit(red, 8, f32(), sum));
        // Plain moves: the interpreter at every size.
        assert!(!prefers_jit(mov, 64 << 20, f32(), sum));
        // bf16 on the wire was measured, f16 / fp8 wires and other data types were not.
        let bf16_wire = ElemTypes::new(DType::F32, Some(DType::Bf16)).unwrap();
        assert!(prefers_jit(red, 1 << 20, bf16_wire, sum));
        for t in [
            ElemTypes::new(DType::F32, Some(DType::F16)).unwrap(),
            ElemTypes::new(DType::F32, Some(DType::F8E4M3)).unwrap(),
            ElemTypes::new(DType::Bf16, None).unwrap(),
            ElemTypes::new(DType::I32, None).unwrap(),
        ] {
            assert!(!prefers_jit(red, 64 << 20, t, sum), "{t:?}");
        }
        assert!(!prefers_jit(red, 64 << 20, f32(), ReduceOp::Max));
        assert!(!prefers_jit(red, 64 << 20, f32(), ReduceOp::Min));
    }

    /// Over the standard library at the benchmark's sizes: the message size is the benchmark's
    /// (the element count of the largest role times the dtype size), the same from every
    /// rank's point of view, and the choice is the JIT exactly for the reducing schedules from
    /// 256 KiB on.
    #[test]
    fn standard_schedules_at_the_benchmark_sizes() {
        let lib = standard_library();
        let mut seen_jit = 0;
        for s in lib.schedules() {
            let Ok(c) = compile(
                &lib,
                &s.name,
                2,
                &example_params(&s.name),
                &CompileOptions::default(),
            ) else {
                continue;
            };
            let plan = c.plan;
            let traits = PlanTraits::of(&plan);
            assert_eq!(traits.reduces, plan.collective.reduces(), "{}", s.name);
            for bytes in [8u64, 4096, 256 << 10, 4 << 20] {
                let sizes = sizes_for(&plan, bytes / 4, &[]);
                let max_len: Vec<u64> = plan
                    .buffers
                    .iter()
                    .map(|b| {
                        (0..plan.group_size)
                            .map(|r| b.total_len(r, &sizes).unwrap())
                            .max()
                            .unwrap_or(0)
                    })
                    .collect();
                let got = message_bytes(&plan, &max_len, f32());
                // The matmul collectives' largest role is `m × n` or `n × k`, not `n`, and
                // alltoallv's counts differ per peer.
                use symsched_plan::CollectiveKind as K;
                let exact = !matches!(
                    plan.collective,
                    K::AllgatherMatmul | K::MatmulReduceScatter | K::Alltoallv
                );
                if exact {
                    assert_eq!(got, bytes, "{} at {bytes} B", s.name);
                }
                let jit = prefers_jit(traits, got, f32(), ReduceOp::Sum);
                assert_eq!(jit, traits.reduces && got >= JIT_MIN_BYTES, "{}", s.name);
                seen_jit += jit as u32;
            }
        }
        assert!(seen_jit > 0, "some standard schedule runs on the JIT");
    }
}
