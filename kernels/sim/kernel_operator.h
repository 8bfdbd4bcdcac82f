// kernel_operator.h — host simulation of the Ascend C subset symsched's generated kernels use:
// GlobalTensor / LocalTensor, TPipe with TQue / TQueBind / TBuf over a bounded unified buffer,
// DataCopy / DataCopyPad (local GM <-> UB only), vector Add / Max / Min / Div / Duplicate /
// Compare / Select / Cast, SetFlag / WaitFlag, PipeBarrier, the cross-core flags and SyncAll,
// GetBlockIdx / GetBlockNum and the core-type macros. Every instruction runs on its engine
// (see symsched_sim_pipes.h); the numerics follow the Atlas A2 boundary-value tables of the
// Ascend C API reference (docs/ascendc.md, "Numerics as documented"). Anything else is
// deliberately missing so a kernel that needs more fails to compile here instead of being
// simulated wrongly.
#ifndef SYMSCHED_SIM_KERNEL_OPERATOR_H
#define SYMSCHED_SIM_KERNEL_OPERATOR_H

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "symsched_sim_core.h"

/// IEEE binary16; g++ rounds float -> _Float16 to nearest even.
using half = _Float16;

/// bfloat16 storage; all conversions go through AscendC::Cast.
struct bfloat16_t {
    uint16_t bits;
};

// Pipes (PipeBarrier / CrossCoreSetFlag template arguments).
enum pipe_t : uint32_t { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_ALL };

using symsim::KERNEL_TYPE_AIV_ONLY;
using symsim::KERNEL_TYPE_AIC_ONLY;
using symsim::KERNEL_TYPE_MIX_AIV_1_0;
using symsim::KERNEL_TYPE_MIX_AIC_1_0;
using symsim::KERNEL_TYPE_MIX_AIC_1_1;
using symsim::KERNEL_TYPE_MIX_AIC_1_2;

/// The core's CTRL register, as the C API's asc_get_ctrl reads it (asc-devkit
/// docs/api/c_api/sys_var, Atlas A2 listed).
inline uint64_t asc_get_ctrl() { return symsim::core().ctrl; }

/// asc_set_ctrl: write CTRL on the scalar pipe (PIPE_S), in order with the scalar unit's own
/// instructions. The page documents bits 48, 53, 56 and 59 and asks for a read-modify-write of
/// the value asc_get_ctrl returned; the simulation models CTRL[48] (float overflow mode: 1
/// keeps Inf/NaN, 0 saturates) and refuses a change of any other bit. Instructions of V, MTE3,
/// M and FIX read CTRL when they execute (symsim::reads_ctrl), so a write not ordered after
/// the ones issued before it (PipeBarrier<PIPE_ALL>) is reported as SYMSCHED_SIM_E_PIPE_RACE.
inline void asc_set_ctrl(uint64_t config, uint32_t line = __builtin_LINE()) {
    symsim::CoreState &c = symsim::core();
    uint64_t other = (config ^ c.ctrl) & ~symsim::kCtrlInfNan;
    if (other != 0) {
        symsim::fail(SYMSCHED_SIM_E_CTRL, "asc_set_ctrl (kernel line " + std::to_string(line) +
                                              ") changes CTRL bits other than 48 (mask " + std::to_string(other) +
                                              "): not modelled by the simulation");
    }
    symsim::Pipes &ps = c.pipes;
    symsim::Who who{symsim::slot_of(c.index, symsim::kS), ++ps.n[symsim::kS], "asc_set_ctrl", line};
    symsim::Clock clk = ps.scalar_clock();
    clk.v[symsim::slot_of(c.index, symsim::kS)] = ps.n[symsim::kS] - 1;
    symsim::touch_ctrl(who, clk, true);
    ps.k_obs.v[symsim::slot_of(c.index, symsim::kS)] = ps.n[symsim::kS];
    c.ctrl = config;
}

namespace AscendC {

// A1/B1 live in L1, A2 in L0A, B2 in L0B, CO1 in L0C (the Cube side; see cube.h).
enum class TPosition { GM, VECIN, VECOUT, VECCALC, A1, A2, B1, B2, CO1, CO2 };
using QuePosition = TPosition;

enum class RoundMode { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

enum class HardEvent {
    MTE2_V, V_MTE2, V_MTE3, MTE3_V, MTE2_MTE3, MTE3_MTE2, S_MTE2, MTE2_S, S_MTE3, MTE3_S, S_V, V_S, FIX_S,
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, M_FIX, FIX_M, MTE2_FIX, FIX_MTE2, S_FIX, S_MTE1, MTE1_S, M_S, S_M
};
using TEventID = int32_t;
using event_t = int32_t;
constexpr TEventID EVENT_ID0 = 0;
constexpr TEventID EVENT_ID1 = 1;
constexpr TEventID EVENT_ID2 = 2;
constexpr TEventID EVENT_ID3 = 3;

enum CoreTypeId { AIC = 1, AIV = 2 };
inline int32_t SymsimCoreType() { return symsim::core().type == symsim::CoreType::kAic ? AIC : AIV; }

inline int64_t GetBlockIdx() { return symsim::core().block_idx; }
inline int64_t GetBlockNum() { return symsim::core().block_num; }
inline int64_t GetTaskRatio() {
    symsim::RankShared &r = *symsim::core().rank;
    return symsim::core().type == symsim::CoreType::kAiv && r.n_aic > 0 ? r.n_aiv / r.n_aic : 1;
}
inline int64_t GetSubBlockIdx() {
    symsim::CoreState &c = symsim::core();
    return c.type == symsim::CoreType::kAiv ? c.block_idx % GetTaskRatio() : 0;
}

namespace detail {
/// (source, destination) engines of a HardEvent.
inline void event_pipes(HardEvent e, uint32_t &src, uint32_t &dst) {
    using namespace symsim;
    switch (e) {
    case HardEvent::MTE2_V: src = kMte2; dst = kV; return;
    case HardEvent::V_MTE2: src = kV; dst = kMte2; return;
    case HardEvent::V_MTE3: src = kV; dst = kMte3; return;
    case HardEvent::MTE3_V: src = kMte3; dst = kV; return;
    case HardEvent::MTE2_MTE3: src = kMte2; dst = kMte3; return;
    case HardEvent::MTE3_MTE2: src = kMte3; dst = kMte2; return;
    case HardEvent::S_MTE2: src = kS; dst = kMte2; return;
    case HardEvent::MTE2_S: src = kMte2; dst = kS; return;
    case HardEvent::S_MTE3: src = kS; dst = kMte3; return;
    case HardEvent::MTE3_S: src = kMte3; dst = kS; return;
    case HardEvent::S_V: src = kS; dst = kV; return;
    case HardEvent::V_S: src = kV; dst = kS; return;
    case HardEvent::FIX_S: src = kFix; dst = kS; return;
    case HardEvent::MTE2_MTE1: src = kMte2; dst = kMte1; return;
    case HardEvent::MTE1_MTE2: src = kMte1; dst = kMte2; return;
    case HardEvent::MTE1_M: src = kMte1; dst = kM; return;
    case HardEvent::M_MTE1: src = kM; dst = kMte1; return;
    case HardEvent::M_FIX: src = kM; dst = kFix; return;
    case HardEvent::FIX_M: src = kFix; dst = kM; return;
    case HardEvent::MTE2_FIX: src = kMte2; dst = kFix; return;
    case HardEvent::FIX_MTE2: src = kFix; dst = kMte2; return;
    case HardEvent::S_FIX: src = kS; dst = kFix; return;
    case HardEvent::S_MTE1: src = kS; dst = kMte1; return;
    case HardEvent::MTE1_S: src = kMte1; dst = kS; return;
    case HardEvent::M_S: src = kM; dst = kS; return;
    default: src = kS; dst = kM; return;
    }
}
inline uint32_t pipe_engine(pipe_t p) {
    using namespace symsim;
    switch (p) {
    case PIPE_V: return kV;
    case PIPE_M: return kM;
    case PIPE_MTE1: return kMte1;
    case PIPE_MTE2: return kMte2;
    case PIPE_MTE3: return kMte3;
    case PIPE_FIX: return kFix;
    default: return kS;
    }
}
/// Engines that produce into / consume from a queue at a position (what EnQue/DeQue and
/// FreeTensor/AllocTensor synchronise): GM->VECIN, VECOUT->GM, the Cube path GM->A1/B1 ->
/// A2/B2 -> CO1 -> GM.
inline void position_pipes(TPosition pos, uint32_t &prod, uint32_t &cons) {
    using namespace symsim;
    switch (pos) {
    case TPosition::VECIN: prod = kMte2; cons = kV; return;
    case TPosition::VECOUT: prod = kV; cons = kMte3; return;
    case TPosition::A1:
    case TPosition::B1: prod = kMte2; cons = kMte1; return;
    case TPosition::A2:
    case TPosition::B2: prod = kMte1; cons = kM; return;
    case TPosition::CO1: prod = kM; cons = kFix; return;
    default: prod = kV; cons = kV; return;
    }
}
inline const char *position_name(TPosition p) {
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
inline bool cube_position(TPosition p) {
    return p == TPosition::A1 || p == TPosition::A2 || p == TPosition::B1 || p == TPosition::B2 ||
           p == TPosition::CO1 || p == TPosition::CO2;
}
}  // namespace detail

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
    T GetValue(uint64_t i, uint32_t line = __builtin_LINE()) const {
        symsim::check_local_gm(ptr_ + i, sizeof(T), "GlobalTensor::GetValue");
        symsim::scalar_touch(ptr_ + i, sizeof(T), false, "GlobalTensor::GetValue", line);
        return ptr_[i];
    }
    void SetValue(uint64_t i, T v, uint32_t line = __builtin_LINE()) {
        symsim::check_local_gm(ptr_ + i, sizeof(T), "GlobalTensor::SetValue");
        symsim::check_local_write(ptr_ + i, sizeof(T), "GlobalTensor::SetValue");
        symsim::scalar_touch(ptr_ + i, sizeof(T), true, "GlobalTensor::SetValue", line);
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
    LocalTensor(T *ptr, uint32_t elems, detail::QueueBase *owner, int32_t slot, TPosition pos)
        : ptr_(ptr), elems_(elems), owner_(owner), slot_(slot), pos_(pos) {}
    LocalTensor operator[](uint32_t offset) const {
        if (offset > elems_) {
            symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW, "LocalTensor offset past the end of its buffer");
        }
        return LocalTensor(ptr_ + offset, elems_ - offset, owner_, slot_, pos_);
    }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        return LocalTensor<U>(reinterpret_cast<U *>(ptr_), static_cast<uint32_t>(elems_ * sizeof(T) / sizeof(U)), owner_,
                              slot_, pos_);
    }
    __ubuf__ T *GetPhyAddr() const { return ptr_; }
    uint32_t GetSize() const { return elems_; }
    /// Scalar-unit read of one element (on the device: through the scalar unit, slow).
    T GetValue(uint32_t i, uint32_t line = __builtin_LINE()) const {
        need(i + 1, "LocalTensor::GetValue");
        symsim::scalar_touch(ptr_ + i, sizeof(T), false, "LocalTensor::GetValue", line);
        return ptr_[i];
    }
    void SetValue(uint32_t i, T v, uint32_t line = __builtin_LINE()) const {
        need(i + 1, "LocalTensor::SetValue");
        symsim::scalar_touch(ptr_ + i, sizeof(T), true, "LocalTensor::SetValue", line);
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
    TPosition position() const { return pos_; }

private:
    T *ptr_ = nullptr;
    uint32_t elems_ = 0;
    detail::QueueBase *owner_ = nullptr;
    int32_t slot_ = -1;
    TPosition pos_ = TPosition::VECCALC;
};

namespace detail {

/// Buffers of one queue and the state machine the device enforces by blocking:
/// free -> AllocTensor -> allocated -> EnQue -> queued -> DeQue -> dequeued -> FreeTensor -> free.
/// EnQue/DeQue order the queue's consumer engine after its producer; FreeTensor/AllocTensor
/// order the producer's next use of the buffer after the consumer's last.
class QueueBase {
public:
    enum class St { Free, Allocated, Queued, Dequeued };
    static constexpr int kMax = 8;
    uint8_t *base = nullptr;
    uint32_t len = 0;
    int32_t num = 0;
    TPosition pos = TPosition::VECIN;
    uint32_t prod = symsim::kMte2, cons = symsim::kV;
    St st[kMax] = {};
    int32_t fifo[kMax] = {};
    int32_t head = 0, count = 0;
    const char *kind = "TQue";
    symsim::OpPtr enq_mark[kMax], free_mark[kMax];
    symsim::Clock enq_value[kMax], free_value[kMax];

    void init(uint8_t *b, int32_t n, uint32_t l) {
        base = b;
        num = n;
        len = l;
        for (int i = 0; i < kMax; ++i) {
            st[i] = St::Free;
            enq_mark[i] = free_mark[i] = nullptr;
        }
        head = count = 0;
    }
    int32_t alloc(uint32_t line) {
        if (num == 0) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::AllocTensor before TPipe::InitBuffer");
        }
        for (int32_t i = 0; i < num; ++i) {
            if (st[i] == St::Free) {
                st[i] = St::Allocated;
                if (free_mark[i] != nullptr) {
                    wait_mark(prod, free_mark[i], free_value[i], "AllocTensor", line);
                }
                return i;
            }
        }
        symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE,
                     std::string(kind) + "::AllocTensor with every buffer in use (the device blocks forever)");
    }
    void enque(int32_t s, uint32_t line) {
        if (s < 0 || s >= num || st[s] != St::Allocated) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::EnQue of a tensor not allocated from it");
        }
        st[s] = St::Queued;
        fifo[(head + count) % kMax] = s;
        ++count;
        set_mark(prod, enq_mark[s], enq_value[s], "EnQue", line);
    }
    int32_t deque(uint32_t line) {
        if (count == 0) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE,
                         std::string(kind) + "::DeQue on an empty queue (the device blocks forever)");
        }
        int32_t s = fifo[head];
        head = (head + 1) % kMax;
        --count;
        st[s] = St::Dequeued;
        wait_mark(cons, enq_mark[s], enq_value[s], "DeQue", line);
        return s;
    }
    void free_slot(int32_t s, uint32_t line) {
        if (s < 0 || s >= num || (st[s] != St::Dequeued && st[s] != St::Allocated)) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, std::string(kind) + "::FreeTensor of a tensor it does not hold");
        }
        st[s] = St::Free;
        set_mark(cons, free_mark[s], free_value[s], "FreeTensor", line);
    }

private:
    static void set_mark(uint32_t eng, symsim::OpPtr &mark, symsim::Clock &value, const char *what, uint32_t line) {
        symsim::Pipes &ps = symsim::core().pipes;
        value = eng == symsim::kS ? ps.scalar_clock() : ps.published(eng);
        mark = ps.issue(eng, symsim::Op::kSetMark, what, line, nullptr);
    }
    static void wait_mark(uint32_t eng, const symsim::OpPtr &mark, const symsim::Clock &value, const char *what,
                          uint32_t line) {
        symsim::Pipes &ps = symsim::core().pipes;
        ps.start[eng].join(value);
        symsim::OpPtr w = ps.issue(eng, symsim::Op::kWaitMark, what, line, nullptr);
        w->waits_on = mark;
        ps.progress();
    }
};

}  // namespace detail

template <TPosition Pos, int32_t Depth>
class TQue : public detail::QueueBase {
public:
    static_assert(Depth >= 1 && Depth <= 8, "queue depth 1..8");
    template <typename T>
    LocalTensor<T> AllocTensor(uint32_t line = __builtin_LINE()) {
        int32_t s = alloc(line);
        return LocalTensor<T>(reinterpret_cast<T *>(base + s * len), len / sizeof(T), this, s, pos);
    }
    template <typename T>
    void EnQue(const LocalTensor<T> &t, uint32_t line = __builtin_LINE()) {
        if (t.owner() != this) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "EnQue of a tensor from another queue");
        }
        enque(t.slot(), line);
    }
    template <typename T>
    LocalTensor<T> DeQue(uint32_t line = __builtin_LINE()) {
        int32_t s = deque(line);
        return LocalTensor<T>(reinterpret_cast<T *>(base + s * len), len / sizeof(T), this, s, pos);
    }
    template <typename T>
    void FreeTensor(const LocalTensor<T> &t, uint32_t line = __builtin_LINE()) {
        if (t.owner() != this) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "FreeTensor of a tensor from another queue");
        }
        free_slot(t.slot(), line);
    }
};

/// A queue between two positions: VECIN -> VECOUT moves a tile MTE2 -> MTE3 without vector work
/// (the EnQue/DeQue pair orders MTE3 after MTE2, not the vector unit).
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
        return LocalTensor<T>(reinterpret_cast<T *>(base_), len_ / sizeof(T), nullptr, -1, Pos);
    }
    uint8_t *base_ = nullptr;
    uint32_t len_ = 0;
};

/// Carves queue buffers out of the core's unified buffer (vector cores) or L1/L0 (Cube cores);
/// overflow is the device's hard limit.
class TPipe {
public:
    TPipe() { free_buffers(symsim::core()); }
    ~TPipe() {
        symsim::CoreState *c = symsim::current_slot();
        if (c != nullptr) {
            free_buffers(*c);
        }
    }
    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;

    template <TPosition Pos, int32_t Depth>
    void InitBuffer(TQue<Pos, Depth> &q, int32_t num, uint32_t len) {
        init_queue(q, Pos, Pos, num, len, "TQue");
    }
    template <TPosition Src, TPosition Dst, int32_t Depth>
    void InitBuffer(TQueBind<Src, Dst, Depth> &q, int32_t num, uint32_t len) {
        init_queue(q, Src, Dst, num, len, "TQueBind");
        if (Depth < num) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "InitBuffer with more buffers than the queue depth");
        }
    }
    template <TPosition Pos>
    void InitBuffer(TBuf<Pos> &b, uint32_t len) {
        b.base_ = carve(round32(len), Pos, std::string("TBuf<") + detail::position_name(Pos) + ">");
        b.len_ = round32(len);
    }

private:
    static uint32_t round32(uint32_t n) { return (n + 31u) & ~31u; }
    /// Every buffer carved on `c` is free again (a pipe owns the core's buffers for its life).
    static void free_buffers(symsim::CoreState &c) {
        c.ub_used = 0;
        c.l1.used = c.l0a.used = c.l0b.used = c.l0c.used = 0;
        c.regions.clear();
    }
    void init_queue(detail::QueueBase &q, TPosition src, TPosition dst, int32_t num, uint32_t len, const char *kind) {
        if (num < 1 || num > detail::QueueBase::kMax) {
            symsim::fail(SYMSCHED_SIM_E_QUEUE_MISUSE, "InitBuffer with more buffers than the queue depth");
        }
        std::string label = std::string(kind) + "<" + detail::position_name(src);
        if (dst != src) {
            label += std::string(", ") + detail::position_name(dst);
        }
        label += ">";
        q.init(carve(static_cast<uint64_t>(num) * round32(len), src, label), num, round32(len));
        q.pos = src;
        q.kind = kind;
        detail::position_pipes(src, q.prod, q.cons);
        if (src == TPosition::VECIN && dst == TPosition::VECOUT) {
            q.cons = symsim::kMte3;
        }
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
    uint8_t *carve(uint64_t bytes, TPosition pos, const std::string &kind) {
        symsim::CoreState &c = symsim::core();
        uint32_t same = 1;
        for (const symsim::Region &r : c.regions) {
            same += r.label.find(kind) != std::string::npos ? 1u : 0u;
        }
        std::string label = kind + " #" + std::to_string(same);
        symsim::Pool *pool = cube_pool(pos);
        if (pool == nullptr) {
            symsim::need_core(symsim::CoreType::kAiv, "a unified-buffer queue");
            if (c.ub_used + bytes > SYMSIM_UB_BYTES) {
                symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW,
                             "TPipe::InitBuffer needs " + std::to_string(c.ub_used + bytes) +
                                 " bytes of unified buffer; the core has " + std::to_string(SYMSIM_UB_BYTES));
            }
            uint8_t *p = c.ub + c.ub_used;
            c.ub_used += static_cast<uint32_t>(bytes);
            c.regions.push_back(symsim::Region{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes,
                                               "UB " + label});
            return p;
        }
        symsim::need_core(symsim::CoreType::kAic, "an L1/L0 queue");
        // L0A/L0B fractals and L0C results are addressed in 512 / 1024-byte units.
        uint32_t align = pos == TPosition::CO1 ? 1024u : 512u;
        pool->used = (pool->used + align - 1) / align * align;
        if (pool->used + bytes > pool->cap) {
            symsim::fail(SYMSCHED_SIM_E_CUBE_OVERFLOW,
                         std::string("TPipe::InitBuffer needs ") + std::to_string(pool->used + bytes) + " bytes of " +
                             pool->name + "; the core has " + std::to_string(pool->cap));
        }
        uint8_t *p = pool->base + pool->used;
        pool->used += static_cast<uint32_t>(bytes);
        c.regions.push_back(symsim::Region{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes,
                                           std::string(pool->name) + " " + label});
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
template <typename T>
void ub_operand(const LocalTensor<T> &t, const char *what) {
    symsim::need_core(symsim::CoreType::kAiv, what);
    if (cube_position(t.position())) {
        symsim::fail(SYMSCHED_SIM_E_CUBE_POSITION, std::string(what) + ": operand in " + position_name(t.position()) +
                                                       ", not in the unified buffer");
    }
}
/// GM <-> UB copy on MTE2 (in) or MTE3 (out).
inline void copy(uint32_t eng, void *dst, const void *src, uint64_t bytes, const char *what, uint32_t line) {
    if (eng == symsim::kMte3) {
        symsim::note_gm_write(eng, dst, bytes, what, line);
        symsim::note_local_write(eng, dst, bytes, what, line);
    }
    symsim::issue(eng, what, line, [=]() {
        symsim::touch(src, bytes, false);
        symsim::touch(dst, bytes, true);
        std::memcpy(dst, src, bytes);
    });
}
}  // namespace detail

/// GM -> UB.
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count, uint32_t line = __builtin_LINE()) {
    const char *what = "DataCopy GM->UB";
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    detail::ub_operand(dst, what);
    detail::aligned32(bytes, what);
    dst.need(count, what);
    symsim::check_local_gm(src.GetPhyAddr(), bytes, what);
    detail::copy(symsim::kMte2, dst.GetPhyAddr(), src.GetPhyAddr(), bytes, what, line);
}

/// UB -> GM.
template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count, uint32_t line = __builtin_LINE()) {
    const char *what = "DataCopy UB->GM";
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    detail::ub_operand(src, what);
    detail::aligned32(bytes, what);
    src.need(count, what);
    symsim::check_local_gm(dst.GetPhyAddr(), bytes, what);
    symsim::check_local_write(dst.GetPhyAddr(), bytes, what);
    detail::copy(symsim::kMte3, dst.GetPhyAddr(), src.GetPhyAddr(), bytes, what, line);
}

/// GM -> UB of any byte length (the tail of a tile).
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &, uint32_t line = __builtin_LINE()) {
    const char *what = "DataCopyPad GM->UB";
    detail::ub_operand(dst, what);
    detail::single_block(p, what);
    if (p.blockLen % sizeof(T) != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNALIGNED, "DataCopyPad length not a whole number of elements");
    }
    dst.need((p.blockLen + 31u) / 32u * 32u / sizeof(T), what);
    symsim::check_local_gm(src.GetPhyAddr(), p.blockLen, what);
    detail::copy(symsim::kMte2, dst.GetPhyAddr(), src.GetPhyAddr(), p.blockLen, what, line);
}

/// UB -> GM of any byte length.
template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p,
                 uint32_t line = __builtin_LINE()) {
    const char *what = "DataCopyPad UB->GM";
    detail::ub_operand(src, what);
    detail::single_block(p, what);
    if (p.blockLen % sizeof(T) != 0) {
        symsim::fail(SYMSCHED_SIM_E_UNALIGNED, "DataCopyPad length not a whole number of elements");
    }
    src.need(p.blockLen / sizeof(T), what);
    symsim::check_local_gm(dst.GetPhyAddr(), p.blockLen, what);
    symsim::check_local_write(dst.GetPhyAddr(), p.blockLen, what);
    detail::copy(symsim::kMte3, dst.GetPhyAddr(), src.GetPhyAddr(), p.blockLen, what, line);
}

// ---- vector instructions (the V engine) ----
namespace detail {
template <typename T>
void vector_type() {
    static_assert(std::is_same<T, float>::value || std::is_same<T, int32_t>::value,
                  "the simulation models float and int32_t vector arithmetic only");
}
/// The documented address-overlap rule: an operand and the destination are identical or disjoint.
template <typename D, typename S>
void overlap_rule(const LocalTensor<D> &dst, uint64_t dbytes, const LocalTensor<S> &src, uint64_t sbytes,
                  const char *what) {
    const void *d = dst.GetPhyAddr();
    const void *s = src.GetPhyAddr();
    if (symsim::overlaps(d, dbytes, s, sbytes) && !(d == s && dbytes == sbytes)) {
        symsim::fail(SYMSCHED_SIM_E_OPERAND_OVERLAP,
                     std::string(what) + ": the destination partly overlaps a source (operands must be identical or "
                                         "disjoint)");
    }
}
template <typename T>
void need3(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count,
           const char *what) {
    ub_operand(dst, what);
    if (count < 0) {
        symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW, std::string(what) + " with a negative count");
    }
    dst.need(count, what);
    a.need(count, what);
    b.need(count, what);
    overlap_rule(dst, count * sizeof(T), a, count * sizeof(T), what);
    overlap_rule(dst, count * sizeof(T), b, count * sizeof(T), what);
}
inline uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
/// Where the boundary-value tables say only "nan" ("nan不区分正负": sign and payload are not
/// specified), the simulation returns what IEEE 754 arithmetic on the host gives: a NaN operand,
/// quieted. Code must not depend on the bits (the lowering's folds do not: see Fold).
inline float nan_of(float x, float y) { return bits_f32(f32_bits(std::isnan(x) ? x : y) | 0x00400000u); }

/// A binary vector instruction: validate now, run on V later.
template <typename T, typename F>
void binary(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, int32_t count,
            const char *what, uint32_t line, F f) {
    vector_type<T>();
    need3(dst, a, b, count, what);
    if (count == 0) {
        return;  // documented: count 0 is a NOP on Atlas A2
    }
    T *d = dst.GetPhyAddr();
    const T *x = a.GetPhyAddr();
    const T *y = b.GetPhyAddr();
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    symsim::issue(symsim::kV, what, line, [=]() mutable {
        symsim::touch(x, bytes, false);
        symsim::touch(y, bytes, false);
        symsim::touch(d, bytes, true);
        for (int32_t i = 0; i < count; ++i) {
            d[i] = f(x[i], y[i]);
        }
    });
}
}  // namespace detail

/// dst = a + b. float: IEEE round to nearest even (the INF/NAN mode tables agree with IEEE 754);
/// int32: the documented default (INF/NAN, non-saturating) mode wraps, e.g. MAX + MAX = -2.
template <typename T>
void Add(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, const int32_t &count,
         uint32_t line = __builtin_LINE()) {
    detail::binary(dst, a, b, count, "Add", line, [](T x, T y) -> T {
        if constexpr (std::is_same<T, int32_t>::value) {
            return static_cast<int32_t>(static_cast<uint32_t>(x) + static_cast<uint32_t>(y));
        } else {
            return x + y;
        }
    });
}

/// Max as the boundary-value table gives it: NaN from either side gives NaN; +0 beats -0.
template <typename T>
void Max(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, const int32_t &count,
         uint32_t line = __builtin_LINE()) {
    detail::binary(dst, a, b, count, "Max", line, [](T x, T y) -> T {
        if constexpr (std::is_same<T, float>::value) {
            if (std::isnan(x) || std::isnan(y)) {
                return detail::nan_of(x, y);
            }
            if (x == 0.0f && y == 0.0f) {
                return (std::signbit(x) && std::signbit(y)) ? -0.0f : 0.0f;
            }
        }
        return y > x ? y : x;
    });
}

/// Min as the boundary-value table gives it: NaN from either side gives NaN; -0 beats +0.
template <typename T>
void Min(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, const int32_t &count,
         uint32_t line = __builtin_LINE()) {
    detail::binary(dst, a, b, count, "Min", line, [](T x, T y) -> T {
        if constexpr (std::is_same<T, float>::value) {
            if (std::isnan(x) || std::isnan(y)) {
                return detail::nan_of(x, y);
            }
            if (x == 0.0f && y == 0.0f) {
                return (std::signbit(x) || std::signbit(y)) ? -0.0f : 0.0f;
            }
        }
        return y < x ? y : x;
    });
}

/// dst = a / b (float). Special values as the boundary-value table (IEEE 754). The A2 page
/// states no accuracy; the only documented bound is the default single-instruction algorithm's
/// "最大精度误差为1ulp" (Div page, DivConfig). So an inexact quotient comes back correctly
/// rounded or one ulp away, as the core's seeded schedule picks: code that needs the runtime's
/// correctly rounded quotient must not use the vector Div.
template <typename T>
void Div(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, const int32_t &count,
         uint32_t line = __builtin_LINE()) {
    static_assert(std::is_same<T, float>::value, "the simulation models float Div only");
    uint64_t pick = symsim::core().pipes.next();
    detail::binary(dst, a, b, count, "Div", line, [pick](float x, float y) mutable -> float {
        float q = x / y;
        if (!std::isfinite(q) || q == 0.0f || std::fma(-q, y, x) == 0.0f) {
            return q;
        }
        pick = pick * 6364136223846793005ull + 1442695040888963407ull;
        switch (pick >> 62) {
        case 1: return std::nextafter(q, INFINITY);
        case 2: return std::nextafter(q, -INFINITY);
        default: return q;
        }
    });
}

/// Fill `count` elements of `dst` with `value`.
template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &value, const int32_t &count, uint32_t line = __builtin_LINE()) {
    detail::vector_type<T>();
    detail::ub_operand(dst, "Duplicate");
    if (count < 0) {
        symsim::fail(SYMSCHED_SIM_E_UB_OVERFLOW, "Duplicate with a negative count");
    }
    dst.need(count, "Duplicate");
    T *d = dst.GetPhyAddr();
    T v = value;
    uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
    symsim::issue(symsim::kV, "Duplicate", line, [=]() {
        symsim::touch(d, bytes, true);
        for (int32_t i = 0; i < count; ++i) {
            d[i] = v;
        }
    });
}

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

/// Bit i of the mask (byte i/8, least significant bit first) = src0[i] cmp src1[i]. Atlas A2:
/// float all modes, int32 EQ only. As documented, only the whole 256-byte blocks of `count`
/// elements are compared (the rest of the mask is left as it was), NaN compares false in every
/// mode, NE included (the table notes that NE with NaN gives 0, unlike IEEE 754), and -0 == +0.
template <typename T, typename U>
void Compare(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, CMPMODE mode,
             uint32_t count, uint32_t line = __builtin_LINE()) {
    static_assert(std::is_same<T, float>::value || std::is_same<T, int32_t>::value,
                  "the simulation models float (and int32 EQ) Compare only");
    static_assert(std::is_same<U, uint8_t>::value || std::is_same<U, int8_t>::value, "Compare writes a uint8 mask");
    const char *what = "Compare";
    detail::ub_operand(dst, what);
    if (std::is_same<T, int32_t>::value && mode != CMPMODE::EQ) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, "Compare on int32_t supports only CMPMODE::EQ on Atlas A2");
    }
    uint32_t n = static_cast<uint32_t>(static_cast<uint64_t>(count) * sizeof(T) / 256u * 256u / sizeof(T));
    src0.need(n, what);
    src1.need(n, what);
    dst.need((n + 7) / 8, what);
    if (n == 0) {
        return;
    }
    uint8_t *m = reinterpret_cast<uint8_t *>(dst.GetPhyAddr());
    const T *x = src0.GetPhyAddr();
    const T *y = src1.GetPhyAddr();
    symsim::issue(symsim::kV, what, line, [=]() {
        symsim::touch(x, n * sizeof(T), false);
        symsim::touch(y, n * sizeof(T), false);
        symsim::touch(m, n / 8, true);
        for (uint32_t i = 0; i < n; i += 8) {
            uint8_t byte = 0;
            for (uint32_t b = 0; b < 8; ++b) {
                T a = x[i + b], c = y[i + b];
                bool r = false;
                bool nan = false;
                if constexpr (std::is_same<T, float>::value) {
                    nan = std::isnan(a) || std::isnan(c);
                }
                if (!nan) {
                    switch (mode) {
                    case CMPMODE::LT: r = a < c; break;
                    case CMPMODE::GT: r = a > c; break;
                    case CMPMODE::EQ: r = a == c; break;
                    case CMPMODE::LE: r = a <= c; break;
                    case CMPMODE::GE: r = a >= c; break;
                    default: r = a != c; break;
                    }
                }
                byte |= static_cast<uint8_t>(r) << b;
            }
            m[i / 8] = byte;
        }
    });
}

/// dst[i] = mask bit i ? src0[i] : src1[i] (VSEL_TENSOR_TENSOR_MODE; half/float on Atlas A2).
/// Elements are moved as bits, so a selected NaN keeps its payload.
template <typename T, typename U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
            const LocalTensor<T> &src1, SELMODE mode, uint32_t count, uint32_t line = __builtin_LINE()) {
    static_assert(std::is_same<T, float>::value, "the simulation models float Select only");
    const char *what = "Select";
    detail::ub_operand(dst, what);
    if (mode != SELMODE::VSEL_TENSOR_TENSOR_MODE) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, "Select: only VSEL_TENSOR_TENSOR_MODE is simulated");
    }
    dst.need(count, what);
    src0.need(count, what);
    src1.need(count, what);
    selMask.need((count * 1ull + 8 * sizeof(U) - 1) / (8 * sizeof(U)), what);
    detail::overlap_rule(dst, count * sizeof(T), src0, count * sizeof(T), what);
    detail::overlap_rule(dst, count * sizeof(T), src1, count * sizeof(T), what);
    if (count == 0) {
        return;
    }
    T *d = dst.GetPhyAddr();
    const uint8_t *m = reinterpret_cast<const uint8_t *>(selMask.GetPhyAddr());
    const T *x = src0.GetPhyAddr();
    const T *y = src1.GetPhyAddr();
    symsim::issue(symsim::kV, what, line, [=]() {
        symsim::touch(m, (count + 7) / 8, false);
        symsim::touch(x, count * sizeof(T), false);
        symsim::touch(y, count * sizeof(T), false);
        symsim::touch(d, count * sizeof(T), true);
        for (uint32_t i = 0; i < count; ++i) {
            d[i] = ((m[i / 8] >> (i % 8)) & 1u) ? x[i] : y[i];
        }
    });
}

namespace detail {

inline uint16_t bf16_rne(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN, sign and top payload kept
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

inline float bf16_widen(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

inline uint16_t f16_rne(float x) {
    half h = static_cast<half>(x);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
}

/// What a conversion to a 16-bit float gives in the saturation mode (CTRL[48] = 0, the
/// aclrtFloatOverflowMode page: an inf result becomes the largest finite value of its sign, a
/// NaN result 0), from the Inf/NaN-mode bits `b`; `max_finite` is the format's 0x7bff / 0x7f7f.
inline uint16_t saturate16(uint16_t b, uint16_t exp_mask, uint16_t max_finite) {
    if ((b & exp_mask) != exp_mask || !symsim::saturating()) {
        return b;
    }
    if ((b & 0x7fffu & ~exp_mask) != 0) {
        return 0;
    }
    return static_cast<uint16_t>((b & 0x8000u) | max_finite);
}

inline float f16_widen(uint16_t b) {
    half h;
    std::memcpy(&h, &b, 2);
    return static_cast<float>(h);
}

// Neighbours in a 16-bit sign-magnitude format.
inline uint16_t next_up(uint16_t b) { return b == 0x8000u ? 1u : ((b & 0x8000u) ? b - 1u : b + 1u); }
inline uint16_t next_down(uint16_t b) { return b == 0u ? 0x8001u : ((b & 0x8000u) ? b + 1u : b - 1u); }

/// float -> 16-bit float (finite or infinite x) in a round mode, from the nearest-even result
/// and its neighbour. CAST_ODD: an inexact result takes the neighbour with an odd last bit.
inline uint16_t narrow(float x, RoundMode mode, uint16_t (*rne)(float), float (*widen)(uint16_t)) {
    uint16_t r = rne(x);
    float fr = widen(r);
    if (fr == x || mode == RoundMode::CAST_RINT || mode == RoundMode::CAST_NONE) {
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
    case RoundMode::CAST_ODD: return (lo & 1u) ? lo : hi;
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

inline const char *mode_name(RoundMode m) {
    switch (m) {
    case RoundMode::CAST_NONE: return "CAST_NONE";
    case RoundMode::CAST_RINT: return "CAST_RINT";
    case RoundMode::CAST_FLOOR: return "CAST_FLOOR";
    case RoundMode::CAST_CEIL: return "CAST_CEIL";
    case RoundMode::CAST_ROUND: return "CAST_ROUND";
    case RoundMode::CAST_TRUNC: return "CAST_TRUNC";
    default: return "CAST_ODD";
    }
}

[[noreturn]] inline void bad_mode(const char *pair, RoundMode m) {
    symsim::fail(SYMSCHED_SIM_E_CAST_MODE, std::string("Cast ") + pair + " with " + mode_name(m) +
                                               ": not a round mode the Atlas A2 Cast table lists for this pair");
}

}  // namespace detail

/// Element-wise conversion: the Atlas A2 pairs and round modes of the Cast page's A2 table
/// (half/bfloat16_t -> float: CAST_NONE only; float -> half: RINT/FLOOR/CEIL/ROUND/TRUNC/ODD/
/// NONE, NONE meaning RINT when lossy; float -> bfloat16_t: RINT/FLOOR/CEIL/ROUND/TRUNC).
/// Overflow gives inf in the Inf/NaN mode (CTRL[48] = 1, the A2 default) and the largest finite
/// value in the saturation mode, where a NaN result also becomes 0 (CTRL[48] = 0, what
/// aclrtSetDeviceSatMode can select for the process); read when the instruction executes. A
/// NaN input gives the documented "nan" (here the host's conversion, which keeps the sign and
/// the top payload bits: the device does not specify them).
template <typename D, typename S>
void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, const RoundMode &round, uint32_t count,
          uint32_t line = __builtin_LINE()) {
    const char *what = "Cast";
    detail::ub_operand(dst, what);
    dst.need(count, what);
    src.need(count, what);
    detail::overlap_rule(dst, count * sizeof(D), src, count * sizeof(S), what);
    RoundMode mode = round;
    if constexpr (std::is_same<D, float>::value && (std::is_same<S, half>::value || std::is_same<S, bfloat16_t>::value)) {
        if (mode != RoundMode::CAST_NONE) {
            detail::bad_mode("to float (widening)", mode);
        }
    } else if constexpr (std::is_same<D, half>::value && std::is_same<S, float>::value) {
        // every mode of the enum is listed for float -> half
    } else if constexpr (std::is_same<D, bfloat16_t>::value && std::is_same<S, float>::value) {
        if (mode == RoundMode::CAST_NONE || mode == RoundMode::CAST_ODD) {
            detail::bad_mode("float -> bfloat16_t", mode);
        }
    } else {
        static_assert(std::is_same<D, void>::value, "Cast pair not modelled by the simulation");
    }
    if (count == 0) {
        return;
    }
    D *d = dst.GetPhyAddr();
    const S *s = src.GetPhyAddr();
    symsim::issue(symsim::kV, what, line, [=]() {
        symsim::touch(s, count * sizeof(S), false);
        symsim::touch(d, count * sizeof(D), true);
        for (uint32_t i = 0; i < count; ++i) {
            if constexpr (std::is_same<D, float>::value && std::is_same<S, half>::value) {
                d[i] = static_cast<float>(s[i]);
            } else if constexpr (std::is_same<D, float>::value && std::is_same<S, bfloat16_t>::value) {
                d[i] = detail::bf16_widen(s[i].bits);
            } else if constexpr (std::is_same<D, half>::value && std::is_same<S, float>::value) {
                uint16_t b = std::isnan(s[i]) ? detail::f16_rne(s[i]) : detail::narrow(s[i], mode, detail::f16_rne, detail::f16_widen);
                b = detail::saturate16(b, 0x7c00u, 0x7bffu);
                std::memcpy(&d[i], &b, 2);
            } else {
                uint16_t b = std::isnan(s[i]) ? detail::bf16_rne(s[i])
                                              : detail::narrow(s[i], mode, detail::bf16_rne, detail::bf16_widen);
                d[i].bits = detail::saturate16(b, 0x7f80u, 0x7f7fu);
            }
        }
    });
}

// ---- synchronisation ----

/// SetFlag: when every earlier instruction of the source engine has finished, set the flag
/// (one bit per event and id: setting it again before the WaitFlag is a misuse).
template <HardEvent E>
void SetFlag(TEventID id, uint32_t line = __builtin_LINE(), const char *file = __builtin_FILE()) {
    if (id < 0 || id >= static_cast<TEventID>(symsim::kEventIds)) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "SetFlag event id out of range (0..7)");
    }
    symsim::note_sync_site(file, line);
    symsim::CoreState &c = symsim::core();
    symsim::FlagState &f = c.flags[static_cast<int>(E)][id];
    if (f.set) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "SetFlag (kernel line " + std::to_string(line) +
                                                      ") on a flag already set at line " + std::to_string(f.line) +
                                                      " and not yet waited for (the flag is one bit)");
    }
    uint32_t src, dst;
    detail::event_pipes(E, src, dst);
    symsim::Pipes &ps = c.pipes;
    f.set = true;
    f.line = line;
    if (src == symsim::kS) {
        f.value = ps.scalar_clock();
        f.mark = std::make_shared<symsim::Op>();
        f.mark->done = true;
    } else {
        f.value = ps.published(src);
        f.mark = ps.issue(src, symsim::Op::kSetMark, "SetFlag", line, nullptr);
        ps.progress();
    }
}

/// WaitFlag: the destination engine's later instructions wait until the flag is set, then clear it.
template <HardEvent E>
void WaitFlag(TEventID id, uint32_t line = __builtin_LINE(), const char *file = __builtin_FILE()) {
    if (id < 0 || id >= static_cast<TEventID>(symsim::kEventIds)) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "WaitFlag event id out of range (0..7)");
    }
    symsim::note_sync_site(file, line);
    symsim::CoreState &c = symsim::core();
    symsim::FlagState &f = c.flags[static_cast<int>(E)][id];
    if (!f.set) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE,
                     "WaitFlag (kernel line " + std::to_string(line) + ") without a matching SetFlag (the device waits forever)");
    }
    f.set = false;
    uint32_t src, dst;
    detail::event_pipes(E, src, dst);
    symsim::Pipes &ps = c.pipes;
    if (dst == symsim::kS) {
        symsim::OpPtr mark = f.mark;
        symsim::drain_until([&mark]() { return mark->done; }, "WaitFlag");
        symsim::Clock before = ps.k_obs;
        before.v[symsim::slot_of(c.index, symsim::kS)] = ps.n[symsim::kS];
        ps.k_obs.join(f.value);
        if (!f.value.leq(before)) {
            symsim::note_ordering_site(file, line);
        }
    } else {
        if (!f.value.leq(symsim::next_start(ps, dst))) {
            symsim::note_ordering_site(file, line);
        }
        ps.start[dst].join(f.value);
        symsim::OpPtr w = ps.issue(dst, symsim::Op::kWaitMark, "WaitFlag", line, nullptr);
        w->waits_on = f.mark;
        ps.progress();
    }
}

/// PipeBarrier<pipe>: later instructions of `pipe` start after its earlier ones finished;
/// PIPE_ALL: everything after starts after everything before.
template <pipe_t P>
void PipeBarrier(uint32_t line = __builtin_LINE(), const char *file = __builtin_FILE()) {
    symsim::note_sync_site(file, line);
    if (P == PIPE_S) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "PipeBarrier<PIPE_S>: documented to raise a hardware error");
    }
    if (P == PIPE_ALL) {
        if (symsim::barrier_all("PipeBarrier<PIPE_ALL>")) {
            symsim::note_ordering_site(file, line);
        }
        return;
    }
    symsim::Pipes &ps = symsim::core().pipes;
    uint32_t e = detail::pipe_engine(P);
    if (!ps.cumul[e].leq(symsim::next_start(ps, e))) {
        symsim::note_ordering_site(file, line);
    }
    ps.start[e].join(ps.cumul[e]);
}

namespace detail {
inline void cross_push(symsim::RankShared &r, uint32_t core_idx, uint16_t flag, const symsim::Clock &clk) {
    auto &q = r.cross[core_idx][flag];
    if (q.size() >= symsim::kCrossMax) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "CrossCoreSetFlag: flag " + std::to_string(flag) + " of core " +
                                                      std::to_string(core_idx) + " set more than 15 times unwaited");
    }
    q.push_back(clk);
}
}  // namespace detail

/// CrossCoreSetFlag<mode, pipe>(flagId), when every earlier instruction of `pipe` has finished.
/// Mode 0: all AIV (or all AIC) cores; mode 1: the AIVs of one AI Core; mode 2: the AIC and the
/// AIVs of one AI Core (the AIC's set releases each AIV once; all AIVs' sets release the AIC).
template <uint8_t modeId, pipe_t P>
void CrossCoreSetFlag(uint16_t flagId, uint32_t line = __builtin_LINE(), const char *file = __builtin_FILE()) {
    static_assert(modeId <= 2, "Atlas A2 supports cross-core modes 0, 1 and 2");
    static_assert(P != PIPE_S && P != PIPE_ALL, "CrossCoreSetFlag: PIPE_S and PIPE_ALL are not supported");
    symsim::note_sync_site(file, line);
    if (flagId >= symsim::kCrossFlags) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "CrossCoreSetFlag: flagId out of range 0..10");
    }
    symsim::CoreState &c = symsim::core();
    symsim::RankShared *r = c.rank;
    if (modeId == 2 && r->n_aic == 0) {
        symsim::fail(SYMSCHED_SIM_E_CORE_TYPE, "CrossCoreSetFlag mode 2 in a kernel without Cube cores");
    }
    uint32_t e = detail::pipe_engine(P);
    symsim::Clock value = c.pipes.published(e);
    uint32_t me = c.index;
    bool aic = c.type == symsim::CoreType::kAic;
    symsim::OpPtr mark = c.pipes.issue(e, symsim::Op::kSetMark, "CrossCoreSetFlag", line, [=]() {
        std::lock_guard<std::mutex> g(r->mu);
        uint32_t ratio = r->n_aic > 0 ? r->n_aiv / r->n_aic : 1;
        if (modeId == 0 || modeId == 1) {
            // Mode 1 groups the AIVs of one AI Core; mode 0 all cores of the type.
            uint32_t lo = aic ? r->n_aiv : 0, hi = aic ? r->n_aiv + r->n_aic : r->n_aiv;
            uint32_t key = aic ? 1 : 0;
            symsim::RankShared::Gather *gth = &r->mode0[key][flagId];
            if (modeId == 1) {
                uint32_t grp = me / ratio;
                lo = grp * ratio;
                hi = lo + ratio;
                gth = &r->mode1[grp][flagId];
            }
            gth->count++;
            gth->clk.join(value);
            if (gth->count == hi - lo) {
                for (uint32_t i = lo; i < hi; ++i) {
                    detail::cross_push(*r, i, flagId, gth->clk);
                }
                *gth = symsim::RankShared::Gather{};
            }
        } else if (aic) {
            uint32_t grp = me - r->n_aiv;
            for (uint32_t i = grp * ratio; i < (grp + 1) * ratio; ++i) {
                detail::cross_push(*r, i, flagId, value);
            }
        } else {
            uint32_t grp = me / ratio;
            symsim::RankShared::Gather &gth = r->mode2[grp][flagId];
            gth.count++;
            gth.clk.join(value);
            if (gth.count == ratio) {
                detail::cross_push(*r, r->n_aiv + grp, flagId, gth.clk);
                gth = symsim::RankShared::Gather{};
            }
        }
        r->cv.notify_all();
    });
    (void)mark;
    c.pipes.progress();
}

namespace detail {
/// Under `r.mu`: every core of the rank has returned or is blocked on a wait that is not met.
/// A core that is still running (or waiting on a peer's signal) may yet set a flag; a blocked
/// core has drained its engines first, so no set of its is still queued.
inline bool all_cores_stuck(symsim::RankShared &r) {
    for (uint32_t i = 0; i < r.n_aiv + r.n_aic; ++i) {
        if (r.returned[i]) {
            continue;
        }
        if (r.blocked[i] == nullptr || (*r.blocked[i])()) {
            return false;
        }
    }
    return true;
}

/// Block this core (every engine, on Atlas A2) until `ready()`; what `take()` returns becomes
/// known finished. The core first runs everything it issued, so its own sets are out.
template <typename Ready, typename Take>
bool block_core(const char *what, Ready ready, Take take) {
    symsim::drain_all(what);
    symsim::CoreState &c = symsim::core();
    symsim::RankShared &r = *c.rank;
    symsim::Clock got;
    {
        std::unique_lock<std::mutex> lk(r.mu);
        const std::function<bool()> waiting = ready;
        // Deregisters on every way out (a throw included): the frame holding `waiting` ends.
        struct Blocked {
            symsim::RankShared &r;
            uint32_t i;
            ~Blocked() { r.blocked[i] = nullptr; }
        } blocked{r, c.index};
        r.blocked[c.index] = &waiting;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (!ready()) {
            if (r.aborted.load()) {
                throw symsim::Error{SYMSCHED_SIM_E_WAIT_FAILED,
                                    std::string(what) + " gave up: another core of this rank failed", true};
            }
            if (detail::all_cores_stuck(r)) {
                symsim::fail(SYMSCHED_SIM_E_WAIT_FAILED,
                             std::string(what) + ": the cores deadlock — every core of the rank has returned or "
                                                 "waits on a cross-core flag or SyncAll that no core will set");
            }
            if (r.cv.wait_until(lk, deadline) == std::cv_status::timeout && !ready()) {
                symsim::fail(SYMSCHED_SIM_E_WAIT_FAILED,
                             std::string(what) + " waited 120 s: the cores deadlock (a flag nobody sets)");
            }
        }
        got = take();
    }
    symsim::Pipes &ps = c.pipes;
    symsim::Clock before = ps.k_obs;
    before.v[symsim::slot_of(c.index, symsim::kS)] = ps.n[symsim::kS];
    ps.k_obs.join(got);
    for (uint32_t e = 0; e < symsim::kEngines; ++e) {
        ps.start[e].join(ps.k_obs);
    }
    // Returns whether the wait ordered this core after something it did not know finished.
    return !got.leq(before);
}
}  // namespace detail

/// CrossCoreWaitFlag(flagId): on Atlas A2 it blocks every pipe of the core until the flag's
/// counter is non-zero, then decrements it.
template <uint8_t modeId = 0, pipe_t P = PIPE_S>
void CrossCoreWaitFlag(uint16_t flagId, uint32_t line = __builtin_LINE(), const char *file = __builtin_FILE()) {
    symsim::note_sync_site(file, line);
    if (flagId >= symsim::kCrossFlags) {
        symsim::fail(SYMSCHED_SIM_E_EVENT_MISUSE, "CrossCoreWaitFlag: flagId out of range 0..10");
    }
    symsim::CoreState &c = symsim::core();
    auto &q = c.rank->cross[c.index][flagId];
    bool learned = detail::block_core(
        "CrossCoreWaitFlag", [&q]() { return !q.empty(); },
        [&q]() {
            symsim::Clock k = q.front();
            q.erase(q.begin());
            return k;
        });
    if (learned) {
        symsim::note_ordering_site(file, line);
    }
}

/// SyncAll (hardware form): every AIV core (isAIVOnly) or every core of the rank has reached it,
/// with all of its pipes drained (the default config triggers and waits on PIPE_ALL).
template <bool isAIVOnly = true>
void SyncAll(uint32_t line = __builtin_LINE(), const char *file = __builtin_FILE()) {
    symsim::note_sync_site(file, line);
    symsim::barrier_all("SyncAll");
    symsim::CoreState &c = symsim::core();
    symsim::RankShared &r = *c.rank;
    if (isAIVOnly && c.type != symsim::CoreType::kAiv) {
        symsim::fail(SYMSCHED_SIM_E_CORE_TYPE, "SyncAll<true> on a Cube core");
    }
    uint32_t members = isAIVOnly ? r.n_aiv : r.n_aiv + r.n_aic;
    uint64_t gen;
    {
        std::lock_guard<std::mutex> g(r.mu);
        gen = r.sync_gen;
        r.sync_acc.join(c.pipes.k_obs);
        if (++r.sync_count == members) {
            r.sync_done = r.sync_acc;
            r.sync_acc = symsim::Clock{};
            r.sync_count = 0;
            ++r.sync_gen;
            r.cv.notify_all();
        }
    }
    detail::block_core(
        "SyncAll", [&r, gen]() { return r.sync_gen != gen; }, [&r]() { return r.sync_done; });
    (void)line;
}

}  // namespace AscendC

/// The core type of the running core (CANN: a per-compilation constant).
#define g_coreType (::AscendC::SymsimCoreType())
#define ASCEND_IS_AIV (g_coreType == ::AscendC::AIV)
#define ASCEND_IS_AIC (g_coreType == ::AscendC::AIC)
/// The kernel type is given to the launch (symsim::launch); in a kernel body it only checks
/// that the running core is one the type launches.
#define KERNEL_TASK_TYPE_DEFAULT(t) ::symsim::check_kernel_type(t)

namespace symsim {
inline void check_kernel_type(uint32_t t) {
    bool aic = core().type == CoreType::kAic;
    bool ok = aic ? (t != KERNEL_TYPE_AIV_ONLY && t != KERNEL_TYPE_MIX_AIV_1_0)
                  : (t != KERNEL_TYPE_AIC_ONLY && t != KERNEL_TYPE_MIX_AIC_1_0);
    if (!ok) {
        fail(SYMSCHED_SIM_E_CORE_TYPE, "KERNEL_TASK_TYPE_DEFAULT does not launch this core type");
    }
}
}  // namespace symsim

// The Cube-unit subset (Mmad & co.), which CANN also declares through kernel_operator.h.
#include "cube.h"

#endif  // SYMSCHED_SIM_KERNEL_OPERATOR_H
