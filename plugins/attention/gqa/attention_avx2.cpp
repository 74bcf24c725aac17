// AVX2 + FMA attention (built with -mavx2 -mfma; called only when the CPU has both): the per-token driver
// (attention_online.h) and the tiled one (attention_tiled.h), 8 lanes.
#include <immintrin.h>

#include "attention_shared.h"
#include "attention_tiled.h"
#include "kv_write.h"
#include "vector_exp.h"

namespace troupe::gqa {
namespace {

struct avx2 {
    using vec = __m256;
    using ivec = __m256i;
    static constexpr int32_t lanes = avx2_lanes;
    static constexpr int32_t accumulate_unroll = 4;  // 8 weights + 4 sums + scale + broadcast: 16 registers

    static vec zero() { return _mm256_setzero_ps(); }
    static vec set1(float x) { return _mm256_set1_ps(x); }
    static vec load(const float* p) { return _mm256_load_ps(p); }
    static void store(float* p, vec v) { _mm256_store_ps(p, v); }
    static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
    static vec sub(vec a, vec b) { return _mm256_sub_ps(a, b); }
    static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
    static vec div(vec a, vec b) { return _mm256_div_ps(a, b); }
    static vec max(vec a, vec b) { return _mm256_max_ps(a, b); }
    static vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
    static vec fnmadd(vec a, vec b, vec c) { return _mm256_fnmadd_ps(a, b, c); }
    static vec round(vec v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static vec times_pow2(vec y, vec n) {  // 2^n built in the exponent field: n + 127 >= 1, a normal float
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    }
    static vec zero_below(vec v, vec x, float bound) {
        return _mm256_and_ps(v, _mm256_cmp_ps(x, _mm256_set1_ps(bound), _CMP_GE_OQ));
    }
    static ivec load_positions(const int32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
    static vec before(vec s, int32_t key, ivec pos) {
        const __m256i past = _mm256_cmpgt_epi32(_mm256_set1_epi32(key), pos);
        return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(past));
    }
    // Elements of a K/V row as floats: float rows as they are, F16 rows converted (F16C).
    static vec row8(const float* p) { return _mm256_loadu_ps(p); }
    static vec row8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static float one(float x) { return x; }
    static float one(uint16_t h) { return _cvtsh_ss(h); }

    template <class T>
    static void copy(float* dst, const T* src, int32_t n) {
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, row8(src + i));
        for (; i < n; ++i) dst[i] = one(src[i]);
    }

    // s[jj] = scale * q . rows[jj] for the chunk's 16 rows, 8 at a time: 8 accumulators, then one transposing add tree
    // instead of a horizontal reduction per key.
    template <class T>
    static void dots(const float* q, const T* const* rows, int32_t hd, float scale, float* s) {
        for (int32_t j0 = 0; j0 < chunk; j0 += 8) {
            __m256 a[8];
#pragma GCC unroll 8
            for (int32_t jj = 0; jj < 8; ++jj) a[jj] = _mm256_setzero_ps();
            int32_t d = 0;
            for (; d + 8 <= hd; d += 8) {
                const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
                for (int32_t jj = 0; jj < 8; ++jj) a[jj] = _mm256_fmadd_ps(qv, row8(rows[j0 + jj] + d), a[jj]);
            }
            // hadd per 128-bit lane: [x0+x1, x2+x3, y0+y1, y2+y3]; twice gives each lane's sums of four rows.
            const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
            const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
            __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
            r = _mm256_mul_ps(r, _mm256_set1_ps(scale));
            _mm256_storeu_ps(s + j0, r);
            for (; d < hd; ++d) {
                for (int32_t jj = 0; jj < 8; ++jj) s[j0 + jj] += scale * q[d] * one(rows[j0 + jj][d]);
            }
        }
    }
    // acc += sum_{jj < n} w[jj] * rows[jj] (hd floats): acc loaded and stored once per chunk; 32 floats at a time
    // with the even and odd keys in separate sums (8 independent FMA chains).
    template <class T>
    static void accumulate(float* acc, const float* w, const T* const* rows, int32_t n, int32_t hd) {
        int32_t d = 0;
        for (; d + 32 <= hd; d += 32) {
            __m256 a[4], b[4];
#pragma GCC unroll 4
            for (int32_t i = 0; i < 4; ++i) a[i] = _mm256_loadu_ps(acc + d + 8 * i), b[i] = _mm256_setzero_ps();
            int32_t jj = 0;
            for (; jj + 2 <= n; jj += 2) {
                const __m256 w0 = _mm256_set1_ps(w[jj]);
                const __m256 w1 = _mm256_set1_ps(w[jj + 1]);
#pragma GCC unroll 4
                for (int32_t i = 0; i < 4; ++i) {
                    a[i] = _mm256_fmadd_ps(w0, row8(rows[jj] + d + 8 * i), a[i]);
                    b[i] = _mm256_fmadd_ps(w1, row8(rows[jj + 1] + d + 8 * i), b[i]);
                }
            }
            if (jj < n) {
                const __m256 w0 = _mm256_set1_ps(w[jj]);
#pragma GCC unroll 4
                for (int32_t i = 0; i < 4; ++i) a[i] = _mm256_fmadd_ps(w0, row8(rows[jj] + d + 8 * i), a[i]);
            }
#pragma GCC unroll 4
            for (int32_t i = 0; i < 4; ++i) _mm256_storeu_ps(acc + d + 8 * i, _mm256_add_ps(a[i], b[i]));
        }
        for (; d + 8 <= hd; d += 8) {
            __m256 a = _mm256_loadu_ps(acc + d);
            for (int32_t jj = 0; jj < n; ++jj) a = _mm256_fmadd_ps(_mm256_set1_ps(w[jj]), row8(rows[jj] + d), a);
            _mm256_storeu_ps(acc + d, a);
        }
        for (; d < hd; ++d) {
            for (int32_t jj = 0; jj < n; ++jj) acc[d] += w[jj] * one(rows[jj][d]);
        }
    }
    // A kv head's query rows at once (attend_rows's by_head path; head_dim a multiple of 16), as the AVX-512
    // file's: the chunk's K transposed once into kt[d][16] in 8 x 8 blocks, each row's 16 scores two vectors of FMAs
    // over d, the softmax's sums kept in lanes, V loaded (and converted) once per four rows.
    static constexpr bool head_kernels = true;

    // kt[d * 16 + jj] = rows[jj][d]. Each 8 x 8 block without lane-crossing permutes (vperm2f128 is 8 micro-ops on a
    // Zen 1 EPYC; with two per column the transposition was a quarter of a 4096-key decode's attention there): rows i
    // and i + 4 share a register, one in each 128-bit lane, so 4 x 4 transposes inside the lanes give whole columns.
    template <class T>
    static void transpose_chunk(const T* const* rows, int32_t hd, float* kt) {
        for (int32_t d0 = 0; d0 < hd; d0 += 8) {
            for (int32_t half = 0; half < 2; ++half) {
                const T* const* rr = rows + 8 * half;
                __m256 lo[4], hi[4];  // dims d0 .. d0 + 3 and d0 + 4 .. d0 + 7 of rows (i, i + 4)
#pragma GCC unroll 4
                for (int32_t i = 0; i < 4; ++i) {
                    lo[i] = two_rows4(rr[i] + d0, rr[i + 4] + d0);
                    hi[i] = two_rows4(rr[i] + d0 + 4, rr[i + 4] + d0 + 4);
                }
                transpose4_in_lanes(lo);
                transpose4_in_lanes(hi);
#pragma GCC unroll 4
                for (int32_t c = 0; c < 4; ++c) {
                    _mm256_store_ps(kt + static_cast<size_t>(d0 + c) * 16 + 8 * half, lo[c]);
                    _mm256_store_ps(kt + static_cast<size_t>(d0 + 4 + c) * 16 + 8 * half, hi[c]);
                }
            }
        }
    }
    static __m128 row4(const float* p) {
        return _mm_loadu_ps(p);
    }
    static __m128 row4(const uint16_t* p) {
        return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }
    // a's 4 values in the low 128-bit lane, b's in the high one.
    template <class T>
    static __m256 two_rows4(const T* a, const T* b) {
        return _mm256_insertf128_ps(_mm256_castps128_ps256(row4(a)), row4(b), 1);
    }
    // In each 128-bit lane: r[c] element j <- r[j] element c.
    __attribute__((always_inline)) static void transpose4_in_lanes(__m256* r) {
        const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
        r[0] = _mm256_shuffle_ps(t0, t2, 0x44);
        r[1] = _mm256_shuffle_ps(t0, t2, 0xee);
        r[2] = _mm256_shuffle_ps(t1, t3, 0x44);
        r[3] = _mm256_shuffle_ps(t1, t3, 0xee);
    }
    // A chunk's scores for a kv head's query rows (attend_rows): K transposed into kt, then head_scores.
    template <class T>
    static void chunk_scores(const T* const* rows, const float* q, int32_t n_rows, float* kt, int32_t hd, float scale,
                             float (*sc)[16]) {
        transpose_chunk(rows, hd, kt);
        head_scores(q, n_rows, kt, hd, scale, sc);
    }
    // sc[r] = scale * (q_r . k_jj for the chunk's 16 keys), rows r < n_rows of q ([n_rows, hd]), from kt.
    static void head_scores(const float* q, int32_t n_rows, const float* kt, int32_t hd, float scale, float (*sc)[16]) {
        using rows_fn = void (*)(const float*, const float*, int32_t, float, float(*)[16]);
        static constexpr rows_fn tail[4] = {nullptr, score_rows<1>, score_rows<2>, score_rows<3>};
        int32_t r = 0;
        for (; r + 4 <= n_rows; r += 4) score_rows<4>(q + static_cast<size_t>(r) * hd, kt, hd, scale, sc + r);
        if (r < n_rows) tail[n_rows - r](q + static_cast<size_t>(r) * hd, kt, hd, scale, sc + r);
    }
    template <int32_t R>
    static void score_rows(const float* q, const float* kt, int32_t hd, float scale, float (*sc)[16]) {
        __m256 a[R][2];
#pragma GCC unroll 4
        for (int32_t r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; ++d) {
            const __m256 k0 = _mm256_load_ps(kt + static_cast<size_t>(d) * 16);
            const __m256 k1 = _mm256_load_ps(kt + static_cast<size_t>(d) * 16 + 8);
#pragma GCC unroll 4
            for (int32_t r = 0; r < R; ++r) {
                const __m256 qd = _mm256_broadcast_ss(q + static_cast<size_t>(r) * hd + d);
                a[r][0] = _mm256_fmadd_ps(qd, k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(qd, k1, a[r][1]);
            }
        }
        const __m256 s = _mm256_set1_ps(scale);
#pragma GCC unroll 4
        for (int32_t r = 0; r < R; ++r) {
            _mm256_store_ps(sc[r], _mm256_mul_ps(a[r][0], s));
            _mm256_store_ps(sc[r] + 8, _mm256_mul_ps(a[r][1], s));
        }
    }
    // chunk_softmax's step for rows r < n_rows over a chunk's n scores, each row's sum kept in 16 lanes (lsum[r]).
    static void head_softmax(float (*sc)[16], int32_t n_rows, int32_t n, float* m, float (*lsum)[16], float* acc,
                             int32_t hd) {
        const __m256i nv = _mm256_set1_epi32(n);
        const __m256 in0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        const __m256 in1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)));
        const __m256 none = _mm256_set1_ps(-INFINITY);
        for (int32_t r = 0; r < n_rows; ++r) {
            const __m256 v0 = _mm256_blendv_ps(none, _mm256_load_ps(sc[r]), in0);
            const __m256 v1 = _mm256_blendv_ps(none, _mm256_load_ps(sc[r] + 8), in1);
            const __m256 v = _mm256_max_ps(v0, v1);
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            const float cm = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
            if (cm > m[r]) {
                const float c = expf(m[r] - cm);  // 0 on the first chunk (m = -inf)
                float* a = acc + static_cast<size_t>(r) * hd;
                scale(a, a, c, hd);
                scale(lsum[r], lsum[r], c, 16);
                m[r] = cm;
            }
            const __m256 mv = _mm256_set1_ps(m[r]);
            const __m256 p0 = _mm256_and_ps(exp_nonpositive<avx2>(_mm256_sub_ps(v0, mv)), in0);
            const __m256 p1 = _mm256_and_ps(exp_nonpositive<avx2>(_mm256_sub_ps(v1, mv)), in1);
            _mm256_store_ps(sc[r], p0);
            _mm256_store_ps(sc[r] + 8, p1);
            _mm256_store_ps(lsum[r], _mm256_add_ps(_mm256_load_ps(lsum[r]), p0));
            _mm256_store_ps(lsum[r] + 8, _mm256_add_ps(_mm256_load_ps(lsum[r] + 8), p1));
        }
    }
    // acc[r] += sum_{jj < n} w[r][jj] * rows[jj] for rows r < n_rows (acc: [n_rows, hd]): four rows by 16 floats at a
    // time, eight sums in registers, each V vector loaded (and converted) once per four rows.
    template <class T>
    static void head_accumulate(float* acc, int32_t n_rows, const float (*w)[16], const T* const* rows, int32_t n,
                                int32_t hd) {
        using rows_fn = void (*)(float*, int32_t, const float*, const T* const*, int32_t);
        static constexpr rows_fn tail[4] = {nullptr, accumulate_rows<1, T>, accumulate_rows<2, T>,
                                            accumulate_rows<3, T>};
        int32_t r = 0;
        for (; r + 4 <= n_rows; r += 4) accumulate_rows<4, T>(acc + static_cast<size_t>(r) * hd, hd, w[r], rows, n);
        if (r < n_rows) tail[n_rows - r](acc + static_cast<size_t>(r) * hd, hd, w[r], rows, n);
    }

    // attend_rows_in_lanes' kernels (attention_online.h): blocks of 8 query rows of one kv head, a row per lane.
    static constexpr int32_t row_lanes = 8;
    template <class T>
    static constexpr bool converts_rows = sizeof(T) != sizeof(float);

    // The chunk's n K rows as floats for lane_scores: a float pool's rows as they are, a half pool's converted into
    // kf ([chunk][hd]); the rows from n on repeat row 0 (their scores are never read).
    static void float_rows(const float* const* rows, int32_t, int32_t, float*, const float** out) {
        for (int32_t jj = 0; jj < chunk; ++jj) out[jj] = rows[jj];
    }
    static void float_rows(const uint16_t* const* rows, int32_t n, int32_t hd, float* kf, const float** out) {
        for (int32_t jj = 0; jj < n; ++jj) {
            copy(kf + static_cast<size_t>(jj) * hd, rows[jj], hd);
            out[jj] = kf + static_cast<size_t>(jj) * hd;
        }
        for (int32_t jj = n; jj < chunk; ++jj) out[jj] = out[0];
    }
    // p[jj] = scale * (q_i . k_jj) in lane i for the chunk's keys jj < n (qt [hd][8]: the block's rows transposed),
    // eight keys at a time: k_jj's element d broadcast against qt[d], the products added over d in order as
    // score_rows adds them, so each score is score_rows' float. K is read where it lies, never transposed. Out of
    // line: inlined into the driver, its eight row pointers were reloaded from the stack at every step.
    __attribute__((noinline)) static void lane_scores(const float* qt, const float* const* k, int32_t n, int32_t hd,
                                                      float scale, float (*p)[8]) {
        const __m256 s = _mm256_set1_ps(scale);
        for (int32_t j0 = 0; j0 < n; j0 += 8) {
            const float* const* kk = k + j0;
            __m256 a[8];
#pragma GCC unroll 8
            for (int32_t jj = 0; jj < 8; ++jj) a[jj] = _mm256_setzero_ps();
            for (int32_t d = 0; d < hd; ++d) {
                const __m256 qd = _mm256_load_ps(qt + static_cast<size_t>(d) * 8);
#pragma GCC unroll 8
                for (int32_t jj = 0; jj < 8; ++jj) a[jj] = _mm256_fmadd_ps(_mm256_broadcast_ss(kk[jj] + d), qd, a[jj]);
            }
#pragma GCC unroll 8
            for (int32_t jj = 0; jj < 8; ++jj) _mm256_store_ps(p[j0 + jj], _mm256_mul_ps(a[jj], s));
        }
    }
    // head_softmax's step for blocks b < n_blocks of 8 rows over a chunk's n keys, p[b][jj] holding key jj's scores
    // of the block's rows: the max, the exponentials and the sums down the lanes. Where a row's max rises, its sum
    // lanes and accumulator are scaled by expf(m_old - m_new) as head_softmax scales them (the other rows' sum lanes
    // by 1: exact).
    static void lane_softmax(float (*p)[chunk][8], int32_t n_blocks, int32_t n, float* m, float (*lsum)[chunk][8],
                             float* acc, int32_t hd) {
        for (int32_t b = 0; b < n_blocks; ++b) {
            __m256 cm = _mm256_load_ps(p[b][0]);
            for (int32_t jj = 1; jj < n; ++jj) cm = _mm256_max_ps(cm, _mm256_load_ps(p[b][jj]));
            float* mb = m + 8 * b;
            const int rise = _mm256_movemask_ps(_mm256_cmp_ps(cm, _mm256_loadu_ps(mb), _CMP_GT_OQ));
            if (rise != 0) {
                alignas(32) float new_m[8];
                alignas(32) float c[8];
                _mm256_store_ps(new_m, cm);
                for (int32_t i = 0; i < 8; ++i) {
                    c[i] = 1.0f;
                    if ((rise >> i) & 1) {
                        c[i] = expf(mb[i] - new_m[i]);  // 0 on the first chunk (m = -inf)
                        float* a = acc + static_cast<size_t>(8 * b + i) * hd;
                        scale(a, a, c[i], hd);
                        mb[i] = new_m[i];
                    }
                }
                const __m256 cv = _mm256_load_ps(c);
                for (int32_t jj = 0; jj < chunk; ++jj) {
                    _mm256_store_ps(lsum[b][jj], _mm256_mul_ps(_mm256_load_ps(lsum[b][jj]), cv));
                }
            }
            const __m256 mv = _mm256_loadu_ps(mb);
            for (int32_t jj = 0; jj < n; ++jj) {
                const __m256 e = exp_nonpositive<avx2>(_mm256_sub_ps(_mm256_load_ps(p[b][jj]), mv));
                _mm256_store_ps(p[b][jj], e);
                _mm256_store_ps(lsum[b][jj], _mm256_add_ps(_mm256_load_ps(lsum[b][jj]), e));
            }
        }
    }
    // acc[i] += sum_{jj < n} p[jj][i] * rows[jj] for the block's 8 rows (acc [8, hd]), as head_accumulate adds them.
    template <class T>
    static void lane_accumulate(float* acc, const float (*p)[8], const T* const* rows, int32_t n, int32_t hd) {
        accumulate_rows<4, T, 1, 8>(acc, hd, p[0], rows, n);
        accumulate_rows<4, T, 1, 8>(acc + static_cast<size_t>(4) * hd, hd, p[0] + 4, rows, n);
    }
    // w[r * RS + jj * KS] is row r's weight of key jj: RS 16, KS 1 for head_softmax's rows of 16 keys; RS 1, KS 8
    // for lane_softmax's keys of 8 rows.
    template <int32_t R, class T, int32_t RS = 16, int32_t KS = 1>
    static void accumulate_rows(float* acc, int32_t hd, const float* w, const T* const* rows, int32_t n) {
        for (int32_t d = 0; d < hd; d += 16) {
            __m256 a[R][2];
#pragma GCC unroll 4
            for (int32_t r = 0; r < R; ++r) {
                a[r][0] = _mm256_loadu_ps(acc + static_cast<size_t>(r) * hd + d);
                a[r][1] = _mm256_loadu_ps(acc + static_cast<size_t>(r) * hd + d + 8);
            }
            for (int32_t jj = 0; jj < n; ++jj) {
                const __m256 v0 = row8(rows[jj] + d), v1 = row8(rows[jj] + d + 8);
#pragma GCC unroll 4
                for (int32_t r = 0; r < R; ++r) {
                    const __m256 wr = _mm256_broadcast_ss(w + r * RS + jj * KS);
                    a[r][0] = _mm256_fmadd_ps(wr, v0, a[r][0]);
                    a[r][1] = _mm256_fmadd_ps(wr, v1, a[r][1]);
                }
            }
#pragma GCC unroll 4
            for (int32_t r = 0; r < R; ++r) {
                _mm256_storeu_ps(acc + static_cast<size_t>(r) * hd + d, a[r][0]);
                _mm256_storeu_ps(acc + static_cast<size_t>(r) * hd + d + 8, a[r][1]);
            }
        }
    }
    // n floats to halves (round to nearest even, as fp32_to_fp16).
    static void to_halves(uint16_t* dst, const float* src, int32_t n) {
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    // The largest, and the sum, of s[0 .. n) (n <= chunk = 16): two vectors folded, then one 8-lane reduction.
    static float max_of(const float* s, int32_t n) {
        alignas(32) float x[chunk];
        for (int32_t i = 0; i < chunk; ++i) x[i] = i < n ? s[i] : -INFINITY;
        const __m256 v = _mm256_max_ps(_mm256_load_ps(x), _mm256_load_ps(x + 8));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    }
    static float sum_of(const float* s, int32_t n) {
        alignas(32) float x[chunk];
        for (int32_t i = 0; i < chunk; ++i) x[i] = i < n ? s[i] : 0.0f;
        const __m256 v = _mm256_add_ps(_mm256_load_ps(x), _mm256_load_ps(x + 8));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
    static void exp_shifted(float* s, int32_t n, float m) {
        alignas(32) float x[chunk];  // padded to whole vectors; the padding is never stored back
        for (int32_t i = 0; i < chunk; ++i) x[i] = i < n ? s[i] - m : 0.0f;
        for (int32_t i = 0; i < chunk; i += 8) _mm256_store_ps(x + i, exp_nonpositive<avx2>(_mm256_load_ps(x + i)));
        for (int32_t i = 0; i < n; ++i) s[i] = x[i];
    }
    static void scale(float* out, const float* acc, float f, int32_t n) {
        const __m256 vf = _mm256_set1_ps(f);
        int32_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), vf));
        for (; i < n; ++i) out[i] = acc[i] * f;
    }
};

}  // namespace

void attend_tiles_avx2(const troupe_attention_call& call, const query_tile* tiles, int32_t n_tiles, int64_t begin,
                       int64_t end) {
    if (call.kv_type == TROUPE_KV_F16) {
        attend_tiles<avx2, uint16_t>(call, tiles, n_tiles, begin, end);
    } else {
        attend_tiles<avx2, float>(call, tiles, n_tiles, begin, end);
    }
}

void attend_groups_avx2(const troupe_attention_call& call, const token_group* groups, const int32_t* tokens,
                        int64_t begin, int64_t end) {
    if (call.kv_type == TROUPE_KV_F16) {
        attend_groups<avx2, uint16_t>(call, groups, tokens, begin, end);
    } else {
        attend_groups<avx2, float>(call, groups, tokens, begin, end);
    }
}

void attend_parts_avx2(const troupe_attention_call& call, const key_part* parts, const int32_t* shared_tokens,
                       float* part_out, float* part_m, float* part_l, int64_t begin, int64_t end) {
    if (call.kv_type == TROUPE_KV_F16) {
        attend_parts<avx2, uint16_t>(call, parts, shared_tokens, part_out, part_m, part_l, begin, end);
    } else {
        attend_parts<avx2, float>(call, parts, shared_tokens, part_out, part_m, part_l, begin, end);
    }
}

void write_kv_avx2(const troupe_attention_call& call, int64_t begin, int64_t end) {
    write_kv_rows<avx2>(call, begin, end);
}

}  // namespace troupe::gqa
