use symsched_compiler::pipeline::{
    compile, example_params, standard_library, CompileOptions as PO,
};
use symsched_jit::compile::{compile_object, CompileOptions, HostTarget, OptLevel};
use symsched_jit::{DType, ElemTypes, KernelSpec, ReduceOp};
fn cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let lib = standard_library();
    let p: u32 = a[2].parse().unwrap();
    let c = compile(&lib, &a[1], p, &example_params(&a[1]), &PO::default()).unwrap();
    for opt in [OptLevel::O2, OptLevel::O3] {
        let opts = CompileOptions {
            opt,
            ..Default::default()
        };
        let t = HostTarget::of(&opts).unwrap();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let spec = KernelSpec {
                plan: &c.plan,
                rank: 1,
                types: ElemTypes::new(DType::F32, a.get(3).map(|w| DType::parse(w).unwrap()))
                    .unwrap(),
                op: ReduceOp::Sum,
            };
            let c0 = cpu();
            let o = compile_object(&spec, &opts, &t, "k").unwrap();
            let c1 = cpu();
            best = best.min(c1 - c0);
            let _ = o;
        }
        println!("{} P={p} {:?}: best thread CPU {:.1} ms", a[1], opt, best);
    }
}
