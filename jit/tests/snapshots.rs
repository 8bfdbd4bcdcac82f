//! Snapshots of the generated LLVM IR (before optimisation) for every standard schedule at
//! P = 4, every rank, f32 sum, and bf16 on the wire for the schedules that have wire buffers,
//! under snapshots/llvm/. Read the `.snap.new` files (or `cargo insta review`) before
//! accepting a change. A schedule with channels has no launch-scope kernel (`JitError::Channels`
//! for every rank): its snapshot holds each rank's channel kernels, lowered in the steps scope.

use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_jit::{
    emit_llvm, kernel_channels, DType, ElemTypes, F16Lowering, JitError, KernelSpec, LowerOptions,
    ReduceOp,
};
use symsched_plan::ElemClass;

#[test]
fn llvm_ir_of_the_standard_library() {
    let lib = standard_library();
    let mut names: Vec<String> = lib.schedules().into_iter().map(|s| s.name).collect();
    names.sort();
    assert!(!names.is_empty());
    // Fixed options, so the snapshots do not depend on the host CPU.
    let opts = LowerOptions {
        f16: F16Lowering::Native,
        ..LowerOptions::default()
    };
    for name in &names {
        let c = compile(
            &lib,
            name,
            4,
            &example_params(name),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|d| panic!("{name}: {d:?}"));
        let plan = &c.plan;
        if plan.channel_count() > 1 {
            for rank in 0..plan.group_size {
                let spec = KernelSpec {
                    plan,
                    rank,
                    channel: 0,
                    types: ElemTypes::new(DType::F32, None).unwrap(),
                    op: ReduceOp::Sum,
                };
                let refused = emit_llvm(&spec, &opts);
                assert!(
                    matches!(refused, Err(JitError::Channels { channels: 2.., .. })),
                    "{name} rank {rank}: {refused:?}"
                );
            }
        }
        let mut variants = vec![("f32", ElemTypes::new(DType::F32, None).unwrap())];
        if plan.buffers.iter().any(|b| b.elem == ElemClass::Wire) {
            variants.push((
                "bf16wire",
                ElemTypes::new(DType::F32, Some(DType::Bf16)).unwrap(),
            ));
        }
        for (variant, types) in variants {
            let mut text = String::new();
            for rank in 0..plan.group_size {
                for channel in kernel_channels(plan, rank) {
                    let spec = KernelSpec {
                        plan,
                        rank,
                        channel,
                        types,
                        op: ReduceOp::Sum,
                    };
                    text.push_str(&if spec.multi_channel() {
                        format!("==== rank {rank} channel {channel} (steps)\n")
                    } else {
                        format!("==== rank {rank}\n")
                    });
                    text.push_str(
                        &emit_llvm(&spec, &opts.for_kernel(&spec))
                            .unwrap_or_else(|e| panic!("{name}: {e}")),
                    );
                }
            }
            insta::with_settings!({
                snapshot_path => "../../snapshots/llvm",
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(format!("{name}_p4_{variant}"), text);
            });
        }
    }
}
