// cuda_batch: a forward_batch flattened into the index arrays of the backend's C batch, checked on the
// host so the device never follows a bad index (same checks and messages as the CPU runner).
//
//   sequence s brings tokens at positions pos0 .. pos0 + n - 1; token t of the step has
//   seq_of[t] = s, positions[t] = pos0 + i; its blocks are block_tables[block_table_offsets[s] ..
//   block_table_offsets[s + 1]); out_tokens lists the tokens whose logits come back: each sequence's
//   last, or all of them with all_logits, in sequence order (row_begin / n_rows per sequence).
//   A step with a tree of drafts (core/model/draft_layout.h) also fills rows, mask_base and mask for every
//   token, and its nodes' positions are by depth; the C batch then carries the revision 3 tree fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_runner.h"
#include "core/result.h"
#include "kernels/cuda/cuda_backend_abi.h"

namespace troupe {

struct cuda_batch_limits {
    int32_t n_vocab;
    int32_t n_ctx;
    int32_t block_size;
    int32_t n_blocks;
    std::string no_trees{};  // empty where the backend verifies trees, else why it does not
};

struct cuda_flat_batch {
    std::vector<int32_t> tokens;               // [n_tokens]
    std::vector<int32_t> positions;            // [n_tokens]
    std::vector<int32_t> seq_of;               // [n_tokens]
    std::vector<int32_t> block_table_offsets;  // [n_seqs + 1]
    std::vector<int32_t> block_tables;         // [block_table_offsets[n_seqs]]
    std::vector<int32_t> out_tokens;           // [n_rows]
    std::vector<int32_t> row_begin;            // [n_seqs]
    std::vector<int32_t> n_rows;               // [n_seqs]
    // Tree steps only (mask_words > 0), else empty:
    std::vector<int32_t> rows;       // [n_tokens]
    std::vector<int32_t> mask_base;  // [n_tokens]
    std::vector<uint64_t> mask;      // [n_tokens, mask_words]
    int32_t mask_words = 0;

    // The C view; logits [out_tokens.size(), n_vocab] is where forward writes.
    troupe_cuda_batch c_batch(float* logits) const;
};

// Fills `out` (reusing its memory) or says what is wrong with which sequence.
status flatten_batch(const forward_batch& batch, const cuda_batch_limits& limits, cuda_flat_batch& out);

}  // namespace troupe
