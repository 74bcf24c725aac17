// Internal: the row ops one SIMD level provides (null: use the portable version).
#pragma once

#include <cstdint>

namespace troupe::cpu::detail {

struct row_op_kernels {
    void (*rmsnorm)(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps);
    void (*softmax)(float* x, int64_t n_rows, int64_t n);
    void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
    void (*add)(const float* a, const float* b, float* out, int64_t n);
    int64_t (*argmax)(const float* x, int64_t n);
};

// Null members where built without AVX-512.
const row_op_kernels& avx512_row_ops();

}  // namespace troupe::cpu::detail
