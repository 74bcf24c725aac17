// attention/gqa's vector kernels (AVX2 and AVX-512, where the CPU has them) against its scalar kernel
// on prefill-shaped steps: runs of consecutive tokens of one sequence, which the tiled kernel groups into
// query tiles. Each case writes a cached prefix per sequence in a first call, then a mixed step: prefill
// chunks that continue a prefix (tiles not starting at position 0, crossing blocks), single-token decodes,
// and a first token. The pools start as NaN, so a kernel that reads a row it should not poisons its output.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plugin_test_support.h"
#include "plugins/attention/gqa/query_tiles.h"

namespace troupe::testing {
namespace {

struct tile_case {
    const char* shape;  // test name part
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;
    const char* kernel;
    kv_dtype kv = kv_dtype::f32;  // the pools' element type
};

void PrintTo(const tile_case& c, std::ostream* os) {
    *os << c.shape << " block " << c.block_size << " " << c.kernel << (c.kv == kv_dtype::f16 ? " kv f16" : "");
}

// One sequence of the mixed step: positions [prefix, prefix + n_step) come in the step.
struct sequence_plan {
    int32_t prefix;  // positions cached by the first call
    int32_t n_step;  // tokens of the mixed step
};

// In step order: a 37-token prefill from 0 (tiles 16, 16, 5), a decode, a 19-token chunk after a cached
// prefix of 21 (tiles start mid-chunk and mid-block), a first token, and another decode.
const std::vector<sequence_plan> plans = {{0, 37}, {9, 1}, {21, 19}, {0, 1}, {30, 1}};

struct attention_pools {
    std::vector<float> k, v;
};

class attention_tiles : public ::testing::TestWithParam<tile_case> {};

TEST_P(attention_tiles, vector_kernels_match_the_scalar_kernel_on_prefill_chunks_mixed_with_decodes) {
    const tile_case& c = GetParam();
    const bool supported = std::string(c.kernel) == "avx2"
                               ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                               : __builtin_cpu_supports("avx512f");
    if (!supported) GTEST_SKIP() << "this CPU lacks " << c.kernel;
    plugin_host host = real_plugins();
    auto scalar = host.load_attention("gqa", yaml("{kernel: scalar}"));
    auto fast = host.load_attention("gqa", yaml(std::string("{kernel: ") + c.kernel + "}"));
    ASSERT_TRUE(scalar.ok()) << scalar.message();
    ASSERT_TRUE(fast.ok()) << fast.message();

    const int32_t n_seqs = static_cast<int32_t>(plans.size());
    const int32_t hd = c.head_dim, bs = c.block_size;
    // Each sequence's blocks, interleaved with the others' (sequence s owns blocks s, s + n_seqs, ...).
    std::vector<std::vector<int32_t>> tables(n_seqs);
    int32_t n_blocks = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
        const int32_t need = (plans[s].prefix + plans[s].n_step + bs - 1) / bs;
        for (int32_t b = 0; b < need; ++b) tables[s].push_back(b * n_seqs + (n_seqs - 1 - s));
        n_blocks = std::max(n_blocks, need * n_seqs);
    }
    std::vector<const int32_t*> table_ptrs;
    for (auto& t : tables) table_ptrs.push_back(t.data());
    const size_t pool_floats = static_cast<size_t>(n_blocks) * bs * c.n_kv_heads * hd;
    attention_pools scalar_pools{std::vector<float>(pool_floats, NAN), std::vector<float>(pool_floats, NAN)};
    if (c.kv == kv_dtype::f16) {  // half the bytes used, each a half NaN
        for (auto* pool : {&scalar_pools.k, &scalar_pools.v}) {
            std::fill_n(reinterpret_cast<uint16_t*>(pool->data()), pool_floats, uint16_t{0x7e00});
        }
    }
    attention_pools fast_pools = scalar_pools;
    // F16 pools: the float32 result of the scalar kernel, which the halves' rounding must stay close to.
    attention_pools f32_pools{std::vector<float>(pool_floats, NAN), std::vector<float>(pool_floats, NAN)};

    for (int step = 0; step < 2; ++step) {
        std::vector<int32_t> positions, seq_of;
        for (int32_t s = 0; s < n_seqs; ++s) {
            const int32_t begin = step == 0 ? 0 : plans[s].prefix;
            const int32_t end = step == 0 ? plans[s].prefix : plans[s].prefix + plans[s].n_step;
            for (int32_t p = begin; p < end; ++p) {
                positions.push_back(p);
                seq_of.push_back(s);
            }
        }
        const auto n = static_cast<int32_t>(positions.size());
        const auto q = random_floats(size_t(n) * c.n_heads * hd, 70 + step, -2.0f, 2.0f);
        const auto k = random_floats(size_t(n) * c.n_kv_heads * hd, 80 + step, -2.0f, 2.0f);
        const auto v = random_floats(size_t(n) * c.n_kv_heads * hd, 90 + step);
        std::vector<float> out_scalar(size_t(n) * c.n_heads * hd, NAN), out_fast = out_scalar;
        attention_call call{n,
                            c.n_heads,
                            c.n_kv_heads,
                            hd,
                            1.0f / std::sqrt(float(hd)),
                            q.data(),
                            k.data(),
                            v.data(),
                            out_scalar.data(),
                            positions.data(),
                            seq_of.data(),
                            n_seqs,
                            table_ptrs.data(),
                            bs,
                            scalar_pools.k.data(),
                            scalar_pools.v.data(),
                            c.kv};
        status st = (*scalar)->forward(call, no_parallel_for());
        ASSERT_TRUE(st.ok()) << st.message();
        if (c.kv == kv_dtype::f16) {
            std::vector<float> out_f32(out_scalar.size(), NAN);
            attention_call f32_call = call;
            f32_call.kv_type = kv_dtype::f32;
            f32_call.out = out_f32.data();
            f32_call.k_pool = f32_pools.k.data();
            f32_call.v_pool = f32_pools.v.data();
            st = (*scalar)->forward(f32_call, no_parallel_for());
            ASSERT_TRUE(st.ok()) << st.message();
            for (size_t i = 0; i < out_f32.size(); ++i) {
                ASSERT_NEAR(out_scalar[i], out_f32[i], 2e-2f) << "f16 pools against f32 pools, element " << i;
            }
        }
        call.out = out_fast.data();
        call.k_pool = fast_pools.k.data();
        call.v_pool = fast_pools.v.data();
        st = (*fast)->forward(call, step == 0 ? no_parallel_for() : threaded_parallel_for(3));
        ASSERT_TRUE(st.ok()) << st.message();
        for (int32_t t = 0; t < n; ++t) {
            for (int32_t i = 0; i < c.n_heads * hd; ++i) {
                const size_t at = static_cast<size_t>(t) * c.n_heads * hd + i;
                ASSERT_NEAR(out_fast[at], out_scalar[at], 1e-5f + 1e-5f * std::fabs(out_scalar[at]))
                    << "step " << step << " token " << t << " (sequence " << seq_of[t] << ", position " << positions[t]
                    << ") head " << i / hd << " dim " << i % hd;
            }
        }
    }
}

std::vector<tile_case> all_cases() {
    struct shape {
        const char* name;
        int32_t n_heads, n_kv_heads, head_dim;
    };
    const shape shapes[] = {
        {"mha_12_heads_dim_64", 12, 12, 64},      // tiles of 16 (AVX-512) or 8 (AVX2) tokens
        {"mha_3_heads_dim_17", 3, 3, 17},         // odd head_dim
        {"gqa_8_heads_2_kv_dim_128", 8, 2, 128},  // group 4: tiles of 4 or 2 tokens
        {"gqa_6_heads_3_kv_dim_40", 6, 3, 40},    // group 2: tiles of 8 or 4 tokens
        {"gqa_10_heads_2_kv_dim_72", 10, 2, 72},  // group 5: 3 tokens, 15 rows, or 1 token, 5 rows
        {"gqa_16_heads_2_kv_dim_64", 16, 2, 64},  // group 8: a decode fills half or all the lanes
        {"mqa_12_heads_dim_72", 12, 1, 72},       // group 12: one token a tile, in one or two passes
        {"mqa_20_heads_dim_24", 20, 1, 24},       // group 20: two or three passes per token
        {"gqa_4_heads_2_kv_dim_20", 4, 2, 20},    // group 2, head_dim not a multiple of 8
        {"mha_2_heads_dim_272", 2, 2, 272},       // above the tiled kernel's head_dim: per-token kernel
        // Per-token kernel: a decode's 48 query rows (24 kv heads x 2) are more than one pass holds (32 rows), and
        // 40 rows of dim 512 more than its scratch holds (32 rows of 512): passes cut inside a token's heads.
        {"gqa_48_heads_24_kv_dim_64", 48, 24, 64},
        {"gqa_40_heads_5_kv_dim_512", 40, 5, 512},
        // The whole-head kernels (AVX-512, head_dim a multiple of 16): a group of 20 rows in blocks of 8, 8 and 4 with
        // a 48-wide head (64 + a 16-float tail is not it: 48 is three vectors), and a group of 12 whose third kv head
        // is cut by the 32-row pass (rows 24-31, then 32-35).
        {"mqa_20_heads_dim_48", 20, 1, 48},
        {"gqa_36_heads_3_kv_dim_32", 36, 3, 32},
    };
    std::vector<tile_case> cases;
    for (const shape& s : shapes) {
        for (int32_t block_size : {1, 5, 16}) {
            for (const char* kernel : {"avx2", "avx512"}) {
                cases.push_back({s.name, s.n_heads, s.n_kv_heads, s.head_dim, block_size, kernel});
                // F16 pools: every shape with blocks of 5 (odd, crossing chunks), and the rest of the sizes for
                // the shapes whose head_dim is not a multiple of 16 (the halves' tails).
                if (block_size == 5 || s.head_dim % 16 != 0) {
                    cases.push_back({s.name, s.n_heads, s.n_kv_heads, s.head_dim, block_size, kernel, kv_dtype::f16});
                }
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(gqa, attention_tiles, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<tile_case>& info) {
                             return std::string(info.param.shape) + "_block_" + std::to_string(info.param.block_size) +
                                    "_" + info.param.kernel + (info.param.kv == kv_dtype::f16 ? "_kv_f16" : "");
                         });

TEST(query_tiles, consecutive_positions_of_one_sequence_form_tiles_listed_costliest_first) {
    // Tokens:         0  1  2  3  4  5  6  7  8
    const std::vector<int32_t> seq_of = {0, 0, 0, 1, 0, 2, 2, 2, 2};
    const std::vector<int32_t> positions = {7, 8, 9, 3, 10, 0, 1, 3, 4};  // sequence 2 skips position 2
    troupe_attention_call call{};
    call.n_tokens = static_cast<int32_t>(seq_of.size());
    call.seq_of = seq_of.data();
    call.positions = positions.data();
    std::vector<gqa::query_tile> tiles(seq_of.size());
    const int32_t n = gqa::make_query_tiles(call, 2, tiles.data());
    // Cost = tokens x (last position + 1): {0, 2}: 18, {2, 1}: 10, {3, 1}: 4, {4, 1}: 11, {5, 2}: 4, {7, 2}: 10.
    const std::vector<std::pair<int32_t, int32_t>> expected = {{0, 2}, {4, 1}, {2, 1}, {7, 2}, {3, 1}, {5, 2}};
    ASSERT_EQ(n, static_cast<int32_t>(expected.size()));
    for (int32_t i = 0; i < n; ++i) {
        EXPECT_EQ(tiles[i].first_token, expected[i].first) << "tile " << i;
        EXPECT_EQ(tiles[i].n_tokens, expected[i].second) << "tile " << i;
    }
}

}  // namespace
}  // namespace troupe::testing
