//! The generated kernel's scalar fp8 codec (`SymEncodeWire` / `SymWireToHalfBits`, used on
//! Atlas A2 where the vector unit has no fp8 type) against the runtime's conversions, which
//! equal the `float8` crate: encode over a dense sample of every f32 bit pattern (all
//! exponents, subnormals, ties, saturation, infinities, NaN payloads), decode over all 256 codes.

mod common;
use common::*;
use half::f16;
use std::process::Command;
use symsched_kernels::sim_build::SIM_HEADERS;
use symsched_kernels::{lower, DType, ReduceOp};
use symsched_runtime::exec::dtype as rt;

type EncodeFn = unsafe extern "C" fn(*const f32, *mut u8, u64);
type DecodeFn = unsafe extern "C" fn(*mut u16);

fn check(wire: DType, rt_wire: rt::DType) {
    let plan = standard_plans(2)
        .into_iter()
        .find(|p| p.schedule == "allreduce_two_shot_wire")
        .unwrap();
    let l = lower(&plan, &opts(DType::F32, wire, ReduceOp::Sum, 4096)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (n, text) in SIM_HEADERS {
        std::fs::write(dir.path().join(n), text).unwrap();
    }
    std::fs::write(dir.path().join("k_kernel.cpp"), &l.kernel).unwrap();
    let driver = format!(
        "#include \"k_kernel.cpp\"\n\
         extern \"C\" void k2_encode(const float *in, uint8_t *out, uint64_t n) {{\n\
             for (uint64_t i = 0; i < n; ++i) out[i] = {ns}::SymEncodeWire(in[i]);\n\
         }}\n\
         extern \"C\" void k2_decode(uint16_t *out) {{\n\
             for (uint32_t b = 0; b < 256; ++b) out[b] = {ns}::SymWireToHalfBits(static_cast<uint8_t>(b));\n\
         }}\n",
        ns = format!("{}_ns", l.name)
    );
    let src = dir.path().join("driver.cpp");
    std::fs::write(&src, driver).unwrap();
    let so = dir.path().join("driver.so");
    let out = Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
        .args([
            "-std=c++17",
            "-O1",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            "-pthread",
            "-I",
        ])
        .arg(dir.path())
        .arg(&src)
        .arg("-o")
        .arg(&so)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: the library was just built from the driver above.
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let (encode, decode) = unsafe {
        (
            *lib.get::<EncodeFn>(b"k2_encode\0").unwrap(),
            *lib.get::<DecodeFn>(b"k2_decode\0").unwrap(),
        )
    };

    // Every 251st bit pattern (a prime stride: ~17M values over every sign and exponent),
    // plus the neighbourhood of every fp8 value, midpoint (ties) and their doubles, plus specials.
    let mut xs: Vec<f32> = (0..=u32::MAX / 251)
        .map(|i| f32::from_bits(i * 251))
        .collect();
    for code in 0..=255u8 {
        let v = rt::fp8_to_f32(rt_wire, code);
        let next = rt::fp8_to_f32(rt_wire, code.wrapping_add(1));
        let mid = (v + next) / 2.0;
        for b in [v, mid, v * 2.0, v / 2.0] {
            for d in -3i32..=3 {
                xs.push(f32::from_bits(b.to_bits().wrapping_add_signed(d)));
            }
        }
    }
    xs.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN,
    ]);
    let mut got = vec![0u8; xs.len()];
    // SAFETY: both buffers hold xs.len() elements.
    unsafe { encode(xs.as_ptr(), got.as_mut_ptr(), xs.len() as u64) };
    let mut bad = 0;
    for (x, g) in xs.iter().zip(&got) {
        let want = rt::f32_to_fp8(rt_wire, *x);
        if *g != want {
            if bad < 10 {
                eprintln!(
                    "{wire}: encode({x:e} = {:#010x}) = {g:#04x}, runtime {want:#04x}",
                    x.to_bits()
                );
            }
            bad += 1;
        }
    }
    assert_eq!(bad, 0, "{wire}: {bad} of {} encodes differ", xs.len());

    let mut halves = [0u16; 256];
    // SAFETY: 256 elements.
    unsafe { decode(halves.as_mut_ptr()) };
    for code in 0..=255u8 {
        // The kernel widens these f16 bits with the vector Cast half -> float (exact).
        let got = f16::from_bits(halves[code as usize]).to_f32();
        let want = rt::fp8_to_f32(rt_wire, code);
        assert_eq!(got.to_bits(), want.to_bits(), "{wire}: decode({code:#04x})");
    }
}

#[test]
fn e4m3_codec_equals_the_runtime() {
    check(DType::E4m3, rt::DType::F8E4M3);
}

#[test]
fn e5m2_codec_equals_the_runtime() {
    check(DType::E5m2, rt::DType::F8E5M2);
}
