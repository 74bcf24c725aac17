// The 4-bit group formats with a scale and a min (Q4_1, W4_G64, W4_G128; kernels/ref/quants.h): their traits,
// hand-built blocks decode to d * q + m with Q4_1's nibble order, and round-to-nearest picks, for every element,
// the nearest of the 16 levels its block decodes to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/fp16.h"
#include "kernels/ref/quants.h"

namespace troupe::ref {
namespace {

struct w4_case {
    ggml_type type;
    const char* name;
    int g;
    size_t block_bytes;
};

const w4_case k_cases[] = {
    {ggml_type::q4_1, "Q4_1", 32, 20},
    {ggml_type::w4_g64, "W4_G64", 64, 36},
    {ggml_type::w4_g128, "W4_G128", 128, 68},
};

TEST(quants_w4, types_carry_their_names_group_sizes_and_block_bytes) {
    for (const auto& c : k_cases) {
        const auto tr = type_traits(static_cast<uint32_t>(c.type));
        ASSERT_TRUE(tr.has_value()) << c.name;
        EXPECT_EQ(tr->name, c.name);
        EXPECT_EQ(tr->block_size, c.g);
        EXPECT_EQ(tr->type_size, c.block_bytes);
        EXPECT_TRUE(tr->computable);
        EXPECT_EQ(w4_group_size(c.type), c.g);
        EXPECT_EQ(row_bytes(c.type, 4 * c.g), 4 * c.block_bytes);
    }
    EXPECT_EQ(static_cast<uint32_t>(ggml_type::w4_g64), 1064u);
    EXPECT_EQ(static_cast<uint32_t>(ggml_type::w4_g128), 1128u);
    EXPECT_EQ(w4_group_size(ggml_type::q4_0), 0);
}

TEST(quants_w4, hand_built_blocks_decode_to_d_q_plus_m_low_nibbles_first) {
    for (const auto& c : k_cases) {
        std::vector<uint8_t> blocks(2 * c.block_bytes);
        const uint16_t d[2] = {0x4000, 0xb800};  // 2, -0.5
        const uint16_t m[2] = {0xc200, 0x3c00};  // -3, 1
        for (int b = 0; b < 2; ++b) {
            uint8_t* blk = blocks.data() + b * c.block_bytes;
            std::memcpy(blk, &d[b], 2);
            std::memcpy(blk + 2, &m[b], 2);
            for (int j = 0; j < c.g / 2; ++j) blk[4 + j] = static_cast<uint8_t>((j * 5 + b) % 16 | ((j * 3) % 16) << 4);
        }
        std::vector<float> out(2 * c.g);
        dequantize_row(c.type, blocks.data(), out.data(), 2 * c.g);
        for (int b = 0; b < 2; ++b) {
            const float df = fp16_to_fp32(d[b]), mf = fp16_to_fp32(m[b]);
            for (int j = 0; j < c.g / 2; ++j) {
                EXPECT_EQ(out[b * c.g + j], df * static_cast<float>((j * 5 + b) % 16) + mf) << c.name << " " << j;
                EXPECT_EQ(out[b * c.g + c.g / 2 + j], df * static_cast<float>((j * 3) % 16) + mf) << c.name << " " << j;
            }
        }
    }
}

TEST(quants_w4, round_to_nearest_takes_the_group_range_and_the_nearest_of_its_16_levels) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.1f, 0.8f);
    for (const auto& c : k_cases) {
        const int64_t n = 6 * c.g;
        std::vector<float> x(n);
        for (auto& v : x) v = normal(rng);
        x[3] = 9.0f;  // an outlier stretches one group's range
        std::vector<uint8_t> q(row_bytes(c.type, n));
        EXPECT_EQ(quantize_row(c.type, x.data(), q.data(), n), q.size());
        std::vector<float> y(n);
        dequantize_row(c.type, q.data(), y.data(), n);
        for (int64_t b = 0; b < n / c.g; ++b) {
            const w4_scale_min fit = w4_fit_min_max(x.data() + b * c.g, c.g);
            uint16_t dh, mh;
            std::memcpy(&dh, q.data() + b * c.block_bytes, 2);
            std::memcpy(&mh, q.data() + b * c.block_bytes + 2, 2);
            EXPECT_EQ(fp16_to_fp32(dh), fit.d);
            EXPECT_EQ(fp16_to_fp32(mh), fit.m);
            float lo = x[b * c.g], hi = lo;
            for (int i = 0; i < c.g; ++i) {
                lo = std::min(lo, x[b * c.g + i]);
                hi = std::max(hi, x[b * c.g + i]);
            }
            EXPECT_NEAR(fit.m, lo, std::fabs(lo) * 1e-3f);
            EXPECT_NEAR(fit.d, (hi - lo) / 15.0f, (hi - lo) / 15.0f * 1e-3f);
            for (int i = 0; i < c.g; ++i) {
                const float xi = x[b * c.g + i], yi = y[b * c.g + i];
                float best = INFINITY;
                for (int level = 0; level < 16; ++level) {
                    best = std::min(best, std::fabs(fit.d * static_cast<float>(level) + fit.m - xi));
                }
                EXPECT_LE(std::fabs(yi - xi), best * (1 + 1e-6f) + 1e-7f) << c.name << " group " << b << " elem " << i;
                EXPECT_LE(std::fabs(yi - xi), 0.5f * fit.d + 1e-3f * (hi - lo + std::fabs(lo))) << c.name;
            }
        }
    }
}

TEST(quants_w4, chosen_scales_and_mins_are_stored_rounded_and_codes_clamp_to_0_15) {
    for (const auto& c : k_cases) {
        std::vector<float> x(c.g);
        for (int i = 0; i < c.g; ++i) x[i] = static_cast<float>(i % 20) - 2.0f;  // -2..17: beyond 0..15 both ways
        const w4_scale_min chosen{1.0f, 0.0f};
        std::vector<uint8_t> q(c.block_bytes);
        quantize_row_w4_with(c.type, x.data(), &chosen, q.data(), c.g);
        std::vector<float> y(c.g);
        dequantize_row_w4(c.type, q.data(), y.data(), c.g);
        for (int i = 0; i < c.g; ++i) EXPECT_EQ(y[i], std::clamp(x[i], 0.0f, 15.0f)) << c.name << " " << i;
    }
    EXPECT_EQ(w4_code(7.49f, 1.0f, 0.0f), 7);
    EXPECT_EQ(w4_code(-4.0f, 2.0f, -3.0f), 0);  // below the min
    EXPECT_EQ(w4_code(1.0f, 0.0f, 1.0f), 0);    // a constant group
    EXPECT_EQ(w4_code(NAN, 1.0f, 0.0f), 0);
}

TEST(quants_w4, a_constant_group_decodes_to_its_value) {
    for (const auto& c : k_cases) {
        std::vector<float> x(c.g, 0.375f);
        std::vector<uint8_t> q(c.block_bytes);
        quantize_row_w4(c.type, x.data(), q.data(), c.g);
        std::vector<float> y(c.g);
        dequantize_row_w4(c.type, q.data(), y.data(), c.g);
        for (int i = 0; i < c.g; ++i) EXPECT_EQ(y[i], 0.375f) << c.name;
    }
}

}  // namespace
}  // namespace troupe::ref
