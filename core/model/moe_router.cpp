#include "core/model/moe_router.h"

#include <algorithm>
#include <cmath>

namespace troupe {

void route_tokens(const float* logits, size_t n, const moe_params& p, const float* bias, int32_t* experts,
                  float* weights) {
    const int32_t e_count = p.n_experts, k = p.n_used;
    std::vector<float> probs(e_count), score(e_count);
    for (size_t t = 0; t < n; ++t) {
        const float* l = logits + t * e_count;
        if (p.gating == moe_gating::softmax) {
            const float max = *std::max_element(l, l + e_count);
            float sum = 0.0f;
            for (int32_t e = 0; e < e_count; ++e) sum += probs[e] = std::exp(l[e] - max);
            for (int32_t e = 0; e < e_count; ++e) probs[e] /= sum;
        } else {
            for (int32_t e = 0; e < e_count; ++e) probs[e] = 1.0f / (1.0f + std::exp(-l[e]));
        }
        for (int32_t e = 0; e < e_count; ++e) score[e] = bias ? probs[e] + bias[e] : probs[e];
        int32_t* chosen = experts + t * k;
        float* w = weights + t * k;
        // Selection of the k largest, largest first: k passes over E experts (k and E are small).
        for (int32_t s = 0; s < k; ++s) {
            int32_t best = -1;
            for (int32_t e = 0; e < e_count; ++e) {
                if (std::find(chosen, chosen + s, e) != chosen + s) continue;
                if (best < 0 || score[e] > score[best]) best = e;
            }
            chosen[s] = best;
            w[s] = probs[best];
        }
        if (p.norm_weights) {
            float sum = 0.0f;
            for (int32_t s = 0; s < k; ++s) sum += w[s];
            for (int32_t s = 0; s < k; ++s) w[s] /= sum;
        }
        if (p.weights_scale != 1.0f) {
            for (int32_t s = 0; s < k; ++s) w[s] *= p.weights_scale;
        }
    }
}

void expert_groups::build(const int32_t* experts, size_t n, int32_t n_used, int32_t n_experts) {
    const size_t pairs = n * static_cast<size_t>(n_used);
    offsets.assign(static_cast<size_t>(n_experts) + 1, 0);
    token_of.resize(pairs);
    row_of.resize(pairs);
    for (size_t i = 0; i < pairs; ++i) ++offsets[experts[i] + 1];
    for (int32_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
    std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
    for (size_t i = 0; i < pairs; ++i) {  // token order within each expert: i runs over tokens, then slots
        const int32_t r = next[experts[i]]++;
        token_of[r] = static_cast<int32_t>(i / n_used);
        row_of[i] = r;
    }
}

}  // namespace troupe
