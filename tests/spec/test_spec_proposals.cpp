// Proposals of spec/ngram (version 2) and spec/lookahead through the ABI (plugin_speculator): trees of several
// earlier continuations, capacities, and the lookahead plugin's verification branch and window.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "core/plugin_host/plugin_host.h"
#include "core/sampling/draft_tree.h"

namespace troupe {
namespace {

plugin_host built_plugins() {
    return plugin_host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR});
}

draft_tree propose_one(speculator& spec, int64_t seq_id, const std::vector<int32_t>& context, int32_t max_nodes) {
    draft_request r;
    r.seq_id = seq_id;
    r.tokens = context;
    r.n_new = 1;
    r.max_nodes = max_nodes;
    r.max_depth = max_nodes;
    draft_tree tree;
    const status st = spec.propose(std::span<const draft_request>(&r, 1), std::span<draft_tree>(&tree, 1));
    EXPECT_TRUE(st.ok()) << st.message();
    return tree;
}

TEST(ngram_v2, proposes_the_continuations_of_several_earlier_occurrences_as_a_trie_latest_first) {
    plugin_host host = built_plugins();
    auto spec = host.load_spec("ngram", YAML::Load("{ngram_min: 2, ngram_max: 2, max_draft: 2, branches: 3}"));
    ASSERT_TRUE(spec.ok()) << spec.message();
    EXPECT_EQ((*spec)->max_nodes(), 6);
    // "1 2" was followed by 3 1, by 4 1, by 5 9 (latest); the latest is the first path.
    const std::vector<int32_t> context = {1, 2, 3, 1, 2, 4, 1, 2, 5, 9, 1, 2};
    draft_tree t = propose_one(**spec, 1, context, 6);
    EXPECT_EQ(t.tokens, (std::vector<int32_t>{5, 9, 4, 1, 3, 1}));
    EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, -1, 2, -1, 4}));
    EXPECT_TRUE(t.q.empty());
    // A smaller capacity keeps the first nodes: still a tree whose first path is version 1's draft.
    t = propose_one(**spec, 1, context, 3);
    EXPECT_EQ(t.tokens, (std::vector<int32_t>{5, 9, 4}));
    EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, -1}));
}

TEST(ngram_v2, merges_continuations_that_share_a_prefix) {
    plugin_host host = built_plugins();
    auto spec = host.load_spec("ngram", YAML::Load("{ngram_min: 1, ngram_max: 1, max_draft: 3, branches: 4}"));
    ASSERT_TRUE(spec.ok()) << spec.message();
    // "7" was followed by 8 1, by 8 2 and by 8 1 again: one 8 with children 1 (latest) and 2.
    const std::vector<int32_t> context = {7, 8, 1, 7, 8, 2, 7, 8, 1, 7};
    const draft_tree t = propose_one(**spec, 1, context, 12);
    EXPECT_EQ(t.tokens, (std::vector<int32_t>{8, 1, 7, 2, 7}));
    EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, 1, 0, 3}));
}

TEST(lookahead_plugin, proposes_the_pool_n_grams_of_the_last_token_then_its_window_within_the_capacity) {
    plugin_host host = built_plugins();
    auto spec = host.load_spec("lookahead", YAML::Load("{lookahead: true, window: 3, ngram: 3, guesses: 2}"));
    ASSERT_TRUE(spec.ok()) << spec.message();
    // 2 guesses of 2 tokens, and a window of (W-1) + (N-2) W = 5 nodes (W+N-3 = 3 in its first step).
    EXPECT_EQ((*spec)->max_nodes(), 4 + 5);
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 1, 5, 6, 9, 1};
    ASSERT_TRUE((*spec)->begin(7, prompt).ok());
    draft_tree t = propose_one(**spec, 7, prompt, 9);
    // The pool's 3-grams after "1": "1 5 6" (latest) and "1 2 3"; then the window's first level, a chain of 3
    // tokens drawn from the prompt.
    ASSERT_EQ(t.size(), 7u);
    EXPECT_EQ(std::vector<int32_t>(t.tokens.begin(), t.tokens.begin() + 4), (std::vector<int32_t>{5, 6, 2, 3}));
    EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, -1, 2, -1, 4, 5}));
    for (size_t i = 4; i < 7; ++i) EXPECT_NE(std::find(prompt.begin(), prompt.end(), t.tokens[i]), prompt.end());
    // No room for the whole window: the guesses alone.
    t = propose_one(**spec, 7, prompt, 6);
    EXPECT_EQ(t.tokens, (std::vector<int32_t>{5, 6, 2, 3}));
    (*spec)->end(7, sequence_end::finished);
}

TEST(lookahead_plugin, bad_params_are_refused_with_the_key_and_the_range) {
    plugin_host host = built_plugins();
    auto r = host.load_spec("lookahead", YAML::Load("{window: 0, ngram: 2, guesses: 3, windw: 4}"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin spec/lookahead: params.window: must be between 1 and 64, got 0; "
              "params.ngram: must be between 3 and 16, got 2; "
              "params.windw: unknown key (valid keys: window, ngram, guesses, lookahead, pool_from_prompt, seed)");
}

}  // namespace
}  // namespace troupe
