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
    void (*rope_ggml_apply)(float* x, int64_t n_tokens, int64_t n_heads, const float* cs, int32_t head_dim,
                            int32_t n_rot, bool neox);
};

// Null members where built without AVX-512.
const row_op_kernels& avx512_row_ops();

// sums[k] = the float squares of row k (of n_rows <= 4 consecutive rows of n floats from x) added in order in double:
// RMSNorm's sum as ggml computes it. The rows' chains run side by side, so a prefill's norms pay a double add's
// throughput rather than its latency (one row's sum alone is n dependent adds); each row's order is unchanged.
// Inline with internal linkage: the instruction sets' files include it.
static inline void sums_of_squares_in_order(const float* x, int64_t n_rows, int64_t n, double* sums) {
    if (n_rows == 4) {
        const float *a = x, *b = x + n, *c = x + 2 * n, *d = x + 3 * n;
        double sa = 0, sb = 0, sc = 0, sd = 0;
        for (int64_t i = 0; i < n; ++i) {
            sa += static_cast<double>(a[i] * a[i]);
            sb += static_cast<double>(b[i] * b[i]);
            sc += static_cast<double>(c[i] * c[i]);
            sd += static_cast<double>(d[i] * d[i]);
        }
        sums[0] = sa, sums[1] = sb, sums[2] = sc, sums[3] = sd;
        return;
    }
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += static_cast<double>(xr[i] * xr[i]);
        sums[r] = s;
    }
}

}  // namespace troupe::cpu::detail
