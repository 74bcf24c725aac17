// Q5_K weights (Q5_K_M / Q5_K_S files) in the quantized recipe: ggml's formulas and its x86 dot product bit for bit.
//
// ggml below re-implements dequantize_row_q5_K and ggml_vec_dot_q5_K_q8_K's AVX2 branch the way ggml writes them
// (the utmp unpacking of the scales, hmask walking qh two bits per chunk of 64, vpmaddubsw then vpmaddwd with the
// chunk's scale, the mins' hadd into one integer and `summs += dmin * it`, one FMA per super-block over 8 float lanes,
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

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

void dequantize_row_q5_K(const block_q5_k* x, float* y, int64_t k) {
    for (int64_t i = 0; i < k / 256; i++) {
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        const float d = fp16_to_fp32(x[i].d);
        const float min = fp16_to_fp32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 256; j += 64) {
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

using bytes32 = std::array<uint8_t, 32>;
using words16 = std::array<int32_t, 16>;  // int16 values, kept wide to check the range
using lanes8 = std::array<int32_t, 8>;

// _mm256_maddubs_epi16(unsigned a, signed b): 16 words, each the sum of two byte products (no saturation reached).
words16 maddubs(const bytes32& a, const int8_t* b) {
    words16 w{};
    for (int i = 0; i < 16; ++i) {
        w[i] = a[2 * i] * b[2 * i] + a[2 * i + 1] * b[2 * i + 1];
        EXPECT_TRUE(w[i] >= -32768 && w[i] <= 32767);
    }
    return w;
}

// _mm256_madd_epi16(scale broadcast, p): 8 int32 lanes.
lanes8 madd(int32_t scale, const words16& p) {
    lanes8 l{};
    for (int i = 0; i < 8; ++i) l[i] = scale * p[2 * i] + scale * p[2 * i + 1];
    return l;
}

float hsum_float_8(const std::array<float, 8>& x) {
    float res[4];
    for (int i = 0; i < 4; ++i) res[i] = x[4 + i] + x[i];
    return (res[0] + res[2]) + (res[1] + res[3]);
}

// ggml_vec_dot_q5_K_q8_K, __AVX2__ branch (x: the weights, y: the activations).
float vec_dot_q5_K_q8_K(const block_q5_k* x, const block_q8_k* y, int nb) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    std::array<float, 8> acc{};
    float summs = 0.f;
    for (int i = 0; i < nb; ++i) {
        const uint8_t* q5 = x[i].qs;
        const int8_t* q8 = y[i].qs;
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
        uint32_t utmp[4];
        std::memcpy(utmp, x[i].scales, 12);
        utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
        const uint32_t uaux = utmp[1] & kmask1;
        utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
        utmp[2] = uaux;
        utmp[0] &= kmask1;
        uint8_t mins_and_scales[16];
        std::memcpy(mins_and_scales, utmp, 16);  // scales 0..7, mins 8..15
        int32_t q8s[8];                          // _mm_hadd_epi16 of the bsums' two halves
        for (int j = 0; j < 8; ++j) q8s[j] = y[i].bsums[2 * j] + y[i].bsums[2 * j + 1];
        int32_t prod[4];
        for (int j = 0; j < 4; ++j)
            prod[j] = mins_and_scales[8 + 2 * j] * q8s[2 * j] + mins_and_scales[8 + 2 * j + 1] * q8s[2 * j + 1];
        const int32_t hsum = (prod[0] + prod[1]) + (prod[2] + prod[3]);
        summs = std::fma(dmin, static_cast<float>(hsum), summs);  // summs += dmin * hsum, contracted by -mfma builds
        lanes8 sumi{};
        int bit = 0;
        for (int j = 0; j < 4; ++j) {
            bytes32 q5_0, q5_1;
            for (int l = 0; l < 32; ++l) {
                q5_0[l] = static_cast<uint8_t>((q5[l] & 0xF) + (((x[i].qh[l] >> bit) & 1) << 4));
                q5_1[l] = static_cast<uint8_t>((q5[l] >> 4) + (((x[i].qh[l] >> (bit + 1)) & 1) << 4));
            }
            bit += 2;
            q5 += 32;
            const lanes8 p0 = madd(mins_and_scales[2 * j + 0], maddubs(q5_0, q8));
            q8 += 32;
            const lanes8 p1 = madd(mins_and_scales[2 * j + 1], maddubs(q5_1, q8));
            q8 += 32;
            for (int k = 0; k < 8; ++k) sumi[k] += p0[k] + p1[k];
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_float_8(acc) + summs;
}

}  // namespace ggml

std::vector<block_q5_k> random_blocks(int64_t n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> scale(0.0f, 0.01f);
    std::vector<block_q5_k> blocks(n_blocks);
    for (auto& b : blocks) {
        b.d = fp32_to_fp16(std::fabs(scale(rng)));
        b.dmin = fp32_to_fp16(std::fabs(scale(rng)));
        for (auto& q : b.scales) q = static_cast<uint8_t>(byte(rng));
        for (auto& q : b.qh) q = static_cast<uint8_t>(byte(rng));
        for (auto& q : b.qs) q = static_cast<uint8_t>(byte(rng));
    }
    return blocks;
}

TEST(q5_k, dequantizes_as_ggml_writes_it) {
    const int64_t n = 256 * 24;
    const std::vector<block_q5_k> blocks = random_blocks(n / 256, 3);
    std::vector<float> a(n), b(n);
    ref::dequantize_row_q5_k(blocks.data(), a.data(), n);
    ggml::dequantize_row_q5_K(blocks.data(), b.data(), n);
    EXPECT_EQ(a, b);
}

TEST(q5_k, quantizes_within_half_a_step_of_each_sub_blocks_grid) {
    const int64_t n = 256 * 16;
    const std::vector<float> x = random_floats(n, 4);
    std::vector<block_q5_k> q(n / 256);
    ref::quantize_row_q5_k(x.data(), q.data(), n);
    std::vector<float> y(n);
    ref::dequantize_row_q5_k(q.data(), y.data(), n);
    double err = 0, q4_err = 0, norm = 0;
    for (int64_t blk = 0; blk < n / 256; ++blk) {
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            ref::q4_k_scale_min(j, q[blk].scales, &sc, &m);
            const float step = fp16_to_fp32(q[blk].d) * sc, lo = -fp16_to_fp32(q[blk].dmin) * m;
            for (int i = 0; i < 32; ++i) {
                const int64_t e = 256 * blk + 32 * j + i;
                // Inside the grid [lo, lo + 31 step]: within half a step (and float rounding); outside: clamped.
                const float inside = std::clamp(x[e], lo, lo + 31 * step);
                ASSERT_LE(std::fabs(y[e] - inside), 0.5f * step + 1e-4f * (std::fabs(x[e]) + std::fabs(lo)))
                    << "element " << e;
            }
        }
    }
    // Five bits are finer than Q4_K's four: the same data's squared error drops by well over half.
    std::vector<block_q4_k> q4(n / 256);
    ref::quantize_row_q4_k(x.data(), q4.data(), n);
    std::vector<float> y4(n);
    ref::dequantize_row_q4_k(q4.data(), y4.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        err += (y[i] - x[i]) * (y[i] - x[i]);
        q4_err += (y4[i] - x[i]) * (y4[i] - x[i]);
        norm += x[i] * x[i];
    }
    EXPECT_LT(err, 0.4 * q4_err) << "Q5_K " << err / norm << " Q4_K " << q4_err / norm;
    // Every code of a block round-trips through its element's 5 bits.
    for (int e = 0; e < 256; ++e) EXPECT_LE(ref::q5_k_code(q[0], e), 31);
}

TEST(q5_k, the_reference_dot_is_ggmls_avx2_code_bit_for_bit) {
    uint32_t seed = 20;
    for (const int64_t n_in : {256, 896 + 128, 4864 + 256}) {
        const std::vector<block_q5_k> w = random_blocks(n_in / 256, seed++);
        for (int trial = 0; trial < 8; ++trial) {
            const std::vector<float> x = random_floats(n_in, seed++);
            std::vector<block_q8_k> xq(n_in / 256);
            ref::quantize_row_q8_k(x.data(), xq.data(), n_in);
            const int nb = static_cast<int>(n_in / 256);
            ASSERT_EQ(ref::dot_q5_k_q8_k(w.data(), xq.data(), nb), ggml::vec_dot_q5_K_q8_K(w.data(), xq.data(), nb))
                << "n_in " << n_in << " trial " << trial;
        }
    }
}

TEST(q5_k, every_level_equals_the_reference_bit_for_bit_for_decode_and_prefill_token_counts) {
    testing::expect_every_level_equals_the_reference_over_shapes(ggml_type::q5_k, {256, 1024}, 700);
}

}  // namespace
}  // namespace troupe
