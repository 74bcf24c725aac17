// Device helpers the backend's kernel files share (cuda_kernels.cu, cuda_attention.cu): warp reductions, KV pool
// reads and writes, a token's cache row through its block table, and the launch grid arithmetic.
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

inline int32_t blocks_for(int64_t n, int32_t per_block) {
    return static_cast<int32_t>((n + per_block - 1) / per_block);
}

}  // namespace troupe::cuda::device
