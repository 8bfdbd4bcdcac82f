{%- if x.has_matmul %}

    // ---- matmul rows: c = a x b on the Cube unit (m, k, n are size variables) ----
    __aicore__ inline void Matmul(__gm__ int32_t *w) {
        if (!cubeReady_) {
            cube_.Init(pipe_);
            cubeReady_ = true;
        }
        Region c = Reg(w, 2), a = Reg(w, 5), b = Reg(w + kRowWords, 2);
        const uint64_t m = {{ x.mm_m }}, k = {{ x.mm_k }}, n = {{ x.mm_n }};
        GM_ADDR cp = Addr(c.buf, RegionSpan(c, rank_).off);
        GM_ADDR ap = Addr(a.buf, RegionSpan(a, rank_).off);
        GM_ADDR bp = Addr(b.buf, RegionSpan(b, rank_).off);
        switch (TypeIdOf(ClassOf(a.buf))) {
        case 0: MatmulInto<float>(TypeIdOf(ClassOf(c.buf)), cp, ap, bp, m, k, n); break;
        case 1: MatmulInto<half>(TypeIdOf(ClassOf(c.buf)), cp, ap, bp, m, k, n); break;
        default: MatmulInto<bfloat16_t>(TypeIdOf(ClassOf(c.buf)), cp, ap, bp, m, k, n); break;
        }
    }
    template <typename T>
    __aicore__ inline void MatmulInto(uint32_t ct, GM_ADDR c, GM_ADDR a, GM_ADDR b, uint64_t m, uint64_t k, uint64_t n) {
        __gm__ T *at = reinterpret_cast<__gm__ T *>(a);
        __gm__ T *bt = reinterpret_cast<__gm__ T *>(b);
        switch (ct) {
        case 0: cube_.template Run<T, float>(reinterpret_cast<__gm__ float *>(c), at, bt, m, k, n); break;
        case 1: cube_.template Run<T, half>(reinterpret_cast<__gm__ half *>(c), at, bt, m, k, n); break;
        default: cube_.template Run<T, bfloat16_t>(reinterpret_cast<__gm__ bfloat16_t *>(c), at, bt, m, k, n); break;
        }
    }
    Cube<kL1Bytes, kL0ABytes, kL0BBytes, kL0CBytes> cube_;
    bool cubeReady_ = false;
{%- endif %}
{%- if x.has_hostcoll %}

public:
    // Launch segment to run: the rank's rows between its segment-th and (segment+1)-th
    // host-collective row (the launch stub runs the collective between segments).
    __aicore__ inline void SetSegment(int32_t segment) { segment_ = segment; }

private:
    int32_t segment_ = 0;
{%- endif %}
