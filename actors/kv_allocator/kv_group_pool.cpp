#include "actors/kv_allocator/kv_group_pool.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/result.h"

namespace troupe {

kv_group_pool::kv_group_pool(kv_geometry geometry, std::vector<int32_t> windows, bool prefix_caching)
    : windows_(windows.empty() ? std::vector<int32_t>{0} : std::move(windows)),
      pool_(geometry, prefix_caching),
      next_key_(std::numeric_limits<int64_t>::min()) {
    for (const int32_t w : windows_) {
        TROUPE_ASSERT(w >= 0, "a KV group's sliding window is " + std::to_string(w) + " tokens; it must be >= 0");
    }
}

bool kv_group_pool::windowed() const {
    return std::any_of(windows_.begin(), windows_.end(), [](int32_t w) { return w > 0; });
}

uint64_t kv_group_pool::root(int32_t group) const {
    // Group 0 chains from 0 as a lone block_pool does; the others from their own constant.
    return group == 0 ? 0 : 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(group + 1);
}

int32_t kv_group_pool::blocks_needed(int32_t n_tokens, int32_t max_step, int32_t n_cached) const {
    const int32_t bs = block_size();
    const int32_t full = blocks_for(n_tokens);
    int32_t n = 0;
    for (const int32_t w : windows_) {
        n += w == 0 ? full - n_cached / bs : std::min(full, (w - 1 + std::max(1, max_step) + bs - 1) / bs + 1);
    }
    return n;
}

std::optional<int64_t> kv_group_pool::key(int64_t seq_id, int32_t group) const {
    const auto it = keys_.find(seq_id);
    if (it == keys_.end()) return std::nullopt;
    return it->second[group];
}

void kv_group_pool::ensure(int64_t seq_id) {
    if (keys_.contains(seq_id)) return;
    std::vector<int64_t> k(windows_.size());
    k[0] = seq_id;
    for (size_t g = 1; g < k.size(); ++g) {
        k[g] = next_key_++;
        pool_.open(k[g], root(static_cast<int32_t>(g)));
    }
    keys_.emplace(seq_id, std::move(k));
}

prefix_match kv_group_pool::peek_prefix(std::span<const int32_t> tokens, int32_t max_tokens) const {
    if (n_groups() == 1) return pool_.peek_prefix(tokens, max_tokens);
    std::vector<prefix_match> each(windows_.size());
    int32_t n_tokens = max_tokens;
    for (int32_t g = 0; g < n_groups(); ++g) {
        each[g] = pool_.peek_prefix(tokens, max_tokens, root(g));
        n_tokens = std::min(n_tokens, each[g].n_tokens);
    }
    prefix_match m = each[0];
    m.n_tokens = n_tokens;
    m.n_hits = n_tokens / block_size();
    m.n_pending = 0;
    m.n_idle_hits = 0;
    for (int32_t g = 0; g < n_groups(); ++g) {
        // The next block after the common prefix is being computed in this group: wait for it.
        if (each[g].n_tokens == n_tokens) m.n_pending += each[g].n_pending;
        m.n_idle_hits += pool_.peek_prefix(tokens, n_tokens, root(g)).n_idle_hits;
    }
    return m;
}

prefix_match kv_group_pool::match_prefix(int64_t seq_id, std::span<const int32_t> tokens, int32_t max_tokens) {
    TROUPE_ASSERT(!keys_.contains(seq_id) || table(seq_id).empty(),
                  "match_prefix for sequence " + std::to_string(seq_id) + " that has blocks");
    ensure(seq_id);
    if (n_groups() == 1) return pool_.match_prefix(seq_id, tokens, max_tokens);
    const prefix_match peek = peek_prefix(tokens, max_tokens);
    prefix_match m;
    for (int32_t g = 0; g < n_groups(); ++g) {
        const prefix_match got = pool_.match_prefix(*key(seq_id, g), tokens, peek.n_tokens);
        TROUPE_ASSERT(got.n_tokens == peek.n_tokens, "KV group " + std::to_string(g) + " matched " +
                                                         std::to_string(got.n_tokens) + " tokens of " +
                                                         std::to_string(peek.n_tokens) + " every group holds");
        if (g == 0) m = got;
    }
    m.n_pending = peek.n_pending;
    m.n_idle_hits = peek.n_idle_hits;
    return m;
}

int32_t kv_group_pool::new_blocks(int64_t seq_id, int32_t n_tokens) const {
    const int32_t want = blocks_for(n_tokens);
    int32_t n = 0;
    for (int32_t g = 0; g < n_groups(); ++g) {
        n += std::max(0, want - static_cast<int32_t>(table(seq_id, g).size()));
    }
    return n;
}

bool kv_group_pool::allocate(int64_t seq_id, int32_t n_tokens) {
    const int32_t need = new_blocks(seq_id, n_tokens);
    if (need == 0) return true;
    if (need > n_free()) return false;
    ensure(seq_id);
    for (const int64_t k : keys_.at(seq_id)) {
        const bool ok = pool_.allocate(k, n_tokens);
        TROUPE_ASSERT(ok, "KV group allocation of " + std::to_string(need) + " blocks failed with " +
                              std::to_string(n_free()) + " free");
    }
    return true;
}

int32_t kv_group_pool::fits(int64_t seq_id, int32_t n_computed, int32_t want) const {
    int32_t lo = 0, hi = std::max(0, want);  // new_blocks grows with the chunk: the largest that fits
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (new_blocks(seq_id, n_computed + mid) <= n_free()) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

int32_t kv_group_pool::slide(int64_t seq_id, int32_t n_computed) {
    if (!windowed() || !keys_.contains(seq_id)) return 0;
    int32_t n = 0;
    for (int32_t g = 0; g < n_groups(); ++g) {
        // A query at p >= n_computed reads (p - window, p]: positions <= n_computed - window are read by none.
        if (windows_[g] > 0) n += pool_.release_before(*key(seq_id, g), n_computed - windows_[g] + 1);
    }
    return n;
}

void kv_group_pool::commit(int64_t seq_id, std::span<const int32_t> tokens, int32_t n_tokens) {
    if (!keys_.contains(seq_id)) return;
    for (const int64_t k : keys_.at(seq_id)) pool_.commit(k, tokens, n_tokens);
}

void kv_group_pool::computed(int64_t seq_id, int32_t n_computed) {
    if (!keys_.contains(seq_id)) return;
    for (const int64_t k : keys_.at(seq_id)) pool_.computed(k, n_computed);
}

void kv_group_pool::release(int64_t seq_id) {
    const auto it = keys_.find(seq_id);
    if (it == keys_.end()) return;
    for (const int64_t k : it->second) pool_.release(k);
    keys_.erase(it);
}

void kv_group_pool::shrink(int64_t seq_id, int32_t n_tokens) {
    if (!keys_.contains(seq_id)) return;
    for (const int64_t k : keys_.at(seq_id)) pool_.shrink(k, n_tokens);
}

bool kv_group_pool::fork(int64_t parent_id, int64_t child_id, int32_t n_tokens) {
    if (!keys_.contains(parent_id)) return false;
    const int32_t n_parent = static_cast<int32_t>(table(parent_id).size());
    if (n_tokens >= 0 && blocks_for(n_tokens) > n_parent) return false;
    TROUPE_ASSERT(!keys_.contains(child_id) || table(child_id).empty(),
                  "fork into sequence " + std::to_string(child_id) + " that has blocks");
    ensure(child_id);
    for (int32_t g = 0; g < n_groups(); ++g) {
        const bool ok = pool_.fork(*key(parent_id, g), *key(child_id, g), n_tokens);
        TROUPE_ASSERT(ok, "fork of KV group " + std::to_string(g) + " of sequence " + std::to_string(parent_id));
    }
    return true;
}

bool kv_group_pool::shares(int64_t seq_id, int32_t pos) const {
    const auto i = static_cast<size_t>(pos / block_size());
    for (int32_t g = 0; g < n_groups(); ++g) {
        const std::vector<int32_t>& t = table(seq_id, g);
        if (i < t.size() && t[i] != block_pool::no_block && pool_.ref_count(t[i]) > 1) return true;
    }
    return false;
}

std::vector<block_copy> kv_group_pool::copy_on_write(int64_t seq_id, int32_t pos, bool* ok) {
    if (ok != nullptr) *ok = true;
    TROUPE_ASSERT(keys_.contains(seq_id), "copy_on_write for unknown sequence " + std::to_string(seq_id));
    int32_t shared = 0;
    for (int32_t g = 0; g < n_groups(); ++g) {
        const std::vector<int32_t>& t = table(seq_id, g);
        const size_t i = static_cast<size_t>(pos / block_size());
        TROUPE_ASSERT(i < t.size(), "copy_on_write past the table");
        if (t[i] != block_pool::no_block && pool_.ref_count(t[i]) > 1) ++shared;
    }
    if (shared > n_free()) {
        if (ok != nullptr) *ok = false;
        return {};
    }
    std::vector<block_copy> copies;
    for (int32_t g = 0; g < n_groups(); ++g) {
        bool got = true;
        if (auto c = pool_.copy_on_write(*key(seq_id, g), pos, &got)) copies.push_back(*c);
        TROUPE_ASSERT(got, "copy_on_write of KV group " + std::to_string(g) + " found no free block");
    }
    return copies;
}

const std::vector<int32_t>& kv_group_pool::table(int64_t seq_id, int32_t group) const {
    static const std::vector<int32_t> none;
    const auto k = key(seq_id, group);
    return k ? pool_.table(*k) : none;
}

std::vector<std::vector<int32_t>> kv_group_pool::more_tables(int64_t seq_id) const {
    std::vector<std::vector<int32_t>> t;
    for (int32_t g = 1; g < n_groups(); ++g) t.push_back(table(seq_id, g));
    return t;
}

}  // namespace troupe
