#include "core/train/medusa_heads.h"

#include <algorithm>

#include "core/train/activations.h"
#include "core/train/linear.h"

namespace troupe::train {

medusa_heads::medusa_heads(int32_t n_heads, int32_t dim, int32_t n_vocab, std::span<const float> output_weight)
    : dim_(dim), n_vocab_(n_vocab) {
    for (int32_t i = 0; i < n_heads; ++i) {
        const std::string p = "medusa." + std::to_string(i) + ".";
        medusa_head h{param(p + "fc.weight", {dim, dim}), param(p + "fc.bias", {dim}),
                      param(p + "output.weight", {dim, n_vocab})};
        std::copy(output_weight.begin(), output_weight.end(), h.out_w.value.begin());
        heads_.push_back(std::move(h));
    }
}

std::vector<param*> medusa_heads::params() {
    std::vector<param*> out;
    for (medusa_head& h : heads_) {
        out.push_back(&h.fc_w);
        out.push_back(&h.fc_b);
        out.push_back(&h.out_w);
    }
    return out;
}

void medusa_heads::forward(int32_t i, const float* f, int64_t batch, float* logits, medusa_cache& cache,
                           cpu::thread_pool& pool) const {
    const medusa_head& h = heads_[i];
    const int64_t n = batch * dim_;
    cache.a.resize(n);
    cache.r.resize(n);
    linear_forward(f, h.fc_w.v(), h.fc_b.v(), cache.a.data(), batch, dim_, dim_, pool);
    silu_forward(cache.a.data(), cache.r.data(), n);
    for (int64_t k = 0; k < n; ++k) cache.r[k] += f[k];
    linear_forward(cache.r.data(), h.out_w.v(), nullptr, logits, batch, dim_, n_vocab_, pool);
}

void medusa_heads::backward(int32_t i, const float* f, int64_t batch, const float* dlogits, const medusa_cache& cache,
                            float* df, cpu::thread_pool& pool) {
    medusa_head& h = heads_[i];
    const int64_t n = batch * dim_;
    std::vector<float> dr(n, 0.0f), da(n, 0.0f);  // [B, dim]
    linear_backward(cache.r.data(), h.out_w.v(), dlogits, dr.data(), h.out_w.g(), nullptr, batch, dim_, n_vocab_, pool);
    silu_backward(cache.a.data(), dr.data(), da.data(), n);
    linear_backward(f, h.fc_w.v(), da.data(), df, h.fc_w.g(), h.fc_b.g(), batch, dim_, dim_, pool);
    if (df != nullptr) {
        for (int64_t k = 0; k < n; ++k) df[k] += dr[k];
    }
}

}  // namespace troupe::train
