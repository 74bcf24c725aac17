// The drafters' weight formats (plugins/common/packed_matrix.h): every format's products against float ones within
// its rounding, q4's vector kernels against their scalar twin, products that share an input or take several rows
// against one product each. Built into test_spec_heads (its own file: these need no distilled fixture).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "plugins/common/packed_matrix.h"

namespace troupe {
namespace {

// Numbers in [-0.5, 0.5) from a fixed seed (a linear congruential generator: the same on every platform).
struct uniform_numbers {
    uint32_t state;
    float operator()() {
        state = state * 1664525u + 1013904223u;
        return static_cast<float>(state >> 8) / static_cast<float>(1u << 24) - 0.5f;
    }
};

// The weight formats drafting may keep its matrices in, on odd shapes (vector tails) and on whole blocks of 32 (q8's
// integer products), against float products: f32 exact to summation order, f16 within half a half-float step per
// weight, q8 within half a code step per weight, plus half an activation code step per product where x is quantized.
TEST(spec_heads, packed_weights_multiply_within_the_rounding_of_their_format) {
    using spec_common::packed_matrix;
    using spec_common::weight_format;
    uniform_numbers next{12345u};
    struct format_case {
        weight_format format;
        double step;  // the format's rounding step relative to the row's largest weight, per weight
    };
    // 301: vector tails; 352 and 320: whole blocks of 32 (integer products: AVX2 rows, or VNNI panels of 16 rows where
    // the CPU has them; 37 rows leave a last panel of 5).
    for (const int64_t cols : {int64_t{301}, int64_t{352}, int64_t{320}}) {
        const int64_t rows = 37;
        std::vector<float> w(rows * cols), x(cols);
        for (float& v : w) v = next();
        for (float& v : x) v = next();
        double x_max = 0;
        for (float v : x) x_max = std::max(x_max, std::abs(double{v}));
        for (const format_case& c :
             {format_case{weight_format::f32, 1e-6}, format_case{weight_format::f16, 1.0 / 1024},
              format_case{weight_format::q8, 1.0 / 127}, format_case{weight_format::q4, 1.0 / 8}}) {
            SCOPED_TRACE(std::string(spec_common::weight_format_name(c.format)) + ", rows of " + std::to_string(cols));
            // q4 rows of 301 are kept as q8 (not whole groups of 32)
            const bool quantized_x = c.format != weight_format::f32 && c.format != weight_format::f16 && cols % 32 == 0;
            const packed_matrix m(w.data(), rows, cols, c.format);
            std::vector<float> y(rows);
            ASSERT_EQ(spec_common::matmul(nullptr, x.data(), 1, m, nullptr, y.data()), TROUPE_OK);
            for (int64_t r = 0; r < rows; ++r) {
                double exact = 0, bound = 0, amax = 0;
                for (int64_t i = 0; i < cols; ++i) amax = std::max(amax, std::abs(double{w[r * cols + i]}));
                for (int64_t i = 0; i < cols; ++i) {
                    exact += double{w[r * cols + i]} * x[i];
                    bound += 0.5 * c.step * amax * std::abs(x[i]);
                    if (quantized_x) bound += 0.5 / 127 * x_max * (std::abs(w[r * cols + i]) + c.step * amax);
                }
                EXPECT_NEAR(y[r], exact, bound + 1e-4) << "row " << r;
                if (!quantized_x) {
                    EXPECT_FLOAT_EQ(m.row_dot(r, x.data()), y[r]);
                }
            }
        }
    }
}

// q4 rows: each instruction set's product (AVX2, VNNI where the CPU has them) equals the scalar twin's up to float
// summation order, on rows of whole 128-weight chunks and with short last chunks of 32, 64 and 96; the weights the
// format keeps are within a step of a group's scale; and a product of several rows gives each row its own.
TEST(spec_heads, packed_q4_rows_multiply_as_their_scalar_twin_on_every_instruction_set) {
    using spec_common::packed_matrix;
    using spec_common::q4_kernel;
    using spec_common::weight_format;
    uniform_numbers next{4242u};
    std::vector<q4_kernel> kernels{q4_kernel::avx2};
    if (spec_common::q4_best_kernel() == q4_kernel::vnni) kernels.push_back(q4_kernel::vnni);
    if (spec_common::q4_best_kernel() == q4_kernel::scalar) kernels.clear();
    for (const int64_t cols : {int64_t{768}, int64_t{160}, int64_t{192}, int64_t{224}, int64_t{32}}) {
        const int64_t rows = 19, n = 3;
        std::vector<float> w(rows * cols), x(n * cols);
        for (float& v : w) v = next() * (1.0f + 10.0f * (next() > 0.45f));  // a few large weights per group
        for (int64_t i = 0; i < n * cols; ++i) x[i] = next() * static_cast<float>(1 + i / cols * 7);
        const packed_matrix m(w.data(), rows, cols, weight_format::q4);
        ASSERT_EQ(m.format(), weight_format::q4);
        EXPECT_EQ(m.n_bytes(), static_cast<size_t>(rows * cols / 2 + rows * cols / 32 * 4));
        spec_common::q8_activations xq;
        xq.set(x.data(), n, cols);
        std::vector<float> all(n * rows);
        ASSERT_EQ(spec_common::matmul(nullptr, x.data(), n, m, nullptr, all.data()), TROUPE_OK);
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t g = 0; g < cols / 32; ++g) {
                double amax = 0;
                for (int64_t i = 32 * g; i < 32 * g + 32; ++i) amax = std::max(amax, std::abs(double{w[r * cols + i]}));
                // A step is amax / 8: half a step off, or up to one where a weight of the other sign than the
                // group's largest is clamped to code 15 (+7 steps), as in llama.cpp's Q4_0.
                for (int64_t i = 32 * g; i < 32 * g + 32; ++i)
                    EXPECT_NEAR(m.weight(r, i), w[r * cols + i], amax / 8 + 1e-6) << cols << " " << r << " " << i;
            }
            for (int64_t t = 0; t < n; ++t) {
                // The scalar twin from the format's own weights and the activation codes, in double.
                double want = 0;
                for (int64_t g = 0; g < cols / 32; ++g) {
                    double part = 0;
                    for (int64_t i = 32 * g; i < 32 * g + 32; ++i)
                        part += double{m.weight(r, i)} * xq.codes[t * cols + i];
                    want += part * xq.scales[t * (cols / 32) + g];
                }
                const float twin = m.row_dot_q4(r, xq, t, q4_kernel::scalar);
                double mag = 0;
                for (int64_t i = 0; i < cols; ++i) mag += std::abs(double{m.weight(r, i)} * x[t * cols + i]);
                const double tol = 1e-5 * mag + 1e-6;
                EXPECT_NEAR(all[t * rows + r], want, tol) << cols << " " << r << " " << t;
                EXPECT_NEAR(twin, want, tol);
                for (q4_kernel k : kernels) {
                    SCOPED_TRACE(k == q4_kernel::vnni ? "vnni" : "avx2");
                    EXPECT_NEAR(m.row_dot_q4(r, xq, t, k), m.row_dot_q4(r, xq, t, q4_kernel::scalar), tol);
                }
            }
        }
    }
}

// Products of one input with several matrices in one region (q, k, v; gate, up) equal each matrix's own product,
// bit for bit, in every format (f32 and f16 rows take one product each).
TEST(spec_heads, shared_input_products_equal_one_product_per_matrix) {
    using spec_common::packed_matrix;
    using spec_common::weight_format;
    uniform_numbers next{99u};
    const int64_t cols = 256, n = 2;
    const int64_t outs[3] = {256, 64, 40};
    std::vector<float> x(n * cols);
    for (float& v : x) v = next();
    std::vector<std::vector<float>> w(3);
    for (int i = 0; i < 3; ++i) {
        w[i].resize(static_cast<size_t>(outs[i] * cols));
        for (float& v : w[i]) v = next();
    }
    for (weight_format f : {weight_format::q8, weight_format::q4, weight_format::f16}) {
        SCOPED_TRACE(spec_common::weight_format_name(f));
        std::vector<packed_matrix> m;
        for (int i = 0; i < 3; ++i) m.emplace_back(w[i].data(), outs[i], cols, f);
        std::vector<std::vector<float>> together(3), alone(3);
        for (int i = 0; i < 3; ++i) {
            together[i].assign(static_cast<size_t>(n * outs[i]), -1.0f);
            alone[i].resize(static_cast<size_t>(n * outs[i]));
            ASSERT_EQ(spec_common::matmul(nullptr, x.data(), n, m[i], nullptr, alone[i].data()), TROUPE_OK);
        }
        ASSERT_EQ(spec_common::matmul_shared_input(
                      nullptr, x.data(), n,
                      {{&m[0], together[0].data()}, {&m[1], together[1].data()}, {&m[2], together[2].data()}}),
                  TROUPE_OK);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(together[i], alone[i]) << "matrix " << i;
    }
}

// Several activation rows in one product (a tree's draft rows) give each row what it gives alone: the quantized
// activations' per-row scales and offsets stay with their row.
TEST(spec_heads, packed_q8_products_of_several_rows_equal_each_rows_own) {
    using spec_common::packed_matrix;
    using spec_common::weight_format;
    uniform_numbers next{777u};
    for (const int64_t cols : {int64_t{352}, int64_t{384}}) {
        const int64_t rows = 40, n = 6;  // 6: a tile of 4 tokens and one of 2 (VNNI panels)
        std::vector<float> w(rows * cols), x(n * cols), bias(rows);
        for (float& v : w) v = next();
        for (int64_t i = 0; i < n * cols; ++i) x[i] = next() * static_cast<float>(1 + i / cols * 10);  // row scales
        for (float& v : bias) v = next();
        const packed_matrix m(w.data(), rows, cols, weight_format::q8);
        std::vector<float> all(n * rows), one(rows);
        ASSERT_EQ(spec_common::matmul(nullptr, x.data(), n, m, bias.data(), all.data()), TROUPE_OK);
        for (int64_t r = 0; r < n; ++r) {
            ASSERT_EQ(spec_common::matmul(nullptr, x.data() + r * cols, 1, m, bias.data(), one.data()), TROUPE_OK);
            for (int64_t o = 0; o < rows; ++o) EXPECT_EQ(all[r * rows + o], one[o]) << cols << " " << r << " " << o;
        }
    }
}

}  // namespace
}  // namespace troupe
