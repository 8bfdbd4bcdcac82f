// symsched_sim_pipes.h — the engines (pipes) of a simulated AI core running concurrently.
//
// Model. A core's scalar unit runs the kernel's C++ and issues every other instruction into the
// queue of the engine that executes it: MTE2 (GM -> UB/L1 copies, also the GM -> GM puts of
// shmem), MTE3 (UB -> GM, UB-source puts), V (vector), MTE1 (L1 -> L0A/L0B), M (Cube Mmad),
// FIX (Fixpipe L0C -> GM). Each engine executes its queue in order, but the engines run
// independently of each other and of the scalar unit: this simulation interleaves them by a
// seeded pseudo-random schedule, and the only things that order two instructions of different
// engines are the ones CANN documents: SetFlag/WaitFlag, a queue's EnQue/DeQue and
// FreeTensor/AllocTensor, PipeBarrier, aclshmem_quiet/fence (a PipeBarrier<PIPE_ALL>), the
// cross-core flags and SyncAll. Two instructions of one engine are not ordered either unless a
// PipeBarrier of that engine separates them ("具有数据依赖的相同流水之间需要插入此同步"), except
// the scalar unit, which is in order. What an instruction may assume has finished is a vector
// clock over every engine of every core of the rank (`Clock`); every byte an instruction reads
// or writes in UB, L1/L0 or this PE's GM is checked against the last writer and readers of that
// byte (`Shadow`), so an unordered pair is reported by name whatever the interleaving chose —
// the seed only decides which stale data the run also sees.
#ifndef SYMSCHED_SIM_PIPES_H
#define SYMSCHED_SIM_PIPES_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "symsched_sim_remote.h"

namespace symsim {

/// Engines of one core. `kS` are the scalar unit's loads (synchronous: everything the scalar
/// issues after a load is after it) and `kSst` its stores (posted: other engines see them only
/// after a SetFlag<S_*>/WaitFlag pair).
enum Engine : uint32_t { kS = 0, kSst, kV, kMte2, kMte3, kMte1, kM, kFix, kEngines };

inline const char *engine_name(uint32_t e) {
    switch (e) {
    case kS: return "scalar";
    case kSst: return "scalar store";
    case kV: return "V";
    case kMte2: return "MTE2";
    case kMte3: return "MTE3";
    case kMte1: return "MTE1";
    case kM: return "M (Cube)";
    default: return "FIX";
    }
}

/// Cores of one rank a launch may run (AIVs first, then AICs): 16 AIVs, or 8 AI Cores of one
/// AIC and two AIVs (KERNEL_TYPE_MIX_AIC_1_2).
constexpr uint32_t kMaxCores = 24;
constexpr uint32_t kSlots = kMaxCores * kEngines;
inline uint32_t slot_of(uint32_t core, uint32_t eng) { return core * kEngines + eng; }

/// v[slot] = k: the first k instructions of that engine are known to have finished; `rem`: the
/// puts (of any rank in this process) known complete (symsched_sim_remote.h).
struct Clock {
    uint32_t v[kSlots];
    KnowPtr rem;
    Clock() { std::memset(v, 0, sizeof v); }
    void join(const Clock &o) {
        for (uint32_t i = 0; i < kSlots; ++i) {
            v[i] = std::max(v[i], o.v[i]);
        }
        if (o.rem != rem) {
            rem = know_join(rem, o.rem);
        }
    }
    /// Whether everything this clock knows, `o` knows too.
    bool leq(const Clock &o) const {
        for (uint32_t i = 0; i < kSlots; ++i) {
            if (v[i] > o.v[i]) {
                return false;
            }
        }
        return know_leq(rem, o.rem);
    }
};

/// One instruction as the race reports name it.
struct Who {
    uint32_t slot = 0;
    uint32_t idx = 0;  // 1-based position in its engine's queue; 0 = none
    const char *what = "";
    uint32_t line = 0;
};

inline bool happens_before(const Who &a, const Clock &c) { return c.v[a.slot] >= a.idx; }
inline bool same_instr(const Who &a, const Who &b) { return a.slot == b.slot && a.idx == b.idx; }

/// A conflicting earlier access found by Shadow::access.
struct Conflict {
    bool found = false;
    Who other;
    bool other_wrote = false;
    uintptr_t lo = 0, hi = 0;
};

/// Last writer and the readers since, of every byte of a memory, kept as maximal runs of bytes
/// with the same history (tiles are contiguous, so a write collapses its range to one run).
class Shadow {
public:
    /// Record an access of [lo, hi) by `who` whose finished-before knowledge is `clk`; returns the
    /// first earlier access not ordered before it (read-write or write-write).
    Conflict access(uintptr_t lo, uintptr_t hi, bool write, const Who &who, const Clock &clk) {
        Conflict c;
        if (lo >= hi) {
            return c;
        }
        split(lo);
        split(hi);
        uintptr_t pos = lo;
        auto it = segs_.lower_bound(lo);
        while (pos < hi) {
            if (it == segs_.end() || it->first > pos) {
                uintptr_t end = it == segs_.end() ? hi : std::min(hi, it->first);
                it = segs_.emplace_hint(it, pos, Seg{end, Cell{}});
            }
            Cell &cell = it->second.cell;
            if (!c.found && cell.writer.idx != 0 && !same_instr(cell.writer, who) &&
                !happens_before(cell.writer, clk)) {
                c = Conflict{true, cell.writer, true, pos, it->second.end};
            }
            if (write) {
                for (const Who &r : cell.readers) {
                    if (!c.found && !same_instr(r, who) && !happens_before(r, clk)) {
                        c = Conflict{true, r, false, pos, it->second.end};
                    }
                }
                cell.writer = who;
                cell.readers.clear();
            } else {
                bool merged = false;
                for (Who &r : cell.readers) {
                    if (r.slot == who.slot) {
                        // Instructions of one engine finish in order of their knowledge: a later
                        // one being ordered before X implies the earlier ones are too.
                        if (who.idx > r.idx) {
                            r = who;
                        }
                        merged = true;
                    }
                }
                if (!merged) {
                    cell.readers.push_back(who);
                }
            }
            pos = it->second.end;
            ++it;
        }
        coalesce(lo, hi);
        return c;
    }
    void clear() { segs_.clear(); }
    size_t runs() const { return segs_.size(); }

private:
    struct Cell {
        Who writer;
        std::vector<Who> readers;
        bool operator==(const Cell &o) const {
            if (!same_instr(writer, o.writer) || readers.size() != o.readers.size()) {
                return false;
            }
            for (size_t i = 0; i < readers.size(); ++i) {
                if (!same_instr(readers[i], o.readers[i])) {
                    return false;
                }
            }
            return true;
        }
    };
    struct Seg {
        uintptr_t end;
        Cell cell;
    };
    std::map<uintptr_t, Seg> segs_;

    void split(uintptr_t at) {
        auto it = segs_.upper_bound(at);
        if (it == segs_.begin()) {
            return;
        }
        --it;
        if (it->first < at && it->second.end > at) {
            Seg tail{it->second.end, it->second.cell};
            it->second.end = at;
            segs_.emplace(at, tail);
        }
    }
    void coalesce(uintptr_t lo, uintptr_t hi) {
        auto it = segs_.upper_bound(lo);
        if (it != segs_.begin()) {
            --it;
        }
        while (it != segs_.end() && it->first <= hi) {
            auto next = std::next(it);
            if (next == segs_.end()) {
                break;
            }
            if (it->second.end == next->first && it->second.cell == next->second.cell) {
                it->second.end = next->second.end;
                segs_.erase(next);
            } else {
                it = next;
            }
        }
    }
};

/// An instruction in an engine queue.
struct Op {
    enum Kind : uint8_t { kWork, kSetMark, kWaitMark };
    Kind kind = kWork;
    uint32_t eng = 0;
    Who who;
    Clock clk;                           // finished before it starts (own instruction excluded)
    std::function<void()> body;          // kWork; also run by a kSetMark (cross-core flags)
    std::shared_ptr<Op> waits_on;        // kWaitMark: the mark it waits for
    bool done = false;
};
using OpPtr = std::shared_ptr<Op>;

/// Interleaving policies a seed picks from.
enum class Policy : uint32_t { kRandom = 0, kLazy, kEager };

/// Engine queues and knowledge of one core.
class Pipes {
public:
    uint32_t core = 0;
    uint32_t n[kEngines] = {};   // instructions issued per engine
    Clock start[kEngines];       // what the next instruction of each engine starts after
    Clock cumul[kEngines];       // everything issued to each engine (what a SetFlag publishes)
    Clock k_obs;                 // what the scalar unit knows has finished
    std::deque<OpPtr> q[kEngines];
    Policy policy = Policy::kRandom;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    /// Instruction whose memory effects are running now (nullptr: the scalar unit itself).
    const Op *current = nullptr;

    void seed(uint64_t s) {
        rng = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull + core;
        if (rng == 0) {
            rng = 1;
        }
        policy = static_cast<Policy>(next() % 3);
    }
    uint64_t next() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
    }

    /// The scalar unit's own knowledge: what it observed, its loads, and its own stores.
    Clock scalar_clock() const {
        Clock c = k_obs;
        c.v[slot_of(core, kSst)] = n[kSst];
        c.v[slot_of(core, kS)] = n[kS];
        return c;
    }

    /// What a mark issued to `eng` now publishes when it executes: everything issued to `eng`
    /// before it, and everything the scalar unit knew finished when it issued the mark (its
    /// loads included; its posted stores not).
    Clock published(uint32_t eng) const {
        Clock c = cumul[eng];
        c.join(k_obs);
        c.v[slot_of(core, kS)] = std::max(c.v[slot_of(core, kS)], n[kS]);
        return c;
    }

    OpPtr issue(uint32_t eng, Op::Kind kind, const char *what, uint32_t line, std::function<void()> body) {
        OpPtr op = std::make_shared<Op>();
        op->kind = kind;
        op->eng = eng;
        op->clk = start[eng];
        op->clk.join(k_obs);
        op->clk.v[slot_of(core, kS)] = std::max(op->clk.v[slot_of(core, kS)], n[kS]);
        // Every later instruction of `eng` starts after k_obs too: sharing the joined put
        // knowledge keeps later joins to a pointer comparison.
        start[eng].rem = op->clk.rem;
        if (kind == Op::kWork) {
            op->who = Who{slot_of(core, eng), ++n[eng], what, line};
            cumul[eng].join(op->clk);
            cumul[eng].v[slot_of(core, eng)] = n[eng];
        } else {
            op->who = Who{slot_of(core, eng), 0, what, line};
        }
        op->body = std::move(body);
        q[eng].push_back(op);
        return op;
    }

    bool runnable(uint32_t e) const {
        if (q[e].empty()) {
            return false;
        }
        const Op &h = *q[e].front();
        return h.kind != Op::kWaitMark || h.waits_on->done;
    }
    /// Execute one runnable queue head, chosen by the schedule; false if none can run.
    bool step() {
        uint32_t ready[kEngines];
        uint32_t k = 0;
        for (uint32_t e = 0; e < kEngines; ++e) {
            if (runnable(e)) {
                ready[k++] = e;
            }
        }
        if (k == 0) {
            return false;
        }
        uint32_t e = ready[next() % k];
        OpPtr op = q[e].front();
        q[e].pop_front();
        if (op->body) {
            const Op *prev = current;
            current = op.get();
            op->body();
            current = prev;
        }
        op->done = true;
        return true;
    }
    bool idle() const {
        for (uint32_t e = 0; e < kEngines; ++e) {
            if (!q[e].empty()) {
                return false;
            }
        }
        return true;
    }
    /// After an issue: let the engines catch up as the policy says.
    void progress() {
        switch (policy) {
        case Policy::kLazy: break;
        case Policy::kEager:
            while (step()) {
            }
            break;
        default:
            while ((next() & 3) != 0 && step()) {
            }
            break;
        }
    }
};

}  // namespace symsim

#endif  // SYMSCHED_SIM_PIPES_H
