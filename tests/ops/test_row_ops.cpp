// Row ops (rmsnorm, rope, softmax, swiglu, add, embedding, argmax) against their references at every
// dispatch level. Tolerances are stated per op next to each test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/row_ops.h"
#include "kernels/ref/ops.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::random_floats;
using testing::scoped_level;

// |a - b| <= rel * |b| + abs_tol, and a finite wherever b is.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rel, float abs_tol) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::isfinite(a[i]), std::isfinite(b[i])) << "at " << i << ": " << a[i] << " vs " << b[i];
        ASSERT_LE(std::fabs(a[i] - b[i]), rel * std::fabs(b[i]) + abs_tol)
            << "at " << i << ": " << a[i] << " vs " << b[i];
    }
}

TEST(row_ops, rmsnorm_matches_the_reference_within_2e_6_relative) {
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (int64_t n : {1, 7, 64, 768, 2049}) {
            for (bool with_weight : {false, true}) {
                SCOPED_TRACE(testing::level_name(level) + " n " + std::to_string(n));
                const int64_t rows = 3;
                const auto x = random_floats(rows * n, 11);
                const auto wt = random_floats(n, 12);
                std::vector<float> a(rows * n), b(rows * n);
                cpu::rmsnorm(x.data(), with_weight ? wt.data() : nullptr, a.data(), rows, n, 1e-5f);
                ref::rmsnorm(x.data(), with_weight ? wt.data() : nullptr, b.data(), rows, n, 1e-5f);
                expect_close(a, b, 2e-6f, 1e-30f);
                std::vector<float> in_place = x;  // y may equal x
                cpu::rmsnorm(in_place.data(), with_weight ? wt.data() : nullptr, in_place.data(), rows, n, 1e-5f);
                EXPECT_EQ(in_place, a);
            }
        }
    }
}

// ggml_compute_forward_rms_norm_f32 then ggml's MUL by the weight, operation for operation: float squares summed in
// order in double, the mean rounded to float, 1.0f / sqrtf(mean + eps) in float, x * scale, then * weight.
void ggml_rms_norm_twin(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const float sq = x[r * n + i] * x[r * n + i];
            sum += static_cast<double>(sq);
        }
        const float mean = static_cast<float>(sum / static_cast<double>(n));
        const float scale = 1.0f / sqrtf(mean + eps);
        for (int64_t i = 0; i < n; ++i) {
            const float v = x[r * n + i] * scale;
            y[r * n + i] = w ? v * w[i] : v;
        }
    }
}

TEST(row_ops, rmsnorm_is_ggmls_rms_norm_and_mul_bit_for_bit) {
    // llama.cpp's greedy tokens follow from its int8 activation blocks, where one ulp of a norm can move a rounding:
    // the norm's arithmetic is ggml's exactly at every level (a wide range of magnitudes makes the order matter).
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (int64_t n : {1, 7, 64, 256, 2049}) {
            for (bool with_weight : {false, true}) {
                SCOPED_TRACE(testing::level_name(level) + " n " + std::to_string(n));
                const int64_t rows = 5;
                auto x = random_floats(rows * n, 13);
                for (int64_t i = 0; i < rows * n; i += 3) x[i] *= 1e4f * static_cast<float>(i % 7 + 1);
                const auto wt = random_floats(n, 14);
                std::vector<float> a(rows * n), b(rows * n);
                cpu::rmsnorm(x.data(), with_weight ? wt.data() : nullptr, a.data(), rows, n, 1e-5f);
                ggml_rms_norm_twin(x.data(), with_weight ? wt.data() : nullptr, b.data(), rows, n, 1e-5f);
                EXPECT_EQ(a, b);
            }
        }
    }
}

// ggml_rope_cache_init + rope_yarn + ggml_compute_forward_rope_f32 (normal and NeoX pairs) as llama.cpp's x86 build
// compiles them: the angle by repeated float products, cosf / sinf, and GCC's contraction of the rotation (one
// product rounded, the other fused), which the reference's llama_greedy dumps match on every row of rand10M's q and k.
void ggml_rope_twin(float* x, int64_t n_tokens, int64_t n_heads, const int32_t* pos, const rope_params& p) {
    const float theta_scale = powf(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    std::vector<float> cache(p.head_dim);
    for (int64_t t = 0; t < n_tokens; ++t) {
        float theta = static_cast<float>(pos[t]);
        for (int32_t i0 = 0; i0 < p.head_dim; i0 += 2) {
            const float ff = p.freq_factors && i0 < p.n_rot ? p.freq_factors[i0 / 2] : 1.0f;
            const float theta_interp = p.freq_scale * (theta / ff);
            cache[i0] = cosf(theta_interp) * 1.0f;
            cache[i0 + 1] = sinf(theta_interp) * 1.0f;
            theta *= theta_scale;
        }
        for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x + (t * n_heads + h) * p.head_dim;
            for (int32_t i0 = 0; i0 < p.n_rot; i0 += 2) {
                const int32_t a = p.neox ? i0 / 2 : i0, b = p.neox ? i0 / 2 + p.n_rot / 2 : i0 + 1;
                const float c = cache[i0], s = cache[i0 + 1], x0 = v[a], x1 = v[b];
                volatile float x1_s = x1 * s, x1_c = x1 * c;  // the products the compiled code rounds
                v[a] = std::fma(x0, c, -x1_s);
                v[b] = std::fma(x0, s, x1_c);
            }
        }
    }
}

TEST(row_ops, rope_ggml_is_llama_cpps_rope_bit_for_bit) {
    const float factors[64] = {1.0f, 1.5f,  2.0f, 4.0f, 1.0f, 1.25f, 3.0f, 8.0f, 1.0f,  1.0f, 2.5f, 1.0f,  6.0f,
                               1.0f, 1.0f,  2.0f, 1.0f, 1.5f, 2.0f,  4.0f, 1.0f, 1.25f, 3.0f, 8.0f, 1.0f,  1.0f,
                               2.5f, 1.0f,  6.0f, 1.0f, 1.0f, 2.0f,  1.0f, 1.5f, 2.0f,  4.0f, 1.0f, 1.25f, 3.0f,
                               8.0f, 1.0f,  1.0f, 2.5f, 1.0f, 6.0f,  1.0f, 1.0f, 2.0f,  1.0f, 1.5f, 2.0f,  4.0f,
                               1.0f, 1.25f, 3.0f, 8.0f, 1.0f, 1.0f,  2.5f, 1.0f, 6.0f,  1.0f, 1.0f, 2.0f};
    const int32_t positions[5] = {0, 1, 17, 511, 4095};
    // head_dim 64 and 128 rotated whole, and partly (n_rot 48: a half of 24, not a whole vector, and the head's
    // tail left as it is); every level, the AVX-512 one with its own rotation.
    struct shape {
        int32_t head_dim, n_rot;
    };
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (const shape s : {shape{64, 64}, shape{64, 48}, shape{128, 128}, shape{128, 40}}) {
            for (bool neox : {false, true}) {
                for (bool scaled : {false, true}) {
                    SCOPED_TRACE(testing::level_name(level) + (neox ? " neox" : " normal") + (scaled ? " scaled" : "") +
                                 " head_dim " + std::to_string(s.head_dim) + " n_rot " + std::to_string(s.n_rot));
                    const rope_params p{
                        s.head_dim, s.n_rot, neox, 10000.0f, scaled ? 0.25f : 1.0f, scaled ? factors : nullptr};
                    const int64_t n_heads = 3;
                    auto a = random_floats(5 * n_heads * s.head_dim, 17);
                    auto b = a;
                    cpu::rope_ggml(a.data(), 5, n_heads, positions, p);
                    ggml_rope_twin(b.data(), 5, n_heads, positions, p);
                    EXPECT_EQ(a, b);
                }
            }
        }
    }
}

TEST(row_ops, rope_matches_the_reference_in_both_modes_with_scaling_and_freq_factors) {
    // Angles are computed in double then reduced; sin/cos in float: 2e-6 of the row's scale.
    const int64_t n_tokens = 5, n_heads = 3, head_dim = 64;
    const int32_t positions[n_tokens] = {0, 1, 17, 511, 4097};
    const auto factors = [] {
        std::vector<float> f(32);
        for (int i = 0; i < 32; ++i) f[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
        return f;
    }();
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (bool neox : {false, true}) {
            for (int32_t n_rot : {64, 32}) {
                for (bool with_factors : {false, true}) {
                    SCOPED_TRACE(testing::level_name(level) + (neox ? " neox" : " normal") + " n_rot " +
                                 std::to_string(n_rot) + (with_factors ? " factors" : ""));
                    const rope_params p{
                        static_cast<int32_t>(head_dim),         n_rot, neox, 10000.0f, with_factors ? 0.5f : 1.0f,
                        with_factors ? factors.data() : nullptr};
                    auto a = random_floats(n_tokens * n_heads * head_dim, 21);
                    auto b = a;
                    const auto x = a;
                    cpu::rope(a.data(), n_tokens, n_heads, positions, p);
                    ref::rope(b.data(), n_tokens, n_heads, positions, p);
                    expect_close(a, b, 0.0f, 2e-6f * 8.0f);
                    // Position 0 is the identity; dims past n_rot pass through.
                    for (int64_t i = 0; i < n_heads * head_dim; ++i) EXPECT_FLOAT_EQ(a[i], x[i]);
                    for (int64_t h = 0; h < n_tokens * n_heads; ++h) {
                        for (int64_t d = n_rot; d < head_dim; ++d) EXPECT_EQ(a[h * head_dim + d], x[h * head_dim + d]);
                    }
                }
            }
        }
    }
}

TEST(row_ops, rope_normal_mode_rotates_adjacent_pairs_and_neox_rotates_halves) {
    // head_dim 4, position 1, base 1: every theta is 1 rad.
    const int32_t pos = 1;
    const float c = std::cos(1.0f), s = std::sin(1.0f);
    std::vector<float> x = {1, 2, 3, 4};
    cpu::rope(x.data(), 1, 1, &pos, rope_params{4, 4, false, 1.0f, 1.0f, nullptr});
    EXPECT_NEAR(x[0], 1 * c - 2 * s, 1e-6);
    EXPECT_NEAR(x[1], 1 * s + 2 * c, 1e-6);
    EXPECT_NEAR(x[2], 3 * c - 4 * s, 1e-6);
    x = {1, 2, 3, 4};
    cpu::rope(x.data(), 1, 1, &pos, rope_params{4, 4, true, 1.0f, 1.0f, nullptr});
    EXPECT_NEAR(x[0], 1 * c - 3 * s, 1e-6);
    EXPECT_NEAR(x[2], 1 * s + 3 * c, 1e-6);
}

TEST(row_ops, rope_angles_computed_once_rotate_q_and_k_exactly_as_rope_does) {
    // cpu_llama computes a step's rotations once and applies them to every layer's q (8 heads) and k (2 heads).
    const int32_t positions[] = {0, 5, 17, 1000, 123456};
    const int64_t n_tokens = 5, head_dim = 64;
    for (bool neox : {false, true}) {
        const rope_params p{static_cast<int32_t>(head_dim), 48, neox, 500000.0f, 0.25f, nullptr};
        std::vector<float> cs(n_tokens * p.n_rot);
        cpu::rope_angles(positions, n_tokens, p, cs.data());
        for (int64_t n_heads : {8, 2}) {
            auto a = random_floats(n_tokens * n_heads * head_dim, 23);
            auto b = a;
            cpu::rope(a.data(), n_tokens, n_heads, positions, p);
            cpu::rope_apply(b.data(), n_tokens, n_heads, cs.data(), p);
            EXPECT_EQ(a, b) << (neox ? "neox " : "normal ") << n_heads << " heads";
        }
    }
}

TEST(row_ops, softmax_matches_the_reference_within_1e_6_relative_and_sums_to_one) {
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (int64_t n : {1, 5, 17, 1000, 32000}) {
            SCOPED_TRACE(testing::level_name(level) + " n " + std::to_string(n));
            auto a = random_floats(2 * n, 31);
            for (auto& v : a) v *= 4.0f;
            if (n > 1) {
                a[0] = -std::numeric_limits<float>::infinity();  // masked entry -> 0
                a[1] = 80.0f;                                    // a large logit must not overflow
            }
            auto b = a;
            cpu::softmax(a.data(), 2, n);
            ref::softmax(b.data(), 2, n);
            expect_close(a, b, 1e-6f, 1e-12f);
            double sum = 0;
            for (int64_t i = n; i < 2 * n; ++i) sum += a[i];
            EXPECT_NEAR(sum, 1.0, 1e-5);
            if (n > 1) {
                EXPECT_EQ(a[0], 0.0f);
            }
        }
    }
}

TEST(row_ops, swiglu_and_add_match_the_reference) {
    // swiglu: 1e-6 relative (exp polynomial); add: exact.
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (int64_t n : {1, 15, 16, 2049}) {
            SCOPED_TRACE(testing::level_name(level) + " n " + std::to_string(n));
            auto g = random_floats(n, 41), u = random_floats(n, 42);
            g[0] = -100.0f;  // silu -> -0, exp(100) must not produce NaN
            std::vector<float> a(n), b(n);
            cpu::swiglu(g.data(), u.data(), a.data(), n);
            ref::swiglu(g.data(), u.data(), b.data(), n);
            expect_close(a, b, 1e-6f, 1e-30f);
            cpu::add(g.data(), u.data(), a.data(), n);
            ref::add(g.data(), u.data(), b.data(), n);
            EXPECT_EQ(a, b);
        }
    }
}

TEST(row_ops, embedding_dequantizes_the_rows_of_every_supported_type) {
    const int32_t ids[] = {4, 0, 16, 4};
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_0,
                           ggml_type::q4_k, ggml_type::q6_k}) {
        SCOPED_TRACE(std::string(traits(type).name));
        const auto w = testing::make_weight(type, 256, 17, 51);
        std::vector<float> a(4 * 256), b(4 * 256);
        cpu::embedding(w.view, ids, 4, a.data());
        ref::embedding(w.view, ids, 4, b.data());
        EXPECT_EQ(a, b);
        for (int i = 0; i < 256; ++i) EXPECT_EQ(a[256 + i], w.dequantized[i]);
    }
}

TEST(row_ops, argmax_returns_the_first_largest_and_never_a_nan) {
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        SCOPED_TRACE(testing::level_name(level));
        for (int64_t n : {1, 7, 16, 33, 32000}) {
            auto x = random_floats(n, 61);
            EXPECT_EQ(cpu::argmax(x.data(), n), ref::argmax(x.data(), n)) << "n " << n;
        }
        std::vector<float> x(40, -1.0f);
        x[21] = 3.0f;
        x[37] = 3.0f;
        x[5] = std::numeric_limits<float>::quiet_NaN();
        EXPECT_EQ(cpu::argmax(x.data(), 40), 21);
        std::vector<float> all_neg_inf(19, -std::numeric_limits<float>::infinity());
        EXPECT_EQ(cpu::argmax(all_neg_inf.data(), 19), 0);
    }
}

}  // namespace
}  // namespace troupe
