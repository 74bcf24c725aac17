#include "core/train/activations.h"

#include <cmath>

namespace troupe::train {
namespace {

float sigmoid(float a) {
    return 1.0f / (1.0f + std::exp(-a));
}

}  // namespace

void silu_forward(const float* a, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sigmoid(a[i]);
}

void silu_backward(const float* a, const float* dy, float* da, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float s = sigmoid(a[i]);
        da[i] += dy[i] * s * (1.0f + a[i] * (1.0f - s));
    }
}

void swiglu_forward(const float* g, const float* u, float* h, int64_t n) {
    for (int64_t i = 0; i < n; ++i) h[i] = g[i] * sigmoid(g[i]) * u[i];
}

void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float s = sigmoid(g[i]);
        dg[i] += dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        du[i] += dh[i] * g[i] * s;
    }
}

}  // namespace troupe::train
