// Messages to the KV allocator actor (all from the scheduler; the replies are scheduler messages).
#pragma once

#include <cstdint>
#include <variant>

namespace troupe {

// Grow the sequence's block table to cover n_tokens positions; replies blocks_granted or blocks_refused.
struct reserve_blocks {
    static constexpr const char* name = "reserve_blocks";
    int64_t seq_id = 0;
    int32_t n_tokens = 0;
};

// Return every block of the sequence to the pool.
struct release_blocks {
    static constexpr const char* name = "release_blocks";
    int64_t seq_id = 0;
};

using kv_allocator_msg = std::variant<reserve_blocks, release_blocks>;

}  // namespace troupe
