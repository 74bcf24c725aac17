// The integer GEMMs for Q4_K / Q6_K weights (kernels/cpu/gemm_kquant_*.cpp) against the dot kernels of their level:
// both compute ggml's x86 recipe (kernels/ref/kquant_dot.h), so every output must be bit-equal, for every token
// count 1..33 (every micro-tile size and remainder), row counts that are not a multiple of the row group, row
// ranges starting anywhere (as the threads' work items), padded row strides, and raw random blocks (every scale,
// min and quant value, activations at +-127) besides weights quantized from floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/fp16.h"
#include "kernels/ref/quants.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using gemm_fn = void (*)(const matmul_weight&, cpu::detail::prepared_x, float*, int64_t, int64_t, int64_t, int64_t);

bool level_here(cpu::dispatch_level level) {
    for (cpu::dispatch_level l : cpu::available_levels())
        if (l == level) return true;
    return false;
}

// A weight of raw random blocks: every byte random, then finite scales d / dmin.
testing::test_weight raw_weight(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed) {
    testing::test_weight w = testing::make_weight(type, n_in, n_out, seed);
    std::mt19937 rng(seed);
    for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    const int64_t nb = n_in / qk_k;
    for (int64_t r = 0; r < n_out; ++r) {
        uint8_t* row = w.bytes.data() + r * w.view.row_stride;
        for (int64_t b = 0; b < nb; ++b) {
            if (type == ggml_type::q4_k) {
                auto* blk = reinterpret_cast<block_q4_k*>(row) + b;
                blk->d = fp32_to_fp16(scale(rng));
                blk->dmin = fp32_to_fp16(scale(rng));
            } else {
                reinterpret_cast<block_q6_k*>(row)[b].d = fp32_to_fp16(scale(rng));
            }
        }
    }
    w.view.data = w.bytes.data();
    return w;
}

// Q8_K rows of random floats; with extreme, every block holds values quantized to +-127.
std::vector<block_q8_k> activations(int64_t n_tokens, int64_t n_in, uint32_t seed, bool extreme) {
    std::vector<float> x = testing::random_floats(n_tokens * n_in, seed);
    if (extreme) {
        for (size_t i = 0; i < x.size(); i += 3) x[i] = (i / 3) % 2 ? 8.0f : -8.0f;
    }
    std::vector<block_q8_k> q(n_tokens * n_in / qk_k);
    for (int64_t t = 0; t < n_tokens; ++t)
        ref::quantize_row_q8_k(x.data() + t * n_in, q.data() + t * n_in / qk_k, n_in);
    return q;
}

// Every token count 1..33 over the whole rows and over two ranges split at an odd row: the GEMM equals the dot
// kernels bit for bit.
void expect_gemm_equals_rows(const cpu::detail::matmul_kernels& k, gemm_fn gemm, const testing::test_weight& w,
                             uint32_t seed, bool extreme) {
    const int64_t n_in = w.view.n_in, n_out = w.view.n_out;
    for (int64_t n_tokens = 1; n_tokens <= 33; ++n_tokens) {
        SCOPED_TRACE(std::string(traits(w.view.type).name) + " n_in " + std::to_string(n_in) + " n_out " +
                     std::to_string(n_out) + " n_tokens " + std::to_string(n_tokens) + (extreme ? " extreme" : ""));
        const auto xq = activations(n_tokens, n_in, seed + static_cast<uint32_t>(n_tokens), extreme);
        const cpu::detail::prepared_x px{xq.data(), static_cast<size_t>(n_in / qk_k) * sizeof(block_q8_k)};
        std::vector<float> y_rows(n_tokens * n_out, NAN), y_gemm(n_tokens * n_out, NAN);
        k.rows(w.view, px, y_rows.data(), n_out, n_tokens, 0, n_out);
        const int64_t split = n_out > 3 ? n_out / 2 | 1 : n_out;
        gemm(w.view, px, y_gemm.data(), n_out, n_tokens, 0, split);
        if (split < n_out) gemm(w.view, px, y_gemm.data(), n_out, n_tokens, split, n_out);
        for (size_t i = 0; i < y_rows.size(); ++i) {
            ASSERT_FALSE(std::isnan(y_rows[i])) << "output " << i;
            ASSERT_EQ(std::memcmp(&y_gemm[i], &y_rows[i], sizeof(float)), 0)
                << "output " << i << " (token " << i / n_out << ", row " << i % n_out << "): gemm " << y_gemm[i]
                << " vs rows " << y_rows[i];
        }
    }
}

void run_level(cpu::dispatch_level level, const cpu::detail::matmul_kernels& k, gemm_fn gemm) {
    if (!level_here(level)) GTEST_SKIP() << "this CPU has no " << testing::level_name(level) << " level";
    ASSERT_NE(gemm, nullptr);
    testing::scoped_level scope(level);
    uint32_t seed = 900;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k}) {
        // (n_in, n_out, extra stride): one super-block, odd super-block counts, row counts around the groups.
        for (const auto& [n_in, n_out, pad] : {std::tuple<int64_t, int64_t, size_t>{256, 1, 0},
                                               {256, 7, 6},
                                               {768, 5, 0},
                                               {1280, 13, 2},
                                               {2048, 18, 0}}) {
            const uint32_t s = seed;
            seed += 4;
            expect_gemm_equals_rows(k, gemm, testing::make_weight(type, n_in, n_out, s, pad), s + 1, false);
            expect_gemm_equals_rows(k, gemm, raw_weight(type, n_in, n_out, s + 2), s + 3, true);
        }
    }
}

TEST(kquant_gemm, avx512_gemm_equals_the_avx512_dot_kernels_bit_for_bit_for_1_to_33_tokens) {
    run_level(cpu::dispatch_level::avx512, cpu::detail::avx512_kernels(), cpu::detail::gemm_kquant_avx512);
}

TEST(kquant_gemm, avx2_gemm_equals_the_avx2_dot_kernels_bit_for_bit_for_1_to_33_tokens) {
    run_level(cpu::dispatch_level::avx2, cpu::detail::avx2_kernels(), cpu::detail::gemm_kquant_avx2);
}

}  // namespace
}  // namespace troupe
