// symsched_sim_remote.h — what the puts of a rank write into a PE's GM, and what orders a later
// read of those bytes after the put.
//
// Model. On the device a put (aclshmem_putmem_nbi, the UB-source puts, putmem_signal_nbi) is an
// MTE operation that writes the peer's GM some time before the putting core's aclshmem_quiet
// (or fence) returns; putmem_signal_nbi delivers its data before its signal. A read of those
// bytes — by any engine of any core of the receiving PE, or by a put that forwards them — sees
// the data only if it is ordered after the put's completion: the putting core quieted, then a
// signal left (that core's, or another core's ordered after it by cross-core flags), and the
// reader's core waited for that signal before it issued the read. The simulation records every
// put's destination range (`PutRec`) and carries, with every vector clock (`Clock::rem`), which
// puts are known complete (`Know`); a read of recorded bytes whose clock does not know the put
// complete is a race by happens-before, whatever the thread timing (`SYMSCHED_SIM_E_GM_RACE`).
//
// Knowledge travels with signals: a signal records what its sender knows (`SigRec`, in the
// order the signals reach the word, with the word's value after each); a wait that observes the
// value v learns what the signals up to v knew (signal values only grow within a launch).
//
// A launch's end is a read of everything put into the PE: the host (or the next kernel) reads
// the buffers once the kernel returned, so every put of the same launch epoch into the PE must
// be known complete to the PE by then. Checked when the receiver's launch ends for the puts
// recorded so far, and when the putting rank's launch ends for a put recorded after the
// receiver's end — with the receiver's final knowledge either way, so the answer does not
// depend on which thread got there first.
//
// Scope: records are per loaded kernel library and process, and per launch group (`world`, the
// launch arguments' group id: equal on the ranks of one group, never reused in a process); a
// multi-process group checks only the puts between ranks of one process. A put's record is
// dropped once checked at the receiver's end (or the putter's), when a launch fails, and at a
// host collective between kernel segments (it orders every put of an earlier segment of its
// members); a signal's when its receiver ends the signal's launch epoch (not earlier: a peer
// may run one launch ahead). Records into a PE whose launches end in another process are
// dropped `kUncheckedEpochs` later.
#ifndef SYMSCHED_SIM_REMOTE_H
#define SYMSCHED_SIM_REMOTE_H

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace symsim {

/// Puts known complete: sorted (put source, sequence) pairs — source = a core of one launch of
/// one rank (`put_source`), sequence s: that core's puts 1..s have completed.
struct Know {
    std::vector<std::pair<uint64_t, uint32_t>> v;
};
using KnowPtr = std::shared_ptr<const Know>;

/// Cores a put source number leaves room for.
constexpr uint64_t kPutSourceCores = 64;
inline uint64_t put_source(uint64_t run, uint32_t core) { return run * kPutSourceCores + core; }

inline bool know_has(const KnowPtr &k, uint64_t src, uint32_t seq) {
    if (seq == 0) {
        return true;
    }
    if (!k) {
        return false;
    }
    auto it = std::lower_bound(k->v.begin(), k->v.end(), std::make_pair(src, uint32_t(0)));
    return it != k->v.end() && it->first == src && it->second >= seq;
}

/// Whether everything `a` knows, `b` knows too.
inline bool know_leq(const KnowPtr &a, const KnowPtr &b) {
    if (!a || a == b) {
        return true;
    }
    for (const auto &p : a->v) {
        if (!know_has(b, p.first, p.second)) {
            return false;
        }
    }
    return true;
}

inline KnowPtr know_join(const KnowPtr &a, const KnowPtr &b) {
    if (know_leq(b, a)) {
        return a;
    }
    if (know_leq(a, b)) {
        return b;
    }
    auto k = std::make_shared<Know>();
    size_t i = 0, j = 0;
    while (i < a->v.size() || j < b->v.size()) {
        if (j == b->v.size() || (i < a->v.size() && a->v[i].first < b->v[j].first)) {
            k->v.push_back(a->v[i++]);
        } else if (i == a->v.size() || b->v[j].first < a->v[i].first) {
            k->v.push_back(b->v[j++]);
        } else {
            k->v.emplace_back(a->v[i].first, std::max(a->v[i].second, b->v[j].second));
            ++i;
            ++j;
        }
    }
    return k;
}

inline KnowPtr know_with(const KnowPtr &k, uint64_t src, uint32_t seq) {
    if (know_has(k, src, seq)) {
        return k;
    }
    auto one = std::make_shared<Know>();
    one->v.emplace_back(src, seq);
    return know_join(k, one);
}

/// One put's write into a PE's GM.
struct PutRec {
    uint64_t src = 0;       // put source (launch of the putting rank, core)
    uint32_t seq = 0;       // its sequence number at that source
    uint64_t run = 0;       // launch of the putting rank
    uint64_t world = 0;     // launch group
    uint64_t epoch = 0;     // launch epoch of the putting rank
    int32_t recv_pe = 0;    // receiving PE (group-local)
    int32_t sender_pe = 0;  // putting PE (group-local)
    uint32_t seg = 0;       // kernel segment of the putting rank's launch (1-based)
    uint32_t core = 0;      // putting core (index in its rank)
    const char *what = "";
    uint32_t line = 0;
};

/// One engine's write into its own PE's GM (an MTE3 store, a Fixpipe row, a blocking get's
/// landing): a peer may read those bytes with a get once a signal told it the write finished.
/// Knowledge of it travels like a put's, under the source `local_source(run, core)` with the
/// writing core's local-write sequence number (signals carry the prefix of each core's local
/// writes that the signalling instruction knew finished).
struct LocalRec {
    uint64_t world = 0;
    uint64_t run = 0;       // launch of the writing rank
    int32_t pe = 0;         // the writing (and owning) PE
    uint32_t core = 0;      // writing core
    uint32_t seq = 0;       // its local-write sequence number
    const char *what = "";
    uint32_t line = 0;
};

/// Local-write knowledge sources start past every core a put source can name (kMaxCores <= 32).
constexpr uint32_t kLocalSourceBase = 32;

/// What a signal's sender core knew finished inside its own rank (its scalar unit's vector
/// clock), for a waiter on another core of the same launch of that rank: one channel signalling
/// another. Defined with the clocks (symsched_sim_core.h).
struct LocalClock;
using LocalClockPtr = std::shared_ptr<const LocalClock>;

/// One signal as it reached a word: the word's value after it, what its sender knew, and the
/// sender's launch epoch; for a signal to the sender's own PE also the sender's launch (`run`)
/// and clock.
struct SigRec {
    uint64_t world = 0;
    uint64_t epoch = 0;
    int32_t recv_pe = 0;
    int32_t after = 0;
    KnowPtr know;
    uint64_t run = 0;
    LocalClockPtr local;
};

/// How a PE's last launch of a group ended: its epoch, whether it failed, and the puts it knew
/// complete at its end.
struct Ended {
    uint64_t epoch = 0;
    bool failed = false;
    KnowPtr know;
};

/// A put that the PE it wrote to did not know complete when its launch ended.
struct LateFound {
    bool found = false;
    PutRec put;
};

/// The record of one kernel library in this process.
struct Remote {
    std::mutex mu;
    std::atomic<size_t> n_puts{0};
    /// Disjoint byte runs [lo, second.first) of GM and the last put that wrote each.
    std::map<uintptr_t, std::pair<uintptr_t, PutRec>> puts;
    /// Signal word address -> the signals that reached it.
    std::map<uintptr_t, std::vector<SigRec>> sigs;
    /// (group, PE) -> how its last launch ended.
    std::map<std::pair<uint64_t, int32_t>, Ended> ended;
    /// Disjoint byte runs of GM and the last local write of each, until the writer's kernel
    /// segment ends (its engines then drained).
    std::atomic<size_t> n_locals{0};
    std::map<uintptr_t, std::pair<uintptr_t, LocalRec>> locals;
    uint64_t next_run = 1;
};

inline Remote &remote_state() {
    static Remote r;
    return r;
}

namespace remote_detail {
/// Remove the parts of runs overlapping [lo, hi) (caller holds the lock).
template <typename Runs>
void cut(Runs &runs, uintptr_t lo, uintptr_t hi) {
    auto it = runs.lower_bound(lo);
    if (it != runs.begin()) {
        auto prev = std::prev(it);
        if (prev->second.first > lo) {
            it = prev;
        }
    }
    while (it != runs.end() && it->first < hi) {
        uintptr_t a = it->first, b = it->second.first;
        auto rec = it->second.second;
        it = runs.erase(it);
        if (a < lo) {
            runs.emplace(a, std::make_pair(lo, rec));
        }
        if (b > hi) {
            it = runs.emplace(hi, std::make_pair(b, rec)).first;
            ++it;
        }
    }
}
/// The first run of `runs` overlapping [lo, hi) (caller holds the lock).
template <typename Runs>
auto first_overlap(Runs &runs, uintptr_t lo) {
    auto it = runs.lower_bound(lo);
    if (it != runs.begin()) {
        auto prev = std::prev(it);
        if (prev->second.first > lo) {
            it = prev;
        }
    }
    return it;
}
template <typename Pred>
void erase_puts_if(Remote &r, Pred p) {
    for (auto it = r.puts.begin(); it != r.puts.end();) {
        it = p(it->second.second) ? r.puts.erase(it) : std::next(it);
    }
    r.n_puts.store(r.puts.size(), std::memory_order_relaxed);
}
}  // namespace remote_detail

namespace remote_detail {
/// `rec` becomes the last writer of [lo, hi) in `runs`, whose size `n` mirrors.
template <typename Runs, typename Rec>
void record_run(Runs &runs, std::atomic<size_t> &n, uintptr_t lo, uintptr_t hi, const Rec &rec) {
    if (lo >= hi) {
        return;
    }
    std::lock_guard<std::mutex> g(remote_state().mu);
    cut(runs, lo, hi);
    runs.emplace(lo, std::make_pair(hi, rec));
    n.store(runs.size(), std::memory_order_relaxed);
}
}  // namespace remote_detail

/// A put writes [lo, hi) of a PE's GM.
inline void record_put(uintptr_t lo, uintptr_t hi, const PutRec &rec) {
    Remote &r = remote_state();
    remote_detail::record_run(r.puts, r.n_puts, lo, hi, rec);
}

/// The first put of group `world` into [lo, hi) that `k` does not know complete, if any.
inline bool unordered_put(uintptr_t lo, uintptr_t hi, uint64_t world, const KnowPtr &k, PutRec *out, uintptr_t *at) {
    Remote &r = remote_state();
    if (r.n_puts.load(std::memory_order_relaxed) == 0) {
        return false;
    }
    std::lock_guard<std::mutex> g(r.mu);
    for (auto it = remote_detail::first_overlap(r.puts, lo); it != r.puts.end() && it->first < hi; ++it) {
        const PutRec &p = it->second.second;
        if (p.world == world && !know_has(k, p.src, p.seq)) {
            *out = p;
            *at = std::max(lo, it->first);
            return true;
        }
    }
    return false;
}

/// A local write of [lo, hi) (see `LocalRec`).
inline void record_local(uintptr_t lo, uintptr_t hi, const LocalRec &rec) {
    Remote &r = remote_state();
    remote_detail::record_run(r.locals, r.n_locals, lo, hi, rec);
}

/// The first local write of group `world` into [lo, hi) that `k` does not know finished, if any.
inline bool unordered_local(uintptr_t lo, uintptr_t hi, uint64_t world, const KnowPtr &k, LocalRec *out,
                            uintptr_t *at) {
    Remote &r = remote_state();
    if (r.n_locals.load(std::memory_order_relaxed) == 0) {
        return false;
    }
    std::lock_guard<std::mutex> g(r.mu);
    for (auto it = remote_detail::first_overlap(r.locals, lo); it != r.locals.end() && it->first < hi; ++it) {
        const LocalRec &w = it->second.second;
        if (w.world == world && !know_has(k, put_source(w.run, kLocalSourceBase + w.core), w.seq)) {
            *out = w;
            *at = std::max(lo, it->first);
            return true;
        }
    }
    return false;
}

/// PE `pe` of group `world` finished a kernel segment: every local write it made has landed.
inline void remote_segment_end(uint64_t world, int32_t pe) {
    Remote &r = remote_state();
    if (r.n_locals.load(std::memory_order_relaxed) == 0) {
        return;
    }
    std::lock_guard<std::mutex> g(r.mu);
    for (auto it = r.locals.begin(); it != r.locals.end();) {
        const LocalRec &w = it->second.second;
        it = (w.world == world && w.pe == pe) ? r.locals.erase(it) : std::next(it);
    }
    r.n_locals.store(r.locals.size(), std::memory_order_relaxed);
}

/// What a wait of group `world` that observed `value` on the word at `word` learns.
inline KnowPtr acquire_signal(uintptr_t word, uint64_t world, int32_t value) {
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.sigs.find(word);
    KnowPtr k;
    if (it == r.sigs.end()) {
        return k;
    }
    for (const SigRec &s : it->second) {
        if (s.world == world && static_cast<int32_t>(static_cast<uint32_t>(value) - static_cast<uint32_t>(s.after)) >= 0) {
            k = know_join(k, s.know);
        }
    }
    return k;
}

/// A signal to the word at `peer_word` (the receiver's, in this process) that carries what the
/// sender knows `k`; `send` delivers it. The word's value after it is recorded under the lock, so
/// signals of this library reach a word in the order they are recorded.
template <typename F>
void publish_signal(int32_t *peer_word, uint64_t world, uint64_t epoch, int32_t recv_pe, int32_t value, int op,
                    const KnowPtr &k, F send) {
    if (!k) {
        send();
        return;
    }
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    int32_t before = __atomic_load_n(peer_word, __ATOMIC_ACQUIRE);
    int32_t after = op == 0 ? value : static_cast<int32_t>(static_cast<uint32_t>(before) + static_cast<uint32_t>(value));
    r.sigs[reinterpret_cast<uintptr_t>(peer_word)].push_back(SigRec{world, epoch, recv_pe, after, k});
    send();
}

/// `publish_signal` for a signal to the sender's own PE: recorded even without put knowledge,
/// with the sender's launch `run` and clock `local` (see `acquire_local_clocks`).
template <typename F>
void publish_self_signal(int32_t *word, uint64_t world, uint64_t epoch, int32_t pe, int32_t value, int op,
                         const KnowPtr &k, uint64_t run, const LocalClockPtr &local, F send) {
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    int32_t before = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    int32_t after = op == 0 ? value : static_cast<int32_t>(static_cast<uint32_t>(before) + static_cast<uint32_t>(value));
    r.sigs[reinterpret_cast<uintptr_t>(word)].push_back(SigRec{world, epoch, pe, after, k, run, local});
    send();
}

/// The clocks of the signals from cores of launch `run` (the waiter's own rank's launch) that a
/// wait observing `value` on the word at `word` saw arrive.
inline std::vector<LocalClockPtr> acquire_local_clocks(uintptr_t word, uint64_t world, uint64_t run, int32_t value) {
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    std::vector<LocalClockPtr> out;
    auto it = r.sigs.find(word);
    if (it == r.sigs.end()) {
        return out;
    }
    for (const SigRec &s : it->second) {
        if (s.local && s.world == world && s.run == run &&
            static_cast<int32_t>(static_cast<uint32_t>(value) - static_cast<uint32_t>(s.after)) >= 0) {
            out.push_back(s.local);
        }
    }
    return out;
}

/// A rank's launch starts; returns the launch's number.
inline uint64_t remote_run_begin() {
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    return r.next_run++;
}

/// Epochs a record of a put or signal into a PE whose launches do not end in this process (a
/// multi-process group) is kept after it was made: launch credits keep every peer within one
/// launch of its waiter, so a receiver in this process has checked and dropped it by then.
constexpr uint64_t kUncheckedEpochs = 2;

/// PE `pe` of group `world` ends its launch `run` of `epoch` knowing `know` complete (or
/// failed). Checks every put of that epoch recorded into it so far, and every put of this launch
/// recorded after its receiver's launch of the same epoch ended; drops what was checked, the
/// signals of this or an earlier epoch that reached the PE's words, the launch's own puts if it
/// failed, and records older than `kUncheckedEpochs` (of a receiver outside this process).
/// Returns the first put not known complete.
///
/// Signals of a later epoch stay: without a barrier between launches a peer that got this PE's
/// launch credit may already run the next launch, and a signal it sent now (with a put the PE
/// reads in its next launch) must still tell the PE's wait that the put completed.
inline LateFound remote_run_end(uint64_t world, int32_t pe, uint64_t epoch, uint64_t run, bool failed,
                                const KnowPtr &know) {
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    LateFound late;
    r.ended[std::make_pair(world, pe)] = Ended{epoch, failed, know};
    auto stale = [epoch](uint64_t e) { return e + kUncheckedEpochs < epoch; };
    for (auto s = r.sigs.begin(); s != r.sigs.end();) {
        auto &v = s->second;
        v.erase(std::remove_if(v.begin(), v.end(),
                               [&](const SigRec &x) {
                                   return x.world == world && ((x.recv_pe == pe && x.epoch <= epoch) || stale(x.epoch));
                               }),
                v.end());
        s = v.empty() ? r.sigs.erase(s) : std::next(s);
    }
    remote_detail::erase_puts_if(r, [&](const PutRec &p) {
        if (p.world != world) {
            return false;
        }
        if (stale(p.epoch)) {
            return true;
        }
        if (p.recv_pe == pe && p.epoch <= epoch) {
            // Into this PE: known complete at its end (a failed launch is not checked).
            if (!failed && p.epoch == epoch && !late.found && !know_has(know, p.src, p.seq)) {
                late = LateFound{true, p};
            }
            return true;
        }
        if (p.run != run) {
            return false;
        }
        if (failed) {
            return true;
        }
        // This launch's put into a PE whose launch of the epoch ended before the put was recorded.
        auto e = r.ended.find(std::make_pair(world, p.recv_pe));
        if (e == r.ended.end() || e->second.epoch < p.epoch) {
            return false;
        }
        if (!e->second.failed && e->second.epoch == p.epoch && !late.found && !know_has(e->second.know, p.src, p.seq)) {
            late = LateFound{true, p};
        }
        return true;
    });
    return late;
}

/// A host collective over `members` returned on PE `pe` of group `world` after `seg` kernel
/// segments: the members' puts into it from those segments are complete and ordered before it.
inline void remote_host_coll(uint64_t world, int32_t pe, const int32_t *members, int32_t n_members, uint32_t seg) {
    Remote &r = remote_state();
    std::lock_guard<std::mutex> g(r.mu);
    remote_detail::erase_puts_if(r, [&](const PutRec &p) {
        return p.world == world && p.recv_pe == pe && p.seg <= seg &&
               std::find(members, members + n_members, p.sender_pe) != members + n_members;
    });
}

}  // namespace symsim

#endif  // SYMSCHED_SIM_REMOTE_H
