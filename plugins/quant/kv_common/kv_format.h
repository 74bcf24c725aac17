// What a quantized KV-cache format gives the shared driver (kv_driver.h): its scalar block writes and, per
// kernel choice (scalar or AVX-512), the per-block attention kernels that read its codes directly.
//
// Every format stores a layer's block as bytes, kv head-major, so one kv head's rows of a block are contiguous:
//
//   block: [codes and per-token scales of K and V: n_kv_heads x block_size rows][per-block metadata]
//
// and may keep the newest tokens of each sequence in float in the sequence's window slot until their block fills
// (`window_keys`, `window_values`; kv_driver.h describes the window and when a block is read from it).
//
// The kernels work on one kv head h of one block and the `group` query heads that share it (GQA): scores for rows
// [0, n_rows), and the probability-weighted sum of those rows' values added into an accumulator. They never
// dequantize a block into memory: codes become floats in registers (or the scales are applied after an integer
// dot product).
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::kv {

// Limits of the kernels' scratch (on the stack of each work item).
constexpr int32_t max_head_dim = 256;
constexpr int32_t max_group = 32;
constexpr int32_t max_block_size = 256;
constexpr int32_t max_residual_blocks = 64;  // blocks a window keeps in float

// The geometry every format is made for (from troupe_kv_shape).
struct kv_geometry {
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 0;
};

struct block_kernels {
    // s[g * s_stride + r] = scale * (q_g . k_r), g in [0, group), r in [0, n_rows); q: [group, head_dim].
    void (*scores)(const void* format, const uint8_t* block, int32_t h, const float* q, int32_t group, int32_t n_rows,
                   float scale, float* s, int32_t s_stride);
    // acc[g * head_dim + c] += sum_r p[g * p_stride + r] * v_r[c]; acc: [group, head_dim].
    void (*accumulate)(const void* format, const uint8_t* block, int32_t h, const float* p, int32_t group,
                       int32_t n_rows, int32_t p_stride, float* acc);
    // The same over float rows (a window): row r at rows + r * head_dim.
    void (*scores_f32)(const float* rows, int32_t head_dim, const float* q, int32_t group, int32_t n_rows, float scale,
                       float* s, int32_t s_stride);
    void (*accumulate_f32)(const float* rows, int32_t head_dim, const float* p, int32_t group, int32_t n_rows,
                           int32_t p_stride, float* acc);
    // The online softmax's step over one block: for query row g (scores at s + g * s_stride), rows [0, n_seen[g])
    // count and later ones get probability 0; the scores become exp(score - new max), run_max / run_sum [group]
    // move to the new max and acc's row g [head_dim] is rescaled to it.
    void (*softmax)(float* s, int32_t s_stride, int32_t group, int32_t n_rows, const int32_t* n_seen, float* run_max,
                    float* run_sum, float* acc, int32_t head_dim);
    // Asks the cache for the bytes of kv head h of a block the attention reads next (null: none). A head's bytes
    // are a few stretches in a block of every head's, blocks scattered in the pool, an order the hardware
    // prefetcher does not follow: without it a decode step waits on memory at every block.
    void (*prefetch)(const void* format, const uint8_t* block, int32_t h) = nullptr;
};

// Prefetches n bytes from p into the caches (a hint: no fault, no effect on results).
inline void prefetch_bytes(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    for (size_t i = 0; i < n; i += 64) __builtin_prefetch(c + i);
}

// The scalar write side of a format (not a hot path: a token is written once per layer).
struct block_codec {
    const void* format = nullptr;  // the format's constants, passed back to every function
    bool window_keys = false;      // keys of a sequence's open block wait in its window, in float
    bool window_values = false;    // values likewise
    // Blocks kept in float per sequence: the newest residual_blocks blocks (the open one and those before it) are
    // read from the window; older ones from their codes.
    int32_t residual_blocks = 1;
    // Writes kv head h of the token at `row` of `block`: into the block (quantized) or the window rows
    // (win_k / win_v: this head's [block_size, head_dim] floats, null when the format keeps no window for them).
    void (*write)(const void* format, uint8_t* block, float* win_k, float* win_v, int32_t h, int32_t row,
                  const float* k, const float* v) = nullptr;
    // The block is full: quantizes kv head h's window rows into it.
    void (*close)(const void* format, uint8_t* block, const float* win_k, const float* win_v, int32_t h) = nullptr;
    // Reopens a full block (a sequence rewrites a position inside it): rows [0, n_rows) of kv head h back into
    // the window, dequantized.
    void (*reload)(const void* format, const uint8_t* block, float* win_k, float* win_v, int32_t h,
                   int32_t n_rows) = nullptr;
    block_kernels kernels{};
};

}  // namespace troupe::kv
