#include "actors/kv_allocator/block_pool.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
    // splitmix64 step over (h ^ v): good avalanche, cheap.
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

block_pool::block_pool(kv_geometry geometry, bool prefix_caching)
    : geometry_(geometry), prefix_caching_(prefix_caching) {
    TROUPE_ASSERT(geometry.block_size > 0 && geometry.n_blocks > 0,
                  "kv geometry needs positive block_size and n_blocks, got " + std::to_string(geometry.block_size) +
                      " and " + std::to_string(geometry.n_blocks));
    blocks_.resize(geometry.n_blocks);
    for (int32_t b = 0; b < geometry.n_blocks; ++b) push_free(b, false);
}

int32_t block_pool::blocks_for(int32_t n_tokens) const {
    return (n_tokens + geometry_.block_size - 1) / geometry_.block_size;
}

block_pool_stats block_pool::stats() const {
    block_pool_stats s;
    s.n_cached = n_cached_free_;
    s.n_free = n_free_list_ - n_cached_free_;
    s.n_used = geometry_.n_blocks - n_free_list_;
    s.n_prefix_queries = n_queries_;
    s.n_prefix_hits = n_hits_;
    s.n_evictions = n_evictions_;
    return s;
}

uint64_t block_pool::chain(uint64_t parent, std::span<const int32_t> tokens) const {
    uint64_t h = mix(parent, 0x51ed270b27a8c4f1ull);
    for (int32_t t : tokens) h = mix(h, static_cast<uint32_t>(t));
    return h;
}

int32_t block_pool::lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
    auto it = by_hash_.find(hash);
    if (it == by_hash_.end()) return -1;
    const block_state& b = blocks_[it->second];
    if (b.parent != parent || !std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end())) return -1;
    return it->second;
}

prefix_match block_pool::peek_prefix(std::span<const int32_t> tokens, int32_t max_tokens, uint64_t root) const {
    prefix_match m;
    if (!prefix_caching_) return m;
    const int32_t bs = geometry_.block_size;
    const int32_t n_full = std::min<int32_t>(max_tokens, static_cast<int32_t>(tokens.size())) / bs;
    uint64_t parent = root;
    for (int32_t i = 0; i < n_full; ++i) {
        auto span = tokens.subspan(static_cast<size_t>(i) * bs, bs);
        const uint64_t h = chain(parent, span);
        m.n_queried++;
        const int32_t b = lookup(h, parent, span);
        if (b < 0) break;
        if (!blocks_[b].ready) {
            m.n_pending++;
            break;
        }
        m.n_hits++;
        if (blocks_[b].ref == 0) m.n_idle_hits++;
        m.n_tokens += bs;
        parent = h;
    }
    m.n_queried = n_full;
    return m;
}

prefix_match block_pool::match_prefix(int64_t seq_id, std::span<const int32_t> tokens, int32_t max_tokens) {
    const auto found = seqs_.find(seq_id);
    const uint64_t root = found == seqs_.end() ? 0 : found->second.root;
    prefix_match m = peek_prefix(tokens, max_tokens, root);
    if (!prefix_caching_) return m;
    seq_state& s = seqs_[seq_id];
    TROUPE_ASSERT(s.table.empty(), "match_prefix for sequence " + std::to_string(seq_id) + " that has blocks");
    n_queries_ += m.n_queried;
    n_hits_ += m.n_hits;
    const int32_t bs = geometry_.block_size;
    uint64_t parent = root;
    for (int32_t i = 0; i < m.n_hits; ++i) {
        auto span = tokens.subspan(static_cast<size_t>(i) * bs, bs);
        const uint64_t h = chain(parent, span);
        const int32_t b = lookup(h, parent, span);
        TROUPE_ASSERT(b >= 0);
        block_state& st = blocks_[b];
        if (st.ref == 0) {
            unlink(b);
            n_cached_free_--;
        }
        st.ref++;
        s.table.push_back(b);
        parent = h;
    }
    s.n_hashed = m.n_hits;
    s.last_hash = parent;
    return m;
}

int32_t block_pool::take_free() {
    const int32_t b = head_;
    TROUPE_ASSERT(b >= 0, "take_free on an empty free list");
    unlink(b);
    if (blocks_[b].hashed) {
        n_cached_free_--;
        n_evictions_++;
        unhash(b);
    }
    blocks_[b].ref = 1;
    return b;
}

void block_pool::open(int64_t seq_id, uint64_t root) {
    seq_state& s = seqs_[seq_id];
    TROUPE_ASSERT(s.table.empty(), "open of sequence " + std::to_string(seq_id) + " that has blocks");
    s.root = root;
    s.last_hash = root;
    s.n_hashed = 0;
}

int32_t block_pool::release_before(int64_t seq_id, int32_t n_tokens) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return 0;
    seq_state& s = it->second;
    // Block i holds positions [i * bs, (i + 1) * bs): it goes when (i + 1) * bs <= n_tokens.
    const int32_t end =
        std::min<int32_t>(std::max(0, n_tokens) / geometry_.block_size, static_cast<int32_t>(s.table.size()));
    int32_t n = 0;
    for (int32_t i = s.n_holes; i < end; ++i) {
        unref(s.table[i]);
        s.table[i] = no_block;
        ++n;
    }
    s.n_holes = std::max(s.n_holes, end);
    return n;
}

bool block_pool::allocate(int64_t seq_id, int32_t n_tokens) {
    auto it = seqs_.find(seq_id);
    const int32_t have = it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.table.size());
    const int32_t need = blocks_for(n_tokens) - have;
    if (need <= 0) return true;
    if (need > n_free_list_) return false;
    seq_state& s = seqs_[seq_id];
    for (int32_t i = 0; i < need; ++i) s.table.push_back(take_free());
    return true;
}

std::optional<std::vector<int32_t>> block_pool::reserve(int64_t seq_id, int32_t n_tokens) {
    if (!allocate(seq_id, n_tokens)) return std::nullopt;
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return std::vector<int32_t>{};
    return it->second.table;
}

void block_pool::commit(int64_t seq_id, std::span<const int32_t> tokens, int32_t n_tokens) {
    if (!prefix_caching_) return;
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    seq_state& s = it->second;
    const int32_t bs = geometry_.block_size;
    n_tokens = std::min<int32_t>(n_tokens, static_cast<int32_t>(tokens.size()));
    const int32_t n_full = std::min<int32_t>(n_tokens / bs, static_cast<int32_t>(s.table.size()));
    for (int32_t i = s.n_hashed; i < n_full; ++i) {
        auto span = tokens.subspan(static_cast<size_t>(i) * bs, bs);
        const uint64_t h = chain(s.last_hash, span);
        const int32_t b = s.table[i];
        if (b == no_block) {  // released before it was registered: the chain goes on without it
            s.last_hash = h;
            s.n_hashed = i + 1;
            continue;
        }
        block_state& st = blocks_[b];
        if (!st.hashed && !by_hash_.contains(h)) {
            st.hashed = true;
            st.ready = false;
            st.hash = h;
            st.parent = s.last_hash;
            st.tokens.assign(span.begin(), span.end());
            by_hash_.emplace(h, b);
        }
        s.last_hash = h;
        s.n_hashed = i + 1;
    }
}

void block_pool::computed(int64_t seq_id, int32_t n_computed) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    const seq_state& s = it->second;
    const int32_t n_full = std::min<int32_t>(n_computed / geometry_.block_size, s.n_hashed);
    for (int32_t i = s.n_holes; i < n_full; ++i) {
        block_state& st = blocks_[s.table[i]];
        if (st.hashed) st.ready = true;
    }
}

void block_pool::unref(int32_t b) {
    block_state& st = blocks_[b];
    TROUPE_ASSERT(st.ref > 0, "block " + std::to_string(b) + " released more often than taken");
    if (--st.ref > 0) return;
    if (st.hashed && !st.ready) unhash(b);  // its rows were never written: nothing to reuse
    if (st.hashed) {
        push_free(b, false);
        n_cached_free_++;
    } else {
        push_free(b, prefix_caching_);
    }
}

void block_pool::release(int64_t seq_id) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    // With prefix caching, last block first: a prefix's head is worth the most, so it is evicted last.
    const auto& t = it->second.table;
    if (prefix_caching_) {
        for (auto b = t.rbegin(); b != t.rend(); ++b) {
            if (*b != no_block) unref(*b);
        }
    } else {
        for (int32_t b : t) {
            if (b != no_block) unref(b);
        }
    }
    seqs_.erase(it);
}

void block_pool::shrink(int64_t seq_id, int32_t n_tokens) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    seq_state& s = it->second;
    const auto keep = static_cast<size_t>(std::max({blocks_for(n_tokens), s.n_hashed, s.n_holes}));
    while (s.table.size() > keep) {
        unref(s.table.back());
        s.table.pop_back();
    }
}

bool block_pool::fork(int64_t parent_id, int64_t child_id, int32_t n_tokens) {
    auto it = seqs_.find(parent_id);
    if (it == seqs_.end()) return false;
    const auto n_parent = static_cast<int32_t>(it->second.table.size());
    const int32_t n_shared = n_tokens < 0 ? n_parent : blocks_for(n_tokens);
    if (n_shared > n_parent) return false;
    TROUPE_ASSERT(table(child_id).empty(), "fork into sequence " + std::to_string(child_id) + " that has blocks");
    seq_state child = it->second;
    child.table.resize(static_cast<size_t>(n_shared));
    const int32_t n_full = n_tokens < 0 ? child.n_hashed : n_tokens / geometry_.block_size;
    if (child.n_hashed > n_full) {
        // The parent hashed blocks past the shared tokens (its own tokens there): the child chains its hashes again
        // from the start (commit() finds the shared blocks registered and only recomputes the chain).
        child.n_hashed = 0;
        child.last_hash = child.root;
    }
    child.n_holes = std::min(child.n_holes, n_shared);
    for (int32_t b : child.table) {
        if (b != no_block) blocks_[b].ref++;
    }
    seqs_[child_id] = std::move(child);
    return true;
}

std::optional<block_copy> block_pool::copy_on_write(int64_t seq_id, int32_t pos, bool* ok) {
    if (ok != nullptr) *ok = true;
    auto it = seqs_.find(seq_id);
    TROUPE_ASSERT(it != seqs_.end(), "copy_on_write for unknown sequence " + std::to_string(seq_id));
    seq_state& s = it->second;
    const int32_t i = pos / geometry_.block_size;
    TROUPE_ASSERT(i < static_cast<int32_t>(s.table.size()), "copy_on_write past the table");
    const int32_t b = s.table[i];
    TROUPE_ASSERT(b != no_block, "copy_on_write of sequence " + std::to_string(seq_id) + " at position " +
                                     std::to_string(pos) + ", whose block left its window and was released");
    if (blocks_[b].ref == 1 && !blocks_[b].hashed) return std::nullopt;
    if (blocks_[b].ref == 1) {
        // Its own block, but registered in the cache: unregister it instead of copying.
        unhash(b);
        s.n_hashed = std::min(s.n_hashed, i);
        return std::nullopt;
    }
    if (n_free_list_ == 0) {
        if (ok != nullptr) *ok = false;
        return std::nullopt;
    }
    const int32_t fresh = take_free();
    blocks_[b].ref--;
    s.table[i] = fresh;
    s.n_hashed = std::min(s.n_hashed, i);
    return block_copy{b, fresh};
}

const std::vector<int32_t>& block_pool::table(int64_t seq_id) const {
    static const std::vector<int32_t> none;
    auto it = seqs_.find(seq_id);
    return it == seqs_.end() ? none : it->second.table;
}

void block_pool::push_free(int32_t b, bool front) {
    block_state& st = blocks_[b];
    TROUPE_ASSERT(!st.on_free_list);
    st.on_free_list = true;
    if (front) {
        st.prev = -1;
        st.next = head_;
        if (head_ >= 0) blocks_[head_].prev = b;
        head_ = b;
        if (tail_ < 0) tail_ = b;
    } else {
        st.next = -1;
        st.prev = tail_;
        if (tail_ >= 0) blocks_[tail_].next = b;
        tail_ = b;
        if (head_ < 0) head_ = b;
    }
    n_free_list_++;
}

void block_pool::unlink(int32_t b) {
    block_state& st = blocks_[b];
    TROUPE_ASSERT(st.on_free_list);
    if (st.prev >= 0)
        blocks_[st.prev].next = st.next;
    else
        head_ = st.next;
    if (st.next >= 0)
        blocks_[st.next].prev = st.prev;
    else
        tail_ = st.prev;
    st.prev = st.next = -1;
    st.on_free_list = false;
    n_free_list_--;
}

void block_pool::unhash(int32_t b) {
    block_state& st = blocks_[b];
    if (!st.hashed) return;
    auto it = by_hash_.find(st.hash);
    if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
    st.hashed = false;
    st.ready = false;
    st.tokens.clear();
}

}  // namespace troupe
