#include "ops_test_util.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/matmul.h"
#include "kernels/ref/quants.h"

namespace troupe::testing {

std::vector<int64_t> every_token_count() {
    std::vector<int64_t> counts;
    for (int64_t t = 1; t <= 33; ++t) counts.push_back(t);
    counts.push_back(512);
    return counts;
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, 63);
    std::vector<float> v(n);
    for (auto& x : v) x = normal(rng) * (pick(rng) == 0 ? 8.0f : 1.0f);
    return v;
}

test_weight make_weight(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed, size_t extra_stride) {
    test_weight w;
    const size_t stride = row_bytes(type, n_in) + extra_stride;
    w.bytes.assign(stride * n_out + 64, 0);
    const std::vector<float> values = random_floats(n_in * n_out, seed);
    for (int64_t r = 0; r < n_out; ++r)
        ref::quantize_row(type, values.data() + r * n_in, w.bytes.data() + r * stride, n_in);
    w.view = matmul_weight{type, w.bytes.data(), n_in, n_out, stride};
    w.dequantized.resize(n_in * n_out);
    for (int64_t r = 0; r < n_out; ++r) {
        ref::dequantize_row(type, w.bytes.data() + r * stride, w.dequantized.data() + r * n_in, n_in);
    }
    return w;
}

std::string level_name(cpu::dispatch_level level) {
    return std::string(cpu::name(level));
}

void expect_every_level_equals_the_reference(const test_weight& w, int64_t n_tokens, uint32_t seed) {
    static cpu::thread_pool one(1), two(2);
    const int64_t n_in = w.view.n_in, n_out = w.view.n_out;
    const auto x = random_floats(n_tokens * n_in, seed);
    std::vector<float> y_ref(n_tokens * n_out);
    ref::matmul(w.view, x.data(), y_ref.data(), n_tokens);
    for (cpu::dispatch_level level : cpu::available_levels()) {
        SCOPED_TRACE("level " + level_name(level));
        scoped_level scope(level);
        for (cpu::thread_pool* pool : {&one, &two}) {
            std::vector<float> y(n_tokens * n_out, NAN);
            cpu::matmul(w.view, x.data(), y.data(), n_tokens, *pool);
            for (size_t i = 0; i < y.size(); ++i)
                ASSERT_EQ(y[i], y_ref[i]) << "output " << i << " with " << pool->n_threads() << " threads";
        }
    }
}

void expect_every_level_equals_the_reference_over_shapes(ggml_type type, std::initializer_list<int64_t> n_ins,
                                                         uint32_t seed) {
    for (const int64_t n_in : n_ins) {
        for (const int64_t n_out : {1, 17, 67}) {
            const auto w = make_weight(type, n_in, n_out, seed++, n_out == 17 ? 6 : 0);
            for (const int64_t n_tokens : {1, 2, 3, 4, 5, 9, 33, 70}) {
                SCOPED_TRACE(std::string(traits(type).name) + " n_in " + std::to_string(n_in) + " n_out " +
                             std::to_string(n_out) + " n_tokens " + std::to_string(n_tokens));
                expect_every_level_equals_the_reference(w, n_tokens, seed++);
                if (::testing::Test::HasFatalFailure()) return;
            }
        }
    }
}

}  // namespace troupe::testing
