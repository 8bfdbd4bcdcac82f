// cube.h — host simulation of the Ascend C Cube-unit subset symsched's matmul lowering emits,
// with the fractal layouts the Atlas A2 buffers hold ("矩阵计算分形介绍 / 关键分形格式详解"):
//
//   L1 (A1/B1)  Nz: fractals of 16 rows x C0 (C0 = 32 bytes / element size), column blocks of
//               `dstNzC0Stride` rows apart, rows 32 bytes apart; what DataCopy(Nd2NzParams)
//               writes from ND (row-major) GM.
//   L0A (A2)    Zz: an (M, K) matrix as M1 x K1 fractals in row-major order, each 16 x K0
//               row-major: element (i, t) at ((i/16)·K1 + t/K0)·512 B + (i%16)·K0 + t%K0.
//   L0B (B2)    Zn: a (K, N) matrix as K1 x N1 fractals in row-major order, each stored
//               column-major as 16 (n) x K0 (k): element (t, j) at ((t/K0)·N1 + j/16)·512 B +
//               (j%16)·K0 + t%K0.
//   L0C (CO1)   Nz of f32 16 x 16 fractals: element (i, j) at ((j/16)·M1 + i/16)·1 KiB +
//               (i%16)·16 + j%16.
//
// LoadData (2-D) moves 512-byte fractals as its pseudo-code (load2d.py of the CANN samples)
// does: iteration r copies fractal startIndex + r·srcStride to (dstGap + 1)·r, transposing each
// 16 x 16 fractal when ifTranspose (b16 only). LoadDataWithTranspose transposes square blocks
// (b16: one 16 x 16 fractal; b32: two consecutive 16 x 8 fractals as one 16 x 16 square, split
// into two 16 x 8 fractals dstFracGap apart). Mmad reads Zz x Zn into Nz; the invalid (padding)
// part of partial fractals is ignored, as documented. Fixpipe NZ2ND writes 16-element blocks of
// each row (nSize must be a multiple of 16 on the V220 path).
//
// Every call is an instruction of its engine (MTE2: GM -> L1, MTE1: L1 -> L0A/L0B, M: Mmad,
// FIX: Fixpipe) and must run on a Cube core (AIC). Numerics: Mmad adds, per output element, the
// products in ascending k, each product and each partial sum rounded to f32 (no fused
// multiply-add), continuing from CO1 unless `cmatrixInitVal`: the runtime's matmul contract
// (runtime/src/exec/matmul.rs), not the hardware's k-block summation order (docs/ascendc.md).
#ifndef SYMSCHED_SIM_CUBE_H
#define SYMSCHED_SIM_CUBE_H

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

// Part of kernel_operator.h, which includes this file at its end (as CANN declares the Cube
// subset through kernel_operator.h): everything it uses is declared there already.
#ifndef SYMSCHED_SIM_KERNEL_OPERATOR_H
#error "include kernel_operator.h, not cube.h"
#endif

namespace AscendC {

/// GM (ND, row-major) -> A1/B1 (NZ) conversion parameters (element units unless noted).
struct Nd2NzParams {
    uint16_t ndNum = 1;
    uint16_t nValue = 0;
    uint16_t dValue = 0;
    uint16_t srcNdMatrixStride = 0;
    uint16_t srcDValue = 0;
    uint16_t dstNzC0Stride = 0;   // units of 32 bytes (= rows of a column block)
    uint16_t dstNzNStride = 1;    // units of 32 bytes
    uint16_t dstNzMatrixStride = 0;
};

/// Load2D parameters: `repeatTimes` 512-byte fractals.
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint8_t sid = 0;
    uint16_t dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
};

/// LoadDataWithTranspose parameters (LoadData2dTransposeParams).
struct LoadData2dTransposeParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;   // units of one square block
    uint16_t dstGap = 0;      // units of 512 bytes
    uint16_t dstFracGap = 0;  // units of 512 bytes (b32/b8/b4 only)
    uint8_t addrMode = 0;
};

/// Mmad parameters (m, n, k in elements, each in [0, 4095]; any 0 is a NOP).
struct MmadParams {
    uint16_t m = 0;
    uint16_t n = 0;
    uint16_t k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false;
    bool enWinogradA = false;
    bool enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixInitVal = true;
    bool cmatrixSource = false;
};

/// Fixpipe quantization modes (only the ones the lowering uses are simulated).
enum QuantMode_t { NoQuant = 0, F322F16 = 1, F322BF16 = 2 };

/// CO1 -> GM parameters (Atlas A2: FixpipeParamsV220).
struct FixpipeParamsV220 {
    uint16_t nSize = 0;
    uint16_t mSize = 0;
    uint16_t srcStride = 0;   // units of C0_SIZE (16 f32): rows of a column block
    uint32_t dstStride = 0;   // NZ2ND: elements of a destination row
    QuantMode_t quantPre = NoQuant;
    uint64_t deqScalar = 0;
    uint16_t ndNum = 1;
    uint16_t srcNdStride = 0;
    uint16_t dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
};

enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
    CO2Layout format;
};
constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};

namespace cube {

template <typename T>
void need_pos(const LocalTensor<T> &t, TPosition want, TPosition alt, const char *what, const char *operand) {
    TPosition got = t.position();
    if (got != want && got != alt) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_POSITION, std::string(what) + ": " + operand + " is in " +
                                                       detail::position_name(got) + ", the device requires " +
                                                       detail::position_name(want) +
                                                       (alt != want ? std::string(" or ") + detail::position_name(alt) : ""));
    }
}

/// Like LocalTensor::need, but a Cube-side overrun is reported as an L1/L0 overflow.
template <typename T>
void need_elems(const LocalTensor<T> &t, uint64_t count, const char *what) {
    if (t.GetPhyAddr() == nullptr) {
        symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(what) + " on an unallocated LocalTensor");
    }
    if (count > t.GetSize()) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW, std::string(what) + " needs " + std::to_string(count) +
                                                       " elements of a Cube tensor of " + std::to_string(t.GetSize()));
    }
}

inline void aligned(const void *p, uint32_t bytes, const char *what, const char *operand) {
    if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNALIGNED, std::string(what) + ": " + operand + " address not " +
                                                   std::to_string(bytes) + "-byte aligned");
    }
}

[[noreturn]] inline void range(const char *what, const std::string &detail) {
    symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW, std::string(what) + ": " + detail + " outside its documented range");
}

inline uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

template <typename T>
float widen(const T &v) {
    if constexpr (std::is_same<T, float>::value) {
        return v;
    } else if constexpr (std::is_same<T, half>::value) {
        return static_cast<float>(v);
    } else {
        return detail::bf16_widen(v.bits);
    }
}

}  // namespace cube

/// GM (ND) -> A1/B1 (NZ). Row r, column c of ND matrix i goes to
/// i·dstNzMatrixStride + (c/C0)·dstNzC0Stride·C0 + r·dstNzNStride·C0 + c%C0; the last column
/// block of each row is zero-padded to 32 bytes; rows past nValue are not written.
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const Nd2NzParams &p,
              uint32_t line = __builtin_LINE()) {
    const char *what = "DataCopy (Nd2Nz)";
    symsim::need_core(symsim::CoreType::kAic, what);
    cube::need_pos(dst, TPosition::A1, TPosition::B1, what, "the destination");
    if (p.ndNum > 4095 || p.nValue > 16384 || p.dstNzC0Stride < 1 || p.dstNzC0Stride > 16384 || p.dstNzNStride < 1 ||
        p.dstNzNStride > 16384 || p.dstNzMatrixStride > 16384 || p.srcDValue < 1) {
        cube::range(what, "a parameter (ndNum " + std::to_string(p.ndNum) + ", nValue " + std::to_string(p.nValue) +
                              ", srcDValue " + std::to_string(p.srcDValue) + ", dstNzC0Stride " +
                              std::to_string(p.dstNzC0Stride) + ", dstNzNStride " + std::to_string(p.dstNzNStride) +
                              ", dstNzMatrixStride " + std::to_string(p.dstNzMatrixStride) + ")");
    }
    if (p.ndNum == 0 || p.nValue == 0 || p.dValue == 0) {
        return;  // documented NOP
    }
    if (p.srcDValue < p.dValue) {
        cube::range(what, "srcDValue " + std::to_string(p.srcDValue) + " below dValue " + std::to_string(p.dValue) +
                              " (rows would overlap)");
    }
    cube::aligned(dst.GetPhyAddr(), 32, what, "the L1 destination");
    constexpr uint32_t C0 = 32 / sizeof(T);
    const uint32_t blocks = cube::ceil_div(p.dValue, C0);
    uint64_t last = static_cast<uint64_t>(p.ndNum - 1) * p.dstNzMatrixStride +
                    static_cast<uint64_t>(blocks - 1) * p.dstNzC0Stride * C0 +
                    static_cast<uint64_t>(p.nValue - 1) * p.dstNzNStride * C0 + C0;
    cube::need_elems(dst, last, what);
    const T *s0 = src.GetPhyAddr();
    for (uint32_t i = 0; i < p.ndNum; ++i) {
        for (uint32_t r = 0; r < p.nValue; ++r) {
            symsim::check_local_gm(s0 + static_cast<uint64_t>(i) * p.srcNdMatrixStride + static_cast<uint64_t>(r) * p.srcDValue,
                                   static_cast<uint64_t>(p.dValue) * sizeof(T), what);
        }
    }
    T *d0 = dst.GetPhyAddr();
    Nd2NzParams q = p;
    symsim::issue(symsim::kMte2, what, line, [=]() {
        for (uint32_t i = 0; i < q.ndNum; ++i) {
            for (uint32_t r = 0; r < q.nValue; ++r) {
                const T *row = s0 + static_cast<uint64_t>(i) * q.srcNdMatrixStride + static_cast<uint64_t>(r) * q.srcDValue;
                symsim::touch(row, static_cast<uint64_t>(q.dValue) * sizeof(T), false);
                for (uint32_t b = 0; b < blocks; ++b) {
                    T *out = d0 + static_cast<uint64_t>(i) * q.dstNzMatrixStride +
                             static_cast<uint64_t>(b) * q.dstNzC0Stride * C0 + static_cast<uint64_t>(r) * q.dstNzNStride * C0;
                    symsim::touch(out, 32, true);
                    uint32_t w = std::min<uint32_t>(C0, q.dValue - b * C0);
                    std::memset(static_cast<void *>(out), 0, 32);
                    std::memcpy(static_cast<void *>(out), row + b * C0, w * sizeof(T));
                }
            }
        }
    });
}

/// A1 -> A2 or B1 -> B2, 512-byte fractals (see the header comment).
template <typename T>
void LoadData(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LoadData2DParams &p,
              uint32_t line = __builtin_LINE()) {
    const char *what = "LoadData (2D)";
    symsim::need_core(symsim::CoreType::kAic, what);
    TPosition s = src.position();
    cube::need_pos(src, TPosition::A1, TPosition::B1, what, "the source");
    TPosition want = s == TPosition::A1 ? TPosition::A2 : TPosition::B2;
    cube::need_pos(dst, want, want, what, "the destination");
    if (p.addrMode != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": addrMode 1 applies to GM -> L1 only");
    }
    if (p.ifTranspose && sizeof(T) != 2) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED,
                     std::string(what) + ": ifTranspose supports b16 types only (use LoadDataWithTranspose)");
    }
    if (p.repeatTimes == 0) {
        return;  // documented NOP
    }
    cube::aligned(dst.GetPhyAddr(), 512, what, "the L0 destination");
    cube::aligned(src.GetPhyAddr(), 32, what, "the L1 source");
    constexpr uint32_t F = 512 / sizeof(T);    // elements per fractal
    constexpr uint32_t COLS = 32 / sizeof(T);  // 16 rows x COLS
    const uint64_t src_frac = static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(p.srcStride) * (p.repeatTimes - 1) + 1;
    const uint64_t dst_frac = static_cast<uint64_t>(p.dstGap + 1) * (p.repeatTimes - 1) + 1;
    cube::need_elems(src, src_frac * F, what);
    cube::need_elems(dst, dst_frac * F, what);
    T *d0 = dst.GetPhyAddr();
    const T *s0 = src.GetPhyAddr();
    LoadData2DParams q = p;
    symsim::issue(symsim::kMte1, what, line, [=]() {
        for (uint32_t r = 0; r < q.repeatTimes; ++r) {
            const T *sf = s0 + (static_cast<uint64_t>(q.startIndex) + static_cast<uint64_t>(q.srcStride) * r) * F;
            T *df = d0 + static_cast<uint64_t>(q.dstGap + 1) * r * F;
            symsim::touch(sf, 512, false);
            symsim::touch(df, 512, true);
            T tmp[F];
            for (uint32_t j = 0; j < 16; ++j) {
                for (uint32_t c = 0; c < COLS; ++c) {
                    tmp[j * COLS + c] = q.ifTranspose ? sf[c * COLS + j] : sf[j * COLS + c];
                }
            }
            std::memcpy(static_cast<void *>(df), tmp, 512);
        }
    });
}

/// L1 -> L0A/L0B with transposition of square blocks (b16 and b32 simulated).
template <typename T>
void LoadDataWithTranspose(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LoadData2dTransposeParams &p,
                           uint32_t line = __builtin_LINE()) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "the simulation models b16 and b32 LoadDataWithTranspose only");
    const char *what = "LoadDataWithTranspose";
    symsim::need_core(symsim::CoreType::kAic, what);
    cube::need_pos(src, TPosition::A1, TPosition::B1, what, "the source");
    cube::need_pos(dst, TPosition::A2, TPosition::B2, what, "the destination");
    if (p.repeatTimes == 0) {
        return;  // documented NOP
    }
    cube::aligned(dst.GetPhyAddr(), 512, what, "the L0 destination");
    cube::aligned(src.GetPhyAddr(), 32, what, "the L1 source");
    constexpr uint32_t F = 512 / sizeof(T);
    constexpr uint32_t SQ = 256;  // elements of one 16 x 16 square
    const uint32_t frac_per_sq = sizeof(T) == 4 ? 2 : 1;
    const uint64_t src_need = (static_cast<uint64_t>(p.startIndex) + static_cast<uint64_t>(p.srcStride) * (p.repeatTimes - 1) + 1) * SQ;
    const uint64_t dst_need = static_cast<uint64_t>(p.dstGap + 1) * (p.repeatTimes - 1) * F +
                              (frac_per_sq == 2 ? static_cast<uint64_t>(p.dstFracGap + 1) * F + F : F);
    cube::need_elems(src, src_need, what);
    cube::need_elems(dst, dst_need, what);
    T *d0 = dst.GetPhyAddr();
    const T *s0 = src.GetPhyAddr();
    LoadData2dTransposeParams q = p;
    symsim::issue(symsim::kMte1, what, line, [=]() {
        for (uint32_t r = 0; r < q.repeatTimes; ++r) {
            const T *sq = s0 + (static_cast<uint64_t>(q.startIndex) + static_cast<uint64_t>(q.srcStride) * r) * SQ;
            T *ds = d0 + static_cast<uint64_t>(q.dstGap + 1) * r * F;
            symsim::touch(sq, SQ * sizeof(T), false);
            if constexpr (sizeof(T) == 2) {
                symsim::touch(ds, 512, true);
                T tmp[SQ];
                for (uint32_t j = 0; j < 16; ++j) {
                    for (uint32_t c = 0; c < 16; ++c) {
                        tmp[j * 16 + c] = sq[c * 16 + j];
                    }
                }
                std::memcpy(static_cast<void *>(ds), tmp, 512);
            } else {
                // The square S (16 x 16) is [fractal 0 | fractal 1] (each 16 rows x 8); its
                // transpose T is split into T[:, 0:8] (to ds) and T[:, 8:16] (dstFracGap later).
                T *d1 = ds + static_cast<uint64_t>(q.dstFracGap + 1) * F;
                symsim::touch(ds, 512, true);
                symsim::touch(d1, 512, true);
                T t0[128], t1[128];
                for (uint32_t row = 0; row < 16; ++row) {      // row of T = column of S
                    const T *frac = sq + (row < 8 ? 0 : 128);
                    uint32_t col = row % 8;
                    for (uint32_t c = 0; c < 8; ++c) {
                        t0[row * 8 + c] = frac[c * 8 + col];        // S rows 0..7
                        t1[row * 8 + c] = frac[(8 + c) * 8 + col];  // S rows 8..15
                    }
                }
                std::memcpy(static_cast<void *>(ds), t0, 512);
                std::memcpy(static_cast<void *>(d1), t1, 512);
            }
        }
    });
}

/// CO1 (+)= A2 (Zz) x B2 (Zn) over m x k x n.
template <typename D, typename A, typename B>
void Mmad(const LocalTensor<D> &dst, const LocalTensor<A> &fm, const LocalTensor<B> &filter, const MmadParams &p,
          uint32_t line = __builtin_LINE()) {
    static_assert(std::is_same<D, float>::value && std::is_same<A, B>::value &&
                      (std::is_same<A, float>::value || std::is_same<A, half>::value ||
                       std::is_same<A, bfloat16_t>::value),
                  "the simulation models Mmad float <- {float, half, bfloat16_t} x the same type only");
    const char *what = "Mmad";
    symsim::need_core(symsim::CoreType::kAic, what);
    cube::need_pos(dst, TPosition::CO1, TPosition::CO1, what, "the result");
    cube::need_pos(fm, TPosition::A2, TPosition::A2, what, "the left matrix (fm)");
    cube::need_pos(filter, TPosition::B2, TPosition::B2, what, "the right matrix (filter)");
    if (p.m > 4095 || p.n > 4095 || p.k > 4095) {
        cube::range(what, "m, n or k");
    }
    if (p.isBias || p.cmatrixSource) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": bias is not simulated");
    }
    if (p.m == 0 || p.n == 0 || p.k == 0) {
        return;  // documented NOP
    }
    cube::aligned(dst.GetPhyAddr(), 1024, what, "the L0C result");
    cube::aligned(fm.GetPhyAddr(), 512, what, "the L0A operand");
    cube::aligned(filter.GetPhyAddr(), 512, what, "the L0B operand");
    constexpr uint32_t K0 = 32 / sizeof(A);
    const uint32_t kal = std::is_same<A, float>::value ? (p.kDirectionAlign ? cube::ceil_div(p.k, 16) * 16 : cube::ceil_div(p.k, 8) * 8)
                                                       : cube::ceil_div(p.k, K0) * K0;
    const uint32_t K1 = kal / K0, M1 = cube::ceil_div(p.m, 16), N1 = cube::ceil_div(p.n, 16);
    cube::need_elems(fm, static_cast<uint64_t>(M1) * K1 * 16 * K0, what);
    cube::need_elems(filter, static_cast<uint64_t>(K1) * N1 * 16 * K0, what);
    cube::need_elems(dst, static_cast<uint64_t>(M1) * N1 * 256, what);
    symsim::Pipes &ps = symsim::core().pipes;
    if (!p.cmatrixInitVal && (p.m / 16) * (p.n / 16) >= 10) {
        // Documented: above this size the hardware orders accumulating Mmads into one L0C
        // itself; below it a PipeBarrier<PIPE_M> must separate them.
        ps.start[symsim::kM].join(ps.cumul[symsim::kM]);
    }
    float *c = dst.GetPhyAddr();
    const A *a = fm.GetPhyAddr();
    const B *b = filter.GetPhyAddr();
    MmadParams q = p;
    symsim::issue(symsim::kM, what, line, [=]() {
        symsim::touch(a, static_cast<uint64_t>(M1) * K1 * 512, false);
        symsim::touch(b, static_cast<uint64_t>(K1) * N1 * 512, false);
        if (!q.cmatrixInitVal) {
            symsim::touch(c, static_cast<uint64_t>(M1) * N1 * 1024, false);
        }
        symsim::touch(c, static_cast<uint64_t>(M1) * N1 * 1024, true);
        for (uint32_t i = 0; i < q.m; ++i) {
            for (uint32_t j = 0; j < q.n; ++j) {
                float &out = c[((j / 16) * M1 + i / 16) * 256 + (i % 16) * 16 + j % 16];
                float acc = q.cmatrixInitVal ? 0.0f : out;
                for (uint32_t t = 0; t < q.k; ++t) {
                    const A &x = a[((i / 16) * K1 + t / K0) * 16 * K0 + (i % 16) * K0 + t % K0];
                    const B &y = b[((t / K0) * N1 + j / 16) * 16 * K0 + (j % 16) * K0 + t % K0];
                    // Two statements and -ffp-contract=off: the product is rounded before the add.
                    float prod = cube::widen(x) * cube::widen(y);
                    acc = acc + prod;
                }
                out = acc;
            }
        }
    });
}

/// CO1 -> GM with NZ2ND (CFG_ROW_MAJOR): mSize rows of nSize elements (whole 16-element blocks),
/// destination rows `dstStride` elements apart, quantized f32 -> half / bfloat16_t (nearest
/// even) when `quantPre` says so.
template <typename T, typename U, const FixpipeConfig &config = CFG_ROW_MAJOR>
void Fixpipe(const GlobalTensor<T> &dst, const LocalTensor<U> &src, const FixpipeParamsV220 &p,
             uint32_t line = __builtin_LINE()) {
    static_assert(std::is_same<U, float>::value, "the simulation models Fixpipe from a float CO1 only");
    const char *what = "Fixpipe";
    symsim::need_core(symsim::CoreType::kAic, what);
    cube::need_pos(src, TPosition::CO1, TPosition::CO1, what, "the source");
    if (config.format != CO2Layout::ROW_MAJOR || p.ndNum != 1 || p.reluEn) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": only CFG_ROW_MAJOR, ndNum 1, no ReLU is simulated");
    }
    QuantMode_t want = std::is_same<T, float>::value ? NoQuant : (std::is_same<T, half>::value ? F322F16 : F322BF16);
    if (!(std::is_same<T, float>::value || std::is_same<T, half>::value || std::is_same<T, bfloat16_t>::value) ||
        p.quantPre != want) {
        symsim::fail(SYMSCHED_SIM_E_CAST_MODE,
                     std::string(what) + ": quantPre " + std::to_string(static_cast<int>(p.quantPre)) +
                         " does not produce the destination type (NoQuant: float, F322F16: half, F322BF16: bfloat16_t)");
    }
    if (p.nSize > 4095 || p.mSize > 8192 || p.nSize % 16 != 0) {
        cube::range(what, "nSize " + std::to_string(p.nSize) + " (a multiple of 16 up to 4095) or mSize " +
                              std::to_string(p.mSize) + " (up to 8192)");
    }
    if (p.nSize == 0 || p.mSize == 0) {
        return;  // documented NOP
    }
    if (p.srcStride < cube::ceil_div(p.mSize, 16) * 16 || p.dstStride < p.nSize) {
        cube::range(what, "srcStride " + std::to_string(p.srcStride) + " (at least mSize rounded up to 16) or dstStride " +
                              std::to_string(p.dstStride) + " (at least nSize)");
    }
    cube::aligned(src.GetPhyAddr(), 64, what, "the L0C source");
    const uint32_t blocks = p.nSize / 16;
    cube::need_elems(src, static_cast<uint64_t>(blocks - 1) * p.srcStride * 16 + static_cast<uint64_t>(p.mSize) * 16, what);
    T *d0 = dst.GetPhyAddr();
    for (uint32_t i = 0; i < p.mSize; ++i) {
        T *row = d0 + static_cast<uint64_t>(i) * p.dstStride;
        symsim::check_local_gm(row, static_cast<uint64_t>(p.nSize) * sizeof(T), what);
        symsim::check_local_write(row, static_cast<uint64_t>(p.nSize) * sizeof(T), what);
    }
    symsim::note_gm_write(symsim::kFix, d0, sizeof(T), what, line);
    for (uint32_t i = 0; i < p.mSize; ++i) {
        symsim::note_local_write(symsim::kFix, d0 + static_cast<uint64_t>(i) * p.dstStride,
                                 static_cast<uint64_t>(p.nSize) * sizeof(T), what, line);
    }
    const float *c = src.GetPhyAddr();
    FixpipeParamsV220 q = p;
    symsim::issue(symsim::kFix, what, line, [=]() {
        for (uint32_t i = 0; i < q.mSize; ++i) {
            T *row = d0 + static_cast<uint64_t>(i) * q.dstStride;
            symsim::touch(row, static_cast<uint64_t>(q.nSize) * sizeof(T), true);
            for (uint32_t blk = 0; blk < blocks; ++blk) {
                const float *in = c + static_cast<uint64_t>(blk) * q.srcStride * 16 + static_cast<uint64_t>(i) * 16;
                symsim::touch(in, 64, false);
                for (uint32_t j = 0; j < 16; ++j) {
                    float v = in[j];
                    T &out = row[blk * 16 + j];
                    if constexpr (std::is_same<T, float>::value) {
                        out = v;
                    } else if constexpr (std::is_same<T, half>::value) {
                        // Fixpipe's F322F16 / F322BF16 are precision conversions, which CTRL[48]
                        // governs like Cast's (saturation mode: inf to ±MAX, NaN to 0).
                        uint16_t bits = detail::saturate16(detail::f16_rne(v), 0x7c00u, 0x7bffu);
                        std::memcpy(&out, &bits, 2);
                    } else {
                        out.bits = detail::saturate16(detail::bf16_rne(v), 0x7f80u, 0x7f7fu);
                    }
                }
            }
        }
    });
}

}  // namespace AscendC

#endif  // SYMSCHED_SIM_CUBE_H
