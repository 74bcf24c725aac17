// Optimized matmul against the reference recipe (ref::matmul) at every dispatch level this CPU has,
// on odd shapes (row counts 1, 3, 17, 67; token counts 1, 2, 5 for the dot-product kernels and 33, 130
// for the GEMM; row lengths up to 1100 for the float types, several GEMM k blocks), with 1 and 2 threads.
//
// Tolerance: both sides compute the same recipe (same quantized / rounded activations, exact integer
// dots), so they differ only by float summation order: |y - y_ref| <= 4e-6 * sum_k |w_k x_k| + 1e-30.
// One and two threads must agree bit for bit (each output is computed by one thread, in a fixed order).
#include <gtest/gtest.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/fp16.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::make_weight;
using testing::random_floats;
using testing::scoped_level;

constexpr float k_rel_tol = 4e-6f;

bool has_level(cpu::dispatch_level level) {
    const auto levels = cpu::available_levels();
    return std::find(levels.begin(), levels.end(), level) != levels.end();
}

std::vector<int64_t> row_lengths(ggml_type type) {
    switch (type) {
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
        case ggml_type::q6_k:
            return {256, 512};
        case ggml_type::q8_0:
        case ggml_type::q4_0:
        case ggml_type::q5_0:
            return {32, 96, 512};
        default:
            return {32, 172, 512, 1100};  // 1100: several k blocks of the GEMMs (256 or 512), the last one ragged
    }
}

class matmul_types : public ::testing::TestWithParam<ggml_type> {};

TEST_P(matmul_types, matches_the_reference_recipe_at_every_level_and_thread_count) {
    const ggml_type type = GetParam();
    cpu::thread_pool one(1), two(2);
    float worst_ratio = 0;
    uint32_t seed = 1;
    for (int64_t n_in : row_lengths(type)) {
        for (int64_t n_out : {1, 3, 17, 67}) {
            const auto w = make_weight(type, n_in, n_out, seed++, n_out == 17 ? 6 : 0);
            for (int64_t n_tokens : {1, 2, 5, 33, 130}) {
                SCOPED_TRACE(std::string(traits(type).name) + " n_in " + std::to_string(n_in) + " n_out " +
                             std::to_string(n_out) + " n_tokens " + std::to_string(n_tokens));
                const auto x = random_floats(n_tokens * n_in, seed++);
                std::vector<float> y_ref(n_tokens * n_out);
                ref::matmul(w.view, x.data(), y_ref.data(), n_tokens);
                std::vector<float> bound(n_tokens * n_out, 0.0f);  // sum_k |w_k x_k|
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t r = 0; r < n_out; ++r) {
                        double s = 0;
                        for (int64_t k = 0; k < n_in; ++k)
                            s += std::fabs(w.dequantized[r * n_in + k] * x[t * n_in + k]);
                        bound[t * n_out + r] = static_cast<float>(s);
                    }
                }
                for (cpu::dispatch_level level : cpu::available_levels()) {
                    SCOPED_TRACE("level " + testing::level_name(level));
                    scoped_level scope(level);
                    std::vector<float> y1(n_tokens * n_out, NAN), y2(n_tokens * n_out, NAN);
                    cpu::matmul(w.view, x.data(), y1.data(), n_tokens, one);
                    cpu::matmul(w.view, x.data(), y2.data(), n_tokens, two);
                    for (size_t i = 0; i < y1.size(); ++i) {
                        ASSERT_TRUE(std::isfinite(y1[i])) << "output " << i;
                        ASSERT_EQ(y1[i], y2[i]) << "1 vs 2 threads differ at output " << i;
                        const float err = std::fabs(y1[i] - y_ref[i]);
                        ASSERT_LE(err, k_rel_tol * bound[i] + 1e-30f)
                            << "output " << i << ": " << y1[i] << " vs reference " << y_ref[i];
                        if (bound[i] > 0) worst_ratio = std::max(worst_ratio, err / bound[i]);
                    }
                }
            }
        }
    }
    std::printf("  %s: worst |y - y_ref| / sum|w x| = %.2e (tolerance %.0e)\n", std::string(traits(type).name).c_str(),
                worst_ratio, k_rel_tol);
}

INSTANTIATE_TEST_SUITE_P(all_weight_types, matmul_types,
                         ::testing::Values(ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0,
                                           ggml_type::q4_0, ggml_type::q5_0, ggml_type::q2_k, ggml_type::q3_k,
                                           ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k),
                         [](const auto& info) { return std::string(traits(info.param).name); });

// Q4_0 in the quantized recipe: each block's integer sum times d_w * d_x added with one FMA, block after block, as
// llama.cpp's x86 Q4_0 kernels do (its repacked 8-row gemv and gemm): the AVX2 dot kernels equal ref::matmul bit for
// bit at every token count (the AVX-512 panels too: test_q8_panels). Before, the AVX2 kernels summed in 8 float lanes.
// AVX2 has no integer GEMM and does not multiply dequantized floats instead (see the test below).
TEST(matmul, q4_0_at_the_avx2_level_equals_the_reference_bit_for_bit) {
    if (!has_level(cpu::dispatch_level::avx2)) GTEST_SKIP() << "no AVX2 here";
    scoped_level scope(cpu::dispatch_level::avx2);
    cpu::thread_pool two(2);
    uint32_t seed = 11;
    for (int64_t n_in : {32, 96, 512}) {
        for (int64_t n_out : {1, 3, 17, 67}) {
            const auto w = make_weight(ggml_type::q4_0, n_in, n_out, seed++);
            for (int64_t n_tokens : {1, 2, 5, 9, 24, 37}) {
                const auto x = random_floats(n_tokens * n_in, seed++);
                std::vector<float> want(n_tokens * n_out), got(n_tokens * n_out, NAN);
                ref::matmul(w.view, x.data(), want.data(), n_tokens);
                cpu::matmul(w.view, x.data(), got.data(), n_tokens, two);
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_EQ(got[i], want[i])
                        << "n_in " << n_in << " n_out " << n_out << " n_tokens " << n_tokens << " output " << i;
                }
            }
        }
    }
}

// A token's outputs must not depend on how many tokens share its step (a verified draft tree, a batch of streams):
// speculation keeps greedy text only so. At the AVX2 level the quantized weight types stay on the dot kernels, whose
// order of operations does not depend on the tile, or (Q6_K, int8 recipe) an integer GEMM with their arithmetic; a
// float GEMM on dequantized panels from 24 (int8 recipe) or 6 (float recipe) tokens on made spec/ngram, spec/draft and
// spec/lookahead part from plain decoding on stories260K-Q8_0 and rand10M-Q4_0 (test_spec) on an AVX2-only machine.
// Float weights too: their packed GEMM (from 6 tokens) made five spec plugins part from plain decoding on rand10M-F16
// once its k block changed from 256 to 512; they now take 3-row x 4-token dot tiles at every token count.
// At the AVX-512 level this failed for F32 from 7 tokens (a packed float GEMM from 6), Q8_0 rows from 24 (an integer
// GEMM) and the float recipe's Q8_0 from 33 (a GEMM on dequantized panels) until those GEMMs were dropped there too;
// checked with AVX-512 emulated by SIMDe on an AVX2-only machine (kernels/emulation/README.md).
TEST(matmul, at_every_level_a_tokens_outputs_do_not_depend_on_the_tokens_beside_it) {
    cpu::thread_pool two(2);
    constexpr int64_t n_in = 512, n_out = 19, max_tokens = 70;
    const auto x = random_floats(max_tokens * n_in, 5);
    for (cpu::dispatch_level level : cpu::available_levels()) {
        scoped_level scope(level);
        for (ggml_type type :
             {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_0, ggml_type::q5_0,
              ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k}) {
            const auto w = make_weight(type, n_in, n_out, 6);
            for (auto recipe : {cpu::activation_recipe::quantized, cpu::activation_recipe::float32}) {
                SCOPED_TRACE(std::string(cpu::name(level)) + " " + std::string(traits(type).name) +
                             (recipe == cpu::activation_recipe::quantized ? " int8 recipe" : " float recipe"));
                std::vector<float> alone(n_out), batch(max_tokens * n_out);
                for (int64_t n_tokens : {int64_t{2}, int64_t{7}, int64_t{24}, int64_t{33}, max_tokens}) {
                    cpu::matmul(w.view, x.data(), batch.data(), n_tokens, two, recipe);
                    for (int64_t t : {int64_t{0}, n_tokens / 2, n_tokens - 1}) {
                        cpu::matmul(w.view, x.data() + t * n_in, alone.data(), 1, two, recipe);
                        for (int64_t r = 0; r < n_out; ++r) {
                            ASSERT_EQ(batch[t * n_out + r], alone[r])
                                << n_tokens << " tokens, token " << t << " row " << r;
                        }
                    }
                }
            }
        }
    }
}

TEST(matmul, through_a_callers_parallel_for_and_parallel_ranges_equals_the_pool_overload) {
    cpu::thread_pool pool(2);
    const parallel_for_fn host = pool.as_parallel_for();
    int64_t ranged_calls = 0;
    const parallel_ranges_fn host_ranges = [&](int64_t n, int64_t grain,
                                               const std::function<void(int64_t, int64_t)>& fn) {
        ++ranged_calls;
        pool.parallel_ranges(n, grain, fn);
    };
    for (ggml_type type : {ggml_type::f32, ggml_type::q8_0, ggml_type::q4_k}) {
        const int64_t n_in = 512, n_out = 67;
        const auto w = make_weight(type, n_in, n_out, 99);
        for (int64_t n_tokens : {1, 5, 33}) {
            const auto x = random_floats(n_tokens * n_in, 7);
            std::vector<float> a(n_tokens * n_out), b(n_tokens * n_out), c(n_tokens * n_out);
            cpu::matmul(w.view, x.data(), a.data(), n_tokens, pool);
            cpu::matmul(w.view, x.data(), b.data(), n_tokens, host);
            cpu::matmul(w.view, x.data(), c.data(), n_tokens, host, host_ranges, cpu::activation_recipe::quantized);
            EXPECT_EQ(a, b) << traits(type).name << " n_tokens " << n_tokens;
            EXPECT_EQ(a, c) << traits(type).name << " n_tokens " << n_tokens;
        }
    }
    EXPECT_GT(ranged_calls, 0);  // the dot-product path of decode-sized steps streams through it
}

TEST(matmul, float_activation_recipe_equals_the_integer_recipe_only_for_float_weights) {
    const int64_t n_in = 256, n_out = 17, n_tokens = 3;
    const auto x = random_floats(n_tokens * n_in, 5);
    std::vector<float> a(n_tokens * n_out), b(n_tokens * n_out);

    const auto wf = make_weight(ggml_type::f32, n_in, n_out, 3);
    ref::matmul(wf.view, x.data(), a.data(), n_tokens);
    ref::matmul_float_act(wf.view, x.data(), b.data(), n_tokens);
    EXPECT_EQ(a, b);

    // Q8_0: quantizing the activations moves each output by about 1% of its scale, never 0 everywhere.
    const auto wq = make_weight(ggml_type::q8_0, n_in, n_out, 3);
    ref::matmul(wq.view, x.data(), a.data(), n_tokens);
    ref::matmul_float_act(wq.view, x.data(), b.data(), n_tokens);
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        max_diff = std::max(max_diff, double{std::fabs(a[i] - b[i])});
        max_abs = std::max(max_abs, double{std::fabs(b[i])});
    }
    EXPECT_GT(max_diff, 0.0);
    EXPECT_LT(max_diff, 0.05 * max_abs);
}

TEST(matmul, reference_recipe_of_q8_0_is_an_exact_integer_dot_per_block) {
    // One block: weights 1..32 scaled by d_w, activations chosen so their Q8_0 codes are known.
    std::vector<float> wv(32), xv(32);
    for (int i = 0; i < 32; ++i) {
        wv[i] = static_cast<float>(i + 1) * 0.5f;    // amax 16 -> d = 16/127, codes round(i+1 * 127/32)
        xv[i] = (i % 2 == 0 ? 1.0f : -1.0f) * 2.0f;  // all |x| = amax: codes +-127, d_x = 2/127
    }
    block_q8_0 wb{};
    ref::quantize_row_q8_0(wv.data(), &wb, 32);
    const matmul_weight w{ggml_type::q8_0, &wb, 32, 1, sizeof wb};
    float y = 0;
    ref::matmul(w, xv.data(), &y, 1);
    int32_t sumi = 0;
    for (int i = 0; i < 32; ++i) sumi += wb.qs[i] * (i % 2 == 0 ? 127 : -127);
    const float expected = static_cast<float>(sumi) * (fp16_to_fp32(wb.d) * fp16_to_fp32(fp32_to_fp16(2.0f / 127)));
    EXPECT_FLOAT_EQ(y, expected);
    EXPECT_NE(y, 0.0f);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

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

// ggml-cpu's quantize_row_q8_0 as its x86 (AVX2) build runs it, intrinsics as written there: llama.cpp's Q8_0
// activation blocks for its Q8_0 / Q4_0 products.
__attribute__((target("avx2,f16c"))) void ggml_quantize_row_q8_0_avx2(const float* x, block_q8_0* y, int64_t k) {
    for (int64_t i = 0; i < k / 32; i++) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
               v3 = _mm256_loadu_ps(x + 24);
        x += 32;
        const __m256 sign_bit = _mm256_set1_ps(-0.0f);
        __m256 max_abs = _mm256_andnot_ps(sign_bit, v0);
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v1));
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v2));
        max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v3));
        __m128 max4 = _mm_max_ps(_mm256_extractf128_ps(max_abs, 1), _mm256_castps256_ps128(max_abs));
        max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
        max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
        const float max_scalar = _mm_cvtss_f32(max4);
        const float d = max_scalar / 127.f;
        y[i].d = static_cast<uint16_t>(_cvtss_sh(d, 0));
        const float id = (max_scalar != 0.0f) ? 127.f / max_scalar : 0.0f;
        const __m256 mul = _mm256_set1_ps(id);
        v0 = _mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_ROUND_NEAREST);
        v1 = _mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_ROUND_NEAREST);
        v2 = _mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_ROUND_NEAREST);
        v3 = _mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_ROUND_NEAREST);
        __m256i i0 = _mm256_cvtps_epi32(v0), i1 = _mm256_cvtps_epi32(v1), i2 = _mm256_cvtps_epi32(v2),
                i3 = _mm256_cvtps_epi32(v3);
        i0 = _mm256_packs_epi32(i0, i1);
        i2 = _mm256_packs_epi32(i2, i3);
        i0 = _mm256_packs_epi16(i0, i2);
        i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), i0);
    }
}

TEST(matmul, q8_0_activations_are_llama_cpps_x86_blocks_with_halves_to_even_at_every_level) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) GTEST_SKIP() << "the twin needs AVX2";
    const int64_t n = 64 * 32;
    auto x = testing::random_floats(n, 91);
    // Ties: amax 127 makes the multiplier 1, so k + 0.5 rounds to even (-3.5 -> -4, 2.5 -> 2; ggml's _ref and the
    // weights' quantizer round them away from zero). Then blocks of many magnitudes, and an all-zero block.
    for (int i = 0; i < 32; ++i) x[i] = (i == 0) ? 127.0f : static_cast<float>(i % 9) - 4.5f;
    for (int64_t i = 64; i < n; ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(i / 32 % 40) - 20);
    for (int i = 32; i < 64; ++i) x[i] = 0.0f;
    std::vector<block_q8_0> want(n / qk8_0), got(n / qk8_0);
    ggml_quantize_row_q8_0_avx2(x.data(), want.data(), n);
    ref::quantize_activations_q8_0(x.data(), got.data(), n);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(block_q8_0)));
    for (auto level : cpu::available_levels()) {
        SCOPED_TRACE(testing::level_name(level));
        std::fill(got.begin(), got.end(), block_q8_0{});
        kernels_of(level).quantize_q8_0(x.data(), got.data(), n);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(block_q8_0)));
    }
    // The weights' quantizer (ggml's quantize_row_q8_0_ref) stays as it was: it rounds the tie 2.5 away from zero.
    std::vector<block_q8_0> weights(n / qk8_0);
    ref::quantize_row_q8_0(x.data(), weights.data(), n);
    EXPECT_NE(0, std::memcmp(want.data(), weights.data(), qk8_0 / 32 * sizeof(block_q8_0)));
}

TEST(matmul, activation_quantizers_rounding_and_quantized_values_are_bit_exact_at_every_level) {
    const int64_t n = 4 * qk_k;
    auto x = testing::random_floats(n, 77);
    // Ties of the rounding: a block whose scaled values land on k + 0.5 (amax 127 -> scale 1).
    for (int i = 0; i < 32; ++i) x[i] = (i == 0) ? 127.0f : static_cast<float>(i % 7) - 3.5f;
    for (int i = 32; i < 64; ++i) x[i] = 0.0f;  // an all-zero block
    x[300] = -x[300] * 50;                      // a negative extreme in a Q8_K block
    std::vector<block_q8_0> a0(n / qk8_0), b0(n / qk8_0);
    std::vector<block_q8_k> ak(n / qk_k), bk(n / qk_k);
    ref::quantize_activations_q8_0(x.data(), b0.data(), n);
    ref::quantize_row_q8_k(x.data(), bk.data(), n);
    std::vector<float> special = {0.0f,     -0.0f,      1e-8f,    -6e-8f, 65504.0f, 65520.0f, 1e30f, -INFINITY, NAN,
                                  3.14159f, 1.0000001f, 2.9e-39f, 0.1f,   -0.3f,    1.5f,     2.5f,  7.0e-5f};
    for (int i = 0; i < 100; ++i) special.push_back(x[i] * 1e-3f);
    std::vector<float> r_ref(special.size()), r(special.size());
    for (auto level : cpu::available_levels()) {
        SCOPED_TRACE(testing::level_name(level));
        const auto& k = kernels_of(level);
        k.quantize_q8_0(x.data(), a0.data(), n);
        k.quantize_q8_k(x.data(), ak.data(), n);
        EXPECT_EQ(0, std::memcmp(a0.data(), b0.data(), a0.size() * sizeof(block_q8_0)));
        EXPECT_EQ(0, std::memcmp(ak.data(), bk.data(), ak.size() * sizeof(block_q8_k)));
        k.round_f16(special.data(), r.data(), static_cast<int64_t>(special.size()));
        cpu::detail::round_f16_scalar(special.data(), r_ref.data(), static_cast<int64_t>(special.size()));
        for (size_t i = 0; i < r.size(); ++i) {
            EXPECT_TRUE(r[i] == r_ref[i] || (std::isnan(r[i]) && std::isnan(r_ref[i]))) << "f16 of " << special[i];
        }
        std::vector<float> v(n), v_ref(n);
        k.q8_0_values(x.data(), v.data(), n);
        cpu::detail::q8_0_values_scalar(x.data(), v_ref.data(), n);
        EXPECT_EQ(v, v_ref);
        k.q8_k_values(x.data(), v.data(), n);
        cpu::detail::q8_k_values_scalar(x.data(), v_ref.data(), n);
        EXPECT_EQ(v, v_ref);
        k.round_bf16(special.data(), r.data(), static_cast<int64_t>(special.size()));
        cpu::detail::round_bf16_scalar(special.data(), r_ref.data(), static_cast<int64_t>(special.size()));
        EXPECT_EQ(0, std::memcmp(r.data(), r_ref.data(), r.size() * sizeof(float)));
    }
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TEST(matmul, a_nan_or_inf_in_the_activations_reaches_the_outputs_at_every_level) {
    // Float weights: a NaN activation makes every output of its token NaN (nothing masks it), an infinite
    // one makes them infinite or NaN; other tokens stay finite. Both the dot-product and the GEMM path.
    cpu::thread_pool pool(2);
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16}) {
        const int64_t n_in = 64, n_out = 19;
        const auto w = testing::make_weight(type, n_in, n_out, 8);
        for (int64_t n_tokens : {3, 40}) {
            auto x = testing::random_floats(n_tokens * n_in, 9);
            x[1 * n_in + 5] = NAN;
            x[2 * n_in + 7] = INFINITY;
            for (auto level : cpu::available_levels()) {
                SCOPED_TRACE(std::string(traits(type).name) + " " + testing::level_name(level) + " n_tokens " +
                             std::to_string(n_tokens));
                testing::scoped_level scope(level);
                std::vector<float> y(n_tokens * n_out);
                cpu::matmul(w.view, x.data(), y.data(), n_tokens, pool);
                for (int64_t r = 0; r < n_out; ++r) {
                    EXPECT_TRUE(std::isfinite(y[r]));
                    EXPECT_TRUE(std::isnan(y[n_out + r]));
                    EXPECT_FALSE(std::isfinite(y[2 * n_out + r]));
                }
            }
        }
    }
}

}  // namespace
}  // namespace troupe
