#include "core/train/rmsnorm.h"

#include <cmath>

namespace troupe::train {

void rmsnorm_forward(const float* x, const float* w, float* y, float* r, int64_t n, int64_t dim, float eps) {
    for (int64_t row = 0; row < n; ++row) {
        const float* xr = x + row * dim;
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
        r[row] = inv;
        float* yr = y + row * dim;
        for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
    }
}

void rmsnorm_backward(const float* x, const float* w, const float* r, const float* dy, float* dx, float* dw, int64_t n,
                      int64_t dim) {
    for (int64_t row = 0; row < n; ++row) {
        const float* xr = x + row * dim;
        const float* dyr = dy + row * dim;
        const float inv = r[row];
        if (dx != nullptr) {
            double ux = 0;  // Σ_i dy_i w_i x_i
            for (int64_t i = 0; i < dim; ++i) ux += static_cast<double>(dyr[i]) * w[i] * xr[i];
            const float c = static_cast<float>(ux / static_cast<double>(dim)) * inv * inv * inv;
            float* dxr = dx + row * dim;
            for (int64_t i = 0; i < dim; ++i) dxr[i] += inv * dyr[i] * w[i] - xr[i] * c;
        }
        if (dw != nullptr) {
            for (int64_t i = 0; i < dim; ++i) dw[i] += dyr[i] * xr[i] * inv;
        }
    }
}

}  // namespace troupe::train
