#include "key_split.h"

#include <cmath>

#include "attention_kernels.h"

namespace troupe::gqa {

key_part key_part_of(const troupe_attention_call& call, int32_t t, int32_t n_keys, int32_t i) {
    const int32_t k1 = call.positions[t] + 1;
    const int32_t k0 = k1 - n_keys + i * split_part_keys;
    return {t, k0, k0 + split_part_keys < k1 ? k0 + split_part_keys : k1};
}

void merge_key_parts(const troupe_attention_call& call, int32_t t, const int32_t* slots, int32_t n,
                     const float* part_out, const float* part_m, const float* part_l) {
    const int32_t hd = call.head_dim;
    const size_t head_floats = static_cast<size_t>(call.n_heads) * hd;
    float* out = call.out + static_cast<size_t>(t) * head_floats;
    for (int32_t h = 0; h < call.n_heads; ++h) {
        float m = -INFINITY;
        for (int32_t i = 0; i < n; ++i) m = std::fmax(m, part_m[static_cast<size_t>(slots[i]) * call.n_heads + h]);
        float total = 0.0f;
        float* o = out + static_cast<size_t>(h) * hd;
        for (int32_t d = 0; d < hd; ++d) o[d] = 0.0f;
        for (int32_t i = 0; i < n; ++i) {
            const size_t at = static_cast<size_t>(slots[i]) * call.n_heads + h;
            const float w = std::exp(part_m[at] - m) * part_l[at];
            total += w;
            const float* oi = part_out + static_cast<size_t>(slots[i]) * head_floats + static_cast<size_t>(h) * hd;
            for (int32_t d = 0; d < hd; ++d) o[d] += w * oi[d];
        }
        const float inv = 1.0f / total;
        for (int32_t d = 0; d < hd; ++d) o[d] *= inv;
    }
}

}  // namespace troupe::gqa
