#include "kernels/cpu/row_ops.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "core/result.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/row_ops_kernels.h"

namespace troupe::cpu {
namespace {

const detail::row_op_kernels* simd_ops() {
    return active_level() == dispatch_level::avx512 ? &detail::avx512_row_ops() : nullptr;
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) {
    if (const auto* k = simd_ops(); k && k->rmsnorm) return k->rmsnorm(x, weight, y, n_rows, n, eps);
    double sums[4];
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        // ggml_compute_forward_rms_norm_f32: float squares summed in order in double, the mean rounded to float
        // (four rows' sums at a time, row_ops_kernels.h).
        if (r % 4 == 0) detail::sums_of_squares_in_order(xr, n_rows - r < 4 ? n_rows - r : 4, n, sums);
        const float mean = static_cast<float>(sums[r % 4] / static_cast<double>(n));
        const float scale = 1.0f / std::sqrt(mean + eps);
        if (weight) {
            for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * scale * weight[j];
        } else {
            for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * scale;
        }
    }
}

void rope_angles(const int32_t* positions, int64_t n_tokens, const rope_params& p, float* cs) {
    TROUPE_ASSERT(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
    const int32_t half = p.n_rot / 2;
    // Angles in double, reduced to [-pi, pi] before the float sin/cos: exact enough for any position.
    std::vector<double> inv_freq(half);  // [n_rot / 2]
    for (int32_t i = 0; i < half; ++i) {
        inv_freq[i] = double{p.freq_scale} * std::pow(double{p.freq_base}, -2.0 * i / static_cast<double>(p.n_rot));
        if (p.freq_factors) inv_freq[i] /= p.freq_factors[i];
    }
    constexpr double two_pi = 2.0 * std::numbers::pi;
    for (int64_t t = 0; t < n_tokens; ++t) {
        float* c = cs + t * 2 * half;
        for (int32_t i = 0; i < half; ++i) {
            double theta = positions[t] * inv_freq[i];
            theta -= two_pi * std::nearbyint(theta / two_pi);
            c[2 * i] = std::cos(static_cast<float>(theta));
            c[2 * i + 1] = std::sin(static_cast<float>(theta));
        }
    }
}

void rope_ggml_angles(const int32_t* positions, int64_t n_tokens, const rope_params& p, float* cs) {
    TROUPE_ASSERT(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
    const int32_t half = p.n_rot / 2;
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    for (int64_t t = 0; t < n_tokens; ++t) {
        float* c = cs + t * 2 * half;
        float theta = static_cast<float>(positions[t]);
        for (int32_t i = 0; i < half; ++i) {
            const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
            const float angle = p.freq_scale * (theta / ff);
            c[2 * i] = std::cos(angle);
            c[2 * i + 1] = std::sin(angle);
            theta *= theta_scale;
        }
    }
}

void rope_ggml_apply(float* x, int64_t n_tokens, int64_t n_heads, const float* cs, const rope_params& p) {
    TROUPE_ASSERT(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
    if (const auto* k = simd_ops(); k && k->rope_ggml_apply) {
        return k->rope_ggml_apply(x, n_tokens, n_heads, cs, p.head_dim, p.n_rot, p.neox);
    }
    const int32_t half = p.n_rot / 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* c = cs + t * 2 * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * p.head_dim;
            for (int32_t i = 0; i < half; ++i) {
                const int32_t a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b], co = c[2 * i], si = c[2 * i + 1];
                const float x1_sin = x1 * si, x1_cos = x1 * co;
                v[a] = std::fma(x0, co, -x1_sin);
                v[b] = std::fma(x0, si, x1_cos);
            }
        }
    }
}

void rope_ggml(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* positions, const rope_params& p) {
    std::vector<float> cs(static_cast<size_t>(n_tokens) * p.n_rot);  // [n_tokens][n_rot / 2][cos, sin]
    rope_ggml_angles(positions, n_tokens, p, cs.data());
    rope_ggml_apply(x, n_tokens, n_heads, cs.data(), p);
}

void rope_apply(float* x, int64_t n_tokens, int64_t n_heads, const float* cs, const rope_params& p) {
    TROUPE_ASSERT(p.n_rot % 2 == 0 && p.n_rot <= p.head_dim);
    const int32_t half = p.n_rot / 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* c = cs + t * 2 * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * p.head_dim;
            if (p.neox) {
                for (int32_t i = 0; i < half; ++i) {
                    const float x0 = v[i], x1 = v[i + half], co = c[2 * i], si = c[2 * i + 1];
                    v[i] = x0 * co - x1 * si;
                    v[i + half] = x0 * si + x1 * co;
                }
            } else {
                for (int32_t i = 0; i < half; ++i) {
                    const float x0 = v[2 * i], x1 = v[2 * i + 1], co = c[2 * i], si = c[2 * i + 1];
                    v[2 * i] = x0 * co - x1 * si;
                    v[2 * i + 1] = x0 * si + x1 * co;
                }
            }
        }
    }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* positions, const rope_params& p) {
    std::vector<float> cs(static_cast<size_t>(n_tokens) * p.n_rot);
    rope_angles(positions, n_tokens, p, cs.data());
    rope_apply(x, n_tokens, n_heads, cs.data(), p);
}

void softmax(float* x, int64_t n_rows, int64_t n) {
    if (const auto* k = simd_ops(); k && k->softmax) return k->softmax(x, n_rows, n);
    for (int64_t r = 0; r < n_rows; ++r) {
        float* xr = x + r * n;
        float max = -INFINITY;
        for (int64_t i = 0; i < n; ++i) max = std::fmax(max, xr[i]);
        float sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            xr[i] = std::exp(xr[i] - max);
            sum += xr[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < n; ++i) xr[i] *= inv;
    }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
    if (const auto* k = simd_ops(); k && k->swiglu) return k->swiglu(gate, up, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(const float* a, const float* b, float* out, int64_t n) {
    if (const auto* k = simd_ops(); k && k->add) return k->add(a, b, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void embedding(const matmul_weight& table, const int32_t* ids, int64_t n_ids, float* out) {
    TROUPE_ASSERT(matmul_supports(table.type), "embedding: unsupported type " + std::string(traits(table.type).name));
    for (int64_t i = 0; i < n_ids; ++i) {
        TROUPE_ASSERT(ids[i] >= 0 && ids[i] < table.n_out, "embedding: token id " + std::to_string(ids[i]) +
                                                               " is outside [0, " + std::to_string(table.n_out) + ")");
        detail::dequantize_range(table, ids[i], 0, table.n_in, out + i * table.n_in);
    }
}

int64_t argmax(const float* x, int64_t n) {
    if (const auto* k = simd_ops(); k && k->argmax) return k->argmax(x, n);
    return ref::argmax(x, n);
}

}  // namespace troupe::cpu
