// cpu_llama's speculative verification: a step's drafts (sequence_step::n_draft), a chain or a tree, laid out by
// draft_layout.h into the step's positions, KV rows and attention masks; keep_tree_path copies the accepted path's
// rows into place in every layer's K and V pools.
#include <algorithm>
#include <cstring>

#include "core/model/cpu_llama.h"
#include "core/model/draft_layout.h"

namespace troupe {

bool cpu_llama::supports_trees() const {
    return !params_.kv_cache && params_.attention->supports_trees();
}

status cpu_llama::check_drafts(const sequence_step& s) const {
    std::string no_trees;
    if (params_.kv_cache) {
        no_trees = "the KV plugin " + params_.kv_cache->name() + " owns the attention";
    } else if (!params_.attention->supports_trees()) {
        no_trees = "attention plugin " + params_.attention->name() + " takes no trees";
    }
    return troupe::check_drafts(s, no_trees);
}

void cpu_llama::begin_tree_step(const forward_batch& batch, size_t n_tokens) {
    s_.mask_words = tree_mask_words(batch);
    s_.tree = s_.mask_words > 0;
    s_.drafts = has_drafts(batch);
    if (s_.tree) s_.mask.resize(n_tokens * static_cast<size_t>(s_.mask_words));
}

void cpu_llama::lay_out_drafts(const sequence_step& s, size_t t0) {
    troupe::lay_out_drafts(s, s_.mask_words,
                           {s_.positions.data() + t0, s_.nodes.data() + t0, s_.kv_rows.data() + t0,
                            s_.mask_base.data() + t0, s_.tree ? s_.mask.data() + t0 * s_.mask_words : nullptr});
}

status cpu_llama::keep_tree_path(const sequence_step& step, std::span<const int32_t> path) {
    auto moves = tree_path_moves(step, path, "keep_tree_path");
    if (!moves.ok()) return moves.err();
    if (moves->empty()) return {};
    if (params_.kv_cache)
        return make_error("keep_tree_path: the KV plugin " + params_.kv_cache->name() + " keeps chains only");
    const int32_t bs = kv_.block_size;
    if (static_cast<int32_t>(step.more_tables.size()) != groups_.n_groups() - 1) {
        return make_error("keep_tree_path of sequence " + std::to_string(step.seq_id) + ": " +
                          std::to_string(step.more_tables.size() + 1) + " block tables for " +
                          std::to_string(groups_.n_groups()) + " KV groups");
    }
    for (int32_t g = 0; g < groups_.n_groups(); ++g) {
        const std::vector<int32_t>& table = kv_groups::table(step, g);
        for (const auto& [from, to] : *moves) {
            const int32_t entry = std::max(from, to) / bs;
            if (entry >= static_cast<int32_t>(table.size()) || table[from / bs] < 0 ||
                table[from / bs] >= kv_.n_blocks || table[to / bs] < 0 || table[to / bs] >= kv_.n_blocks) {
                return make_error("keep_tree_path of sequence " + std::to_string(step.seq_id) + ": rows " +
                                  std::to_string(from) + " and " + std::to_string(to) +
                                  " are not both in blocks of the pool in its table of " +
                                  std::to_string(table.size()) + " blocks");
            }
        }
    }
    const size_t row_bytes = static_cast<size_t>(w_.hp.mla ? w_.hp.mla->latent_width() : w_.hp.kv_width()) *
                             kv_element_bytes(params_.kv_type);
    const auto at = [&](const std::vector<int32_t>& table, int32_t row) {  // byte offset of a row in a layer's pool
        return (static_cast<size_t>(table[row / bs]) * bs + row % bs) * row_bytes;
    };
    for (const auto& [from, to] : *moves) {
        for (size_t il = 0; il < layers_.size(); ++il) {
            const layer& l = layers_[il];
            const std::vector<int32_t>& table = kv_groups::table(step, groups_.group_of[il]);
            for (float* pool : {l.k_pool, l.v_pool}) {
                if (pool == nullptr) continue;  // MLA: no V pool
                auto* bytes = reinterpret_cast<uint8_t*>(pool);
                std::memcpy(bytes + at(table, to), bytes + at(table, from), row_bytes);
            }
        }
    }
    return {};
}

}  // namespace troupe
