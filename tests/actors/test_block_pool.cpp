// The KV allocator's block pool: tables of operations and the expected free counts and tables.
#include <gtest/gtest.h>

#include "actors/kv_allocator/block_pool.h"

namespace troupe {
namespace {

TEST(block_pool, reservations_grow_tables_all_or_nothing_and_released_blocks_are_reused_last) {
    block_pool pool({4, 6});  // 6 blocks of 4 tokens
    struct step_t {
        const char* op;
        int64_t seq;
        int32_t n_tokens;
        std::optional<std::vector<int32_t>> table;  // expected reply of reserve
        int32_t n_free;
    };
    const std::vector<step_t> steps = {
        {"reserve", 1, 5, std::vector<int32_t>{0, 1}, 4},
        {"reserve", 2, 4, std::vector<int32_t>{2}, 3},
        {"reserve", 1, 8, std::vector<int32_t>{0, 1}, 3},     // already covered
        {"reserve", 1, 9, std::vector<int32_t>{0, 1, 3}, 2},  // grows by one block
        {"reserve", 3, 12, std::nullopt, 2},                  // needs 3, 2 free: nothing changes
        {"release", 1, 0, std::nullopt, 5},                   // free list: 4 5 0 1 3
        {"reserve", 3, 12, std::vector<int32_t>{4, 5, 0}, 2},
        {"release", 9, 0, std::nullopt, 2},  // unknown: no-op
    };
    for (size_t i = 0; i < steps.size(); ++i) {
        const auto& s = steps[i];
        SCOPED_TRACE("step " + std::to_string(i));
        if (std::string(s.op) == "reserve") {
            EXPECT_EQ(pool.reserve(s.seq, s.n_tokens), s.table);
        } else {
            pool.release(s.seq);
        }
        EXPECT_EQ(pool.n_free(), s.n_free);
    }
    EXPECT_EQ(pool.table(3), (std::vector<int32_t>{4, 5, 0}));
    EXPECT_TRUE(pool.table(1).empty());
    EXPECT_EQ(pool.n_sequences(), 2);
}

TEST(block_pool, shrinking_gives_back_the_blocks_of_a_draft_room_but_keeps_cached_ones) {
    block_pool pool({4, 6}, /*prefix_caching=*/true);
    const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    ASSERT_TRUE(pool.allocate(1, 5 + 11));  // 5 tokens and 11 rows of draft room: 4 blocks
    EXPECT_EQ(pool.n_free(), 2);
    pool.commit(1, tokens, 8);  // two full blocks registered in the prefix cache
    pool.shrink(1, 6);          // the step accepted one draft: 6 rows are needed, 2 blocks
    EXPECT_EQ(pool.table(1).size(), 2u);
    EXPECT_EQ(pool.n_free(), 4);
    pool.shrink(1, 1);  // below the cached blocks: they stay
    EXPECT_EQ(pool.table(1).size(), 2u);
    pool.shrink(7, 1);  // unknown: no-op
    EXPECT_EQ(pool.n_free(), 4);
}

TEST(block_pool, a_contiguous_cache_is_one_block_of_the_context_per_sequence) {
    block_pool pool({64, 2});
    EXPECT_EQ(pool.reserve(10, 64), std::vector<int32_t>{0});
    EXPECT_EQ(pool.reserve(11, 20), std::vector<int32_t>{1});
    EXPECT_EQ(pool.reserve(12, 1), std::nullopt);
    EXPECT_EQ(pool.n_sequences(), 2);  // a refused new sequence leaves no empty table behind
    EXPECT_EQ(pool.blocks_for(65), 2);
}

std::vector<int32_t> tokens(int32_t from, int32_t n) {
    std::vector<int32_t> v;
    for (int32_t i = 0; i < n; ++i) v.push_back(from + i);
    return v;
}

TEST(block_pool, full_prompt_blocks_are_shared_by_chained_hash_once_computed) {
    block_pool pool({4, 8}, true);
    const auto prompt = tokens(100, 10);  // two full blocks and a partial one
    EXPECT_EQ(pool.match_prefix(1, prompt, 8).n_tokens, 0);
    ASSERT_TRUE(pool.allocate(1, 10));
    EXPECT_EQ(pool.table(1), (std::vector<int32_t>{0, 1, 2}));
    pool.commit(1, prompt, 10);
    // Registered but not computed yet: a lookup sees it pending, takes nothing.
    prefix_match pending = pool.peek_prefix(prompt, 8);
    EXPECT_EQ(pending.n_tokens, 0);
    EXPECT_EQ(pending.n_pending, 1);
    pool.computed(1, 10);

    struct case_t {
        int64_t seq;
        std::vector<int32_t> prompt;
        int32_t max_tokens;
        int32_t n_cached;
        std::vector<int32_t> table_head;
    };
    auto changed_first = prompt;
    changed_first[0] = 7;
    auto changed_second = prompt;
    changed_second[6] = 7;
    const std::vector<case_t> cases = {
        {2, prompt, 8, 8, {0, 1}},       // both whole blocks
        {3, prompt, 7, 4, {0}},          // at most 7 tokens: one block
        {4, changed_second, 8, 4, {0}},  // the second block differs
        {5, changed_first, 8, 0, {}},    // the first differs: the chain breaks, nothing shared
        {6, tokens(104, 6), 8, 0, {}},   // block [104..107] exists, but after another parent
    };
    for (const auto& c : cases) {
        SCOPED_TRACE("seq " + std::to_string(c.seq));
        prefix_match m = pool.match_prefix(c.seq, c.prompt, c.max_tokens);
        EXPECT_EQ(m.n_tokens, c.n_cached);
        EXPECT_EQ(pool.table(c.seq), c.table_head);
    }
    EXPECT_EQ(pool.ref_count(0), 4);  // seqs 1, 2, 3, 4
    EXPECT_EQ(pool.ref_count(1), 2);  // seqs 1, 2
    const block_pool_stats st = pool.stats();
    EXPECT_EQ(st.n_prefix_hits, 2 + 1 + 1);
    EXPECT_EQ(st.n_prefix_queries, 2 + 1 + 2 + 2 + 2 + 1);  // seq 1's miss, then the cases
}

TEST(block_pool, cached_blocks_are_evicted_in_lru_order_only_when_no_free_block_is_left) {
    block_pool pool({2, 4}, true);
    auto run = [&](int64_t seq, const std::vector<int32_t>& p) {
        pool.match_prefix(seq, p, static_cast<int32_t>(p.size()));
        ASSERT_TRUE(pool.allocate(seq, static_cast<int32_t>(p.size())));
        pool.commit(seq, p, static_cast<int32_t>(p.size()));
        pool.computed(seq, static_cast<int32_t>(p.size()));
        pool.release(seq);
    };
    run(1, tokens(10, 2));  // block 0 cached
    run(2, tokens(20, 2));  // block 1 cached (more recently used)
    block_pool_stats st = pool.stats();
    EXPECT_EQ(st.n_cached, 2);
    EXPECT_EQ(st.n_free, 2);
    EXPECT_EQ(pool.n_free(), 4);  // cached blocks can be handed out
    // A 2-block sequence takes the two plain free blocks first: nothing evicted.
    ASSERT_TRUE(pool.allocate(3, 4));
    EXPECT_EQ(pool.table(3), (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(pool.stats().n_evictions, 0);
    // One more block: the least recently used cached block (0, of seq 1) goes.
    ASSERT_TRUE(pool.allocate(4, 2));
    EXPECT_EQ(pool.table(4), std::vector<int32_t>{0});
    EXPECT_EQ(pool.stats().n_evictions, 1);
    EXPECT_EQ(pool.peek_prefix(tokens(10, 2), 2).n_tokens, 0);  // evicted
    EXPECT_EQ(pool.peek_prefix(tokens(20, 2), 2).n_tokens, 2);  // still there
    // A hit on a free cached block takes it off the free list.
    EXPECT_EQ(pool.match_prefix(5, tokens(20, 2), 2).n_tokens, 2);
    EXPECT_EQ(pool.n_free(), 0);
    EXPECT_FALSE(pool.allocate(6, 1));
}

TEST(block_pool, a_shared_block_is_copied_before_it_is_written) {
    block_pool pool({4, 4}, true);
    ASSERT_TRUE(pool.allocate(1, 6));  // blocks 0, 1
    pool.fork(1, 2);
    EXPECT_EQ(pool.ref_count(1), 2);
    bool ok = false;
    // Seq 2 writes position 6 in the shared block 1: it gets block 2 and the copy 1 -> 2.
    auto copy = pool.copy_on_write(2, 6, &ok);
    EXPECT_TRUE(ok);
    ASSERT_TRUE(copy.has_value());
    EXPECT_EQ(copy->src, 1);
    EXPECT_EQ(copy->dst, 2);
    EXPECT_EQ(pool.table(2), (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(pool.ref_count(1), 1);
    // Seq 1's block 1 is now its own: writing it needs no copy.
    EXPECT_FALSE(pool.copy_on_write(1, 6).has_value());
    pool.release(1);
    pool.release(2);
    EXPECT_EQ(pool.n_free(), 4);
}

TEST(block_pool, a_block_whose_computation_was_abandoned_is_not_served_from_the_cache) {
    block_pool pool({2, 4}, true);
    const auto p = tokens(10, 4);
    ASSERT_TRUE(pool.allocate(1, 4));
    pool.commit(1, p, 4);
    pool.release(1);  // cancelled before the step that computed it finished
    EXPECT_EQ(pool.peek_prefix(p, 4).n_tokens, 0);
    EXPECT_EQ(pool.peek_prefix(p, 4).n_pending, 0);
    EXPECT_EQ(pool.stats().n_cached, 0);
}

}  // namespace
}  // namespace troupe
