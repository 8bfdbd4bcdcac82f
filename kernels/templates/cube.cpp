// ---- Cube core (AIC): c (m x n) = a (m x k) x b (k x n), row-major in GM ----
// The matmul rows of the rank's program run here, the rest on the vector cores (AIV): at a
// matmul row every AIV hands over (CrossCoreSetFlag mode 2, kFlagReady), the AICs compute their
// share of the output tiles (tile t on AIC t % kBlockDim), meet (mode 0, kFlagAicSync) and hand
// back (mode 2, kFlagDone). Per output tile of kBaseM x kBaseN and k block of BaseK<T>():
//   GM -> A1/B1: DataCopy with Nd2NzParams (Nz; one copy per row when a row stride exceeds the
//                16-bit srcDValue; f32 B as one Nz matrix per 16-row slab, which is Zz);
//   A1 -> A2:    one LoadData (2-D) per fractal row of A (Nz -> Zz);
//   B1 -> B2:    16-bit: LoadData with ifTranspose per fractal row of B (Nz -> Zn); f32:
//                LoadDataWithTranspose per slab (two 16 x 8 fractals per 16 x 16 square);
//   Mmad:        CO1 (Nz) accumulates across k blocks (PipeBarrier<PIPE_M> between accumulating
//                Mmads of small tiles, as documented);
//   Fixpipe:     CO1 -> GM with NZ2ND in whole 16-column blocks; a partial last block (n not a
//                multiple of 16) goes to the workspace (m x 16 elements), copied into c by the AIVs.
// Cube memories of an Atlas A2 AI Cube core: L1 512 KiB, L0A / L0B 64 KiB, L0C 128 KiB.
constexpr uint32_t kL1Bytes = 512u * 1024u;
constexpr uint32_t kL0ABytes = 64u * 1024u;
constexpr uint32_t kL0BBytes = 64u * 1024u;
constexpr uint32_t kL0CBytes = 128u * 1024u;
// Bytes of workspace a launch needs: the partial last 16-column block of every product row
// (elements of at most 4 bytes).
__aicore__ inline uint64_t WorkspaceBytes(const uint64_t *sizes) { return {{ x.mm_m_host }} * 16ull * 4ull; }
// Nd2NzParams::srcDValue (a GM row stride in elements) is 16-bit.
constexpr uint64_t kMaxSrcDValue = 65535;

template <uint32_t L1Bytes, uint32_t L0ABytes, uint32_t L0BBytes, uint32_t L0CBytes>
class Cube {
public:
    static constexpr uint32_t kBaseM = 128;
    static constexpr uint32_t kBaseN = 128;
    static_assert(kBaseM * kBaseN * sizeof(float) <= L0CBytes, "L0C budget too small for one f32 output tile");
    static_assert(L0ABytes + L0BBytes <= L1Bytes, "L1 budget too small for one A and one B tile");

    // k block of operand type T: the largest multiple of 16 whose A and B tiles fit L0A / L0B.
    template <typename T>
    static constexpr uint32_t BaseK() {
        return ((L0ABytes / (kBaseM * sizeof(T))) < (L0BBytes / (kBaseN * sizeof(T)))
                    ? (L0ABytes / (kBaseM * sizeof(T)))
                    : (L0BBytes / (kBaseN * sizeof(T)))) / 16u * 16u;
    }
    static_assert(BaseK<float>() >= 16, "L0A/L0B budgets too small for a 16-deep f32 k block");

    __aicore__ inline void Init(AscendC::TPipe &pipe) {
        pipe.InitBuffer(a1_, 1, L0ABytes);
        pipe.InitBuffer(b1_, 1, L0BBytes);
        pipe.InitBuffer(a2_, 1, L0ABytes);
        pipe.InitBuffer(b2_, 1, L0BBytes);
        pipe.InitBuffer(c1_, 1, kBaseM * kBaseN * sizeof(float));
    }

    // This AIC's output tiles of c = a x b; `ws` receives the partial last 16-column block.
    template <typename T, typename C>
    __aicore__ inline void Run(__gm__ C *c, __gm__ T *a, __gm__ T *b, __gm__ C *ws, uint64_t m, uint64_t k, uint64_t n,
                               uint32_t blk) {
        constexpr uint32_t kBaseK = BaseK<T>();
        AscendC::GlobalTensor<T> ag, bg;
        AscendC::GlobalTensor<C> cg, wg;
        ag.SetGlobalBuffer(a, m * k);
        bg.SetGlobalBuffer(b, k * n);
        cg.SetGlobalBuffer(c, m * n);
        wg.SetGlobalBuffer(ws, m * 16);
        uint64_t tile = 0;
        for (uint64_t i0 = 0; i0 < m; i0 += kBaseM) {
            uint32_t mt = static_cast<uint32_t>(SymMin(kBaseM, m - i0));
            for (uint64_t j0 = 0; j0 < n; j0 += kBaseN, ++tile) {
                if (tile % kBlockDim != blk) {
                    continue;
                }
                uint32_t nt = static_cast<uint32_t>(SymMin(kBaseN, n - j0));
                AscendC::LocalTensor<float> acc = c1_.template AllocTensor<float>();
                for (uint64_t k0 = 0; k0 < k; k0 += kBaseK) {
                    uint32_t kt = static_cast<uint32_t>(SymMin(kBaseK, k - k0));
                    Block<T>(acc, ag[i0 * k + k0], bg[k0 * n + j0], mt, kt, nt, k, n, k0 == 0);
                }
                c1_.EnQue(acc);
                acc = c1_.template DeQue<float>();
                uint32_t full = nt / 16u * 16u;
                AscendC::FixpipeParamsV220 f;
                f.mSize = static_cast<uint16_t>(mt);
                f.srcStride = static_cast<uint16_t>(Round16(mt));
                f.quantPre = Quant<C>();
                f.ndNum = 1;
                if (full > 0) {
                    f.nSize = static_cast<uint16_t>(full);
                    f.dstStride = static_cast<uint32_t>(n);
                    AscendC::Fixpipe(cg[i0 * n + j0], acc, f);
                }
                if (full < nt) {
                    f.nSize = 16;
                    f.dstStride = 16;
                    AscendC::Fixpipe(wg[i0 * 16], acc[(full / 16u) * Round16(mt) * 16u], f);
                }
                c1_.FreeTensor(acc);
            }
        }
    }

private:
    static __aicore__ inline uint32_t Round16(uint32_t x) { return (x + 15u) / 16u * 16u; }

    template <typename A, typename B>
    struct Same {
        static constexpr bool value = false;
    };
    template <typename A>
    struct Same<A, A> {
        static constexpr bool value = true;
    };
    // Fixpipe's on-the-fly f32 -> output type conversion.
    template <typename C>
    static __aicore__ inline AscendC::QuantMode_t Quant() {
        return Same<C, float>::value ? AscendC::QuantMode_t::NoQuant
                                     : (Same<C, half>::value ? AscendC::QuantMode_t::F322F16
                                                             : AscendC::QuantMode_t::F322BF16);
    }

    // Rows x cols of GM (rows `ld` apart) into L1 as Nz with column blocks `c0Stride` rows apart;
    // one copy per row when `ld` does not fit srcDValue.
    template <typename T>
    __aicore__ inline void ToNz(const AscendC::LocalTensor<T> &dst, const AscendC::GlobalTensor<T> &src, uint32_t rows,
                                uint32_t cols, uint64_t ld, uint32_t c0Stride) {
        constexpr uint32_t kC0 = 32u / sizeof(T);
        AscendC::Nd2NzParams p;
        p.ndNum = 1;
        p.dValue = static_cast<uint16_t>(cols);
        p.srcNdMatrixStride = 0;
        p.dstNzC0Stride = static_cast<uint16_t>(c0Stride);
        p.dstNzNStride = 1;
        p.dstNzMatrixStride = 0;
        if (ld <= kMaxSrcDValue) {
            p.nValue = static_cast<uint16_t>(rows);
            p.srcDValue = static_cast<uint16_t>(ld);
            AscendC::DataCopy(dst, src, p);
            return;
        }
        p.nValue = 1;
        p.srcDValue = static_cast<uint16_t>(cols);
        for (uint32_t r = 0; r < rows; ++r) {
            AscendC::DataCopy(dst[r * kC0], src[r * ld], p);
        }
    }

    // One k block of one output tile: mt x kt of a (rows `lda` apart) times kt x nt of b (rows
    // `ldb` apart), added into (or, for the first block, written to) `acc`.
    template <typename T>
    __aicore__ inline void Block(const AscendC::LocalTensor<float> &acc, const AscendC::GlobalTensor<T> &a,
                                 const AscendC::GlobalTensor<T> &b, uint32_t mt, uint32_t kt, uint32_t nt, uint64_t lda,
                                 uint64_t ldb, bool first) {
        constexpr uint32_t kC0 = 32u / sizeof(T);   // columns of an L1 / L0A fractal
        constexpr uint32_t kFrac = 512u / sizeof(T);
        const uint32_t m16 = Round16(mt), n16 = Round16(nt);
        const uint32_t mBlocks = m16 / 16u, nBlocks = n16 / 16u;
        const uint32_t kBlocks = (kt + kC0 - 1u) / kC0;   // K1 of A (and of B for 16-bit types)
        AscendC::LocalTensor<T> a1 = a1_.template AllocTensor<T>();
        AscendC::LocalTensor<T> b1 = b1_.template AllocTensor<T>();
        ToNz(a1, a, mt, kt, lda, m16);
        if constexpr (sizeof(T) == 4) {
            // f32 B: each 16-row slab as its own Nz matrix (column blocks 16 rows apart), so the
            // slab's 16 x 8 fractals lie side by side: the Zz order LoadDataWithTranspose needs.
            for (uint32_t s = 0; s * 16u < kt; ++s) {
                ToNz(b1[s * 16u * n16], b[static_cast<uint64_t>(s) * 16u * ldb], SymMin(16u, kt - s * 16u), nt, ldb, 16u);
            }
        } else {
            ToNz(b1, b, kt, nt, ldb, Round16(kt));
        }
        a1_.EnQue(a1);
        b1_.EnQue(b1);
        a1 = a1_.template DeQue<T>();
        b1 = b1_.template DeQue<T>();
        AscendC::LocalTensor<T> a2 = a2_.template AllocTensor<T>();
        AscendC::LocalTensor<T> b2 = b2_.template AllocTensor<T>();
        // A: Nz (fractal (i, t) at t * mBlocks + i) -> Zz (i * kBlocks + t), one fractal row each.
        AscendC::LoadData2DParams la;
        la.startIndex = 0;
        la.repeatTimes = static_cast<uint8_t>(kBlocks);
        la.srcStride = static_cast<uint16_t>(mBlocks);
        la.dstGap = 0;
        la.ifTranspose = false;
        for (uint32_t i = 0; i < mBlocks; ++i) {
            AscendC::LoadData(a2[i * kBlocks * kFrac], a1[i * kFrac], la);
        }
        if constexpr (sizeof(T) == 4) {
            // B slab s (16 k-rows) -> Zn fractal rows 2s and 2s + 1: square j (columns 16j..) of the
            // slab transposes into fractals (2s, j) and (2s + 1, j), nBlocks apart.
            AscendC::LoadData2dTransposeParams lt;
            lt.startIndex = 0;
            lt.repeatTimes = static_cast<uint8_t>(nBlocks);
            lt.srcStride = 1;
            lt.dstGap = 0;
            lt.dstFracGap = static_cast<uint16_t>(nBlocks - 1u);
            for (uint32_t s = 0; s * 16u < kt; ++s) {
                AscendC::LoadDataWithTranspose(b2[2u * s * nBlocks * kFrac], b1[s * 16u * n16], lt);
            }
        } else {
            // B: Nz (fractal (t, j) at j * kBlocks + t) -> Zn (t * nBlocks + j), transposed.
            AscendC::LoadData2DParams lb;
            lb.startIndex = 0;
            lb.repeatTimes = static_cast<uint8_t>(nBlocks);
            lb.srcStride = static_cast<uint16_t>(Round16(kt) / 16u);
            lb.dstGap = 0;
            lb.ifTranspose = true;
            for (uint32_t t = 0; t < Round16(kt) / 16u; ++t) {
                AscendC::LoadData(b2[t * nBlocks * kFrac], b1[t * kFrac], lb);
            }
        }
        a1_.FreeTensor(a1);
        b1_.FreeTensor(b1);
        a2_.EnQue(a2);
        b2_.EnQue(b2);
        a2 = a2_.template DeQue<T>();
        b2 = b2_.template DeQue<T>();
        if (!first && (mt / 16u) * (nt / 16u) < 10u) {
            // Documented: accumulating Mmads of small tiles into one L0C need a barrier between.
            AscendC::PipeBarrier<PIPE_M>();
        }
        AscendC::MmadParams mp;
        mp.m = static_cast<uint16_t>(mt);
        mp.n = static_cast<uint16_t>(nt);
        mp.k = static_cast<uint16_t>(kt);
        mp.kDirectionAlign = false;
        mp.cmatrixInitVal = first;
        AscendC::Mmad(acc, a2, b2, mp);
        a2_.FreeTensor(a2);
        b2_.FreeTensor(b2);
    }

    AscendC::TQue<AscendC::TPosition::A1, 1> a1_;
    AscendC::TQue<AscendC::TPosition::B1, 1> b1_;
    AscendC::TQue<AscendC::TPosition::A2, 1> a2_;
    AscendC::TQue<AscendC::TPosition::B2, 1> b2_;
    AscendC::TQue<AscendC::TPosition::CO1, 1> c1_;
};

// The program of one Cube core: the rank's matmul rows (the AIVs run everything else).
class CubeProgram : public Layout {
public:
    __aicore__ inline CubeProgram(GM_ADDR *bufs, GM_ADDR sizes, GM_ADDR table, GM_ADDR workspace, aclshmem_team_t team)
        : Layout(bufs, sizes, nullptr), table_(reinterpret_cast<__gm__ int32_t *>(table)), ws_(workspace) {
        rank_ = static_cast<uint32_t>(aclshmem_team_my_pe(team));
        blk_ = static_cast<uint32_t>(AscendC::GetBlockIdx());
        cube_.Init(pipe_);
    }
{%- if x.has_hostcoll %}
    __aicore__ inline void SetSegment(int32_t segment) { segment_ = segment; }
{%- endif %}

    __aicore__ inline void Run() {
        __gm__ int32_t *firstRow = table_ + 3;
        uint32_t row = static_cast<uint32_t>(firstRow[rank_]);
        uint32_t end = static_cast<uint32_t>(firstRow[rank_ + 1]);
        __gm__ int32_t *rows = table_ + 3 + (kGroupSize + 1);
{%- if x.has_hostcoll %}
        int32_t seg = 0;
{%- endif %}
        while (row < end) {
            __gm__ int32_t *w = rows + row * kRowWords;
{%- if x.has_hostcoll %}
            if (w[0] == kHostColl) {
                if (seg == segment_) {
                    break;
                }
                ++seg;
                ++row;
                continue;
            }
            if (seg != segment_) {
                row += w[0] == kReduce ? 1 + static_cast<uint32_t>(w[10]) : (w[0] == kMatmul ? 2 : 1);
                continue;
            }
{%- endif %}
            if (w[0] == kMatmul) {
                Matmul(w);
                row += 2;
            } else {
                row += w[0] == kReduce ? 1 + static_cast<uint32_t>(w[10]) : 1;
            }
        }
    }

private:
    __aicore__ inline void Matmul(__gm__ int32_t *w) {
        // Every AIV has finished writing the operands (and waited for the peers' parts).
        AscendC::CrossCoreWaitFlag(kFlagReady);
        Region c = Reg(w, 2), a = Reg(w, 5), b = Reg(w + kRowWords, 2);
        const uint64_t m = {{ x.mm_m }}, k = {{ x.mm_k }}, n = {{ x.mm_n }};
        if (m > 0 && k > 0 && n > 0) {
            GM_ADDR cp = Addr(c.buf, RegionSpan(c, rank_).off);
            GM_ADDR ap = Addr(a.buf, RegionSpan(a, rank_).off);
            GM_ADDR bp = Addr(b.buf, RegionSpan(b, rank_).off);
            switch (TypeIdOf(ClassOf(a.buf))) {
            case 0: Into<float>(TypeIdOf(ClassOf(c.buf)), cp, ap, bp, m, k, n); break;
            case 1: Into<half>(TypeIdOf(ClassOf(c.buf)), cp, ap, bp, m, k, n); break;
            default: Into<bfloat16_t>(TypeIdOf(ClassOf(c.buf)), cp, ap, bp, m, k, n); break;
            }
        }
        // All AICs have written their tiles: release the AIVs.
        AscendC::CrossCoreSetFlag<0x0, PIPE_FIX>(kFlagAicSync);
        AscendC::CrossCoreWaitFlag(kFlagAicSync);
        AscendC::CrossCoreSetFlag<0x2, PIPE_FIX>(kFlagDone);
    }
    template <typename T>
    __aicore__ inline void Into(uint32_t ct, GM_ADDR c, GM_ADDR a, GM_ADDR b, uint64_t m, uint64_t k, uint64_t n) {
        __gm__ T *at = reinterpret_cast<__gm__ T *>(a);
        __gm__ T *bt = reinterpret_cast<__gm__ T *>(b);
        switch (ct) {
        case 0:
            cube_.template Run<T, float>(reinterpret_cast<__gm__ float *>(c), at, bt, reinterpret_cast<__gm__ float *>(ws_),
                                         m, k, n, blk_);
            break;
        case 1:
            cube_.template Run<T, half>(reinterpret_cast<__gm__ half *>(c), at, bt, reinterpret_cast<__gm__ half *>(ws_),
                                        m, k, n, blk_);
            break;
        default:
            cube_.template Run<T, bfloat16_t>(reinterpret_cast<__gm__ bfloat16_t *>(c), at, bt,
                                              reinterpret_cast<__gm__ bfloat16_t *>(ws_), m, k, n, blk_);
            break;
        }
    }

    AscendC::TPipe pipe_;
    Cube<kL1Bytes, kL0ABytes, kL0BBytes, kL0CBytes> cube_;
    __gm__ int32_t *table_;
    GM_ADDR ws_;
    uint32_t rank_ = 0;
    uint32_t blk_ = 0;
{%- if x.has_hostcoll %}
    int32_t segment_ = 0;
{%- endif %}
};
