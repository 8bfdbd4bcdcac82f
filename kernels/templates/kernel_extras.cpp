{%- if x.has_matmul %}

public:
    // GM the Cube cores put the partial last 16-column block of each product row in.
    __aicore__ inline void SetWorkspace(GM_ADDR ws) { ws_ = ws; }

private:
    // ---- matmul rows: c = a x b on the Cube cores (m, k, n are size variables) ----
    __aicore__ inline void Matmul(__gm__ int32_t *w) {
        Region c = Reg(w, 2);
        const uint64_t m = {{ x.mm_m }}, k = {{ x.mm_k }}, n = {{ x.mm_n }};
        // The operands are complete on every AIV (its writes, and the peers' parts its waits
        // saw): hand the step to the Cube cores and wait until they all wrote c.
        SyncCores();
        AscendC::CrossCoreSetFlag<0x2, PIPE_MTE3>(kFlagReady);
        AscendC::CrossCoreWaitFlag(kFlagDone);
        GM_ADDR cp = Addr(c.buf, RegionSpan(c, rank_).off);
        const uint64_t cb = ElemBytes(c.buf);
        // Rows of c are split over the AIVs for the two things the Cube cores leave undone.
        Span rows = Mine(Span{0, m}, 0);
        if (k == 0) {
            // An empty sum (Mmad with k = 0 is a NOP): c = 0.
            for (uint64_t r = rows.off; r < rows.off + rows.len; ++r) {
                ZeroBytes(cp + r * n * cb, n * cb);
            }
        } else if (n % 16 != 0) {
            // The partial last block of each row: the workspace row's first n % 16 elements.
            for (uint64_t r = rows.off; r < rows.off + rows.len; ++r) {
                CopyBytes(cp + (r * n + n / 16 * 16) * cb, ws_ + r * 16 * cb, (n % 16) * cb);
            }
        }
        LocalWritesDone();
        // Later steps split c by elements, not rows.
        SyncCores();
    }
    __aicore__ inline void ZeroBytes(GM_ADDR dst, uint64_t bytes) {
        const uint64_t tileBytes = kTile * kElemBytes;
        for (uint64_t done = 0; done < bytes; done += tileBytes) {
            uint32_t len = static_cast<uint32_t>(SymMin(tileBytes, bytes - done));
            AscendC::LocalTensor<int32_t> z = outQ_.template AllocTensor<int32_t>();
            AscendC::Duplicate(z, 0, static_cast<int32_t>((len + 3u) / 4u));
            outQ_.EnQue(z);
            z = outQ_.template DeQue<int32_t>();
            StoreTile(dst + done, z.template ReinterpretCast<uint8_t>(), len);
            outQ_.FreeTensor(z);
        }
    }
    GM_ADDR ws_ = nullptr;
{%- endif %}
{%- if x.has_hostcoll %}
    int32_t segment_ = 0;
{%- endif %}
