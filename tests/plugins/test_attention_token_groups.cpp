// attention/gqa's grouping of a call's per-token tokens (token_groups.h) and the fixed cut of a long token's keys
// into parts (key_split.h): what lets a speculative step's tokens read their common prefix once. The kernels' results
// for grouped tokens are checked bit for bit against one-token decodes in test_attention_batch_invariance.cpp.
#include <troupe/plugin.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "plugins/attention/gqa/attention_kernels.h"

namespace troupe::testing {
namespace {

namespace gqa = troupe::gqa;

TEST(token_groups, tokens_of_one_sequence_with_one_first_key_are_grouped_up_to_the_cap_in_order) {
    // Tokens:          0   1   2   3   4   5   6   7
    std::vector<int32_t> seq_of = {0, 1, 0, 0, 1, 0, 0, 2};
    std::vector<int32_t> positions = {40, 7, 41, 42, 8, 43, 44, 0};
    troupe_attention_call call{};
    call.n_tokens = static_cast<int32_t>(seq_of.size());
    call.seq_of = seq_of.data();
    call.positions = positions.data();
    std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<gqa::token_group> groups(tokens.size());
    const int32_t n =
        gqa::make_token_groups(call, tokens.data(), static_cast<int32_t>(tokens.size()), 4, groups.data());
    // Sequence 0's five tokens (first key 0) make a group of 4 and one of 1; sequence 1's two, sequence 2's one; the
    // groups listed in the order of their first tokens as given (0, 1, 6, 7).
    EXPECT_EQ(tokens, (std::vector<int32_t>{0, 2, 3, 5, 6, 1, 4, 7}));
    ASSERT_EQ(n, 4);
    const std::vector<std::pair<int32_t, int32_t>> expected = {{0, 4}, {5, 2}, {4, 1}, {7, 1}};
    for (int32_t i = 0; i < n; ++i) {
        EXPECT_EQ(groups[i].first, expected[i].first) << "group " << i;
        EXPECT_EQ(groups[i].n_tokens, expected[i].second) << "group " << i;
    }
}

TEST(token_groups, a_sliding_window_separates_tokens_whose_first_keys_differ) {
    std::vector<int32_t> seq_of = {0, 0, 0};
    std::vector<int32_t> positions = {9, 10, 11};
    troupe_attention_call call{};
    call.n_tokens = 3;
    call.seq_of = seq_of.data();
    call.positions = positions.data();
    call.window = 4;  // first keys 6, 7, 8
    std::vector<int32_t> tokens = {0, 1, 2};
    std::vector<gqa::token_group> groups(3);
    EXPECT_EQ(gqa::make_token_groups(call, tokens.data(), 3, 32, groups.data()), 3);
    call.window = 0;  // all from key 0
    EXPECT_EQ(gqa::make_token_groups(call, tokens.data(), 3, 32, groups.data()), 1);
}

TEST(key_parts, a_long_tokens_keys_are_cut_every_256_from_its_first_key_the_last_part_holding_the_rest) {
    std::vector<int32_t> seq_of = {0, 0};
    std::vector<int32_t> positions = {4100, 4101};
    troupe_attention_call call{};
    call.n_tokens = 2;
    call.seq_of = seq_of.data();
    call.positions = positions.data();
    for (int32_t t = 0; t < 2; ++t) {
        const int32_t n_keys = positions[t] + 1;
        ASSERT_EQ(gqa::key_part_count(n_keys), 17);
        for (int32_t i = 0; i < 16; ++i) {
            const gqa::key_part p = gqa::key_part_of(call, t, n_keys, i);
            EXPECT_EQ(p.k0, 256 * i);  // the same parts for both tokens: shareable
            EXPECT_EQ(p.k1, 256 * (i + 1));
        }
        const gqa::key_part last = gqa::key_part_of(call, t, n_keys, 16);
        EXPECT_EQ(last.k0, 4096);
        EXPECT_EQ(last.k1, n_keys);
    }
    // A token whose keys start later (a window) cuts from its own first key.
    const gqa::key_part p = gqa::key_part_of(call, 0, 1000, 1);
    EXPECT_EQ(p.k0, 4101 - 1000 + 256);
    EXPECT_EQ(p.k1, 4101 - 1000 + 512);
}

}  // namespace
}  // namespace troupe::testing
