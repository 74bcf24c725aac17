// linear: y = x · Wᵀ + b over a batch of rows, and its backward.
//
//   forward:   y[n, out] = x[n, in] · W[out, in]ᵀ + b[out]          (b optional)
//   backward:  dx[n, in] += dy[n, out] · W                           (dx optional: inputs that need none)
//              dW[out, in] += dyᵀ · x,   db[out] += Σ_rows dy
// Backward accumulates (param.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace troupe::train {

void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in, int64_t out,
                    cpu::thread_pool& pool);
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, int64_t n,
                     int64_t in, int64_t out, cpu::thread_pool& pool);

}  // namespace troupe::train
