// The quantized recipe's k-quant products are llama.cpp's x86 CPU arithmetic bit for bit (kernels/ref/kquant_dot.h):
// Q8_K activations from ggml's quantize_row_q8_K_ref, and ggml_vec_dot_q4_K_q8_K / q6_K_q8_K in their AVX2 form.
//
// ggml_avx2 below re-implements those two functions the way ggml writes them, one 256-bit register at a time (16-bit
// pair products, vpmaddwd with the shuffled scales, 8 int32 lanes, FMA per lane, hsum_float_8), independently of
// ref::dot_*_q8_k, which is written per lane. Then every dispatch level's cpu::matmul, for every token count
// (decode's dot kernels and prefill's), must equal ref::matmul exactly: one bit of difference in a product moves
// the Q8_K rounding of the next layer's activations, and greedy tokens part from the reference within a few steps.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/fp16.h"
#include "kernels/ref/kquant_dot.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::make_weight;
using testing::random_floats;
using testing::scoped_level;

// ggml's x86 intrinsics on arrays: 32 bytes, 16 words, 8 dwords.
namespace ggml_avx2 {

using words = std::array<int32_t, 16>;  // int16 lanes (kept in int32; the recipe never leaves int16 range)
using dwords = std::array<int32_t, 8>;

// _mm256_maddubs_epi16(u, s): word i = u[2i] * s[2i] + u[2i + 1] * s[2i + 1] (saturating; never reached here).
words maddubs(const uint8_t* u, const int8_t* s) {
    words w{};
    for (int i = 0; i < 16; ++i) {
        const int32_t v = u[2 * i] * s[2 * i] + u[2 * i + 1] * s[2 * i + 1];
        EXPECT_TRUE(v >= -32768 && v <= 32767) << "maddubs saturates: " << v;
        w[i] = v;
    }
    return w;
}

// _mm256_madd_epi16(a, b): dword i = a[2i] * b[2i] + a[2i + 1] * b[2i + 1].
dwords madd(const words& a, const words& b) {
    dwords d{};
    for (int i = 0; i < 8; ++i) d[i] = a[2 * i] * b[2 * i] + a[2 * i + 1] * b[2 * i + 1];
    return d;
}

float hsum_float_8(const float* x) {
    float res[4];
    for (int i = 0; i < 4; ++i) res[i] = x[4 + i] + x[i];  // _mm_add_ps(high, low)
    const float a = res[0] + res[2], b = res[1] + res[3];  // _mm_add_ps(res, _mm_movehl_ps(res, res))
    return a + b;                                          // _mm_add_ss(res, _mm_movehdup_ps(res))
}

// ggml_vec_dot_q4_K_q8_K, __AVX2__ branch.
float vec_dot_q4_k_q8_k(const block_q4_k* x, const block_q8_k* y, int nb) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    float acc[8] = {}, acc_m[4] = {};
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
        uint32_t utmp[4];
        std::memcpy(utmp, x[i].scales, 12);
        utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
        const uint32_t uaux = utmp[1] & kmask1;
        utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
        utmp[2] = uaux;
        utmp[0] &= kmask1;
        uint8_t mins_and_scales[16];  // _mm256_cvtepu8_epi16 of these bytes: scales 0..7, mins 8..15
        std::memcpy(mins_and_scales, utmp, 16);
        // Mins: q8s = hadd of the 16 bsums (sums of 32), prod = madd(mins, q8s): 4 dwords.
        int32_t q8s[8];
        for (int j = 0; j < 8; ++j) q8s[j] = y[i].bsums[2 * j] + y[i].bsums[2 * j + 1];
        for (int k = 0; k < 4; ++k) {
            const int32_t prod =
                mins_and_scales[8 + 2 * k] * q8s[2 * k] + mins_and_scales[8 + 2 * k + 1] * q8s[2 * k + 1];
            acc_m[k] = std::fma(dmin, static_cast<float>(prod), acc_m[k]);
        }
        dwords sumi{};
        const uint8_t* q4 = x[i].qs;
        const int8_t* q8 = y[i].qs;
        for (int j = 0; j < 4; ++j) {
            words scale_l, scale_h;  // get_scale_shuffle_k4(2j), (2j + 1): the scale repeated in every word
            scale_l.fill(mins_and_scales[2 * j]);
            scale_h.fill(mins_and_scales[2 * j + 1]);
            uint8_t q4l[32], q4h[32];
            for (int b = 0; b < 32; ++b) {
                q4l[b] = q4[b] & 0x0f;
                q4h[b] = q4[b] >> 4;
            }
            q4 += 32;
            const dwords p16l = madd(scale_l, maddubs(q4l, q8));
            q8 += 32;
            const dwords p16h = madd(scale_h, maddubs(q4h, q8));
            q8 += 32;
            for (int k = 0; k < 8; ++k) sumi[k] += p16l[k] + p16h[k];
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    const float m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
    return hsum_float_8(acc) + m;
}

// ggml_vec_dot_q6_K_q8_K, __AVX2__ branch.
float vec_dot_q6_k_q8_k(const block_q6_k* x, const block_q8_k* y, int nb) {
    float acc[8] = {};
    for (int i = 0; i < nb; ++i) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const uint8_t* q4 = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* q8 = y[i].qs;
        dwords sumi{};
        int is = 0;
        for (int j = 0; j < 2; ++j) {
            uint8_t q[4][32];  // q4_0 .. q4_3: the 6-bit values of 4 chunks of 32
            for (int b = 0; b < 32; ++b) {
                q[0][b] = static_cast<uint8_t>((q4[b] & 0x0f) | ((qh[b] & 3) << 4));
                q[1][b] = static_cast<uint8_t>((q4[32 + b] & 0x0f) | (((qh[b] >> 2) & 3) << 4));
                q[2][b] = static_cast<uint8_t>((q4[b] >> 4) | (((qh[b] >> 4) & 3) << 4));
                q[3][b] = static_cast<uint8_t>((q4[32 + b] >> 4) | (((qh[b] >> 6) & 3) << 4));
            }
            q4 += 64;
            qh += 32;
            uint8_t m32s[32];
            std::memset(m32s, 32, sizeof m32s);
            for (int c = 0; c < 4; ++c) {
                words scale;  // cvtepi8_epi16 of get_scale_shuffle(is + c): scales 2(is + c) x8, 2(is + c) + 1 x8
                for (int w = 0; w < 16; ++w) scale[w] = x[i].scales[2 * (is + c) + w / 8];
                const words q8s = maddubs(m32s, q8);
                words p16 = maddubs(q[c], q8);
                for (int w = 0; w < 16; ++w) p16[w] -= q8s[w];
                const dwords p = madd(scale, p16);
                for (int k = 0; k < 8; ++k) sumi[k] += p[k];
                q8 += 32;
            }
            is += 4;
        }
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(sumi[k]), acc[k]);
    }
    return hsum_float_8(acc);
}

}  // namespace ggml_avx2

TEST(kquant_recipe, q8_k_activations_round_half_to_even_with_the_sign_of_the_largest_magnitude) {
    // Largest magnitude 127 at a positive value: iscale = -127 / 127 = -1, so q = -round_even(x), d = -1.
    std::vector<float> x(qk_k, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;      // -2.5 -> -2 (half to even)
    x[2] = 3.5f;      // -3.5 -> -4
    x[3] = -0.5f;     // 0.5 -> 0
    x[4] = -1.5f;     // 1.5 -> 2
    x[17] = -126.6f;  // 126.6 -> 127
    block_q8_k q;
    ref::quantize_row_q8_k(x.data(), &q, qk_k);
    EXPECT_EQ(q.d, -1.0f);
    EXPECT_EQ(q.qs[0], -127);
    EXPECT_EQ(q.qs[1], -2);
    EXPECT_EQ(q.qs[2], -4);
    EXPECT_EQ(q.qs[3], 0);
    EXPECT_EQ(q.qs[4], 2);
    EXPECT_EQ(q.qs[17], 127);
    EXPECT_EQ(q.bsums[0], -127 - 2 - 4 + 0 + 2);
    EXPECT_EQ(q.bsums[1], 127);
    // A negative largest magnitude gives a positive scale: d = 1 / (-127 / max).
    x[0] = -127.0f;
    ref::quantize_row_q8_k(x.data(), &q, qk_k);
    EXPECT_EQ(q.d, 1.0f);
    EXPECT_EQ(q.qs[1], 2);
    EXPECT_EQ(q.qs[2], 4);
}

TEST(kquant_recipe, reference_dots_equal_ggmls_avx2_code_bit_for_bit) {
    uint32_t seed = 100;
    for (const ggml_type type : {ggml_type::q4_k, ggml_type::q6_k}) {
        for (const int64_t n_in : {256, 1024, 4096}) {
            const auto w = make_weight(type, n_in, 8, seed++);
            for (int trial = 0; trial < 4; ++trial) {
                const auto x = random_floats(n_in, seed++);
                std::vector<block_q8_k> xq(n_in / qk_k);
                ref::quantize_row_q8_k(x.data(), xq.data(), n_in);
                for (int64_t r = 0; r < w.view.n_out; ++r) {
                    const auto* row = static_cast<const uint8_t*>(w.view.data) + r * w.view.row_stride;
                    const int nb = static_cast<int>(n_in / qk_k);
                    const float a = type == ggml_type::q4_k
                                        ? ref::dot_q4_k_q8_k(reinterpret_cast<const block_q4_k*>(row), xq.data(), nb)
                                        : ref::dot_q6_k_q8_k(reinterpret_cast<const block_q6_k*>(row), xq.data(), nb);
                    const float b =
                        type == ggml_type::q4_k
                            ? ggml_avx2::vec_dot_q4_k_q8_k(reinterpret_cast<const block_q4_k*>(row), xq.data(), nb)
                            : ggml_avx2::vec_dot_q6_k_q8_k(reinterpret_cast<const block_q6_k*>(row), xq.data(), nb);
                    ASSERT_EQ(a, b) << traits(type).name << " n_in " << n_in << " row " << r;
                }
            }
        }
    }
}

TEST(kquant_recipe, every_level_equals_the_reference_bit_for_bit_for_decode_and_prefill_token_counts) {
    testing::expect_every_level_equals_the_reference_over_shapes(ggml_type::q4_k, {256, 2048}, 500);
    testing::expect_every_level_equals_the_reference_over_shapes(ggml_type::q6_k, {256, 2048}, 600);
}

}  // namespace
}  // namespace troupe
