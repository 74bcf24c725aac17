// Tiled AVX-512F attention for prefill: the query rows of a tile (its tokens x the query heads of one
// GQA group, at most 16) ride in the 16 lanes of a vector, so scores, softmax and the weighted sum are
// all lane-wise (no horizontal reduction), and each K/V row is read once per tile instead of per token.
//
// Per tile and kv head, keys j = 0..last (last = the tile's last position) in chunks of 16:
//
//   kc, vc [16 keys, kv_row_stride]  this chunk's K and V rows, copied out of the paged pools
//   qt     [head_dim, 16 rows]       scale * q, transposed once per tile: qt[d] is one vector
//   s[jj]  16 lanes                  s[jj][r] = sum_d qt[d][r] * k_jj[d]   (broadcast k_jj[d])
//          causal: s[jj][r] = -inf where key j0 + jj is past row r's position
//   m, l   16 lanes                  running max and sum of exp(s - m) per row (online softmax)
//   acc    [head_dim, 16 rows]       acc[d] = acc[d] * exp(m_old - m_new) + sum_jj p[jj] * v_jj[d]
//   out row r = acc[.][r] / l[r]
//
// Both products broadcast one float per FMA from rows at a compile-time stride (one base register, immediate
// offsets), which is why the chunk is copied into kc/vc rather than read in place. Tiles with fewer rows
// than min_tiled_rows (decode) take the per-token kernel, attend_avx512.
#include <math.h>

#include "attention_kernels.h"
#include "avx512_exp.h"

namespace troupe::gqa {
namespace {

constexpr int32_t lanes = tile_rows;
// Floats between the rows of kc/vc: fixed so the 16 rows are immediate offsets from one base; the extra
// 16 floats stagger the rows over L1 sets.
constexpr int32_t kv_row_stride = max_tiled_head_dim + 16;

// Offsets of successive positions' K/V rows of one kv head, walking the block table without a division per row.
struct kv_cursor {
    const troupe_attention_call& call;
    const int32_t* table;
    int32_t kv_head;
    int32_t entry = 0;  // block table entry of the next position
    int32_t row = 0;    // row of the next position within its block

    size_t next() {
        const size_t block_row = static_cast<size_t>(table[entry]) * call.block_size + row;
        if (++row == call.block_size) {
            row = 0;
            ++entry;
        }
        return (block_row * call.n_kv_heads + kv_head) * call.head_dim;
    }
};

void copy_row(float* dst, const float* src, int32_t hd) {
    int32_t d = 0;
    for (; d + 16 <= hd; d += 16) _mm512_storeu_ps(dst + d, _mm512_loadu_ps(src + d));
    if (d < hd) _mm512_mask_storeu_ps(dst + d, tail_mask(hd - d), _mm512_maskz_loadu_ps(tail_mask(hd - d), src + d));
}

// s[jj] = sum_d qt[d] * kc[jj][d] for the chunk's 16 keys (16 independent accumulators).
inline void chunk_scores(const float* qt, const float* kc, int32_t hd, __m512* s) {
#pragma GCC unroll 16
    for (int32_t jj = 0; jj < lanes; ++jj) s[jj] = _mm512_setzero_ps();
    for (int32_t d = 0; d < hd; ++d) {
        const __m512 q = _mm512_load_ps(qt + static_cast<size_t>(d) * lanes);
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) {
            s[jj] = _mm512_fmadd_ps(q, _mm512_set1_ps(kc[jj * kv_row_stride + d]), s[jj]);
        }
    }
}

// acc[d] = acc[d] * c + sum_jj p[jj] * vc[jj][d], eight d at a time (eight independent FMA chains).
inline void chunk_accumulate(float* acc, const float* vc, const __m512* p, __m512 c, int32_t hd) {
    constexpr int32_t unroll = 8;
    int32_t d = 0;
    for (; d + unroll <= hd; d += unroll) {
        __m512 a[unroll];
#pragma GCC unroll 8
        for (int32_t u = 0; u < unroll; ++u) a[u] = _mm512_mul_ps(_mm512_load_ps(acc + (d + u) * lanes), c);
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) {
#pragma GCC unroll 8
            for (int32_t u = 0; u < unroll; ++u) {
                a[u] = _mm512_fmadd_ps(p[jj], _mm512_set1_ps(vc[jj * kv_row_stride + d + u]), a[u]);
            }
        }
#pragma GCC unroll 8
        for (int32_t u = 0; u < unroll; ++u) _mm512_store_ps(acc + (d + u) * lanes, a[u]);
    }
    for (; d < hd; ++d) {
        __m512 a = _mm512_mul_ps(_mm512_load_ps(acc + d * lanes), c);
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj)
            a = _mm512_fmadd_ps(p[jj], _mm512_set1_ps(vc[jj * kv_row_stride + d]), a);
        _mm512_store_ps(acc + d * lanes, a);
    }
}

// Query rows of one pass: row r reads q[r], writes out[r] and sees keys 0..pos[r] (pos ascending).
struct row_block {
    int32_t n_rows;  // 1..lanes
    const float* q[lanes];
    float* out[lanes];
    int32_t pos[lanes];
};

void attend_rows(const troupe_attention_call& call, const int32_t* table, int32_t kv_head, const row_block& rows) {
    const int32_t hd = call.head_dim;
    alignas(64) float qt[max_tiled_head_dim * lanes];   // [head_dim, lanes]
    alignas(64) float acc[max_tiled_head_dim * lanes];  // [head_dim, lanes]
    alignas(64) float kc[lanes * kv_row_stride];        // [lanes keys, kv_row_stride]
    alignas(64) float vc[lanes * kv_row_stride];        // [lanes keys, kv_row_stride]
    alignas(64) int32_t row_pos[lanes];
    // Lanes past n_rows get a zero query at the first row's position: finite, and never written out.
    for (int32_t r = 0; r < lanes; ++r) row_pos[r] = rows.pos[r < rows.n_rows ? r : 0];
    for (int32_t d = 0; d < hd; ++d) {
        for (int32_t r = 0; r < lanes; ++r) qt[d * lanes + r] = r < rows.n_rows ? rows.q[r][d] * call.scale : 0.0f;
        _mm512_store_ps(acc + d * lanes, _mm512_setzero_ps());
    }
    const __m512i vpos = _mm512_load_si512(row_pos);
    const int32_t first = rows.pos[0];
    const int32_t last = rows.pos[rows.n_rows - 1];
    __m512 m = _mm512_set1_ps(-INFINITY);
    __m512 l = _mm512_setzero_ps();

    kv_cursor cursor{call, table, kv_head};
    size_t off[lanes];  // pool offsets of the next chunk's rows
    int32_t n = last + 1 < lanes ? last + 1 : lanes;
    for (int32_t jj = 0; jj < n; ++jj) off[jj] = cursor.next();
    for (int32_t j0 = 0;;) {
        for (int32_t jj = 0; jj < n; ++jj) {
            copy_row(kc + jj * kv_row_stride, call.k_pool + off[jj], hd);
            copy_row(vc + jj * kv_row_stride, call.v_pool + off[jj], hd);
        }
        // Keys past the last row's position: their scores are masked to -inf below, their weights are 0, and
        // their V rows must be finite (0 * NaN is NaN).
        for (int32_t jj = n; jj < lanes; ++jj) {
            for (int32_t d = 0; d < hd; ++d) vc[jj * kv_row_stride + d] = 0.0f;
        }
        // The next chunk's rows: offsets now, and a prefetch (rows of one kv head are strided, and the
        // blocks scattered: the hardware prefetcher does not follow them).
        const int32_t j1 = j0 + lanes;
        const int32_t n1 = j1 > last ? 0 : (last + 1 - j1 < lanes ? last + 1 - j1 : lanes);
        for (int32_t jj = 0; jj < n1; ++jj) {
            off[jj] = cursor.next();
            for (int32_t d = 0; d < hd; d += 16) {
                __builtin_prefetch(call.k_pool + off[jj] + d);
                __builtin_prefetch(call.v_pool + off[jj] + d);
            }
        }

        __m512 s[lanes];
        chunk_scores(qt, kc, hd, s);
        if (j0 + lanes - 1 > first) {  // some key of the chunk is past some row's position
#pragma GCC unroll 16
            for (int32_t jj = 0; jj < lanes; ++jj) {
                const __mmask16 seen = _mm512_cmp_epi32_mask(_mm512_set1_epi32(j0 + jj), vpos, _MM_CMPINT_LE);
                s[jj] = _mm512_mask_blend_ps(seen, _mm512_set1_ps(-INFINITY), s[jj]);
            }
        }
        __m512 mx = s[0];
#pragma GCC unroll 16
        for (int32_t jj = 1; jj < lanes; ++jj) mx = _mm512_max_ps(mx, s[jj]);
        // Every row sees key 0, so m is finite from the first chunk on and m - m_new is never -inf - -inf.
        const __m512 m_new = _mm512_max_ps(m, mx);
        const __m512 c = exp_nonpositive(_mm512_sub_ps(m, m_new));
        m = m_new;
        __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) {
            s[jj] = exp_nonpositive(_mm512_sub_ps(s[jj], m));
            sum = _mm512_add_ps(sum, s[jj]);
        }
        l = _mm512_fmadd_ps(l, c, sum);
        chunk_accumulate(acc, vc, s, c, hd);
        if (n1 == 0) break;
        j0 = j1;
        n = n1;
    }

    alignas(64) float inv_l[lanes];
    _mm512_store_ps(inv_l, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
    for (int32_t r = 0; r < rows.n_rows; ++r) {
        for (int32_t d = 0; d < hd; ++d) rows.out[r][d] = acc[d * lanes + r] * inv_l[r];
    }
}

}  // namespace

void attend_tiles_avx512(const troupe_attention_call& call, const query_tile* tiles, int32_t n_tiles, int64_t begin,
                         int64_t end) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    for (int64_t item = begin; item < end; ++item) {
        const int32_t kv_head = static_cast<int32_t>(item / n_tiles);
        const query_tile& tile = tiles[item % n_tiles];
        const int32_t n_rows = tile.n_tokens * group;
        if (n_rows < min_tiled_rows || hd > max_tiled_head_dim) {
            for (int32_t t = tile.first_token; t < tile.first_token + tile.n_tokens; ++t) {
                const int64_t token_item = static_cast<int64_t>(t) * call.n_kv_heads + kv_head;
                attend_avx512(call, token_item, token_item + 1);
            }
            continue;
        }
        const int32_t* table = call.block_tables[call.seq_of[tile.first_token]];
        // Rows token-major: row i is token first_token + i / group, head kv_head * group + i % group.
        for (int32_t r0 = 0; r0 < n_rows; r0 += lanes) {
            row_block rows;
            rows.n_rows = n_rows - r0 < lanes ? n_rows - r0 : lanes;
            for (int32_t r = 0; r < rows.n_rows; ++r) {
                const int32_t t = tile.first_token + (r0 + r) / group;
                const size_t head = static_cast<size_t>(t) * call.n_heads + kv_head * group + (r0 + r) % group;
                rows.q[r] = call.q + head * hd;
                rows.out[r] = call.out + head * hd;
                rows.pos[r] = call.positions[t];
            }
            attend_rows(call, table, kv_head, rows);
        }
    }
}

}  // namespace troupe::gqa
