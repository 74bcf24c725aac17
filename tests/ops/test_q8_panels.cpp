// Q8_0 / Q4_0 weights packed into row panels (kernels/cpu/q8_panels.h) against the reference recipes:
// cpu::matmul with panels set must equal ref::matmul bit for bit (same int sums per block, the same float
// operations in block order), and stay within the row path's tolerance of it, for row counts that are not a
// multiple of 16, every token count 1..33 and 512, odd block counts and padded row strides, with 1 and 2
// threads, at every level this CPU runs that has panel kernels (AVX-512 VNNI; AVX2, quantized activations only).
// With float activations (W8A16, AVX-512) it must stay within float rounding of ref::matmul_float_act
// (|y - y_ref| <= 4e-6 * sum_k |w_k x_k|, as the row kernels), 1 and 2 threads bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q8_panels.h"
#include "kernels/ref/ops.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::make_weight;
using testing::random_floats;

// A test weight with its panel form.
struct panel_weight {
    testing::test_weight base;
    cpu::aligned_buffer panel_bytes;
    matmul_weight with_panels;
};

void pack(panel_weight& pw, cpu::thread_pool* pool, panel_codes codes) {
    pw.with_panels = pw.base.view;
    void* dst = pw.panel_bytes.reserve(cpu::q8_panels_bytes(pw.base.view));
    cpu::pack_q8_panels(pw.base.view, dst, pool, codes);
    pw.with_panels.panels = dst;
    pw.with_panels.codes = codes;
}

// As a loader packs: in the form the active level's kernels read fastest.
void pack(panel_weight& pw, cpu::thread_pool* pool) {
    pw.with_panels = pw.base.view;
    void* dst = pw.panel_bytes.reserve(cpu::q8_panels_bytes(pw.base.view));
    pw.with_panels.codes = cpu::pack_q8_panels(pw.base.view, dst, pool);
    pw.with_panels.panels = dst;
}

// The Q8_0 code forms every kernel must read (packed at AVX-512 VNNI or at AVX2); Q4_0 panels have one form.
std::vector<panel_codes> code_forms(ggml_type type) {
    if (type == ggml_type::q4_0) return {panel_codes::as_is};
    return {panel_codes::plus_128, panel_codes::as_is};
}

std::string form_name(panel_codes codes) {
    return codes == panel_codes::plus_128 ? "codes + 128" : "codes as they are";
}

bool panels_run_here(ggml_type type, cpu::activation_recipe recipe = cpu::activation_recipe::quantized) {
    return cpu::q8_panels_supported(type, recipe);
}

// The levels this CPU runs whose kernels have panels for type and recipe.
std::vector<cpu::dispatch_level> panel_levels(ggml_type type, cpu::activation_recipe recipe) {
    std::vector<cpu::dispatch_level> levels;
    for (cpu::dispatch_level level : cpu::available_levels()) {
        testing::scoped_level scope(level);
        if (cpu::q8_panels_supported(type, recipe)) levels.push_back(level);
    }
    return levels;
}

const std::vector<cpu::activation_recipe> k_recipes = {cpu::activation_recipe::quantized,
                                                       cpu::activation_recipe::float32};

using testing::every_token_count;
using testing::shape_case;

class q8_panels_types : public ::testing::TestWithParam<ggml_type> {};

TEST_P(q8_panels_types, equal_the_reference_recipe_bit_for_bit_at_every_token_count_and_thread_count) {
    const ggml_type type = GetParam();
    const auto levels = panel_levels(type, cpu::activation_recipe::quantized);
    if (levels.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 VNNI: the panel kernels do not run on this CPU";
    cpu::thread_pool one(1), two(2);
    const shape_case shapes[] = {{32, 1, 0}, {96, 17, 6}, {256, 67, 0}, {768, 40, 0}};
    uint32_t seed = 11;
    for (const shape_case& s : shapes) {
        panel_weight pw{make_weight(type, s.n_in, s.n_out, seed++, s.extra_stride), {}, {}};
        for (int64_t n_tokens : every_token_count()) {
            if (n_tokens == 512 && s.n_in > 256) continue;  // keeps the reference's cost down
            const auto x = random_floats(n_tokens * s.n_in, seed++);
            std::vector<float> y_ref(n_tokens * s.n_out);
            ref::matmul(pw.base.view, x.data(), y_ref.data(), n_tokens);
            for (panel_codes codes : code_forms(type)) {
                pack(pw, &two, codes);
                for (cpu::dispatch_level level : levels) {
                    testing::scoped_level scope(level);
                    SCOPED_TRACE(std::string(traits(type).name) + " n_in " + std::to_string(s.n_in) + " n_out " +
                                 std::to_string(s.n_out) + " n_tokens " + std::to_string(n_tokens) + " level " +
                                 testing::level_name(level) + ", " + form_name(codes));
                    std::vector<float> y1(y_ref.size(), NAN), y2(y_ref.size(), NAN);
                    cpu::matmul(pw.with_panels, x.data(), y1.data(), n_tokens, one);
                    cpu::matmul(pw.with_panels, x.data(), y2.data(), n_tokens, two);
                    for (size_t i = 0; i < y_ref.size(); ++i) {
                        ASSERT_EQ(y1[i], y_ref[i]) << "1 thread, output " << i;
                        ASSERT_EQ(y2[i], y_ref[i]) << "2 threads, output " << i;
                    }
                }
            }
        }
    }
}

// Weights at the extremes of their codes (Q8_0 -128 and 127, Q4_0 0 and 15) against activations quantized to
// +-127: the int16 partial sums of the AVX2 kernels at their largest must not saturate.
TEST_P(q8_panels_types, do_not_saturate_at_the_extreme_codes) {
    const ggml_type type = GetParam();
    const auto levels = panel_levels(type, cpu::activation_recipe::quantized);
    if (levels.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 VNNI: the panel kernels do not run on this CPU";
    const int64_t n_in = 128, n_out = 16;
    testing::test_weight w = make_weight(type, n_in, n_out, 7);
    for (int64_t r = 0; r < n_out; ++r) {  // row r: every code at its maximum or minimum, by row parity
        auto* row = static_cast<uint8_t*>(const_cast<void*>(w.view.data)) + r * w.view.row_stride;
        for (int64_t b = 0; b < n_in / 32; ++b) {
            if (type == ggml_type::q8_0) {
                auto* blk = reinterpret_cast<block_q8_0*>(row) + b;
                for (auto& q : blk->qs) q = static_cast<int8_t>(r % 2 ? -128 : 127);
            } else {
                auto* blk = reinterpret_cast<block_q4_0*>(row) + b;
                for (auto& q : blk->qs) q = static_cast<uint8_t>(r % 2 ? 0x00 : 0xff);
            }
        }
    }
    panel_weight pw{std::move(w), {}, {}};
    cpu::thread_pool pool(1);
    for (panel_codes codes : code_forms(type)) {
        pack(pw, nullptr, codes);
        for (float sign : {1.0f, -1.0f}) {
            std::vector<float> x(2 * n_in);
            for (int64_t i = 0; i < n_in; ++i) x[i] = sign;                         // token 0: all +-1 -> codes +-127
            for (int64_t i = 0; i < n_in; ++i) x[n_in + i] = i % 2 ? sign : -sign;  // token 1: alternating
            std::vector<float> y_ref(2 * n_out);
            ref::matmul(pw.base.view, x.data(), y_ref.data(), 2);
            for (cpu::dispatch_level level : levels) {
                testing::scoped_level scope(level);
                for (int64_t n_tokens : {1, 2}) {
                    std::vector<float> y(n_tokens * n_out, NAN);
                    cpu::matmul(pw.with_panels, x.data(), y.data(), n_tokens, pool);
                    for (int64_t i = 0; i < n_tokens * n_out; ++i)
                        ASSERT_EQ(y[i], y_ref[i])
                            << "level " << testing::level_name(level) << ", " << form_name(codes) << ", output " << i;
                }
            }
        }
    }
}

TEST_P(q8_panels_types, agree_with_the_row_kernels_within_float_rounding) {
    const ggml_type type = GetParam();
    if (!panels_run_here(type)) GTEST_SKIP() << "no AVX2 or AVX-512 VNNI: the panel kernels do not run on this CPU";
    cpu::thread_pool pool(2);
    const int64_t n_in = 512, n_out = 83;
    panel_weight pw{make_weight(type, n_in, n_out, 5), {}, {}};
    pack(pw, nullptr);
    for (int64_t n_tokens : {1, 3, 16, 40}) {
        const auto x = random_floats(n_tokens * n_in, 9);
        std::vector<float> rows(n_tokens * n_out), panels(rows.size());
        cpu::matmul(pw.base.view, x.data(), rows.data(), n_tokens, pool);
        cpu::matmul(pw.with_panels, x.data(), panels.data(), n_tokens, pool);
        for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t r = 0; r < n_out; ++r) {
                double bound = 0;  // sum_k |w_k x_k|: the scale of float rounding differences
                for (int64_t k = 0; k < n_in; ++k)
                    bound += std::fabs(pw.base.dequantized[r * n_in + k] * x[t * n_in + k]);
                const size_t i = t * n_out + r;
                ASSERT_LE(std::fabs(panels[i] - rows[i]), 4e-6 * bound)
                    << "n_tokens " << n_tokens << " output " << i << ": " << panels[i] << " vs rows " << rows[i];
            }
        }
    }
}

TEST_P(q8_panels_types, with_float_activations_equal_the_float_reference_within_float_rounding) {
    const ggml_type type = GetParam();
    if (!panels_run_here(type, cpu::activation_recipe::float32))
        GTEST_SKIP() << "no AVX-512 VNNI: the float-activation panel kernels do not run on this CPU";
    cpu::thread_pool one(1), two(2);
    const shape_case shapes[] = {{32, 1, 0}, {96, 17, 6}, {256, 67, 0}};
    uint32_t seed = 31;
    float worst_ratio = 0;
    for (panel_codes codes : code_forms(type)) {
        for (const shape_case& s : shapes) {
            panel_weight pw{make_weight(type, s.n_in, s.n_out, seed++, s.extra_stride), {}, {}};
            pack(pw, &two, codes);
            for (int64_t n_tokens : every_token_count()) {
                SCOPED_TRACE(std::string(traits(type).name) + " n_in " + std::to_string(s.n_in) + " n_out " +
                             std::to_string(s.n_out) + " n_tokens " + std::to_string(n_tokens) + ", " +
                             form_name(codes));
                const auto x = random_floats(n_tokens * s.n_in, seed++);
                std::vector<float> y_ref(n_tokens * s.n_out), y1(y_ref.size(), NAN), y2(y_ref.size(), NAN);
                ref::matmul_float_act(pw.base.view, x.data(), y_ref.data(), n_tokens);
                cpu::matmul(pw.with_panels, x.data(), y1.data(), n_tokens, one, cpu::activation_recipe::float32);
                cpu::matmul(pw.with_panels, x.data(), y2.data(), n_tokens, two, cpu::activation_recipe::float32);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    for (int64_t r = 0; r < s.n_out; ++r) {
                        double bound = 0;  // sum_k |w_k x_k|
                        for (int64_t k = 0; k < s.n_in; ++k)
                            bound += std::fabs(pw.base.dequantized[r * s.n_in + k] * x[t * s.n_in + k]);
                        const size_t i = t * s.n_out + r;
                        ASSERT_EQ(y1[i], y2[i]) << "1 vs 2 threads differ at output " << i;
                        const double err = std::fabs(y1[i] - y_ref[i]);
                        ASSERT_LE(err, 4e-6 * bound + 1e-30) << "output " << i << ": " << y1[i] << " vs " << y_ref[i];
                        if (bound > 0) worst_ratio = std::max(worst_ratio, static_cast<float>(err / bound));
                    }
                }
            }
        }
    }
    std::printf("  %s float activations: worst |y - y_ref| / sum|w x| = %.2e (tolerance 4e-6)\n",
                std::string(traits(type).name).c_str(), worst_ratio);
}

INSTANTIATE_TEST_SUITE_P(panel_types, q8_panels_types, ::testing::Values(ggml_type::q8_0, ggml_type::q4_0),
                         [](const auto& info) { return std::string(traits(info.param).name); });

TEST(q8_panels, size_is_the_original_row_bytes_rounded_up_to_whole_panels_and_cache_lines) {
    // Q8_0: 2 blocks of 16 rows = 64 B of scales + 16 zmm = 17 lines = 16 * 2 * 34 B.
    const matmul_weight q8{ggml_type::q8_0, nullptr, 768, 768, row_bytes(ggml_type::q8_0, 768)};
    EXPECT_EQ(cpu::q8_panels_bytes(q8), 768u * row_bytes(ggml_type::q8_0, 768));
    const matmul_weight q4{ggml_type::q4_0, nullptr, 2048, 32, row_bytes(ggml_type::q4_0, 2048)};
    EXPECT_EQ(cpu::q8_panels_bytes(q4), 32u * row_bytes(ggml_type::q4_0, 2048));
    // 17 rows -> 2 panels; 3 blocks -> a full group (1088 B) and a half one (64 + 512 B).
    const matmul_weight odd{ggml_type::q8_0, nullptr, 96, 17, row_bytes(ggml_type::q8_0, 96)};
    EXPECT_EQ(cpu::q8_panels_bytes(odd), 2u * (1088 + 576));
}

TEST(q8_panels, are_packed_in_the_code_form_of_the_level_that_packs_them) {
    const auto w = make_weight(ggml_type::q8_0, 64, 16, 2);
    cpu::aligned_buffer dst;
    for (cpu::dispatch_level level : cpu::available_levels()) {
        testing::scoped_level scope(level);
        if (!cpu::q8_panels_supported(ggml_type::q8_0, cpu::activation_recipe::quantized)) continue;
        const panel_codes codes = cpu::pack_q8_panels(w.view, dst.reserve(cpu::q8_panels_bytes(w.view)), nullptr);
        EXPECT_EQ(codes, level == cpu::dispatch_level::avx512 ? panel_codes::plus_128 : panel_codes::as_is)
            << testing::level_name(level);
        // Row 0's first code, in the first quad of the first block (after 64 B of scales).
        const int8_t code = reinterpret_cast<const block_q8_0*>(w.view.data)->qs[0];
        const uint8_t stored = static_cast<const uint8_t*>(dst.reserve(0))[64];
        EXPECT_EQ(stored, static_cast<uint8_t>(codes == panel_codes::plus_128 ? code + 128 : code));
    }
}

TEST(q8_panels, packing_with_a_pool_writes_the_same_bytes_as_without) {
    cpu::thread_pool pool(2);
    for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_0}) {
        const auto w = make_weight(type, 160, 70, 3, 4);
        const size_t n = cpu::q8_panels_bytes(w.view);
        cpu::aligned_buffer a, b;
        std::memset(a.reserve(n), 0xab, n);
        std::memset(b.reserve(n), 0xcd, n);
        const panel_codes without_pool = cpu::pack_q8_panels(w.view, a.reserve(n), nullptr);
        EXPECT_EQ(cpu::pack_q8_panels(w.view, b.reserve(n), &pool), without_pool);
        EXPECT_EQ(0, std::memcmp(a.reserve(n), b.reserve(n), n)) << traits(type).name;
    }
}

TEST(q8_panels, are_supported_for_q8_0_and_q4_0_at_avx512_and_for_quantized_activations_at_avx2) {
    for (cpu::dispatch_level level : cpu::available_levels()) {
        testing::scoped_level scope(level);
        SCOPED_TRACE(testing::level_name(level));
        EXPECT_FALSE(cpu::q8_panels_supported(ggml_type::q4_k, cpu::activation_recipe::quantized));
        EXPECT_FALSE(cpu::q8_panels_supported(ggml_type::f32, cpu::activation_recipe::quantized));
        const bool avx512 = level == cpu::dispatch_level::avx512, avx2 = level == cpu::dispatch_level::avx2;
        for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_0}) {
            EXPECT_EQ(cpu::q8_panels_supported(type, cpu::activation_recipe::quantized), avx512 || avx2);
            EXPECT_EQ(cpu::q8_panels_supported(type, cpu::activation_recipe::float32), avx512);
        }
    }
}

TEST(q8_panels, never_read_the_rows_with_a_recipe_they_support) {
    if (!panels_run_here(ggml_type::q4_0))
        GTEST_SKIP() << "no AVX2 or AVX-512 VNNI: the panel kernels do not run on this CPU";
    cpu::thread_pool pool(2);
    const int64_t n_in = 128, n_out = 35;
    panel_weight pw{make_weight(ggml_type::q4_0, n_in, n_out, 17), {}, {}};
    pack(pw, &pool);
    matmul_weight panels_only = pw.with_panels;
    panels_only.data = nullptr;  // the loader may drop the rows (q8_panels.h)
    for (auto recipe : k_recipes) {
        if (!panels_run_here(ggml_type::q4_0, recipe)) continue;
        for (int64_t n_tokens : {1, 2, 16, 40}) {
            const auto x = random_floats(n_tokens * n_in, 3);
            std::vector<float> a(n_tokens * n_out), b(a.size());
            cpu::matmul(pw.with_panels, x.data(), a.data(), n_tokens, pool, recipe);
            cpu::matmul(panels_only, x.data(), b.data(), n_tokens, pool, recipe);
            EXPECT_EQ(a, b) << "n_tokens " << n_tokens;
        }
    }
}

TEST(q8_panels, through_a_callers_parallel_for_and_parallel_ranges_equal_the_pool_overload) {
    if (!panels_run_here(ggml_type::q8_0))
        GTEST_SKIP() << "no AVX2 or AVX-512 VNNI: the panel kernels do not run on this CPU";
    cpu::thread_pool pool(2);
    const parallel_for_fn host = pool.as_parallel_for();
    int64_t ranged_calls = 0;  // decode-sized steps must stream through the caller's parallel_ranges
    const parallel_ranges_fn host_ranges = [&](int64_t n, int64_t grain,
                                               const std::function<void(int64_t, int64_t)>& fn) {
        ++ranged_calls;
        pool.parallel_ranges(n, grain, fn);
    };
    const int64_t n_in = 512, n_out = 67;
    panel_weight pw{make_weight(ggml_type::q8_0, n_in, n_out, 41), {}, {}};
    pack(pw, nullptr);
    for (auto recipe : k_recipes) {
        if (!panels_run_here(ggml_type::q8_0, recipe)) continue;
        for (int64_t n_tokens : {1, 5, 33}) {
            const auto x = random_floats(n_tokens * n_in, 13);
            std::vector<float> a(n_tokens * n_out), b(a.size()), c(a.size());
            cpu::matmul(pw.with_panels, x.data(), a.data(), n_tokens, pool, recipe);
            cpu::matmul(pw.with_panels, x.data(), b.data(), n_tokens, host, recipe);
            const int64_t calls_before = ranged_calls;
            cpu::matmul(pw.with_panels, x.data(), c.data(), n_tokens, host, host_ranges, recipe);
            EXPECT_EQ(a, b) << "n_tokens " << n_tokens;
            EXPECT_EQ(a, c) << "n_tokens " << n_tokens;
            EXPECT_EQ(ranged_calls - calls_before, n_tokens <= 16 ? 1 : 0) << "n_tokens " << n_tokens;
        }
    }
}

TEST(q8_panels, a_weight_with_panels_falls_back_to_its_rows_where_the_level_has_no_panel_kernel) {
    cpu::thread_pool pool(2);
    const int64_t n_in = 96, n_out = 17, n_tokens = 3;
    panel_weight pw{make_weight(ggml_type::q8_0, n_in, n_out, 21), {}, {}};
    pack(pw, nullptr);
    const auto x = random_floats(n_tokens * n_in, 4);
    int fallbacks = 0;
    for (cpu::dispatch_level level : cpu::available_levels()) {
        testing::scoped_level scope(level);
        for (auto recipe : k_recipes) {
            if (cpu::q8_panels_supported(ggml_type::q8_0, recipe)) continue;
            ++fallbacks;
            std::vector<float> a(n_tokens * n_out), b(a.size());
            cpu::matmul(pw.base.view, x.data(), a.data(), n_tokens, pool, recipe);
            cpu::matmul(pw.with_panels, x.data(), b.data(), n_tokens, pool, recipe);
            EXPECT_EQ(a, b) << "level " << testing::level_name(level);
        }
    }
    EXPECT_GT(fallbacks, 0);  // the scalar level (every CPU) has no panel kernel
}

}  // namespace
}  // namespace troupe
