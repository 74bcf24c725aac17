// kv_group_pool: one block table per KV group per sequence, all drawn from one block_pool, for models whose layers
// attend over different spans (model_runner::kv_group_windows). A group is the layers with one sliding window
// (0: none, every position). Gemma 2 has two: the global (odd) layers and the windowed (even) ones; Mistral v0.1
// style files have one, windowed; every other model one, global, which is exactly block_pool.
//
//   seq 7, global group:   [ 3][ 4][ 5][ 6][ 9]      every position stays
//   seq 7, windowed group: [--][--][--][ 8][10]      window 20, block_size 8, next query at 33: positions <= 13 are
//                                                     read by no query any more, so blocks 0 and 1 went back
//
// A block id belongs to one table of one group; the runner lays the KV memory out so that a block id holds one row
// slot per layer of a group (the layers of different groups share the slots: cpu_llama's kv groups), so the
// windowed group's bounded tables are what saves memory.
//
// slide(seq, n_computed) releases, in each windowed group, the blocks whose every position is <= n_computed - window:
// a query at position p reads positions (p - window, p], and every query of a step is at >= n_computed. Released
// entries are block_pool::no_block; the runner checks that none is inside a step's window.
//
// Prefix caching: each group hashes in its own namespace (block_pool::open with the group's root); a prefix hits
// for as many whole blocks as every group has cached (a windowed group's released blocks stay in the cache while
// nothing evicts them, and their rows are intact until then, so sharing them is correct; slide() drops them again
// once shared). fork and copy_on_write act on every group.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "actors/kv_allocator/block_pool.h"

namespace troupe {

class kv_group_pool {
public:
    // windows[g]: group g's sliding window in tokens, 0 for a group that reads every position; empty: one global.
    kv_group_pool(kv_geometry geometry, std::vector<int32_t> windows, bool prefix_caching = false);

    int32_t n_groups() const { return static_cast<int32_t>(windows_.size()); }
    int32_t window(int32_t group) const { return windows_[group]; }
    bool windowed() const;  // some group has a window: its blocks are released as sequences advance
    int32_t block_size() const { return pool_.block_size(); }
    int32_t n_blocks() const { return pool_.n_blocks(); }
    int32_t n_free() const { return pool_.n_free(); }
    int32_t blocks_for(int32_t n_tokens) const { return pool_.blocks_for(n_tokens); }
    bool prefix_caching() const { return pool_.prefix_caching(); }
    block_pool_stats stats() const { return pool_.stats(); }
    int32_t ref_count(int32_t block) const { return pool_.ref_count(block); }
    int32_t n_sequences() const { return static_cast<int32_t>(keys_.size()); }

    // The most blocks one sequence holds at once, summed over its groups, while it runs n_tokens positions in steps
    // of at most max_step tokens: a windowed group holds the blocks of (window - 1 + max_step) positions plus one
    // (a span that starts inside a block), never more than a global group. n_cached: leading tokens whose blocks it
    // shares from the prefix cache already (a global group needs those fewer; a windowed one is counted whole).
    int32_t blocks_needed(int32_t n_tokens, int32_t max_step = 1, int32_t n_cached = 0) const;

    // Prefix caching over every group: n_tokens (and n_hits, per group) is the prefix whole in every group; n_pending
    // and n_idle_hits are summed over the groups (n_idle_hits within that prefix).
    prefix_match peek_prefix(std::span<const int32_t> tokens, int32_t max_tokens) const;
    prefix_match match_prefix(int64_t seq_id, std::span<const int32_t> tokens, int32_t max_tokens);

    // Every group's table covers n_tokens positions, or nothing changes (false).
    bool allocate(int64_t seq_id, int32_t n_tokens);
    // The largest chunk <= want with allocate(seq_id, n_computed + chunk) possible now.
    int32_t fits(int64_t seq_id, int32_t n_computed, int32_t want) const;
    // The windowed groups drop the blocks no query at >= n_computed reads; returns how many went back.
    int32_t slide(int64_t seq_id, int32_t n_computed);
    void commit(int64_t seq_id, std::span<const int32_t> tokens, int32_t n_tokens);
    void computed(int64_t seq_id, int32_t n_computed);
    void release(int64_t seq_id);
    void shrink(int64_t seq_id, int32_t n_tokens);
    // child shares parent's blocks covering [0, n_tokens) (all with -1) in every group; false when parent is unknown
    // or has fewer.
    bool fork(int64_t parent_id, int64_t child_id, int32_t n_tokens = -1);
    // Whether a block of seq at position pos is shared with another table (in any group).
    bool shares(int64_t seq_id, int32_t pos) const;
    // Before seq writes position pos: a fresh block and the copy to make for each group whose block there is shared;
    // all or nothing (*ok false when too few blocks are free).
    std::vector<block_copy> copy_on_write(int64_t seq_id, int32_t pos, bool* ok = nullptr);

    const std::vector<int32_t>& table(int64_t seq_id, int32_t group = 0) const;
    // Groups 1.. (group 0's is table(seq_id)); empty with one group.
    std::vector<std::vector<int32_t>> more_tables(int64_t seq_id) const;
    const block_pool& blocks() const { return pool_; }

private:
    // The block_pool table of (seq, group): group 0 is seq_id itself (one group: block_pool's ids as they are), the
    // others private keys below every sequence id. nullopt when seq has none.
    std::optional<int64_t> key(int64_t seq_id, int32_t group) const;
    // Creates seq's keys (opening each group's table in its hash namespace) if it has none.
    void ensure(int64_t seq_id);
    uint64_t root(int32_t group) const;
    int32_t new_blocks(int64_t seq_id, int32_t n_tokens) const;  // blocks allocate(seq_id, n_tokens) would take

    std::vector<int32_t> windows_;  // [n_groups]
    block_pool pool_;
    std::unordered_map<int64_t, std::vector<int64_t>> keys_;  // sequence -> [n_groups] block_pool table ids
    int64_t next_key_;                                        // private keys count up from INT64_MIN
};

}  // namespace troupe
