// cube.h — host simulation of the Ascend C Cube-unit subset symsched's matmul lowering emits:
// DataCopy with Nd2NzParams (GM -> A1/B1), LoadData with LoadData2DParams (A1 -> A2, B1 -> B2),
// Mmad (CO1 <- A2 x B2) and Fixpipe (CO1 -> GM, NZ2ND, with the f32 -> f16/bf16 quantization).
//
// Layouts are modelled *logically*: a Cube tile holds its matrix row-major, rows padded to the
// Nd2Nz `dstNzC0Stride` and columns to 16 elements, instead of the device's NZ / ZZ / ZN fractal
// orders. What is checked is what the device enforces: each operand's TPosition, the L1/L0
// capacities (TPipe::InitBuffer, see kernel_operator.h), the documented parameter ranges, that a
// copy stays inside its tensors, the Cube's type pairs and Fixpipe's quantization mode.
// Numerics: Mmad adds, per output element, the products in ascending k, each product and each
// partial sum rounded to f32 (no fused multiply-add), continuing from CO1 unless
// `cmatrixInitVal`; that is the runtime's matmul contract (runtime/src/exec/matmul.rs), not the
// hardware's k-block summation order (see docs/ascendc.md, "Cube matmul").
#ifndef SYMSCHED_SIM_CUBE_H
#define SYMSCHED_SIM_CUBE_H

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernel_operator.h"

namespace AscendC {

/// GM (ND, row-major) -> A1/B1 (NZ) conversion parameters (element units unless noted).
struct Nd2NzParams {
    uint16_t ndNum = 1;
    uint16_t nValue = 0;
    uint16_t dValue = 0;
    uint16_t srcNdMatrixStride = 0;
    uint16_t srcDValue = 0;
    uint16_t dstNzC0Stride = 0;
    uint16_t dstNzNStride = 1;
    uint16_t dstNzMatrixStride = 0;
};

/// Load2D parameters: `repeatTimes` fractals of 512 bytes from fractal `startIndex` of the source.
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint8_t sid = 0;
    uint16_t dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
};

/// Mmad parameters (m, n, k in elements, each in [0, 4095]).
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
    bool cmatrixInitVal = true;
    bool cmatrixSource = false;
};

/// Fixpipe quantization modes (only the ones the lowering uses are simulated).
enum QuantMode_t { NoQuant = 0, F322F16 = 1, F322BF16 = 2 };

/// CO1 -> GM parameters (Atlas A2: FixpipeParamsV220).
struct FixpipeParamsV220 {
    uint16_t nSize = 0;
    uint16_t mSize = 0;
    uint16_t srcStride = 0;
    uint32_t dstStride = 0;
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

inline const char *pos_name(TPosition p) {
    switch (p) {
    case TPosition::GM: return "GM";
    case TPosition::VECIN: return "VECIN";
    case TPosition::VECOUT: return "VECOUT";
    case TPosition::VECCALC: return "VECCALC";
    case TPosition::A1: return "A1";
    case TPosition::A2: return "A2";
    case TPosition::B1: return "B1";
    case TPosition::B2: return "B2";
    case TPosition::CO1: return "CO1";
    default: return "CO2";
    }
}

/// Where a local tensor lives: its queue's position (TBuf tensors count as VECCALC).
template <typename T>
TPosition position_of(const LocalTensor<T> &t) {
    return t.owner() != nullptr ? t.owner()->pos : TPosition::VECCALC;
}

template <typename T>
void need_pos(const LocalTensor<T> &t, TPosition want, TPosition alt, const char *what, const char *operand) {
    TPosition got = position_of(t);
    if (got != want && got != alt) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_POSITION, std::string(what) + ": " + operand + " is in " + pos_name(got) +
                                                       ", the device requires " + pos_name(want) +
                                                       (alt != want ? std::string(" or ") + pos_name(alt) : ""));
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

inline uint32_t round16(uint32_t x) { return (x + 15u) / 16u * 16u; }

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

/// GM (ND) -> A1/B1. Logical model: row j < nValue, column d < dValue lands at
/// `dst[j * round16(dValue) + d]`; padding rows up to `dstNzC0Stride` and columns up to 16 are zero.
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const Nd2NzParams &p) {
    const char *what = "DataCopy (Nd2Nz)";
    cube::need_pos(dst, TPosition::A1, TPosition::B1, what, "the destination");
    if (p.ndNum != 1 || p.dstNzNStride != 1) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": only ndNum 1 and dstNzNStride 1 are simulated");
    }
    if (p.nValue == 0 || p.dValue == 0 || p.srcDValue < p.dValue || p.dstNzC0Stride < p.nValue ||
        p.dstNzC0Stride % 16 != 0) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW,
                     std::string(what) + ": nValue " + std::to_string(p.nValue) + ", dValue " + std::to_string(p.dValue) +
                         ", srcDValue " + std::to_string(p.srcDValue) + ", dstNzC0Stride " +
                         std::to_string(p.dstNzC0Stride) +
                         " (need 0 < dValue <= srcDValue and nValue <= dstNzC0Stride, a multiple of 16)");
    }
    const uint32_t cols = cube::round16(p.dValue);
    cube::need_elems(dst, static_cast<uint64_t>(p.dstNzC0Stride) * cols, what);
    T *d = dst.GetPhyAddr();
    std::memset(static_cast<void *>(d), 0, static_cast<size_t>(p.dstNzC0Stride) * cols * sizeof(T));
    for (uint32_t j = 0; j < p.nValue; ++j) {
        const T *row = src.GetPhyAddr() + static_cast<uint64_t>(j) * p.srcDValue;
        symsim::check_local_gm(row, static_cast<uint64_t>(p.dValue) * sizeof(T), what);
        std::memcpy(static_cast<void *>(d + static_cast<uint64_t>(j) * cols), row, p.dValue * sizeof(T));
    }
}

/// A1 -> A2 or B1 -> B2: `repeatTimes` 512-byte fractals (a whole tile in the logical model).
template <typename T>
void LoadData(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LoadData2DParams &p) {
    const char *what = "LoadData (2D)";
    TPosition s = cube::position_of(src);
    cube::need_pos(src, TPosition::A1, TPosition::B1, what, "the source");
    cube::need_pos(dst, s == TPosition::A1 ? TPosition::A2 : TPosition::B2,
                   s == TPosition::A1 ? TPosition::A2 : TPosition::B2, what, "the destination");
    if (p.repeatTimes == 0) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW, std::string(what) + ": repeatTimes must be in [1, 255]");
    }
    if (p.srcStride != 1 || p.dstGap != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": only contiguous fractals (srcStride 1, dstGap 0) are simulated");
    }
    const uint64_t elems = static_cast<uint64_t>(p.repeatTimes) * 512u / sizeof(T);
    const uint64_t first = static_cast<uint64_t>(p.startIndex) * 512u / sizeof(T);
    cube::need_elems(src, first + elems, what);
    cube::need_elems(dst, elems, what);
    std::memcpy(static_cast<void *>(dst.GetPhyAddr()), src.GetPhyAddr() + first, elems * sizeof(T));
}

/// CO1 (+)= A2 x B2 over m x k x n, with tiles as DataCopy(Nd2Nz) + LoadData lay them out.
template <typename D, typename A, typename B>
void Mmad(const LocalTensor<D> &dst, const LocalTensor<A> &fm, const LocalTensor<B> &filter, const MmadParams &p) {
    static_assert(std::is_same<D, float>::value && std::is_same<A, B>::value &&
                      (std::is_same<A, float>::value || std::is_same<A, half>::value ||
                       std::is_same<A, bfloat16_t>::value),
                  "the simulation models Mmad float <- {float, half, bfloat16_t} x the same type only");
    const char *what = "Mmad";
    cube::need_pos(dst, TPosition::CO1, TPosition::CO1, what, "the result");
    cube::need_pos(fm, TPosition::A2, TPosition::A2, what, "the left matrix (fm)");
    cube::need_pos(filter, TPosition::B2, TPosition::B2, what, "the right matrix (filter)");
    if (p.m > 4095 || p.n > 4095 || p.k > 4095) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW, std::string(what) + ": m, n and k must be in [0, 4095]");
    }
    if (p.isBias || p.cmatrixSource) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": bias is not simulated");
    }
    const uint32_t m16 = cube::round16(p.m), n16 = cube::round16(p.n), k16 = cube::round16(p.k);
    cube::need_elems(fm, static_cast<uint64_t>(m16) * k16, what);
    cube::need_elems(filter, static_cast<uint64_t>(k16) * n16, what);
    cube::need_elems(dst, static_cast<uint64_t>(m16) * n16, what);
    float *c = dst.GetPhyAddr();
    const A *a = fm.GetPhyAddr();
    const B *b = filter.GetPhyAddr();
    for (uint32_t i = 0; i < p.m; ++i) {
        for (uint32_t j = 0; j < p.n; ++j) {
            float acc = p.cmatrixInitVal ? 0.0f : c[i * n16 + j];
            for (uint32_t t = 0; t < p.k; ++t) {
                // Two statements and -ffp-contract=off: the product is rounded before the add.
                float prod = cube::widen(a[i * k16 + t]) * cube::widen(b[t * n16 + j]);
                acc = acc + prod;
            }
            c[i * n16 + j] = acc;
        }
    }
}

/// CO1 -> GM with NZ2ND (CFG_ROW_MAJOR): mSize x nSize elements, GM rows `dstStride` apart,
/// quantized f32 -> half / bfloat16_t (nearest even) when `quantPre` says so.
template <typename T, typename U, const FixpipeConfig &config = CFG_ROW_MAJOR>
void Fixpipe(const GlobalTensor<T> &dst, const LocalTensor<U> &src, const FixpipeParamsV220 &p) {
    static_assert(std::is_same<U, float>::value, "the simulation models Fixpipe from a float CO1 only");
    const char *what = "Fixpipe";
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
    const uint32_t n16 = cube::round16(p.nSize);
    if (p.mSize == 0 || p.nSize == 0 || p.srcStride < cube::round16(p.mSize) || p.dstStride < p.nSize) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW, std::string(what) + ": mSize " + std::to_string(p.mSize) +
                                                       ", nSize " + std::to_string(p.nSize) + ", srcStride " +
                                                       std::to_string(p.srcStride) + ", dstStride " +
                                                       std::to_string(p.dstStride));
    }
    cube::need_elems(src, static_cast<uint64_t>(cube::round16(p.mSize)) * n16, what);
    const float *c = src.GetPhyAddr();
    for (uint32_t i = 0; i < p.mSize; ++i) {
        T *row = dst.GetPhyAddr() + static_cast<uint64_t>(i) * p.dstStride;
        symsim::check_local_gm(row, static_cast<uint64_t>(p.nSize) * sizeof(T), what);
        symsim::check_local_write(row, static_cast<uint64_t>(p.nSize) * sizeof(T), what);
        for (uint32_t j = 0; j < p.nSize; ++j) {
            float v = c[i * n16 + j];
            if constexpr (std::is_same<T, float>::value) {
                row[j] = v;
            } else if constexpr (std::is_same<T, half>::value) {
                uint16_t bits = detail::f16_rne(v);
                std::memcpy(&row[j], &bits, 2);
            } else {
                row[j].bits = detail::bf16_rne(v);
            }
        }
    }
}

}  // namespace AscendC

#endif  // SYMSCHED_SIM_CUBE_H
