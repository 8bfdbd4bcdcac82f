// shmem.h — host simulation of the CANN shmem (aclshmem) device calls symsched's generated
// kernels emit, mapped onto the launcher's device table (symsched_device.h). Non-blocking puts
// and gets are engine instructions (MTE2 reads a GM source or fills UB, MTE3 sends from UB)
// that run whenever the schedule lets their engine get to them, at the latest at
// aclshmem_quiet, so a missing quiet also shows up as stale data.
#ifndef SYMSCHED_SIM_SHMEM_H
#define SYMSCHED_SIM_SHMEM_H

#include <cstdint>
#include <cstring>
#include <string>

#include "kernel_operator.h"
#include "symsched_sim_core.h"

typedef int aclshmem_team_t;
#define ACLSHMEM_TEAM_WORLD 0
#define ACLSHMEM_TEAM_INVALID (-1)

enum { ACLSHMEM_SIGNAL_SET = 0, ACLSHMEM_SIGNAL_ADD = 1 };
enum { ACLSHMEM_CMP_EQ = 0, ACLSHMEM_CMP_NE, ACLSHMEM_CMP_GT, ACLSHMEM_CMP_GE, ACLSHMEM_CMP_LT, ACLSHMEM_CMP_LE };

namespace symsim {

inline void check_pe(int32_t pe, const char *what) {
    if (pe < 0 || pe >= dev().n_pes) {
        fail(SYMSCHED_SIM_E_BAD_ADDRESS, std::string(what) + ": PE " + std::to_string(pe) + " outside the team of " +
                                             std::to_string(dev().n_pes));
    }
}

inline void check_team(aclshmem_team_t team, const char *what) {
    if (team != ACLSHMEM_TEAM_WORLD) {
        fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": only ACLSHMEM_TEAM_WORLD (the launch group) is simulated");
    }
}

/// Peer address of a local symmetric address; the device requires symmetric destinations.
inline void *remote(const void *local_sym, uint64_t bytes, int32_t pe, const char *what) {
    check_pe(pe, what);
    const symsched_device &d = dev();
    int32_t owner = d.addr_pe(d.ctx, local_sym, bytes == 0 ? 1 : bytes);
    if (owner != d.my_pe) {
        fail(SYMSCHED_SIM_E_BAD_ADDRESS,
             std::string(what) + ": the symmetric address must be a local heap address (got one owned by " +
                 (owner < 0 ? std::string("no PE") : "PE " + std::to_string(owner)) + ")");
    }
    void *p = d.peer_ptr(d.ctx, local_sym, pe);
    if (p == nullptr) {
        fail(SYMSCHED_SIM_E_BAD_ADDRESS, std::string(what) + ": address not in the symmetric heap");
    }
    return p;
}

/// Local operand of a shmem call: this PE's GM or UB, never a peer's memory.
inline void check_local_operand(const void *p, uint64_t bytes, const char *what) {
    if (!in_ub(p, bytes)) {
        check_local_gm(p, bytes, what);
    }
}

/// Record an outstanding non-blocking operation of this core.
inline void add_pending(const PendingPut &pp) {
    CoreState &c = core();
    c.pending.push_back(pp);
    if (!pp.is_get && !pp.delivered) {
        std::lock_guard<std::mutex> g(c.rank->mu);
        c.rank->puts.emplace_back(c.index, pp.who);
    }
}

/// A GM -> GM put: shmem's MTE engine reads the source with MTE2 (and writes the peer through
/// its own UB staging buffer), some time before the next aclshmem_quiet.
inline void put_nbi(void *dst_local_sym, const void *src, uint64_t bytes, int32_t pe, const char *what, uint32_t line) {
    need_core(CoreType::kAiv, what);
    void *dst = remote(dst_local_sym, bytes, pe, what);
    check_local_operand(src, bytes, what);
    note_put(dst, bytes, pe, what, line);
    OpPtr op = issue(kMte2, what, line, [=]() {
        touch(src, bytes, false);
        std::memcpy(dst, src, bytes);
    });
    add_pending(PendingPut{dst, src, bytes, pe, false, false, op->who});
}

/// A signal publishes everything this rank wrote before it: no plain put of this core may be
/// outstanding, nor one of another core ordered before this signal, and every local GM write
/// must be known finished.
inline void check_signal(const char *what, int32_t pe) {
    if (has_undelivered()) {
        fail(SYMSCHED_SIM_E_SIGNAL_BEFORE_QUIET,
             std::string(what) + " to PE " + std::to_string(pe) +
                 " while non-blocking puts are outstanding: the signal may overtake the data (aclshmem_quiet first)");
    }
    CoreState &c = core();
    Clock k = c.pipes.scalar_clock();
    {
        std::lock_guard<std::mutex> g(c.rank->mu);
        for (const auto &p : c.rank->puts) {
            if (p.first != c.index && happens_before(p.second, k)) {
                fail(SYMSCHED_SIM_E_SIGNAL_BEFORE_QUIET,
                     std::string(what) + " to PE " + std::to_string(pe) + " while " + who_text(p.second) +
                         " of core " + std::to_string(p.first) + ", ordered before it, is not completed by aclshmem_quiet");
            }
        }
    }
    check_published(what);
}

/// A wait observed `value` on the word at `word`: the scalar unit learns which puts the signals
/// that made it so knew complete.
inline void acquire(const void *word, int32_t value) {
    KnowPtr k = acquire_signal(reinterpret_cast<uintptr_t>(word), core().rank->world, value);
    if (k) {
        Pipes &ps = core().pipes;
        ps.k_obs.rem = know_join(ps.k_obs.rem, k);
        learn_local_writes(k);
    }
    // A signal from another core of this launch of the rank (one channel to another) orders
    // this core after everything its sender's scalar unit knew finished, as a cross-core flag
    // would: its local GM writes and its reads of bytes this core may now overwrite.
    RankShared &r = *core().rank;
    if (r.world != 0) {
        for (const LocalClockPtr &l : acquire_local_clocks(reinterpret_cast<uintptr_t>(word), r.world, r.run, value)) {
            core().pipes.k_obs.join(l->clk);
        }
    }
}

inline void signal(int32_t *sig_local, int32_t value, int op, int32_t pe, const char *what) {
    need_core(CoreType::kAiv, what);
    check_signal(what, pe);
    if (op != ACLSHMEM_SIGNAL_SET && op != ACLSHMEM_SIGNAL_ADD) {
        fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": unknown sig_op");
    }
    auto *word = static_cast<int32_t *>(remote(sig_local, sizeof(int32_t), pe, what));
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    const symsched_device *d = &dev();
    // The signal carries the puts and the local GM writes (of every core of the rank) that the
    // scalar unit knows finished.
    KnowPtr k = know_join(core().pipes.k_obs.rem, local_knowledge(core().pipes.scalar_clock()));
    if (pe == d->my_pe && core().rank->world != 0) {
        auto local = std::make_shared<const LocalClock>(LocalClock{core().pipes.scalar_clock()});
        publish_self_signal(word, core().rank->world, core().rank->lc->epoch, pe, value, op, k, core().rank->run, local,
                            [&]() { d->signal_op(d->ctx, sig_local, value, op, pe); });
        return;
    }
    publish_signal(word, core().rank->world, core().rank->lc->epoch, pe, value, op, k,
                   [&]() { d->signal_op(d->ctx, sig_local, value, op, pe); });
}

}  // namespace symsim

inline int aclshmem_my_pe(void) { return symsim::dev().my_pe; }
inline int aclshmem_n_pes(void) { return symsim::dev().n_pes; }
inline int aclshmem_team_my_pe(aclshmem_team_t team) {
    symsim::check_team(team, "aclshmem_team_my_pe");
    return symsim::dev().my_pe;
}
inline int aclshmem_team_n_pes(aclshmem_team_t team) {
    symsim::check_team(team, "aclshmem_team_n_pes");
    return symsim::dev().n_pes;
}
inline int aclshmem_team_translate_pe(aclshmem_team_t src_team, int src_pe, aclshmem_team_t dest_team) {
    symsim::check_team(src_team, "aclshmem_team_translate_pe");
    symsim::check_team(dest_team, "aclshmem_team_translate_pe");
    return (src_pe >= 0 && src_pe < symsim::dev().n_pes) ? src_pe : -1;
}

inline __gm__ void *aclshmem_ptr(__gm__ void *ptr, int pe) {
    return symsim::remote(ptr, 1, pe, "aclshmem_ptr");
}

inline void aclshmem_putmem_nbi(__gm__ void *dst, __gm__ void *src, uint32_t elem_size, int32_t pe,
                                uint32_t line = __builtin_LINE()) {
    symsim::put_nbi(dst, src, elem_size, pe, "aclshmem_putmem_nbi", line);
}

/// The data, then the signal, delivered by one engine operation: the simulation delivers both
/// once the MTE2 queue reaches it (the scalar unit does not wait for it); the source stays
/// reserved until quiet.
inline void aclshmem_putmem_signal_nbi(__gm__ void *dst, __gm__ void *src, size_t elem_size, __gm__ int32_t *sig_addr,
                                       int32_t signal, int sig_op, int pe, uint32_t line = __builtin_LINE()) {
    const char *what = "aclshmem_putmem_signal_nbi";
    symsim::need_core(symsim::CoreType::kAiv, what);
    symsim::check_signal(what, pe);
    void *d = symsim::remote(dst, elem_size, pe, what);
    symsim::check_local_operand(src, elem_size, what);
    auto *word = static_cast<int32_t *>(symsim::remote(sig_addr, sizeof(int32_t), pe, what));
    if (sig_op != ACLSHMEM_SIGNAL_SET && sig_op != ACLSHMEM_SIGNAL_ADD) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, std::string(what) + ": unknown sig_op");
    }
    const symsched_device *dv = &symsim::dev();
    uint32_t seq = symsim::note_put(d, elem_size, pe, what, line);
    uint64_t source = symsim::put_source(symsim::core().rank->lc->run, symsim::core().index);
    uint64_t world = symsim::core().rank->world;
    uint64_t epoch = symsim::core().rank->lc->epoch;
    symsim::OpPtr op = symsim::issue(symsim::kMte2, what, line, [=]() {
        symsim::touch(src, elem_size, false);
        std::memcpy(d, src, elem_size);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        // The signal carries what the put knew when it was issued, and the put itself.
        const symsim::Clock &clk = symsim::core().pipes.current->clk;
        symsim::KnowPtr k = symsim::know_join(symsim::know_with(clk.rem, source, seq), symsim::local_knowledge(clk));
        symsim::publish_signal(word, world, epoch, pe, signal, sig_op, k,
                               [&]() { dv->signal_op(dv->ctx, sig_addr, signal, sig_op, pe); });
    });
    symsim::add_pending(symsim::PendingPut{d, src, elem_size, pe, true, false, op->who});
    symsim::drain_until([&op]() { return op->done; }, what);
}

/// Blocking get into local GM: returns after the data landed (the engines ran up to it).
inline void aclshmem_getmem(__gm__ void *dst, __gm__ void *src, uint32_t elem_size, int32_t pe,
                            uint32_t line = __builtin_LINE()) {
    const char *what = "aclshmem_getmem";
    symsim::need_core(symsim::CoreType::kAiv, what);
    void *s = symsim::remote(src, elem_size, pe, what);
    symsim::check_local_operand(dst, elem_size, what);
    symsim::check_local_write(dst, elem_size, what);
    symsim::note_local_write(symsim::kMte2, dst, elem_size, what, line);
    symsim::OpPtr op = symsim::issue(symsim::kMte2, what, line, [=]() {
        symsim::touch_remote_read(s, elem_size);
        symsim::touch(dst, elem_size, true);
        std::memcpy(dst, s, elem_size);
    });
    symsim::drain_until([&op]() { return op->done; }, what);
    symsim::Pipes &ps = symsim::core().pipes;
    uint32_t sl = symsim::slot_of(symsim::core().index, symsim::kMte2);
    ps.k_obs.v[sl] = std::max(ps.k_obs.v[sl], op->who.idx);
}

#define SYMSIM_UB_RMA(NAME, TYPE)                                                                         \
    inline void aclshmem_##NAME##_put_nbi(__gm__ TYPE *dst, __ubuf__ TYPE *src, uint32_t elem_size, int32_t pe, \
                                          uint32_t line = __builtin_LINE()) {                             \
        const char *what = "aclshmem_" #NAME "_put_nbi";                                                  \
        symsim::need_core(symsim::CoreType::kAiv, what);                                                  \
        uint64_t bytes = uint64_t(elem_size) * sizeof(TYPE);                                              \
        if (!symsim::in_ub(src, bytes)) {                                                                 \
            symsim::fail(SYMSCHED_SIM_E_BAD_ADDRESS, std::string(what) + ": source is not in UB");        \
        }                                                                                                 \
        void *d = symsim::remote(dst, bytes, pe, what);                                                   \
        symsim::note_put(d, bytes, pe, what, line);                                                       \
        symsim::OpPtr op = symsim::issue(symsim::kMte3, what, line, [=]() {                               \
            symsim::touch(src, bytes, false);                                                             \
            std::memcpy(d, src, bytes);                                                                   \
        });                                                                                               \
        symsim::add_pending(symsim::PendingPut{d, src, bytes, pe, false, false, op->who});               \
    }                                                                                                     \
    inline void aclshmem_##NAME##_get_nbi(__ubuf__ TYPE *dst, __gm__ TYPE *src, uint32_t elem_size, int pe, \
                                          uint32_t line = __builtin_LINE()) {                             \
        const char *what = "aclshmem_" #NAME "_get_nbi";                                                  \
        symsim::need_core(symsim::CoreType::kAiv, what);                                                  \
        uint64_t bytes = uint64_t(elem_size) * sizeof(TYPE);                                              \
        if (!symsim::in_ub(dst, bytes)) {                                                                 \
            symsim::fail(SYMSCHED_SIM_E_BAD_ADDRESS, std::string(what) + ": destination is not in UB");   \
        }                                                                                                 \
        void *s = symsim::remote(src, bytes, pe, what);                                                   \
        symsim::OpPtr op = symsim::issue(symsim::kMte2, what, line, [=]() {                               \
            symsim::touch_remote_read(s, bytes);                                                          \
            symsim::touch(dst, bytes, true);                                                              \
            std::memcpy(dst, s, bytes);                                                                   \
        });                                                                                               \
        symsim::add_pending(symsim::PendingPut{dst, s, bytes, pe, false, true, op->who});                \
    }

SYMSIM_UB_RMA(float, float)
SYMSIM_UB_RMA(half, half)
SYMSIM_UB_RMA(bfloat16, bfloat16_t)
SYMSIM_UB_RMA(double, double)
SYMSIM_UB_RMA(int32, int32_t)
SYMSIM_UB_RMA(int64, int64_t)
SYMSIM_UB_RMA(uint8, uint8_t)
#undef SYMSIM_UB_RMA

inline void aclshmemx_signal_op(__gm__ int32_t *sig_addr, int32_t signal, int sig_op, int pe) {
    symsim::signal(sig_addr, signal, sig_op, pe, "aclshmemx_signal_op");
}

inline int32_t aclshmem_signal_wait_until(__gm__ int32_t *sig_addr, int cmp, int32_t cmp_val) {
    symsim::need_core(symsim::CoreType::kAiv, "aclshmem_signal_wait_until");
    const symsched_device &d = symsim::dev();
    if (d.addr_pe(d.ctx, sig_addr, sizeof(int32_t)) != d.my_pe) {
        symsim::fail(SYMSCHED_SIM_E_BAD_ADDRESS, "aclshmem_signal_wait_until: the signal must be a local symmetric address");
    }
    if (cmp < ACLSHMEM_CMP_EQ || cmp > ACLSHMEM_CMP_LE) {
        symsim::fail(SYMSCHED_SIM_E_UNSUPPORTED, "aclshmem_signal_wait_until: unknown comparison");
    }
    int32_t observed = 0;
    if (d.signal_wait_until(d.ctx, sig_addr, cmp, cmp_val, &observed) != 0) {
        throw symsim::Error{SYMSCHED_SIM_E_WAIT_FAILED,
                            "aclshmem_signal_wait_until(cmp " + std::to_string(cmp) + ", " + std::to_string(cmp_val) +
                                ") gave up; last value " + std::to_string(observed),
                            symsim::core().rank->aborted.load()};
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    symsim::acquire(sig_addr, observed);
    return observed;
}

inline int32_t aclshmem_int32_g(__gm__ int32_t *src, int pe) {
    void *p = symsim::remote(src, sizeof(int32_t), pe, "aclshmem_int32_g");
    int32_t v = __atomic_load_n(static_cast<int32_t *>(p), __ATOMIC_ACQUIRE);
    symsim::acquire(p, v);
    return v;
}

/// CANN shmem implements quiet as PipeBarrier<PIPE_ALL> plus a data-cache flush.
inline void aclshmem_quiet(void) { symsim::complete_pending(); }
/// CANN documents fence as implemented like quiet; the simulation does the same.
inline void aclshmem_fence(void) { symsim::complete_pending(); }

inline void aclshmem_barrier(aclshmem_team_t team) {
    symsim::check_team(team, "aclshmem_barrier");
    symsim::complete_pending();
    if (symsim::dev().barrier(symsim::dev().ctx) != 0) {
        symsim::fail(SYMSCHED_SIM_E_WAIT_FAILED, "aclshmem_barrier gave up");
    }
}
inline void aclshmem_barrier_all(void) { aclshmem_barrier(ACLSHMEM_TEAM_WORLD); }

#endif  // SYMSCHED_SIM_SHMEM_H
