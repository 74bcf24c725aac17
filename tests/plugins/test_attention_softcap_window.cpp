// attention/gqa's soft-capping and sliding window (troupe_attention_call version 4; Gemma 2, Mistral, Phi-3)
// through the ABI, every kernel (scalar, AVX2, AVX-512 where the CPU has them) against the scalar reference
// kernels/ref/attention.cpp on causal steps, and against a double-precision attention over each token's own rows on
// a tree step. Steps mix prefill chunks (query tiles, starting mid-block after a cached prefix), decodes and first
// tokens over shuffled blocks; windows shorter than a block, than a tile's span and longer than any context. The
// pools start as NaN, so a kernel that reads a row outside its window poisons its output.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "kernels/ref/attention.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

// One sequence: `prefix` positions cached by the first call, `n_step` more in the second.
struct sequence_plan {
    int32_t prefix;
    int32_t n_step;
};

// A 37-token prefill from 0 (several tiles), a decode deep in its context, a 19-token chunk after a prefix of 21,
// a first token, another decode.
const std::vector<sequence_plan> plans = {{0, 37}, {29, 1}, {21, 19}, {0, 1}, {12, 1}};

class attention_softcap_window : public ::testing::TestWithParam<attention_kernel_case> {};

TEST_P(attention_softcap_window, kernels_match_the_scalar_reference_on_prefill_chunks_and_decodes) {
    const attention_kernel_case& c = GetParam();
    if (!cpu_supports(c.kernel)) GTEST_SKIP() << "this CPU lacks " << c.kernel;
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml(std::string("{kernel: ") + c.kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();
    EXPECT_EQ((*op)->features() & (attention_softcap | attention_window), attention_softcap | attention_window);

    const auto n_seqs = static_cast<int32_t>(plans.size());
    const int32_t hd = c.shape.head_dim, bs = 4, kvw = c.shape.n_kv_heads * hd;
    std::vector<std::vector<int32_t>> tables(n_seqs);
    int32_t n_blocks = 0;
    for (const sequence_plan& p : plans) n_blocks += (p.prefix + p.n_step + bs - 1) / bs;
    std::vector<int32_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
    for (int32_t s = 0, next = 0; s < n_seqs; ++s) {
        for (int32_t b = 0; b < (plans[s].prefix + plans[s].n_step + bs - 1) / bs; ++b)
            tables[s].push_back(ids[next++]);
    }
    std::vector<const int32_t*> table_ptrs;
    for (auto& t : tables) table_ptrs.push_back(t.data());
    const size_t pool_floats = static_cast<size_t>(n_blocks) * bs * kvw;
    std::vector<float> k_pool(pool_floats, NAN), v_pool(pool_floats, NAN);
    std::vector<float> ref_k_pool(pool_floats, NAN), ref_v_pool(pool_floats, NAN);

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
        // Scores of a few units, so a soft cap of 2 changes them a lot.
        const auto q = random_floats(size_t(n) * c.shape.n_heads * hd, 40 + step, -1.5f, 1.5f);
        const auto k = random_floats(size_t(n) * kvw, 50 + step, -1.5f, 1.5f);
        const auto v = random_floats(size_t(n) * kvw, 60 + step);
        std::vector<float> out(size_t(n) * c.shape.n_heads * hd, NAN), want = out;
        attention_call call{n,
                            c.shape.n_heads,
                            c.shape.n_kv_heads,
                            hd,
                            1.0f / std::sqrt(float(hd)),
                            q.data(),
                            k.data(),
                            v.data(),
                            out.data(),
                            positions.data(),
                            seq_of.data(),
                            n_seqs,
                            table_ptrs.data(),
                            bs,
                            k_pool.data(),
                            v_pool.data()};
        call.softcap = c.softcap;
        call.window = c.window;
        const status st = (*op)->forward(call, step == 0 ? no_parallel_for() : threaded_parallel_for(3));
        ASSERT_TRUE(st.ok()) << st.message();
        attention_call ref_call = call;
        ref_call.out = want.data();
        ref_call.k_pool = ref_k_pool.data();
        ref_call.v_pool = ref_v_pool.data();
        ref::attention(ref_call);
        for (int32_t t = 0; t < n; ++t) {
            for (int32_t i = 0; i < c.shape.n_heads * hd; ++i) {
                const size_t at = static_cast<size_t>(t) * c.shape.n_heads * hd + i;
                ASSERT_NEAR(out[at], want[at], 2e-5f + 2e-5f * std::fabs(want[at]))
                    << "step " << step << " token " << t << " (sequence " << seq_of[t] << ", position " << positions[t]
                    << ") head " << i / hd << " dim " << i % hd;
            }
        }
    }
}

// Group 2 (tiles of 4 or 8 tokens), group 8 (a token fills half the AVX-512 lanes), MHA with a wide head. (window,
// softcap): Gemma 2's layers (a window of 4 with a cap, global with a cap), a window alone shorter and longer than a
// tile, one longer than every context (no effect).
INSTANTIATE_TEST_SUITE_P(
    gqa, attention_softcap_window,
    ::testing::ValuesIn(attention_kernel_cases({"scalar", "avx2", "avx512"}, {kv_dtype::f32},
                                               {{"gqa_4_heads_2_kv_dim_32", 4, 2, 32},
                                                {"gqa_16_heads_2_kv_dim_16", 16, 2, 16},
                                                {"mha_2_heads_dim_72", 2, 2, 72}},
                                               {{4, 2.0f}, {0, 2.0f}, {3, 0.0f}, {13, 0.0f}, {1000, 50.0f}})),
    case_name);

// A tree step with a window: after a cached prefix of 9 and 2 own tokens, a tree whose nodes sit at positions by
// depth; each token sees the rows of its window among the prefix, its own tokens, its ancestors and itself.
TEST(attention_softcap_window_trees, tree_tokens_see_only_the_rows_inside_their_window_by_position) {
    const std::vector<int32_t> parents = {-1, 0, 1, 2, 0, 4, 3, -1};  // a chain 0-1-2-3, branches off it
    const int32_t prefix = 9, n_own = 2, n_nodes = static_cast<int32_t>(parents.size());
    const int32_t n_heads = 4, n_kv_heads = 2, hd = 16, kvw = n_kv_heads * hd, bs = 4, window = 4;
    const float softcap = 3.0f;
    const int32_t n_rows = prefix + n_own + n_nodes, first = prefix + n_own;
    auto depth = [&](int32_t i) {
        int32_t d = 0;
        for (int32_t p = parents[i]; p >= 0; p = parents[p]) ++d;
        return d;
    };
    const auto k_rows = random_floats(size_t(n_rows) * kvw, 7, -1.5f, 1.5f);
    const auto v_rows = random_floats(size_t(n_rows) * kvw, 8);
    std::vector<int32_t> table((n_rows + bs - 1) / bs);
    std::iota(table.rbegin(), table.rend(), 0);
    const int32_t* tables[] = {table.data()};
    for (const char* kernel : {"scalar", "avx2", "avx512"}) {
        if (!cpu_supports(kernel)) continue;
        plugin_host host = real_plugins();
        auto op = host.load_attention("gqa", yaml(std::string("{kernel: ") + kernel + "}"));
        ASSERT_TRUE(op.ok()) << op.message();
        std::vector<float> k_pool(table.size() * bs * kvw, NAN), v_pool = k_pool;
        for (int call_i = 0; call_i < 2; ++call_i) {
            const int32_t begin = call_i == 0 ? 0 : prefix, end = call_i == 0 ? prefix : n_rows;
            std::vector<int32_t> positions, seq_of, rows, mask_base;
            std::vector<uint64_t> mask;
            for (int32_t row = begin; row < end; ++row) {
                const bool node = call_i == 1 && row >= first;
                positions.push_back(node ? first + depth(row - first) : row);
                seq_of.push_back(0);
                rows.push_back(row);
                mask_base.push_back(node ? first : row + 1);
                uint64_t bits = 0;
                for (int32_t nd = node ? row - first : -1; nd >= 0; nd = parents[nd]) bits |= uint64_t{1} << nd;
                mask.push_back(bits);
            }
            const auto n = static_cast<int32_t>(positions.size());
            const std::vector<float> k(k_rows.begin() + size_t(begin) * kvw, k_rows.begin() + size_t(end) * kvw);
            const std::vector<float> v(v_rows.begin() + size_t(begin) * kvw, v_rows.begin() + size_t(end) * kvw);
            const auto q = random_floats(size_t(n) * n_heads * hd, 9 + call_i, -1.5f, 1.5f);
            std::vector<float> out(q.size(), NAN);
            attention_call call{n,
                                n_heads,
                                n_kv_heads,
                                hd,
                                1.0f / std::sqrt(float(hd)),
                                q.data(),
                                k.data(),
                                v.data(),
                                out.data(),
                                positions.data(),
                                seq_of.data(),
                                1,
                                tables,
                                bs,
                                k_pool.data(),
                                v_pool.data()};
            call.window = window;
            call.softcap = softcap;
            if (call_i == 1) {
                call.rows = rows.data();
                call.mask_base = mask_base.data();
                call.mask = mask.data();
                call.mask_words = 1;
            }
            const status st = (*op)->forward(call, no_parallel_for());
            ASSERT_TRUE(st.ok()) << st.message();
            if (call_i == 0) continue;
            for (int32_t t = 0; t < n; ++t) {
                // The rows token t sees, and their positions: the prefix and own tokens up to its own row or the
                // drafts' start, then its ancestors and itself; inside the window by position.
                std::vector<int32_t> seen;
                const int32_t row = rows[t];
                for (int32_t r = 0; r < std::min(row + 1, first); ++r) {
                    if (r > positions[t] - window) seen.push_back(r);
                }
                for (int32_t nd = row >= first ? row - first : -1; nd >= 0; nd = parents[nd]) {
                    if (first + depth(nd) > positions[t] - window) seen.push_back(first + nd);
                }
                for (int32_t h = 0; h < n_heads; ++h) {
                    const int32_t kvh = h / (n_heads / n_kv_heads);
                    const float* qh = q.data() + (size_t(t) * n_heads + h) * hd;
                    std::vector<double> sc;
                    for (int32_t r : seen) {
                        double dot = 0;
                        for (int32_t d = 0; d < hd; ++d)
                            dot += double{qh[d]} * k_rows[(size_t(r) * n_kv_heads + kvh) * hd + d];
                        sc.push_back(softcap * std::tanh(dot / std::sqrt(double(hd)) / softcap));
                    }
                    const double mx = *std::max_element(sc.begin(), sc.end());
                    double sum = 0;
                    for (double& x : sc) sum += (x = std::exp(x - mx));
                    for (int32_t d = 0; d < hd; ++d) {
                        double want = 0;
                        for (size_t j = 0; j < seen.size(); ++j)
                            want += sc[j] / sum * v_rows[(size_t(seen[j]) * n_kv_heads + kvh) * hd + d];
                        ASSERT_NEAR(out[(size_t(t) * n_heads + h) * hd + d], want, 3e-5 + 3e-5 * std::fabs(want))
                            << kernel << " row " << row << " (position " << positions[t] << ") head " << h << " dim "
                            << d;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace troupe::testing
