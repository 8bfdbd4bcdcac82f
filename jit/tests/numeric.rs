//! Conversions bit for bit: a one-rank plan that encodes data into the wire type, decodes every
//! wire code back (as a cast and as a one-operand reduce through the accumulator), run for every
//! float data × wire pair over every 16- and 8-bit code and a dense sample of f32 and f64 bit
//! patterns (ties, sticky bits, NaN payloads, infinities, subnormals), against the format
//! crates; once with hardware f16 conversions and once with the integer emulation.

mod common;

use common::reference::{simulate, Memory};
use common::{first_difference, new_signals, run_jit, Harness, Launch};
use symsched_jit::cache::KernelCache;
use symsched_jit::compile::CompileOptions;
use symsched_jit::{DType, ElemTypes, ReduceOp};
use symsched_plan::*;

fn region(buffer: u32) -> Region {
    Region {
        buffer,
        first: 0,
        count: 1,
    }
}

/// `enc = cast(src_data)`, `dec = cast(src_wire)`, `via_acc = reduce(src_wire)` on one rank.
fn conversion_plan() -> Plan {
    let buf = |name: &str, role, elem| BufferDecl {
        name: name.into(),
        role,
        chunks: 1,
        extent: Extent::Split {
            total: SizeExpr::var("n"),
        },
        elem,
    };
    let step = |id, op| Step {
        id,
        span: (0, 0),
        op,
        channel: 0,
    };
    Plan {
        schema_version: PLAN_SCHEMA_VERSION,
        schedule: "conversions".into(),
        collective: CollectiveKind::Allgather,
        group_size: 1,
        params: Default::default(),
        hierarchy: None,
        size_vars: vec![SizeVar {
            name: "n".into(),
            meaning: "elements".into(),
        }],
        buffers: vec![
            buf("src_data", BufferRole::Input, ElemClass::Data),
            buf("src_wire", BufferRole::Input, ElemClass::Wire),
            buf("enc", BufferRole::Output, ElemClass::Wire),
            buf("dec", BufferRole::Output, ElemClass::Data),
            buf("via_acc", BufferRole::Output, ElemClass::Data),
        ],
        signals: vec![],
        ranks: vec![RankProgram {
            rank: 0,
            steps: vec![
                step(
                    0,
                    Op::Cast {
                        src: region(0),
                        dst: region(2),
                    },
                ),
                step(
                    1,
                    Op::Cast {
                        src: region(1),
                        dst: region(3),
                    },
                ),
                step(
                    2,
                    Op::Reduce {
                        dst: region(4),
                        srcs: vec![region(1)],
                    },
                ),
            ],
            entry_signals: vec![],
            exit_signals: vec![],
        }],
        duals: vec![],
        source_hash: "0".repeat(64),
        folds: Default::default(),
        declared: None,
    }
}

/// Bit patterns of `d` that decide rounding and specials.
fn sample(d: DType) -> Vec<u8> {
    match d {
        DType::F16 | DType::Bf16 => (0..=u16::MAX).flat_map(|c| c.to_le_bytes()).collect(),
        DType::F8E4M3 | DType::F8E5M2 => (0..=255u8).collect(),
        DType::F32 => {
            let mut rng = common::Rng::new(5);
            let mut v = Vec::new();
            for hi in 0..=0xffffu32 {
                for lo in [
                    0u32, 1, 0x0fff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001, 0xffff,
                ] {
                    v.extend((hi << 16 | lo).to_le_bytes());
                }
                v.extend((hi << 16 | (rng.next() as u32 & 0xffff)).to_le_bytes());
            }
            v
        }
        DType::F64 => {
            let mut rng = common::Rng::new(9);
            let mut v = Vec::new();
            // Every top-16-bit prefix (sign, exponent, top mantissa bits) with low halves that
            // sit on, just off and far from the ties of f32, f16, bf16 and fp8.
            for hi in 0..=0xffffu64 {
                for lo in [
                    0u64,
                    1,
                    1 << 28,
                    (1 << 28) + 1,
                    (1 << 28) - 1,
                    1 << 47,
                    (1 << 47) + 1,
                    rng.next() & ((1 << 48) - 1),
                ] {
                    v.extend((hi << 48 | lo).to_le_bytes());
                }
            }
            v
        }
        _ => unreachable!("float types only"),
    }
}

fn run(c: &KernelCache, h: &Harness, data: DType, wire: DType) -> Result<(), String> {
    let plan = conversion_plan();
    let types = ElemTypes::new(data, Some(wire)).expect("float pair");
    let (sd, sw) = (sample(data), sample(wire));
    let n = (sd.len() / data.size()).max(sw.len() / wire.size());
    let cyc = |s: &[u8], w: usize| -> Vec<u8> {
        s.chunks(w).cycle().take(n).flatten().copied().collect()
    };
    let sizes = LaunchSizes {
        vars: [("n".to_string(), n as u64)].into_iter().collect(),
        counts: None,
    };
    let mut want = Memory::new(&plan, types, &sizes);
    want.bufs[0][0] = cyc(&sd, data.size());
    want.bufs[0][1] = cyc(&sw, wire.size());
    let mut got = want.clone();
    let mut sig = vec![vec![]; 1];
    simulate(&plan, types, ReduceOp::Sum, &sizes, &mut want, &mut sig, 0);
    let l = Launch {
        plan: &plan,
        types,
        op: ReduceOp::Sum,
        sizes: &sizes,
    };
    run_jit(c, h, &l, &mut got, &new_signals(&plan), 0..1).map_err(|f| format!("{f:?}"))?;
    match first_difference(&plan, types, &want, &got) {
        None => Ok(()),
        Some(d) => Err(format!("{data} / {wire}: {d}")),
    }
}

fn all_pairs(opts: CompileOptions) {
    let c = KernelCache::new(None, opts.clone()).expect("target");
    let h = Harness {
        compile: opts,
        ..Default::default()
    };
    let floats = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::Bf16,
        DType::F8E4M3,
        DType::F8E5M2,
    ];
    let mut failures = Vec::new();
    for data in [DType::F32, DType::F64, DType::F16, DType::Bf16] {
        for wire in floats {
            if wire != data {
                if let Err(e) = run(&c, &h, data, wire) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn conversions_match_the_format_crates() {
    all_pairs(CompileOptions::default());
}

#[test]
fn emulated_f16_conversions_match_too() {
    let host = symsched_jit::compile::HostTarget::of(&CompileOptions::default()).expect("host");
    if !host.triple.starts_with("x86_64") {
        return;
    }
    let opts = CompileOptions {
        features: Some(format!("{},-f16c", host.features)),
        ..Default::default()
    };
    let t = symsched_jit::compile::HostTarget::of(&opts).expect("target");
    assert_eq!(t.f16(), symsched_jit::F16Lowering::Emulated);
    all_pairs(opts);
}
