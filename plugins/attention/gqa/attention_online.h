// One-pass (online softmax) attention driver for single tokens (decode steps, and the tokens of tiles too
// small for the tiled driver, attention_tiled.h). Instantiated once per instruction set by the file that
// includes it (attention_avx2.cpp, attention_avx512.cpp) with that set's vector helpers. Everything here has
// internal linkage and uses no library templates (no std::vector): a copy built with AVX-512 flags must never
// be merged at link time with the copy other CPUs run.
//
// Per query row (a query head of the token), over its keys j (positions 0..pos; in a tree call the rows
// attention_kernels.h lists) in chunks of 16:  s_j = scale * q . k_j
//   m = max so far, l = sum of exp(s - m), acc = sum of exp(s - m) * v_j; when a chunk raises the max the
//   running l and acc are rescaled once by exp(m_old - m_new); the chunk's 16 exponentials are taken
//   together (one vector exp where the instruction set has one). out = acc / l.
//
// Memory order. Work items are (token group, kv head), group-major (attend_groups; a group is one token, or the tokens
// of one sequence that share a prefix: token_groups.h); a thread's consecutive items of one group form a run of kv
// heads [h0, h1), done in ONE pass over the positions for all of the group's tokens. A position's K (and V) row of
// those heads is one contiguous stretch of the pool ([.., n_kv_heads, head_dim] per position), so the pass streams (h1
// - h0)
// * head_dim floats per position in address order, which the hardware prefetcher follows; a pass per kv head would read
// head_dim floats every n_kv_heads * head_dim, a stride it serves far more slowly. Runs are cut to rows_per_pass query
// rows (kv heads x GQA group) so the accumulators stay in L1.
#pragma once

#include <math.h>

#include "attention_kernels.h"
#include "plugins/common/prefetch.h"

namespace troupe::gqa {
namespace {

// isa must provide: max_of(s, n), sum_of(s, n) over a chunk's n scores; dots(q, rows, hd, scale, s): s[jj] =
// scale * q . rows[jj] for a chunk's 16 rows, and accumulate(acc, w, rows, n, hd): acc += sum_{jj < n} w[jj] *
// rows[jj] (rows of the pools' element type T: float, or uint16_t halves); scale(out, acc, f, n): out = f * acc (out
// may be acc); exp_shifted(s, n, m): s[i] = exp(s[i] - m) for i < n (n <= chunk). For GQA groups whose rows fill whole
// vectors, isa::row_lanes > 0 and its kernels float_rows, lane_scores, lane_softmax and lane_accumulate
// (attend_rows_in_lanes); 0 where the set has none.
constexpr int32_t chunk = 16;
constexpr int32_t acc_floats = 16 * 1024;  // accumulator scratch: rows x head_dim <= this
// Smallest GQA group the whole-head kernels take. At group 2 (8 heads, 4 kv heads, F16, one thread) they are slower
// with the context in cache (0.21 against 0.16 ms at 4096 keys) and faster from DRAM (3.9 against 6.1 ms at 65536),
// which is where a long context's KV is.
constexpr int32_t head_kernel_group = 2;

// Query rows one pass can hold for this head_dim (at least one row: head_dim <= max_head_dim).
inline int32_t pass_rows(int32_t hd) {
    const int32_t by_scratch = acc_floats / hd;
    return by_scratch < rows_per_pass ? by_scratch : rows_per_pass;
}

// Soft-capping of rows [0, n_rows) of scores (row stride `stride`), n each: s -> cap * tanh(s / cap). Out of line, so
// that the uncapped kernels' loops keep their registers (a call inside them measured ~10% slower at short contexts).
__attribute__((noinline)) void cap_scores(float* scores, int32_t stride, int32_t n_rows, int32_t n, float cap) {
    for (int32_t r = 0; r < n_rows; ++r) {
        for (int32_t j = 0; j < n; ++j) scores[r * stride + j] = cap * tanhf(scores[r * stride + j] / cap);
    }
}

// Offset in elements of the first kv head's row of successive positions, walking the block table without a
// division per position.
struct position_cursor {
    const int32_t* table;
    int32_t block_size;
    size_t row_elements;  // n_kv_heads * head_dim
    int32_t entry = 0;
    int32_t row = 0;

    size_t next() {
        const size_t at = (static_cast<size_t>(table[entry]) * block_size + row) * row_elements;
        if (++row == block_size) {
            row = 0;
            ++entry;
        }
        return at;
    }
};

// The same for a tree call's token (attention_kernels.h): rows 0..n_prefix-1, then its extra rows. A type of its
// own so that causal tokens (decode) keep the plain cursor: the extra branch per key cost ~10% of MHA decode.
struct tree_cursor {
    position_cursor prefix;
    int32_t n_prefix;
    const int32_t* extra;  // [keys - n_prefix]
    int32_t i = 0;         // keys handed out

    size_t next() {
        if (i < n_prefix) {
            ++i;
            return prefix.next();
        }
        const int32_t r = extra[i++ - n_prefix];
        const int32_t bs = prefix.block_size;
        return (static_cast<size_t>(prefix.table[r / bs]) * bs + r % bs) * prefix.row_elements;
    }
};

// Where attend_rows puts its rows' results: out rows [n_rows, head_dim] (normalized: acc / l) and, for a part of
// a split key range (key_split.h), each row's running max and sum (null otherwise).
struct rows_out {
    float* out;
    float* m;  // [n_rows] or null
    float* l;  // [n_rows] or null
};

// One chunk's online-softmax step for rows [0, n_rows): where a row's max rises its sum and accumulator are rescaled
// once, then its n scores become weights exp(s - m) and are added to its sum.
template <class isa>
inline void chunk_softmax(float (*sc)[chunk], int32_t n_rows, int32_t n, float* m, float* l, float* acc, int32_t hd) {
    for (int32_t r = 0; r < n_rows; ++r) {
        const float cm = isa::max_of(sc[r], n);
        if (cm > m[r]) {
            const float c = expf(m[r] - cm);  // 0 on the first chunk (m = -inf)
            float* a = acc + static_cast<size_t>(r) * hd;
            isa::scale(a, a, c, hd);
            l[r] *= c;
            m[r] = cm;
        }
        isa::exp_shifted(sc[r], n, m[r]);
        l[r] += isa::sum_of(sc[r], n);  // one vector reduction: a 16-long chain of scalar adds per row cost ~12% of a
                                        // long decode's attention
    }
}

// The pass's rows out: acc / l, and each row's max and sum for a part of a split key range.
template <class isa>
inline void finish_rows(rows_out dst, const float* acc, const float* m, const float* l, int32_t n_rows, int32_t hd) {
    for (int32_t r = 0; r < n_rows; ++r) {
        isa::scale(dst.out + static_cast<size_t>(r) * hd, acc + static_cast<size_t>(r) * hd, 1.0f / l[r], hd);
        if (dst.m != nullptr) {
            dst.m[r] = m[r];
            dst.l[r] = l[r];
        }
    }
}

// A chunk's rows of kv head h (T: the pools' element type): rows[jj] for jj >= n repeat row 0, so that isa::dots can
// take a whole chunk (those lanes' scores are never read).
template <class T>
inline void chunk_rows(const T* pool, const size_t* offsets, int32_t n, size_t head_off, const T** rows) {
    for (int32_t jj = 0; jj < n; ++jj) rows[jj] = pool + offsets[jj] + head_off;
    for (int32_t jj = n; jj < chunk; ++jj) rows[jj] = rows[0];
}

// The next chunk's K and V rows over a pass's heads (bytes [span_begin, span_begin + span_bytes) of each row) into the
// caches at once: the prefetch of the kernels that are not whole-head ones (those spread theirs over the chunk's
// steps, prefetch_chunk_slice). prefetcht1 through plugin_support::prefetch_l2: in a function of its own GCC deleted
// this loop when it was written with __builtin_prefetch.
template <class T>
inline void prefetch_chunk_spans(const T* k_pool, const T* v_pool, const size_t* ahead_offsets, int32_t n_ahead,
                                 size_t span_begin, size_t span_bytes) {
    for (int32_t jj = 0; jj < n_ahead; ++jj) {
        const size_t p = ahead_offsets[jj] + span_begin;
        for (size_t b = 0; b < span_bytes; b += 64) {
            plugin_support::prefetch_l2(reinterpret_cast<const char*>(k_pool + p) + b);
            plugin_support::prefetch_l2(reinterpret_cast<const char*>(v_pool + p) + b);
        }
    }
}

// Slice `step` of `n_steps` of the next chunk's rows over a pass's heads (bytes [span_begin, span_begin + span_bytes)
// of each of the n_ahead rows at ahead_offsets), requested in address order: the by_head kernels' prefetch. Their K and
// V work goes a kv head at a time, so each step prefetching its own head's rows (a 256-byte stretch every 1 KiB on the
// 1B shape) read from DRAM at ~20 GB/s per core, and the hardware prefetcher could not follow; the whole stretch in
// address order, spread over the chunk's steps, feeds it a plain stream. Zen 5, 1B shape, 65536 keys from DRAM, one
// thread (bench_verify_attention 65536 1 32 4 1 f32|f16, alternated with the per-head prefetch): F32 8.2-9.9 against
// 10.4-11.3 ms (AVX2 kernels 10.7-10.9 against 12.6-13.5), F16 6.4-6.7 against 6.8-7.0. F32 rows go to L1
// (prefetcht0; into L2 only: 8.8-9.7 ms), F16 rows to L2 (prefetcht0: 8.7 ms): a half row is converted before use, so
// its lines wait longer and L1 ones were evicted first. Every line is requested: every second one, or none (the
// hardware prefetcher alone), measured 1.5x and 1.7x slower.
template <class T>
inline void prefetch_chunk_slice(const T* pool, const size_t* ahead_offsets, int32_t n_ahead, size_t span_begin,
                                 size_t span_bytes, int32_t step, int32_t n_steps) {
    const size_t lines_per_row = (span_bytes + 63) / 64;
    const size_t n_lines = lines_per_row * static_cast<size_t>(n_ahead);
    const size_t first = n_lines * step / n_steps, last = n_lines * (step + 1) / n_steps;
    size_t jj = first / lines_per_row, line = first % lines_per_row;
    for (size_t i = first; i < last; ++i) {
        const char* p = reinterpret_cast<const char*>(pool + ahead_offsets[jj] + span_begin) + 64 * line;
        if constexpr (sizeof(T) == sizeof(float)) {
            plugin_support::prefetch_l1(p);
        } else {
            plugin_support::prefetch_l2(p);
        }
        if (++line == lines_per_row) line = 0, ++jj;
    }
}

// The query rows of kv head h within a pass of rows [r0, r0 + n_rows), as [begin, end) relative to r0.
struct head_rows {
    int32_t begin, end;
    head_rows(int32_t h, int32_t group, int32_t r0, int32_t n_rows)
        : begin((h * group > r0 ? h * group : r0) - r0),
          end(((h + 1) * group < r0 + n_rows ? (h + 1) * group : r0 + n_rows) - r0) {}
};

// A pass's keys chunk by chunk: each chunk's row offsets, and the next chunk's, whose rows the whole-head kernels
// prefetch while this one's are computed.
template <class cursor>
struct chunk_walk {
    cursor at;
    cursor ahead;
    int32_t n_keys;
    size_t offsets[chunk];        // this chunk's rows
    size_t ahead_offsets[chunk];  // the next chunk's
    int32_t n_ahead = 0;

    chunk_walk(cursor keys, int32_t n) : at(keys), ahead(keys), n_keys(n) {
        for (int32_t j = 0; j < chunk && j < n; ++j) (void)ahead.next();
    }
    // Moves to the chunk that starts at key j0; returns its number of keys.
    int32_t load(int32_t j0) {
        const int32_t n = n_keys - j0 < chunk ? n_keys - j0 : chunk;
        n_ahead = 0;
        for (int32_t jj = 0; jj < n; ++jj) {
            offsets[jj] = at.next();
            if (j0 + chunk + jj < n_keys) ahead_offsets[n_ahead++] = ahead.next();
        }
        return n;
    }
};

// attend_rows's whole-head path with a kv head's query rows in vector lanes, isa::row_lanes (L) rows per
// vector, for GQA groups that are whole multiples of L (8 on AVX2: the 1B shape's 32 heads over 4 kv heads). Each
// key's element is broadcast against the lanes' query elements (q transposed once per pass, [hd][L] per block of L
// rows), so K is read as it lies in the pool and never transposed, and the softmax runs down the lanes: one vector
// per key for the max, the exponentials and the sums. Every score, weight and sum is the float the whole-head
// kernels compute (the same products added in the same order, the same exponential, each row's sum kept per key lane
// and reduced by isa::sum_of), so the output is theirs bit for bit. Layouts: p[block][key][lane] and lsum likewise.
template <class isa, class T, class cursor>
void attend_rows_in_lanes(const troupe_attention_call& call, int64_t t, int32_t r0, int32_t n_rows, float* acc,
                          cursor at, int32_t n_keys, rows_out dst) {
    constexpr int32_t L = isa::row_lanes;
    constexpr int32_t max_blocks = rows_per_pass / L;
    const T* k_pool = reinterpret_cast<const T*>(call.k_pool);
    const T* v_pool = reinterpret_cast<const T*>(call.v_pool);
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    const int32_t n_blocks = n_rows / L;
    const int32_t h_first = r0 / group;
    const int32_t h_last = (r0 + n_rows - 1) / group;
    const size_t span_begin = static_cast<size_t>(h_first) * hd;  // the stretch of a row the pass reads
    const size_t span_bytes = static_cast<size_t>(h_last - h_first + 1) * hd * sizeof(T);
    const float* q = call.q + (static_cast<size_t>(t) * call.n_heads + r0) * hd;
    const float softcap = call.softcap;
    alignas(64) float qt[acc_floats];              // [block][hd][L]: n_rows x hd <= acc_floats (pass_rows)
    alignas(64) float p[max_blocks][chunk][L];     // the chunk's scores, then their weights
    alignas(64) float lsum[max_blocks][chunk][L];  // each row's sum, per key lane
    alignas(64) float m[rows_per_pass];            // each row's running max
    alignas(64) float kf[isa::template converts_rows<T> ? chunk * max_head_dim : 1];  // a half pool's K rows, as floats
    for (int32_t b = 0; b < n_blocks; ++b) {
        for (int32_t d = 0; d < hd; ++d) {
            for (int32_t i = 0; i < L; ++i) qt[(static_cast<size_t>(b) * hd + d) * L + i] = q[(b * L + i) * hd + d];
        }
    }
    for (int32_t r = 0; r < n_rows; ++r) m[r] = -INFINITY;
    for (int32_t b = 0; b < n_blocks; ++b) {
        for (int32_t jj = 0; jj < chunk; ++jj) {
            for (int32_t i = 0; i < L; ++i) lsum[b][jj][i] = 0.0f;
        }
    }
    for (int32_t i = 0; i < n_rows * hd; ++i) acc[i] = 0.0f;
    chunk_walk<cursor> walk(at, n_keys);
    const size_t* offsets = walk.offsets;
    const size_t* ahead_offsets = walk.ahead_offsets;
    const T* rows[chunk];
    const float* k_rows[chunk];
    for (int32_t j0 = 0; j0 < n_keys; j0 += chunk) {
        const int32_t n = walk.load(j0);
        const int32_t n_ahead = walk.n_ahead;
        // Scores, block by block; a kv head's rows (and their prefetches) fetched once for its blocks.
        int32_t h_rows = -1;
        for (int32_t b = 0; b < n_blocks; ++b) {
            const int32_t h = (r0 + b * L) / group;
            if (h != h_rows) {
                chunk_rows(k_pool, offsets, n, static_cast<size_t>(h) * hd, rows);
                prefetch_chunk_slice(k_pool, ahead_offsets, n_ahead, span_begin, span_bytes, h - h_first,
                                     h_last - h_first + 1);
                isa::float_rows(rows, n, hd, kf, k_rows);
                h_rows = h;
            }
            isa::lane_scores(qt + static_cast<size_t>(b) * hd * L, k_rows, n, hd, call.scale, p[b]);
        }
        if (softcap > 0.0f) {  // Gemma 2: before the max
            for (int32_t b = 0; b < n_blocks; ++b) cap_scores(p[b][0], L, n, L, softcap);
        }
        isa::lane_softmax(p, n_blocks, n, m, lsum, acc, hd);
        h_rows = -1;
        for (int32_t b = 0; b < n_blocks; ++b) {
            const int32_t h = (r0 + b * L) / group;
            if (h != h_rows) {
                chunk_rows(v_pool, offsets, n, static_cast<size_t>(h) * hd, rows);
                prefetch_chunk_slice(v_pool, ahead_offsets, n_ahead, span_begin, span_bytes, h - h_first,
                                     h_last - h_first + 1);
                h_rows = h;
            }
            isa::lane_accumulate(acc + static_cast<size_t>(b) * L * hd, p[b], rows, n, hd);
        }
    }
    float l[rows_per_pass];
    for (int32_t b = 0; b < n_blocks; ++b) {
        for (int32_t i = 0; i < L; ++i) {
            alignas(64) float row_sum[chunk];
            for (int32_t jj = 0; jj < chunk; ++jj) row_sum[jj] = lsum[b][jj][i];
            l[b * L + i] = isa::sum_of(row_sum, chunk);
        }
    }
    finish_rows<isa>(dst, acc, m, l, n_rows, hd);
}

// Whether a pass takes the whole-head kernels (isa::head_kernels: a GQA group's rows against a chunk's K transposed).
inline bool whole_heads(const troupe_attention_call& call) {
    return call.n_heads / call.n_kv_heads >= head_kernel_group && call.head_dim % chunk == 0;
}

// Whether attend_rows takes a pass of rows r0.. (n_rows) in vector lanes (attend_rows_in_lanes).
template <class isa>
bool rows_in_lanes(const troupe_attention_call& call, int32_t r0, int32_t n_rows) {
    if constexpr (isa::row_lanes > 0) {
        constexpr int32_t L = isa::row_lanes;
        const int32_t group = call.n_heads / call.n_kv_heads;
        return whole_heads(call) && group % L == 0 && r0 % L == 0 && n_rows % L == 0;
    }
    return false;
}

// Query rows [r0, r0 + n_rows) of token t, one pass over the n_keys keys that `at` walks: attention_shared.h pass_keys'
// loop for one token, kept as its own function because the decode step runs it (routed through pass_keys, whose state
// lives in a pass_state, a decode's attention measured ~5% slower: bench_verify_attention 4096 1 32 4 1 and 2048 1 12
// 12 1, min of 8 alternated runs, 0.519 -> 0.545 ms and 0.249 -> 0.265). A row's operations are pass_keys' exactly (the
// batch-invariance test compares the two bit for bit).
template <class isa, class T, class cursor>
void attend_rows(const troupe_attention_call& call, int64_t t, int32_t r0, int32_t n_rows, float* acc, cursor at,
                 int32_t n_keys, rows_out dst) {
    const T* k_pool = reinterpret_cast<const T*>(call.k_pool);
    const T* v_pool = reinterpret_cast<const T*>(call.v_pool);
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    const bool by_head = group >= head_kernel_group && hd % chunk == 0;
    if constexpr (isa::row_lanes > 0) {
        constexpr int32_t L = isa::row_lanes;
        if (by_head && group % L == 0 && r0 % L == 0 && n_rows % L == 0) {
            return attend_rows_in_lanes<isa, T>(call, t, r0, n_rows, acc, at, n_keys, dst);
        }
    }
    const int32_t h_first = r0 / group;
    const int32_t h_last = (r0 + n_rows - 1) / group;
    // The stretch of a position's row this pass reads, for the prefetches.
    const size_t span_begin = static_cast<size_t>(h_first) * hd;
    const size_t span_bytes = static_cast<size_t>(h_last - h_first + 1) * hd * sizeof(T);
    const float* q = call.q + (static_cast<size_t>(t) * call.n_heads + r0) * hd;
    const float softcap = call.softcap;
    float m[rows_per_pass];
    float l[rows_per_pass];
    alignas(64) float sc[rows_per_pass][chunk];  // this chunk's scores, then their weights
    for (int32_t r = 0; r < n_rows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int32_t i = 0; i < n_rows * hd; ++i) acc[i] = 0.0f;
    // Prefetches run one chunk ahead: the next chunk's rows are requested while this one's are computed.
    chunk_walk<cursor> walk(at, n_keys);
    const size_t* offsets = walk.offsets;
    const size_t* ahead_offsets = walk.ahead_offsets;
    const T* rows[chunk];
    // Where the instruction set has them, whole-head kernels (isa::head_kernels) for a GQA group's query rows: the
    // chunk's K transposed once and shared by the group's rows, scores in vectors, the softmax's sums kept in lanes.
    // 1B shape (32 heads, 4 kv heads, head_dim 64), F16 pools, one thread (bench_verify_attention 4096|65536 1 32 4 1
    // f16): 0.31 against 0.66 ms at 4096 keys (in cache), 6.4 against 12.7 ms at 65536 (from DRAM).
    alignas(64) float kt[isa::head_kernels ? max_head_dim * chunk : 1];    // [head_dim][chunk] K, transposed
    alignas(64) float lsum[isa::head_kernels ? rows_per_pass : 1][chunk];  // by_head: each row's sum, in lanes
    if constexpr (isa::head_kernels) {
        for (int32_t r = 0; r < n_rows; ++r) {
            for (int32_t i = 0; i < chunk; ++i) lsum[r][i] = 0.0f;
        }
    }
    for (int32_t j0 = 0; j0 < n_keys; j0 += chunk) {
        const int32_t n = walk.load(j0);
        const int32_t n_ahead = walk.n_ahead;  // the next chunk's keys, whose rows are prefetched
        // The by_head kernels prefetch a slice of the next chunk's rows with each kv head's work on this one, so that
        // the requests are spread over the chunk (a burst of every row of the next chunk stalled once the miss buffers
        // were full) and still come in address order (prefetch_chunk_slice).
        if (!by_head) prefetch_chunk_spans(k_pool, v_pool, ahead_offsets, n_ahead, span_begin, span_bytes);

        // Scores a kv head at a time: each of its query rows' n dot products together (dots: one reduction for the
        // chunk, not one per key).
        for (int32_t h = h_first; h <= h_last; ++h) {
            const auto [rb, re] = head_rows(h, group, r0, n_rows);
            chunk_rows(k_pool, offsets, n, static_cast<size_t>(h) * hd, rows);
            if constexpr (isa::head_kernels) {
                if (by_head) {
                    prefetch_chunk_slice(k_pool, ahead_offsets, n_ahead, span_begin, span_bytes, h - h_first,
                                         h_last - h_first + 1);
                    isa::chunk_scores(rows, q + static_cast<size_t>(rb) * hd, re - rb, kt, hd, call.scale, sc + rb);
                    continue;
                }
            }
            for (int32_t r = rb; r < re; ++r) isa::dots(q + static_cast<size_t>(r) * hd, rows, hd, call.scale, sc[r]);
        }
        if (softcap > 0.0f) cap_scores(sc[0], chunk, n_rows, n, softcap);  // Gemma 2: before the max
        if constexpr (isa::head_kernels) {
            if (by_head) {
                isa::head_softmax(sc, n_rows, n, m, lsum, acc, hd);
            } else {
                chunk_softmax<isa>(sc, n_rows, n, m, l, acc, hd);
            }
        } else {
            chunk_softmax<isa>(sc, n_rows, n, m, l, acc, hd);
        }
        for (int32_t h = h_first; h <= h_last; ++h) {
            const auto [rb, re] = head_rows(h, group, r0, n_rows);
            chunk_rows(v_pool, offsets, n, static_cast<size_t>(h) * hd, rows);
            if constexpr (isa::head_kernels) {
                if (by_head) {
                    prefetch_chunk_slice(v_pool, ahead_offsets, n_ahead, span_begin, span_bytes, h - h_first,
                                         h_last - h_first + 1);
                    isa::head_accumulate(acc + static_cast<size_t>(rb) * hd, re - rb, sc + rb, rows, n, hd);
                    continue;
                }
            }
            for (int32_t r = rb; r < re; ++r) isa::accumulate(acc + static_cast<size_t>(r) * hd, sc[r], rows, n, hd);
        }
    }
    if constexpr (isa::head_kernels) {
        if (by_head) {
            for (int32_t r = 0; r < n_rows; ++r) l[r] = isa::sum_of(lsum[r], chunk);
        }
    }
    finish_rows<isa>(dst, acc, m, l, n_rows, hd);
}

// Token t's query heads of kv heads [h0, h1), in passes of up to pass_rows(head_dim) query rows.
template <class isa, class T>
void attend_token(const troupe_attention_call& call, int32_t t, int32_t h0, int32_t h1) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t max_rows = pass_rows(call.head_dim);
    alignas(64) float acc[acc_floats];  // [rows, head_dim]
    // The keys: prefix rows first_key.. (a sliding window's start), then the extra rows inside the window.
    const int32_t first = first_key(call, t);
    const position_cursor rows{call.block_tables[call.seq_of[t]], call.block_size,
                               static_cast<size_t>(call.n_kv_heads) * call.head_dim, first / call.block_size,
                               first % call.block_size};
    int32_t all_extra[max_extra_rows];
    const int32_t skip = skipped_extra(call, t);
    const int32_t* extra = all_extra + skip;
    const int32_t n_prefix = prefix_rows(call, t) - first;
    const int32_t n_extra = extra_rows(call, t, all_extra) - skip;
    for (int32_t r0 = h0 * group; r0 < h1 * group; r0 += max_rows) {
        const int32_t n_rows = h1 * group - r0 < max_rows ? h1 * group - r0 : max_rows;
        const rows_out dst{call.out + (static_cast<size_t>(t) * call.n_heads + r0) * call.head_dim, nullptr, nullptr};
        if (n_extra == 0) {
            attend_rows<isa, T>(call, t, r0, n_rows, acc, rows, n_prefix, dst);
        } else {
            attend_rows<isa, T>(call, t, r0, n_rows, acc, tree_cursor{rows, n_prefix, extra}, n_prefix + n_extra, dst);
        }
    }
}

// Keys [k0, k0 + n_keys) of token t's split (the part's rows, all query heads) in passes of pass_rows, through `keys`.
template <class isa, class T, class cursor>
void attend_part(const troupe_attention_call& call, int32_t t, cursor keys, int32_t n_keys, float* out, float* m,
                 float* l, float* acc) {
    const int32_t max_rows = pass_rows(call.head_dim);
    for (int32_t r0 = 0; r0 < call.n_heads; r0 += max_rows) {
        const int32_t n_rows = call.n_heads - r0 < max_rows ? call.n_heads - r0 : max_rows;
        const rows_out dst{out + static_cast<size_t>(r0) * call.head_dim, m + r0, l + r0};
        attend_rows<isa, T>(call, t, r0, n_rows, acc, keys, n_keys, dst);
    }
}

}  // namespace
}  // namespace troupe::gqa
