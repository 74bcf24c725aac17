// rope: rotary position embedding of q or k rows as the inference graph applies it (kernels/cpu/row_ops.h, the
// same angles and pair layout), and its backward: a rotation's gradient is the rotation by the opposite angle.
//
//   x: [n, n_heads, head_dim]; cs: [n, n_rot / 2, (cos, sin)] from rope_angles for each row's position
//   forward:  x ← R(θ) x in place            backward: dx += R(−θ) dy
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ref/ops.h"

namespace troupe::train {

// cs [n, p.n_rot] for the rows' positions.
std::vector<float> rope_table(const int32_t* positions, int64_t n, const rope_params& p);
void rope_forward(float* x, const float* cs, int64_t n, int64_t n_heads, const rope_params& p);
void rope_backward(const float* dy, const float* cs, float* dx, int64_t n, int64_t n_heads, const rope_params& p);

}  // namespace troupe::train
