// draft_layout: where a step's draft tokens (sequence_step::n_draft, tree_parents) run, for every runner (cpu_llama,
// cuda_runner): one source for the checks, the positions, KV rows and attention masks of a tree, and the row moves
// of keep_tree_path.
//
// A tree step of one sequence, n_before own tokens then n_draft nodes (parents[i] < i, -1: the last own token):
//
//   token            own 0 .. own n_before-1 | node 0      node 1 ...  node i
//   KV row           pos0 .. pos0+n_before-1 | first       first + 1   first + i          first = pos0 + n_before
//   RoPE position    the same                | first       ...         first + depth(i)
//   sees             rows 0 .. its own       | rows [0, first) and the rows of its ancestors and itself
//
// As an attention call (core/model/ops.h): per token its KV row, mask_base (the end of the rows it sees in full:
// its own row + 1 for plain tokens, `first` for nodes) and mask words (bit j of word w: row mask_base + 64 w + j; a
// node's = its parent's | its own bit). keep_tree_path moves the accepted nodes' rows to first, first + 1, ...:
// the nodes of a path increase (parents come first) and so do their rows, so copying in order never overwrites a
// row still to be read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/model/model_runner.h"
#include "core/result.h"

namespace troupe {

// The largest tree one sequence may bring in a step: its mask is 4 words of 64 rows.
inline constexpr int32_t k_max_tree_nodes = 256;

// Checks n_draft and tree_parents of one step. no_trees: empty where the runner verifies trees, else why it does
// not ("attention plugin X takes no trees"), said when a tree comes.
status check_drafts(const sequence_step& s, const std::string& no_trees);

// Mask words the batch's attention calls carry: enough for its largest tree; 0 without trees.
int32_t tree_mask_words(const forward_batch& batch);
bool has_drafts(const forward_batch& batch);

// One sequence's tokens in a step's arrays, each [tokens.size()] (mask: [tokens.size(), words], words > 0 only).
struct draft_rows {
    int32_t* positions;  // RoPE positions: pos0 + i, a tree's nodes by depth
    int32_t* nodes;      // -1 for own tokens, else the draft node
    int32_t* rows;       // KV rows: pos0 + i
    int32_t* mask_base;  // its row + 1, a tree's nodes: first
    uint64_t* mask;      // zero, a tree's nodes: their ancestors and themselves
};
// Fills `out` for step s (checked by check_drafts) with `words` mask words per token.
void lay_out_drafts(const sequence_step& s, int32_t words, const draft_rows& out);

// The row moves of keep_tree_path (from, to), in the order to copy them, rows past in-place ones; or why `path`
// is not a root-to-node path of s's tree. `who` names the caller in messages.
result<std::vector<std::pair<int32_t, int32_t>>> tree_path_moves(const sequence_step& s, std::span<const int32_t> path,
                                                                 const std::string& who);

}  // namespace troupe
