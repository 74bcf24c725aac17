// The scalar level: portable C++ for every weight type (the fallback on any CPU), and the pieces
// the SIMD levels share (dequantize_range, rounding of activations). rows_float_act_scalar is
// ref::matmul_float_act row by row (same dequantization, same order of float sums).
#include <vector>

#include "core/result.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/fp16.h"
#include "kernels/ref/kquant_dot.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"

namespace troupe::cpu::detail {
namespace {

const uint8_t* row_ptr(const matmul_weight& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
}

}  // namespace

void rows_scalar(const matmul_weight& w, prepared_x x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                 int64_t r1) {
    const int64_t n = w.n_in;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = row_ptr(w, r);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const void* xt = static_cast<const uint8_t*>(x.data) + static_cast<size_t>(t) * x.stride;
            float v = 0;
            switch (w.type) {
                case ggml_type::f32: {
                    const auto* wr = reinterpret_cast<const float*>(row);
                    const auto* xr = static_cast<const float*>(xt);
                    for (int64_t i = 0; i < n; ++i) v += wr[i] * xr[i];
                    break;
                }
                case ggml_type::f16: {
                    const auto* wr = reinterpret_cast<const uint16_t*>(row);
                    const auto* xr = static_cast<const float*>(xt);
                    for (int64_t i = 0; i < n; ++i) v += fp16_to_fp32(wr[i]) * xr[i];
                    break;
                }
                case ggml_type::bf16: {
                    const auto* wr = reinterpret_cast<const uint16_t*>(row);
                    const auto* xr = static_cast<const float*>(xt);
                    for (int64_t i = 0; i < n; ++i) v += bf16_to_fp32(wr[i]) * xr[i];
                    break;
                }
                case ggml_type::q8_0:
                    v = ref::dot_q8_0(reinterpret_cast<const block_q8_0*>(row), static_cast<const block_q8_0*>(xt),
                                      n / qk8_0);
                    break;
                case ggml_type::q4_0:
                    v = ref::dot_q4_0(reinterpret_cast<const block_q4_0*>(row), static_cast<const block_q8_0*>(xt),
                                      n / qk4_0);
                    break;
                case ggml_type::q5_0:
                    v = ref::dot_q5_0(reinterpret_cast<const block_q5_0*>(row), static_cast<const block_q8_0*>(xt),
                                      n / qk5_0);
                    break;
                case ggml_type::q2_k:
                    v = ref::dot_q2_k_q8_k(reinterpret_cast<const block_q2_k*>(row), static_cast<const block_q8_k*>(xt),
                                           n / qk_k);
                    break;
                case ggml_type::q3_k:
                    v = ref::dot_q3_k_q8_k(reinterpret_cast<const block_q3_k*>(row), static_cast<const block_q8_k*>(xt),
                                           n / qk_k);
                    break;
                case ggml_type::q4_k:
                    v = ref::dot_q4_k_q8_k(reinterpret_cast<const block_q4_k*>(row), static_cast<const block_q8_k*>(xt),
                                           n / qk_k);
                    break;
                case ggml_type::q5_k:
                    v = ref::dot_q5_k_q8_k(reinterpret_cast<const block_q5_k*>(row), static_cast<const block_q8_k*>(xt),
                                           n / qk_k);
                    break;
                case ggml_type::q6_k:
                    v = ref::dot_q6_k_q8_k(reinterpret_cast<const block_q6_k*>(row), static_cast<const block_q8_k*>(xt),
                                           n / qk_k);
                    break;
                default:
                    TROUPE_ASSERT(false, "matmul: unsupported weight type");
            }
            y[t * ldy + r] = v;
        }
    }
}

void rows_float_act_scalar(const matmul_weight& w, const float* x, float* y, int64_t ldy, int64_t n_tokens, int64_t r0,
                           int64_t r1) {
    const int64_t n = w.n_in;
    std::vector<float> row(static_cast<size_t>(n));  // [n_in] one dequantized weight row
    for (int64_t r = r0; r < r1; ++r) {
        dequantize_range(w, r, 0, n, row.data());
        for (int64_t t = 0; t < n_tokens; ++t) {
            const float* xt = x + t * n;
            float v = 0;
            for (int64_t i = 0; i < n; ++i) v += row[i] * xt[i];
            y[t * ldy + r] = v;
        }
    }
}

void round_f16_scalar(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void round_bf16_scalar(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
}

void q8_0_values_scalar(const float* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk8_0; ++b) {
        block_q8_0 q;
        ref::quantize_activations_q8_0(x + b * qk8_0, &q, qk8_0);
        const float d = fp16_to_fp32(q.d);
        for (int i = 0; i < qk8_0; ++i) y[b * qk8_0 + i] = d * q.qs[i];
    }
}

void q8_k_values_scalar(const float* x, float* y, int64_t n) {
    for (int64_t b = 0; b < n / qk_k; ++b) {
        block_q8_k q;
        ref::quantize_row_q8_k(x + b * qk_k, &q, qk_k);
        for (int i = 0; i < qk_k; ++i) y[b * qk_k + i] = q.d * q.qs[i];
    }
}

void dequantize_range(const matmul_weight& w, int64_t r, int64_t k0, int64_t n, float* out) {
    const auto tr = traits(w.type);
    const uint8_t* p = row_ptr(w, r) + static_cast<size_t>(k0 / tr.block_size) * tr.type_size;
    switch (w.type) {
        case ggml_type::f32: {
            const auto* src = reinterpret_cast<const float*>(p);
            for (int64_t i = 0; i < n; ++i) out[i] = src[i];
            break;
        }
        case ggml_type::f16: {
            const auto* src = reinterpret_cast<const uint16_t*>(p);
            for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(src[i]);
            break;
        }
        case ggml_type::bf16: {
            const auto* src = reinterpret_cast<const uint16_t*>(p);
            for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(src[i]);
            break;
        }
        default:
            ref::dequantize_row(w.type, p, out, n);
            break;
    }
}

const matmul_kernels& scalar_kernels() {
    static const matmul_kernels k{
        .rows = rows_scalar,
        .gemm = nullptr,
        .gemm_min_tokens_float = 0,
        .gemm_min_tokens_q8 = 0,
        .gemm_rows = 0,
        .gemm_mr = 0,
        .gemm_kc = 0,
        .gemm_unordered = nullptr,
        .rows_float_act = rows_float_act_scalar,
        .gemm_min_tokens_float_act = 0,
        .gemm_q8 = nullptr,
        .gemm_q8_rows = 0,
        .quantize_q8_0 = ref::quantize_activations_q8_0,
        .quantize_q8_k = ref::quantize_row_q8_k,
        .round_f16 = round_f16_scalar,
        .round_bf16 = round_bf16_scalar,
        .q8_0_values = q8_0_values_scalar,
        .q8_k_values = q8_k_values_scalar,
        .gemm_kquant = nullptr,
        .gemm_min_tokens_q4_k = 0,
        .gemm_min_tokens_q6_k = 0,
        .gemm_kquant_rows = 0,
    };
    return k;
}

}  // namespace troupe::cpu::detail
