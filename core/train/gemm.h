// gemm: the float32 matrix products of core/train, on the CPU kernels (kernels/cpu/matmul.h, F32 weights: the
// register-blocked GEMM on AVX-512 / AVX2, split over the pool's threads), plus the transposes the backward
// products need.
//
//   gemm_nt:  c[m, n]  = a[m, k] · b[n, k]ᵀ          (b is the "weight": rows of length k)
//   gemm_nt_acc: c[m, n] += a[m, k] · b[n, k]ᵀ
//   transpose: out[cols, rows] = in[rows, cols]ᵀ
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

void gemm_nt(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, cpu::thread_pool& pool);
// Through a scratch buffer: c may hold earlier sums.
void gemm_nt_acc(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, cpu::thread_pool& pool);
// With a pool, split over its threads by bands of rows.
void transpose(const float* in, float* out, int64_t rows, int64_t cols, cpu::thread_pool* pool = nullptr);

}  // namespace troupe::train
