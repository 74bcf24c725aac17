// attention/gqa's per-token kernels give a query row the same floats whatever its GQA group: a row of a group of 8 or
// 16 (on AVX2, a kv head's rows in vector lanes, attend_rows_in_lanes: K never transposed) equals, bit for bit, the
// same row in a group of 4 (the whole-head kernels on the transposed K) when each of the group of 4's kv heads holds
// the larger group's K and V. Each kernel, F32 and F16 pools, contexts inside one chunk of 16 keys, across chunks, and
// split over positions; a sliding window and soft-capping; decode and three-token steps.
#include <cstring>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

constexpr int32_t head_dim = 64;
constexpr int32_t block_size = 16;

struct lanes_case {
    const char* kernel;
    kv_dtype kv;
    int32_t group;  // the larger group (8 or 16)
};

void PrintTo(const lanes_case& c, std::ostream* os) {
    *os << c.kernel << (c.kv == kv_dtype::f16 ? " kv f16" : " kv f32") << " group " << c.group;
}

class attention_row_lanes : public ::testing::TestWithParam<lanes_case> {};

// Runs one call of n_tokens at positions ctx - n_tokens .. ctx - 1 with `n_kv_heads` kv heads, each holding the same
// K and V (the cache rows before the step in the pools, the step's rows in k and v); returns the output rows.
std::vector<float> run(attention_op& op, const lanes_case& c, int32_t n_heads, int32_t n_kv_heads, int32_t ctx,
                       int32_t n_tokens, int32_t window, float softcap, const std::vector<float>& q,
                       const std::vector<float>& k_head, const std::vector<float>& v_head) {
    const int32_t n_blocks = ctx / block_size + 1;
    std::vector<int32_t> table(n_blocks);
    for (int32_t b = 0; b < n_blocks; ++b) table[b] = (b * 5) % n_blocks;  // blocks out of order
    const int32_t* tables[] = {table.data()};
    const size_t kvw = size_t(n_kv_heads) * head_dim;
    std::vector<float> k_pool(size_t(n_blocks) * block_size * kvw), v_pool(k_pool.size());
    std::vector<float> k(size_t(n_tokens) * kvw), v(k.size());
    auto* k_halves = reinterpret_cast<uint16_t*>(k_pool.data());
    auto* v_halves = reinterpret_cast<uint16_t*>(v_pool.data());
    for (int32_t p = 0; p < ctx; ++p) {
        const size_t row = (size_t(table[p / block_size]) * block_size + p % block_size) * kvw;
        for (int32_t h = 0; h < n_kv_heads; ++h) {
            for (int32_t d = 0; d < head_dim; ++d) {
                const float kx = k_head[size_t(p) * head_dim + d], vx = v_head[size_t(p) * head_dim + d];
                const size_t at = row + size_t(h) * head_dim + d;
                if (p >= ctx - n_tokens) {  // the step's rows: the call writes them
                    const size_t t = size_t(p - (ctx - n_tokens)) * kvw + size_t(h) * head_dim + d;
                    k[t] = kx, v[t] = vx;
                } else if (c.kv == kv_dtype::f16) {
                    k_halves[at] = fp32_to_fp16(kx), v_halves[at] = fp32_to_fp16(vx);
                } else {
                    k_pool[at] = kx, v_pool[at] = vx;
                }
            }
        }
    }
    std::vector<int32_t> positions(n_tokens), seq_of(n_tokens, 0);
    for (int32_t i = 0; i < n_tokens; ++i) positions[i] = ctx - n_tokens + i;
    std::vector<float> out(size_t(n_tokens) * n_heads * head_dim, NAN);
    attention_call call{n_tokens, n_heads,    n_kv_heads,    head_dim,         0.125f,        q.data(),
                        k.data(), v.data(),   out.data(),    positions.data(), seq_of.data(), 1,
                        tables,   block_size, k_pool.data(), v_pool.data(),    c.kv};
    call.window = window;
    call.softcap = softcap;
    const status st = op.forward(call, threaded_parallel_for(2));
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
}

TEST_P(attention_row_lanes, a_rows_output_is_the_same_in_a_group_of_4_as_in_a_group_of_8_or_16) {
    const lanes_case& c = GetParam();
    if (!cpu_supports(c.kernel)) GTEST_SKIP() << "this CPU lacks " << c.kernel;
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml(std::string("{kernel: ") + c.kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();
    const int32_t n_heads = c.group;
    for (const int32_t ctx : {1, 9, 16, 37, 700}) {
        for (const int32_t n_tokens : {1, 3}) {
            if (n_tokens > ctx) continue;
            for (const auto& [window, softcap] : {std::pair{0, 0.0f}, std::pair{100, 30.0f}}) {
                SCOPED_TRACE("context " + std::to_string(ctx) + ", " + std::to_string(n_tokens) + " tokens, window " +
                             std::to_string(window) + ", softcap " + std::to_string(softcap));
                const auto q = random_floats(size_t(n_tokens) * n_heads * head_dim, 1, -2.0f, 2.0f);
                const auto k_head = as_halves(random_floats(size_t(ctx) * head_dim, 2, -2.0f, 2.0f));
                const auto v_head = as_halves(random_floats(size_t(ctx) * head_dim, 3, -2.0f, 2.0f));
                const auto lanes = run(**op, c, n_heads, 1, ctx, n_tokens, window, softcap, q, k_head, v_head);
                const auto by_four =
                    run(**op, c, n_heads, n_heads / 4, ctx, n_tokens, window, softcap, q, k_head, v_head);
                ASSERT_EQ(lanes.size(), by_four.size());
                for (size_t i = 0; i < lanes.size(); ++i) {
                    ASSERT_EQ(std::memcmp(&lanes[i], &by_four[i], sizeof(float)), 0)
                        << "float " << i << " (token " << i / (size_t(n_heads) * head_dim) << "): " << lanes[i]
                        << " in the group of " << c.group << ", " << by_four[i] << " in the group of 4";
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kernels, attention_row_lanes,
                         ::testing::Values(lanes_case{"avx2", kv_dtype::f32, 8}, lanes_case{"avx2", kv_dtype::f16, 8},
                                           lanes_case{"avx2", kv_dtype::f32, 16},
                                           lanes_case{"avx512", kv_dtype::f32, 8},
                                           lanes_case{"avx512", kv_dtype::f16, 16},
                                           lanes_case{"scalar", kv_dtype::f32, 8}),
                         [](const ::testing::TestParamInfo<lanes_case>& info) {
                             return std::string(info.param.kernel) +
                                    (info.param.kv == kv_dtype::f16 ? "_kv_f16" : "_kv_f32") + "_group_" +
                                    std::to_string(info.param.group);
                         });

}  // namespace
}  // namespace troupe::testing
