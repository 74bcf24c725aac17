#include "core/train/adam.h"

#include <cmath>

namespace troupe::train {

adam::adam(std::vector<param*> params, adam_params p) : params_(std::move(params)), p_(p) {
    for (const param* w : params_) {
        m_.emplace_back(w->value.size(), 0.0f);
        v_.emplace_back(w->value.size(), 0.0f);
    }
}

double adam::step(float lr_scale, cpu::thread_pool* pool) {
    const double norm = grad_norm(params_, pool);
    const float clip = p_.clip_norm > 0 && norm > p_.clip_norm ? static_cast<float>(p_.clip_norm / norm) : 1.0f;
    t_ += 1;
    const float c1 = 1.0f / (1.0f - std::pow(p_.beta1, static_cast<float>(t_)));
    const float c2 = 1.0f / (1.0f - std::pow(p_.beta2, static_cast<float>(t_)));
    const float lr = p_.lr * lr_scale;
    for_param_chunks(params_, pool, [&](size_t k, int64_t b, int64_t e, int64_t) {
        param& w = *params_[k];
        float* m = m_[k].data();
        float* v = v_[k].data();
        for (int64_t i = b; i < e; ++i) {
            const float g = w.grad[i] * clip;
            m[i] = p_.beta1 * m[i] + (1.0f - p_.beta1) * g;
            v[i] = p_.beta2 * v[i] + (1.0f - p_.beta2) * g * g;
            w.value[i] -= lr * (m[i] * c1 / (std::sqrt(v[i] * c2) + p_.eps) + p_.weight_decay * w.value[i]);
        }
    });
    return norm;
}

}  // namespace troupe::train
