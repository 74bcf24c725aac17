// The float-activation recipe (cpu::activation_recipe::float32) against its scalar twin ref::matmul_float_act at
// every dispatch level this CPU has, on odd shapes: row counts 1, 3, 17 (with padded row stride), 67; token
// counts 1-4 through matmul for the dequantize-in-registers dot kernels (5-9 by calling them directly: tiles of 4
// and their remainders), 5-8, 33, 130 through matmul too (no level has a GEMM for this recipe); 1 and 2 threads.
//
// Tolerance: both sides multiply the exactly dequantized weights with the same float activations, so they differ
// only by float summation order: |y - y_ref| <= 4e-6 * sum_k |w_k x_k| + 1e-30. The scalar level is the reference
// row by row (bit for bit); one and two threads agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/ref/ops.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::make_weight;
using testing::random_floats;
using testing::scoped_level;

constexpr float k_rel_tol = 4e-6f;
constexpr auto k_float = cpu::activation_recipe::float32;

std::vector<int64_t> row_lengths(ggml_type type) {
    switch (type) {
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
        case ggml_type::q6_k:
            return {256, 768};
        case ggml_type::q8_0:
        case ggml_type::q4_0:
        case ggml_type::q5_0:
            return {32, 96, 544};
        default:
            return {32, 172, 512};
    }
}

class matmul_float_act_types : public ::testing::TestWithParam<ggml_type> {};

TEST_P(matmul_float_act_types, matches_the_float_activation_reference_at_every_level_and_thread_count) {
    const ggml_type type = GetParam();
    cpu::thread_pool one(1), two(2);
    float worst_ratio = 0;
    uint32_t seed = 11;
    for (int64_t n_in : row_lengths(type)) {
        for (int64_t n_out : {1, 3, 17, 67}) {
            const auto w = make_weight(type, n_in, n_out, seed++, n_out == 17 ? 6 : 0);
            for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 33, 130}) {
                SCOPED_TRACE(std::string(traits(type).name) + " n_in " + std::to_string(n_in) + " n_out " +
                             std::to_string(n_out) + " n_tokens " + std::to_string(n_tokens));
                const auto x = random_floats(n_tokens * n_in, seed++);
                std::vector<float> y_ref(n_tokens * n_out);
                ref::matmul_float_act(w.view, x.data(), y_ref.data(), n_tokens);
                for (cpu::dispatch_level level : cpu::available_levels()) {
                    SCOPED_TRACE("level " + testing::level_name(level));
                    scoped_level scope(level);
                    std::vector<float> y1(n_tokens * n_out, NAN), y2(n_tokens * n_out, NAN);
                    cpu::matmul(w.view, x.data(), y1.data(), n_tokens, one, k_float);
                    cpu::matmul(w.view, x.data(), y2.data(), n_tokens, two, k_float);
                    for (size_t i = 0; i < y1.size(); ++i) {
                        ASSERT_TRUE(std::isfinite(y1[i])) << "output " << i;
                        ASSERT_EQ(y1[i], y2[i]) << "1 vs 2 threads differ at output " << i;
                        if (level == cpu::dispatch_level::scalar) {
                            ASSERT_EQ(y1[i], y_ref[i]) << "the scalar level is the reference, output " << i;
                        }
                        const int64_t t = static_cast<int64_t>(i) / n_out, r = static_cast<int64_t>(i) % n_out;
                        double bound = 0;  // sum_k |w_k x_k|
                        for (int64_t k = 0; k < n_in; ++k) {
                            bound += std::fabs(w.dequantized[r * n_in + k] * x[t * n_in + k]);
                        }
                        const float err = std::fabs(y1[i] - y_ref[i]);
                        ASSERT_LE(err, k_rel_tol * static_cast<float>(bound) + 1e-30f)
                            << "output " << i << ": " << y1[i] << " vs reference " << y_ref[i];
                        if (bound > 0) worst_ratio = std::max(worst_ratio, err / static_cast<float>(bound));
                    }
                }
            }
        }
    }
    std::printf("  %s: worst |y - y_ref| / sum|w x| = %.2e (tolerance %.0e)\n", std::string(traits(type).name).c_str(),
                worst_ratio, k_rel_tol);
}

INSTANTIATE_TEST_SUITE_P(all_weight_types, matmul_float_act_types,
                         ::testing::Values(ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0,
                                           ggml_type::q4_0, ggml_type::q5_0, ggml_type::q2_k, ggml_type::q3_k,
                                           ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k),
                         [](const auto& info) { return std::string(traits(info.param).name); });

const cpu::detail::matmul_kernels& kernels_of(cpu::dispatch_level level) {
    switch (level) {
        case cpu::dispatch_level::scalar:
            return cpu::detail::scalar_kernels();
        case cpu::dispatch_level::avx2:
            return cpu::detail::avx2_kernels();
        case cpu::dispatch_level::avx512:
            return cpu::detail::avx512_kernels();
    }
    return cpu::detail::scalar_kernels();
}

TEST(matmul_float_act, the_dot_kernels_match_the_reference_for_token_counts_past_the_gemm_threshold_too) {
    // The dot kernels (tiles of 4 tokens and a remainder) called directly.
    for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const int64_t n_in = 512, n_out = 9;
        const auto w = make_weight(type, n_in, n_out, 31, 10);
        for (int64_t n_tokens : {5, 6, 7, 9}) {
            const auto x = random_floats(n_tokens * n_in, 32);
            std::vector<float> y_ref(n_tokens * n_out);
            ref::matmul_float_act(w.view, x.data(), y_ref.data(), n_tokens);
            for (auto level : cpu::available_levels()) {
                SCOPED_TRACE(std::string(traits(type).name) + " " + testing::level_name(level) + " n_tokens " +
                             std::to_string(n_tokens));
                std::vector<float> y(n_tokens * n_out, NAN);
                kernels_of(level).rows_float_act(w.view, x.data(), y.data(), n_out, n_tokens, 0, n_out);
                for (size_t i = 0; i < y.size(); ++i) {
                    ASSERT_NEAR(y[i], y_ref[i], 1e-5f * (1.0f + std::fabs(y_ref[i]))) << "output " << i;
                }
            }
        }
    }
}

TEST(matmul_float_act, a_tokens_outputs_do_not_depend_on_the_other_tokens_of_a_decode_batch) {
    // Below the GEMM threshold each token's sums run in the same order whatever tile it lands in, so a sequence's
    // logits do not change with how many others share its decode step.
    cpu::thread_pool pool(2);
    for (ggml_type type : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const int64_t n_in = 512, n_out = 21;
        const auto w = make_weight(type, n_in, n_out, 41);
        const auto x = random_floats(4 * n_in, 42);
        for (auto level : cpu::available_levels()) {
            SCOPED_TRACE(std::string(traits(type).name) + " " + testing::level_name(level));
            scoped_level scope(level);
            ASSERT_GT(cpu::gemm_min_tokens(type, k_float), 4);
            std::vector<float> batch(4 * n_out), alone(n_out);
            for (int64_t n_tokens = 2; n_tokens <= 4; ++n_tokens) {
                cpu::matmul(w.view, x.data(), batch.data(), n_tokens, pool, k_float);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    cpu::matmul(w.view, x.data() + t * n_in, alone.data(), 1, pool, k_float);
                    for (int64_t r = 0; r < n_out; ++r) {
                        ASSERT_EQ(batch[t * n_out + r], alone[r])
                            << "token " << t << " of " << n_tokens << " row " << r;
                    }
                }
            }
        }
    }
}

TEST(matmul_float_act, differs_from_the_quantized_recipe_except_for_f32_weights) {
    cpu::thread_pool pool(2);
    const int64_t n_in = 256, n_out = 33;
    for (ggml_type type :
         {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const auto w = make_weight(type, n_in, n_out, 21);
        for (int64_t n_tokens : {1, 40}) {  // dot kernels and GEMM
            SCOPED_TRACE(std::string(traits(type).name) + " n_tokens " + std::to_string(n_tokens));
            const auto x = random_floats(n_tokens * n_in, 22);
            std::vector<float> q(n_tokens * n_out), f(n_tokens * n_out), f_ref(n_tokens * n_out);
            cpu::matmul(w.view, x.data(), q.data(), n_tokens, pool, cpu::activation_recipe::quantized);
            cpu::matmul(w.view, x.data(), f.data(), n_tokens, pool, k_float);
            ref::matmul_float_act(w.view, x.data(), f_ref.data(), n_tokens);
            double max_diff = 0, max_abs = 0, max_err = 0;
            for (size_t i = 0; i < q.size(); ++i) {
                max_diff = std::max(max_diff, double{std::fabs(q[i] - f[i])});
                max_abs = std::max(max_abs, double{std::fabs(f[i])});
                max_err = std::max(max_err, double{std::fabs(f_ref[i] - f[i])});
            }
            EXPECT_LT(max_err, 1e-5 * max_abs);  // the float recipe is the float reference...
            if (type == ggml_type::f32) {
                EXPECT_LT(max_diff, 1e-5 * max_abs);  // ...which is the quantized recipe for F32 weights
            } else {
                EXPECT_GT(max_diff, 10 * max_err);  // and not for the others: rounding the activations shows
                EXPECT_LT(max_diff, 0.05 * max_abs);
            }
        }
    }
}

TEST(matmul_float_act, a_nan_activation_reaches_only_its_tokens_outputs_at_every_level) {
    cpu::thread_pool pool(2);
    for (ggml_type type : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
        const int64_t n_in = 256, n_out = 19;
        const auto w = make_weight(type, n_in, n_out, 8);
        for (int64_t n_tokens : {3, 40}) {
            auto x = random_floats(n_tokens * n_in, 9);
            x[1 * n_in + 5] = NAN;
            for (auto level : cpu::available_levels()) {
                SCOPED_TRACE(std::string(traits(type).name) + " " + testing::level_name(level) + " n_tokens " +
                             std::to_string(n_tokens));
                scoped_level scope(level);
                std::vector<float> y(n_tokens * n_out);
                cpu::matmul(w.view, x.data(), y.data(), n_tokens, pool, k_float);
                for (int64_t r = 0; r < n_out; ++r) {
                    EXPECT_TRUE(std::isfinite(y[r]));
                    EXPECT_TRUE(std::isnan(y[n_out + r]));
                    EXPECT_TRUE(std::isfinite(y[2 * n_out + r]));
                }
            }
        }
    }
}

// No level takes a GEMM for this recipe any more: its sums were not the dot kernels', so a token's outputs depended on
// the tokens beside it (test_matmul's at_every_level test). Before, AVX-512 took one from 32 tokens.
TEST(matmul_float_act, every_level_stays_on_the_dot_kernels_at_every_token_count) {
    for (auto level : cpu::available_levels()) {
        scoped_level scope(level);
        for (ggml_type type : {ggml_type::f32, ggml_type::q8_0, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
            EXPECT_EQ(cpu::gemm_min_tokens(type, k_float), INT64_MAX) << traits(type).name << " " << cpu::name(level);
        }
    }
}

}  // namespace
}  // namespace troupe
