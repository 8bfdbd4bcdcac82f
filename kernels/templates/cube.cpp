// ---- Cube unit: c (m x n) = a (m x k) x b (k x n), row-major in GM ----
// Output tiles of kBaseM x kBaseN are accumulated in CO1 over k blocks of BaseK<T>() in
// ascending order (the first block initialises CO1), then written once by Fixpipe, which rounds
// f32 to the output type. Operands go GM -> A1/B1 (DataCopy with Nd2Nz) -> A2/B2 (LoadData) ->
// Mmad. The tile sizes follow from the L1/L0 budgets, the template parameters.
// Cube memories of an Atlas A2 AI Cube core: L1 512 KiB, L0A / L0B 64 KiB, L0C 128 KiB.
constexpr uint32_t kL1Bytes = 512u * 1024u;
constexpr uint32_t kL0ABytes = 64u * 1024u;
constexpr uint32_t kL0BBytes = 64u * 1024u;
constexpr uint32_t kL0CBytes = 128u * 1024u;

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

    template <typename T, typename C>
    __aicore__ inline void Run(__gm__ C *c, __gm__ T *a, __gm__ T *b, uint64_t m, uint64_t k, uint64_t n) {
        constexpr uint32_t kBaseK = BaseK<T>();
        AscendC::GlobalTensor<T> ag, bg;
        AscendC::GlobalTensor<C> cg;
        ag.SetGlobalBuffer(a, m * k);
        bg.SetGlobalBuffer(b, k * n);
        cg.SetGlobalBuffer(c, m * n);
        for (uint64_t i0 = 0; i0 < m; i0 += kBaseM) {
            uint32_t mt = static_cast<uint32_t>(SymMin(kBaseM, m - i0));
            for (uint64_t j0 = 0; j0 < n; j0 += kBaseN) {
                uint32_t nt = static_cast<uint32_t>(SymMin(kBaseN, n - j0));
                AscendC::LocalTensor<float> acc = c1_.template AllocTensor<float>();
                uint64_t k0 = 0;
                do {
                    uint32_t kt = static_cast<uint32_t>(SymMin(kBaseK, k - k0));
                    Block<T>(acc, ag[i0 * k + k0], bg[k0 * n + j0], mt, kt, nt, k, n, k0 == 0);
                    k0 += kBaseK;
                } while (k0 < k);
                c1_.EnQue(acc);
                acc = c1_.template DeQue<float>();
                AscendC::FixpipeParamsV220 f;
                f.nSize = static_cast<uint16_t>(nt);
                f.mSize = static_cast<uint16_t>(mt);
                f.srcStride = static_cast<uint16_t>(Round16(mt));
                f.dstStride = static_cast<uint32_t>(n);
                f.quantPre = Quant<C>();
                f.ndNum = 1;
                AscendC::Fixpipe(cg[i0 * n + j0], acc, f);
                c1_.FreeTensor(acc);
            }
        }
        // The scalar unit issues puts/signals next that may read `c`.
        AscendC::SetFlag<AscendC::HardEvent::FIX_S>(AscendC::EVENT_ID0);
        AscendC::WaitFlag<AscendC::HardEvent::FIX_S>(AscendC::EVENT_ID0);
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

    // One k block of one output tile: mt x kt of a (rows `lda` apart) times kt x nt of b (rows
    // `ldb` apart), added into (or, for the first block, written to) `acc`. An empty block
    // (k = 0) still runs Mmad so the tile is initialised to zero.
    template <typename T>
    __aicore__ inline void Block(const AscendC::LocalTensor<float> &acc, const AscendC::GlobalTensor<T> &a,
                                 const AscendC::GlobalTensor<T> &b, uint32_t mt, uint32_t kt, uint32_t nt, uint64_t lda,
                                 uint64_t ldb, bool first) {
        AscendC::LocalTensor<T> a1 = a1_.template AllocTensor<T>();
        AscendC::LocalTensor<T> b1 = b1_.template AllocTensor<T>();
        if (kt > 0) {
            AscendC::Nd2NzParams pa;
            pa.ndNum = 1;
            pa.nValue = static_cast<uint16_t>(mt);
            pa.dValue = static_cast<uint16_t>(kt);
            pa.srcNdMatrixStride = 0;
            pa.srcDValue = static_cast<uint16_t>(lda);
            pa.dstNzC0Stride = static_cast<uint16_t>(Round16(mt));
            pa.dstNzNStride = 1;
            pa.dstNzMatrixStride = 0;
            AscendC::DataCopy(a1, a, pa);
            AscendC::Nd2NzParams pb = pa;
            pb.nValue = static_cast<uint16_t>(kt);
            pb.dValue = static_cast<uint16_t>(nt);
            pb.srcDValue = static_cast<uint16_t>(ldb);
            pb.dstNzC0Stride = static_cast<uint16_t>(Round16(kt));
            AscendC::DataCopy(b1, b, pb);
        }
        a1_.EnQue(a1);
        b1_.EnQue(b1);
        a1 = a1_.template DeQue<T>();
        b1 = b1_.template DeQue<T>();
        AscendC::LocalTensor<T> a2 = a2_.template AllocTensor<T>();
        AscendC::LocalTensor<T> b2 = b2_.template AllocTensor<T>();
        if (kt > 0) {
            AscendC::LoadData2DParams la;
            la.startIndex = 0;
            la.repeatTimes = static_cast<uint8_t>(Round16(mt) * Round16(kt) * sizeof(T) / 512u);
            la.srcStride = 1;
            la.ifTranspose = false;
            AscendC::LoadData(a2, a1, la);
            AscendC::LoadData2DParams lb = la;
            lb.repeatTimes = static_cast<uint8_t>(Round16(kt) * Round16(nt) * sizeof(T) / 512u);
            lb.ifTranspose = true;
            AscendC::LoadData(b2, b1, lb);
        }
        a1_.FreeTensor(a1);
        b1_.FreeTensor(b1);
        a2_.EnQue(a2);
        b2_.EnQue(b2);
        a2 = a2_.template DeQue<T>();
        b2 = b2_.template DeQue<T>();
        AscendC::MmadParams mp;
        mp.m = static_cast<uint16_t>(mt);
        mp.n = static_cast<uint16_t>(nt);
        mp.k = static_cast<uint16_t>(kt);
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
