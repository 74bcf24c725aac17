// attend_ggml: attention as llama.cpp's CPU backend computes it by default (no flash attention, a float32 KV cache,
// AVX-512 build), operation for operation, so a model run with llama.cpp's activation recipe (kernels.activations:
// quantized) gets its attention outputs bit for bit: one ulp there can move a Q8_K rounding in the next matmul,
// and greedy tokens part a few steps later.
//
// For token t, query head h, the keys j it sees (0..position, or its window):
//   kq[j]  = ggml_vec_dot_f32(head_dim, k_j, q)                       (4 x 16 FMA lanes per 64, tree, float tail)
//   w[j]   = kq[j] * scale;  m = max w;  e[j] = ggml_v_expf(w[j] - m)  (ggml_soft_max_f32)
//   sum    = in double, each 16 keys' float tree sum (keys 16c .. 16c+15 from key 0);  p[j] = e[j] * float(1 / sum)
//   out[d] = a step of >= 2 tokens: llamafile's tinyBLAS F32 gemm (16 FMA lanes, lane = key % 16, tree);
//            one token: ggml_vec_dot_f32(n_kv, v[.][d], p), n_kv the sequence's rows rounded up to 32
//            (llama.cpp's KV padding without flash attention).
// Keys a token does not see (later tokens of its step, llama.cpp's padding rows) have -inf scores in ggml: their
// exponentials are 0 and their products add 0, so they are left out except where they set the grouping (the
// 16-key chunks; the decode's split of n_kv into 64-wide FMA steps and a float tail).
//
//   tree of 16 lanes (GCC's _mm512_reduce_add_ps):  w8[i] = v[i] + v[i+8];  w4[i] = w8[i] + w8[i+4];
//                                                    w2[i] = w4[i] + w4[i+2];  r = w2[0] + w2[1]
//
// Written in scalar C++ with std::fma (the file is built with FMA and without contraction, so every rounding is
// the one written). Not llama.cpp's arithmetic, and done as the reference does it instead: soft-capping (tanh after
// scaling) and F16 pools (read as floats).
#include "attention_ggml.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "attention_kernels.h"
#include "plugins/common/half.h"

namespace troupe::gqa {

namespace {

constexpr int32_t lanes = 16;  // one __m512 of floats

float tree_sum16(const float* v) {
    float w8[8], w4[4];
    for (int i = 0; i < 8; ++i) w8[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; ++i) w4[i] = w8[i] + w8[i + 4];
    const float w2_0 = w4[0] + w4[2], w2_1 = w4[1] + w4[3];
    return w2_0 + w2_1;
}

// ggml_v_expf (AVX-512 form) on one lane.
float ggml_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j =
        std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                 u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return std::ldexp(j, static_cast<int>(n));  // _mm512_scalef_ps: j * 2^n, n integral
}

// ggml_vec_dot_f32 (AVX-512: GGML_F32_STEP 64, 4 accumulators of 16) of x(i) and y(i), i < n, where only i in
// [lo, hi) can be nonzero (the others are ggml's zero products and are skipped).
template <class X, class Y>
float ggml_vec_dot_f32(int32_t n, int32_t lo, int32_t hi, X x, Y y) {
    const int32_t np = n & ~63;
    float acc[4][lanes] = {};
    for (int32_t i = lo - lo % 64; i < std::min(np, hi); i += 64) {
        for (int32_t a = 0; a < 4; ++a) {
            for (int32_t l = 0; l < lanes; ++l) {
                const int32_t e = i + a * lanes + l;
                if (e >= lo && e < hi) acc[a][l] = std::fma(x(e), y(e), acc[a][l]);
            }
        }
    }
    float v[lanes];
    for (int32_t l = 0; l < lanes; ++l) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    float sum = tree_sum16(v);
    for (int32_t i = std::max(np, lo); i < hi; ++i) {
        const float p = x(i) * y(i);
        sum += p;
    }
    return sum;
}

inline float pool_value(const troupe_attention_call& call, const float* pool, size_t at) {
    if (call.kv_type == TROUPE_KV_F16) return quant_common::fp16_to_fp32(reinterpret_cast<const uint16_t*>(pool)[at]);
    return pool[at];
}

}  // namespace

void attend_ggml(const troupe_attention_call& call, int64_t begin, int64_t end) {
    const int32_t group = call.n_heads / call.n_kv_heads;
    const int32_t hd = call.head_dim;
    const bool batched = call.n_tokens >= 2;  // llama.cpp multiplies by V with tinyBLAS from two tokens on
    std::vector<float> e;                     // [n_keys rounded up to 16] exponentials, then probabilities
    std::vector<size_t> k_at, v_at;           // [n_keys] pool offsets of key j's K and V rows
    for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / call.n_kv_heads;
        const int32_t kv_head = static_cast<int32_t>(item % call.n_kv_heads);
        const int32_t* table = call.block_tables[call.seq_of[t]];
        const int32_t lo = first_key(call, t), hi = prefix_rows(call, t);  // keys [lo, hi)
        const int32_t n_kv = (hi + 31) / 32 * 32;
        const int32_t n_chunks = (hi + lanes - 1) / lanes;
        e.assign(static_cast<size_t>(n_chunks) * lanes, 0.0f);
        k_at.resize(static_cast<size_t>(hi));
        v_at.resize(static_cast<size_t>(hi));
        for (int32_t j = lo; j < hi; ++j) k_at[j] = v_at[j] = kv_offset(call, table, j, kv_head);
        for (int32_t g = 0; g < group; ++g) {
            const int32_t head = kv_head * group + g;
            const float* q = call.q + (static_cast<size_t>(t) * call.n_heads + head) * hd;
            float* out = call.out + (static_cast<size_t>(t) * call.n_heads + head) * hd;
            // Scores: ggml_vec_dot_f32(k_j, q) per key, scaled (ggml_soft_max_ext's scale), then the max.
            float m = -INFINITY;
            for (int32_t j = lo; j < hi; ++j) {
                const size_t k = k_at[j];
                float s = ggml_vec_dot_f32(
                    hd, 0, hd, [&](int32_t d) { return pool_value(call, call.k_pool, k + d); },
                    [q](int32_t d) { return q[d]; });
                s *= call.scale;
                if (call.softcap > 0.0f) s = call.softcap * std::tanh(s / call.softcap);
                e[j] = s;
                m = std::max(m, s);
            }
            // ggml_vec_soft_max_f32: exponentials per 16 keys, each 16's tree sum added in double.
            double sum = 0.0;
            for (int32_t c = lo / lanes; c < n_chunks; ++c) {
                float* ec = e.data() + static_cast<size_t>(c) * lanes;
                for (int32_t l = 0; l < lanes; ++l) {
                    const int32_t j = c * lanes + l;
                    ec[l] = j >= lo && j < hi ? ggml_expf(ec[l] - m) : 0.0f;
                }
                sum += static_cast<double>(tree_sum16(ec));
            }
            const float inv = static_cast<float>(1.0 / sum);
            for (int32_t j = lo; j < hi; ++j) e[j] *= inv;
            // Weighted sum of V rows.
            for (int32_t d = 0; d < hd; ++d) {
                const auto v = [&](int32_t j) { return pool_value(call, call.v_pool, v_at[j] + d); };
                const auto p = [&](int32_t j) { return e[j]; };
                if (!batched) {
                    out[d] = ggml_vec_dot_f32(n_kv, lo, hi, v, p);
                    continue;
                }
                float acc[lanes] = {};
                for (int32_t j = lo; j < hi; ++j) acc[j % lanes] = std::fma(v(j), p(j), acc[j % lanes]);
                out[d] = tree_sum16(acc);
            }
        }
    }
}

}  // namespace troupe::gqa
