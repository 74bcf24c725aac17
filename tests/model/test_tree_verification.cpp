// Tree verification in cpu_llama on stories260K (sequence_step::tree_parents, keep_tree_path): a tree step's logits
// for each node equal those of a fresh sequence that runs the same context and then the node's root-to-node path as
// a plain chain; after keep_tree_path of an accepted path, decoding on gives the logits of a sequence that ran that
// path as a chain; the taps name each row's draft node. With F32 and F16 KV pools, blocks of 16 rows handed out in
// reverse so trees and moved rows cross blocks; one batch mixes two trees (9 and 70 nodes: two mask words), a chain
// of drafts and a decode.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

constexpr int32_t k_blocks_per_slot = 8;  // 128 rows per sequence slot

// Slot s's blocks, in reverse order: consecutive rows cross into a block far away.
std::vector<int32_t> slot_table(int32_t slot) {
    std::vector<int32_t> t;
    for (int32_t b = 0; b < k_blocks_per_slot; ++b) t.push_back(slot * k_blocks_per_slot + (k_blocks_per_slot - 1 - b));
    return t;
}

std::vector<int32_t> context_tokens(int32_t n, int32_t salt, int32_t n_vocab) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < n; ++i) p.push_back(1 + (salt * 31 + i * 17) % (n_vocab - 1));
    return p;
}

std::vector<int32_t> bushy_tree(int32_t n) {
    std::vector<int32_t> p(n);
    for (int32_t i = 0; i < n; ++i) p[i] = (i == 0 || i % 9 == 4) ? -1 : i - 1 - (i * 13) % std::min(i, 5);
    return p;
}

// Node i's path from its root: the draft tokens a chain runs to reach it.
std::vector<int32_t> path_tokens(const std::vector<int32_t>& parents, const std::vector<int32_t>& drafts, int32_t i) {
    std::vector<int32_t> path;
    for (int32_t n = i; n >= 0; n = parents[n]) path.insert(path.begin(), drafts[n]);
    return path;
}

class node_recorder final : public tap_sink {
public:
    uint64_t wanted() const override { return tap_bit(tap_point::layer_out) | tap_bit(tap_point::logits); }
    status observe(const tap_data& d) override {
        auto& nodes = d.tap == tap_point::logits ? logit_nodes : layer_nodes;
        auto& positions = d.tap == tap_point::logits ? logit_positions : layer_positions;
        nodes = d.nodes ? std::vector<int32_t>(d.nodes, d.nodes + d.n_rows) : std::vector<int32_t>{};
        positions.assign(d.positions, d.positions + d.n_rows);
        with_nodes = d.nodes != nullptr;
        return {};
    }
    std::vector<int32_t> layer_nodes, logit_nodes, layer_positions, logit_positions;
    bool with_nodes = false;
};

result<loaded_model> load(const std::string& path, kv_cache_type kv) {
    engine_config c = testing::golden_config(path, testing::golden_setup::builtin_float);
    c.kv.dtype = kv;
    c.scheduler.max_running_seqs = 8;
    return load_model(c);
}

// Logits of the last token of a fresh chain `tokens` from position 0 (slot 7's blocks).
std::vector<float> chain_logits(model_runner& r, const std::vector<int32_t>& tokens) {
    forward_batch b;
    b.seqs.push_back(sequence_step{900, tokens, 0, slot_table(7)});
    forward_output out;
    const status st = r.forward(b, out);
    EXPECT_TRUE(st.ok()) << st.message();
    auto row = out.row(0);
    return {row.begin(), row.end()};
}

float max_diff(std::span<const float> a, const std::vector<float>& b) {
    float worst = 0;
    for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

// F32 pools: 1e-4. F16 pools: a K/V value whose last float bits differ between two batchings of the same tokens (the
// products of a 71-token step and of a 5-token one round differently) can round to the neighbouring half; the same
// chain run in one step and token by token already differs by 1.5e-3 in the logits here, so trees get 1e-2 (a row
// read from the wrong place moves logits by 0.1 and more).
float tolerance(kv_cache_type kv) {
    return kv == kv_cache_type::f16 ? 1e-2f : 1e-4f;
}

class tree_verification : public ::testing::TestWithParam<kv_cache_type> {};

TEST_P(tree_verification, each_node_gets_the_logits_of_its_path_run_as_a_chain_and_the_taps_name_the_nodes) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path, GetParam());
    ASSERT_TRUE(m.ok()) << m.message();
    model_runner& r = *m->runner;
    ASSERT_TRUE(r.supports_trees());
    auto taps = std::make_shared<node_recorder>();
    m->cpu->attach_taps(taps);
    const int32_t nv = r.n_vocab();

    // Sequences: 0 a 9-node tree after 12 context tokens, 1 a decode, 2 a chain of 3 drafts, 3 a 70-node tree.
    struct plan {
        std::vector<int32_t> context;  // the last one runs in the tree step
        std::vector<int32_t> parents;  // empty: no tree
        int32_t n_chain_drafts = 0;
    };
    const std::vector<plan> plans = {{context_tokens(12, 1, nv), {-1, 0, 0, 1, -1, 4, 2, 6, 3}},
                                     {context_tokens(7, 2, nv), {}},
                                     {context_tokens(5, 3, nv), {}, 3},
                                     {context_tokens(9, 4, nv), bushy_tree(70)}};
    forward_batch prefill, step;
    std::vector<std::vector<int32_t>> drafts;
    for (int32_t s = 0; s < static_cast<int32_t>(plans.size()); ++s) {
        const plan& p = plans[s];
        const auto n_ctx = static_cast<int32_t>(p.context.size());
        prefill.seqs.push_back(
            sequence_step{s, std::vector<int32_t>(p.context.begin(), p.context.end() - 1), 0, slot_table(s)});
        const int32_t n_draft = p.parents.empty() ? p.n_chain_drafts : static_cast<int32_t>(p.parents.size());
        drafts.push_back(context_tokens(n_draft, 10 + s, nv));
        sequence_step st{s, {p.context.back()}, n_ctx - 1, slot_table(s), /*all_logits=*/true};
        st.tokens.insert(st.tokens.end(), drafts[s].begin(), drafts[s].end());
        st.n_draft = n_draft;
        st.tree_parents = p.parents;
        step.seqs.push_back(st);
    }
    forward_output out;
    ASSERT_TRUE(r.forward(prefill, out).ok());
    EXPECT_FALSE(taps->with_nodes) << "a step without drafts has no nodes";
    const status st = r.forward(step, out);
    ASSERT_TRUE(st.ok()) << st.message();

    // Taps: -1 for each sequence's own token, then its nodes; positions by depth in trees.
    std::vector<int32_t> want_nodes, want_positions;
    for (size_t s = 0; s < plans.size(); ++s) {
        const auto n_ctx = static_cast<int32_t>(plans[s].context.size());
        want_nodes.push_back(-1);
        want_positions.push_back(n_ctx - 1);
        for (int32_t i = 0; i < step.seqs[s].n_draft; ++i) {
            want_nodes.push_back(i);
            int32_t depth = 0;
            if (!plans[s].parents.empty()) {
                for (int32_t p = plans[s].parents[i]; p >= 0; p = plans[s].parents[p]) ++depth;
            } else {
                depth = i;
            }
            want_positions.push_back(n_ctx + depth);
        }
    }
    EXPECT_EQ(taps->layer_nodes, want_nodes);
    EXPECT_EQ(taps->logit_nodes, want_nodes);  // every row has logits (all_logits)
    EXPECT_EQ(taps->layer_positions, want_positions);

    for (size_t s = 0; s < plans.size(); ++s) {
        const plan& p = plans[s];
        SCOPED_TRACE("sequence " + std::to_string(s));
        EXPECT_LT(max_diff(out.row(s, 0), chain_logits(r, p.context)), tolerance(GetParam())) << "its own token";
        for (int32_t i = 0; i < step.seqs[s].n_draft; ++i) {
            std::vector<int32_t> chain = p.context;
            const std::vector<int32_t> tail = p.parents.empty()
                                                  ? std::vector<int32_t>(drafts[s].begin(), drafts[s].begin() + i + 1)
                                                  : path_tokens(p.parents, drafts[s], i);
            chain.insert(chain.end(), tail.begin(), tail.end());
            EXPECT_LT(max_diff(out.row(s, 1 + i), chain_logits(r, chain)), tolerance(GetParam())) << "node " << i;
        }
    }
}

TEST_P(tree_verification, after_keeping_an_accepted_path_decoding_continues_as_if_the_path_had_run_as_a_chain) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path, GetParam());
    ASSERT_TRUE(m.ok()) << m.message();
    model_runner& r = *m->runner;
    const int32_t nv = r.n_vocab();
    const std::vector<int32_t> context = context_tokens(14, 5, nv);  // first draft row 14: trees cross into block 2
    const std::vector<int32_t> parents = {-1, 0, 0, 1, -1, 4, 2, 6, 3, 8};
    const std::vector<int32_t> drafts = context_tokens(10, 6, nv);
    // Accepted paths: the second root and its child (both rows move), a deep path partly in place (0, 1) and
    // partly moved (3, 8, 9), the first root alone (in place), none.
    const std::vector<std::vector<int32_t>> paths = {{4, 5}, {0, 1, 3, 8, 9}, {0}, {}};
    const std::vector<int32_t> next = context_tokens(3, 7, nv);  // tokens decoded after the path

    forward_batch b;
    for (int32_t s = 0; s < static_cast<int32_t>(paths.size()); ++s) {
        b.seqs.push_back(sequence_step{s, std::vector<int32_t>(context.begin(), context.end() - 1), 0, slot_table(s)});
    }
    forward_output out;
    ASSERT_TRUE(r.forward(b, out).ok());
    b.seqs.clear();
    for (int32_t s = 0; s < static_cast<int32_t>(paths.size()); ++s) {
        sequence_step st{s, {context.back()}, 13, slot_table(s), true};
        st.tokens.insert(st.tokens.end(), drafts.begin(), drafts.end());
        st.n_draft = 10;
        st.tree_parents = parents;
        b.seqs.push_back(st);
    }
    ASSERT_TRUE(r.forward(b, out).ok());
    for (size_t s = 0; s < paths.size(); ++s) {
        const status kept = r.keep_tree_path(b.seqs[s], paths[s]);
        ASSERT_TRUE(kept.ok()) << kept.message();
    }
    for (size_t s = 0; s < paths.size(); ++s) {
        SCOPED_TRACE("path of " + std::to_string(paths[s].size()) + " nodes");
        std::vector<int32_t> chain = context;
        for (int32_t node : paths[s]) chain.push_back(drafts[node]);
        for (size_t j = 0; j < next.size(); ++j) {
            forward_batch d;
            d.seqs.push_back(sequence_step{static_cast<int64_t>(s),
                                           {next[j]},
                                           static_cast<int32_t>(chain.size()),
                                           slot_table(static_cast<int32_t>(s))});
            ASSERT_TRUE(r.forward(d, out).ok());
            chain.push_back(next[j]);
            const std::vector<float> got(out.row(0).begin(), out.row(0).end());
            EXPECT_LT(max_diff(got, chain_logits(r, chain)), tolerance(GetParam())) << "decode step " << j;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(kv, tree_verification, ::testing::Values(kv_cache_type::f32, kv_cache_type::f16),
                         [](const ::testing::TestParamInfo<kv_cache_type>& info) {
                             return std::string(kv_cache_type_name(info.param));
                         });

TEST(tree_verification_errors, trees_too_large_bad_parents_and_paths_that_are_not_tree_paths_are_refused) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto m = load(path, kv_cache_type::f32);
    ASSERT_TRUE(m.ok()) << m.message();
    model_runner& r = *m->runner;
    forward_output out;
    const auto tree_step = [](int32_t n_nodes, std::vector<int32_t> parents) {
        sequence_step st{3, std::vector<int32_t>(n_nodes + 1, 5), 0, slot_table(0), true};
        for (int32_t b = k_blocks_per_slot; b < 40; ++b) st.block_table.push_back(b);
        st.n_draft = n_nodes;
        st.tree_parents = std::move(parents);
        return st;
    };
    struct refusal {
        sequence_step step;
        const char* message;
    };
    const refusal refusals[] = {
        {tree_step(257, std::vector<int32_t>(257, -1)),
         "sequence 3: a tree of 257 drafts, above the 256 nodes verified in one step"},
        {tree_step(3, {-1, 0, 2}), "sequence 3: tree node 2 has parent 2, expected -1..1"},
        {tree_step(3, {-1, 0}), "sequence 3: tree_parents has 2 entries, expected n_draft = 3"},
    };
    for (const refusal& c : refusals) {
        const status st = r.forward(forward_batch{{c.step}}, out);
        ASSERT_FALSE(st.ok()) << c.message;
        EXPECT_EQ(st.message(), c.message);
    }
    const sequence_step ok = tree_step(4, {-1, 0, -1, 2});
    ASSERT_TRUE(r.forward(forward_batch{{ok}}, out).ok());
    const status st = r.keep_tree_path(ok, std::vector<int32_t>{2, 1});
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(),
              "keep_tree_path of sequence 3: path entry 1 is node 1, expected a child of node 2 among the 4 nodes");
}

}  // namespace
}  // namespace troupe
