// block_pool: the paged KV cache's bookkeeping (pure; the KV memory itself belongs to the model runner).
// A fixed pool of n_blocks blocks of block_size token rows; each sequence owns an ordered block table.
//
//   pool:   [0][1][2][3][4][5] ...
//   seq 7:  table [0, 2, 4]  -> position p is in block table[p / block_size], row p % block_size
//   seq 9:  table [0, 2, 5]  -> blocks 0 and 2 shared with seq 7 (same prompt prefix): ref count 2
//
// Blocks are reference counted. A block with no reference is on the free list, which is in eviction
// order: blocks that hold nothing reusable at the front (handed out first), blocks that still hold a
// cached prefix at the back in LRU order (the longest unused is evicted first, and only when no plain
// free block is left). Handing out a cached block evicts it from the prefix cache.
//
// Prefix caching: a full block of a sequence is identified by a chained hash of its tokens and the
// hash of the block before it, so equal hashes mean equal whole prefixes (the tokens are also kept and
// compared, so a hash collision is a miss, not a wrong answer). commit() registers a sequence's full
// blocks as soon as their tokens are planned; computed() marks them ready once the forward wrote them.
// match_prefix() gives a new sequence the ready blocks of its longest cached prefix and reports
// pending ones (planned by another sequence, not yet computed) so the caller can wait for them.
//
// Sliding windows (kv_group_pool): a table may release its leading blocks once no query reads them
// (release_before); their entries become no_block. Such holes are only ever at the front of a table.
// A table can hash in its own namespace (open() with a root), so the tables of different layer groups
// never share a block even for equal tokens.
//
// Invariants: a block is either free (ref 0, on the free list) or referenced by >= 1 table; a shared
// block (ref > 1) is full and never written (copy_on_write() gives a writer its own copy); allocate()
// is all-or-nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/model/model_runner.h"

namespace troupe {

struct prefix_match {
    int32_t n_tokens = 0;     // leading tokens whose KV the sequence now shares (a multiple of block_size)
    int32_t n_queried = 0;    // full blocks looked up
    int32_t n_hits = 0;       // of which found ready
    int32_t n_pending = 0;    // the next blocks exist in the cache but are not computed yet
    int32_t n_idle_hits = 0;  // hits on blocks nobody references (taking them lowers n_free())
};

// Copy the KV rows of block src into block dst (copy-on-write, or a fork's private last block).
struct block_copy {
    int32_t src = 0;
    int32_t dst = 0;
};

struct block_pool_stats {
    int32_t n_used = 0;    // referenced by at least one sequence
    int32_t n_cached = 0;  // free but holding a reusable prefix block
    int32_t n_free = 0;    // free and holding nothing reusable
    int64_t n_prefix_queries = 0;
    int64_t n_prefix_hits = 0;
    int64_t n_evictions = 0;
};

class block_pool {
public:
    static constexpr int32_t no_block = -1;  // a released table entry (release_before)

    explicit block_pool(kv_geometry geometry, bool prefix_caching = false);

    int32_t block_size() const { return geometry_.block_size; }
    int32_t n_blocks() const { return geometry_.n_blocks; }
    // Blocks that can be handed out: plain free plus cached (evictable) ones.
    int32_t n_free() const { return n_free_list_; }
    int32_t n_sequences() const { return static_cast<int32_t>(seqs_.size()); }
    int32_t blocks_for(int32_t n_tokens) const;
    bool prefix_caching() const { return prefix_caching_; }
    block_pool_stats stats() const;

    // For a sequence with no blocks yet: shares the ready cached blocks of the longest prefix of
    // tokens[0, max_tokens) made of whole blocks. Counts the lookups in the hit statistics.
    prefix_match match_prefix(int64_t seq_id, std::span<const int32_t> tokens, int32_t max_tokens);
    // Like match_prefix without taking anything or counting: how many tokens would hit (in the hash
    // namespace `root`, see open()).
    prefix_match peek_prefix(std::span<const int32_t> tokens, int32_t max_tokens, uint64_t root = 0) const;
    // Starts the (empty) table seq_id whose prefix hashes chain from `root` instead of 0: tables opened
    // with different roots never match each other's blocks.
    void open(int64_t seq_id, uint64_t root);
    // Drops seq's blocks whose every position is below n_tokens (they left its sliding window): their
    // entries become no_block. Returns how many blocks it dropped.
    int32_t release_before(int64_t seq_id, int32_t n_tokens);
    // Grows seq's table to cover n_tokens positions; false (and nothing changes) when too few blocks are free.
    bool allocate(int64_t seq_id, int32_t n_tokens);
    // allocate() and the whole table (the KV allocator actor's reply).
    std::optional<std::vector<int32_t>> reserve(int64_t seq_id, int32_t n_tokens);
    // Registers in the prefix cache the full blocks of seq whose tokens are tokens[0, n_tokens).
    void commit(int64_t seq_id, std::span<const int32_t> tokens, int32_t n_tokens);
    // The forward has written positions [0, n_computed) of seq: its registered blocks there are ready.
    void computed(int64_t seq_id, int32_t n_computed);
    // Drops every block reference of seq (no-op for an unknown seq).
    void release(int64_t seq_id);
    // Drops seq's blocks past those covering n_tokens positions (a speculative step's draft room: the rows of
    // rejected drafts). Blocks registered in the prefix cache are kept.
    void shrink(int64_t seq_id, int32_t n_tokens);
    // child shares the blocks of parent that cover positions [0, n_tokens) (every block when n_tokens < 0): parallel
    // sampling, where n choices share their prompt's blocks. The child must have no blocks; false (nothing changes)
    // when parent's table covers fewer positions.
    bool fork(int64_t parent_id, int64_t child_id, int32_t n_tokens = -1);
    // Before seq writes position pos: if that block is shared, seq gets a fresh block and the copy to
    // make; nothing when the block is its own, or no free block is left (then *ok is false).
    std::optional<block_copy> copy_on_write(int64_t seq_id, int32_t pos, bool* ok = nullptr);

    const std::vector<int32_t>& table(int64_t seq_id) const;
    int32_t ref_count(int32_t block) const { return blocks_[block].ref; }

private:
    struct block_state {
        int32_t ref = 0;
        bool hashed = false;  // in the hash map
        bool ready = false;   // its rows are computed
        uint64_t hash = 0;
        uint64_t parent = 0;
        std::vector<int32_t> tokens;   // [block_size] when hashed
        int32_t prev = -1, next = -1;  // free list links
        bool on_free_list = false;
    };
    struct seq_state {
        std::vector<int32_t> table;  // no_block for the leading n_holes entries
        int32_t n_holes = 0;         // leading entries dropped by release_before
        uint64_t root = 0;           // the hash namespace (open())
        int32_t n_hashed = 0;        // leading full blocks whose hash is known
        uint64_t last_hash = 0;      // chained hash of block n_hashed - 1
    };

    uint64_t chain(uint64_t parent, std::span<const int32_t> tokens) const;
    // The ready (or pending) cached block for this chained hash and tokens, or -1.
    int32_t lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
    int32_t take_free();
    void push_free(int32_t b, bool front);
    void unlink(int32_t b);
    void unhash(int32_t b);
    void unref(int32_t b);

    kv_geometry geometry_;
    bool prefix_caching_;
    std::vector<block_state> blocks_;  // [n_blocks]
    int32_t head_ = -1, tail_ = -1;    // free list: head is handed out first
    int32_t n_free_list_ = 0;
    int32_t n_cached_free_ = 0;
    std::unordered_map<uint64_t, int32_t> by_hash_;
    std::unordered_map<int64_t, seq_state> seqs_;
    int64_t n_queries_ = 0, n_hits_ = 0, n_evictions_ = 0;
};

}  // namespace troupe
