// Q2_K weights (Q2_K files) in the quantized recipe: ggml's formulas and its x86 dot product bit for bit.
//
// ggml below re-implements dequantize_row_q2_K and ggml_vec_dot_q2_K_q8_K's AVX2 branch the way ggml writes them (the
// mins times the sums of 16 into the float lanes first, then the 2-bit codes through vpmaddubsw and vpmaddwd with the
// scales, one FMA per super-block and kind over 8 float lanes, hsum_float_8), independently of ref::*, which is
// written per element and per lane. Then every dispatch level's cpu::matmul must equal ref::matmul exactly for decode
// and prefill token counts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/fp16.h"
#include "kernels/ref/kquant_dot.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::random_floats;

namespace ggml {

void dequantize_row_q2_K(const block_q2_k* x, float* y, int64_t k) {
    for (int64_t i = 0; i < k / 256; i++) {
        const float d = fp16_to_fp32(x[i].d);
        const float min = fp16_to_fp32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        float dl, ml;
        for (int n = 0; n < 256; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = x[i].scales[is++];
                dl = d * (sc & 0xF);
                ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
                sc = x[i].scales[is++];
                dl = d * (sc & 0xF);
                ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

float hsum_float_8(const std::array<float, 8>& x) {
    float res[4];
    for (int i = 0; i < 4; ++i) res[i] = x[4 + i] + x[i];
    return (res[0] + res[2]) + (res[1] + res[3]);
}

// ggml_vec_dot_q2_K_q8_K, __AVX2__ branch (x: the weights, y: the activations), each 256-bit operation written out
// over its bytes, words and dwords.
float vec_dot_q2_K_q8_K(const block_q2_k* x, const block_q8_k* y, int nb) {
    std::array<float, 8> acc{};
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
        const uint8_t* q2 = x[i].qs;
        const int8_t* q8 = y[i].qs;
        int16_t scales8[16], mins[16];
        for (int j = 0; j < 16; ++j) {
            scales8[j] = x[i].scales[j] & 0xF;
            mins[j] = (x[i].scales[j] >> 4) & 0xF;
        }
        for (int k = 0; k < 8; ++k) {  // _mm256_madd_epi16(mins, bsums), then the FMA with dmin
            const int32_t prod = mins[2 * k] * y[i].bsums[2 * k] + mins[2 * k + 1] * y[i].bsums[2 * k + 1];
            acc[k] = std::fma(dmin, static_cast<float>(prod), acc[k]);
        }
        std::array<int32_t, 8> sumi{};
        for (int j = 0; j < 2; ++j) {
            for (int c = 0; c < 4; ++c) {
                int32_t p16[16];
                for (int w = 0; w < 16; ++w) {
                    p16[w] = 0;
                    for (int e = 2 * w; e < 2 * w + 2; ++e) p16[w] += ((q2[e] >> (2 * c)) & 3) * q8[e];
                }
                // get_scale_shuffle_q3k(c) on scales[j]: scale 8j + 2c for the low 128 bits, 8j + 2c + 1 for the high.
                const int s_lo = scales8[8 * j + 2 * c], s_hi = scales8[8 * j + 2 * c + 1];
                for (int k = 0; k < 8; ++k) {
                    const int s = k < 4 ? s_lo : s_hi;
                    sumi[k] += s * p16[2 * k] + s * p16[2 * k + 1];
                }
                q8 += 32;
            }
            q2 += 32;
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_float_8(acc);
}

}  // namespace ggml

std::vector<block_q2_k> random_blocks(int64_t n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> scale(0.0f, 0.01f);
    std::vector<block_q2_k> blocks(n_blocks);
    for (auto& b : blocks) {
        b.d = fp32_to_fp16(std::fabs(scale(rng)));
        b.dmin = fp32_to_fp16(std::fabs(scale(rng)));
        for (auto& q : b.scales) q = static_cast<uint8_t>(byte(rng));
        for (auto& q : b.qs) q = static_cast<uint8_t>(byte(rng));
    }
    return blocks;
}

TEST(q2_k, dequantizes_as_ggml_writes_it) {
    const int64_t n = 256 * 24;
    const std::vector<block_q2_k> blocks = random_blocks(n / 256, 3);
    std::vector<float> a(n), b(n);
    ref::dequantize_row_q2_k(blocks.data(), a.data(), n);
    ggml::dequantize_row_q2_K(blocks.data(), b.data(), n);
    EXPECT_EQ(a, b);
}

TEST(q2_k, quantizes_within_half_a_step_of_each_sub_blocks_grid) {
    const int64_t n = 256 * 16;
    const std::vector<float> x = random_floats(n, 4);
    std::vector<block_q2_k> q(n / 256);
    ref::quantize_row_q2_k(x.data(), q.data(), n);
    std::vector<float> y(n);
    ref::dequantize_row_q2_k(q.data(), y.data(), n);
    double err = 0, norm = 0;
    for (int64_t blk = 0; blk < n / 256; ++blk) {
        for (int j = 0; j < 16; ++j) {
            const float step = fp16_to_fp32(q[blk].d) * static_cast<float>(q[blk].scales[j] & 0x0f);
            const float lo = -fp16_to_fp32(q[blk].dmin) * static_cast<float>(q[blk].scales[j] >> 4);
            for (int i = 0; i < 16; ++i) {
                const int64_t e = 256 * blk + 16 * j + i;
                const float inside = std::clamp(x[e], lo, lo + 3 * step);  // the grid's range; outside: clamped
                ASSERT_LE(std::fabs(y[e] - inside), 0.5f * step + 1e-4f * (std::fabs(x[e]) + std::fabs(lo)))
                    << "element " << e;
                err += (y[e] - x[e]) * (y[e] - x[e]);
                norm += x[e] * x[e];
            }
        }
    }
    // Two bits with a min per 16: a relative squared error around a tenth on these (roughly normal) values.
    EXPECT_LT(err / norm, 0.2) << err / norm;
}

TEST(q2_k, the_reference_dot_is_ggmls_avx2_code_bit_for_bit) {
    uint32_t seed = 20;
    for (const int64_t n_in : {256, 1024, 4864 + 256}) {
        const std::vector<block_q2_k> w = random_blocks(n_in / 256, seed++);
        for (int trial = 0; trial < 8; ++trial) {
            const std::vector<float> x = random_floats(n_in, seed++);
            std::vector<block_q8_k> xq(n_in / 256);
            ref::quantize_row_q8_k(x.data(), xq.data(), n_in);
            const int nb = static_cast<int>(n_in / 256);
            ASSERT_EQ(ref::dot_q2_k_q8_k(w.data(), xq.data(), nb), ggml::vec_dot_q2_K_q8_K(w.data(), xq.data(), nb))
                << "n_in " << n_in << " trial " << trial;
        }
    }
}

TEST(q2_k, every_level_equals_the_reference_bit_for_bit_for_decode_and_prefill_token_counts) {
    testing::expect_every_level_equals_the_reference_over_shapes(ggml_type::q2_k, {256, 1024}, 1100);
}

}  // namespace
}  // namespace troupe
