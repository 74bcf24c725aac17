// Reference quantizers and dequantizers (kernels/ref/quants): hand-built blocks dequantize to exactly the
// values GGUF's block formulas give, and quantize-then-dequantize stays within each format's error bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe::ref {
namespace {

TEST(quants, nearest_int_rounds_half_to_even_like_ggml) {
    EXPECT_EQ(nearest_int(2.5f), 2);
    EXPECT_EQ(nearest_int(3.5f), 4);
    EXPECT_EQ(nearest_int(-2.5f), -2);
    EXPECT_EQ(nearest_int(-2.6f), -3);
    EXPECT_EQ(nearest_int(126.7f), 127);
    EXPECT_EQ(nearest_int(0.0f), 0);
}

TEST(quants, f16_and_bf16_rows_dequantize_to_their_exact_values) {
    const uint16_t h[] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    float out[4];
    dequantize_row(ggml_type::f16, h, out, 4);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[2], 65504.0f);
    EXPECT_EQ(out[3], std::ldexp(1.0f, -24));
    const uint16_t b[] = {0x3f80, 0xc0a0};
    dequantize_row(ggml_type::bf16, b, out, 2);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], -5.0f);
}

TEST(quants, hand_built_q8_0_and_q4_0_blocks_dequantize_exactly) {
    block_q8_0 q8[2];
    for (int b = 0; b < 2; ++b) {
        q8[b].d = b == 0 ? 0x3800 : 0xc000;  // 0.5, -2
        for (int j = 0; j < 32; ++j) q8[b].qs[j] = static_cast<int8_t>(j * 7 - 100);
    }
    float out[64];
    dequantize_row(ggml_type::q8_0, q8, out, 64);
    for (int j = 0; j < 32; ++j) {
        EXPECT_EQ(out[j], (j * 7 - 100) * 0.5f);
        EXPECT_EQ(out[32 + j], (j * 7 - 100) * -2.0f);
    }
    block_q4_0 q4{};
    q4.d = 0x4000;  // 2
    for (int j = 0; j < 16; ++j) q4.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    dequantize_row(ggml_type::q4_0, &q4, out, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(out[j], (j - 8) * 2.0f) << j;
        EXPECT_EQ(out[16 + j], (7 - j) * 2.0f) << j;
    }
}

TEST(quants, hand_built_q4_k_block_dequantizes_to_d_sc_q_minus_dmin_m) {
    uint8_t sc[8], m[8], q[256];
    for (int j = 0; j < 8; ++j) {
        sc[j] = static_cast<uint8_t>(5 + 7 * j);  // 5..54: the high two bits matter for j >= 4
        m[j] = static_cast<uint8_t>(63 - 8 * j);
    }
    for (int i = 0; i < 256; ++i) q[i] = static_cast<uint8_t>((i * 7 + i / 32) % 16);
    block_q4_k b{};
    b.d = 0x3c00;                  // 1
    b.dmin = 0x3800;               // 0.5
    for (int j = 0; j < 4; ++j) {  // the 12-byte packing documented in kernels/ref/quants.cpp
        b.scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
        b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | q[64 * c + 32 + l] << 4);
    }
    for (int j = 0; j < 8; ++j) {
        uint8_t s, mm;
        q4_k_scale_min(j, b.scales, &s, &mm);
        EXPECT_EQ(s, sc[j]);
        EXPECT_EQ(mm, m[j]);
    }
    float out[256];
    dequantize_row(ggml_type::q4_k, &b, out, 256);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], 1.0f * sc[i / 32] * q[i] - 0.5f * m[i / 32]) << i;
}

TEST(quants, hand_built_q6_k_block_dequantizes_to_d_scale_q_minus_32) {
    uint8_t q[256];
    for (int i = 0; i < 256; ++i) q[i] = static_cast<uint8_t>((i * 5 + 3) % 64);
    block_q6_k b{};
    b.d = 0x3400;  // 0.25
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j * 17 % 256 - 128);
    for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 32; ++l) {
            const int q1 = q[128 * h + l], q2 = q[128 * h + l + 32], q3 = q[128 * h + l + 64], q4 = q[128 * h + l + 96];
            b.ql[64 * h + l] = static_cast<uint8_t>((q1 & 15) | (q3 & 15) << 4);
            b.ql[64 * h + l + 32] = static_cast<uint8_t>((q2 & 15) | (q4 & 15) << 4);
            b.qh[32 * h + l] = static_cast<uint8_t>(q1 >> 4 | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
    }
    float out[256];
    dequantize_row(ggml_type::q6_k, &b, out, 256);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], 0.25f * b.scales[i / 16] * (q[i] - 32)) << i;
}

TEST(quants, hand_built_q8_k_block_dequantizes_to_d_times_q) {
    block_q8_k b{};
    b.d = 0.125f;
    for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
    float out[256];
    dequantize_row(ggml_type::q8_k, &b, out, 256);
    for (int j = 0; j < 256; ++j) EXPECT_EQ(out[j], 0.125f * (j - 128));
}

// Seeded test rows: Gaussian, Gaussian with outliers, all positive, all negative, constant, zeros.
std::vector<std::vector<float>> test_rows(int64_t n) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> rows(6, std::vector<float>(static_cast<size_t>(n)));
    for (int64_t i = 0; i < n; ++i) {
        rows[0][i] = normal(rng);
        rows[1][i] = normal(rng) * (i % 37 == 0 ? 20.0f : 0.1f);
        rows[2][i] = std::fabs(normal(rng)) + 3.0f;
        rows[3][i] = -std::fabs(normal(rng)) * 0.01f;
        rows[4][i] = 0.75f;
        rows[5][i] = 0.0f;
    }
    return rows;
}

std::vector<float> round_trip(ggml_type type, const std::vector<float>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> q(row_bytes(type, n));
    EXPECT_EQ(quantize_row(type, x.data(), q.data(), n), q.size());
    std::vector<float> y(x.size());
    dequantize_row(type, q.data(), y.data(), n);
    return y;
}

// Largest |x| in each block of `block` values.
float block_amax(const std::vector<float>& x, size_t i, size_t block) {
    float a = 0;
    for (size_t j = i / block * block; j < (i / block + 1) * block; ++j) a = std::max(a, std::fabs(x[j]));
    return a;
}

TEST(quants, q8_0_q4_0_q8_k_f16_bf16_round_trips_stay_within_their_per_element_bounds) {
    struct row {
        ggml_type type;
        size_t block;
        double step_fraction;  // bound = step_fraction * amax(block) (+ relative bound for floats)
    };
    const row rows[] = {
        {ggml_type::q8_0, 32, 0.57 / 127},  // half a step plus the fp16 rounding of d times |q| <= 127
        {ggml_type::q4_0, 32, 1.01 / 8},    // the value opposite the max clamps to 15: one step
        {ggml_type::q8_k, 256, 0.501 / 127}, {ggml_type::f16, 1, 1.0 / 2048}, {ggml_type::bf16, 1, 1.0 / 256},
    };
    for (const row& r : rows) {
        for (const auto& x : test_rows(512)) {
            const auto y = round_trip(r.type, x);
            for (size_t i = 0; i < x.size(); ++i) {
                const double bound = r.step_fraction * block_amax(x, i, r.block) + 1e-30;
                ASSERT_LE(std::fabs(x[i] - y[i]), bound) << traits(r.type).name << " element " << i;
            }
        }
    }
}

TEST(quants, k_quant_round_trips_stay_within_error_bounds_and_beat_q4_0) {
    const auto rows = test_rows(1024);
    for (size_t r = 0; r < rows.size(); ++r) {
        const auto& x = rows[r];
        double rms = 0, e4k = 0, e6k = 0, e40 = 0, max4k = 0, max6k = 0;
        const auto y4k = round_trip(ggml_type::q4_k, x);
        const auto y6k = round_trip(ggml_type::q6_k, x);
        const auto y40 = round_trip(ggml_type::q4_0, x);
        for (size_t i = 0; i < x.size(); ++i) {
            rms += x[i] * x[i];
            e4k += (x[i] - y4k[i]) * (x[i] - y4k[i]);
            e6k += (x[i] - y6k[i]) * (x[i] - y6k[i]);
            e40 += (x[i] - y40[i]) * (x[i] - y40[i]);
            max4k = std::max(max4k, static_cast<double>(std::fabs(x[i] - y4k[i]) / block_amax(x, i, 256)));
            max6k = std::max(max6k, static_cast<double>(std::fabs(x[i] - y6k[i]) / block_amax(x, i, 256)));
        }
        if (rms == 0) {
            EXPECT_EQ(e4k + e6k + e40, 0.0) << "zeros stay zeros";
            continue;
        }
        EXPECT_LT(std::sqrt(e4k / rms), 0.12) << "Q4_K relative RMS error, row " << r;
        EXPECT_LT(std::sqrt(e6k / rms), 0.03) << "Q6_K relative RMS error, row " << r;
        // Without outliers (which 6-bit sub-block scales under one super-block scale handle worse) and
        // constants (which Q4_0 hits exactly), Q4_K's sub-block offsets beat Q4_0.
        if (r == 0 || r == 2 || r == 3) {
            EXPECT_LE(e4k, e40) << "Q4_K no worse than Q4_0, row " << r;
        }
        EXPECT_LT(max4k, 0.15) << "Q4_K max error relative to the super-block max, row " << r;
        EXPECT_LT(max6k, 0.04) << "Q6_K max error relative to the super-block max, row " << r;
    }
}

TEST(quants, q8_k_follows_ggml_recipe_with_the_signed_max_at_minus_127_and_block_sums) {
    const auto x = test_rows(256)[0];
    block_q8_k b;
    quantize_row_q8_k(x.data(), &b, 256);
    size_t imax = 0;
    for (size_t i = 0; i < 256; ++i)
        if (std::fabs(x[i]) > std::fabs(x[imax])) imax = i;
    EXPECT_EQ(b.qs[imax], -127);
    EXPECT_EQ(b.d, 1.0f / (-127.0f / x[imax]));
    for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b.qs[16 * j + i];
        EXPECT_EQ(b.bsums[j], sum);
    }
}

TEST(quants, q8_0_stores_amax_over_127_as_fp16_and_the_max_element_as_127) {
    std::vector<float> x(32, 0.1f);
    x[5] = -3.0f;
    block_q8_0 b;
    quantize_row_q8_0(x.data(), &b, 32);
    EXPECT_EQ(b.d, fp32_to_fp16(3.0f / 127.0f));
    EXPECT_EQ(b.qs[5], -127);
    EXPECT_EQ(b.qs[0], static_cast<int8_t>(std::round(0.1f * (127.0f / 3.0f))));
}

}  // namespace
}  // namespace troupe::ref
