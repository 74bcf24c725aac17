// activations: silu and swiglu, elementwise, with their backward.
//
//   silu(a) = a · σ(a),                 silu'(a) = σ(a) · (1 + a · (1 − σ(a)))
//   swiglu(g, u) = silu(g) · u:         dg += dh · u · silu'(g),   du += dh · silu(g)
#pragma once

#include <cstdint>

namespace troupe::train {

void silu_forward(const float* a, float* y, int64_t n);
void silu_backward(const float* a, const float* dy, float* da, int64_t n);
void swiglu_forward(const float* g, const float* u, float* h, int64_t n);
void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n);

}  // namespace troupe::train
