// kernel_operator.h — host simulation of the Ascend C subset symsched's generated kernels use:
// GlobalTensor / LocalTensor, TPipe with TQue / TQueBind / TBuf over a bounded unified buffer,
// DataCopy / DataCopyPad (local GM <-> UB only), Add / Max / Min on float and int32, Div and
// Duplicate on float, Cast with explicit
// round modes, SetFlag / WaitFlag, GetBlockIdx / GetBlockNum. Anything else is deliberately
// missing so a kernel that needs more fails to compile here instead of being simulated wrongly.
#ifndef SYMSCHED_SIM_KERNEL_OPERATOR_H
#define SYMSCHED_SIM_KERNEL_OPERATOR_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "symsched_sim_core.h"

/// IEEE binary16; g++ rounds float -> _Float16 to nearest even, as the device's CAST_RINT does.
using half = _Float16;

/// bfloat16 storage; all conversions go through AscendC::Cast.
struct bfloat16_t {
    uint16_t bits;
};

namespace AscendC {

// A1/B1 live in L1, A2 in L0A, B2 in L0B, CO1 in L0C (the Cube side; see cube.h).
enum class TPosition { GM, VECIN, VECOUT, VECCALC, A1, A2, B1, B2, CO1, CO2 };
using QuePosition = TPosition;

enum class RoundMode { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC };

enum class HardEvent { MTE2_V, V_MTE2, V_MTE3, MTE3_V, MTE2_MTE3, MTE3_MTE2, S_MTE2, MTE2_S,
                       S_MTE3, MTE3_S, S_V, V_S, FIX_S };
using TEventID = int32_t;
using event_t = int32_t;
constexpr TEventID EVENT_ID0 = 0;
constexpr TEventID EVENT_ID1 = 1;

inline int64_t GetBlockIdx() { return 0; }
inline int64_t GetBlockNum() { return 1; }

template <typename T>
class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T *ptr, uint64_t size = 0) {
        ptr_ = ptr;
        size_ = size;
    }
    GlobalTensor operator[](uint64_t offset) const {
        GlobalTensor t;
        t.ptr_ = ptr_ + offset;
        t.size_ = size_ > offset ? size_ - offset : 0;
        return t;
    }
    __gm__ T *GetPhyAddr() const { return ptr_; }
    T GetValue(uint64_t i) const {
        symsim::check_local_gm(ptr_ + i, sizeof(T), "GlobalTensor::GetValue");
        return ptr_[i];
    }
    void SetValue(uint64_t i, T v) {
        symsim::check_local_gm(ptr_ + i, sizeof(T), "GlobalTensor::SetValue");
        symsim::check_local_write(ptr_ + i, sizeof(T), "GlobalTensor::SetValue");
        ptr_[i] = v;
    }

private:
    T *ptr_ = nullptr;
    uint64_t size_ = 0;
};

namespace detail {
class QueueBase;
}

template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;
    LocalTensor(T *ptr, uint32_t elems, detail::QueueBase *owner, int32_t slot)
        : ptr_(ptr), elems_(elems), owner_(owner), slot_(slot) {}
    LocalTensor operator[](uint32_t offset) const {
        if (offset > elems_) {
            symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW, "LocalTensor offset past the end of its buffer");
        }
        return LocalTensor(ptr_ + offset, elems_ - offset, owner_, slot_);
    }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        return LocalTensor<U>(reinterpret_cast<U *>(ptr_),
                              static_cast<uint32_t>(elems_ * sizeof(T) / sizeof(U)), owner_, slot_);
    }
    __ubuf__ T *GetPhyAddr() const { return ptr_; }
    uint32_t GetSize() const { return elems_; }
    T GetValue(uint32_t i) const {
        need(i + 1, "LocalTensor::GetValue");
        return ptr_[i];
    }
    void SetValue(uint32_t i, T v) const {
        need(i + 1, "LocalTensor::SetValue");
        ptr_[i] = v;
    }
    /// Fails unless the tensor holds at least `count` elements (the device would overrun UB).
    void need(uint64_t count, const char *what) const {
        if (ptr_ == nullptr) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(what) + " on an unallocated LocalTensor");
        }
        if (count > elems_) {
            symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW,
                         std::string(what) + " of " + std::to_string(count) + " elements on a UB tensor of " +
                             std::to_string(elems_));
        }
    }
    detail::QueueBase *owner() const { return owner_; }
    int32_t slot() const { return slot_; }

private:
    T *ptr_ = nullptr;
    uint32_t elems_ = 0;
    detail::QueueBase *owner_ = nullptr;
    int32_t slot_ = -1;
};

namespace detail {

/// Buffers of one queue and the state machine the device enforces by blocking:
/// free -> AllocTensor -> allocated -> EnQue -> queued -> DeQue -> dequeued -> FreeTensor -> free.
class QueueBase {
public:
    enum class St { Free, Allocated, Queued, Dequeued };
    static constexpr int kMax = 8;
    uint8_t *base = nullptr;
    uint32_t len = 0;
    int32_t num = 0;
    TPosition pos = TPosition::VECIN;
    St st[kMax] = {};
    int32_t fifo[kMax] = {};
    int32_t head = 0, count = 0;
    const char *kind = "TQue";

    void init(uint8_t *b, int32_t n, uint32_t l) {
        base = b;
        num = n;
        len = l;
        for (int i = 0; i < kMax; ++i) {
            st[i] = St::Free;
        }
        head = count = 0;
    }
    int32_t alloc() {
        if (num == 0) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::AllocTensor before TPipe::InitBuffer");
        }
        for (int32_t i = 0; i < num; ++i) {
            if (st[i] == St::Free) {
                st[i] = St::Allocated;
                return i;
            }
        }
        symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE,
                     std::string(kind) + "::AllocTensor with every buffer in use (the device blocks forever)");
    }
    void enque(int32_t s) {
        if (s < 0 || s >= num || st[s] != St::Allocated) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::EnQue of a tensor not allocated from it");
        }
        st[s] = St::Queued;
        fifo[(head + count) % kMax] = s;
        ++count;
    }
    int32_t deque() {
        if (count == 0) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::DeQue on an empty queue (the device blocks forever)");
        }
        int32_t s = fifo[head];
        head = (head + 1) % kMax;
        --count;
        st[s] = St::Dequeued;
        return s;
    }
    void free_slot(int32_t s) {
        if (s < 0 || s >= num || (st[s] != St::Dequeued && st[s] != St::Allocated)) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::FreeTensor of a tensor it does not hold");
        }
        st[s] = St::Free;
    }
};

}  // namespace detail

template <TPosition Pos, int32_t Depth>
class TQue : public detail::QueueBase {
public:
    static_assert(Depth >= 1 && Depth <= detail::QueueBase::kMax, "queue depth 1..8");
    template <typename T>
    LocalTensor<T> AllocTensor() {
        int32_t s = alloc();
        return LocalTensor<T>(reinterpret_cast<T *>(base + s * len), len / sizeof(T), this, s);
    }
    template <typename T>
    void EnQue(const LocalTensor<T> &t) {
        if (t.owner() != this) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "EnQue of a tensor from another queue");
        }
        enque(t.slot());
    }
    template <typename T>
    LocalTensor<T> DeQue() {
        int32_t s = deque();
        return LocalTensor<T>(reinterpret_cast<T *>(base + s * len), len / sizeof(T), this, s);
    }
    template <typename T>
    void FreeTensor(const LocalTensor<T> &t) {
        if (t.owner() != this) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "FreeTensor of a tensor from another queue");
        }
        free_slot(t.slot());
    }
};

template <TPosition Src, TPosition Dst, int32_t Depth>
class TQueBind : public TQue<Src, Depth> {};

template <TPosition Pos = TPosition::VECCALC>
class TBuf {
public:
    template <typename T>
    LocalTensor<T> Get() {
        if (base_ == nullptr) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "TBuf::Get before TPipe::InitBuffer");
        }
        return LocalTensor<T>(reinterpret_cast<T *>(base_), len_ / sizeof(T), nullptr, -1);
    }
    uint8_t *base_ = nullptr;
    uint32_t len_ = 0;
};

/// Carves queue buffers out of the core's unified buffer; overflow is the device's hard limit.
class TPipe {
public:
    TPipe() { reset(symsim::core()); }
    ~TPipe() {
        symsim::CoreState *c = symsim::current_slot();
        if (c != nullptr) {
            reset(*c);
        }
    }
    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;

    template <TPosition Pos, int32_t Depth>
    void InitBuffer(TQue<Pos, Depth> &q, int32_t num, uint32_t len) {
        if (num < 1 || num > Depth) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "InitBuffer with more buffers than the queue depth");
        }
        q.init(carve(static_cast<uint64_t>(num) * round32(len), Pos), num, round32(len));
        q.pos = Pos;
    }
    template <TPosition Src, TPosition Dst, int32_t Depth>
    void InitBuffer(TQueBind<Src, Dst, Depth> &q, int32_t num, uint32_t len) {
        InitBuffer(static_cast<TQue<Src, Depth> &>(q), num, len);
    }
    template <TPosition Pos>
    void InitBuffer(TBuf<Pos> &b, uint32_t len) {
        b.base_ = carve(round32(len));
        b.len_ = round32(len);
    }

private:
    static uint32_t round32(uint32_t n) { return (n + 31u) & ~31u; }
    static void reset(symsim::CoreState &c) {
        c.ub_used = 0;
        c.l1.used = c.l0a.used = c.l0b.used = c.l0c.used = 0;
    }
    /// The Cube memory behind a queue position, or nullptr for the unified buffer.
    static symsim::Pool *cube_pool(TPosition pos) {
        symsim::CoreState &c = symsim::core();
        switch (pos) {
        case TPosition::A1:
        case TPosition::B1: return &c.l1;
        case TPosition::A2: return &c.l0a;
        case TPosition::B2: return &c.l0b;
        case TPosition::CO1: return &c.l0c;
        default: return nullptr;
        }
    }
    uint8_t *carve(uint64_t bytes, TPosition pos) {
        symsim::Pool *pool = cube_pool(pos);
        if (pool == nullptr) {
            return carve(bytes);
        }
        if (pool->used + bytes > pool->cap) {
            symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW,
                         std::string("TPipe::InitBuffer needs ") + std::to_string(pool->used + bytes) + " bytes of " +
                             pool->name + "; the core has " + std::to_string(pool->cap));
        }
        uint8_t *p = pool->base + pool->used;
        pool->used += static_cast<uint32_t>(bytes);
        return p;
    }
    uint8_t *carve(uint64_t bytes) {
        symsim::CoreState &c = symsim::core();
        if (c.ub_used + bytes > SYMSIM_UB_BYTES) {
            symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW,
                         "TPipe::InitBuffer needs " + std::to_string(c.ub_used + bytes) +
                             " bytes of unified buffer; the core has " + std::to_string(SYMSIM_UB_BYTES));
        }
        uint8_t *p = c.ub + c.ub_used;
        c.ub_used += static_cast<uint32_t>(bytes);
        return p;
    }
};

struct DataCopyExtParams {
    uint16_t blockCount;
    uint32_t blockLen;  // bytes
    uint32_t srcStride;
    uint32_t dstStride;
    uint32_t rsv;
};

template <typename T>
struct DataCopyPadExtParams {
    bool isPad;
    uint8_t leftPadding;
    uint8_t rightPadding;
    T paddingValue;
};

namespace detail {
inline void aligned32(uint64_t bytes, const char *what) {
    if (bytes % 32 != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNALIGNED,
                     std::string(what) + " of " + std::to_string(bytes) +
                         " bytes: DataCopy moves whole 32-byte blocks (use DataCopyPad for tails)");
    }
}
inline void single_block(const DataCopyExtParams &p, const char *what) {
    if (p.blockCount != 1 || p.srcStride != 0 || p.dstStride != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": only blockCount 1 without strides is simulated");
    }
}
}  // namespace detail

/// GM -> UB.
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count) {
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    detail::aligned32(bytes, "DataCopy GM->UB");
    dst.need(count, "DataCopy GM->UB");
    symsim::check_local_gm(src.GetPhyAddr(), bytes, "DataCopy GM->UB");
    std::memcpy(dst.GetPhyAddr(), src.GetPhyAddr(), bytes);
}

/// UB -> GM.
template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    detail::aligned32(bytes, "DataCopy UB->GM");
    src.need(count, "DataCopy UB->GM");
    symsim::check_local_gm(dst.GetPhyAddr(), bytes, "DataCopy UB->GM");
    symsim::check_local_write(dst.GetPhyAddr(), bytes, "DataCopy UB->GM");
    std::memcpy(dst.GetPhyAddr(), src.GetPhyAddr(), bytes);
}

/// GM -> UB of any byte length (the tail of a tile).
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &) {
    detail::single_block(p, "DataCopyPad GM->UB");
    if (p.blockLen % sizeof(T) != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNALIGNED, "DataCopyPad length not a whole number of elements");
    }
    dst.need((p.blockLen + 31u) / 32u * 32u / sizeof(T), "DataCopyPad GM->UB");
    symsim::check_local_gm(src.GetPhyAddr(), p.blockLen, "DataCopyPad GM->UB");
    std::memcpy(dst.GetPhyAddr(), src.GetPhyAddr(), p.blockLen);
}

/// UB -> GM of any byte length.
template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
    detail::single_block(p, "DataCopyPad UB->GM");
    if (p.blockLen % sizeof(T) != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNALIGNED, "DataCopyPad length not a whole number of elements");
    }
    src.need(p.blockLen / sizeof(T), "DataCopyPad UB->GM");
    symsim::check_local_gm(dst.GetPhyAddr(), p.blockLen, "DataCopyPad UB->GM");
    symsim::check_local_write(dst.GetPhyAddr(), p.blockLen, "DataCopyPad UB->GM");
    std::memcpy(dst.GetPhyAddr(), src.GetPhyAddr(), p.blockLen);
}

// Vector arithmetic on float and int32_t (16-bit data is accumulated in float by the templates;
// f64/i64 fold on the scalar unit). The host's SSE float ops round to nearest even like the
// vector unit; int32 Add wraps (two's complement). Subnormal handling and int32 overflow are
// among the things to confirm on hardware (see docs/ascendc.md).
namespace detail {
template <typename T>
void vector_type(const char *what) {
    static_assert(std::is_same<T, float>::value || std::is_same<T, int32_t>::value,
                  "the simulation models float and int32_t vector arithmetic only");
    (void)what;
}
template <typename T>
void need3(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count,
           const char *what) {
    vector_type<T>(what);
    if (count < 0) {
        symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW, std::string(what) + " with a negative count");
    }
    dst.need(count, what);
    a.need(count, what);
    b.need(count, what);
}
}  // namespace detail

template <typename T>
void Add(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count) {
    detail::need3(dst, a, b, count, "Add");
    for (int32_t i = 0; i < count; ++i) {
        if constexpr (std::is_same<T, int32_t>::value) {
            dst.GetPhyAddr()[i] = static_cast<int32_t>(static_cast<uint32_t>(a.GetPhyAddr()[i]) +
                                                       static_cast<uint32_t>(b.GetPhyAddr()[i]));
        } else {
            dst.GetPhyAddr()[i] = a.GetPhyAddr()[i] + b.GetPhyAddr()[i];
        }
    }
}

template <typename T>
void Max(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count) {
    detail::need3(dst, a, b, count, "Max");
    for (int32_t i = 0; i < count; ++i) {
        T x = a.GetPhyAddr()[i], y = b.GetPhyAddr()[i];
        dst.GetPhyAddr()[i] = (y > x) ? y : x;
    }
}

template <typename T>
void Min(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count) {
    detail::need3(dst, a, b, count, "Min");
    for (int32_t i = 0; i < count; ++i) {
        T x = a.GetPhyAddr()[i], y = b.GetPhyAddr()[i];
        dst.GetPhyAddr()[i] = (y < x) ? y : x;
    }
}

/// dst = a / b element-wise, IEEE division rounded to nearest even (float only).
template <typename T>
void Div(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count) {
    static_assert(std::is_same<T, float>::value, "the simulation models float Div only");
    detail::need3(dst, a, b, count, "Div");
    for (int32_t i = 0; i < count; ++i) {
        dst.GetPhyAddr()[i] = a.GetPhyAddr()[i] / b.GetPhyAddr()[i];
    }
}

/// Fill `count` elements of `dst` with `value`.
template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &value, int32_t count) {
    detail::vector_type<T>("Duplicate");
    if (count < 0) {
        symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW, "Duplicate with a negative count");
    }
    dst.need(count, "Duplicate");
    for (int32_t i = 0; i < count; ++i) {
        dst.GetPhyAddr()[i] = value;
    }
}

namespace detail {

inline uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}

inline uint16_t bf16_rne(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN, sign and top payload kept
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

inline float bf16_widen(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

inline uint16_t f16_rne(float x) {
    half h = static_cast<half>(x);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}

inline float f16_widen(uint16_t b) {
    half h;
    std::memcpy(&h, &b, 2);
    return static_cast<float>(h);
}

// Neighbours in a 16-bit sign-magnitude format.
inline uint16_t next_up(uint16_t b) { return b == 0x8000u ? 1u : ((b & 0x8000u) ? b - 1u : b + 1u); }
inline uint16_t next_down(uint16_t b) { return b == 0u ? 0x8001u : ((b & 0x8000u) ? b + 1u : b - 1u); }

/// float -> 16-bit float with a round mode, from the nearest-even result and its neighbour.
inline uint16_t narrow(float x, RoundMode mode, uint16_t (*rne)(float), float (*widen)(uint16_t)) {
    if (mode == RoundMode::CAST_NONE) {
        symsim::fail(SYMSCHED_SIM_E_CAST_MODE, "narrowing Cast needs an explicit round mode, not CAST_NONE");
    }
    uint16_t r = rne(x);
    float fr = widen(r);
    if (std::isnan(x) || fr == x || mode == RoundMode::CAST_RINT) {
        return r;
    }
    uint16_t lo, hi;
    if (fr > x) {
        hi = r;
        lo = next_down(r);
    } else {
        lo = r;
        hi = next_up(r);
    }
    switch (mode) {
    case RoundMode::CAST_FLOOR: return lo;
    case RoundMode::CAST_CEIL: return hi;
    case RoundMode::CAST_TRUNC: return x > 0 ? lo : hi;
    case RoundMode::CAST_ROUND: {
        double dl = static_cast<double>(x) - static_cast<double>(widen(lo));
        double dh = static_cast<double>(widen(hi)) - static_cast<double>(x);
        if (dl < dh) return lo;
        if (dh < dl) return hi;
        return x > 0 ? hi : lo;  // ties away from zero
    }
    default: return r;
    }
}

}  // namespace detail

/// Element-wise conversion. Supported pairs: float <-> half, float <-> bfloat16_t, and T -> T.
template <typename D, typename S>
void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, const RoundMode &mode, uint32_t count) {
    dst.need(count, "Cast");
    src.need(count, "Cast");
    D *d = dst.GetPhyAddr();
    const S *s = src.GetPhyAddr();
    if constexpr (std::is_same<D, float>::value && std::is_same<S, half>::value) {
        for (uint32_t i = 0; i < count; ++i) d[i] = static_cast<float>(s[i]);
    } else if constexpr (std::is_same<D, float>::value && std::is_same<S, bfloat16_t>::value) {
        for (uint32_t i = 0; i < count; ++i) d[i] = detail::bf16_widen(s[i].bits);
    } else if constexpr (std::is_same<D, half>::value && std::is_same<S, float>::value) {
        for (uint32_t i = 0; i < count; ++i) {
            uint16_t b = detail::narrow(s[i], mode, detail::f16_rne, detail::f16_widen);
            std::memcpy(&d[i], &b, 2);
        }
    } else if constexpr (std::is_same<D, bfloat16_t>::value && std::is_same<S, float>::value) {
        for (uint32_t i = 0; i < count; ++i) d[i].bits = detail::narrow(s[i], mode, detail::bf16_rne, detail::bf16_widen);
    } else {
        static_assert(std::is_same<D, S>::value, "Cast pair not modelled by the simulation");
        std::memmove(d, s, count * sizeof(D));
    }
}

template <HardEvent E>
void SetFlag(TEventID id) {
    if (id < 0 || id >= 8) symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "SetFlag event id out of range");
    symsim::core().flags[static_cast<int>(E)][id] += 1;
}

template <HardEvent E>
void WaitFlag(TEventID id) {
    if (id < 0 || id >= 8) symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "WaitFlag event id out of range");
    int32_t &f = symsim::core().flags[static_cast<int>(E)][id];
    if (f == 0) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "WaitFlag without a matching SetFlag (the device waits forever)");
    }
    f -= 1;
}

}  // namespace AscendC

// The Cube-unit subset (Mmad & co.), which CANN also declares through kernel_operator.h.
#include "cube.h"

#endif  // SYMSCHED_SIM_KERNEL_OPERATOR_H
