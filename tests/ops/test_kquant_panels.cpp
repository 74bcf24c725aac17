// K-quant weights (Q2_K .. Q6_K) re-laid into k-quant panels (kernels/cpu/kquant_panels.h): the panel form holds every
// row's blocks unchanged where kquant_rows_view says, and cpu::matmul reading the panels equals the same product
// reading the rows bit for bit (the same kernels' arithmetic, ggml's recipe) and ref::matmul, for every token
// count 1..33 and 512 (the groups of four rows, for one token or chunks of four, and Q4_K / Q6_K's integer GEMM), row
// counts that are not a multiple of 16, padded row strides, 1 and 2 threads (the threads' shares of a decode need not
// start a group), a weight split into pieces as kernels.weights: copy places it, and a weight that keeps only its
// panels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kquant_panels.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/weight_panels.h"
#include "kernels/ref/ops.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::make_weight;
using testing::random_floats;

bool avx512_here() {
    for (cpu::dispatch_level l : cpu::available_levels())
        if (l == cpu::dispatch_level::avx512) return true;
    return false;
}

// A test weight and its panel form.
struct panel_weight {
    testing::test_weight base;
    cpu::aligned_buffer panel_bytes;
    matmul_weight with_panels;

    panel_weight(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed, size_t extra_stride = 0)
        : base(make_weight(type, n_in, n_out, seed, extra_stride)) {
        with_panels = base.view;
        void* dst = panel_bytes.reserve(cpu::kquant_panels_bytes(base.view));
        cpu::pack_kquant_panels(base.view, dst, nullptr);
        with_panels.panels = dst;
    }
};

using testing::every_token_count;
using testing::shape_case;

class kquant_panels_types : public ::testing::TestWithParam<ggml_type> {};

TEST_P(kquant_panels_types, hold_every_block_of_every_row_where_the_view_says_and_zero_rows_after_the_last) {
    const ggml_type type = GetParam();
    const shape_case shapes[] = {{256, 1, 0}, {512, 37, 10}, {768, 64, 0}};
    uint32_t seed = 3;
    for (const shape_case& s : shapes) {
        panel_weight pw(type, s.n_in, s.n_out, seed++, s.extra_stride);
        const cpu::kquant_rows_view rows = cpu::kquant_view(pw.base.view);
        const cpu::kquant_rows_view panels = cpu::kquant_view(pw.with_panels);
        ASSERT_FALSE(rows.panels());
        ASSERT_TRUE(panels.panels());
        EXPECT_EQ(cpu::kquant_panel_bytes(pw.base.view) % 64, 0u);
        const size_t block = row_bytes(type, qk_k);
        const int64_t nb = s.n_in / qk_k;
        for (int64_t r = 0; r < s.n_out; ++r) {
            for (int64_t b = 0; b < nb; ++b) {
                ASSERT_EQ(std::memcmp(panels.row(r) + b * panels.block_step, rows.row(r) + b * rows.block_step, block),
                          0)
                    << "row " << r << " block " << b;
            }
            if (r % cpu::kquant_group_rows == 0 && r + 3 < s.n_out) {  // a group: rows row_stride apart
                for (int i = 1; i < 4; ++i) EXPECT_EQ(panels.row(r + i), panels.row(r) + i * panels.row_stride);
            }
        }
        const int64_t padded = (s.n_out + 15) / 16 * 16;  // the last panel's padding rows: zero blocks
        for (int64_t r = s.n_out; r < padded; ++r) {
            for (size_t i = 0; i < block; ++i) ASSERT_EQ(panels.row(r)[i], 0) << "padding row " << r << " byte " << i;
        }
    }
}

TEST_P(kquant_panels_types, products_equal_the_rows_and_the_reference_bit_for_bit_at_every_token_count) {
    const ggml_type type = GetParam();
    if (!avx512_here()) GTEST_SKIP() << "no AVX-512 VNNI: the k-quant panel kernels do not run on this CPU";
    testing::scoped_level scope(cpu::dispatch_level::avx512);
    ASSERT_TRUE(cpu::kquant_panels_supported(type, cpu::activation_recipe::quantized));
    cpu::thread_pool one(1), two(2);
    const shape_case shapes[] = {{256, 1, 0}, {512, 37, 10}, {768, 67, 0}, {1024, 48, 0}};
    uint32_t seed = 21;
    for (const shape_case& s : shapes) {
        panel_weight pw(type, s.n_in, s.n_out, seed++, s.extra_stride);
        for (int64_t n_tokens : every_token_count()) {
            if (n_tokens == 512 && s.n_in > 256) continue;  // keeps the reference's cost down
            SCOPED_TRACE(std::string(traits(type).name) + " n_in " + std::to_string(s.n_in) + " n_out " +
                         std::to_string(s.n_out) + " n_tokens " + std::to_string(n_tokens));
            const auto x = random_floats(n_tokens * s.n_in, seed++);
            std::vector<float> y_ref(n_tokens * s.n_out), rows(y_ref.size(), NAN);
            ref::matmul(pw.base.view, x.data(), y_ref.data(), n_tokens);
            cpu::matmul(pw.base.view, x.data(), rows.data(), n_tokens, two);
            std::vector<float> y1(y_ref.size(), NAN), y2(y_ref.size(), NAN);
            cpu::matmul(pw.with_panels, x.data(), y1.data(), n_tokens, one);
            cpu::matmul(pw.with_panels, x.data(), y2.data(), n_tokens, two);
            for (size_t i = 0; i < y_ref.size(); ++i) {
                ASSERT_EQ(y1[i], rows[i]) << "1 thread, output " << i;
                ASSERT_EQ(y2[i], rows[i]) << "2 threads, output " << i;
                ASSERT_EQ(y1[i], y_ref[i]) << "reference, output " << i;
            }
        }
    }
}

// As kernels.weights: copy places a weight: two pieces (each thread's shard, starting a panel), each with its own
// panels and the rows left in the file; and the same with the rows gone (a shard that spans the parts of a fused
// q/k/v keeps only its panels).
TEST_P(kquant_panels_types, pieces_and_panels_without_rows_give_the_same_products) {
    const ggml_type type = GetParam();
    if (!avx512_here()) GTEST_SKIP() << "no AVX-512 VNNI: the k-quant panel kernels do not run on this CPU";
    testing::scoped_level scope(cpu::dispatch_level::avx512);
    cpu::thread_pool two(2);
    const int64_t n_in = 1024, n_out = 53, split = 32;  // 54K multiply-adds a token: the pool runs them
    panel_weight pw(type, n_in, n_out, 77);
    const matmul_weight first{type, pw.base.view.data, n_in, split, pw.base.view.row_stride};
    const matmul_weight second{type, static_cast<const uint8_t*>(pw.base.view.data) + split * pw.base.view.row_stride,
                               n_in, n_out - split, pw.base.view.row_stride};
    cpu::aligned_buffer a, b;
    void* pa = a.reserve(cpu::panels_bytes(first));
    void* pb = b.reserve(cpu::panels_bytes(second));
    (void)cpu::pack_panels(first, pa, nullptr);
    (void)cpu::pack_panels(second, pb, nullptr);
    for (bool keep_rows : {true, false}) {
        const weight_piece pieces[] = {{0, keep_rows ? first.data : nullptr, pa},
                                       {split, keep_rows ? second.data : nullptr, pb}};
        matmul_weight w = pw.base.view;
        w.pieces = pieces;
        w.n_pieces = 2;
        for (int64_t n_tokens : {1, 2, 3, 4, 7, 16, 40}) {
            const auto x = random_floats(n_tokens * n_in, 5 + static_cast<uint32_t>(n_tokens));
            std::vector<float> rows(n_tokens * n_out, NAN), pieced(rows.size(), NAN);
            cpu::matmul(pw.base.view, x.data(), rows.data(), n_tokens, two);
            cpu::matmul(w, x.data(), pieced.data(), n_tokens, two);
            for (size_t i = 0; i < rows.size(); ++i)
                ASSERT_EQ(pieced[i], rows[i])
                    << (keep_rows ? "with rows" : "panels only") << ", n_tokens " << n_tokens << ", output " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(types, kquant_panels_types,
                         ::testing::Values(ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k, ggml_type::q5_k,
                                           ggml_type::q6_k),
                         [](const ::testing::TestParamInfo<ggml_type>& info) {
                             return std::string(traits(info.param).name);
                         });

TEST(kquant_panels, are_packed_only_where_every_kernel_of_the_level_reads_them) {
    for (cpu::dispatch_level level : cpu::available_levels()) {
        testing::scoped_level scope(level);
        const bool avx512 = level == cpu::dispatch_level::avx512;
        for (ggml_type type : {ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k}) {
            EXPECT_EQ(cpu::kquant_panels_supported(type, cpu::activation_recipe::quantized), avx512)
                << traits(type).name << " at " << testing::level_name(level);
            EXPECT_FALSE(cpu::kquant_panels_supported(type, cpu::activation_recipe::float32))
                << "the float-activation kernels read rows";
            EXPECT_EQ(cpu::panels_supported(type, cpu::activation_recipe::quantized), avx512);
        }
        for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_0, ggml_type::q5_0, ggml_type::f16, ggml_type::f32})
            EXPECT_FALSE(cpu::kquant_panels_supported(type, cpu::activation_recipe::quantized)) << traits(type).name;
    }
}

}  // namespace
}  // namespace troupe
