#include "kernels/ref/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace troupe::ref {
namespace {

size_t cache_row(const attention_call& c, int32_t seq, int32_t pos) {
    const int32_t block = c.block_tables[seq][pos / c.block_size];
    return (static_cast<size_t>(block) * c.block_size + pos % c.block_size) * c.n_kv_heads * c.head_dim;
}

}  // namespace

void attention(const attention_call& c) {
    const int32_t kv_width = c.n_kv_heads * c.head_dim;
    for (int32_t t = 0; t < c.n_tokens; ++t) {
        const size_t row = cache_row(c, c.seq_of[t], c.positions[t]);
        for (int32_t i = 0; i < kv_width; ++i) {
            c.k_pool[row + i] = c.k[static_cast<size_t>(t) * kv_width + i];
            c.v_pool[row + i] = c.v[static_cast<size_t>(t) * kv_width + i];
        }
    }
    const int32_t group = c.n_heads / c.n_kv_heads;
    std::vector<float> scores;
    for (int32_t t = 0; t < c.n_tokens; ++t) {
        const int32_t seq = c.seq_of[t];
        const int32_t n_keys = c.positions[t] + 1;
        const int32_t first = c.window > 0 ? std::max(0, n_keys - c.window) : 0;  // positions > p - window
        scores.resize(n_keys);
        for (int32_t h = 0; h < c.n_heads; ++h) {
            const int32_t kvh = h / group;
            const float* q = c.q + (static_cast<size_t>(t) * c.n_heads + h) * c.head_dim;
            float max_score = -INFINITY;
            for (int32_t p = first; p < n_keys; ++p) {
                const float* k = c.k_pool + cache_row(c, seq, p) + static_cast<size_t>(kvh) * c.head_dim;
                float dot = 0.0f;
                for (int32_t i = 0; i < c.head_dim; ++i) dot += q[i] * k[i];
                scores[p] = dot * c.scale;
                if (c.softcap > 0.0f) scores[p] = c.softcap * std::tanh(scores[p] / c.softcap);
                max_score = std::max(max_score, scores[p]);
            }
            float sum = 0.0f;
            for (int32_t p = first; p < n_keys; ++p) {
                scores[p] = std::exp(scores[p] - max_score);
                sum += scores[p];
            }
            float* out = c.out + (static_cast<size_t>(t) * c.n_heads + h) * c.head_dim;
            for (int32_t i = 0; i < c.head_dim; ++i) out[i] = 0.0f;
            for (int32_t p = first; p < n_keys; ++p) {
                const float* v = c.v_pool + cache_row(c, seq, p) + static_cast<size_t>(kvh) * c.head_dim;
                const float w = scores[p] / sum;
                for (int32_t i = 0; i < c.head_dim; ++i) out[i] += w * v[i];
            }
        }
    }
}

}  // namespace troupe::ref
