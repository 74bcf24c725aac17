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

TEST(block_pool, a_contiguous_cache_is_one_block_of_the_context_per_sequence) {
    block_pool pool({64, 2});
    EXPECT_EQ(pool.reserve(10, 64), std::vector<int32_t>{0});
    EXPECT_EQ(pool.reserve(11, 20), std::vector<int32_t>{1});
    EXPECT_EQ(pool.reserve(12, 1), std::nullopt);
    EXPECT_EQ(pool.n_sequences(), 2);  // a refused new sequence leaves no empty table behind
    EXPECT_EQ(pool.blocks_for(65), 2);
}

}  // namespace
}  // namespace troupe
