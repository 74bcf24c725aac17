// adam: AdamW (Loshchilov & Hutter) over a set of params, with an optional clip of the global gradient norm.
//
//   g ← g · min(1, clip / ‖g‖)     m ← β1 m + (1 − β1) g     v ← β2 v + (1 − β2) g²
//   w ← w − lr · (m̂ / (√v̂ + ε) + wd · w)        m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t)
#pragma once

#include <span>
#include <vector>

#include "core/train/param.h"

namespace troupe::train {

struct adam_params {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
    float clip_norm = 1.0f;  // 0: no clipping
};

class adam {
public:
    adam(std::vector<param*> params, adam_params p);
    // One update from the params' gradients; lr_scale multiplies lr (a schedule). Returns the gradient norm
    // before clipping. With a pool the update is split over its threads.
    double step(float lr_scale = 1.0f, cpu::thread_pool* pool = nullptr);
    int64_t n_steps() const { return t_; }

private:
    std::vector<param*> params_;
    adam_params p_;
    std::vector<std::vector<float>> m_, v_;  // per param, its size
    int64_t t_ = 0;
};

}  // namespace troupe::train
