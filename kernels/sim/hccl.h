// hccl.h — host simulation of the HCCL calls a generated launch stub makes between kernel
// segments when the plan has host collectives (`hostcoll` steps). Each call is handed to the
// launcher's `host_coll` callback (symsched_device.h), which runs the runtime's host collective
// (runtime/src/exec/hostcoll.rs semantics). Only the in-place forms the lowering emits are
// accepted; anything else is a named SYMSCHED_SIM_E_HOST_COLL error.
#ifndef SYMSCHED_SIM_HCCL_H
#define SYMSCHED_SIM_HCCL_H

#include <cstdint>
#include <string>

#include "symsched_sim_core.h"

typedef int32_t HcclResult;
enum { HCCL_SUCCESS = 0, HCCL_E_PARA = 1, HCCL_E_INTERNAL = 4 };

enum HcclDataType {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11
};

enum HcclReduceOp { HCCL_REDUCE_SUM = 0, HCCL_REDUCE_PROD = 1, HCCL_REDUCE_MAX = 2, HCCL_REDUCE_MIN = 3 };

typedef void *aclrtStream;

namespace symsim {

/// What an HcclComm handle points to in the simulation: the members of one host collective
/// (group-local ranks, in member order) and its ordinal among the rank's host collectives.
struct HcclCommSim {
    const int32_t *members;
    int32_t n_members;
    int32_t ordinal;
};

inline const char *hccl_type_name(HcclDataType t) {
    switch (t) {
    case HCCL_DATA_TYPE_FP32: return "f32";
    case HCCL_DATA_TYPE_FP16: return "f16";
    case HCCL_DATA_TYPE_BFP16: return "bf16";
    case HCCL_DATA_TYPE_FP64: return "f64";
    case HCCL_DATA_TYPE_INT32: return "i32";
    case HCCL_DATA_TYPE_INT64: return "i64";
    default: return nullptr;
    }
}

inline uint64_t hccl_type_bytes(HcclDataType t) {
    switch (t) {
    case HCCL_DATA_TYPE_FP64:
    case HCCL_DATA_TYPE_INT64: return 8;
    case HCCL_DATA_TYPE_FP16:
    case HCCL_DATA_TYPE_BFP16: return 2;
    default: return 4;
    }
}

inline const char *hccl_op_name(HcclReduceOp op) {
    switch (op) {
    case HCCL_REDUCE_SUM: return "sum";
    case HCCL_REDUCE_MAX: return "max";
    case HCCL_REDUCE_MIN: return "min";
    default: return nullptr;
    }
}

/// The device table of the launch stub's thread (host collectives run between kernel
/// segments, when no simulated core is running).
inline const symsched_device &stub_dev() {
    const symsched_device *d = launch_ctx().dev;
    if (d == nullptr) {
        fail(SYMSCHED_SIM_E_ABI, "HCCL call outside symsched_sim_launch");
    }
    return *d;
}

/// Index of this PE in the communicator.
inline int32_t comm_index(const HcclCommSim *c, const char *what) {
    if (c == nullptr || c->members == nullptr || c->n_members < 1) {
        fail(SYMSCHED_SIM_E_HOST_COLL, std::string(what) + ": null or empty communicator");
    }
    for (int32_t i = 0; i < c->n_members; ++i) {
        if (c->members[i] == stub_dev().my_pe) {
            return i;
        }
    }
    fail(SYMSCHED_SIM_E_HOST_COLL, std::string(what) + ": PE " + std::to_string(stub_dev().my_pe) +
                                       " is not a member of the communicator");
}

/// Hand one in-place collective on `count` elements at `data` to the launcher.
inline HcclResult host_coll(int32_t op, void *data, uint64_t count, HcclDataType type, HcclReduceOp red,
                            const HcclCommSim *c, const char *what) {
    const char *tname = hccl_type_name(type);
    const char *rname = hccl_op_name(red);
    if (tname == nullptr || rname == nullptr) {
        fail(SYMSCHED_SIM_E_HOST_COLL, std::string(what) + ": data type or reduce op not simulated");
    }
    // A kernel segment ends only with every core's puts completed (symsim::launch checks that
    // each core returns with nothing outstanding), so none can be outstanding here.
    comm_index(c, what);
    const symsched_device &d = stub_dev();
    uint64_t bytes = count * hccl_type_bytes(type);
    if (bytes > 0 && d.addr_pe(d.ctx, data, bytes) != d.my_pe) {
        fail(SYMSCHED_SIM_E_HOST_COLL, std::string(what) + ": the buffer is not this PE's device memory");
    }
    if (d.host_coll == nullptr) {
        fail(SYMSCHED_SIM_E_HOST_COLL, std::string(what) + ": the launcher provides no host collectives");
    }
    if (d.host_coll(d.ctx, op, data, count, tname, rname, c->members, c->n_members, c->ordinal) != 0) {
        fail(SYMSCHED_SIM_E_HOST_COLL, std::string(what) + " failed in the runtime's host collective");
    }
    // Every member finished the segments before it, so their puts into this PE are complete.
    const LaunchCtx &lc = launch_ctx();
    remote_host_coll(lc.world, d.my_pe, c->members, c->n_members, lc.launches);
    return HCCL_SUCCESS;
}

}  // namespace symsim

typedef symsim::HcclCommSim *HcclComm;

inline HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op,
                                HcclComm comm, aclrtStream) {
    if (sendBuf != recvBuf) {
        symsim::fail(SYMSCHED_SIM_E_HOST_COLL, "HcclAllReduce: only the in-place form (sendBuf == recvBuf) is simulated");
    }
    return symsim::host_coll(0, recvBuf, count, dataType, op, comm, "HcclAllReduce");
}

/// In place: member i sends block i of the region (`sendBuf = recvBuf + i * sendCount`).
inline HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType, HcclComm comm,
                                aclrtStream) {
    int32_t idx = symsim::comm_index(comm, "HcclAllGather");
    uint8_t *want = static_cast<uint8_t *>(recvBuf) + idx * sendCount * symsim::hccl_type_bytes(dataType);
    if (sendBuf != want) {
        symsim::fail(SYMSCHED_SIM_E_HOST_COLL, "HcclAllGather: only the in-place form (sendBuf = recvBuf + rank * sendCount) is simulated");
    }
    return symsim::host_coll(1, recvBuf, sendCount * comm->n_members, dataType, HCCL_REDUCE_SUM, comm, "HcclAllGather");
}

/// In place: member i receives block i of the region (`recvBuf = sendBuf + i * recvCount`).
inline HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                                    HcclReduceOp op, HcclComm comm, aclrtStream) {
    int32_t idx = symsim::comm_index(comm, "HcclReduceScatter");
    uint8_t *want = static_cast<uint8_t *>(sendBuf) + idx * recvCount * symsim::hccl_type_bytes(dataType);
    if (recvBuf != want) {
        symsim::fail(SYMSCHED_SIM_E_HOST_COLL, "HcclReduceScatter: only the in-place form (recvBuf = sendBuf + rank * recvCount) is simulated");
    }
    return symsim::host_coll(2, sendBuf, recvCount * comm->n_members, dataType, op, comm, "HcclReduceScatter");
}

inline HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                                aclrtStream) {
    if (root != 0) {
        symsim::fail(SYMSCHED_SIM_E_HOST_COLL, "HcclBroadcast: the lowering broadcasts from member 0 only");
    }
    return symsim::host_coll(3, buf, count, dataType, HCCL_REDUCE_SUM, comm, "HcclBroadcast");
}

#endif  // SYMSCHED_SIM_HCCL_H
