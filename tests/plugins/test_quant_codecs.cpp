// The block codecs of the offline quantizers (plugins/common/quant_codec.h) against troupe's reference quantizers
// (kernels/ref): round to nearest writes the same bytes, decoding gives the same floats, the fit -> code -> write
// steps GPTQ uses compose to the same blocks, and the clipping search AWQ uses never loses to the plain range.
// Also GPTQ's factorization of the Hessian on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/ref/quants.h"
#include "plugins/common/quant_codec.h"
#include "plugins/quant/gptq/gptq_solver.h"

namespace {

using troupe::quant_common::block_grid;
using troupe::quant_common::codec;

const uint32_t k_types[] = {TROUPE_TYPE_Q8_0,   TROUPE_TYPE_Q4_0,    TROUPE_TYPE_Q4_1,
                            TROUPE_TYPE_W4_G64, TROUPE_TYPE_W4_G128, TROUPE_TYPE_Q4_K};

// Rows that exercise the recipes: gaussian, all positive, all negative, one outlier, constant, zeros, tiny.
std::vector<std::vector<float>> test_rows(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> rows;
    auto gaussian = [&](float scale, float shift) {
        std::vector<float> r(static_cast<size_t>(n));
        for (float& x : r) x = scale * normal(rng) + shift;
        return r;
    };
    rows.push_back(gaussian(1.0f, 0.0f));
    rows.push_back(gaussian(0.02f, 0.0f));
    rows.push_back(gaussian(0.5f, 3.0f));
    rows.push_back(gaussian(0.5f, -3.0f));
    std::vector<float> outlier = gaussian(0.1f, 0.0f);
    outlier[static_cast<size_t>(n / 3)] = 25.0f;
    rows.push_back(outlier);
    rows.push_back(std::vector<float>(static_cast<size_t>(n), 0.75f));
    rows.push_back(std::vector<float>(static_cast<size_t>(n), 0.0f));
    rows.push_back(gaussian(1e-6f, 0.0f));
    return rows;
}

TEST(quant_codecs, round_to_nearest_writes_the_bytes_of_the_reference_quantizers) {
    for (const uint32_t type : k_types) {
        const codec* c = codec::of(type);
        ASSERT_NE(c, nullptr) << type;
        const int64_t n = 512;
        const size_t bytes = troupe_row_bytes(type, n);
        ASSERT_EQ(bytes, static_cast<size_t>(n / c->block_size()) * c->block_bytes());
        for (uint32_t seed = 1; seed <= 6; ++seed) {
            int row_index = 0;
            for (const std::vector<float>& row : test_rows(n, seed)) {
                std::vector<uint8_t> ours(bytes), reference(bytes);
                c->encode(row.data(), ours.data(), n);
                troupe::ref::quantize_row(static_cast<troupe::ggml_type>(type), row.data(), reference.data(), n);
                EXPECT_EQ(std::memcmp(ours.data(), reference.data(), bytes), 0)
                    << troupe_type_layout_of(type).name << " seed " << seed << " row " << row_index;
                ++row_index;
            }
        }
    }
}

TEST(quant_codecs, decoding_gives_the_floats_of_the_reference_dequantizers) {
    for (const uint32_t type : k_types) {
        const codec* c = codec::of(type);
        const int64_t n = 768;
        for (const std::vector<float>& row : test_rows(n, 42)) {
            std::vector<uint8_t> blocks(troupe_row_bytes(type, n));
            c->encode(row.data(), blocks.data(), n);
            std::vector<float> ours(static_cast<size_t>(n)), reference(static_cast<size_t>(n));
            c->decode(blocks.data(), ours.data(), n);
            troupe::ref::dequantize_row(static_cast<troupe::ggml_type>(type), blocks.data(), reference.data(), n);
            EXPECT_EQ(std::memcmp(ours.data(), reference.data(), ours.size() * sizeof(float)), 0)
                << troupe_type_layout_of(type).name;
        }
    }
}

TEST(quant_codecs, fit_code_and_write_compose_to_the_round_to_nearest_blocks) {
    for (const uint32_t type : k_types) {
        const codec* c = codec::of(type);
        const int bs = c->block_size();
        for (const std::vector<float>& row : test_rows(bs, 7)) {
            std::vector<uint8_t> encoded(c->block_bytes()), written(c->block_bytes());
            c->encode(row.data(), encoded.data(), bs);
            const block_grid g = c->fit(row.data());
            std::vector<int8_t> q(static_cast<size_t>(bs));
            std::vector<float> values(static_cast<size_t>(bs)), decoded(static_cast<size_t>(bs));
            troupe::quant_common::quantize_block(*c, g, row.data(), q.data(), values.data());
            c->write(g, q.data(), written.data());
            EXPECT_EQ(std::memcmp(encoded.data(), written.data(), written.size()), 0)
                << troupe_type_layout_of(type).name;
            c->decode(written.data(), decoded.data(), bs);
            EXPECT_EQ(std::memcmp(values.data(), decoded.data(), values.size() * sizeof(float)), 0)
                << troupe_type_layout_of(type).name << ": value() must decode as the stored block does";
            for (int j = 0; j < bs; ++j) {
                EXPECT_GE(q[j], c->q_min());
                EXPECT_LE(q[j], c->q_max());
            }
        }
    }
}

TEST(quant_codecs, codes_of_weights_outside_the_grid_are_clamped_to_its_ends) {
    for (const uint32_t type : k_types) {
        const codec* c = codec::of(type);
        std::vector<float> row = test_rows(c->block_size(), 3)[0];
        const block_grid g = c->fit(row.data());
        const int lo = c->code(g, 0, -1e6f), hi = c->code(g, 0, 1e6f);
        EXPECT_EQ(std::min(lo, hi), c->q_min()) << troupe_type_layout_of(type).name;
        EXPECT_EQ(std::max(lo, hi), c->q_max()) << troupe_type_layout_of(type).name;
    }
}

TEST(quant_codecs, the_clipping_search_never_loses_to_the_full_range_and_clips_a_lone_outlier) {
    for (const uint32_t type : k_types) {
        const codec* c = codec::of(type);
        const int bs = c->block_size();
        for (const std::vector<float>& row : test_rows(bs, 11)) {
            const double full = troupe::quant_common::block_error(*c, c->fit(row.data()), row.data(), nullptr);
            const block_grid clipped = troupe::quant_common::fit_clipped(*c, row.data(), nullptr);
            EXPECT_LE(troupe::quant_common::block_error(*c, clipped, row.data(), nullptr), full);
        }
        // An outlier that does not matter (importance 0) should not set the range (Q4_K: its sub-block's scale).
        std::vector<float> row = test_rows(bs, 12)[0];
        row[5] = 6.0f;
        std::vector<float> importance(static_cast<size_t>(bs), 1.0f);
        importance[5] = 0.0f;
        const double full = troupe::quant_common::block_error(*c, c->fit(row.data()), row.data(), importance.data());
        const block_grid clipped = troupe::quant_common::fit_clipped(*c, row.data(), importance.data());
        EXPECT_LT(troupe::quant_common::block_error(*c, clipped, row.data(), importance.data()), 0.8 * full)
            << troupe_type_layout_of(type).name;
    }
}

TEST(quant_codecs, types_without_a_codec_have_none) {
    for (const uint32_t type : {0u, 14u, 6u, 999u})  // F32, Q6_K, Q5_0, unknown
        EXPECT_EQ(codec::of(type), nullptr) << type;
}

}  // namespace

// GPTQ's factorization (plugins/quant/gptq/gptq_solver.h): U is upper triangular with Uᵀ U = (H + λI)⁻¹ in the
// quantization order, dead inputs get H_ii = 1, act order sorts by decreasing H_ii.
TEST(gptq_solver, the_factor_times_its_transpose_inverts_the_dampened_hessian) {
    const int64_t n = 300;  // above the size where the factorization splits over the workers
    std::mt19937 rng(17);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> x(static_cast<size_t>(n * 400));  // [400 rows, n]
    for (double& v : x) v = normal(rng);
    for (int64_t r = 0; r < 400; ++r) x[r * n + 7] = 0.0;  // a dead input
    for (int64_t r = 0; r < 400; ++r) x[r * n + 11] *= 10.0;
    std::vector<double> h(static_cast<size_t>(n * n), 0.0);
    for (int64_t r = 0; r < 400; ++r)
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) h[i * n + j] += x[r * n + i] * x[r * n + j];
    const troupe::gptq::parallel_rows inline_rows = [](int64_t count, const std::function<void(int64_t, int64_t)>& f) {
        f(0, count / 3);  // uneven ranges
        f(count / 3, count);
        return true;
    };
    for (const bool act_order : {false, true}) {
        troupe::gptq::solver_options options;
        options.act_order = act_order;
        troupe::gptq::prepared_hessian p;
        ASSERT_EQ(troupe::gptq::prepare(h, n, options, inline_rows, &p), "");
        EXPECT_EQ(p.dead[7], 1);
        EXPECT_EQ(p.dead[8], 0);
        EXPECT_EQ(p.order[0], act_order ? 11 : 0);
        // (H + λI) in the quantization order, with the dead input's diagonal set to 1.
        double mean_diag = 0.0;
        for (int64_t i = 0; i < n; ++i) mean_diag += i == 7 ? 1.0 : h[i * n + i];
        mean_diag /= n;
        double worst = 0.0;
        for (int64_t a = 0; a < n; ++a) {
            for (int64_t b = 0; b < n; ++b) {
                // (Uᵀ U (H + λI))[a, b] should be 1 on the diagonal, 0 elsewhere.
                double v = 0.0;
                for (int64_t c = 0; c < n; ++c) {
                    double utu = 0.0;  // (Uᵀ U)[a, c]
                    for (int64_t k = 0; k <= std::min(a, c); ++k)
                        utu += static_cast<double>(p.u[k * n + a]) * p.u[k * n + c];
                    const int64_t oc = p.order[c], ob = p.order[b];
                    double hcb = oc == 7 || ob == 7 ? (oc == ob ? 1.0 : 0.0) : h[oc * n + ob];
                    if (c == b) hcb += options.damp * mean_diag;
                    v += utu * hcb;
                }
                worst = std::max(worst, std::fabs(v - (a == b ? 1.0 : 0.0)));
            }
            if (a == 40) break;  // the first rows suffice (the check is n³ per row)
        }
        EXPECT_LT(worst, 1e-3) << "act_order " << act_order;
        for (int64_t a = 1; a < n; ++a) EXPECT_EQ(p.u[a * n + a - 1], 0.0f);
    }
}
