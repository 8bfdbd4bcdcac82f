/* symsched_device.h — the device table a launcher fills in to run a generated kernel on the host
 * simulation (kernels/sim). Plain C so any runtime (Rust, C, Python via ctypes) can provide it.
 *
 * PE numbers here are group-local: the simulated ACLSHMEM_TEAM_WORLD is the launch's group.
 * Addresses passed to the callbacks are *local* symmetric addresses (inside the caller's own
 * heap segment); the runtime translates them to the peer's mapping. */
#ifndef SYMSCHED_DEVICE_H
#define SYMSCHED_DEVICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped on any incompatible change of the two structs below. */
#define SYMSCHED_DEVICE_ABI 5

/** Status codes returned by symsched_sim_launch. Each names one misuse the simulation rejects. */
enum symsched_sim_status {
    SYMSCHED_SIM_OK = 0,
    /** DataCopy / DataCopyPad touched another PE's memory (remote traffic must use aclshmem_*). */
    SYMSCHED_SIM_E_REMOTE_DATACOPY = 1,
    /** TPipe::InitBuffer past the unified buffer, or a copy/vector op past a UB tensor's end. */
    SYMSCHED_SIM_E_UB_OVERFLOW = 2,
    /** A signal was sent while non-blocking puts were still outstanding (no aclshmem_quiet). */
    SYMSCHED_SIM_E_SIGNAL_BEFORE_QUIET = 3,
    /** Local memory that is the source of an outstanding non-blocking put was overwritten. */
    SYMSCHED_SIM_E_NBI_SOURCE_REUSED = 4,
    /** AllocTensor/EnQue/DeQue/FreeTensor out of order (the device would hang or corrupt). */
    SYMSCHED_SIM_E_QUEUE_MISUSE = 5,
    /** WaitFlag without a matching SetFlag (the device would hang). */
    SYMSCHED_SIM_E_EVENT_MISUSE = 6,
    /** A pointer outside the symmetric heap where a symmetric address is required, or a bad PE. */
    SYMSCHED_SIM_E_BAD_ADDRESS = 7,
    /** signal_wait_until gave up (deadline passed, a peer failed, or the launch was aborted). */
    SYMSCHED_SIM_E_WAIT_FAILED = 8,
    /** DataCopy length not a multiple of 32 bytes (the device copies whole 32-byte blocks). */
    SYMSCHED_SIM_E_UNALIGNED = 9,
    /** A narrowing Cast without an explicit round mode, or an unsupported Cast pair. */
    SYMSCHED_SIM_E_CAST_MODE = 10,
    /** Non-blocking puts still outstanding when the kernel returned. */
    SYMSCHED_SIM_E_UNQUIETED_AT_EXIT = 11,
    /** ABI mismatch or malformed launch arguments. */
    SYMSCHED_SIM_E_ABI = 12,
    /** A device call the simulation does not model. */
    SYMSCHED_SIM_E_UNSUPPORTED = 13,
    /** TPipe::InitBuffer past L1 / L0A / L0B / L0C, or a Cube op past its tensor. */
    SYMSCHED_SIM_E_CUBE_OVERFLOW = 14,
    /** A Cube operand in the wrong TPosition (Mmad: CO1 <- A2 x B2; LoadData: A1->A2, B1->B2;
     *  Nd2Nz DataCopy into A1/B1; Fixpipe from CO1), or a type pair the Cube unit lacks. */
    SYMSCHED_SIM_E_CUBE_POSITION = 15,
    /** The launch stub's host collective failed (or was asked for with bad arguments). */
    SYMSCHED_SIM_E_HOST_COLL = 16,
    /** Two engines (pipes) of a core, or two cores of a rank, touch the same bytes, at least one
     *  writing, and no SetFlag/WaitFlag, queue EnQue/DeQue or AllocTensor/FreeTensor,
     *  PipeBarrier, aclshmem_quiet/fence, CrossCoreSetFlag/WaitFlag or SyncAll orders them (for
     *  example a vector op reading a tile before the MTE2 copy that fills it has finished); also
     *  a signal issued while local GM writes it publishes may still be in flight. */
    SYMSCHED_SIM_E_PIPE_RACE = 17,
    /** A Cube-side call on a vector core (AIV) or a vector/UB/shmem call on a Cube core (AIC),
     *  or a cross-core flag in a mode the kernel type does not have. */
    SYMSCHED_SIM_E_CORE_TYPE = 18,
    /** A vector op whose destination partly overlaps a source (the documented address-overlap
     *  rule allows only identical or disjoint operands). */
    SYMSCHED_SIM_E_OPERAND_OVERLAP = 19,
    /** An engine (or a put that forwards it) reads GM that a put (aclshmem_putmem_nbi, a UB-source
     *  put, putmem_signal_nbi) of this or another PE writes, and is not ordered after the put's
     *  completion: no aclshmem_quiet (or fence) of the putting core followed by a signal from it,
     *  or from a core ordered after it, that the reading core waited for before it issued the read
     *  (for example a signal sent before another core's quieted put, the cross-core barrier
     *  before it deleted). */
    SYMSCHED_SIM_E_GM_RACE = 20,
    /** asc_set_ctrl changed a CTRL bit the simulation does not model (only CTRL[48], the float
     *  overflow mode, is), or a kernel returned with CTRL other than the value it started with
     *  (the next kernel on the core would inherit the change). */
    SYMSCHED_SIM_E_CTRL = 21
};

/** Operations of the device table. Callbacks are called from the rank's simulated core
 *  threads (one per AIV/AIC core the kernel launches), concurrently; host_coll only from the
 *  thread that called symsched_sim_launch, between kernel segments. */
struct symsched_device {
    uint32_t abi_version; /* SYMSCHED_DEVICE_ABI */
    void *ctx;
    int32_t my_pe;
    int32_t n_pes;
    /** Peer `pe`'s address of the local symmetric address `local_sym`; NULL if not symmetric. */
    void *(*peer_ptr)(void *ctx, const void *local_sym, int32_t pe);
    /** PE whose heap segment holds [addr, addr+len): >= 0, or -1 (not in the heap), -2 (straddles). */
    int32_t (*addr_pe)(void *ctx, const void *addr, uint64_t len);
    /** Atomically SET (op 0) or ADD (op 1) `value` on pe's copy of the int32 at `local_sig`,
     *  with release ordering (all earlier writes of this rank are visible first). */
    void (*signal_op)(void *ctx, int32_t *local_sig, int32_t value, int32_t op, int32_t pe);
    /** Block until the local int32 at `local_sig` compares true (signed, ACLSHMEM_CMP_* codes)
     *  against `value`; store the observed value. Returns 0, or nonzero when it gave up. */
    int32_t (*signal_wait_until)(void *ctx, int32_t *local_sig, int32_t cmp, int32_t value,
                                 int32_t *observed);
    /** Completion of this rank's outstanding remote writes (the simulation copies eagerly
     *  inside quiet; this hook lets a runtime add its own fence or accounting). */
    void (*quiet)(void *ctx);
    /** Group barrier. Returns 0, or nonzero when it gave up. */
    int32_t (*barrier)(void *ctx);
    /** A host collective between kernel segments (what HcclAllReduce & co. do in a CANN launch
     *  stub): `op` 0 allreduce, 1 allgather, 2 reduce_scatter, 3 broadcast, in place on `count`
     *  elements of type `dtype` (runtime name: "f32", "bf16", ...) at the local address `data`,
     *  folding with `reduce_op` ("sum", "max", ...) over `members` (group-local ranks, this one
     *  included, in member order). `ordinal` numbers the rank's host collectives in a launch.
     *  Returns 0, or nonzero when it failed (the message is the runtime's concern). May be NULL
     *  for launchers of plans without host collectives. */
    int32_t (*host_coll)(void *ctx, int32_t op, void *data, uint64_t count, const char *dtype,
                         const char *reduce_op, const int32_t *members, int32_t n_members,
                         int32_t ordinal);
    /** Called once when a core of this rank fails, so the launcher can make this rank's other
     *  cores (blocked in signal_wait_until) and its peers give up at once. May be NULL. */
    void (*abort)(void *ctx);
};

/** Arguments of one simulated launch of one rank. */
struct symsched_launch_args {
    uint32_t abi_version; /* SYMSCHED_DEVICE_ABI */
    uint32_t n_buffers;   /* must equal the kernel's buffer count */
    uint8_t *const *buffers; /* local symmetric address of each plan buffer, in plan order */
    uint8_t *signals;     /* local symmetric address of the signal pad: one int32 per 64 bytes */
    const uint64_t *sizes; /* size variables, in the plan's size_vars order */
    const uint64_t *counts; /* counts[sender * P + receiver], or NULL without Counts extents */
    uint64_t epoch;       /* launch epoch of this plan on this group instance (0 = first) */
    int32_t send_exit_signals; /* 1: the kernel sends the plan's launch credits at its end */
    uint64_t seed;        /* seed of the simulated pipe interleaving (same seed, same choices) */
    uint8_t *workspace;   /* this PE's GM scratch of kernels with matmul steps (else NULL) */
    uint64_t workspace_bytes;
    /* the launch group: equal on every rank of one group, never reused by another group in the
     * process (the simulation keys what puts wrote into a PE's GM by it) */
    uint64_t world;
    /* the device's float overflow mode, as aclrtSetDeviceSatMode sets it for the process:
     * 0 saturation (ACL_RT_OVERFLOW_MODE_SATURATION), 1 Inf/NaN (ACL_RT_OVERFLOW_MODE_INFNAN,
     * the Atlas A2 default); every core's CTRL[48] starts as this value */
    uint32_t overflow_mode;
    char *err_msg;        /* receives a NUL-terminated message on failure (may be NULL) */
    uint32_t err_cap;
};

/** Entry point every simulated kernel library exports. Returns a symsched_sim_status. */
typedef int32_t (*symsched_sim_launch_fn)(const struct symsched_device *dev,
                                          const struct symsched_launch_args *args);

#ifdef __cplusplus
}
#endif

#endif /* SYMSCHED_DEVICE_H */
