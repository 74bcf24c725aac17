// The KV memory arithmetic: one layout (built-in or a KV plugin's declaration) -> block bytes, windows and blocks in
// a budget (size_kv_cache), and the window slots of running sequences (kv_window_slots).
#include <gtest/gtest.h>

#include <cstdio>

#include "core/model/kv_layout.h"
#include "core/model/kv_window_slots.h"

namespace troupe {
namespace {

TEST(kv_layout, the_built_in_layout_is_k_and_v_rows_of_kv_dtype) {
    const kv_layout f32 = builtin_kv_layout(32, kv_dtype::f32);
    EXPECT_EQ(f32.bytes_per_token, 256u);
    EXPECT_EQ(f32.bytes_per_block, 0u);
    EXPECT_EQ(f32.window_tokens, 0);
    EXPECT_EQ(f32.block_bytes(16), 4096u);
    EXPECT_EQ(builtin_kv_layout(32, kv_dtype::f16).bytes_per_token, 128u);
}

TEST(kv_layout, block_bytes_round_tokens_plus_metadata_up_to_64) {
    kv_layout l;
    l.bytes_per_token = 80;               // kv/int8 at 4 kv heads of 8: 2 * 32 codes + 4 per-token scales of 4 bytes
    l.bytes_per_block = 128;              // its per-channel key scales
    EXPECT_EQ(l.block_bytes(16), 1408u);  // 16 * 80 + 128, a multiple of 64 already
    l.bytes_per_token = 85;
    EXPECT_EQ(l.block_bytes(16), 1536u);  // 1488 rounded up
    EXPECT_DOUBLE_EQ(l.bytes_per_token_in_blocks(16), 96.0);
}

struct sizing_case {
    const char* name;
    size_t bytes_per_token;
    size_t bytes_per_block;
    int32_t window_tokens;
    size_t window_bytes_per_token;
    uint64_t budget;
    bool require_full_context;
    int32_t expect_blocks;  // -1: an error
    const char* expect_in_message;
};

TEST(kv_layout, size_kv_cache_takes_windows_first_then_whole_blocks_capped_at_four_full_contexts_per_sequence) {
    // 2 layers, blocks of 16, a context of 64 tokens (4 blocks), 2 sequences: the cap is 4 * 4 * 2 = 32 blocks.
    const kv_sizing_inputs in{2, 16, 64, 2, 0};
    const sizing_case cases[] = {
        {"f32 fits 10 blocks", 256, 0, 0, 0, 10 * 2 * 4096, true, 10, ""},
        {"f32 capped", 256, 0, 0, 0, 1000 * 2 * 4096, true, 32, ""},
        {"windows come first", 256, 0, 17, 128, 2 * 2 * 17 * 128 + 5 * 2 * 4096, true, 5, ""},
        {"a plugin below one context is refused", 256, 0, 17, 128, 2 * 2 * 17 * 128 + 3 * 2 * 4096, true, -1,
         "holds 3 blocks of 16 tokens"},
        {"the built-in cache may run below one context", 256, 0, 0, 0, 3 * 2 * 4096, false, 3, ""},
        {"nothing at all is refused either way", 256, 0, 0, 0, 4095, false, -1, "less than one full context"},
    };
    for (const sizing_case& c : cases) {
        SCOPED_TRACE(c.name);
        kv_layout l;
        l.name = "test";
        l.bytes_per_token = c.bytes_per_token;
        l.bytes_per_block = c.bytes_per_block;
        l.window_tokens = c.window_tokens;
        l.window_bytes_per_token = c.window_bytes_per_token;
        kv_sizing_inputs x = in;
        x.budget = c.budget;
        auto s = size_kv_cache(l, x, c.require_full_context);
        if (c.expect_blocks < 0) {
            ASSERT_FALSE(s.ok());
            EXPECT_NE(s.message().find(c.expect_in_message), std::string::npos) << s.message();
            EXPECT_NE(s.message().find("raise kv.memory to at least"), std::string::npos) << s.message();
            continue;
        }
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(s->n_blocks, c.expect_blocks);
        EXPECT_EQ(s->window_bytes, 2u * 2u * c.window_tokens * c.window_bytes_per_token);
        EXPECT_EQ(s->pool_bytes, static_cast<uint64_t>(c.expect_blocks) * 2 * 4096);
        EXPECT_EQ(s->tokens, c.expect_blocks * 16);
    }
}

// Gemma 2 2B's shape (26 layers, 4 kv heads of 256, f16; the even layers windowed to 4096 of its 8192): with the
// windowed layers' blocks released the two groups share memory slots (13 layers a block) and a full context holds
// 512 global blocks plus 4096 / 16 + 1 windowed ones, not 512 blocks of all 26 layers.
TEST(kv_layout, released_windows_count_the_windowed_groups_bounded_blocks_per_sequence) {
    const kv_layout f16 = builtin_kv_layout(4 * 256, kv_dtype::f16);  // 4096 bytes a token a layer
    kv_sizing_inputs plain{26, 16, 8192, 4, uint64_t{8} << 30};
    kv_sizing_inputs released = plain;
    released.layers_per_block = 13;
    released.group_windows = {0, 4096};
    auto a = size_kv_cache(f16, plain, true);
    auto b = size_kv_cache(f16, released, true);
    ASSERT_TRUE(a.ok()) << a.message();
    ASSERT_TRUE(b.ok()) << b.message();
    EXPECT_EQ(a->blocks_per_seq, 512);
    EXPECT_EQ(a->seq_bytes, 512ull * 26 * 16 * 4096);  // 832 MiB
    EXPECT_EQ(b->blocks_per_seq, 512 + 257);
    EXPECT_EQ(b->seq_bytes, 769ull * 13 * 16 * 4096);  // 624.8 MiB
    EXPECT_EQ(a->full_contexts, 8192 / 832);
    EXPECT_EQ(b->full_contexts, static_cast<int64_t>((uint64_t{8} << 30) / (13 * 16 * 4096)) / 769);
    EXPECT_NE(b->summary.find("2 KV groups, windowed layers' blocks released, 13 of 26 layers per block"),
              std::string::npos)
        << b->summary;
    std::printf("  gemma2 2B shape, f16, a context of 8192 per sequence: %s\n  released: %s\n", a->summary.c_str(),
                b->summary.c_str());
    // Every layer windowed (Mistral v0.1): one group, a window's blocks per sequence at any context.
    EXPECT_EQ(kv_blocks_per_sequence(32768, 16, {4096}), 257);
    EXPECT_EQ(kv_blocks_per_sequence(100, 16, {4096}), 7);  // never more than the context
    EXPECT_EQ(kv_blocks_per_sequence(100, 16, {}), 7);
}

// One step of the window slots: the sequences (id, start position) and what must come out.
struct slot_step {
    std::vector<int64_t> ids;
    std::vector<int32_t> pos0;
    std::vector<int32_t> expect_slots;  // empty: an error
    std::vector<int32_t> expect_zeroed;
    std::vector<int64_t> release_after;
};

TEST(kv_window_slots, sequences_keep_their_slot_new_and_restarted_ones_are_zeroed_and_the_oldest_idle_is_taken) {
    kv_window_slots slots(2);
    const slot_step steps[] = {
        {{7, 8}, {0, 0}, {0, 1}, {0, 1}, {}},   // two new sequences
        {{7, 8}, {5, 5}, {0, 1}, {}, {}},       // decodes keep their slots
        {{8}, {6}, {1}, {}, {}},                // 7 idles this step
        {{9}, {0}, {0}, {0}, {}},               // 9 takes 7's slot (the least recently used)
        {{7}, {32}, {1}, {1}, {}},              // 7 comes back at a block start (recompute): 8's slot, zeroed
        {{8}, {7}, {}, {}, {}},                 // 8 comes back inside a block without its window: an error
        {{9, 7}, {0, 33}, {0, 1}, {0}, {9}},    // 9 restarts at 0: zeroed; then it is retired
        {{10}, {0}, {0}, {0}, {}},              // its slot is free again
        {{10, 7, 11}, {1, 34, 0}, {}, {}, {}},  // three sequences, two slots: an error
    };
    std::vector<int32_t> got, zeroed;
    int i = 0;
    for (const slot_step& s : steps) {
        SCOPED_TRACE("step " + std::to_string(i++));
        const status st = slots.assign(s.ids, s.pos0, 16, got, zeroed);
        if (s.expect_slots.empty()) {
            EXPECT_FALSE(st.ok());
            continue;
        }
        ASSERT_TRUE(st.ok()) << st.message();
        EXPECT_EQ(got, s.expect_slots);
        EXPECT_EQ(zeroed, s.expect_zeroed);
        for (int64_t id : s.release_after) slots.release(id);
    }
}

}  // namespace
}  // namespace troupe
