#include "actors/kv_allocator/block_pool.h"

#include "core/result.h"

namespace troupe {

block_pool::block_pool(kv_geometry geometry) : geometry_(geometry) {
    TROUPE_ASSERT(geometry.block_size > 0 && geometry.n_blocks > 0,
                  "kv geometry needs positive block_size and n_blocks, got " + std::to_string(geometry.block_size) +
                      " and " + std::to_string(geometry.n_blocks));
    for (int32_t b = 0; b < geometry.n_blocks; ++b) free_.push_back(b);
}

int32_t block_pool::blocks_for(int32_t n_tokens) const {
    return (n_tokens + geometry_.block_size - 1) / geometry_.block_size;
}

std::optional<std::vector<int32_t>> block_pool::reserve(int64_t seq_id, int32_t n_tokens) {
    auto& table = tables_[seq_id];
    int32_t need = blocks_for(n_tokens) - static_cast<int32_t>(table.size());
    if (need > n_free()) {
        if (table.empty()) tables_.erase(seq_id);
        return std::nullopt;
    }
    for (int32_t i = 0; i < need; ++i) {
        table.push_back(free_.front());
        free_.pop_front();
    }
    return table;
}

void block_pool::release(int64_t seq_id) {
    auto it = tables_.find(seq_id);
    if (it == tables_.end()) return;
    for (int32_t b : it->second) free_.push_back(b);
    tables_.erase(it);
}

std::vector<int32_t> block_pool::table(int64_t seq_id) const {
    auto it = tables_.find(seq_id);
    return it == tables_.end() ? std::vector<int32_t>{} : it->second;
}

}  // namespace troupe
