#include "core/model/cpu_ops.h"

#include <cmath>
#include <string>

#include "core/result.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/fp16.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"

namespace troupe {

void embed_rows(const weight_view& emb, const int32_t* ids, size_t n, float* out) {
    if (!matmul_supports(emb.type)) {
        // A type only a quant plugin multiplies (Q4_1, W4_G*): its rows through the reference dequantization.
        for (size_t i = 0; i < n; ++i) {
            TROUPE_ASSERT(ids[i] >= 0 && ids[i] < emb.n_out, "embedding: token id " + std::to_string(ids[i]) +
                                                                 " is outside [0, " + std::to_string(emb.n_out) + ")");
            ref::dequantize_row(emb.type, static_cast<const uint8_t*>(emb.data) + ids[i] * emb.row_stride,
                                out + i * emb.n_in, emb.n_in);
        }
        return;
    }
    const matmul_weight w{emb.type, emb.data, emb.n_in, emb.n_out, emb.row_stride};
    cpu::embedding(w, ids, static_cast<int64_t>(n), out);
}

void rmsnorm_rows(const float* x, const float* w, float* y, size_t n, int32_t dim, float eps) {
    cpu::rmsnorm(x, w, y, static_cast<int64_t>(n), dim, eps);
}

namespace {

rope_params rope_params_of(const llama_hparams& hp) {
    return rope_params{hp.head_dim, hp.rope_dims, hp.rope == rope_mode::neox, hp.rope_base, hp.rope_scale, nullptr};
}

}  // namespace

void rope_angles_rows(const int32_t* positions, size_t n, const llama_hparams& hp, float* cs) {
    cpu::rope_angles(positions, static_cast<int64_t>(n), rope_params_of(hp), cs);
}

void rope_rows(float* x, const float* cs, size_t n, int32_t n_heads, const llama_hparams& hp) {
    cpu::rope_apply(x, static_cast<int64_t>(n), n_heads, cs, rope_params_of(hp));
}

void rope_angles_rows_ggml(const int32_t* positions, size_t n, const llama_hparams& hp, float* cs) {
    cpu::rope_ggml_angles(positions, static_cast<int64_t>(n), rope_params_of(hp), cs);
}

void rope_rows_ggml(float* x, const float* cs, size_t n, int32_t n_heads, const llama_hparams& hp) {
    cpu::rope_ggml_apply(x, static_cast<int64_t>(n), n_heads, cs, rope_params_of(hp));
}

void swiglu_rows(float* gate, const float* up, size_t n) {
    cpu::swiglu(gate, up, gate, static_cast<int64_t>(n));
}

void geglu_rows(float* gate, const float* up, size_t n) {
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    for (size_t i = 0; i < n; ++i) {
        const float x = fp16_to_fp32(fp32_to_fp16(gate[i]));
        const float g = 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * (1.0f + 0.044715f * x * x)));
        gate[i] = g * up[i];
    }
}

void gated_rows(ffn_activation act, float* gate, const float* up, size_t n) {
    switch (act) {
        case ffn_activation::silu:
            swiglu_rows(gate, up, n);
            return;
        case ffn_activation::gelu_tanh:
            geglu_rows(gate, up, n);
            return;
    }
}

void add_bias_rows(float* x, const float* b, size_t n, size_t width) {
    for (size_t t = 0; t < n; ++t) cpu::add(x + t * width, b, x + t * width, static_cast<int64_t>(width));
}

void scale_rows(float* x, float s, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void softcap_rows(float* x, float cap, size_t n) {
    const float inv = 1.0f / cap;
    for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void add_rows(float* x, const float* y, size_t n) {
    cpu::add(x, y, x, static_cast<int64_t>(n));
}

}  // namespace troupe
