#include <cmath>
#include <numbers>

#include "core/train/distill.h"
#include "core/train/rmsnorm.h"

namespace troupe::train {

float lr_schedule(int32_t step, int32_t n_steps) {
    const int32_t warmup = std::max(1, std::min(20, n_steps / 10));
    if (step < warmup) return static_cast<float>(step + 1) / static_cast<float>(warmup);
    const double t = static_cast<double>(step - warmup) / std::max(1, n_steps - warmup);
    return static_cast<float>(0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
}

std::vector<float> normed_features(const distill_sample& s, const float_llama& target) {
    const int64_t n = s.size(), d = target.hp.dim;
    std::vector<float> f(n * d), r(n);
    rmsnorm_forward(s.hidden.data(), target.output_norm.data(), f.data(), r.data(), n, d, target.hp.rms_eps);
    return f;
}

}  // namespace troupe::train
