// symsched_sim_core.h — state shared by the simulated Ascend C and shmem headers: the launch of
// a rank's cores (one host thread per AIV/AIC core), each core's memories and engines, the
// rank's shared GM history, the misuse errors, and the outstanding non-blocking puts.
// Header-only C++17.
#ifndef SYMSCHED_SIM_CORE_H
#define SYMSCHED_SIM_CORE_H

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "symsched_device.h"
#include "symsched_sim_pipes.h"

// Device address-space qualifiers and kernel markers have no meaning on the host.
#define __global__
#define __aicore__
#define __gm__
#define __ubuf__
#define GM_ADDR uint8_t *

namespace symsim {

/// A misuse the device rejects (or would hang/corrupt on); thrown to the launch entry.
/// `secondary`: the core gave up because another core or rank failed first.
struct Error {
    int32_t code;
    std::string message;
    bool secondary = false;
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
    case SYMSCHED_SIM_E_PIPE_RACE: return "SYMSCHED_SIM_E_PIPE_RACE";
    case SYMSCHED_SIM_E_CORE_TYPE: return "SYMSCHED_SIM_E_CORE_TYPE";
    case SYMSCHED_SIM_E_OPERAND_OVERLAP: return "SYMSCHED_SIM_E_OPERAND_OVERLAP";
    case SYMSCHED_SIM_E_GM_RACE: return "SYMSCHED_SIM_E_GM_RACE";
    case SYMSCHED_SIM_E_CTRL: return "SYMSCHED_SIM_E_CTRL";
    default: return "SYMSCHED_SIM_E_UNKNOWN";
    }
}

[[noreturn]] inline void fail(int32_t code, const std::string &message) { throw Error{code, message, false}; }

/// A non-blocking put or get not yet completed by aclshmem_quiet.
struct PendingPut {
    void *dst;          // peer address (already translated), or local UB for a get
    const void *src;    // local source (GM or UB), or the peer address for a get
    uint64_t bytes;
    int32_t pe;
    bool delivered;     // put_signal delivers at once; the source stays reserved until quiet
    bool is_get;
    Who who;            // the engine instruction that moves the data
};

#ifndef SYMSIM_L1_BYTES
/// Cube-side buffers of an Atlas A2 AI Cube core: L1 512 KiB, L0A / L0B 64 KiB, L0C 128 KiB.
#define SYMSIM_L1_BYTES (512u * 1024u)
#define SYMSIM_L0A_BYTES (64u * 1024u)
#define SYMSIM_L0B_BYTES (64u * 1024u)
#define SYMSIM_L0C_BYTES (128u * 1024u)
#endif

#ifndef SYMSIM_UB_BYTES
/// Unified buffer per AI vector core on Atlas A2 (192 KiB); override with -DSYMSIM_UB_BYTES=...
#define SYMSIM_UB_BYTES (192u * 1024u)
#endif

/// One on-chip buffer a TPipe carves queue memory from.
struct Pool {
    uint8_t *base = nullptr;
    uint32_t cap = 0;
    uint32_t used = 0;
    const char *name = "";
};

/// What a core is (separated-architecture Atlas A2: vector cores and Cube cores are distinct).
enum class CoreType { kAiv, kAic };

/// Kernel types (`KERNEL_TASK_TYPE_DEFAULT`) the simulation launches.
enum KernelMetaType : uint32_t {
    KERNEL_TYPE_AIV_ONLY = 0,
    KERNEL_TYPE_AIC_ONLY,
    KERNEL_TYPE_MIX_AIV_1_0,
    KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1,
    KERNEL_TYPE_MIX_AIC_1_2
};

/// Number of HardEvent values the flag table holds, and of flag ids per event (A2: 0..7).
constexpr uint32_t kHardEvents = 32;
constexpr uint32_t kEventIds = 8;
/// Cross-core flag ids (A2: 0..10) and the most a counter may hold (documented: 15).
constexpr uint32_t kCrossFlags = 11;
constexpr uint32_t kCrossMax = 15;

/// A labelled range of a core's private memory (for race reports).
struct Region {
    uintptr_t lo, hi;
    std::string label;
};

/// One pending SetFlag of (event, id).
struct FlagState {
    bool set = false;
    OpPtr mark;       // the SetFlag's mark in its source engine (done = set in hardware)
    Clock value;      // what it publishes
    uint32_t line = 0;
};

struct RankShared;
struct LaunchCtx;

/// Everything one simulated core owns during one launch.
struct CoreState {
    const symsched_device *dev = nullptr;
    RankShared *rank = nullptr;
    uint32_t index = 0;       // position among the rank's cores (AIVs first)
    CoreType type = CoreType::kAiv;
    uint32_t block_idx = 0;   // GetBlockIdx()
    uint32_t block_num = 1;   // GetBlockNum()
    std::vector<PendingPut> pending;
    std::vector<uint8_t> ub_mem = std::vector<uint8_t>(SYMSIM_UB_BYTES + 64);
    uint8_t *ub = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(ub_mem.data()) + 63) & ~uintptr_t(63));
    uint32_t ub_used = 0;
    // Cube memories: L1 (A1/B1), L0A (A2), L0B (B2), L0C (CO1), carved by TPipe::InitBuffer.
    std::vector<uint8_t> cube_mem =
        std::vector<uint8_t>(SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES + SYMSIM_L0B_BYTES + SYMSIM_L0C_BYTES + 1024);
    uint8_t *cube = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(cube_mem.data()) + 1023) & ~uintptr_t(1023));
    Pool l1{cube, SYMSIM_L1_BYTES, 0, "L1"};
    Pool l0a{cube + SYMSIM_L1_BYTES, SYMSIM_L0A_BYTES, 0, "L0A"};
    Pool l0b{cube + SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES, SYMSIM_L0B_BYTES, 0, "L0B"};
    Pool l0c{cube + SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES + SYMSIM_L0B_BYTES, SYMSIM_L0C_BYTES, 0, "L0C"};
    Pipes pipes;
    Shadow local;             // UB, L1 and L0 bytes of this core
    std::vector<Region> regions;
    FlagState flags[kHardEvents][kEventIds];
    /// The CTRL register (asc_get_ctrl / asc_set_ctrl). Only CTRL[48] is modelled: 1 keeps
    /// Inf/NaN results of half/bf16 conversions (Cast, Fixpipe), 0 saturates them (inf to ±MAX,
    /// NaN to 0). Starts as the launch's overflow mode (`ctrl_of`), which the kernel must leave
    /// behind.
    uint64_t ctrl = 0;
    /// Local GM writes issued so far (`LocalRec::seq`).
    uint32_t local_seq = 0;
    /// Per engine: the last instruction issued that writes this PE's GM (publish checks).
    uint32_t last_gm_write[kEngines] = {};
    const char *last_gm_write_what[kEngines] = {};
    uint32_t last_gm_write_line[kEngines] = {};
};

/// What the cores of one rank share during one launch.
struct RankShared {
    std::mutex mu;
    std::condition_variable cv;
    Shadow gm;                               // this PE's GM bytes (under mu)
    std::atomic<bool> aborted{false};
    uint32_t n_aiv = 1, n_aic = 0;
    /// Pending cross-core flag increments of each core (with what the setter(s) published).
    std::vector<Clock> cross[kMaxCores][kCrossFlags];
    struct Gather {
        uint32_t count = 0;
        Clock clk;
    };
    Gather mode0[2][kCrossFlags];            // per core type
    Gather mode1[kMaxCores][kCrossFlags];    // per AI Core: its AIVs' mode-1 sets
    Gather mode2[kMaxCores][kCrossFlags];    // per AI Core: its AIVs' mode-2 sets
    // SyncAll: a generation barrier over the AIVs.
    uint32_t sync_count = 0;
    uint64_t sync_gen = 0;
    Clock sync_acc, sync_done;
    /// Undelivered plain puts of every core: (core, instruction).
    std::vector<std::pair<uint32_t, Who>> puts;
    /// Every core's local GM writes in its local-write sequence: (engine slot, instruction).
    std::vector<std::pair<uint32_t, uint32_t>> local_writes[kMaxCores];
    CoreState *cores[kMaxCores] = {};
    /// The launch (all kernel segments) of this rank that runs this segment.
    LaunchCtx *lc = nullptr;
    uint64_t world = 0;  // lc->world
    uint64_t run = 0;    // lc->run
    /// What each core blocked in CrossCoreWaitFlag / SyncAll waits for (null: not blocked
    /// there), and which cores have returned: only the rank's own cores set its cross-core
    /// flags, so when every core is blocked or gone and no wait is met, none ever will be.
    const std::function<bool()> *blocked[kMaxCores] = {};
    bool returned[kMaxCores] = {};
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

/// Sync call sites (file, line) that executed, for the deleted-flag mutation test.
inline std::mutex &sync_sites_mu() {
    static std::mutex m;
    return m;
}
inline std::set<std::pair<std::string, uint32_t>> &sync_sites() {
    static std::set<std::pair<std::string, uint32_t>> s;
    return s;
}
inline void note_sync_site(const char *file, uint32_t line) {
    std::lock_guard<std::mutex> g(sync_sites_mu());
    sync_sites().emplace(file, line);
}
/// Sync call sites that, at least once, ordered something not ordered already: the engine (or
/// core) it holds back learned of an instruction finishing that it did not know of from the
/// calls before. A site never in this set only repeats orders other calls give (deleting it
/// changes no happens-before relation of the run).
inline std::set<std::pair<std::string, uint32_t>> &ordering_sites() {
    static std::set<std::pair<std::string, uint32_t>> s;
    return s;
}
inline void note_ordering_site(const char *file, uint32_t line) {
    std::lock_guard<std::mutex> g(sync_sites_mu());
    ordering_sites().emplace(file, line);
}

/// The line numbers of `sites` that lie in the source file ending in `file` (one kernel's), at
/// most `cap` of them written; returns how many there are. One definition in the header: a
/// batch build puts several kernels' entries in one translation unit.
inline uint32_t lines_in_file(const std::set<std::pair<std::string, uint32_t>> &sites, const char *file,
                              uint32_t *lines, uint32_t cap) {
    std::lock_guard<std::mutex> g(sync_sites_mu());
    const std::string want = file;
    uint32_t n = 0;
    for (const auto &site : sites) {
        const std::string &f = site.first;
        if (f.size() >= want.size() && f.compare(f.size() - want.size(), want.size(), want) == 0) {
            if (n < cap) {
                lines[n] = site.second;
            }
            ++n;
        }
    }
    return n;
}

// ------------------------------------------------------------------ remote puts

/// After this core's quiet: its puts so far are complete, which the scalar unit and every engine
/// now know (and pass on through flags and signals).
inline void know_own_puts(CoreState &c);

/// A put by this core of [dst, dst + bytes) on `pe` (dst: the peer's address in this process):
/// its sequence number, after recording it.
inline uint32_t note_put(void *dst, uint64_t bytes, int32_t pe, const char *what, uint32_t line);

// ------------------------------------------------------------------ memory and races

inline bool in_ub(const void *p, uint64_t bytes) {
    CoreState &c = core();
    auto x = reinterpret_cast<uintptr_t>(p);
    auto base = reinterpret_cast<uintptr_t>(c.ub);
    return x >= base && x + bytes <= base + SYMSIM_UB_BYTES;
}
inline bool in_cube(const void *p, uint64_t bytes) {
    CoreState &c = core();
    auto x = reinterpret_cast<uintptr_t>(p);
    auto base = reinterpret_cast<uintptr_t>(c.cube);
    return x >= base && x + bytes <= base + SYMSIM_L1_BYTES + SYMSIM_L0A_BYTES + SYMSIM_L0B_BYTES + SYMSIM_L0C_BYTES;
}

inline std::string describe_local(CoreState &c, uintptr_t lo, uintptr_t hi) {
    for (const Region &r : c.regions) {
        if (lo >= r.lo && lo < r.hi) {
            return r.label + " bytes [" + std::to_string(lo - r.lo) + ", " + std::to_string(hi - r.lo) + ")";
        }
    }
    return "on-chip bytes";
}

inline std::string who_text(const Who &w) {
    uint32_t core_idx = w.slot / kEngines;
    std::string s = std::string(w.what) + " (" + engine_name(w.slot % kEngines) + ", core " + std::to_string(core_idx);
    if (w.line != 0) {
        s += ", kernel line " + std::to_string(w.line);
    }
    return s + ")";
}

[[noreturn]] inline void report_race(const Who &me, bool wrote, const Conflict &c, const std::string &where) {
    std::string msg;
    if (c.other_wrote && !wrote) {
        msg = who_text(me) + " reads " + where + " before " + who_text(c.other) + " has finished writing it";
    } else if (c.other_wrote) {
        msg = who_text(me) + " overwrites " + where + " while " + who_text(c.other) + " may still be writing it";
    } else {
        msg = who_text(me) + " overwrites " + where + " before " + who_text(c.other) + " has finished reading it";
    }
    msg += "; nothing orders the two (SetFlag/WaitFlag, a queue's EnQue/DeQue or FreeTensor/AllocTensor, "
           "PipeBarrier, aclshmem_quiet, a cross-core flag or SyncAll)";
    fail(SYMSCHED_SIM_E_PIPE_RACE, msg);
}

/// Record that `who` (knowing `clk` finished) reads or writes [p, p + bytes); reports an
/// unordered conflicting access. Memory other than this core's and this PE's is not tracked
/// (a peer's bytes belong to the peer; host tables are read-only).
inline void touch_as(const Who &who, const Clock &clk, const void *p, uint64_t bytes, bool write) {
    if (bytes == 0) {
        return;
    }
    CoreState &c = core();
    auto lo = reinterpret_cast<uintptr_t>(p);
    uintptr_t hi = lo + bytes;
    if (in_ub(p, bytes) || in_cube(p, bytes)) {
        Conflict k = c.local.access(lo, hi, write, who, clk);
        if (k.found) {
            report_race(who, write, k, describe_local(c, k.lo, k.hi));
        }
        return;
    }
    const symsched_device &d = *c.dev;
    if (d.addr_pe(d.ctx, p, bytes) != d.my_pe) {
        return;
    }
    Conflict k;
    {
        std::lock_guard<std::mutex> g(c.rank->mu);
        k = c.rank->gm.access(lo, hi, write, who, clk);
    }
    if (k.found) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "GM bytes [%p, +%llu) of PE %d", reinterpret_cast<void *>(k.lo),
                      static_cast<unsigned long long>(k.hi - k.lo), d.my_pe);
        report_race(who, write, k, buf);
    }
    PutRec put;
    uintptr_t at = 0;
    if (!write && unordered_put(lo, hi, c.rank->world, clk.rem, &put, &at)) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "GM byte %p of PE %d", reinterpret_cast<void *>(at), d.my_pe);
        std::string by = std::string(put.what) + " of PE " + std::to_string(put.sender_pe) + " (core " +
                          std::to_string(put.core) + (put.line != 0 ? ", kernel line " + std::to_string(put.line) : "") + ")";
        fail(SYMSCHED_SIM_E_GM_RACE,
             who_text(who) + " reads " + buf + ", which " + by +
                 " writes, before that put is known complete: nothing orders the read after an aclshmem_quiet "
                 "of the putting core and a signal from it (or from a core ordered after it) that this core waited for");
    }
}

/// A memory access by the engine instruction whose effects are running now.
inline void touch(const void *p, uint64_t bytes, bool write) {
    const Op *op = core().pipes.current;
    if (op == nullptr) {
        fail(SYMSCHED_SIM_E_ABI, "internal: engine access outside an engine instruction");
    }
    touch_as(op->who, op->clk, p, bytes, write);
}

/// A load or store of the scalar unit (in order with its own earlier loads and stores).
inline void scalar_touch(const void *p, uint64_t bytes, bool write, const char *what, uint32_t line) {
    CoreState &c = core();
    Pipes &ps = c.pipes;
    uint32_t eng = write ? kSst : kS;
    Who who{slot_of(c.index, eng), ++ps.n[eng], what, line};
    Clock clk = ps.k_obs;
    clk.v[slot_of(c.index, kS)] = write ? ps.n[kS] : ps.n[kS] - 1;
    clk.v[slot_of(c.index, kSst)] = write ? ps.n[kSst] - 1 : ps.n[kSst];
    touch_as(who, clk, p, bytes, write);
    if (!write) {
        ps.k_obs.v[slot_of(c.index, kS)] = ps.n[kS];
    }
}

/// Whether `p` is this PE's GM (heap) memory.
inline bool is_my_gm(const void *p, uint64_t bytes) {
    const symsched_device &d = dev();
    return !in_ub(p, bytes) && !in_cube(p, bytes) && d.addr_pe(d.ctx, p, bytes == 0 ? 1 : bytes) == d.my_pe;
}

static_assert(kMaxCores <= kLocalSourceBase, "local-write knowledge sources overlap put sources");

/// The instruction about to be issued to `eng` writes [p, p + bytes) of this PE's GM: a peer's
/// get of those bytes must be ordered after it (`LocalRec`). Call before the issue, once per
/// contiguous range.
inline void note_local_write(uint32_t eng, const void *p, uint64_t bytes, const char *what, uint32_t line) {
    CoreState &c = core();
    if (c.rank->world == 0 || bytes == 0 || !is_my_gm(p, bytes)) {
        return;
    }
    uint32_t seq = ++c.local_seq;
    {
        std::lock_guard<std::mutex> g(c.rank->mu);
        c.rank->local_writes[c.index].emplace_back(slot_of(c.index, eng), c.pipes.n[eng] + 1);
    }
    auto lo = reinterpret_cast<uintptr_t>(p);
    record_local(lo, lo + bytes, LocalRec{c.rank->world, c.rank->run, c.dev->my_pe, c.index, seq, what, line});
}

/// The instruction about to be issued to `eng` writes this PE's GM (what a later signal
/// publishes). Call before the issue: it records the index that instruction gets.
inline void note_gm_write(uint32_t eng, const void *p, uint64_t bytes, const char *what, uint32_t line) {
    if (is_my_gm(p, bytes)) {
        CoreState &c = core();
        c.last_gm_write[eng] = c.pipes.n[eng] + 1;
        c.last_gm_write_what[eng] = what;
        c.last_gm_write_line[eng] = line;
    }
}

/// What `clk` (an instruction's or the scalar unit's knowledge) says about this rank's local
/// writes, as put-style knowledge a signal carries to other PEs: per core, the longest prefix of
/// its local writes whose instructions `clk` knows finished.
inline KnowPtr local_knowledge(const Clock &clk) {
    CoreState &c = core();
    RankShared &r = *c.rank;
    KnowPtr k;
    if (r.world == 0) {
        return k;
    }
    std::lock_guard<std::mutex> g(r.mu);
    for (uint32_t i = 0; i < r.n_aiv + r.n_aic; ++i) {
        uint32_t prefix = 0;
        for (const auto &w : r.local_writes[i]) {
            if (clk.v[w.first] < w.second) {
                break;
            }
            ++prefix;
        }
        if (prefix > 0) {
            k = know_with(k, put_source(r.run, kLocalSourceBase + i), prefix);
        }
    }
    return k;
}

/// The sender's clock of a signal to its own PE (see `SigRec::local`).
struct LocalClock {
    Clock clk;
};

/// A wait observed a signal that carries `k`. When the signal came from another core of this
/// rank (a channel signalling its own rank: channels order against each other only through
/// signals), `k` holds the prefix of that core's local GM writes its sender knew finished: the
/// waiting core's scalar unit now knows those instructions finished, as a cross-core flag from
/// that core would have told it, so its later reads of the bytes are ordered after them.
inline void learn_local_writes(const KnowPtr &k) {
    CoreState &c = core();
    RankShared &r = *c.rank;
    if (r.world == 0 || !k) {
        return;
    }
    std::lock_guard<std::mutex> g(r.mu);
    for (uint32_t i = 0; i < r.n_aiv + r.n_aic; ++i) {
        if (i == c.index) {
            continue;
        }
        uint64_t src = put_source(r.run, kLocalSourceBase + i);
        auto it = std::lower_bound(k->v.begin(), k->v.end(), std::make_pair(src, uint32_t(0)));
        if (it == k->v.end() || it->first != src) {
            continue;
        }
        const auto &writes = r.local_writes[i];
        for (uint32_t j = 0; j < it->second && j < writes.size(); ++j) {
            uint32_t &known = c.pipes.k_obs.v[writes[j].first];
            known = std::max(known, writes[j].second);
        }
    }
}

/// The engine instruction running now reads [p, p + bytes) of a PE's GM (a get): from another
/// PE, each local write of that PE into those bytes must be known finished through the signals
/// this core waited for; from this PE, it is a local read like any other.
inline void touch_remote_read(const void *p, uint64_t bytes) {
    const Op *op = core().pipes.current;
    CoreState &c = core();
    if (c.dev->addr_pe(c.dev->ctx, p, bytes) == c.dev->my_pe) {
        // A get from this PE itself: an ordinary local read, ordered by the clock.
        touch(p, bytes, false);
        return;
    }
    LocalRec w;
    uintptr_t at = 0;
    auto lo = reinterpret_cast<uintptr_t>(p);
    if (op == nullptr || !unordered_local(lo, lo + bytes, c.rank->world, op->clk.rem, &w, &at)) {
        return;
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, "GM byte %p of PE %d", reinterpret_cast<void *>(at), w.pe);
    fail(SYMSCHED_SIM_E_GM_RACE,
         who_text(op->who) + " reads " + buf + ", which " + w.what + " (PE " + std::to_string(w.pe) + ", core " +
             std::to_string(w.core) + (w.line != 0 ? ", kernel line " + std::to_string(w.line) : "") +
             ") writes, before that write is known finished: no signal this core waited for came from a core "
             "of that PE that knew it finished (a flag or barrier, then the signal)");
}

/// A signal publishes every local GM write before it: each must be known finished.
inline void check_published(const char *what) {
    CoreState &c = core();
    for (uint32_t e = kV; e < kEngines; ++e) {
        if (c.last_gm_write[e] > c.pipes.k_obs.v[slot_of(c.index, e)]) {
            Who w{slot_of(c.index, e), c.last_gm_write[e], c.last_gm_write_what[e], c.last_gm_write_line[e]};
            fail(SYMSCHED_SIM_E_PIPE_RACE,
                 std::string(what) + " publishes local GM that " + who_text(w) +
                     " may still be writing: the scalar unit has not waited for it (SetFlag/WaitFlag<" +
                     engine_name(e) + "_S> first)");
        }
    }
}

// ------------------------------------------------------------------ engine scheduling

/// Issue an instruction to an engine of this core.
/// CTRL[48]: the float overflow mode bit (1 = Inf/NaN kept, 0 = saturation).
constexpr uint64_t kCtrlInfNan = uint64_t(1) << 48;

/// The CTRL a core starts a launch with on a device in `overflow_mode` (0 saturation, 1 Inf/NaN).
inline uint64_t ctrl_of(uint32_t overflow_mode) { return overflow_mode != 0 ? kCtrlInfNan : 0; }

/// Whether an instruction of `eng` reads CTRL when it executes: V (the mask mode, CTRL[56];
/// conversions, CTRL[48]), MTE3 and FIX (the atomic mode of moves into GM, CTRL[8:6]; Fixpipe's
/// conversions) and M (CTRL[45]), per the CTRL bit tables of SetCtrlSpr / asc_set_ctrl.
inline bool reads_ctrl(uint32_t eng) { return eng == kV || eng == kMte3 || eng == kM || eng == kFix; }

/// Record an access of the CTRL register by `who` (knowing `clk` finished): a write (the scalar
/// unit's asc_set_ctrl) not ordered after an earlier engine instruction that reads it is a race,
/// like any unordered pair of accesses to UB bytes.
inline void touch_ctrl(const Who &who, const Clock &clk, bool write) {
    CoreState &c = core();
    auto lo = reinterpret_cast<uintptr_t>(&c.ctrl);
    Conflict k = c.local.access(lo, lo + sizeof c.ctrl, write, who, clk);
    if (k.found) {
        report_race(who, write, k, "the CTRL register");
    }
}

/// Whether half/bf16 conversions saturate now (CTRL[48] = 0), read by the instruction running.
inline bool saturating() { return (core().ctrl & kCtrlInfNan) == 0; }

inline OpPtr issue(uint32_t eng, const char *what, uint32_t line, std::function<void()> body) {
    CoreState &c = core();
    OpPtr op = c.pipes.issue(eng, Op::kWork, what, line, std::move(body));
    if (reads_ctrl(eng)) {
        // Recorded at issue: the check is by happens-before (the instruction's clock), not by
        // when it runs, so no per-instruction wrapper is needed.
        touch_ctrl(op->who, op->clk, false);
    }
    c.pipes.progress();
    return op;
}

/// Run engines until `done()` holds; a state where nothing can run any more is a deadlock.
template <typename Pred>
void drain_until(Pred done, const char *why) {
    Pipes &ps = core().pipes;
    while (!done()) {
        if (!ps.step()) {
            fail(SYMSCHED_SIM_E_EVENT_MISUSE,
                 std::string(why) + ": the engines deadlock (a WaitFlag waits for a SetFlag that is never executed)");
        }
    }
}

inline void drain_all(const char *why) {
    Pipes &ps = core().pipes;
    drain_until([&ps]() { return ps.idle(); }, why);
}

/// What the next instruction of `eng` would start after, were it issued now.
inline Clock next_start(const Pipes &ps, uint32_t eng) {
    Clock c = ps.start[eng];
    c.join(ps.k_obs);
    uint32_t s = slot_of(ps.core, kS);
    c.v[s] = std::max(c.v[s], ps.n[kS]);
    return c;
}

/// PipeBarrier<PIPE_ALL>: every instruction issued so far finishes before anything after it.
/// Returns whether it ordered anything the engines and the scalar unit did not know already.
inline bool barrier_all(const char *why) {
    drain_all(why);
    CoreState &c = core();
    Pipes &ps = c.pipes;
    Clock before[kEngines];
    for (uint32_t e = 0; e < kEngines; ++e) {
        before[e] = next_start(ps, e);
    }
    Clock obs = ps.k_obs;
    for (uint32_t e = 0; e < kEngines; ++e) {
        ps.k_obs.join(ps.cumul[e]);
    }
    ps.k_obs.v[slot_of(c.index, kSst)] = ps.n[kSst];
    for (uint32_t e = 0; e < kEngines; ++e) {
        ps.start[e].join(ps.k_obs);
    }
    bool learned = !ps.k_obs.leq(obs);
    for (uint32_t e = 0; e < kEngines && !learned; ++e) {
        learned = !next_start(ps, e).leq(before[e]);
    }
    return learned;
}

// ------------------------------------------------------------------ non-blocking puts

/// Complete this core's outstanding puts and gets (aclshmem_quiet): a PipeBarrier<PIPE_ALL>
/// (which executes every queued copy) plus the runtime's own completion hook.
inline void complete_pending() {
    barrier_all("aclshmem_quiet");
    CoreState &c = core();
    know_own_puts(c);
    c.pending.clear();
    {
        std::lock_guard<std::mutex> g(c.rank->mu);
        auto &v = c.rank->puts;
        v.erase(std::remove_if(v.begin(), v.end(), [&](const std::pair<uint32_t, Who> &p) { return p.first == c.index; }),
                v.end());
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    c.dev->quiet(c.dev->ctx);
}

inline bool has_undelivered() {
    for (const PendingPut &p : core().pending) {
        if (!p.delivered && !p.is_get) {
            return true;
        }
    }
    return false;
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

inline void need_core(CoreType t, const char *what) {
    if (core().type != t) {
        fail(SYMSCHED_SIM_E_CORE_TYPE, std::string(what) + (t == CoreType::kAic
                                                                ? " runs on the Cube core (AIC); this is a vector core (AIV)"
                                                                : " runs on a vector core (AIV); this is the Cube core (AIC)"));
    }
}

// ------------------------------------------------------------------ launching cores

/// What symsched_sim_launch passes down to the launches of its kernel segments.
struct LaunchCtx {
    const symsched_device *dev = nullptr;
    uint64_t seed = 0;
    uint32_t launches = 0;
    /// This launch's number in the record of remote puts (symsched_sim_remote.h), its group
    /// and epoch.
    uint64_t run = 0;
    uint64_t world = 0;
    uint64_t epoch = 0;
    /// Puts issued by each core index so far (their sequence numbers), over all segments.
    uint32_t put_seq[kMaxCores] = {};
    /// Puts known complete at the end of the last segment (carried into the next one).
    KnowPtr know;
    /// The device's float overflow mode (symsched_launch_args::overflow_mode).
    uint32_t overflow_mode = 1;
};
inline LaunchCtx &launch_ctx() {
    static thread_local LaunchCtx c;
    return c;
}

/// End of a core's kernel: every engine drained, no SetFlag left unwaited, nothing outstanding.
inline void finish_core() {
    CoreState &c = core();
    drain_all("kernel end");
    for (uint32_t e = 0; e < kHardEvents; ++e) {
        for (uint32_t i = 0; i < kEventIds; ++i) {
            if (c.flags[e][i].set) {
                fail(SYMSCHED_SIM_E_EVENT_MISUSE, "kernel returns with a SetFlag (kernel line " +
                                                      std::to_string(c.flags[e][i].line) +
                                                      ") never waited for (SetFlag/WaitFlag must come in pairs)");
            }
        }
    }
    if (has_undelivered()) {
        fail(SYMSCHED_SIM_E_UNQUIETED_AT_EXIT, "kernel returned with non-blocking puts not completed by aclshmem_quiet");
    }
    uint64_t at_start = ctrl_of(c.rank->lc->overflow_mode);
    if (c.ctrl != at_start) {
        fail(SYMSCHED_SIM_E_CTRL, "kernel returned with CTRL[48] = " + std::to_string((c.ctrl >> 48) & 1) +
                                      ", not the " + std::to_string((at_start >> 48) & 1) +
                                      " it started with: the next kernel on this core would inherit the overflow mode");
    }
}

/// After a launch: every cross-core flag set was waited for. Documented: CrossCoreSetFlag must
/// be used together with CrossCoreWaitFlag; a counter left non-zero (or a gather that only some
/// of its cores joined) is a wait the kernel is missing, and the next launch would start with it.
inline void check_cross_flags_paired(RankShared &r) {
    uint32_t total = r.n_aiv + r.n_aic;
    auto name = [&r](uint32_t i) {
        return std::string(i < r.n_aiv ? "AIV " : "AIC ") + std::to_string(i < r.n_aiv ? i : i - r.n_aiv);
    };
    for (uint32_t i = 0; i < total; ++i) {
        for (uint32_t f = 0; f < kCrossFlags; ++f) {
            if (!r.cross[i][f].empty()) {
                fail(SYMSCHED_SIM_E_EVENT_MISUSE, "kernel returns with cross-core flag " + std::to_string(f) + " of " +
                                                      name(i) + " set " + std::to_string(r.cross[i][f].size()) +
                                                      " time(s) and never waited for (CrossCoreSetFlag and "
                                                      "CrossCoreWaitFlag must come in pairs)");
            }
            if (r.mode1[i][f].count != 0 || r.mode2[i][f].count != 0) {
                fail(SYMSCHED_SIM_E_EVENT_MISUSE, "kernel returns with cross-core flag " + std::to_string(f) +
                                                      " of AI Core " + std::to_string(i) +
                                                      " set by only some of the vector cores it gathers");
            }
        }
    }
    for (uint32_t t = 0; t < 2; ++t) {
        for (uint32_t f = 0; f < kCrossFlags; ++f) {
            if (r.mode0[t][f].count != 0) {
                fail(SYMSCHED_SIM_E_EVENT_MISUSE, "kernel returns with mode-0 cross-core flag " + std::to_string(f) +
                                                      " set by only " + std::to_string(r.mode0[t][f].count) + " of the " +
                                                      (t == 0 ? "vector" : "Cube") + " cores");
            }
        }
    }
}

inline void abort_rank(RankShared &r, const symsched_device *d) {
    bool was = r.aborted.exchange(true);
    {
        std::lock_guard<std::mutex> g(r.mu);
    }
    r.cv.notify_all();
    if (!was && d->abort != nullptr) {
        d->abort(d->ctx);
    }
}

/// Launch one kernel (segment) on this rank: `block_dim` blocks of the kernel type's cores, each
/// core a host thread running `kernel()` with its own memories and engines. Rethrows the error
/// of the core that failed first (not one that gave up because of it).
template <typename F>
void launch(uint32_t kernel_type, uint32_t block_dim, F &&kernel) {
    LaunchCtx &lc = launch_ctx();
    const symsched_device *d = lc.dev;
    uint32_t n_aiv = 0, n_aic = 0;
    switch (kernel_type) {
    case KERNEL_TYPE_AIV_ONLY:
    case KERNEL_TYPE_MIX_AIV_1_0: n_aiv = block_dim; break;
    case KERNEL_TYPE_AIC_ONLY:
    case KERNEL_TYPE_MIX_AIC_1_0: n_aic = block_dim; break;
    case KERNEL_TYPE_MIX_AIC_1_1: n_aiv = n_aic = block_dim; break;
    case KERNEL_TYPE_MIX_AIC_1_2: n_aic = block_dim; n_aiv = 2 * block_dim; break;
    default: fail(SYMSCHED_SIM_E_UNSUPPORTED, "unknown kernel type " + std::to_string(kernel_type));
    }
    if (block_dim == 0 || n_aiv + n_aic > kMaxCores) {
        fail(SYMSCHED_SIM_E_UNSUPPORTED, "blockDim " + std::to_string(block_dim) + " of kernel type " +
                                             std::to_string(kernel_type) + ": the simulation runs 1 to " +
                                             std::to_string(kMaxCores) + " cores per rank");
    }
    RankShared rank;
    rank.lc = &lc;
    rank.world = lc.world;
    rank.run = lc.run;
    rank.n_aiv = n_aiv;
    rank.n_aic = n_aic;
    uint32_t total = n_aiv + n_aic;
    std::vector<std::unique_ptr<CoreState>> cores;
    for (uint32_t i = 0; i < total; ++i) {
        auto c = std::make_unique<CoreState>();
        c->dev = d;
        c->rank = &rank;
        c->index = i;
        c->type = i < n_aiv ? CoreType::kAiv : CoreType::kAic;
        c->block_idx = i < n_aiv ? i : i - n_aiv;
        c->block_num = block_dim;
        c->pipes.core = i;
        c->pipes.seed(lc.seed ^ (uint64_t(lc.launches) << 32) ^ (uint64_t(i) << 48));
        c->ctrl = ctrl_of(lc.overflow_mode);
        // What earlier segments of this launch knew complete.
        c->pipes.k_obs.rem = lc.know;
        for (uint32_t e = 0; e < kEngines; ++e) {
            c->pipes.start[e].rem = lc.know;
        }
        rank.cores[i] = c.get();
        cores.push_back(std::move(c));
    }
    ++lc.launches;
    std::vector<Error> errors(total, Error{SYMSCHED_SIM_OK, "", false});
    auto body = [&](uint32_t i) {
        current_slot() = cores[i].get();
        // Whatever way the core leaves, the others' deadlock check must see it gone.
        auto gone = [&rank, i]() {
            std::lock_guard<std::mutex> g(rank.mu);
            rank.returned[i] = true;
            rank.cv.notify_all();
        };
        try {
            kernel();
            finish_core();
            gone();
        } catch (const Error &e) {
            errors[i] = e;
            if (rank.aborted.load() && e.code == SYMSCHED_SIM_E_WAIT_FAILED) {
                errors[i].secondary = true;
            }
            abort_rank(rank, d);
        } catch (const std::exception &e) {
            errors[i] = Error{SYMSCHED_SIM_E_ABI, std::string("internal error: ") + e.what(), false};
            abort_rank(rank, d);
        } catch (...) {
            // Nothing may leave a core: the other cores use this frame until they are joined.
            errors[i] = Error{SYMSCHED_SIM_E_ABI, "internal error: unknown exception on a core", false};
            abort_rank(rank, d);
        }
        if (errors[i].code != SYMSCHED_SIM_OK) {
            gone();
        }
        current_slot() = nullptr;
    };
    CoreState *outer = current_slot();
    std::vector<std::thread> threads;
    threads.reserve(total);
    try {
        for (uint32_t i = 1; i < total; ++i) {
            threads.emplace_back(body, i);
        }
    } catch (const std::system_error &e) {
        // The cores already started run on `rank`, `cores` and `errors`: stop and join them
        // before this frame goes away.
        errors[0] = Error{SYMSCHED_SIM_E_ABI, std::string("cannot start a core thread: ") + e.what(), false};
        abort_rank(rank, d);
    }
    if (threads.size() + 1 == total) {
        body(0);
    }
    for (std::thread &t : threads) {
        t.join();
    }
    current_slot() = outer;
    remote_segment_end(lc.world, d->my_pe);
    // A segment ends with every core's puts completed (finish_core).
    for (uint32_t i = 0; i < total; ++i) {
        lc.know = know_join(lc.know, cores[i]->pipes.k_obs.rem);
        lc.know = know_with(lc.know, put_source(lc.run, i), lc.put_seq[i]);
    }
    const Error *first = nullptr;
    for (const Error &e : errors) {
        if (e.code != SYMSCHED_SIM_OK && (first == nullptr || (first->secondary && !e.secondary))) {
            first = &e;
        }
    }
    if (first != nullptr) {
        std::string where = total > 1 ? " [core " + std::to_string(first - errors.data()) + "]" : "";
        throw Error{first->code, first->message + where, first->secondary};
    }
    check_cross_flags_paired(rank);
}

/// Runs one simulated launch (every kernel segment and the host collectives between them):
/// checks the ABI and maps errors to status codes.
template <typename F>
int32_t run(const symsched_device *d, const symsched_launch_args *a, uint32_t n_buffers, F &&stub) {
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
    if (a->overflow_mode > 1) {
        return report(SYMSCHED_SIM_E_ABI, "overflow_mode " + std::to_string(a->overflow_mode) +
                                              ": 0 (saturation) or 1 (Inf/NaN) expected");
    }
    LaunchCtx &lc = launch_ctx();
    lc.dev = d;
    lc.overflow_mode = a->overflow_mode;
    lc.seed = a->seed ^ (a->epoch * 0x2545f4914f6cdd1dull);
    lc.launches = 0;
    lc.world = a->world;
    lc.epoch = a->epoch;
    lc.run = remote_run_begin();
    std::fill(std::begin(lc.put_seq), std::end(lc.put_seq), 0u);
    lc.know.reset();
    int32_t code = SYMSCHED_SIM_OK;
    try {
        stub();
    } catch (const Error &e) {
        code = report(e.code, e.message);
    } catch (const std::exception &e) {
        code = report(SYMSCHED_SIM_E_ABI, std::string("internal error: ") + e.what());
    }
    LateFound late = remote_run_end(lc.world, d->my_pe, lc.epoch, lc.run, code != SYMSCHED_SIM_OK, lc.know);
    if (late.found && code == SYMSCHED_SIM_OK) {
        const PutRec &p = late.put;
        code = report(SYMSCHED_SIM_E_GM_RACE,
                      "PE " + std::to_string(p.recv_pe) + "'s launch (epoch " + std::to_string(p.epoch) + ") ends before " +
                          p.what + " of PE " + std::to_string(p.sender_pe) + " (core " + std::to_string(p.core) +
                          (p.line != 0 ? ", kernel line " + std::to_string(p.line) : "") +
                          ") into its GM is known complete: no signal it waited for carries the put's completion "
                          "(aclshmem_quiet of the putting core, then a signal from it or from a core ordered after it), "
                          "so the data may land after the kernel returned");
    }
    lc.know.reset();
    lc.dev = nullptr;
    return code;
}

inline void know_own_puts(CoreState &c) {
    uint32_t seq = c.rank->lc->put_seq[c.index];
    if (seq == 0) {
        return;
    }
    Pipes &ps = c.pipes;
    ps.k_obs.rem = know_with(ps.k_obs.rem, put_source(c.rank->lc->run, c.index), seq);
    for (uint32_t e = 0; e < kEngines; ++e) {
        ps.start[e].rem = know_join(ps.start[e].rem, ps.k_obs.rem);
    }
}

inline uint32_t note_put(void *dst, uint64_t bytes, int32_t pe, const char *what, uint32_t line) {
    CoreState &c = core();
    LaunchCtx &lc = *c.rank->lc;
    uint32_t seq = ++lc.put_seq[c.index];
    if (lc.world == 0) {
        return seq;  // untraced launch group: no put is recorded, so none is ever reported
    }
    PutRec rec;
    rec.src = put_source(lc.run, c.index);
    rec.seq = seq;
    rec.run = lc.run;
    rec.world = lc.world;
    rec.epoch = lc.epoch;
    rec.recv_pe = pe;
    rec.sender_pe = c.dev->my_pe;
    rec.seg = lc.launches;
    rec.core = c.index;
    rec.what = what;
    rec.line = line;
    auto lo = reinterpret_cast<uintptr_t>(dst);
    record_put(lo, lo + bytes, rec);
    return seq;
}

}  // namespace symsim

#endif  // SYMSCHED_SIM_CORE_H
