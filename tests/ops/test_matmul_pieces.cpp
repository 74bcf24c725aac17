// A weight stored in pieces (matmul_weight::pieces: each thread's share of a weight in its own region, or fused
// q/k/v parts read where they lie) multiplies exactly like the same rows stored in one place: every type, both
// recipes, the row kernels, the GEMMs and the q8 panels, at decode and prefill token counts, on one and two threads.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q8_panels.h"
#include "tests/ops/ops_test_util.h"

namespace troupe {
namespace {

// The rows of `whole` copied into separate buffers at the given first rows (piece 0 starts at row 0), in reverse
// order of address so nothing can be read across a piece boundary by accident.
struct pieced_weight {
    std::vector<std::vector<uint8_t>> rows;
    std::vector<cpu::aligned_buffer> panels;
    std::vector<weight_piece> pieces;
    matmul_weight view{};
};

pieced_weight cut(const matmul_weight& whole, const std::vector<int64_t>& firsts, bool with_panels) {
    pieced_weight p;
    p.rows.resize(firsts.size());
    p.panels = std::vector<cpu::aligned_buffer>(firsts.size());
    for (size_t i = firsts.size(); i-- > 0;) {
        const int64_t begin = firsts[i], end = i + 1 < firsts.size() ? firsts[i + 1] : whole.n_out;
        const auto* src = static_cast<const uint8_t*>(whole.data) + begin * whole.row_stride;
        p.rows[i].assign(src, src + (end - begin) * whole.row_stride);
    }
    panel_codes codes = panel_codes::plus_128;
    for (size_t i = 0; i < firsts.size(); ++i) {
        const int64_t begin = firsts[i], end = i + 1 < firsts.size() ? firsts[i + 1] : whole.n_out;
        const void* panels = nullptr;
        if (with_panels) {
            const matmul_weight piece{whole.type, p.rows[i].data(), whole.n_in, end - begin, whole.row_stride};
            void* dst = p.panels[i].reserve(cpu::q8_panels_bytes(piece));
            codes = cpu::pack_q8_panels(piece, dst, nullptr);
            panels = dst;
        }
        p.pieces.push_back(weight_piece{begin, p.rows[i].data(), panels});
    }
    p.view = matmul_weight{whole.type, nullptr, whole.n_in, whole.n_out, whole.row_stride};
    p.view.codes = codes;
    p.view.pieces = p.pieces.data();
    p.view.n_pieces = static_cast<int32_t>(p.pieces.size());
    return p;
}

void expect_pieces_multiply_like_the_whole(const matmul_weight& whole, const matmul_weight& pieced,
                                           cpu::activation_recipe recipe) {
    for (int threads : {1, 2}) {
        cpu::thread_pool pool(threads);
        for (int64_t n_tokens : {1, 3, 16, 40}) {
            const std::vector<float> x = testing::random_floats(n_tokens * whole.n_in, 9);
            std::vector<float> want(n_tokens * whole.n_out), got(n_tokens * whole.n_out, -1.0f);
            cpu::matmul(whole, x.data(), want.data(), n_tokens, pool, recipe);
            cpu::matmul(pieced, x.data(), got.data(), n_tokens, pool, recipe);
            ASSERT_EQ(got, want) << threads << " threads, " << n_tokens << " tokens";
        }
    }
}

TEST(matmul_pieces, rows_in_pieces_multiply_exactly_like_rows_in_one_place) {
    for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q8_0, ggml_type::q4_0,
                           ggml_type::q4_k, ggml_type::q6_k}) {
        SCOPED_TRACE(traits(type).name);
        const testing::test_weight w = testing::make_weight(type, 512, 203, 4);
        // Two even-ish pieces (threads), uneven ones, and a piece of one row.
        for (const std::vector<int64_t>& firsts :
             {std::vector<int64_t>{0, 101}, std::vector<int64_t>{0, 7, 150, 151}, std::vector<int64_t>{0}}) {
            const pieced_weight p = cut(w.view, firsts, /*with_panels=*/false);
            expect_pieces_multiply_like_the_whole(w.view, p.view, cpu::activation_recipe::quantized);
            expect_pieces_multiply_like_the_whole(w.view, p.view, cpu::activation_recipe::float32);
        }
    }
}

TEST(matmul_pieces, panels_in_pieces_multiply_exactly_like_panels_in_one_place) {
    for (ggml_type type : {ggml_type::q8_0, ggml_type::q4_0}) {
        SCOPED_TRACE(traits(type).name);
        if (!cpu::q8_panels_supported(type, cpu::activation_recipe::quantized))
            GTEST_SKIP() << "no AVX-512 VNNI: the panel kernels do not run on this CPU";
        const testing::test_weight w = testing::make_weight(type, 512, 203, 6);  // the last panel padded
        cpu::aligned_buffer whole_panels;
        matmul_weight whole = w.view;
        whole.panels = whole_panels.reserve(cpu::q8_panels_bytes(w.view));
        whole.codes = cpu::pack_q8_panels(w.view, const_cast<void*>(whole.panels), nullptr);
        // Pieces start panels (multiples of 16 rows).
        for (const std::vector<int64_t>& firsts : {std::vector<int64_t>{0, 96}, std::vector<int64_t>{0, 16, 32, 192}}) {
            const pieced_weight p = cut(w.view, firsts, /*with_panels=*/true);
            expect_pieces_multiply_like_the_whole(whole, p.view, cpu::activation_recipe::quantized);
            expect_pieces_multiply_like_the_whole(whole, p.view, cpu::activation_recipe::float32);
        }
    }
}

}  // namespace
}  // namespace troupe
