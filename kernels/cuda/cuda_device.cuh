// Device helpers the backend's kernel files share (cuda_kernels.cu, cuda_attention.cu, cuda_mla.cu): warp reductions,
// KV pool reads and writes, a token's cache row through its block table, the rows it sees, and the launch grid
// arithmetic.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace troupe::cuda::device {

inline constexpr unsigned full_mask = 0xffffffffu;
inline constexpr int warp_size = 32;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = warp_size / 2; o > 0; o /= 2) v += __shfl_xor_sync(full_mask, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = warp_size / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
    return v;
}

__device__ __forceinline__ float load_kv(const float* pool, size_t i) {
    return pool[i];
}
__device__ __forceinline__ float load_kv(const __half* pool, size_t i) {
    return __half2float(pool[i]);
}
__device__ __forceinline__ void store_kv(float* pool, size_t i, float v) {
    pool[i] = v;
}
__device__ __forceinline__ void store_kv(__half* pool, size_t i, float v) {
    pool[i] = __float2half_rn(v);
}

// First element of the cache row of (sequence s, position p).
__device__ __forceinline__ size_t cache_row(const kv_tables& tb, int32_t seq, int32_t pos, int32_t kv_width) {
    const int32_t block = tb.block_tables[tb.block_table_offsets[seq] + pos / tb.block_size];
    return (static_cast<size_t>(block) * tb.block_size + pos % tb.block_size) * kv_width;
}

// Whether token t sees cache row j, for j <= its last row. `first` is the oldest position inside its window (0
// without one). Causal calls: rows are positions, so row j is seen from `first` on. Tree calls: the prefix rows
// (j < mask_base) are positions too; the rows its mask names are its ancestors and itself by depth, the k-th of
// them (ascending) at position mask_base + k (core/model/ops.h), seen when that position is inside the window.
__device__ __forceinline__ bool sees(const kv_tables& tb, int32_t t, int32_t j, int32_t first) {
    if (tb.rows == nullptr) return j >= first;
    const int32_t base = tb.mask_base[t];
    if (j < base) return j >= first;
    const int32_t bit = j - base;
    if (bit >= 64 * tb.mask_words) return false;
    const uint64_t* words = tb.mask + static_cast<size_t>(t) * tb.mask_words;
    if (((words[bit / 64] >> (bit % 64)) & 1u) == 0) return false;
    if (first <= base) return true;  // every masked row's position (>= mask_base) is inside the window
    int32_t rank = 0;                // masked rows below j
    for (int32_t w = 0; w < bit / 64; ++w) rank += __popcll(words[w]);
    if (bit % 64 != 0) rank += __popcll(words[bit / 64] & ((uint64_t{1} << (bit % 64)) - 1));
    return base + rank >= first;
}

// The highest cache row token t sees: its position, or in a tree call the last of its prefix and mask.
__device__ __forceinline__ int32_t last_row(const kv_tables& tb, int32_t t) {
    if (tb.rows == nullptr) return tb.positions[t];
    for (int32_t w = tb.mask_words - 1; w >= 0; --w) {
        const uint64_t bits = tb.mask[static_cast<size_t>(t) * tb.mask_words + w];
        if (bits != 0) return tb.mask_base[t] + 64 * w + 63 - __clzll(static_cast<long long>(bits));
    }
    return tb.mask_base[t] - 1;
}

inline int32_t blocks_for(int64_t n, int32_t per_block) {
    return static_cast<int32_t>((n + per_block - 1) / per_block);
}

}  // namespace troupe::cuda::device
