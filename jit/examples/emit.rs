use symsched_compiler::pipeline::{compile, example_params, standard_library, CompileOptions};
use symsched_jit::{emit_llvm, DType, ElemTypes, KernelSpec, LowerOptions, ReduceOp};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let lib = standard_library();
    let p: u32 = a[2].parse().unwrap();
    let c = compile(
        &lib,
        &a[1],
        p,
        &example_params(&a[1]),
        &CompileOptions::default(),
    )
    .unwrap();
    let rank: u32 = a[3].parse().unwrap();
    let wire = a.get(4).map(|w| DType::parse(w).unwrap());
    let spec = KernelSpec {
        plan: &c.plan,
        rank,
        types: ElemTypes::new(DType::F32, wire).unwrap(),
        op: ReduceOp::Sum,
    };
    print!("{}", emit_llvm(&spec, &LowerOptions::default()).unwrap());
}
