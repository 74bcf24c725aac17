// Float32 building blocks of the speculative heads (spec/medusa, spec/eagle), SDK-only: a matrix product over the
// host's workers, RMS norm, SiLU, softmax and top-k. Weights are row-major [n_out][n_in] as GGUF stores a matrix of
// ggml shape [n_in, n_out].
//
//   matmul:  y[n, out] = x[n, in] · W^T (+ b)      rows of W are split over the threads (each streams its rows once
//                                                 and applies them to all n inputs)
#pragma once

#include <troupe/plugin.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "plugins/common/plugin_support.h"

namespace troupe::spec_common {

// Σ a[i] b[i], with AVX2/FMA where the CPU has it (chosen at run time; the build stays portable).
float dot(const float* a, const float* b, int64_t n);

// Runs each_output(o) for every output o in [0, out) of a product of n rows by a [out, in] matrix: on the calling
// thread below about a million multiply-adds (waking the workers costs more than the product), else over `parallel` in
// pieces of about 16 KiB of float weights, so that a small product stays on one thread and a large one spreads. The
// schedule of matmul here and of packed_matrix's. Returns a status (an exception on a worker is reported).
template <class F>
int32_t for_each_output(const troupe_parallel* parallel, int64_t n, int64_t in, int64_t out, F&& each_output,
                        int64_t inline_below = int64_t{1} << 20) {
    if (n <= 0 || out <= 0) return TROUPE_OK;
    const troupe_parallel* where = n * in * out < inline_below ? nullptr : parallel;
    const int64_t rows_per_piece = std::max<int64_t>(1, (int64_t{16} << 10) / std::max<int64_t>(1, in * 4));
    const int64_t n_pieces = (out + rows_per_piece - 1) / rows_per_piece;
    return plugin_support::run_parallel(where, n_pieces, [&](int64_t begin, int64_t end) {
        const int64_t o_end = std::min(out, end * rows_per_piece);
        for (int64_t o = begin * rows_per_piece; o < o_end; ++o) each_output(o);
    });
}

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
