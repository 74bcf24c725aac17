#include "kernels/ref/ops.h"

#include <cmath>
#include <vector>

#include "core/result.h"
#include "kernels/fp16.h"
#include "kernels/ref/kquant_dot.h"
#include "kernels/ref/quants.h"

namespace troupe {

bool matmul_supports(ggml_type type) {
    switch (type) {
        case ggml_type::f32:
        case ggml_type::f16:
        case ggml_type::bf16:
        case ggml_type::q8_0:
        case ggml_type::q4_0:
        case ggml_type::q5_0:
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
        case ggml_type::q6_k:
            return true;
        default:
            return false;
    }
}

namespace ref {
namespace {

const uint8_t* row_ptr(const matmul_weight& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride;
}

float dot_f32(const float* w, const float* x, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i];
    return sum;
}

float dot_f16(const uint16_t* w, const float* xr, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(w[i]) * xr[i];
    return sum;
}

float dot_bf16(const uint16_t* w, const float* xr, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += bf16_to_fp32(w[i]) * xr[i];
    return sum;
}

}  // namespace

float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t nb) {
    float sum = 0;
    for (int64_t b = 0; b < nb; ++b) {
        int32_t sumi = 0;
        for (int i = 0; i < qk8_0; ++i) sumi += int32_t{w[b].qs[i]} * int32_t{x[b].qs[i]};
        sum += static_cast<float>(sumi) * (fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d));
    }
    return sum;
}

float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t nb) {
    float sum = 0;
    for (int64_t b = 0; b < nb; ++b) {
        int32_t sumi = 0;
        for (int i = 0; i < qk4_0 / 2; ++i) {
            const int lo = (w[b].qs[i] & 0x0f) - 8;
            const int hi = (w[b].qs[i] >> 4) - 8;
            sumi += lo * x[b].qs[i] + hi * x[b].qs[i + qk4_0 / 2];
        }
        // One rounding per block (a fused multiply-add), as llama.cpp's x86 Q4_0 kernels (its repacked 8-row gemv and
        // gemm) accumulate; Q8_0 above rounds the product and the sum apart.
        sum = std::fma(static_cast<float>(sumi), fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d), sum);
    }
    return sum;
}

float dot_q5_0(const block_q5_0* w, const block_q8_0* x, int64_t nb) {
    float acc[8] = {};  // per lane: sum over blocks of d * lane sum
    for (int64_t b = 0; b < nb; ++b) {
        const float d = fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d);
        for (int k = 0; k < 8; ++k) {
            int32_t lane = 0;  // elements 4k .. 4k + 3
            for (int i = 4 * k; i < 4 * k + 4; ++i) lane += (q5_0_code(w[b], i) - 16) * int32_t{x[b].qs[i]};
            acc[k] = std::fma(d, static_cast<float>(lane), acc[k]);
        }
    }
    return hsum_8_lanes(acc);
}

void matmul(const matmul_weight& w, const float* x, float* y, int64_t n_tokens) {
    TROUPE_ASSERT(matmul_supports(w.type), std::string(traits(w.type).name));
    TROUPE_ASSERT(w.n_pieces == 0, "ref::matmul reads the rows at data, not pieces");
    const int64_t n = w.n_in;
    TROUPE_ASSERT(n % traits(w.type).block_size == 0);
    std::vector<float> xr(n);                   // [n_in] activations rounded to F16 / BF16
    std::vector<block_q8_0> x8(n / qk8_0 + 1);  // [n_in / 32]
    std::vector<block_q8_k> xk(n / qk_k + 1);   // [n_in / 256]
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * n;
        float* yt = y + t * w.n_out;
        switch (w.type) {
            case ggml_type::f16:
                for (int64_t i = 0; i < n; ++i) xr[i] = fp16_to_fp32(fp32_to_fp16(xt[i]));
                break;
            case ggml_type::bf16:
                for (int64_t i = 0; i < n; ++i) xr[i] = bf16_to_fp32(fp32_to_bf16(xt[i]));
                break;
            case ggml_type::q8_0:
            case ggml_type::q4_0:
            case ggml_type::q5_0:
                quantize_activations_q8_0(xt, x8.data(), n);
                break;
            case ggml_type::q2_k:
            case ggml_type::q3_k:
            case ggml_type::q4_k:
            case ggml_type::q5_k:
            case ggml_type::q6_k:
                quantize_row_q8_k(xt, xk.data(), n);
                break;
            default:
                break;
        }
        for (int64_t r = 0; r < w.n_out; ++r) {
            const void* row = row_ptr(w, r);
            switch (w.type) {
                case ggml_type::f32:
                    yt[r] = dot_f32(static_cast<const float*>(row), xt, n);
                    break;
                case ggml_type::f16:
                    yt[r] = dot_f16(static_cast<const uint16_t*>(row), xr.data(), n);
                    break;
                case ggml_type::bf16:
                    yt[r] = dot_bf16(static_cast<const uint16_t*>(row), xr.data(), n);
                    break;
                case ggml_type::q8_0:
                    yt[r] = dot_q8_0(static_cast<const block_q8_0*>(row), x8.data(), n / qk8_0);
                    break;
                case ggml_type::q4_0:
                    yt[r] = dot_q4_0(static_cast<const block_q4_0*>(row), x8.data(), n / qk4_0);
                    break;
                case ggml_type::q5_0:
                    yt[r] = dot_q5_0(static_cast<const block_q5_0*>(row), x8.data(), n / qk5_0);
                    break;
                case ggml_type::q2_k:
                    yt[r] = dot_q2_k_q8_k(static_cast<const block_q2_k*>(row), xk.data(), n / qk_k);
                    break;
                case ggml_type::q3_k:
                    yt[r] = dot_q3_k_q8_k(static_cast<const block_q3_k*>(row), xk.data(), n / qk_k);
                    break;
                case ggml_type::q4_k:
                    yt[r] = dot_q4_k_q8_k(static_cast<const block_q4_k*>(row), xk.data(), n / qk_k);
                    break;
                case ggml_type::q5_k:
                    yt[r] = dot_q5_k_q8_k(static_cast<const block_q5_k*>(row), xk.data(), n / qk_k);
                    break;
                case ggml_type::q6_k:
                    yt[r] = dot_q6_k_q8_k(static_cast<const block_q6_k*>(row), xk.data(), n / qk_k);
                    break;
                default:
                    TROUPE_ASSERT(false, "unsupported weight type");
            }
        }
    }
}

void matmul_float_act(const matmul_weight& w, const float* x, float* y, int64_t n_tokens) {
    TROUPE_ASSERT(matmul_supports(w.type), std::string(traits(w.type).name));
    TROUPE_ASSERT(w.n_pieces == 0, "ref::matmul_float_act reads the rows at data, not pieces");
    std::vector<float> row(w.n_in);  // [n_in] one dequantized weight row
    for (int64_t r = 0; r < w.n_out; ++r) {
        dequantize_row(w.type, row_ptr(w, r), row.data(), w.n_in);
        for (int64_t t = 0; t < n_tokens; ++t) y[t * w.n_out + r] = dot_f32(row.data(), x + t * w.n_in, w.n_in);
    }
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += double{xr[i]} * xr[i];
        const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * (weight ? weight[i] : 1.0f);
    }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* positions, const rope_params& p) {
    TROUPE_ASSERT(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
    const int32_t half = p.n_rot / 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * p.head_dim;
            for (int32_t i = 0; i < half; ++i) {
                double theta = positions[t] * double{p.freq_scale} *
                               std::pow(double{p.freq_base}, -2.0 * i / static_cast<double>(p.n_rot));
                if (p.freq_factors) theta /= p.freq_factors[i];
                const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
                const int32_t a = p.neox ? i : 2 * i;
                const int32_t b = p.neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
    }
}

void softmax(float* x, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) {
        float* xr = x + r * n;
        float max = -INFINITY;
        for (int64_t i = 0; i < n; ++i) max = std::fmax(max, xr[i]);
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            xr[i] = std::exp(xr[i] - max);
            sum += xr[i];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t i = 0; i < n; ++i) xr[i] *= inv;
    }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(const float* a, const float* b, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void embedding(const matmul_weight& table, const int32_t* ids, int64_t n_ids, float* out) {
    for (int64_t i = 0; i < n_ids; ++i) {
        TROUPE_ASSERT(ids[i] >= 0 && ids[i] < table.n_out, "token id out of range");
        dequantize_row(table.type, row_ptr(table, ids[i]), out + i * table.n_in, table.n_in);
    }
}

int64_t argmax(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
        if (x[i] > x[best] || std::isnan(x[best])) best = i;
    }
    return best;
}

}  // namespace ref
}  // namespace troupe
