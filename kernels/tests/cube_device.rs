//! The Cube lowering against what the device demands beyond small tiles: GM row strides past
//! the 16-bit `Nd2NzParams::srcDValue` (k or n >= 65536, per-row Nd2Nz copies), output tiles
//! of several fractal rows (one Load2D per row), and the mixed kernel's cross-core flags
//! (AIC <-> AIV): every flag of a generated matmul kernel, deleted in turn, must be caught by
//! the simulation by name.

mod common;
use common::*;
use std::time::{Duration, Instant};
use symsched_compiler::pipeline::{compile, standard_library, CompileOptions};
use symsched_kernels::sim::heap::HeapLayout;
use symsched_kernels::sim::inproc::{self, RunConfig};
use symsched_kernels::sim_build::SimSources;
use symsched_kernels::{lower, DType, LowerOptions, ReduceOp};
use symsched_plan::{LaunchSizes, Plan};

const UB: u32 = 4096;

fn plan(name: &str, p: u32) -> Plan {
    compile(
        &standard_library(),
        name,
        p,
        &Default::default(),
        &CompileOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{name} P={p}: {e:?}"))
    .plan
}

/// Launch sizes with the matmul's `m`, `k`, `n` as given.
fn mkn(plan: &Plan, m: u64, k: u64, n: u64) -> LaunchSizes {
    let mut s = sizes_for(plan, 1000);
    s.vars.insert("m".into(), m);
    s.vars.insert("k".into(), k);
    s.vars.insert("n".into(), n);
    s
}

#[test]
fn strides_past_16_bits_and_several_fractal_rows_equal_the_interpreter() {
    let mut ran = vec![];
    // (m, k, n): n past 65535 (B and c rows, one Nd2Nz per B row) with a partial last
    // 16-column block (workspace path); k past 65535 (A rows; 513 f32 / 257 16-bit k blocks).
    // m > 16 everywhere: output tiles of two and three fractal rows.
    let shapes = [(24, 20, 65541), (33, 65600, 5)];
    for (name, d) in [
        ("allgather_matmul", DType::F32),
        ("allgather_matmul", DType::Bf16),
        ("matmul_reduce_scatter", DType::F32),
    ] {
        let plan = plan(name, 2);
        let o = opts(d, d, ReduceOp::Sum, UB);
        let k = build(&plan, &o);
        for (m, kk, n) in shapes {
            let t = Instant::now();
            compare_with_runtime_at(&k, &plan, &o, &mkn(&plan, m, kk, n), m + kk + n)
                .unwrap_or_else(|e| panic!("{name} {d} m={m} k={kk} n={n}: {e}"));
            ran.push(format!(
                "{name} {d} m={m} k={kk} n={n}: equal ({:.1} s)",
                t.elapsed().as_secs_f64()
            ));
        }
    }
    eprintln!("{}", ran.join("\n"));
}

/// Every distinct cross-core flag statement of the generated kernel source.
fn cross_core_statements(kernel: &str) -> Vec<String> {
    let mut v: Vec<String> = kernel
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("AscendC::CrossCoreSetFlag")
                || l.starts_with("AscendC::CrossCoreWaitFlag")
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn every_deleted_cross_core_flag_is_caught() {
    // blockDim 2: two AI Cores per rank, so the AIV barrier (mode 0) and the AIC barrier
    // (mode 0) matter as much as the AIV <-> AIC hand-overs (mode 2).
    let mut seen = vec![];
    for name in ["allgather_matmul", "matmul_reduce_scatter"] {
        let plan = plan(name, 2);
        let o = LowerOptions {
            block_dim: 2,
            ..opts(DType::F32, DType::F32, ReduceOp::Sum, UB)
        };
        // The unbroken kernel runs clean and equals the interpreter at this blockDim.
        let whole = build(&plan, &o);
        compare_with_runtime(&whole, &plan, &o, 1000).unwrap_or_else(|e| panic!("{e}"));
        let src = SimSources::from(&lower(&plan, &o).unwrap());
        let stmts = cross_core_statements(&src.kernel);
        // AIV: ready (set), done (wait), AIV barrier (set, wait); AIC: ready (wait), AIC
        // barrier (set, wait), done (set).
        assert_eq!(stmts.len(), 8, "{name}: {stmts:#?}");
        for s in &stmts {
            let k = build_edited(&plan, &o, |x| &mut x.kernel, s, "/* deleted */");
            let sizes = sizes_for(&plan, 1000);
            let layout = HeapLayout::new(&plan, o.dtype, o.wire, &sizes).unwrap();
            let init = fresh_states(&plan, &layout, 1);
            let cfg = RunConfig {
                timeout: Duration::from_secs(60),
                ..RunConfig::default()
            };
            let t = Instant::now();
            let e = inproc::run(&k, &plan, &layout, &sizes, &init, &cfg)
                .err()
                .unwrap_or_else(|| panic!("{name}: deleting `{s}` went unnoticed"));
            let status = e.sim_status().unwrap_or("").to_string();
            assert!(
                [
                    "SYMSCHED_SIM_E_EVENT_MISUSE",
                    "SYMSCHED_SIM_E_WAIT_FAILED",
                    "SYMSCHED_SIM_E_PIPE_RACE",
                    // Without the AIV barrier the AIC's Nd2Nz copy may read a peer's put into
                    // the gathered operand before that put is known complete.
                    "SYMSCHED_SIM_E_GM_RACE"
                ]
                .contains(&status.as_str()),
                "{name}: deleting `{s}`: {e}"
            );
            // A deadlock is seen when every core is stuck, not at the 120 s wait limit.
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{name}: `{s}` took {:?}",
                t.elapsed()
            );
            seen.push(format!("{name}: without `{s}`: {e}"));
        }
    }
    eprintln!("{}", seen.join("\n"));
}

#[test]
fn a_cross_core_flag_nobody_waits_for_is_caught_at_kernel_end() {
    // The AIC also sets flag 5 of its AIV, which never waits on it: the count is left over when
    // the kernel returns (the pages: CrossCoreSetFlag and CrossCoreWaitFlag come in pairs).
    // (Setting kFlagDone twice instead is a race: the next matmul's wait takes the extra count.)
    let plan = plan("allgather_matmul", 2);
    let o = opts(DType::F32, DType::F32, ReduceOp::Sum, UB);
    let set = "AscendC::CrossCoreSetFlag<0x2, PIPE_FIX>(kFlagDone);";
    let extra = format!("{set} AscendC::CrossCoreSetFlag<0x2, PIPE_FIX>(5);");
    let k = build_edited(&plan, &o, |x| &mut x.kernel, set, &extra);
    let e = run_fresh(&k, &plan, &o, 37, Duration::from_secs(60)).unwrap_err();
    assert_eq!(e.sim_status(), Some("SYMSCHED_SIM_E_EVENT_MISUSE"), "{e}");
    assert!(e.to_string().contains("never waited for"), "{e}");
}

#[test]
fn block_dim_counts_ai_cores_for_matmul_kernels_and_vector_cores_otherwise() {
    let lowered = |name: &str, block_dim: u32| {
        let o = LowerOptions {
            block_dim,
            ..LowerOptions::default()
        };
        lower(&plan(name, 2), &o)
    };
    // A matmul kernel is KERNEL_TYPE_MIX_AIC_1_2: blockDim AI Cores of one AIC and two AIVs,
    // at most 8 (24 simulated cores); a vector-only kernel takes up to 16 vector cores.
    for (name, max, kernel_type, aivs_per_core, counted) in [
        (
            "allgather_matmul",
            8,
            "KERNEL_TYPE_MIX_AIC_1_2",
            2,
            "AI Cores",
        ),
        (
            "allreduce_ring",
            16,
            "KERNEL_TYPE_AIV_ONLY",
            1,
            "vector cores",
        ),
    ] {
        let k = lowered(name, max).unwrap_or_else(|e| panic!("{name} at {max}: {e}"));
        assert!(k.kernel.contains(&format!("kKernelType = {kernel_type};")));
        assert!(k
            .kernel
            .contains(&format!("kAivPerCore = {aivs_per_core};")));
        let err = lowered(name, max + 1)
            .expect_err("one past the limit")
            .to_string();
        assert!(err.contains(&format!("1 to {max} {counted}")), "{err}");
    }
}

#[test]
fn the_lowering_and_the_simulation_agree_on_the_cores_per_rank() {
    let header = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sim/symsched_sim_pipes.h"),
    )
    .expect("the header reads");
    let line = format!(
        "constexpr uint32_t kMaxCores = {};",
        symsched_kernels::lower::SIM_MAX_CORES
    );
    assert!(header.contains(&line), "{line} is not in the header");
}
