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

// The online-softmax attention of a tile's tokens over kv head h (kv_driver.h's top comment, step 3). A query row
// masks the rows of the tile's blocks past its own position (causal), as scores of -inf.
inline void attend_tile(const kv_geometry& geometry, const block_codec& codec, const troupe_kv_call& c,
                        const query_tile& tile, int32_t h, const std::vector<int32_t>& last_pos) {
    const block_kernels& kern = codec.kernels;
    const int32_t hd = c.head_dim;
    const int32_t bs = c.block_size;
    const int32_t group = c.n_heads / c.n_kv_heads;
    const int32_t n_q = tile.n_tokens * group;  // query rows: token-major, then the group's heads
    const int32_t s = c.seq_of[tile.tokens[0]];
    const int32_t* table = c.block_tables[s];
    const int32_t p_max = c.positions[tile.tokens[tile.n_tokens - 1]];

    const int32_t n_res = codec.residual_blocks;
    const int32_t first_residual = has_window(codec) ? last_pos[s] / bs - n_res + 1 : INT32_MAX;
    window_view win;
    if (has_window(codec)) win = window_of(geometry, codec, c.window, c.window_slot[s]);
    // Rows of kv head h in the ring entry of block b.
    auto entry = [&](const float* part, int32_t b) {
        return part + (static_cast<size_t>(b % n_res) * c.n_kv_heads + h) * bs * hd;
    };

    float q[max_group * max_head_dim];     // [n_q, head_dim]
    float acc[max_group * max_head_dim];   // [n_q, head_dim]
    float sc[max_group * max_block_size];  // [n_q, bs] scores, then probabilities
    float run_max[max_group];
    float run_sum[max_group];
    int32_t pos[max_group];  // [n_q] each query row's position
    for (int32_t i = 0; i < tile.n_tokens; ++i) {
        const int32_t t = tile.tokens[i];
        std::memcpy(q + static_cast<size_t>(i) * group * hd,
                    c.q + (static_cast<size_t>(t) * c.n_heads + static_cast<size_t>(h) * group) * hd,
                    static_cast<size_t>(group) * hd * sizeof(float));
        for (int32_t g = 0; g < group; ++g) pos[i * group + g] = c.positions[t];
    }
    std::fill(acc, acc + static_cast<size_t>(n_q) * hd, 0.0f);
    std::fill(run_max, run_max + n_q, -INFINITY);
    std::fill(run_sum, run_sum + n_q, 0.0f);

    for (int32_t b = 0; b <= p_max / bs; ++b) {
        const int32_t n_rows = b < p_max / bs ? bs : p_max % bs + 1;
        const uint8_t* block = static_cast<const uint8_t*>(c.pool) + static_cast<size_t>(table[b]) * c.block_bytes;
        const bool in_window = b >= first_residual && win.held[b % n_res] == b + 1;
        if (in_window && codec.window_keys) {
            kern.scores_f32(entry(win.k, b), hd, q, n_q, n_rows, c.scale, sc, bs);
        } else {
            kern.scores(codec.format, block, h, q, n_q, n_rows, c.scale, sc, bs);
        }
        int32_t n_seen[max_group];  // rows of the block at or before each query row's position
        for (int32_t g = 0; g < n_q; ++g) n_seen[g] = std::clamp(pos[g] - b * bs + 1, 0, n_rows);
        kern.softmax(sc, bs, n_q, n_rows, n_seen, run_max, run_sum, acc, hd);
        if (in_window && codec.window_values) {
            kern.accumulate_f32(entry(win.v, b), hd, sc, n_q, n_rows, bs, acc);
        } else {
            kern.accumulate(codec.format, block, h, sc, n_q, n_rows, bs, acc);
        }
    }
    for (int32_t i = 0; i < tile.n_tokens; ++i) {
        const int32_t t = tile.tokens[i];
        float* out = c.out + (static_cast<size_t>(t) * c.n_heads + static_cast<size_t>(h) * group) * hd;
        for (int32_t g = 0; g < group; ++g) {
            const int32_t row = i * group + g;
            const float inv = 1.0f / run_sum[row];
            for (int32_t d = 0; d < hd; ++d)
                out[static_cast<size_t>(g) * hd + d] = acc[static_cast<size_t>(row) * hd + d] * inv;
        }
    }
}

}  // namespace troupe::kv
