// attention/gqa on tree attention calls (speculative verification: troupe_attention_call version 3) through the ABI,
// every kernel against a double-precision attention over each token's own set of rows, computed from the trees'
// parents (not from the call's masks). One call mixes sequences with and without trees: a tree after own tokens
// (a chain inside it at consecutive positions, which must not become a query tile), a decode, a prefill chunk of
// 20 tokens followed by a 70-node tree (two mask words), and a plain prefill chunk. K/V values are multiples of
// 1/256, exact in F16 pools too; the pools start as NaN, so reading an unwritten row poisons the output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

struct tree_case {
    const char* shape;  // test name part
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;
    int32_t block_size;
    const char* kernel;
    kv_dtype kv;
    bool threaded;
};

void PrintTo(const tree_case& c, std::ostream* os) {
    *os << c.shape << " block " << c.block_size << " " << c.kernel << (c.kv == kv_dtype::f16 ? " f16" : " f32");
}

// One sequence of the step: `prefix` rows cached by a first call, then `n_own` own tokens and a tree of drafts.
struct sequence_plan {
    int32_t prefix;
    int32_t n_own;
    std::vector<int32_t> parents;  // [nodes] -1: follows the last own token; empty: no tree
};

std::vector<int32_t> bushy_tree(int32_t n) {
    std::vector<int32_t> p(n);
    for (int32_t i = 0; i < n; ++i) p[i] = (i == 0 || i % 9 == 4) ? -1 : i - 1 - (i * 13) % std::min(i, 5);
    return p;
}

const std::vector<sequence_plan> plans = {
    {5, 2, {-1, 0, 0, 1, -1, 4, 3}},  // nodes 0-1-3-6 a chain at consecutive positions
    {9, 1, {}},
    {0, 20, bushy_tree(70)},
    {3, 17, {}},
};

int32_t depth(const std::vector<int32_t>& parents, int32_t i) {
    int32_t d = 0;
    for (int32_t p = parents[i]; p >= 0; p = parents[p]) ++d;
    return d;
}

// The rows token i of a sequence's step sees (i counts own tokens, then nodes).
std::vector<int32_t> visible_rows(const sequence_plan& s, int32_t i) {
    const int32_t first = s.prefix + s.n_own;
    std::vector<int32_t> rows;
    if (i < s.n_own) {
        for (int32_t r = 0; r <= s.prefix + i; ++r) rows.push_back(r);
        return rows;
    }
    for (int32_t r = 0; r < first; ++r) rows.push_back(r);
    for (int32_t n = i - s.n_own; n >= 0; n = s.parents[n]) rows.push_back(first + n);
    return rows;
}

// K/V values exact in halves: multiples of 1/256 in [-2, 2].
std::vector<float> exact_halves(size_t n, uint32_t seed) {
    std::vector<float> v = random_floats(n, seed, -2.0f, 2.0f);
    for (float& x : v) x = std::round(x * 256.0f) / 256.0f;
    return v;
}

uint16_t half_of(float x) {  // exact for the values above: sign, exponent, 10 mantissa bits
    if (x == 0.0f) return 0;
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const int32_t exp = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
    return static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ffu));
}

class attention_trees : public ::testing::TestWithParam<tree_case> {};

TEST_P(attention_trees, each_token_attends_to_the_rows_before_the_drafts_its_ancestors_and_itself) {
    const tree_case& c = GetParam();
    const std::string kernel = c.kernel;
    if (kernel == "avx2" && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        GTEST_SKIP() << "this CPU lacks avx2";
    if (kernel == "avx512" && !__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "this CPU lacks avx512";
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml("{kernel: " + kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();
    ASSERT_TRUE((*op)->supports_trees());

    const auto n_seqs = static_cast<int32_t>(plans.size());
    const int32_t hd = c.head_dim, bs = c.block_size, kvw = c.n_kv_heads * hd;
    std::vector<std::vector<int32_t>> tables(n_seqs);
    std::vector<std::vector<float>> k_rows(n_seqs), v_rows(n_seqs);  // [rows, n_kv_heads, head_dim] per sequence
    int32_t n_blocks = 0;
    for (int32_t s = 0; s < n_seqs; ++s) {
        const auto n_rows = plans[s].prefix + plans[s].n_own + static_cast<int32_t>(plans[s].parents.size());
        for (int32_t b = 0; b < (n_rows + bs - 1) / bs; ++b) tables[s].push_back(b * n_seqs + (n_seqs - 1 - s));
        n_blocks = std::max(n_blocks, static_cast<int32_t>(tables[s].size()) * n_seqs);
        k_rows[s] = exact_halves(static_cast<size_t>(n_rows) * kvw, 10 + s);
        v_rows[s] = exact_halves(static_cast<size_t>(n_rows) * kvw, 20 + s);
    }
    std::vector<const int32_t*> table_ptrs;
    for (auto& t : tables) table_ptrs.push_back(t.data());
    const size_t pool_elements = static_cast<size_t>(n_blocks) * bs * kvw;
    std::vector<float> k_pool(pool_elements, NAN), v_pool(pool_elements, NAN);
    if (c.kv == kv_dtype::f16) {
        for (auto* pool : {&k_pool, &v_pool})
            std::fill_n(reinterpret_cast<uint16_t*>(pool->data()), pool_elements, 0x7e00);
    }

    // Call 0 writes the prefixes (causal); call 1 is the tree step.
    for (int call_i = 0; call_i < 2; ++call_i) {
        std::vector<float> q, k, v;
        std::vector<int32_t> positions, seq_of, rows, mask_base;
        std::vector<uint64_t> mask;
        std::vector<std::pair<int32_t, int32_t>> token_of;  // (sequence, index in its step)
        const int32_t words = 2;
        for (int32_t s = 0; s < n_seqs; ++s) {
            const sequence_plan& p = plans[s];
            const int32_t n_nodes = static_cast<int32_t>(p.parents.size());
            const int32_t begin = call_i == 0 ? 0 : p.prefix;
            const int32_t end = call_i == 0 ? p.prefix : p.prefix + p.n_own + n_nodes;
            for (int32_t row = begin; row < end; ++row) {
                const int32_t i = row - p.prefix;  // index in the tree step
                const bool node = call_i == 1 && i >= p.n_own;
                const int32_t first = p.prefix + p.n_own;
                k.insert(k.end(), k_rows[s].begin() + row * kvw, k_rows[s].begin() + (row + 1) * kvw);
                v.insert(v.end(), v_rows[s].begin() + row * kvw, v_rows[s].begin() + (row + 1) * kvw);
                positions.push_back(node ? first + depth(p.parents, i - p.n_own) : row);
                seq_of.push_back(s);
                rows.push_back(row);
                mask_base.push_back(node ? first : row + 1);
                for (int32_t w = 0; w < words; ++w) mask.push_back(0);
                if (node) {
                    for (int32_t n = i - p.n_own; n >= 0; n = p.parents[n]) {
                        mask[mask.size() - words + n / 64] |= uint64_t{1} << (n % 64);
                    }
                }
                token_of.emplace_back(s, i);
            }
        }
        const auto n_tokens = static_cast<int32_t>(positions.size());
        q = random_floats(static_cast<size_t>(n_tokens) * c.n_heads * hd, 30 + call_i, -2.0f, 2.0f);
        std::vector<float> out(q.size(), NAN);
        attention_call call{n_tokens,      c.n_heads, c.n_kv_heads,      hd,         1.0f / std::sqrt(float(hd)),
                            q.data(),      k.data(),  v.data(),          out.data(), positions.data(),
                            seq_of.data(), n_seqs,    table_ptrs.data(), bs,         k_pool.data(),
                            v_pool.data(), c.kv};
        if (call_i == 1) {
            call.rows = rows.data();
            call.mask_base = mask_base.data();
            call.mask = mask.data();
            call.mask_words = words;
        }
        const status st = (*op)->forward(call, c.threaded ? threaded_parallel_for() : no_parallel_for());
        ASSERT_TRUE(st.ok()) << st.message();
        if (call_i == 0) continue;

        for (int32_t t = 0; t < n_tokens; ++t) {
            const auto [s, i] = token_of[t];
            const std::vector<int32_t> seen = visible_rows(plans[s], i);
            // Its K row went to its own row (F16: the same value as a half).
            const int32_t row = rows[t], block = tables[s][row / bs];
            const size_t at = (static_cast<size_t>(block) * bs + row % bs) * kvw;
            const float k0 = k_rows[s][static_cast<size_t>(row) * kvw];
            if (c.kv == kv_dtype::f16) {
                ASSERT_EQ(reinterpret_cast<const uint16_t*>(k_pool.data())[at], half_of(k0)) << "row " << row;
            } else {
                ASSERT_EQ(k_pool[at], k0) << "row " << row;
            }
            for (int32_t h = 0; h < c.n_heads; ++h) {
                const int32_t kvh = h / (c.n_heads / c.n_kv_heads);
                const float* qh = q.data() + (static_cast<size_t>(t) * c.n_heads + h) * hd;
                std::vector<double> sc;
                for (int32_t r : seen) {
                    double dot = 0;
                    for (int32_t d = 0; d < hd; ++d)
                        dot += double{qh[d]} * k_rows[s][(size_t(r) * c.n_kv_heads + kvh) * hd + d];
                    sc.push_back(dot / std::sqrt(double(hd)));
                }
                const double mx = *std::max_element(sc.begin(), sc.end());
                double sum = 0;
                for (double& x : sc) sum += (x = std::exp(x - mx));
                for (int32_t d = 0; d < hd; ++d) {
                    double want = 0;
                    for (size_t j = 0; j < seen.size(); ++j)
                        want += sc[j] / sum * v_rows[s][(size_t(seen[j]) * c.n_kv_heads + kvh) * hd + d];
                    const float got = out[(static_cast<size_t>(t) * c.n_heads + h) * hd + d];
                    ASSERT_NEAR(got, want, 3e-5 + 3e-5 * std::fabs(want))
                        << "sequence " << s << " token " << i << " (row " << row << ", position " << positions[t]
                        << ") head " << h << " dim " << d;
                }
            }
        }
    }
}

std::vector<tree_case> all_cases() {
    struct shape {
        const char* name;
        int32_t n_heads, n_kv_heads, head_dim, block_size;
    };
    // Group 8 and 16 fill the vector lanes with one token: a tree node must still not be taken as a tile.
    const shape shapes[] = {{"gqa_6_heads_3_kv_dim_20", 6, 3, 20, 4},
                            {"mqa_8_heads_dim_16", 8, 1, 16, 16},
                            {"mha_4_heads_dim_64", 4, 4, 64, 8},
                            {"gqa_32_heads_2_kv_dim_24", 32, 2, 24, 5}};
    std::vector<tree_case> cases;
    int i = 0;
    for (const char* kernel : {"scalar", "avx2", "avx512"}) {
        for (const shape& s : shapes) {
            for (kv_dtype kv : {kv_dtype::f32, kv_dtype::f16}) {
                cases.push_back(
                    {s.name, s.n_heads, s.n_kv_heads, s.head_dim, s.block_size, kernel, kv, (i++ % 2) == 0});
            }
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(gqa, attention_trees, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<tree_case>& info) {
                             const tree_case& c = info.param;
                             return std::string(c.shape) + "_block_" + std::to_string(c.block_size) + "_" + c.kernel +
                                    (c.kv == kv_dtype::f16 ? "_f16" : "_f32");
                         });

// One token, one kv head, head_dim 4, one block of 16 rows; the fields of a tree call set as the case says.
status one_tree_token(attention_op& op, int32_t row, int32_t mask_base, uint64_t mask_word, int32_t words) {
    std::vector<float> x(4, 0.5f), out(4), pool(16 * 4, 0.0f);
    const int32_t pos = 3, seq = 0, table0 = 0;
    const int32_t* tables[] = {&table0};
    std::vector<uint64_t> mask(std::max(words, 1), 0);
    mask[0] = mask_word;
    attention_call call{1,          1,    1,    4, 0.5f,   x.data(), x.data(),    x.data(),
                        out.data(), &pos, &seq, 1, tables, 16,       pool.data(), pool.data()};
    call.rows = &row;
    call.mask_base = &mask_base;
    call.mask = mask.data();
    call.mask_words = words;
    return op.forward(call, no_parallel_for());
}

TEST(attention_trees_errors, a_tree_token_that_attends_to_no_row_fails_the_call) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa");
    ASSERT_TRUE(op.ok()) << op.message();
    ASSERT_TRUE(one_tree_token(**op, 2, 1, 0b10, 1).ok());
    const status st = one_tree_token(**op, 2, 0, 0, 1);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("tree attention: token 0 attends to no row"), std::string::npos) << st.message();
}

TEST(attention_trees_errors, more_mask_words_than_the_kernels_take_fail_the_call_naming_the_limit) {
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa");
    ASSERT_TRUE(op.ok()) << op.message();
    const status st = one_tree_token(**op, 2, 1, 0b10, 17);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("mask_words 17; expected mask_base, 0..16 mask words (trees of up to 1024 nodes)"),
              std::string::npos)
        << st.message();
}

TEST(attention_trees_errors, a_plugin_without_trees_is_refused_a_tree_call_by_the_host) {
    plugin_host host = fixture_plugins();
    auto p = host.load(plugin_kind::attention, "v1ref");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_FALSE(p->attention->supports_trees());
    const status st = one_tree_token(*p->attention, 2, 1, 0b10, 1);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("does not take tree attention calls"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace troupe::testing
