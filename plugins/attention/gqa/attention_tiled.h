// Tiled (query rows in vector lanes) attention driver for prefill, instantiated once per instruction set
// by the file that includes it (attention_avx2.cpp, attention_avx512.cpp) with that set's vector helpers.
// Like attention_online.h, everything here has internal linkage and uses no library templates.
//
// A query tile is consecutive tokens of one sequence (query_tiles.h). Its query rows, tokens x the query
// heads of one GQA group, ride in the L lanes of a vector (L = isa::lanes: 16 for AVX-512, 8 for AVX2), so
// scores, online softmax and the weighted sum are lane-wise (no horizontal reduction), and each K/V row
// is read once per tile instead of once per token. Per (tile, kv head), over keys j = 0..last (the
// tile's last position) in chunks of L:
//
//   kc, vc [L keys, kv_row_stride]  this chunk's K and V rows, copied out of the paged pools
//   qt     [head_dim, L rows]       scale * q, transposed once per tile: qt[d] is one vector
//   s[jj]  L lanes                  s[jj][r] = sum_d qt[d][r] * k_jj[d]   (k_jj[d] broadcast)
//          causal: s[jj][r] = -inf where key j0 + jj is past row r's position
//   m, l   L lanes                  running max and sum of exp(s - m) per row (online softmax)
//   acc    [head_dim, L rows]       acc[d] = acc[d] * exp(m_old - m_new) + sum_jj p[jj] * v_jj[d]
//   out row r = acc[.][r] / l[r]
//
// Both products broadcast one float per FMA from L rows at a compile-time stride (one base register,
// immediate offsets), which is why a chunk is copied into kc/vc rather than read in place. Tiles that
// would fill less than half the lanes (decode steps of small groups) take the per-token driver,
// attend_online: with few rows, its per-key dot products do less work than L-lane vectors mostly empty.
//
// q is scaled before the product (the reference scales the product): the two differ by rounding only.
// Scratch is on the stack, sized for max_tiled_head_dim: qt and acc 2 x 16 KB, kc and vc 2 x 17 KB with
// AVX-512 (half with AVX2); head dims above it take the per-token driver.
//
// isa must provide, besides what attend_online needs: vec, ivec; lanes, accumulate_unroll;
// zero(), load(p), store(p, v), sub, div, what vector_exp.h needs; load_positions(p); before(s, key, pos):
// s where key <= pos (lane-wise), else -inf; copy(dst, src, n).
#pragma once

#include <math.h>

#include "attention_kernels.h"
#include "attention_online.h"
#include "kv_cursor.h"
#include "vector_exp.h"

namespace troupe::gqa {
namespace {

// Floats between the rows of kc/vc: fixed, so that the L rows are immediate offsets from one base; the
// extra vector staggers the rows over L1 sets.
template <class isa>
constexpr int32_t kv_row_stride = max_tiled_head_dim + isa::lanes;

// Query rows of one pass: row r reads q[r], writes out[r] and sees keys 0..pos[r] (pos ascending).
template <class isa>
struct row_block {
    int32_t n_rows;  // 1..lanes
    const float* q[isa::lanes];
    float* out[isa::lanes];
    int32_t pos[isa::lanes];
};

// s[jj] = sum_d qt[d] * kc[jj][d] for the chunk's keys (one independent accumulator per key).
template <class isa>
inline void chunk_scores(const float* qt, const float* kc, int32_t hd, typename isa::vec* s) {
    constexpr int32_t lanes = isa::lanes;
#pragma GCC unroll 16
    for (int32_t jj = 0; jj < lanes; ++jj) s[jj] = isa::zero();
    for (int32_t d = 0; d < hd; ++d) {
        const typename isa::vec q = isa::load(qt + static_cast<size_t>(d) * lanes);
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) s[jj] = isa::fmadd(q, isa::set1(kc[jj * kv_row_stride<isa> + d]), s[jj]);
    }
}

// acc[d] = acc[d] * c + sum_jj p[jj] * vc[jj][d], accumulate_unroll d at a time (independent FMA chains).
template <class isa>
inline void chunk_accumulate(float* acc, const float* vc, const typename isa::vec* p, typename isa::vec c, int32_t hd) {
    constexpr int32_t lanes = isa::lanes;
    constexpr int32_t unroll = isa::accumulate_unroll;
    int32_t d = 0;
    for (; d + unroll <= hd; d += unroll) {
        typename isa::vec a[unroll];
#pragma GCC unroll 8
        for (int32_t u = 0; u < unroll; ++u) a[u] = isa::mul(isa::load(acc + (d + u) * lanes), c);
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) {
#pragma GCC unroll 8
            for (int32_t u = 0; u < unroll; ++u) {
                a[u] = isa::fmadd(p[jj], isa::set1(vc[jj * kv_row_stride<isa> + d + u]), a[u]);
            }
        }
#pragma GCC unroll 8
        for (int32_t u = 0; u < unroll; ++u) isa::store(acc + (d + u) * lanes, a[u]);
    }
    for (; d < hd; ++d) {
        typename isa::vec a = isa::mul(isa::load(acc + d * lanes), c);
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) a = isa::fmadd(p[jj], isa::set1(vc[jj * kv_row_stride<isa> + d]), a);
        isa::store(acc + d * lanes, a);
    }
}

// Soft-capping of a chunk's scores, lane by lane: s -> cap * tanh(s / cap). Out of line like cap_scores.
template <class isa>
__attribute__((noinline)) void cap_lanes(typename isa::vec* s, float cap) {
    alignas(64) float lane[isa::lanes];
    for (int32_t jj = 0; jj < isa::lanes; ++jj) {
        isa::store(lane, s[jj]);
        for (int32_t r = 0; r < isa::lanes; ++r) lane[r] = cap * tanhf(lane[r] / cap);
        s[jj] = isa::load(lane);
    }
}

// T: the pools' element type (float, or uint16_t halves), converted to float when a chunk is copied out.
template <class isa, class T>
void attend_rows(const troupe_attention_call& call, const int32_t* table, int32_t kv_head, const row_block<isa>& rows) {
    const T* k_pool = reinterpret_cast<const T*>(call.k_pool);
    const T* v_pool = reinterpret_cast<const T*>(call.v_pool);
    using vec = typename isa::vec;
    constexpr int32_t lanes = isa::lanes;
    constexpr int32_t stride = kv_row_stride<isa>;
    const int32_t hd = call.head_dim;
    alignas(64) float qt[max_tiled_head_dim * lanes];   // [head_dim, lanes]
    alignas(64) float acc[max_tiled_head_dim * lanes];  // [head_dim, lanes]
    alignas(64) float kc[lanes * stride];               // [lanes keys, stride]
    alignas(64) float vc[lanes * stride];               // [lanes keys, stride]
    alignas(64) int32_t row_pos[lanes];
    // Lanes past n_rows get a zero query at the first row's position: finite, and never written out.
    for (int32_t r = 0; r < lanes; ++r) row_pos[r] = rows.pos[r < rows.n_rows ? r : 0];
    for (int32_t d = 0; d < hd; ++d) {
        for (int32_t r = 0; r < lanes; ++r) qt[d * lanes + r] = r < rows.n_rows ? rows.q[r][d] * call.scale : 0.0f;
        isa::store(acc + d * lanes, isa::zero());
    }
    const typename isa::ivec vpos = isa::load_positions(row_pos);
    const int32_t first = rows.pos[0];
    const int32_t last = rows.pos[rows.n_rows - 1];
    // A sliding window (attention_kernels.h): keys from the first row's window start on; row r sees keys >=
    // pos[r] - window + 1, masked as -key > -(that start) with the causal mask's compare. The first chunk holds a key
    // of every row's window (the rows' positions are consecutive and fewer than the lanes).
    const int32_t w = call.window;
    const float softcap = call.softcap;
    const int32_t key0 = w > 0 && first - w + 1 > 0 ? first - w + 1 : 0;
    alignas(64) int32_t row_neg_start[lanes];
    for (int32_t r = 0; r < lanes; ++r) row_neg_start[r] = -(row_pos[r] - w + 1);
    const typename isa::ivec vneg_start = isa::load_positions(row_neg_start);
    vec m = isa::set1(-INFINITY);
    vec l = isa::zero();

    kv_cursor cursor = kv_cursor::at(call, table, kv_head, key0);
    size_t off[lanes];  // pool offsets of the next chunk's rows
    int32_t n = last + 1 - key0 < lanes ? last + 1 - key0 : lanes;
    for (int32_t jj = 0; jj < n; ++jj) off[jj] = cursor.next();
    for (int32_t j0 = key0;;) {
        for (int32_t jj = 0; jj < n; ++jj) {
            isa::copy(kc + jj * stride, k_pool + off[jj], hd);
            isa::copy(vc + jj * stride, v_pool + off[jj], hd);
        }
        // Keys past the last row's position: their scores are masked to -inf below, their weights are 0,
        // and their V rows must be finite (0 * NaN is NaN).
        for (int32_t jj = n; jj < lanes; ++jj) {
            for (int32_t d = 0; d < hd; ++d) vc[jj * stride + d] = 0.0f;
        }
        // The next chunk's rows: offsets now, and a prefetch (rows of one kv head are strided, and the
        // blocks scattered: the hardware prefetcher does not follow them).
        const int32_t j1 = j0 + lanes;
        const int32_t n1 = j1 > last ? 0 : (last + 1 - j1 < lanes ? last + 1 - j1 : lanes);
        for (int32_t jj = 0; jj < n1; ++jj) {
            off[jj] = cursor.next();
            for (int32_t d = 0; d < hd; d += 64 / static_cast<int32_t>(sizeof(T))) {
                __builtin_prefetch(k_pool + off[jj] + d);
                __builtin_prefetch(v_pool + off[jj] + d);
            }
        }

        vec s[lanes];
        chunk_scores<isa>(qt, kc, hd, s);
        if (softcap > 0.0f) cap_lanes<isa>(s, softcap);  // Gemma 2: before masking
        if (j0 + lanes - 1 > first) {                    // some key of the chunk is past some row's position
#pragma GCC unroll 16
            for (int32_t jj = 0; jj < lanes; ++jj) s[jj] = isa::before(s[jj], j0 + jj, vpos);
        }
        if (w > 0 && j0 < last - w + 1) {  // some key of the chunk is before some row's window
            for (int32_t jj = 0; jj < lanes; ++jj) s[jj] = isa::before(s[jj], -(j0 + jj), vneg_start);
        }
        vec mx = s[0];
#pragma GCC unroll 16
        for (int32_t jj = 1; jj < lanes; ++jj) mx = isa::max(mx, s[jj]);
        // Every row sees a key of the first chunk (key 0, or its window's first), so m is finite from the first chunk
        // on and m - m_new is never -inf - -inf.
        const vec m_new = isa::max(m, mx);
        const vec c = exp_nonpositive<isa>(isa::sub(m, m_new));
        m = m_new;
        vec sum = isa::zero();
#pragma GCC unroll 16
        for (int32_t jj = 0; jj < lanes; ++jj) {
            s[jj] = exp_nonpositive<isa>(isa::sub(s[jj], m));
            sum = isa::add(sum, s[jj]);
        }
        l = isa::fmadd(l, c, sum);
        chunk_accumulate<isa>(acc, vc, s, c, hd);
        if (n1 == 0) break;
        j0 = j1;
        n = n1;
    }

    alignas(64) float inv_l[lanes];
    isa::store(inv_l, isa::div(isa::set1(1.0f), l));
    for (int32_t r = 0; r < rows.n_rows; ++r) {
        for (int32_t d = 0; d < hd; ++d) rows.out[r][d] = acc[d * lanes + r] * inv_l[r];
    }
}

// Work items [begin, end), item = kv_head * n_tiles + tile index (attention_kernels.h); T as attend_rows.
template <class isa, class T>
void attend_tiles(const troupe_attention_call& call, const query_tile* tiles, int32_t n_tiles, int64_t begin,
                  int64_t end) {
    constexpr int32_t lanes = isa::lanes;
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    for (int64_t item = begin; item < end; ++item) {
        const int32_t kv_head = static_cast<int32_t>(item / n_tiles);
        const query_tile& tile = tiles[item % n_tiles];
        const int32_t n_rows = tile.n_tokens * group;
        if (!fills_lanes(tile, group, hd, lanes)) {  // gqa_forward sends such tiles to attend_groups
            for (int32_t t = tile.first_token; t < tile.first_token + tile.n_tokens; ++t) {
                attend_token<isa, T>(call, t, kv_head, kv_head + 1);
            }
            continue;
        }
        const int32_t* table = call.block_tables[call.seq_of[tile.first_token]];
        // Rows token-major: row i is token first_token + i / group, head kv_head * group + i % group.
        for (int32_t r0 = 0; r0 < n_rows; r0 += lanes) {
            row_block<isa> rows;
            rows.n_rows = n_rows - r0 < lanes ? n_rows - r0 : lanes;
            for (int32_t r = 0; r < rows.n_rows; ++r) {
                const int32_t t = tile.first_token + (r0 + r) / group;
                const size_t head = static_cast<size_t>(t) * call.n_heads + kv_head * group + (r0 + r) % group;
                rows.q[r] = call.q + head * hd;
                rows.out[r] = call.out + head * hd;
                rows.pos[r] = call.positions[t];
            }
            attend_rows<isa, T>(call, table, kv_head, rows);
        }
    }
}

}  // namespace
}  // namespace troupe::gqa
