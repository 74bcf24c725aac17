#include "key_split.h"

#include <cmath>

#include "attention_kernels.h"

namespace troupe::gqa {

int32_t split_keys(const troupe_attention_call& call, int32_t t, int32_t n_keys, key_part* parts) {
    const int32_t k1 = call.positions[t] + 1;
    const int32_t k0 = k1 - n_keys;
    if (n_keys < split_min_keys) {
        parts[0] = {t, k0, k1};
        return 1;
    }
    // Equal parts of about split_part_keys keys, so that no thread's share ends with a long one.
    const int32_t n = (n_keys + split_part_keys - 1) / split_part_keys;
    for (int32_t i = 0; i < n; ++i) {
        parts[i] = {t, k0 + static_cast<int32_t>(static_cast<int64_t>(n_keys) * i / n),
                    k0 + static_cast<int32_t>(static_cast<int64_t>(n_keys) * (i + 1) / n)};
    }
    return n;
}

void merge_key_parts(const troupe_attention_call& call, const key_part* parts, int32_t first, int32_t n,
                     const float* part_out, const float* part_m, const float* part_l) {
    const int32_t hd = call.head_dim;
    const size_t head_floats = static_cast<size_t>(call.n_heads) * hd;
    float* out = call.out + static_cast<size_t>(parts[first].token) * head_floats;
    for (int32_t h = 0; h < call.n_heads; ++h) {
        float m = -INFINITY;
        for (int32_t i = first; i < first + n; ++i) m = std::fmax(m, part_m[static_cast<size_t>(i) * call.n_heads + h]);
        float total = 0.0f;
        float* o = out + static_cast<size_t>(h) * hd;
        for (int32_t d = 0; d < hd; ++d) o[d] = 0.0f;
        for (int32_t i = first; i < first + n; ++i) {
            const size_t at = static_cast<size_t>(i) * call.n_heads + h;
            const float w = std::exp(part_m[at] - m) * part_l[at];
            total += w;
            const float* oi = part_out + static_cast<size_t>(i) * head_floats + static_cast<size_t>(h) * hd;
            for (int32_t d = 0; d < hd; ++d) o[d] += w * oi[d];
        }
        const float inv = 1.0f / total;
        for (int32_t d = 0; d < hd; ++d) o[d] *= inv;
    }
}

}  // namespace troupe::gqa
