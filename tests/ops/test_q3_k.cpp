// Q3_K weights (Q3_K_M / Q3_K_S files) in the quantized recipe: ggml's formulas and its x86 dot product bit for bit.
//
// ggml below re-implements dequantize_row_q3_K and ggml_vec_dot_q3_K_q8_K's AVX2 branch the way ggml writes them (the
// aux unpacking of the scales, minus 32; the low 2 bits and, apart, 4 where the hmask bit is clear, each through
// vpmaddubsw and subtracted; vpmaddwd with the scale words; one FMA per super-block over 8 float lanes,
// hsum_float_8), independently of ref::*, which is written per element and per lane. Then every dispatch level's
// cpu::matmul must equal ref::matmul exactly for decode and prefill token counts.
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

constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;

void dequantize_row_q3_K(const block_q3_k* x, float* y, int64_t k) {
    uint32_t aux[4];
    const int8_t* scales = reinterpret_cast<const int8_t*>(aux);
    for (int64_t i = 0; i < k / 256; i++) {
        const float d_all = fp16_to_fp32(x[i].d);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        uint8_t m = 1;
        std::memcpy(aux, x[i].scales, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        int is = 0;
        float dl;
        for (int n = 0; n < 256; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * (static_cast<int8_t>((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l)
                    *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m <<= 1;
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

// ggml_vec_dot_q3_K_q8_K, __AVX2__ branch (x: the weights, y: the activations), with each 256-bit operation written out
// over its bytes, words and dwords.
float vec_dot_q3_K_q8_K(const block_q3_k* x, const block_q8_k* y, int nb) {
    std::array<float, 8> acc{};
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const uint8_t* q3 = x[i].qs;
        const int8_t* q8 = y[i].qs;
        uint32_t aux[3];
        std::memcpy(aux, x[i].scales, 12);
        const uint32_t s128[4] = {(aux[0] & kmask2) | (((aux[2] >> 0) & kmask1) << 4),
                                  (aux[1] & kmask2) | (((aux[2] >> 2) & kmask1) << 4),
                                  ((aux[0] >> 4) & kmask2) | (((aux[2] >> 4) & kmask1) << 4),
                                  ((aux[1] >> 4) & kmask2) | (((aux[2] >> 6) & kmask1) << 4)};
        int8_t scales128[16];
        std::memcpy(scales128, s128, 16);
        for (auto& v : scales128) v = static_cast<int8_t>(v - 32);  // _mm_sub_epi8(scales128, m32)
        std::array<int32_t, 8> sumi{};
        int bit = 0;
        int is = 0;
        for (int j = 0; j < 2; ++j) {
            for (int c = 0; c < 4; ++c) {
                // q3l: bits 2c, 2c + 1 of q3[l]; q3h: 4 where bit `bit` of hmask[l] is clear.
                int32_t p16[16];
                for (int w = 0; w < 16; ++w) {
                    int32_t low = 0, high = 0;
                    for (int e = 2 * w; e < 2 * w + 2; ++e) {
                        const int q3l = (q3[e] >> (2 * c)) & 3;
                        const int q3h = ((~x[i].hmask[e] >> bit) & 1) << 2;
                        low += q3l * q8[e];
                        high += q3h * q8[e];
                    }
                    EXPECT_TRUE(low >= -32768 && low <= 32767 && high >= -32768 && high <= 32767);
                    p16[w] = low - high;
                }
                ++bit;
                // madd with get_scale_shuffle_q3k(is): word is of the half's 8 scales in the low 128 bits, is + 1 in
                // the high 128 bits (is counts 0, 2, 4, 6 per half: scales[j] holds scales 8j .. 8j + 7).
                const int s_lo = scales128[8 * j + 2 * c], s_hi = scales128[8 * j + 2 * c + 1];
                for (int k = 0; k < 8; ++k) {
                    const int s = k < 4 ? s_lo : s_hi;
                    sumi[k] += s * p16[2 * k] + s * p16[2 * k + 1];
                }
                q8 += 32;
                is += 2;
            }
            q3 += 32;
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_float_8(acc);
}

}  // namespace ggml

std::vector<block_q3_k> random_blocks(int64_t n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> scale(0.0f, 0.01f);
    std::vector<block_q3_k> blocks(n_blocks);
    for (auto& b : blocks) {
        b.d = fp32_to_fp16(scale(rng));
        for (auto& q : b.scales) q = static_cast<uint8_t>(byte(rng));
        for (auto& q : b.hmask) q = static_cast<uint8_t>(byte(rng));
        for (auto& q : b.qs) q = static_cast<uint8_t>(byte(rng));
    }
    return blocks;
}

TEST(q3_k, dequantizes_as_ggml_writes_it) {
    const int64_t n = 256 * 24;
    const std::vector<block_q3_k> blocks = random_blocks(n / 256, 3);
    std::vector<float> a(n), b(n);
    ref::dequantize_row_q3_k(blocks.data(), a.data(), n);
    ggml::dequantize_row_q3_K(blocks.data(), b.data(), n);
    EXPECT_EQ(a, b);
}

TEST(q3_k, quantizes_within_half_a_step_of_each_sub_blocks_grid) {
    const int64_t n = 256 * 16;
    const std::vector<float> x = random_floats(n, 4);
    std::vector<block_q3_k> q(n / 256);
    ref::quantize_row_q3_k(x.data(), q.data(), n);
    std::vector<float> y(n);
    ref::dequantize_row_q3_k(q.data(), y.data(), n);
    double err = 0, norm = 0;
    for (int64_t blk = 0; blk < n / 256; ++blk) {
        for (int j = 0; j < 16; ++j) {
            const float step = fp16_to_fp32(q[blk].d) * static_cast<float>(ref::q3_k_scale(q[blk], j));
            const float lo = std::min(-4 * step, 3 * step), hi = std::max(-4 * step, 3 * step);
            for (int i = 0; i < 16; ++i) {
                const int64_t e = 256 * blk + 16 * j + i;
                const float inside = std::clamp(x[e], lo, hi);  // the grid's range; outside: clamped
                ASSERT_LE(std::fabs(y[e] - inside), 0.5f * std::fabs(step) + 1e-4f * std::fabs(x[e]))
                    << "element " << e;
                err += (y[e] - x[e]) * (y[e] - x[e]);
                norm += x[e] * x[e];
            }
        }
    }
    // Three bits: a relative squared error of a few percent on these (roughly normal) values, not more.
    EXPECT_LT(err / norm, 0.06) << err / norm;
}

TEST(q3_k, the_reference_dot_is_ggmls_avx2_code_bit_for_bit) {
    uint32_t seed = 20;
    for (const int64_t n_in : {256, 1024, 4864 + 256}) {
        const std::vector<block_q3_k> w = random_blocks(n_in / 256, seed++);
        for (int trial = 0; trial < 8; ++trial) {
            const std::vector<float> x = random_floats(n_in, seed++);
            std::vector<block_q8_k> xq(n_in / 256);
            ref::quantize_row_q8_k(x.data(), xq.data(), n_in);
            const int nb = static_cast<int>(n_in / 256);
            ASSERT_EQ(ref::dot_q3_k_q8_k(w.data(), xq.data(), nb), ggml::vec_dot_q3_K_q8_K(w.data(), xq.data(), nb))
                << "n_in " << n_in << " trial " << trial;
        }
    }
}

TEST(q3_k, every_level_equals_the_reference_bit_for_bit_for_decode_and_prefill_token_counts) {
    testing::expect_every_level_equals_the_reference_over_shapes(ggml_type::q3_k, {256, 1024}, 900);
}

}  // namespace
}  // namespace troupe
