// Q5_0 weights (what llama.cpp writes for rows that are not whole blocks of 256 in a Q4_K file, e.g. Qwen2's
// 896-wide inputs in Q4_K_M) in the quantized recipe: ggml's formulas and its x86 dot product bit for bit.
//
// ggml below re-implements dequantize_row_q5_0, quantize_row_q5_0_ref and ggml_vec_dot_q5_0_q8_0's AVX2 branch the
// way ggml writes them (bytes_from_nibbles_32, bytes_from_bits_32, mul_sum_i8_pairs_float, one FMA per block over 8
// float lanes, hsum_float_8), independently of ref::*, which is written per element and per lane. Then every dispatch
// level's cpu::matmul must equal ref::matmul exactly for decode and prefill token counts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/fp16.h"
#include "kernels/ref/ops.h"
#include "kernels/ref/quants.h"
#include "ops_test_util.h"

namespace troupe {
namespace {

using testing::random_floats;

namespace ggml {

void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t k) {
    const int qk = 32;
    for (int64_t i = 0; i < k / qk; i++) {
        const float d = fp16_to_fp32(x[i].d);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, sizeof(qh));
        for (int j = 0; j < qk / 2; ++j) {
            const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
            const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
            const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;
            y[i * qk + j + 0] = x0 * d;
            y[i * qk + j + qk / 2] = x1 * d;
        }
    }
}

void quantize_row_q5_0_ref(const float* x, block_q5_0* y, int64_t k) {
    const int qk = 32;
    for (int64_t i = 0; i < k / qk; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (amax < std::fabs(v)) {
                amax = std::fabs(v);
                max = v;
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = x[i * qk + 0 + j] * id;
            const float x1 = x[i * qk + qk / 2 + j] * id;
            const uint8_t xi0 = std::min<int8_t>(31, static_cast<int8_t>(x0 + 16.5f));
            const uint8_t xi1 = std::min<int8_t>(31, static_cast<int8_t>(x1 + 16.5f));
            y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
        }
        std::memcpy(&y[i].qh, &qh, sizeof(qh));
    }
}

using bytes32 = std::array<int8_t, 32>;

// bytes_from_nibbles_32: the 16 low nibbles, then the 16 high nibbles.
bytes32 bytes_from_nibbles_32(const uint8_t* rsi) {
    bytes32 b{};
    for (int j = 0; j < 16; ++j) {
        b[j] = static_cast<int8_t>(rsi[j] & 0x0f);
        b[j + 16] = static_cast<int8_t>(rsi[j] >> 4);
    }
    return b;
}

// bytes_from_bits_32: byte j = 0xff where bit j is set, else 0.
bytes32 bytes_from_bits_32(const uint8_t* x) {
    uint32_t x32;
    std::memcpy(&x32, x, sizeof(uint32_t));
    bytes32 b{};
    for (int j = 0; j < 32; ++j) b[j] = static_cast<int8_t>(((x32 >> j) & 1) ? -1 : 0);
    return b;
}

// mul_sum_i8_pairs_float: |x| * sign(y, x) by vpmaddubsw, pairs by vpmaddwd: 8 int32 lanes of 4 products, as floats.
std::array<float, 8> mul_sum_i8_pairs_float(const bytes32& x, const bytes32& y) {
    std::array<float, 8> out{};
    for (int lane = 0; lane < 8; ++lane) {
        int32_t dword = 0;
        for (int pair = 0; pair < 2; ++pair) {
            int32_t word = 0;
            for (int e = 0; e < 2; ++e) {
                const int i = 4 * lane + 2 * pair + e;
                const int ax = std::abs(int{x[i]});
                const int sy = x[i] < 0 ? -y[i] : (x[i] == 0 ? 0 : y[i]);
                word += ax * sy;
            }
            EXPECT_TRUE(word >= -32768 && word <= 32767);
            dword += word;
        }
        out[lane] = static_cast<float>(dword);
    }
    return out;
}

float hsum_float_8(const std::array<float, 8>& x) {
    float res[4];
    for (int i = 0; i < 4; ++i) res[i] = x[4 + i] + x[i];
    return (res[0] + res[2]) + (res[1] + res[3]);
}

// ggml_vec_dot_q5_0_q8_0, __AVX2__ branch (x: the weights, y: the activations).
float vec_dot_q5_0_q8_0(const block_q5_0* x, const block_q8_0* y, int nb) {
    std::array<float, 8> acc{};
    for (int ib = 0; ib < nb; ++ib) {
        const float d = fp16_to_fp32(x[ib].d) * fp16_to_fp32(y[ib].d);
        bytes32 qx = bytes_from_nibbles_32(x[ib].qs);
        const bytes32 bxhi = bytes_from_bits_32(x[ib].qh);
        for (int j = 0; j < 32; ++j) qx[j] = static_cast<int8_t>(qx[j] | (~bxhi[j] & static_cast<int8_t>(0xF0)));
        bytes32 qy;
        std::memcpy(qy.data(), y[ib].qs, 32);
        const std::array<float, 8> q = mul_sum_i8_pairs_float(qx, qy);
        for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, q[k], acc[k]);
    }
    return hsum_float_8(acc);
}

}  // namespace ggml

std::vector<block_q5_0> random_blocks(int64_t n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> scale(0.0f, 0.05f);
    std::vector<block_q5_0> blocks(n_blocks);
    for (auto& b : blocks) {
        b.d = fp32_to_fp16(scale(rng));
        for (auto& q : b.qh) q = static_cast<uint8_t>(byte(rng));
        for (auto& q : b.qs) q = static_cast<uint8_t>(byte(rng));
    }
    return blocks;
}

TEST(q5_0, dequantizes_and_quantizes_as_ggml_writes_it) {
    const int64_t n = 32 * 64;
    const std::vector<block_q5_0> blocks = random_blocks(n / 32, 3);
    std::vector<float> a(n), b(n);
    ref::dequantize_row_q5_0(blocks.data(), a.data(), n);
    ggml::dequantize_row_q5_0(blocks.data(), b.data(), n);
    EXPECT_EQ(a, b);
    const std::vector<float> x = random_floats(n, 4);
    std::vector<block_q5_0> qa(n / 32), qb(n / 32);
    ref::quantize_row_q5_0(x.data(), qa.data(), n);
    ggml::quantize_row_q5_0_ref(x.data(), qb.data(), n);
    EXPECT_EQ(0, std::memcmp(qa.data(), qb.data(), qa.size() * sizeof(block_q5_0)));
    // The round trip is within half a step of each block's grid, except where the code clamps at 15 (the largest |x|
    // lands on -16, so the other end reaches +16 steps): there within one step.
    ref::dequantize_row_q5_0(qa.data(), a.data(), n);
    for (int64_t blk = 0; blk < n / 32; ++blk) {
        const float d = std::fabs(fp16_to_fp32(qa[blk].d));
        for (int64_t i = 32 * blk; i < 32 * (blk + 1); ++i) {
            const bool clamped = std::fabs(x[i]) > 15.5f * d;
            ASSERT_LE(std::fabs(a[i] - x[i]), (clamped ? 1.0f : 0.5f) * d + 1e-3f * std::fabs(x[i])) << "element " << i;
        }
    }
}

TEST(q5_0, the_reference_dot_is_ggmls_avx2_code_bit_for_bit) {
    uint32_t seed = 20;
    for (const int64_t n_in : {32, 896, 4864}) {
        const std::vector<block_q5_0> w = random_blocks(n_in / 32, seed++);
        for (int trial = 0; trial < 8; ++trial) {
            const std::vector<float> x = random_floats(n_in, seed++);
            std::vector<block_q8_0> xq(n_in / 32);
            ref::quantize_activations_q8_0(x.data(), xq.data(), n_in);
            const int nb = static_cast<int>(n_in / 32);
            ASSERT_EQ(ref::dot_q5_0(w.data(), xq.data(), nb), ggml::vec_dot_q5_0_q8_0(w.data(), xq.data(), nb))
                << "n_in " << n_in << " trial " << trial;
        }
    }
}

TEST(q5_0, every_level_equals_the_reference_bit_for_bit_for_decode_and_prefill_token_counts) {
    testing::expect_every_level_equals_the_reference_over_shapes(ggml_type::q5_0, {32, 96, 896}, 700);
}

}  // namespace
}  // namespace troupe
