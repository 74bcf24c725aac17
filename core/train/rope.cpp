#include "core/train/rope.h"

#include "kernels/cpu/row_ops.h"

namespace troupe::train {

std::vector<float> rope_table(const int32_t* positions, int64_t n, const rope_params& p) {
    std::vector<float> cs(static_cast<size_t>(n * p.n_rot));
    cpu::rope_angles(positions, n, p, cs.data());
    return cs;
}

void rope_forward(float* x, const float* cs, int64_t n, int64_t n_heads, const rope_params& p) {
    cpu::rope_apply(x, n, n_heads, cs, p);
}

void rope_backward(const float* dy, const float* cs, float* dx, int64_t n, int64_t n_heads, const rope_params& p) {
    std::vector<float> back(cs, cs + n * p.n_rot);  // [n, n_rot / 2, (cos, -sin)]
    for (size_t i = 1; i < back.size(); i += 2) back[i] = -back[i];
    const int64_t count = n * n_heads * p.head_dim;
    std::vector<float> rotated(dy, dy + count);
    cpu::rope_apply(rotated.data(), n, n_heads, back.data(), p);
    for (int64_t i = 0; i < count; ++i) dx[i] += rotated[i];
}

}  // namespace troupe::train
