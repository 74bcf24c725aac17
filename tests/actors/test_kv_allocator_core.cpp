// The KV allocator's core alone: what it grants for each kv_step_request (frees, grows, admissions,
// preemptions, prefix-cache sharing), step by step.
#include <gtest/gtest.h>

#include "actors/kv_allocator/kv_allocator_core.h"

namespace troupe {
namespace {

kv_allocator_params params(int32_t n_blocks, bool prefix_caching = true) {
    return kv_allocator_params{kv_geometry{4, n_blocks}, 16, prefix_caching};
}

kv_admit admit(int64_t id, std::vector<int32_t> tokens) {
    return {id, std::make_shared<const std::vector<int32_t>>(std::move(tokens)), 0, false};
}

kv_step_request request(int64_t step_id) {
    kv_step_request r;
    r.step_id = step_id;
    r.token_budget = 64;
    r.max_running = 4;
    return r;
}

struct granted_seq {
    int64_t seq;
    int32_t n_tokens;
    size_t n_blocks;
    bool operator==(const granted_seq&) const = default;
};

std::vector<granted_seq> seqs_of(const kv_step_grant& g) {
    std::vector<granted_seq> v;
    for (const auto& q : g.seqs) v.push_back({q.seq_id, q.n_tokens, q.block_table->size()});
    return v;
}

void PrintTo(const granted_seq& s, std::ostream* os) {
    *os << "{" << s.seq << " x" << s.n_tokens << " blocks " << s.n_blocks << "}";
}

TEST(kv_allocator_core, admissions_grows_and_frees_are_granted_with_their_block_tables) {
    kv_allocator_core kv(params(4));
    kv_step_request r = request(1);
    r.admits = {admit(1, {1, 2, 3, 4, 5, 6})};
    kv_step_grant g = kv.grant(r);
    EXPECT_EQ(g.step_id, 1);
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 6, 2}}));
    ASSERT_EQ(g.admitted.size(), 1u);
    EXPECT_EQ(g.admitted[0].seq_id, 1);
    EXPECT_EQ(g.admitted[0].n_computed, 0);
    EXPECT_EQ(g.admitted[0].n_blocks, 2);
    EXPECT_TRUE(g.deferred.empty());
    EXPECT_EQ(g.pool.n_used, 2);
    EXPECT_EQ(g.pool.n_free, 2);

    // The decode after the prompt: one token, the same two blocks (7 rows fit in 8).
    r = request(2);
    r.computed = {{1, 6}};
    r.grows = {{1, 6, 0, {7}}};
    g = kv.grant(r);
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 1, 2}}));
    EXPECT_EQ(*g.seqs[0].block_table, kv.pool().table(1));

    // Then row 8 needs a third block.
    r = request(3);
    r.computed = {{1, 7}};
    r.grows = {{1, 7, 0, {8}}};
    g = kv.grant(r);
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 1, 2}}));
    r = request(4);
    r.computed = {{1, 8}};
    r.grows = {{1, 8, 0, {9}}};
    g = kv.grant(r);
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 1, 3}}));
    EXPECT_EQ(g.pool.n_used, 3);

    // Freed: every block is back; its two full, computed blocks stay cached for a later prefix.
    r = request(5);
    r.frees = {1};
    g = kv.grant(r);
    EXPECT_TRUE(g.seqs.empty());
    EXPECT_EQ(g.pool.n_used, 0);
    EXPECT_EQ(g.pool.n_cached, 2);
    EXPECT_EQ(kv.pool().n_free(), 4);
}

TEST(kv_allocator_core, when_blocks_run_out_the_latest_running_sequence_is_preempted_by_recompute_or_swap) {
    for (const preemption_mode mode : {preemption_mode::recompute, preemption_mode::swap}) {
        SCOPED_TRACE(std::string(preemption_mode_name(mode)));
        kv_allocator_core kv(params(3));
        kv_step_request r = request(1);
        r.admits = {admit(1, {1, 2, 3, 4}), admit(2, {5, 6, 7, 8})};
        kv_step_grant g = kv.grant(r);
        EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 4, 1}, {2, 4, 1}}));
        ASSERT_EQ(g.admitted.size(), 2u);

        // Both decode and need a second block; one is free: 1 gets it, 2 is preempted.
        r = request(2);
        r.preemption = mode;
        r.computed = {{1, 4}, {2, 4}};
        r.grows = {{1, 4, 0, {9}}, {2, 4, 0, {10}}};
        r.admits = {admit(3, {11, 12})};
        g = kv.grant(r);
        EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 1, 2}}));
        ASSERT_EQ(g.preempted.size(), 1u);
        EXPECT_EQ(g.preempted[0].seq_id, 2);
        if (mode == preemption_mode::swap) {
            EXPECT_TRUE(g.preempted[0].swapped);
            EXPECT_EQ(g.preempted[0].blocks.size(), 1u);
            EXPECT_EQ(g.preempted[0].n_computed, 4);
        } else {
            EXPECT_FALSE(g.preempted[0].swapped);
            EXPECT_TRUE(g.preempted[0].blocks.empty());
        }
        // No admission in a step that preempted: the victim is first in line again, then 3.
        EXPECT_TRUE(g.admitted.empty());
        EXPECT_EQ(g.deferred, (std::vector<int64_t>{2, 3}));
        EXPECT_EQ(g.pool.n_used, 2);
        EXPECT_TRUE(kv.pool().table(2).empty());
    }
}

TEST(kv_allocator_core, a_sequence_that_can_never_fit_fails_and_the_queue_goes_on) {
    kv_allocator_core kv(params(2));
    kv_step_request r = request(1);
    r.admits = {admit(1, {1, 2, 3, 4, 5, 6, 7, 8, 9}), admit(2, {1, 2})};
    const kv_step_grant g = kv.grant(r);
    ASSERT_EQ(g.failed.size(), 1u);
    EXPECT_EQ(g.failed[0].seq_id, 1);
    EXPECT_EQ(g.failed[0].n_tokens, 10);
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{2, 2, 1}}));
}

TEST(kv_allocator_core, a_cached_prefix_is_shared_and_a_prefix_still_being_computed_defers_admission) {
    kv_allocator_core kv(params(8));
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    kv_step_request r = request(1);
    r.admits = {admit(1, prompt), admit(2, prompt), admit(3, {40, 41})};
    kv_step_grant g = kv.grant(r);
    // 2 shares 1's first blocks, which this very step computes: it waits (and 3 behind it, FCFS).
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 9, 3}}));
    EXPECT_EQ(g.deferred, (std::vector<int64_t>{2, 3}));

    r = request(2);
    r.computed = {{1, 9}};
    r.grows = {{1, 9, 0, {10}}};
    r.admits = {admit(2, prompt), admit(3, {40, 41})};
    g = kv.grant(r);
    ASSERT_EQ(g.admitted.size(), 2u);
    EXPECT_EQ(g.admitted[0].seq_id, 2);
    EXPECT_EQ(g.admitted[0].n_cached, 8);  // two whole blocks; the last token runs for its logits
    EXPECT_EQ(g.admitted[0].n_computed, 8);
    EXPECT_EQ(g.admitted[1].n_cached, 0);
    EXPECT_EQ(seqs_of(g), (std::vector<granted_seq>{{1, 1, 3}, {2, 1, 3}, {3, 2, 1}}));
    EXPECT_EQ((*g.seqs[1].block_table)[0], (*g.seqs[0].block_table)[0]);
    EXPECT_EQ((*g.seqs[1].block_table)[1], (*g.seqs[0].block_table)[1]);
    EXPECT_NE((*g.seqs[1].block_table)[2], (*g.seqs[0].block_table)[2]);
    EXPECT_EQ(g.pool.n_prefix_hits, 2);
}

TEST(kv_allocator_core, the_token_budget_is_spent_on_decodes_and_drafts_first_then_prefill_chunks) {
    kv_allocator_core kv(params(8));
    kv_step_request r = request(1);
    r.admits = {admit(1, {1, 2, 3})};
    (void)kv.grant(r);
    r = request(2);
    r.token_budget = 4;
    r.computed = {{1, 3}};
    r.grows = {{1, 3, 2, {4}}};  // a decode with room for two draft tokens
    r.admits = {admit(2, {20, 21, 22, 23, 24, 25})};
    const kv_step_grant g = kv.grant(r);
    ASSERT_EQ(g.seqs.size(), 2u);
    EXPECT_EQ(g.seqs[0].n_tokens, 1);
    EXPECT_EQ(g.seqs[0].max_draft, 2);
    EXPECT_EQ(g.seqs[1].seq_id, 2);
    EXPECT_EQ(g.seqs[1].n_tokens, 1);  // the first chunk gets what is left of the budget
}

}  // namespace
}  // namespace troupe
