// block_pool: the KV allocator's pure core. A fixed pool of n_blocks blocks of block_size token rows
// (the geometry the model runner reports); each sequence owns an ordered block table.
//
//   pool:   [0][1][2][3][4][5] ...          free list (front = next handed out): 3 5 ...
//   seq 7:  table [0, 2, 4]  -> positions 0..3*block_size-1; position p is in block table[p / block_size]
//
// Invariants: a block is either free or in exactly one table; reserve() is all-or-nothing; released
// blocks go to the back of the free list (so the most recently freed are reused last, which is the
// eviction order a prefix cache will want). A contiguous cache is one block of n_ctx tokens per
// sequence; paged allocation is many small blocks through the same API.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/model/model_runner.h"

namespace troupe {

class block_pool {
public:
    explicit block_pool(kv_geometry geometry);

    int32_t block_size() const { return geometry_.block_size; }
    int32_t n_blocks() const { return geometry_.n_blocks; }
    int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
    int32_t n_sequences() const { return static_cast<int32_t>(tables_.size()); }
    int32_t blocks_for(int32_t n_tokens) const;

    // Grows seq's table to cover n_tokens positions. Returns the whole table, or nothing (and changes
    // nothing) when the free list is too short.
    std::optional<std::vector<int32_t>> reserve(int64_t seq_id, int32_t n_tokens);
    // Frees every block of seq (no-op for an unknown seq).
    void release(int64_t seq_id);
    // The table of seq (empty for an unknown seq).
    std::vector<int32_t> table(int64_t seq_id) const;

private:
    kv_geometry geometry_;
    std::deque<int32_t> free_;                                  // block ids, front handed out first
    std::unordered_map<int64_t, std::vector<int32_t>> tables_;  // seq id -> block ids in position order
};

}  // namespace troupe
