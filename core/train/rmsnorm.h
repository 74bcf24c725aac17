// rmsnorm: y = x / sqrt(mean(x²) + eps) · w per row, and its backward.
//
//   forward:  r[n] = 1 / sqrt(mean_i x[n, i]² + eps),  y[n, i] = x[n, i] · r[n] · w[i]      (r kept for backward)
//   backward: with u = dy ⊙ w:  dx += r · u − x · r³ · mean_i(u ⊙ x),   dw += Σ_rows dy ⊙ x · r
#pragma once

#include <cstdint>

namespace troupe::train {

void rmsnorm_forward(const float* x, const float* w, float* y, float* r, int64_t n, int64_t dim, float eps);
// dx, dw optional (a frozen norm weight passes dw = nullptr).
void rmsnorm_backward(const float* x, const float* w, const float* r, const float* dy, float* dx, float* dw, int64_t n,
                      int64_t dim);

}  // namespace troupe::train
