// Scalar reference attention (two-pass softmax) and the K/V write, shared by every kernel choice.
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_kernels.h"
#include "plugins/common/half.h"

namespace troupe::gqa {

namespace {

using quant_common::fp16_to_fp32;
using quant_common::fp32_to_fp16;

// Element d of the K or V row at pool offset `at` (elements), as a float.
inline float pool_value(const troupe_attention_call& call, const float* pool, size_t at) {
    if (call.kv_type == TROUPE_KV_F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(pool)[at]);
    return pool[at];
}

}  // namespace

void write_kv(const troupe_attention_call& call, int64_t begin, int64_t end) {
    const size_t row_elements = static_cast<size_t>(call.head_dim);
    for (int64_t t = begin; t < end; ++t) {
        const int32_t* table = call.block_tables[call.seq_of[t]];
        for (int32_t h = 0; h < call.n_kv_heads; ++h) {
            const size_t src = (static_cast<size_t>(t) * call.n_kv_heads + h) * row_elements;
            const size_t dst = kv_offset(call, table, kv_row(call, t), h);
            if (call.kv_type == TROUPE_KV_F16) {
                auto* k = reinterpret_cast<uint16_t*>(call.k_pool) + dst;
                auto* v = reinterpret_cast<uint16_t*>(call.v_pool) + dst;
                for (size_t d = 0; d < row_elements; ++d) {
                    k[d] = fp32_to_fp16(call.k[src + d]);
                    v[d] = fp32_to_fp16(call.v[src + d]);
                }
            } else {
                std::memcpy(call.k_pool + dst, call.k + src, row_elements * sizeof(float));
                std::memcpy(call.v_pool + dst, call.v + src, row_elements * sizeof(float));
            }
        }
    }
}

void attend_ref(const troupe_attention_call& call, int64_t begin, int64_t end) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    std::vector<float> scores;  // [n_keys]
    std::vector<int32_t> keys;  // [n_keys] the cache rows the token attends to
    std::vector<int32_t> extra(max_extra_rows);
    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / call.n_kv_heads;
        const int32_t kv_head = static_cast<int32_t>(item % call.n_kv_heads);
        const int32_t* table = call.block_tables[call.seq_of[t]];
        keys.clear();
        for (int32_t j = first_key(call, t); j < prefix_rows(call, t); ++j) keys.push_back(j);
        const int32_t n_extra = extra_rows(call, t, extra.data());
        for (int32_t j = skipped_extra(call, t); j < n_extra; ++j) keys.push_back(extra[j]);
        const int32_t n_keys = static_cast<int32_t>(keys.size());
        scores.resize(keys.size());
        for (int32_t g = 0; g < group; ++g) {
            const int32_t head = kv_head * group + g;
            const float* q = call.q + (static_cast<size_t>(t) * call.n_heads + head) * hd;
            float* out = call.out + (static_cast<size_t>(t) * call.n_heads + head) * hd;
            float max_score = -INFINITY;
            for (int32_t j = 0; j < n_keys; ++j) {
                const size_t k = kv_offset(call, table, keys[j], kv_head);
                float s = 0.0f;
                for (int32_t d = 0; d < hd; ++d) s += q[d] * pool_value(call, call.k_pool, k + d);
                scores[j] = s * call.scale;
                if (call.softcap > 0.0f) scores[j] = call.softcap * std::tanh(scores[j] / call.softcap);
                if (scores[j] > max_score) max_score = scores[j];
            }
            float sum = 0.0f;
            for (int32_t j = 0; j < n_keys; ++j) {
                scores[j] = std::exp(scores[j] - max_score);
                sum += scores[j];
            }
            for (int32_t d = 0; d < hd; ++d) out[d] = 0.0f;
            for (int32_t j = 0; j < n_keys; ++j) {
                const size_t v = kv_offset(call, table, keys[j], kv_head);
                const float w = scores[j] / sum;
                for (int32_t d = 0; d < hd; ++d) out[d] += w * pool_value(call, call.v_pool, v + d);
            }
        }
    }
}

}  // namespace troupe::gqa
