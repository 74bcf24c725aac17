// AVX-512F attention (built with -mavx512f; called only when the CPU has it): the per-token driver
// (attention_online.h) and the tiled one (attention_tiled.h). Tails use masked loads.
#include <immintrin.h>

#include "attention_shared.h"
#include "attention_tiled.h"
#include "kv_write.h"
#include "vector_exp.h"

namespace troupe::gqa {
namespace {

inline __mmask16 tail_mask(int32_t left) {
    return static_cast<__mmask16>((1u << left) - 1u);  // left <= 16
}

struct avx512 {
    using vec = __m512;
    using ivec = __m512i;
    static constexpr int32_t lanes = avx512_lanes;
    static constexpr int32_t accumulate_unroll = 8;

    static vec zero() { return _mm512_setzero_ps(); }
    static vec set1(float x) { return _mm512_set1_ps(x); }
    static vec load(const float* p) { return _mm512_load_ps(p); }
    static void store(float* p, vec v) { _mm512_store_ps(p, v); }
    static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
    static vec sub(vec a, vec b) { return _mm512_sub_ps(a, b); }
    static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
    static vec div(vec a, vec b) { return _mm512_div_ps(a, b); }
    static vec max(vec a, vec b) { return _mm512_max_ps(a, b); }
    static vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
    static vec fnmadd(vec a, vec b, vec c) { return _mm512_fnmadd_ps(a, b, c); }
    static vec round(vec v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static vec times_pow2(vec y, vec n) { return _mm512_scalef_ps(y, n); }
    static vec zero_below(vec v, vec x, float bound) {
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(bound), _CMP_GE_OQ), v);
    }
    static ivec load_positions(const int32_t* p) { return _mm512_load_si512(p); }
    static vec before(vec s, int32_t key, ivec pos) {
        const __mmask16 seen = _mm512_cmp_epi32_mask(_mm512_set1_epi32(key), pos, _MM_CMPINT_LE);
        return _mm512_mask_blend_ps(seen, _mm512_set1_ps(-INFINITY), s);
    }
    // 16 elements of a K/V row as floats: float rows as they are, F16 rows converted (vcvtph2ps); `left` < 16
    // loads only that many (the rest read as 0).
    static vec row16(const float* p) { return _mm512_loadu_ps(p); }
    static vec row16(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static vec row16(const float* p, int32_t left) { return _mm512_maskz_loadu_ps(tail_mask(left), p); }
    static vec row16(const uint16_t* p, int32_t left) {
        alignas(32) uint16_t h[16] = {};
        for (int32_t i = 0; i < left; ++i) h[i] = p[i];
        return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
    }

    template <class T>
    static void copy(float* dst, const T* src, int32_t n) {
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, row16(src + i));
        if (i < n) _mm512_mask_storeu_ps(dst + i, tail_mask(n - i), row16(src + i, n - i));
    }

    // s[jj] = scale * q . rows[jj] for the chunk's 16 rows: 16 accumulators, then one transposing add tree (45 shuffles
    // and adds) instead of a horizontal reduction per key.
    template <class T>
    static void dots(const float* q, const T* const* rows, int32_t hd, float scale, float* s) {
        __m512 a[16];
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < 16; ++jj) a[jj] = _mm512_setzero_ps();
        int32_t d = 0;
        for (; d + 16 <= hd; d += 16) {
            const __m512 qv = _mm512_loadu_ps(q + d);
#pragma GCC unroll 16
            for (int32_t jj = 0; jj < 16; ++jj) a[jj] = _mm512_fmadd_ps(qv, row16(rows[jj] + d), a[jj]);
        }
        if (d < hd) {
            const __mmask16 k = tail_mask(hd - d);
            const __m512 qv = _mm512_maskz_loadu_ps(k, q + d);
#pragma GCC unroll 16
            for (int32_t jj = 0; jj < 16; ++jj) {
                a[jj] = _mm512_fmadd_ps(qv, row16(rows[jj] + d, hd - d), a[jj]);
            }
        }
        _mm512_storeu_ps(s, _mm512_mul_ps(sum16(a), _mm512_set1_ps(scale)));
    }
    // Lane i of the result: the sum of a[i]'s 16 lanes.
    static __m512 sum16(const __m512* a) {
        __m512 u[8];  // per 128-bit lane k: [a(2i) k0+k2, a(2i+1) k0+k2, a(2i) k1+k3, a(2i+1) k1+k3]
#pragma GCC unroll 8
        for (int32_t i = 0; i < 8; ++i) {
            u[i] =
                _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
        }
        __m512 x[4];  // per 128-bit lane k: that lane's sums of a(4j), a(4j + 1), a(4j + 2), a(4j + 3)
#pragma GCC unroll 4
        for (int32_t j = 0; j < 4; ++j) {
            const __m512d p = _mm512_castps_pd(u[2 * j]);
            const __m512d r = _mm512_castps_pd(u[2 * j + 1]);
            x[j] =
                _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p, r)), _mm512_castpd_ps(_mm512_unpackhi_pd(p, r)));
        }
        // 128-bit lanes: x0 = [A0 A1 A2 A3] (keys 0-3's partial sums per lane), x1 = [B..], x2 = [C..], x3 = [D..].
        const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88), _mm512_shuffle_f32x4(x[0], x[1], 0xdd));
        const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], 0x88), _mm512_shuffle_f32x4(x[2], x[3], 0xdd));
        // ab = [A0+A1, A2+A3, B0+B1, B2+B3], cd likewise: now [A, B, C, D].
        return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    }
    // acc += sum_{jj < n} w[jj] * rows[jj] (hd floats): acc loaded and stored once per chunk; 64 floats at a time
    // with the even and odd keys in separate sums (8 independent FMA chains, not one 16 long per vector).
    template <class T>
    static void accumulate(float* acc, const float* w, const T* const* rows, int32_t n, int32_t hd) {
        int32_t d = 0;
        for (; d + 64 <= hd; d += 64) {
            __m512 a[4], b[4];
#pragma GCC unroll 4
            for (int32_t i = 0; i < 4; ++i) a[i] = _mm512_loadu_ps(acc + d + 16 * i), b[i] = _mm512_setzero_ps();
            int32_t jj = 0;
            for (; jj + 2 <= n; jj += 2) {
                const __m512 w0 = _mm512_set1_ps(w[jj]);
                const __m512 w1 = _mm512_set1_ps(w[jj + 1]);
#pragma GCC unroll 4
                for (int32_t i = 0; i < 4; ++i) {
                    a[i] = _mm512_fmadd_ps(w0, row16(rows[jj] + d + 16 * i), a[i]);
                    b[i] = _mm512_fmadd_ps(w1, row16(rows[jj + 1] + d + 16 * i), b[i]);
                }
            }
            if (jj < n) {
                const __m512 w0 = _mm512_set1_ps(w[jj]);
#pragma GCC unroll 4
                for (int32_t i = 0; i < 4; ++i) a[i] = _mm512_fmadd_ps(w0, row16(rows[jj] + d + 16 * i), a[i]);
            }
#pragma GCC unroll 4
            for (int32_t i = 0; i < 4; ++i) _mm512_storeu_ps(acc + d + 16 * i, _mm512_add_ps(a[i], b[i]));
        }
        for (; d + 16 <= hd; d += 16) {
            __m512 a = _mm512_loadu_ps(acc + d);
            for (int32_t jj = 0; jj < n; ++jj) a = _mm512_fmadd_ps(_mm512_set1_ps(w[jj]), row16(rows[jj] + d), a);
            _mm512_storeu_ps(acc + d, a);
        }
        if (d < hd) {
            const __mmask16 k = tail_mask(hd - d);
            __m512 a = _mm512_maskz_loadu_ps(k, acc + d);
            for (int32_t jj = 0; jj < n; ++jj) {
                a = _mm512_fmadd_ps(_mm512_set1_ps(w[jj]), row16(rows[jj] + d, hd - d), a);
            }
            _mm512_mask_storeu_ps(acc + d, k, a);
        }
    }
    // A kv head's query rows at once (GQA groups with head_dim a multiple of 16; see attend_rows): the
    // chunk's K rows transposed once into kt[d][16] (as floats), so that each query row's 16 scores are one vector of
    // FMAs over d with the query element broadcast (no add tree per row, and each K element loaded and converted once
    // rather than once per query row).
    static constexpr bool head_kernels = true;
    static constexpr int32_t row_lanes = 0;  // no attend_rows_in_lanes: its 16 lanes take whole chunks of keys

    template <class T>
    static void transpose_chunk(const T* const* rows, int32_t hd, float* kt) {
        for (int32_t d0 = 0; d0 < hd; d0 += 16) {
            __m512 r[16];
            block_columns(rows, d0, r);
#pragma GCC unroll 16
            for (int32_t i = 0; i < 16; ++i) _mm512_store_ps(kt + static_cast<size_t>(d0 + i) * 16, r[i]);
        }
    }
    // r[i] = element d0 + i of the chunk's 16 rows (as floats): the 16 x 16 block at d0, transposed in registers.
    template <class T>
    __attribute__((always_inline)) static void block_columns(const T* const* rows, int32_t d0, __m512* r) {
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < 16; ++jj) r[jj] = row16(rows[jj] + d0);
        transpose16(r);
    }
    // r[i] lane j <- r[j] lane i (inlined, so that r stays in registers).
    __attribute__((always_inline)) static void transpose16(__m512* r) {
        __m512 t[16];
#pragma GCC unroll 8
        for (int32_t i = 0; i < 8; ++i) {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
#pragma GCC unroll 4
        for (int32_t i = 0; i < 4; ++i) {
            const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
            const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
            r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        // Each 128-bit lane k of r[4i + c] now holds column (4k + c)'s elements of rows 4i .. 4i + 3.
#pragma GCC unroll 4
        for (int32_t c = 0; c < 4; ++c) {
            t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);      // lanes 0, 2 of rows 0-3, then of rows 4-7
            t[4 + c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);  // lanes 1, 3
            t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
            t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        }
#pragma GCC unroll 4
        for (int32_t c = 0; c < 4; ++c) {
            r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);            // column c
            r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);        // column 8 + c
            r[4 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0x88);   // column 4 + c
            r[12 + c] = _mm512_shuffle_f32x4(t[4 + c], t[12 + c], 0xdd);  // column 12 + c
        }
    }
    // A chunk's scores for a kv head's n_rows query rows straight from its 16 K rows (attend_rows: one token): up to
    // eight rows take each 16 x 16 block of K transposed in registers and fold it into their sums at once, the sums
    // of head_scores over the same d in the same order, so bit for bit its scores; more rows go through kt.
    template <class T>
    static void chunk_scores(const T* const* rows, const float* q, int32_t n_rows, float* kt, int32_t hd, float scale,
                             float (*sc)[16]) {
        using rows_fn = void (*)(const T* const*, const float*, int32_t, float, float(*)[16]);
        static constexpr rows_fn direct[9] = {nullptr,
                                              direct_scores<1, T>,
                                              direct_scores<2, T>,
                                              direct_scores<3, T>,
                                              direct_scores<4, T>,
                                              direct_scores<5, T>,
                                              direct_scores<6, T>,
                                              direct_scores<7, T>,
                                              direct_scores<8, T>};
        if (n_rows <= 8) return direct[n_rows](rows, q, hd, scale, sc);
        transpose_chunk(rows, hd, kt);
        head_scores(q, n_rows, kt, hd, scale, sc);
    }
    template <int32_t R, class T>
    static void direct_scores(const T* const* rows, const float* q, int32_t hd, float scale, float (*sc)[16]) {
        __m512 a[R];
#pragma GCC unroll 8
        for (int32_t r = 0; r < R; ++r) a[r] = _mm512_setzero_ps();
        for (int32_t d0 = 0; d0 < hd; d0 += 16) {
            __m512 k[16];
            block_columns(rows, d0, k);
#pragma GCC unroll 16
            for (int32_t i = 0; i < 16; ++i) {
#pragma GCC unroll 8
                for (int32_t r = 0; r < R; ++r)
                    a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[static_cast<size_t>(r) * hd + d0 + i]), k[i], a[r]);
            }
        }
#pragma GCC unroll 8
        for (int32_t r = 0; r < R; ++r) _mm512_store_ps(sc[r], _mm512_mul_ps(a[r], _mm512_set1_ps(scale)));
    }
    // sc[r] = scale * (q_r . k_jj for the chunk's 16 keys), rows r < n_rows of q ([n_rows, hd]), from kt.
    static void head_scores(const float* q, int32_t n_rows, const float* kt, int32_t hd, float scale, float (*sc)[16]) {
        using rows_fn = void (*)(const float*, const float*, int32_t, float, float(*)[16]);
        static constexpr rows_fn tail[8] = {nullptr,       score_rows<1>, score_rows<2>, score_rows<3>,
                                            score_rows<4>, score_rows<5>, score_rows<6>, score_rows<7>};
        int32_t r = 0;
        for (; r + 8 <= n_rows; r += 8) score_rows<8>(q + static_cast<size_t>(r) * hd, kt, hd, scale, sc + r);
        if (r < n_rows) tail[n_rows - r](q + static_cast<size_t>(r) * hd, kt, hd, scale, sc + r);
    }
    template <int32_t R>
    static void score_rows(const float* q, const float* kt, int32_t hd, float scale, float (*sc)[16]) {
        __m512 a[R];
#pragma GCC unroll 8
        for (int32_t r = 0; r < R; ++r) a[r] = _mm512_setzero_ps();
        for (int32_t d = 0; d < hd; ++d) {
            const __m512 k = _mm512_load_ps(kt + static_cast<size_t>(d) * 16);
#pragma GCC unroll 8
            for (int32_t r = 0; r < R; ++r)
                a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[static_cast<size_t>(r) * hd + d]), k, a[r]);
        }
#pragma GCC unroll 8
        for (int32_t r = 0; r < R; ++r) _mm512_store_ps(sc[r], _mm512_mul_ps(a[r], _mm512_set1_ps(scale)));
    }
    // The online-softmax step of chunk_softmax for rows r < n_rows, eight rows at a time: their maxes in one add tree
    // (max8), then each row's weights exp(s - m) (lanes >= n zero) added to its sum's lanes (lsum[r]: 16 partial sums,
    // reduced once at the end, not once per chunk).
    static void head_softmax(float (*sc)[16], int32_t n_rows, int32_t n, float* m, float (*lsum)[16], float* acc,
                             int32_t hd) {
        const __mmask16 k = tail_mask(n);
        for (int32_t r0 = 0; r0 < n_rows; r0 += 8) {
            const int32_t rows = n_rows - r0 < 8 ? n_rows - r0 : 8;
            __m512 v[8];
#pragma GCC unroll 8
            for (int32_t i = 0; i < 8; ++i) {
                v[i] = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, sc[r0 + (i < rows ? i : rows - 1)]);
            }
            alignas(32) float cm[8];
            _mm256_store_ps(cm, max8(v));
            for (int32_t i = 0; i < rows; ++i) {
                const int32_t r = r0 + i;
                if (cm[i] > m[r]) {
                    const float c = expf(m[r] - cm[i]);  // 0 on the first chunk (m = -inf)
                    float* a = acc + static_cast<size_t>(r) * hd;
                    scale(a, a, c, hd);
                    _mm512_store_ps(lsum[r], _mm512_mul_ps(_mm512_load_ps(lsum[r]), _mm512_set1_ps(c)));
                    m[r] = cm[i];
                }
            }
#pragma GCC unroll 8
            for (int32_t i = 0; i < 8; ++i) {
                if (i < rows) {
                    const int32_t r = r0 + i;
                    const __m512 p =
                        _mm512_maskz_mov_ps(k, exp_nonpositive<avx512>(_mm512_sub_ps(v[i], _mm512_set1_ps(m[r]))));
                    _mm512_store_ps(sc[r], p);
                    _mm512_store_ps(lsum[r], _mm512_add_ps(_mm512_load_ps(lsum[r]), p));
                }
            }
        }
    }
    // Lane r (r < 8) of the result: the largest of v[r]'s 16 lanes.
    static __m256 max8(const __m512* v) {
        __m512 x[4];  // per 128-bit lane: [v(2i) 0|2, v(2i+1) 0|2, v(2i) 1|3, v(2i+1) 1|3]
#pragma GCC unroll 4
        for (int32_t i = 0; i < 4; ++i) {
            x[i] =
                _mm512_max_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
        }
        __m512 y[2];  // per 128-bit lane: that lane's maxes of v(4j) .. v(4j + 3)
#pragma GCC unroll 2
        for (int32_t j = 0; j < 2; ++j) {
            const __m512d a = _mm512_castps_pd(x[2 * j]), b = _mm512_castps_pd(x[2 * j + 1]);
            y[j] =
                _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
        }
        // z: [rows 0-3 over lanes 0,1 | rows 0-3 over lanes 2,3 | rows 4-7 over 0,1 | rows 4-7 over 2,3]
        const __m512 z = _mm512_max_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xdd));
        const __m512 w = _mm512_max_ps(z, _mm512_shuffle_f32x4(z, z, 0xb1));  // 128-bit lanes 0 and 2: the maxes
        return _mm512_castps512_ps256(_mm512_shuffle_f32x4(w, w, 0x08));
    }
    // acc[r] += sum_{jj < n} w[r][jj] * rows[jj] for rows r < n_rows (acc: [n_rows, hd]): four rows by 64 floats at a
    // time, sixteen sums in registers, each V vector loaded (and converted) once per four rows.
    template <class T>
    static void head_accumulate(float* acc, int32_t n_rows, const float (*w)[16], const T* const* rows, int32_t n,
                                int32_t hd) {
        int32_t r = 0;
        for (; r + 4 <= n_rows; r += 4) accumulate_rows<4>(acc + static_cast<size_t>(r) * hd, w + r, rows, n, hd);
        switch (n_rows - r) {
            case 3:
                return accumulate_rows<3>(acc + static_cast<size_t>(r) * hd, w + r, rows, n, hd);
            case 2:
                return accumulate_rows<2>(acc + static_cast<size_t>(r) * hd, w + r, rows, n, hd);
            case 1:
                return accumulate_rows<1>(acc + static_cast<size_t>(r) * hd, w + r, rows, n, hd);
            default:
                return;
        }
    }
    template <int32_t R, class T>
    static void accumulate_rows(float* acc, const float (*w)[16], const T* const* rows, int32_t n, int32_t hd) {
        int32_t d = 0;
        for (; d + 64 <= hd; d += 64) accumulate_block<R, 4>(acc + d, hd, w, rows, n, d);
        switch ((hd - d) / 16) {
            case 3:
                return accumulate_block<R, 3>(acc + d, hd, w, rows, n, d);
            case 2:
                return accumulate_block<R, 2>(acc + d, hd, w, rows, n, d);
            case 1:
                return accumulate_block<R, 1>(acc + d, hd, w, rows, n, d);
            default:
                return;
        }
    }
    template <int32_t R, int32_t Z, class T>
    static void accumulate_block(float* acc, int32_t hd, const float (*w)[16], const T* const* rows, int32_t n,
                                 int32_t d) {
        __m512 a[R][Z];
#pragma GCC unroll 4
        for (int32_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
            for (int32_t z = 0; z < Z; ++z) a[r][z] = _mm512_loadu_ps(acc + static_cast<size_t>(r) * hd + 16 * z);
        }
        for (int32_t jj = 0; jj < n; ++jj) {
            __m512 v[Z];
#pragma GCC unroll 4
            for (int32_t z = 0; z < Z; ++z) v[z] = row16(rows[jj] + d + 16 * z);
#pragma GCC unroll 4
            for (int32_t r = 0; r < R; ++r) {
                const __m512 wr = _mm512_set1_ps(w[r][jj]);
#pragma GCC unroll 4
                for (int32_t z = 0; z < Z; ++z) a[r][z] = _mm512_fmadd_ps(wr, v[z], a[r][z]);
            }
        }
#pragma GCC unroll 4
        for (int32_t r = 0; r < R; ++r) {
#pragma GCC unroll 4
            for (int32_t z = 0; z < Z; ++z) _mm512_storeu_ps(acc + static_cast<size_t>(r) * hd + 16 * z, a[r][z]);
        }
    }
    // n floats to halves (round to nearest even, as fp32_to_fp16).
    static void to_halves(uint16_t* dst, const float* src, int32_t n) {
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) {
            _mm256_storeu_si256(
                reinterpret_cast<__m256i*>(dst + i),
                _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        if (i < n) {
            alignas(32) uint16_t h[16];
            _mm256_store_si256(reinterpret_cast<__m256i*>(h),
                               _mm512_cvtps_ph(_mm512_maskz_loadu_ps(tail_mask(n - i), src + i),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            for (int32_t j = 0; i + j < n; ++j) dst[i + j] = h[j];
        }
    }
    // The largest, and the sum, of s[0 .. n) (n <= chunk; s has room for a whole chunk): one vector each.
    static float max_of(const float* s, int32_t n) {
        return _mm512_mask_reduce_max_ps(tail_mask(n), _mm512_loadu_ps(s));
    }
    static float sum_of(const float* s, int32_t n) {
        return _mm512_mask_reduce_add_ps(tail_mask(n), _mm512_loadu_ps(s));
    }
    static void exp_shifted(float* s, int32_t n, float m) {
        const __mmask16 k = tail_mask(n);
        const vec x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s), _mm512_set1_ps(m));
        _mm512_mask_storeu_ps(s, k, exp_nonpositive<avx512>(x));
    }
    static void scale(float* out, const float* acc, float f, int32_t n) {
        const __m512 vf = _mm512_set1_ps(f);
        int32_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), vf));
        if (i < n) {
            const __mmask16 k = tail_mask(n - i);
            _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, acc + i), vf));
        }
    }
};

}  // namespace

void attend_tiles_avx512(const troupe_attention_call& call, const query_tile* tiles, int32_t n_tiles, int64_t begin,
                         int64_t end) {
    if (call.kv_type == TROUPE_KV_F16) {
        attend_tiles<avx512, uint16_t>(call, tiles, n_tiles, begin, end);
    } else {
        attend_tiles<avx512, float>(call, tiles, n_tiles, begin, end);
    }
}

void attend_groups_avx512(const troupe_attention_call& call, const token_group* groups, const int32_t* tokens,
                          int64_t begin, int64_t end) {
    if (call.kv_type == TROUPE_KV_F16) {
        attend_groups<avx512, uint16_t>(call, groups, tokens, begin, end);
    } else {
        attend_groups<avx512, float>(call, groups, tokens, begin, end);
    }
}

void attend_parts_avx512(const troupe_attention_call& call, const key_part* parts, const int32_t* shared_tokens,
                         float* part_out, float* part_m, float* part_l, int64_t begin, int64_t end) {
    if (call.kv_type == TROUPE_KV_F16) {
        attend_parts<avx512, uint16_t>(call, parts, shared_tokens, part_out, part_m, part_l, begin, end);
    } else {
        attend_parts<avx512, float>(call, parts, shared_tokens, part_out, part_m, part_l, begin, end);
    }
}

void write_kv_avx512(const troupe_attention_call& call, int64_t begin, int64_t end) {
    write_kv_rows<avx512>(call, begin, end);
}

}  // namespace troupe::gqa
