// kv_group_pool: a block table per KV layer group (global / sliding-window) per sequence over one block_pool, and
// block_pool's release_before underneath. A windowed group's blocks go back to the pool as the sequence advances,
// never one a query at or after the sequence's next position still reads.
#include <gtest/gtest.h>

#include <set>

#include "actors/kv_allocator/kv_allocator_core.h"
#include "actors/kv_allocator/kv_group_pool.h"

namespace troupe {
namespace {

std::vector<int32_t> tokens(int32_t first, int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) t[i] = first + i;
    return t;
}

// Every position a query at q reads in a window of w (q - w, q] lies in a block the table still holds.
void expect_window_held(const std::vector<int32_t>& table, int32_t q, int32_t w, int32_t bs) {
    for (int32_t p = std::max(0, q - w + 1); p <= q; ++p) {
        ASSERT_LT(static_cast<size_t>(p / bs), table.size());
        EXPECT_NE(table[p / bs], block_pool::no_block) << "position " << p << " is inside the window of " << q;
    }
}

TEST(block_pool, release_before_drops_only_blocks_wholly_below_the_position_and_frees_them) {
    block_pool pool({4, 8});
    ASSERT_TRUE(pool.allocate(1, 14));        // blocks 0 1 2 3
    EXPECT_EQ(pool.release_before(1, 7), 1);  // block 0 holds 0..3 < 7; block 1 holds 4..7, 7 is not below
    EXPECT_EQ(pool.table(1), (std::vector<int32_t>{block_pool::no_block, 1, 2, 3}));
    EXPECT_EQ(pool.n_free(), 5);
    EXPECT_EQ(pool.release_before(1, 8), 1);
    EXPECT_EQ(pool.release_before(1, 8), 0);  // already gone
    ASSERT_TRUE(pool.allocate(1, 17));        // the table keeps its holes and grows at the end
    EXPECT_EQ(pool.table(1).size(), 5u);
    pool.shrink(1, 1);  // the draft room goes, never the holes' entries
    EXPECT_EQ(pool.table(1), (std::vector<int32_t>{block_pool::no_block, block_pool::no_block}));
    EXPECT_EQ(pool.n_free(), 8);
    pool.release(1);
    EXPECT_EQ(pool.n_free(), 8);
}

TEST(kv_group_pool, one_global_group_is_the_block_pool_as_it_was) {
    kv_group_pool groups({4, 6}, {});
    block_pool plain({4, 6});
    for (const auto& [seq, n] : {std::pair{1, 5}, {2, 4}, {1, 9}, {3, 12}}) {
        EXPECT_EQ(groups.allocate(seq, n), plain.allocate(seq, n));
        EXPECT_EQ(groups.table(seq), plain.table(seq));
        EXPECT_EQ(groups.n_free(), plain.n_free());
    }
    EXPECT_EQ(groups.slide(1, 9), 0);
    EXPECT_TRUE(groups.more_tables(1).empty());
    EXPECT_EQ(groups.blocks_needed(64), 16);
}

TEST(kv_group_pool, a_windowed_group_releases_blocks_as_positions_advance_and_never_one_inside_the_window) {
    const int32_t bs = 4, w = 6;
    kv_group_pool pool({bs, 64}, {0, w});  // Gemma 2: a global group and a windowed one
    int32_t max_windowed = 0;
    for (int32_t next = 0; next < 60; ++next) {
        pool.slide(7, next);
        ASSERT_TRUE(pool.allocate(7, next + 1));  // a decode at `next`
        const auto& global = pool.table(7, 0);
        const auto& windowed = pool.table(7, 1);
        EXPECT_EQ(global.size(), static_cast<size_t>(next / bs + 1));
        EXPECT_EQ(windowed.size(), global.size());
        for (int32_t b : global) EXPECT_NE(b, block_pool::no_block);
        expect_window_held(windowed, next, w, bs);
        int32_t held = 0;
        for (int32_t b : windowed) held += b != block_pool::no_block;
        max_windowed = std::max(max_windowed, held);
        // What it holds is what blocks_needed counts beside the global table, and no block is in two tables.
        EXPECT_LE(static_cast<int32_t>(global.size()) + held, pool.blocks_needed(next + 1));
        std::set<int32_t> ids(global.begin(), global.end());
        for (int32_t b : windowed) {
            if (b != block_pool::no_block) {
                EXPECT_TRUE(ids.insert(b).second) << "block " << b << " in two tables";
            }
        }
        EXPECT_EQ(pool.n_free(), 64 - static_cast<int32_t>(global.size()) - held);
    }
    EXPECT_EQ(max_windowed, (w + bs - 1) / bs + 1);  // the window's blocks plus the one it starts inside
    pool.release(7);
    EXPECT_EQ(pool.n_free(), 64);
}

TEST(kv_group_pool, a_prefill_chunk_slides_before_it_allocates_and_fits_counts_every_group) {
    kv_group_pool pool({4, 10}, {0, 4});
    ASSERT_TRUE(pool.allocate(1, 16));  // 4 blocks in each group: 2 free
    EXPECT_EQ(pool.n_free(), 2);
    EXPECT_EQ(pool.fits(1, 16, 100), 4);  // one more block in each group: 4 tokens
    EXPECT_EQ(pool.slide(1, 16), 3);      // next query 16 reads 13..16: blocks 0..2 go
    EXPECT_EQ(pool.fits(1, 16, 100), 8);  // 5 free: 2 more in each group
    ASSERT_TRUE(pool.allocate(1, 16 + 8));
    expect_window_held(pool.table(1, 1), 16, 4, 4);
    EXPECT_FALSE(pool.allocate(1, 16 + 12));  // needs 2, 1 free: nothing changes
    EXPECT_EQ(pool.table(1, 0).size(), 6u);
    EXPECT_EQ(pool.table(1, 1).size(), 6u);
}

TEST(kv_group_pool, every_layer_windowed_is_one_group_with_holes) {
    kv_group_pool pool({4, 8}, {8});  // Mistral v0.1 style
    ASSERT_TRUE(pool.allocate(3, 20));
    EXPECT_EQ(pool.slide(3, 20), 3);  // query 20 reads 13..20: blocks 0..2 hold 0..11
    EXPECT_EQ(pool.table(3),
              (std::vector<int32_t>{block_pool::no_block, block_pool::no_block, block_pool::no_block, 3, 4}));
    EXPECT_EQ(pool.blocks_needed(1000), 8 / 4 + 1);
    EXPECT_EQ(pool.blocks_needed(1000, 16), (8 - 1 + 16 + 3) / 4 + 1);  // steps of 16 tokens hold more
    EXPECT_EQ(pool.blocks_needed(5), 2);                                // never more than the positions
}

TEST(kv_group_pool, prefix_hits_need_every_group_and_groups_never_share_each_others_blocks) {
    kv_group_pool pool({4, 32}, {0, 4}, /*prefix_caching=*/true);
    const auto prompt = tokens(100, 13);
    ASSERT_TRUE(pool.allocate(1, 13));
    pool.commit(1, prompt, 13);
    pool.computed(1, 13);
    // Three whole blocks are cached in both groups: a second request shares them, each group its own.
    auto m = pool.match_prefix(2, prompt, 12);
    EXPECT_EQ(m.n_tokens, 12);
    EXPECT_EQ(pool.table(2, 0), std::vector<int32_t>(pool.table(1, 0).begin(), pool.table(1, 0).begin() + 3));
    EXPECT_EQ(pool.table(2, 1), std::vector<int32_t>(pool.table(1, 1).begin(), pool.table(1, 1).begin() + 3));
    pool.release(2);
    // The first sequence advances: its windowed group releases the prompt's first blocks; while they stay cached
    // (nothing evicted them) a hit still finds their intact rows; once evicted the common prefix shrinks to what
    // every group holds.
    ASSERT_TRUE(pool.allocate(1, 14));
    EXPECT_EQ(pool.slide(1, 13), 2);  // query 13 reads 10..13: blocks 0, 1 go
    EXPECT_EQ(pool.peek_prefix(prompt, 12).n_tokens, 12);
    // Take every free block (evicts the cached ones, plain free first), then give back what is not needed.
    ASSERT_TRUE(pool.allocate(9, 4 * (pool.n_free() / 2)));
    EXPECT_EQ(pool.peek_prefix(prompt, 12).n_tokens, 0);  // group 1's block 0 was evicted: no common prefix
    pool.release(9);
    EXPECT_EQ(pool.peek_prefix(prompt, 12).n_tokens, 0);
    // Equal tokens in another group's namespace never match: a windowed table never gets a global block.
    EXPECT_EQ(pool.blocks().peek_prefix(prompt, 12, 12345).n_tokens, 0);
}

TEST(kv_group_pool, fork_shares_every_group_and_copy_on_write_copies_each_shared_block) {
    kv_group_pool pool({4, 16}, {0, 4}, true);
    ASSERT_TRUE(pool.allocate(1, 6));  // 2 blocks per group
    pool.slide(1, 7);                  // query 7 reads 4..7: block 0 of the windowed group goes
    ASSERT_TRUE(pool.fork(1, 2));
    EXPECT_EQ(pool.table(2, 0), pool.table(1, 0));
    EXPECT_EQ(pool.table(2, 1), pool.table(1, 1));
    EXPECT_EQ(pool.table(2, 1)[0], block_pool::no_block);
    const int32_t free_before = pool.n_free();
    bool ok = false;
    const auto copies = pool.copy_on_write(2, 6, &ok);  // position 6: block 1 of each group is shared
    EXPECT_TRUE(ok);
    ASSERT_EQ(copies.size(), 2u);
    EXPECT_EQ(copies[0].src, pool.table(1, 0)[1]);
    EXPECT_EQ(copies[1].src, pool.table(1, 1)[1]);
    EXPECT_EQ(pool.table(2, 0)[1], copies[0].dst);
    EXPECT_EQ(pool.table(2, 1)[1], copies[1].dst);
    EXPECT_EQ(pool.n_free(), free_before - 2);
    EXPECT_TRUE(pool.copy_on_write(1, 6).empty());  // seq 1's blocks are its own again
    pool.release(1);
    pool.release(2);
    EXPECT_EQ(pool.n_free(), 16);
}

TEST(kv_group_pool, a_refused_allocation_changes_nothing_in_any_group) {
    kv_group_pool pool({4, 5}, {0, 8});
    ASSERT_TRUE(pool.allocate(1, 8));   // 2 + 2
    EXPECT_FALSE(pool.allocate(2, 8));  // needs 4, 1 free
    EXPECT_EQ(pool.n_sequences(), 1);
    EXPECT_TRUE(pool.table(2).empty());
    EXPECT_EQ(pool.n_free(), 1);
}

// The allocator with Gemma 2's two groups: a sequence decoding far past its window holds the global group's blocks
// and two windowed ones (window 4, blocks of 4), so 40 tokens fit in 12 blocks where two whole tables would need 20;
// each grant carries the windowed table, -1 before the window, and swap preemption turns into recompute.
TEST(kv_allocator_core, a_windowed_group_gives_its_blocks_back_as_a_sequence_decodes) {
    kv_allocator_core kv(kv_allocator_params{kv_geometry{4, 12}, 64, true, {0, 4}});
    kv_step_request r;
    r.step_id = 1;
    r.token_budget = 8;
    r.max_running = 4;
    r.preemption = preemption_mode::swap;
    r.admits = {{1, std::make_shared<const std::vector<int32_t>>(tokens(1, 13)), 0, false}};
    kv_step_grant g = kv.grant(r);
    ASSERT_EQ(g.admitted.size(), 1u);
    ASSERT_EQ(g.seqs.size(), 1u);
    EXPECT_EQ(g.seqs[0].n_tokens, 8);  // the budget's chunk
    int32_t n_computed = 8;
    std::vector<int32_t> all = tokens(1, 13);
    for (int64_t step = 2; n_computed < 40; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        kv_step_request d;
        d.step_id = step;
        d.token_budget = 8;
        d.max_running = 4;
        d.preemption = preemption_mode::swap;
        d.computed = {{1, n_computed}};
        std::vector<int32_t> append;
        if (n_computed >= 13) {
            all.push_back(100 + n_computed);
            append = {all.back()};
        }
        d.grows = {{1, n_computed, 0, append}};
        g = kv.grant(d);
        ASSERT_EQ(g.seqs.size(), 1u);
        EXPECT_TRUE(g.preempted.empty());
        const kv_step_seq& q = g.seqs[0];
        ASSERT_TRUE(q.more_tables);
        ASSERT_EQ(q.more_tables->size(), 1u);
        const std::vector<int32_t>& windowed = (*q.more_tables)[0];
        EXPECT_EQ(windowed.size(), q.block_table->size());
        expect_window_held(windowed, n_computed, 4, 4);
        int32_t held = 0;
        for (int32_t b : windowed) held += b != block_pool::no_block;
        EXPECT_LE(held, 3);  // the window's blocks and a chunk's
        EXPECT_EQ(g.pool.n_used, static_cast<int32_t>(q.block_table->size()) + held);
        n_computed += q.n_tokens;
    }
    EXPECT_EQ(kv.pool().table(1, 0).size(), 10u);  // 40 positions, every one kept by the global layers
}

}  // namespace
}  // namespace troupe
