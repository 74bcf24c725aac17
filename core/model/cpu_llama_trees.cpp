// cpu_llama's speculative verification: a step's drafts (sequence_step::n_draft), a chain or a tree.
//
// A tree step of one sequence, n_before own tokens then n_draft nodes (parents[i] < i, -1: the last own token):
//
//   token            own 0 .. own n_before-1 | node 0      node 1 ...  node i
//   KV row           pos0 .. pos0+n_before-1 | first       first + 1   first + i          first = pos0 + n_before
//   RoPE position    the same                | first       ...         first + depth(i)
//   sees             rows 0 .. its own       | rows [0, first) and the rows of its ancestors and itself
//
// The attention call carries, per token, its KV row, mask_base (the end of the rows it sees in full: its own row + 1
// for plain tokens, `first` for nodes) and mask words (bit j of word w: row mask_base + 64 w + j; a node's = its
// parent's | its own bit). A step with no tree passes plain calls. keep_tree_path moves the accepted nodes' rows to
// first, first + 1, ... in every layer: nodes of a path increase (parents come first) and so do their rows, so
// copying in order never overwrites a row still to be read.
#include <algorithm>
#include <cstring>

#include "core/model/cpu_llama.h"

namespace troupe {

bool cpu_llama::supports_trees() const {
    return !params_.kv_cache && params_.attention->supports_trees();
}

status cpu_llama::check_drafts(const sequence_step& s) const {
    const std::string id = "sequence " + std::to_string(s.seq_id);
    const auto n_tokens = static_cast<int32_t>(s.tokens.size());
    if (s.n_draft < 0 || s.n_draft > n_tokens) {
        return make_error(id + ": n_draft " + std::to_string(s.n_draft) + " outside 0.." + std::to_string(n_tokens) +
                          " (the step's tokens)");
    }
    if (s.tree_parents.empty()) return {};  // a chain runs causally
    if (!supports_trees()) {
        return make_error(id + ": a tree of drafts, but this runner verifies chains only (" +
                          (params_.kv_cache ? "the KV plugin " + params_.kv_cache->name() + " owns the attention"
                                            : "attention plugin " + params_.attention->name() + " takes no trees") +
                          ")");
    }
    if (static_cast<int32_t>(s.tree_parents.size()) != s.n_draft) {
        return make_error(id + ": tree_parents has " + std::to_string(s.tree_parents.size()) +
                          " entries, expected n_draft = " + std::to_string(s.n_draft));
    }
    if (s.n_draft > k_max_tree_nodes) {
        return make_error(id + ": a tree of " + std::to_string(s.n_draft) + " drafts, above the " +
                          std::to_string(k_max_tree_nodes) + " nodes cpu_llama verifies in one step");
    }
    if (s.n_draft == n_tokens) {
        return make_error(id + ": a tree of drafts needs the token it follows in the step (n_draft " +
                          std::to_string(s.n_draft) + " of " + std::to_string(n_tokens) + " tokens)");
    }
    for (int32_t i = 0; i < s.n_draft; ++i) {
        if (s.tree_parents[i] < -1 || s.tree_parents[i] >= i) {
            return make_error(id + ": tree node " + std::to_string(i) + " has parent " +
                              std::to_string(s.tree_parents[i]) + ", expected -1.." + std::to_string(i - 1));
        }
    }
    return {};
}

void cpu_llama::begin_tree_step(const forward_batch& batch, size_t n_tokens) {
    s_.tree = false;
    s_.drafts = false;
    int32_t words = 0;
    for (const sequence_step& s : batch.seqs) {
        s_.drafts = s_.drafts || s.n_draft > 0;
        if (s.tree_parents.empty()) continue;
        s_.tree = true;
        words = std::max(words, (s.n_draft + 63) / 64);
    }
    s_.mask_words = words;
    if (s_.tree) s_.mask.assign(n_tokens * static_cast<size_t>(words), 0);
}

void cpu_llama::lay_out_drafts(const sequence_step& s, size_t t0) {
    const auto n = static_cast<int32_t>(s.tokens.size());
    const int32_t n_before = n - s.n_draft;
    for (int32_t i = 0; i < n; ++i) {
        const size_t t = t0 + i;
        s_.nodes[t] = i < n_before ? -1 : i - n_before;
        s_.kv_rows[t] = s.pos0 + i;  // plain tokens: row = position, rows 0..position seen in full
        s_.mask_base[t] = s.pos0 + i + 1;
    }
    if (s.tree_parents.empty()) return;
    const int32_t first = s.pos0 + n_before;
    const size_t words = static_cast<size_t>(s_.mask_words);
    for (int32_t i = 0; i < s.n_draft; ++i) {
        const size_t t = t0 + n_before + i;
        const int32_t parent = s.tree_parents[i];
        uint64_t* mask = s_.mask.data() + t * words;
        if (parent >= 0) {
            const size_t tp = t0 + n_before + parent;
            std::copy_n(s_.mask.data() + tp * words, words, mask);
            s_.positions[t] = s_.positions[tp] + 1;
        } else {
            s_.positions[t] = first;
        }
        mask[i / 64] |= uint64_t{1} << (i % 64);
        s_.mask_base[t] = first;
    }
}

status cpu_llama::keep_tree_path(const sequence_step& step, std::span<const int32_t> path) {
    if (step.tree_parents.empty() || params_.kv_cache) return model_runner::keep_tree_path(step, path);
    const std::string id = "keep_tree_path of sequence " + std::to_string(step.seq_id);
    if (status st = check_drafts(step); !st.ok()) return st;
    for (size_t i = 0; i < path.size(); ++i) {
        const int32_t node = path[i];
        const int32_t parent = i == 0 ? -1 : path[i - 1];
        if (node < 0 || node >= step.n_draft || step.tree_parents[node] != parent) {
            return make_error(
                id + ": path entry " + std::to_string(i) + " is node " + std::to_string(node) +
                ", expected a child of " +
                (parent < 0 ? std::string("the last token before the drafts") : "node " + std::to_string(parent)) +
                " among the " + std::to_string(step.n_draft) + " nodes");
        }
    }
    const int32_t first = step.pos0 + static_cast<int32_t>(step.tokens.size()) - step.n_draft;
    const int32_t bs = kv_.block_size;
    if (static_cast<int64_t>(step.block_table.size()) * bs < static_cast<int64_t>(first) + step.n_draft) {
        return make_error(id + ": block table covers " + std::to_string(step.block_table.size() * bs) +
                          " rows, the tree's go up to " + std::to_string(first + step.n_draft));
    }
    for (int32_t b : step.block_table) {
        if (b < 0 || b >= kv_.n_blocks) {
            return make_error(id + ": block id " + std::to_string(b) + " outside the pool of " +
                              std::to_string(kv_.n_blocks));
        }
    }
    const size_t row_bytes = static_cast<size_t>(w_.hp.kv_width()) * kv_element_bytes(params_.kv_type);
    const auto at = [&](int32_t row) {  // byte offset of a cache row in a layer's pool
        return (static_cast<size_t>(step.block_table[row / bs]) * bs + row % bs) * row_bytes;
    };
    for (size_t i = 0; i < path.size(); ++i) {
        const int32_t from = first + path[i], to = first + static_cast<int32_t>(i);
        if (from == to) continue;
        for (const layer& l : layers_) {
            for (float* pool : {l.k_pool, l.v_pool}) {
                auto* bytes = reinterpret_cast<uint8_t*>(pool);
                std::memcpy(bytes + at(to), bytes + at(from), row_bytes);
            }
        }
    }
    return {};
}

}  // namespace troupe
