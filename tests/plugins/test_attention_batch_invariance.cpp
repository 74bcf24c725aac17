// attention/gqa gives a token the same attention, bit for bit, whatever else its call holds: alone (a decode step), in
// a chain of drafts a speculative step verifies beside another sequence's prefill chunk, or as a node of a draft tree
// (its ancestors' rows after its prefix, a sibling branch beside it). Speculative greedy decoding keeps the target's
// output only if the verification rows round exactly as the decode rows would (attention_kernels.h:
// verify_tokens_max). Each SIMD kernel, F32 and F16 pools, the 110M and 1B shapes and a small GQA one; contexts that
// are not split over positions, that cross split_min_keys inside the step (a token at 511 has 512 keys), and long
// ones; a sliding window of 700 with soft-capping, and a window of 2 (a tree node whose first ancestors lie outside
// it).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

constexpr int32_t block_size = 16;
constexpr int32_t max_rows = 1400;  // cache rows of each sequence
constexpr int32_t companion_tokens = 100;

// One token of a call: its sequence, position and cache row, and its q, k, v rows.
struct token {
    int32_t seq;
    int32_t position;
    int32_t row;
    const float* q;
    const float* k;
    const float* v;
};

// Two sequences' block tables over shared pools (blocks interleaved), and the per-sequence rows of q, k and v a token
// takes at each position (the same token, whichever call it is in).
class invariance_bench {
public:
    explicit invariance_bench(const attention_kernel_case& c) : c_(c), kvw_(c.shape.n_kv_heads * c.shape.head_dim) {
        const int32_t blocks_per_seq = max_rows / block_size + 1;
        for (int32_t s = 0; s < 2; ++s) {
            for (int32_t b = 0; b < blocks_per_seq; ++b) tables_[s].push_back(2 * b + (1 - s));
            table_ptrs_[s] = tables_[s].data();
            q_[s] = random_floats(size_t(max_rows) * c.shape.n_heads * c.shape.head_dim, 10 + s, -1.5f, 1.5f);
            k_[s] = as_halves(random_floats(size_t(max_rows) * kvw_, 20 + s, -1.5f, 1.5f));
            v_[s] = as_halves(random_floats(size_t(max_rows) * kvw_, 30 + s));
        }
        const size_t pool = size_t(2 * blocks_per_seq) * block_size * kvw_;
        k_pool_.assign(pool, NAN);
        v_pool_.assign(pool, NAN);
        if (c.kv == kv_dtype::f16) {
            for (auto* p : {&k_pool_, &v_pool_}) std::fill_n(reinterpret_cast<uint16_t*>(p->data()), pool, 0x7e00);
        }
        sibling_q_ = random_floats(size_t(c.shape.n_heads) * c.shape.head_dim, 40, -1.5f, 1.5f);
        sibling_kv_ = as_halves(random_floats(size_t(kvw_), 41, -1.5f, 1.5f));
    }

    // Token of sequence s at `position` in cache row `row` (its position unless a tree puts it elsewhere).
    token at(int32_t s, int32_t position, int32_t row = -1) const {
        const size_t qi = size_t(position) * c_.shape.n_heads * c_.shape.head_dim, ki = size_t(position) * kvw_;
        return {s, position, row < 0 ? position : row, q_[s].data() + qi, k_[s].data() + ki, v_[s].data() + ki};
    }
    // A draft that is not the chain's: its own q, k and v.
    token sibling(int32_t position, int32_t row) const {
        return {0, position, row, sibling_q_.data(), sibling_kv_.data(), sibling_kv_.data()};
    }

    // Runs one call over `tokens` (a tree call when masks is not empty: mask_base per token and one mask word each)
    // and returns its output rows [tokens, n_heads * head_dim].
    std::vector<float> run(attention_op& op, const std::vector<token>& tokens,
                           const std::vector<int32_t>& mask_base = {}, const std::vector<uint64_t>& masks = {}) {
        const auto n = static_cast<int32_t>(tokens.size());
        const size_t qw = size_t(c_.shape.n_heads) * c_.shape.head_dim;
        std::vector<float> q, k, v, out(n * qw, NAN);
        std::vector<int32_t> positions, seq_of, rows;
        for (const token& t : tokens) {
            q.insert(q.end(), t.q, t.q + qw);
            k.insert(k.end(), t.k, t.k + kvw_);
            v.insert(v.end(), t.v, t.v + kvw_);
            positions.push_back(t.position);
            seq_of.push_back(t.seq);
            rows.push_back(t.row);
        }
        attention_call call{n,
                            c_.shape.n_heads,
                            c_.shape.n_kv_heads,
                            c_.shape.head_dim,
                            1.0f / std::sqrt(float(c_.shape.head_dim)),
                            q.data(),
                            k.data(),
                            v.data(),
                            out.data(),
                            positions.data(),
                            seq_of.data(),
                            2,
                            table_ptrs_,
                            block_size,
                            k_pool_.data(),
                            v_pool_.data(),
                            c_.kv};
        call.window = c_.window;
        call.softcap = c_.softcap;
        if (!masks.empty()) {
            call.rows = rows.data();
            call.mask_base = mask_base.data();
            call.mask = masks.data();
            call.mask_words = 1;
        }
        const status st = op.forward(call, threaded_parallel_for(3));
        EXPECT_TRUE(st.ok()) << st.message();
        return out;
    }

    size_t row_floats() const { return size_t(c_.shape.n_heads) * c_.shape.head_dim; }

private:
    attention_kernel_case c_;
    int32_t kvw_;
    std::vector<int32_t> tables_[2];
    const int32_t* table_ptrs_[2];
    std::vector<float> q_[2], k_[2], v_[2];
    std::vector<float> k_pool_, v_pool_;
    std::vector<float> sibling_q_, sibling_kv_;
};

// Whether row i of a call's output is bit for bit the decode's row (NaN never equals: an unwritten row fails).
void expect_same_bits(const std::vector<float>& got, size_t i, const std::vector<float>& want, size_t row_floats,
                      const std::string& what) {
    ASSERT_GE(got.size(), (i + 1) * row_floats);
    EXPECT_EQ(std::memcmp(got.data() + i * row_floats, want.data(), row_floats * sizeof(float)), 0)
        << what << ": first difference at float " << [&] {
               for (size_t j = 0; j < row_floats; ++j) {
                   if (std::memcmp(&got[i * row_floats + j], &want[j], sizeof(float)) != 0) {
                       return std::to_string(j) + " (" + std::to_string(got[i * row_floats + j]) + " against " +
                              std::to_string(want[j]) + ")";
                   }
               }
               return std::string("none");
           }();
}

class attention_batch_invariance : public ::testing::TestWithParam<attention_kernel_case> {};

TEST_P(attention_batch_invariance, a_tokens_attention_is_the_same_alone_in_a_verified_chain_and_in_a_draft_tree) {
    const attention_kernel_case& c = GetParam();
    if (!cpu_supports(c.kernel)) GTEST_SKIP() << "this CPU lacks " << c.kernel;
    plugin_host host = real_plugins();
    auto op = host.load_attention("gqa", yaml(std::string("{kernel: ") + c.kernel + "}"));
    ASSERT_TRUE(op.ok()) << op.message();
    attention_op& attention = **op;

    // Step positions P .. P + 5 after a prefill of P tokens (a prefill chunk: query tiles).
    for (const int32_t prefix : {40, 508, 1290}) {
        SCOPED_TRACE("prefix " + std::to_string(prefix));
        invariance_bench bench(c);
        std::vector<token> prefill;
        for (int32_t p = 0; p < prefix; ++p) prefill.push_back(bench.at(0, p));
        for (int32_t p = 0; p < companion_tokens; ++p) prefill.push_back(bench.at(1, p));
        (void)bench.run(attention, prefill);

        // The reference: six decode steps, one token each.
        std::vector<std::vector<float>> decoded;
        for (int32_t i = 0; i < 6; ++i) decoded.push_back(bench.run(attention, {bench.at(0, prefix + i)}));

        // A chain of six drafts verified in one call, beside the companion's next prefill chunk (64 tokens).
        std::vector<token> chain;
        for (int32_t i = 0; i < 6; ++i) chain.push_back(bench.at(0, prefix + i));
        for (int32_t p = companion_tokens; p < companion_tokens + 64; ++p) chain.push_back(bench.at(1, p));
        const auto verified = bench.run(attention, chain);
        for (int32_t i = 0; i < 6; ++i) {
            expect_same_bits(verified, i, decoded[i], bench.row_floats(),
                             "chain token at position " + std::to_string(prefix + i));
        }

        // A tree step as the engine lays it out (core/model/draft_layout.cpp): the token at P is plainly causal (row P,
        // prefix P + 1), its drafts are tree nodes after it (mask_base P + 1, rows P + 1 + node, positions by depth):
        //   node 0 (P + 1) -> node 1 (P + 2) -> node 3 (P + 3) -> node 4 (P + 4)   the chain's tokens
        //   node 0 -> node 2 (P + 2, a sibling draft) -> node 5 (P + 3); nodes 6 .. 39 siblings under the root
        // (40 nodes: more tokens in the call than verify_tokens_max, of which one plainly causal), and a decode of the
        // companion (plainly causal) in the same call.
        constexpr int32_t n_nodes = 40;
        std::vector<int32_t> parents = {-1, 0, 0, 1, 3, 2};
        parents.resize(n_nodes, -1);
        const int32_t chain_index[6] = {1, 2, -1, 3, 4, -1};  // node -> which decode it equals (-1: a sibling's)
        std::vector<token> tree = {bench.at(0, prefix)};
        std::vector<int32_t> mask_base = {prefix + 1};
        std::vector<uint64_t> masks = {0};
        for (int32_t node = 0; node < n_nodes; ++node) {
            int32_t depth = 0;
            uint64_t mask = uint64_t{1} << node;
            for (int32_t p = parents[node]; p >= 0; p = parents[p]) {
                ++depth;
                mask |= uint64_t{1} << p;
            }
            const bool on_chain = node < 6 && chain_index[node] >= 0;
            tree.push_back(on_chain ? bench.at(0, prefix + 1 + depth, prefix + 1 + node)
                                    : bench.sibling(prefix + 1 + depth, prefix + 1 + node));
            mask_base.push_back(prefix + 1);
            masks.push_back(mask);
        }
        tree.push_back(bench.at(1, companion_tokens + 64));
        mask_base.push_back(companion_tokens + 65);
        masks.push_back(0);
        const auto in_tree = bench.run(attention, tree, mask_base, masks);
        expect_same_bits(in_tree, 0, decoded[0], bench.row_floats(),
                         "the tree step's first token, at position " + std::to_string(prefix));
        for (int32_t node = 0; node < 6; ++node) {
            if (chain_index[node] < 0) continue;
            expect_same_bits(
                in_tree, 1 + node, decoded[chain_index[node]], bench.row_floats(),
                "tree node " + std::to_string(node) + " at position " + std::to_string(prefix + chain_index[node]));
        }
    }
}

// A small GQA group of 2, the 110M shape (MHA, 12 heads of 64: a verified chain of six fills no lanes but a longer one
// would) and the 1B shape (a group of 8: one token's rows fill half of a tiled pass's lanes); no window, a window of
// 700 with Gemma 2's cap, a window of 2.
INSTANTIATE_TEST_SUITE_P(gqa, attention_batch_invariance,
                         ::testing::ValuesIn(attention_kernel_cases({"avx2", "avx512"}, {kv_dtype::f32, kv_dtype::f16},
                                                                    {{"gqa_4_heads_2_kv_dim_32", 4, 2, 32},
                                                                     {"mha_12_heads_dim_64", 12, 12, 64},
                                                                     {"gqa_32_heads_4_kv_dim_64", 32, 4, 64}},
                                                                    {{0, 0.0f}, {700, 50.0f}, {2, 0.0f}})),
                         case_name);

}  // namespace
}  // namespace troupe::testing
