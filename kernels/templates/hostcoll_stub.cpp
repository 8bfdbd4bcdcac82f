// ---- host collectives between launch segments ----
// The kernel cannot call the framework's collective library, so a launch of a plan with
// `hostcoll` steps is a loop: kernel segment 0, the rank's first host collective (HCCL, on the
// same stream), segment 1, and so on. Extents are computed here on the host from the size
// variables with the plan's remainder rule, exactly as the kernel does on the device.
namespace {{ name }}_host {

inline uint64_t SymCeilDiv(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }
inline uint64_t SymMin(uint64_t a, uint64_t b) { return a < b ? a : b; }

// One host collective of one rank; op: 0 allreduce, 1 allgather, 2 reduce_scatter, 3 broadcast.
struct Call {
    int32_t rank, segment, op, buf, first, count, ordinal, membersAt, nMembers, memberIndex;
};
// Group-local ranks of each call's communicator, in member order (kCalls[i].membersAt..).
static const int32_t kMembers[{{ x.n_member_words }}] = { {{ x.members }} };
static const Call kCalls[] = {
{%- for c in x.calls %}
    { {{ c.rank }}, {{ c.segment }}, {{ c.op }}, {{ c.buf }}, {{ c.first }}, {{ c.count }}, {{ c.ordinal }}, {{ c.members_at }}, {{ c.n_members }}, {{ c.member_index }} },  // {{ c.doc }}
{%- endfor %}
};
constexpr int32_t kNumCalls = {{ x.calls.len() }};
// Most host collectives of one rank: a launch runs at most kMaxCalls + 1 kernel segments.
constexpr int32_t kMaxCalls = {{ x.max_calls }};

inline const Call *Find(int32_t rank, int32_t segment) {
    for (int32_t i = 0; i < kNumCalls; ++i) {
        if (kCalls[i].rank == rank && kCalls[i].segment == segment) {
            return &kCalls[i];
        }
    }
    return nullptr;
}

inline uint64_t ElemBytes(int32_t b) {
    switch (b) {
{%- for b in x.host_bufs %}
    case {{ b.index }}: return {{ b.elem_bytes }};
{%- endfor %}
    default: return 1;
    }
}

inline HcclDataType DataType(int32_t b) {
    switch (b) {
{%- for b in x.host_bufs %}
    case {{ b.index }}: return {{ b.hccl_type }};
{%- endfor %}
    default: return HCCL_DATA_TYPE_INT8;
    }
}

// Element offset and length of chunks [first, first + count) of the call's buffer.
inline void Span(const Call &c, const uint64_t *sz_, uint64_t *off, uint64_t *len) {
    uint32_t kind = 0, chunks = 1;
    uint64_t v = 0;
    switch (c.buf) {
{%- for b in x.host_bufs %}
    case {{ b.index }}: kind = {{ b.extent_kind }}; chunks = {{ b.chunks }}; v = {{ b.extent_expr }}; break;
{%- endfor %}
    default: break;
    }
    // Split: chunk i starts at min(i * ceil(total / chunks), total); uniform: at i * chunk.
    uint64_t cap = SymCeilDiv(v, chunks);
    uint64_t s = kind == 0 ? SymMin(static_cast<uint64_t>(c.first) * cap, v) : static_cast<uint64_t>(c.first) * v;
    uint64_t e = kind == 0 ? SymMin(static_cast<uint64_t>(c.first + c.count) * cap, v)
                           : static_cast<uint64_t>(c.first + c.count) * v;
    *off = s;
    *len = e - s;
}

// Run `c` in place on this rank's copy of its buffer (`buffer`, the buffer's base address).
inline HcclResult Run(const Call &c, void *buffer, const uint64_t *sizes, HcclComm comm, aclrtStream stream) {
    uint64_t off = 0, len = 0;
    Span(c, sizes, &off, &len);
    uint8_t *p = static_cast<uint8_t *>(buffer) + off * ElemBytes(c.buf);
    HcclDataType t = DataType(c.buf);
    switch (c.op) {
    case 0: return HcclAllReduce(p, p, len, t, {{ x.hccl_reduce }}, comm, stream);
    case 3: return HcclBroadcast(p, len, t, 0, comm, stream);
    default: {
        // HCCL moves equal blocks: the region must split evenly over the members.
        if (len % static_cast<uint64_t>(c.nMembers) != 0) {
            return HCCL_E_PARA;
        }
        uint64_t block = len / static_cast<uint64_t>(c.nMembers);
        uint8_t *mine = p + static_cast<uint64_t>(c.memberIndex) * block * ElemBytes(c.buf);
        if (c.op == 1) {
            return HcclAllGather(mine, p, block, t, comm, stream);
        }
        return HcclReduceScatter(p, mine, block, t, {{ x.hccl_reduce }}, comm, stream);
    }
    }
}

}  // namespace {{ name }}_host
