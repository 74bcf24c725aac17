// Float32 building blocks of the speculative heads (spec/medusa, spec/eagle), SDK-only: a matrix product over the
// host's workers, RMS norm, SiLU, softmax and top-k. Weights are row-major [n_out][n_in] as GGUF stores a matrix of
// ggml shape [n_in, n_out].
//
//   matmul:  y[n, out] = x[n, in] · W^T (+ b)      rows of W are split over the threads (each streams its rows once
//                                                 and applies them to all n inputs)
#pragma once

#include <troupe/plugin.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace troupe::spec_common {

// Σ a[i] b[i], with AVX2/FMA where the CPU has it (chosen at run time; the build stays portable).
float dot(const float* a, const float* b, int64_t n);

// y[n, out] = x[n, in] · W^T + b (b may be null). Returns a status (an exception on a worker is reported).
int32_t matmul(const troupe_parallel* parallel, const float* x, int64_t n, const float* w, const float* b, float* y,
               int64_t in, int64_t out);

// y[n, dim] = x / rms(x) * weight, row by row (y may be x).
void rmsnorm(const float* x, const float* weight, float* y, int64_t n, int64_t dim, float eps);

inline float silu(float a) {
    return a / (1.0f + __builtin_expf(-a));
}

// log-softmax of x[n] into out[n].
void log_softmax(const float* x, float* out, int64_t n);

// The k largest entries of x[n] as (index, value), largest first; ties: the lower index first.
std::vector<std::pair<int32_t, float>> top_k(const float* x, int64_t n, int32_t k);

}  // namespace troupe::spec_common
