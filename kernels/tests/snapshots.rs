//! Snapshots of the generated Ascend C for every standard schedule at P = 4, f32 and bf16-wire,
//! under snapshots/ascendc/. Schedules the lowering refuses snapshot their error instead.

use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};

#[test]
fn ascendc_sources_of_the_standard_library() {
    let lib = standard_library();
    let mut names: Vec<String> = lib.schedules().into_iter().map(|s| s.name).collect();
    names.sort();
    assert!(!names.is_empty());
    for name in &names {
        let c = compile(
            &lib,
            name,
            4,
            &example_params(name),
            &CompileOptions::default(),
        )
        .unwrap_or_else(|d| panic!("{name}: {d:?}"));
        for (variant, wire) in [("f32", DType::F32), ("bf16wire", DType::Bf16)] {
            let opts = LowerOptions {
                dtype: DType::F32,
                wire,
                op: ReduceOp::Sum,
                ..LowerOptions::default()
            };
            let text = match lower(&c.plan, &opts) {
                Ok(l) => l
                    .files()
                    .into_iter()
                    .map(|(f, t)| format!("==== {f}\n{t}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                Err(e) => format!("lowering refused: {e}\n"),
            };
            insta::with_settings!({
                snapshot_path => "../../snapshots/ascendc",
                prepend_module_to_snapshot => false,
                omit_expression => true,
            }, {
                insta::assert_snapshot!(format!("{name}_p4_{variant}"), text);
            });
        }
    }
}
