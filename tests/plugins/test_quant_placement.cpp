// Quant plugins whose weights the host places (troupe_quant_ops version 2, kernels.weights: copy; quant/w4a16 in
// shards of 16 rows, quant/fp8 of 32-row panels): the prepared rows move into shards the host allocates, one region per
// thread, and the products stay the same bit for bit, for every token count (decode's streamed items, prefill's tiles),
// every kernel and activation recipe, with the shards on the pool's threads (parallel_shares: a shard per thread) or
// more shards than threads (pieces split at the shards' bounds). A weight is placed once; bounds the plugin cannot
// take are refused and leave it as it was.
#include <algorithm>
#include <cstring>
#include <memory>

#include "core/model/compute_context.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ref/quants.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

struct placement_case {
    const char* name;
    const char* plugin;
    const char* params;  // YAML
    ggml_type type;      // as stored
};

void PrintTo(const placement_case& c, std::ostream* os) {
    *os << c.name;
}

constexpr int64_t k_n_in = 384;   // whole groups of 32, 64 and 128
constexpr int64_t k_n_out = 200;  // not a multiple of 16: the last shard is shorter

// The weight's stored bytes: k_n_out rows of k_n_in elements of c.type, quantized by the reference where quantized.
std::vector<uint8_t> stored_rows(const placement_case& c) {
    const std::vector<float> w = random_floats(static_cast<size_t>(k_n_in * k_n_out), 17, -0.8f, 0.5f);
    const size_t stride = row_bytes(c.type, k_n_in);
    std::vector<uint8_t> bytes(stride * k_n_out);
    for (int64_t o = 0; o < k_n_out; ++o) {
        if (c.type == ggml_type::f32) {
            std::memcpy(bytes.data() + o * stride, w.data() + o * k_n_in, stride);
        } else {
            ref::quantize_row(c.type, w.data() + o * k_n_in, bytes.data() + o * stride, k_n_in);
        }
    }
    return bytes;
}

// Shards the host gives: 64-byte aligned, a gap between them (they are not back to back), bounds at multiples of the
// weight's placement rows.
struct shards {
    std::vector<int64_t> bounds;
    std::vector<std::unique_ptr<uint8_t[]>> memory;
    std::vector<uint8_t*> dsts;

    shards(const prepared_weight& w, int n_shards) : bounds(n_shards + 1) {
        const int64_t rows = w.placement_rows();
        for (int s = 0; s < n_shards; ++s) bounds[s] = k_n_out * s / n_shards / rows * rows;
        bounds[n_shards] = k_n_out;
        for (int s = 0; s < n_shards; ++s) {
            const size_t n = w.placed_bytes(bounds[s], bounds[s + 1]);
            memory.push_back(std::make_unique<uint8_t[]>(n + 4096 + 64));
            auto at = reinterpret_cast<uintptr_t>(memory.back().get()) + 4096;
            dsts.push_back(reinterpret_cast<uint8_t*>((at + 63) / 64 * 64));
        }
    }
};

class quant_placement : public ::testing::TestWithParam<placement_case> {};

TEST_P(quant_placement, placed_weights_give_the_same_products_bit_for_bit_at_every_token_count) {
    const placement_case& c = GetParam();
    const std::vector<uint8_t> bytes = stored_rows(c);
    const weight_view view{c.type, bytes.data(), k_n_in, k_n_out, row_bytes(c.type, k_n_in)};
    plugin_host host = real_plugins();
    auto op = host.load_quant(c.plugin, yaml(c.params));
    if (!op.ok() && op.message().find("not available") != std::string::npos) GTEST_SKIP() << op.message();
    ASSERT_TRUE(op.ok()) << op.message();
    auto own = (*op)->prepare(view);  // stays in the plugin's memory
    auto on_threads = (*op)->prepare(view);
    auto over_threads = (*op)->prepare(view);
    ASSERT_TRUE(own.ok() && on_threads.ok() && over_threads.ok()) << own.message();
    ASSERT_GT((*own)->placement_rows(), 0) << c.plugin << " does not let the host place its weights";

    cpu::thread_pool pool(2);
    const compute_context ctx = compute_context::over(pool);
    shards two(**on_threads, 2), three(**over_threads, 3);  // a shard per thread; more shards than threads
    ASSERT_TRUE((*on_threads)->place(two.bounds, two.dsts).ok());
    ASSERT_TRUE((*over_threads)->place(three.bounds, three.dsts).ok());
    EXPECT_EQ((*on_threads)->placement_rows(), 0) << "a placed weight is placed once";
    EXPECT_EQ((*on_threads)->n_bytes(), (*own)->n_bytes());

    for (const int64_t n_tokens : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 40}) {
        const std::vector<float> x =
            random_floats(static_cast<size_t>(n_tokens * k_n_in), 3 + static_cast<uint32_t>(n_tokens), -2.0f, 2.0f);
        std::vector<float> want(static_cast<size_t>(n_tokens * k_n_out), NAN), got_two(want), got_three(want);
        ASSERT_TRUE((*op)->matmul_on(**own, x.data(), want.data(), n_tokens, ctx).ok());
        ASSERT_TRUE((*op)->matmul_on(**on_threads, x.data(), got_two.data(), n_tokens, ctx).ok());
        ASSERT_TRUE((*op)->matmul_on(**over_threads, x.data(), got_three.data(), n_tokens, ctx).ok());
        EXPECT_EQ(0, std::memcmp(got_two.data(), want.data(), want.size() * sizeof(float)))
            << n_tokens << " tokens, a shard per thread";
        EXPECT_EQ(0, std::memcmp(got_three.data(), want.data(), want.size() * sizeof(float)))
            << n_tokens << " tokens, 3 shards on 2 threads";
        // Without the pool (a caller with a plain parallel_for, or none): the same products.
        std::vector<float> inline_y(want.size(), NAN);
        ASSERT_TRUE((*op)->matmul(**on_threads, x.data(), inline_y.data(), n_tokens, no_parallel_for()).ok());
        EXPECT_EQ(0, std::memcmp(inline_y.data(), want.data(), want.size() * sizeof(float)))
            << n_tokens << " tokens, placed, no pool";
    }
}

INSTANTIATE_TEST_SUITE_P(
    placement, quant_placement,
    ::testing::Values(placement_case{"w4a16_q4_1", "w4a16", "{}", ggml_type::q4_1},
                      placement_case{"w4a16_w4_g64", "w4a16", "{}", ggml_type::w4_g64},
                      placement_case{"w4a16_w4_g128", "w4a16", "{}", ggml_type::w4_g128},
                      placement_case{"w4a16_w4_g128_float", "w4a16", "{activations: float}", ggml_type::w4_g128},
                      placement_case{"w4a16_q4_1_avx2", "w4a16", "{kernel: avx2}", ggml_type::q4_1},
                      placement_case{"w4a16_w4_g64_scalar", "w4a16", "{kernel: scalar}", ggml_type::w4_g64},
                      placement_case{"fp8_e4m3", "fp8", "{}", ggml_type::f32},
                      placement_case{"fp8_e5m2_avx2", "fp8", "{format: e5m2, kernel: avx2}", ggml_type::f32},
                      placement_case{"fp8_e4m3_scalar", "fp8", "{kernel: scalar}", ggml_type::f32}),
    [](const ::testing::TestParamInfo<placement_case>& info) { return std::string(info.param.name); });

TEST(quant_placement_refusals, bounds_off_the_plugins_row_multiple_are_refused_and_the_weight_keeps_working) {
    const placement_case c{"w4a16_w4_g128", "w4a16", "{}", ggml_type::w4_g128};
    const std::vector<uint8_t> bytes = stored_rows(c);
    plugin_host host = real_plugins();
    auto op = host.load_quant("w4a16");
    ASSERT_TRUE(op.ok()) << op.message();
    auto w = (*op)->prepare(weight_view{c.type, bytes.data(), k_n_in, k_n_out, row_bytes(c.type, k_n_in)});
    ASSERT_TRUE(w.ok()) << w.message();
    const std::vector<float> x = random_floats(static_cast<size_t>(k_n_in), 9);
    std::vector<float> before(k_n_out), after(k_n_out);
    ASSERT_TRUE((*op)->matmul(**w, x.data(), before.data(), 1, no_parallel_for()).ok());

    shards good(**w, 2);
    const std::vector<int64_t> odd = {0, 100, k_n_out};  // 100 is not a multiple of 16
    const status refused = (*w)->place(odd, good.dsts);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("shard 1 starts at row 100"), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("multiples of 16"), std::string::npos) << refused.message();
    EXPECT_GT((*w)->placement_rows(), 0) << "a refused placement leaves the weight unplaced";
    ASSERT_TRUE((*op)->matmul(**w, x.data(), after.data(), 1, no_parallel_for()).ok());
    EXPECT_EQ(0, std::memcmp(before.data(), after.data(), before.size() * sizeof(float)));

    ASSERT_TRUE((*w)->place(good.bounds, good.dsts).ok());
    const status twice = (*w)->place(good.bounds, good.dsts);
    ASSERT_FALSE(twice.ok());
    EXPECT_NE(twice.message().find("cannot be placed"), std::string::npos) << twice.message();
}

}  // namespace
}  // namespace troupe::testing
