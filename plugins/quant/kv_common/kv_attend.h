// The attention of troupe's quantized KV-cache plugins over their blocks and windows (kv_driver.h, step 3): an
// online softmax block by block, through a format's kernels (kv_kernels.h), for a tile of one sequence's tokens.
// The tokens of a sequence in one call have consecutive positions (the runner writes pos0 .. pos0 + n), so every
// row up to the tile's last position has been written.
#pragma once

#include <troupe/kv.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "kv_format.h"
#include "kv_window.h"

namespace troupe::kv {

// A tile: up to max_group / group tokens of one sequence (in position order), whose query rows (tokens x the
// group's heads) go through the kernels together, so each block row is decoded once per tile.
struct query_tile {
    const int32_t* tokens;  // call token indices
    int32_t n_tokens;
};

// Blocks ahead of the one being read whose bytes are prefetched (block_kernels::prefetch).
constexpr int32_t prefetch_blocks = 4;

// Floats of each run's query and accumulator scratch (on the stack): a run of kv heads holds at most this many
// query rows x head_dim, and at most max_run_heads heads.
constexpr int32_t run_floats = max_group * max_head_dim;
constexpr int32_t max_run_heads = 64;

// Kv heads one run can hold for a tile of n_q query rows (at least one: n_q * head_dim <= run_floats).
inline int32_t run_heads(int32_t n_q, int32_t head_dim) {
    return std::clamp(run_floats / (n_q * head_dim), 1, max_run_heads);
}

// The online-softmax attention of a tile's tokens over kv heads [h0, h1) (kv_driver.h's top comment, step 3), in
// one pass over the blocks: each block's rows of those heads are read together, a stretch of the block in address
// order (block: [K of every head][V of every head][metadata]), rather than one head's stretch per block in a pass
// per head, which the hardware prefetcher cannot follow from block to block. A query row masks the rows of the
// tile's blocks past its own position (causal), as scores of -inf.
inline void attend_tile(const kv_geometry& geometry, const block_codec& codec, const troupe_kv_call& c,
                        const query_tile& tile, int32_t h0, int32_t h1, const std::vector<int32_t>& last_pos) {
    const block_kernels& kern = codec.kernels;
    const int32_t hd = c.head_dim;
    const int32_t bs = c.block_size;
    const int32_t group = c.n_heads / c.n_kv_heads;
    const int32_t n_q = tile.n_tokens * group;  // query rows per kv head: token-major, then the group's heads
    const int32_t n_run = h1 - h0;
    const int32_t s = c.seq_of[tile.tokens[0]];
    const int32_t* table = c.block_tables[s];
    const int32_t p_max = c.positions[tile.tokens[tile.n_tokens - 1]];
    const size_t head_floats = static_cast<size_t>(n_q) * hd;

    const int32_t n_res = codec.residual_blocks;
    const int32_t first_residual = has_window(codec) ? last_pos[s] / bs - n_res + 1 : INT32_MAX;
    window_view win;
    if (has_window(codec)) win = window_of(geometry, codec, c.window, c.window_slot[s]);
    // Rows of kv head h in the ring entry of block b.
    auto entry = [&](const float* part, int32_t b, int32_t h) {
        return part + (static_cast<size_t>(b % n_res) * c.n_kv_heads + h) * bs * hd;
    };
    auto block_at = [&](int32_t b) {
        return static_cast<const uint8_t*>(c.pool) + static_cast<size_t>(table[b]) * c.block_bytes;
    };
    auto in_window_at = [&](int32_t b) { return b >= first_residual && win.held[b % n_res] == b + 1; };
    // Head h's bytes of block b: its codes, and its float rows where the window holds the block.
    auto prefetch = [&](int32_t b, int32_t h) {
        if (kern.prefetch) kern.prefetch(codec.format, block_at(b), h);
        if (in_window_at(b)) {
            const size_t bytes = static_cast<size_t>(bs) * hd * sizeof(float);
            if (codec.window_keys) prefetch_bytes(entry(win.k, b, h), bytes);
            if (codec.window_values) prefetch_bytes(entry(win.v, b, h), bytes);
        }
    };

    alignas(64) float q[run_floats];           // [n_run, n_q, head_dim]
    alignas(64) float acc[run_floats];         // [n_run, n_q, head_dim]
    float sc[max_group * max_block_size];      // [n_q, bs] one head's scores, then probabilities
    float run_max[max_run_heads * max_group];  // [n_run, n_q]
    float run_sum[max_run_heads * max_group];
    int32_t pos[max_group];  // [n_q] each query row's position
    for (int32_t h = h0; h < h1; ++h) {
        float* qh = q + (h - h0) * head_floats;
        for (int32_t i = 0; i < tile.n_tokens; ++i) {
            const int32_t t = tile.tokens[i];
            std::memcpy(qh + static_cast<size_t>(i) * group * hd,
                        c.q + (static_cast<size_t>(t) * c.n_heads + static_cast<size_t>(h) * group) * hd,
                        static_cast<size_t>(group) * hd * sizeof(float));
        }
    }
    for (int32_t i = 0; i < tile.n_tokens; ++i) {
        for (int32_t g = 0; g < group; ++g) pos[i * group + g] = c.positions[tile.tokens[i]];
    }
    std::fill(acc, acc + n_run * head_floats, 0.0f);
    std::fill(run_max, run_max + n_run * n_q, -INFINITY);
    std::fill(run_sum, run_sum + n_run * n_q, 0.0f);

    for (int32_t b = 0; b < std::min(prefetch_blocks, p_max / bs + 1); ++b) {
        for (int32_t h = h0; h < h1; ++h) prefetch(b, h);
    }
    for (int32_t b = 0; b <= p_max / bs; ++b) {
        const int32_t n_rows = b < p_max / bs ? bs : p_max % bs + 1;
        const uint8_t* block = block_at(b);
        const bool in_window = in_window_at(b);
        int32_t n_seen[max_group];  // rows of the block at or before each query row's position
        for (int32_t g = 0; g < n_q; ++g) n_seen[g] = std::clamp(pos[g] - b * bs + 1, 0, n_rows);
        for (int32_t h = h0; h < h1; ++h) {
            // Head h's bytes of a block ahead, one head at a time (a block's worth at once overflows the misses the
            // core tracks, and later prefetches are dropped).
            if (b + prefetch_blocks <= p_max / bs) prefetch(b + prefetch_blocks, h);
            const float* qh = q + (h - h0) * head_floats;
            float* acc_h = acc + (h - h0) * head_floats;
            if (in_window && codec.window_keys) {
                kern.scores_f32(entry(win.k, b, h), hd, qh, n_q, n_rows, c.scale, sc, bs);
            } else {
                kern.scores(codec.format, block, h, qh, n_q, n_rows, c.scale, sc, bs);
            }
            kern.softmax(sc, bs, n_q, n_rows, n_seen, run_max + (h - h0) * n_q, run_sum + (h - h0) * n_q, acc_h, hd);
            if (in_window && codec.window_values) {
                kern.accumulate_f32(entry(win.v, b, h), hd, sc, n_q, n_rows, bs, acc_h);
            } else {
                kern.accumulate(codec.format, block, h, sc, n_q, n_rows, bs, acc_h);
            }
        }
    }
    for (int32_t h = h0; h < h1; ++h) {
        const float* acc_h = acc + (h - h0) * head_floats;
        const float* sum_h = run_sum + (h - h0) * n_q;
        for (int32_t i = 0; i < tile.n_tokens; ++i) {
            const int32_t t = tile.tokens[i];
            float* out = c.out + (static_cast<size_t>(t) * c.n_heads + static_cast<size_t>(h) * group) * hd;
            for (int32_t g = 0; g < group; ++g) {
                const int32_t row = i * group + g;
                const float inv = 1.0f / sum_h[row];
                for (int32_t d = 0; d < hd; ++d)
                    out[static_cast<size_t>(g) * hd + d] = acc_h[static_cast<size_t>(row) * hd + d] * inv;
            }
        }
    }
}

}  // namespace troupe::kv
