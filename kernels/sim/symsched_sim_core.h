// symsched_sim_core.h — state shared by the simulated Ascend C and shmem headers: the current
// rank's device table, the misuse errors, and the bookkeeping of outstanding non-blocking puts.
// Header-only C++17; one simulated AI core per host thread.
#ifndef SYMSCHED_SIM_CORE_H
#define SYMSCHED_SIM_CORE_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "symsched_device.h"

// Device address-space qualifiers and kernel markers have no meaning on the host.
#define __global__
#define __aicore__
#define __gm__
#define __ubuf__
#define GM_ADDR uint8_t *

namespace symsim {

/// A misuse the device rejects (or would hang/corrupt on); thrown to the launch entry.
struct Error {
    int32_t code;
    std::string message;
};

inline const char *status_name(int32_t code) {
    switch (code) {
    case SYMSCHED_SIM_OK: return "SYMSCHED_SIM_OK";
    case SYMSCHED_SIM_E_REMOTE_DATACOPY: return "SYMSCHED_SIM_E_REMOTE_DATACOPY";
    case SYMSCHED_SIM_E_UB_OVERFLOW: return "SYMSCHED_SIM_E_UB_OVERFLOW";
    case SYMSCHED_SIM_E_SIGNAL_BEFORE_QUIET: return "SYMSCHED_SIM_E_SIGNAL_BEFORE_QUIET";
    case SYMSCHED_SIM_E_NBI_SOURCE_REUSED: return "SYMSCHED_SIM_E_NBI_SOURCE_REUSED";
    case SYMSCHED_SIM_E_QUEUE_MISUSE: return "SYMSCHED_SIM_E_QUEUE_MISUSE";
    case SYMSCHED_SIM_E_EVENT_MISUSE: return "SYMSCHED_SIM_E_EVENT_MISUSE";
    case SYMSCHED_SIM_E_BAD_ADDRESS: return "SYMSCHED_SIM_E_BAD_ADDRESS";
    case SYMSCHED_SIM_E_WAIT_FAILED: return "SYMSCHED_SIM_E_WAIT_FAILED";
    case SYMSCHED_SIM_E_UNALIGNED: return "SYMSCHED_SIM_E_UNALIGNED";
    case SYMSCHED_SIM_E_CAST_MODE: return "SYMSCHED_SIM_E_CAST_MODE";
    case SYMSCHED_SIM_E_UNQUIETED_AT_EXIT: return "SYMSCHED_SIM_E_UNQUIETED_AT_EXIT";
    case SYMSCHED_SIM_E_ABI: return "SYMSCHED_SIM_E_ABI";
    case SYMSCHED_SIM_E_UNSUPPORTED: return "SYMSCHED_SIM_E_UNSUPPORTED";
    case SYMSCHED_SIM_E_CUBE_OVERFLOW: return "SYMSCHED_SIM_E_CUBE_OVERFLOW";
    case SYMSCHED_SIM_E_CUBE_POSITION: return "SYMSCHED_SIM_E_CUBE_POSITION";
    case SYMSCHED_SIM_E_HOST_COLL: return "SYMSCHED_SIM_E_HOST_COLL";
    default: return "SYMSCHED_SIM_E_UNKNOWN";
    }
}

[[noreturn]] inline void fail(int32_t code, const std::string &message) {
    throw Error{code, message};
}

/// A non-blocking put not yet completed by aclshmem_quiet.
struct PendingPut {
    void *dst;          // peer address (already translated)
    const void *src;    // local source (GM or UB)
    uint64_t bytes;
    int32_t pe;
    bool delivered;     // put_signal delivers at once; the source stays reserved until quiet
    bool is_get;        // a get_nbi: `dst` is local UB, `src` the peer address
};

#ifndef SYMSIM_L1_BYTES
/// Cube-side buffers of an Atlas A2 AI Cube core: L1 512 KiB, L0A / L0B 64 KiB, L0C 128 KiB.
#define SYMSIM_L1_BYTES (512u * 1024u)
#define SYMSIM_L0A_BYTES (64u * 1024u)
#define SYMSIM_L0B_BYTES (64u * 1024u)
#define SYMSIM_L0C_BYTES (128u * 1024u)
#endif

/// One on-chip buffer a TPipe carves queue memory from (the UB is kept separately).
struct Pool {
    uint8_t *base = nullptr;
    uint32_t cap = 0;
    uint32_t used = 0;
    const char *name = "";
};

#ifndef SYMSIM_UB_BYTES
/// Unified buffer per AI vector core on Atlas A2 (192 KiB); override with -DSYMSIM_UB_BYTES=...
#define SYMSIM_UB_BYTES (192u * 1024u)
#endif

/// Everything one simulated core owns during one launch.
struct CoreState {
    const symsched_device *dev = nullptr;
    std::vector<PendingPut> pending;
    alignas(64) uint8_t ub[SYMSIM_UB_BYTES];
    uint32_t ub_used = 0;
    int32_t flags[16][8] = {};
    // Cube memories: L1 (A1/B1), L0A (A2), L0B (B2), L0C (CO1), carved by TPipe::InitBuffer.
    std::vector<uint8_t> cube_mem = std::vector<uint8_t>(SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES + SYMSIM_L0B_BYTES + SYMSIM_L0C_BYTES);
    Pool l1{cube_mem.data(), SYMSIM_L1_BYTES, 0, "L1"};
    Pool l0a{cube_mem.data() + SYMSIM_L1_BYTES, SYMSIM_L0A_BYTES, 0, "L0A"};
    Pool l0b{cube_mem.data() + SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES, SYMSIM_L0B_BYTES, 0, "L0B"};
    Pool l0c{cube_mem.data() + SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES + SYMSIM_L0B_BYTES, SYMSIM_L0C_BYTES, 0, "L0C"};
};

inline CoreState *&current_slot() {
    static thread_local CoreState *state = nullptr;
    return state;
}

inline CoreState &core() {
    CoreState *s = current_slot();
    if (s == nullptr) {
        fail(SYMSCHED_SIM_E_ABI, "device API called outside symsched_sim_launch");
    }
    return *s;
}

inline const symsched_device &dev() { return *core().dev; }

inline bool overlaps(const void *a, uint64_t alen, const void *b, uint64_t blen) {
    auto x = reinterpret_cast<uintptr_t>(a);
    auto y = reinterpret_cast<uintptr_t>(b);
    return alen != 0 && blen != 0 && x < y + blen && y < x + alen;
}

/// Local memory is about to be written: it must not be the source of an outstanding put.
inline void check_local_write(const void *dst, uint64_t bytes, const char *what) {
    for (const PendingPut &p : core().pending) {
        if (!p.is_get && overlaps(dst, bytes, p.src, p.bytes)) {
            char buf[256];
            std::snprintf(buf, sizeof buf,
                          "%s overwrites %llu bytes that are the source of a non-blocking put to PE "
                          "%d still outstanding (call aclshmem_quiet first)",
                          what, static_cast<unsigned long long>(bytes), p.pe);
            fail(SYMSCHED_SIM_E_NBI_SOURCE_REUSED, buf);
        }
    }
}

/// GM touched by an MTE local copy must belong to this PE (or to no heap segment at all).
inline void check_local_gm(const void *gm, uint64_t bytes, const char *what) {
    const symsched_device &d = dev();
    int32_t owner = d.addr_pe(d.ctx, gm, bytes);
    if (owner >= 0 && owner != d.my_pe) {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "%s on PE %d touches PE %d's memory; remote traffic must go through "
                      "aclshmem_put*/get* (never DataCopy to a peer address)",
                      what, d.my_pe, owner);
        fail(SYMSCHED_SIM_E_REMOTE_DATACOPY, buf);
    }
    if (owner == -2) {
        fail(SYMSCHED_SIM_E_BAD_ADDRESS, std::string(what) + " straddles two heap segments");
    }
}

inline bool in_ub(const void *p, uint64_t bytes) {
    CoreState &c = core();
    auto x = reinterpret_cast<uintptr_t>(p);
    auto base = reinterpret_cast<uintptr_t>(c.ub);
    return x >= base && x + bytes <= base + SYMSIM_UB_BYTES;
}

/// Complete every outstanding put (the simulation defers plain nbi puts until here).
inline void complete_pending() {
    CoreState &c = core();
    for (PendingPut &p : c.pending) {
        if (!p.delivered) {
            std::memcpy(p.dst, p.src, p.bytes);
        }
    }
    c.pending.clear();
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    c.dev->quiet(c.dev->ctx);
}

inline bool has_undelivered() {
    for (const PendingPut &p : core().pending) {
        if (!p.delivered) {
            return true;
        }
    }
    return false;
}

/// Runs one simulated launch: binds the device table to this thread and maps errors to codes.
template <typename F>
int32_t run(const symsched_device *d, const symsched_launch_args *a, uint32_t n_buffers, F &&body) {
    auto report = [a](int32_t code, const std::string &msg) {
        if (a != nullptr && a->err_msg != nullptr && a->err_cap > 0) {
            std::snprintf(a->err_msg, a->err_cap, "%s: %s", status_name(code), msg.c_str());
        }
        return code;
    };
    if (d == nullptr || a == nullptr || d->abi_version != SYMSCHED_DEVICE_ABI ||
        a->abi_version != SYMSCHED_DEVICE_ABI) {
        return report(SYMSCHED_SIM_E_ABI, "device table or launch arguments of another ABI");
    }
    if (a->n_buffers != n_buffers) {
        return report(SYMSCHED_SIM_E_ABI, "launch passes " + std::to_string(a->n_buffers) +
                                              " buffers, kernel has " + std::to_string(n_buffers));
    }
    // UB state is large; keep it off the (possibly small) thread stack.
    std::vector<CoreState> holder(1);
    CoreState &state = holder[0];
    state.dev = d;
    current_slot() = &state;
    int32_t code = SYMSCHED_SIM_OK;
    try {
        body();
        if (has_undelivered()) {
            fail(SYMSCHED_SIM_E_UNQUIETED_AT_EXIT,
                 "kernel returned with non-blocking puts not completed by aclshmem_quiet");
        }
    } catch (const Error &e) {
        code = report(e.code, e.message);
    }
    current_slot() = nullptr;
    return code;
}

}  // namespace symsim

#endif  // SYMSCHED_SIM_CORE_H
