#include "core/backend/cuda_batch.h"

#include <string>

#include "core/model/draft_layout.h"

namespace troupe {

troupe_cuda_batch cuda_flat_batch::c_batch(float* logits) const {
    troupe_cuda_batch b{};
    b.struct_size = sizeof b;
    b.n_tokens = static_cast<int32_t>(tokens.size());
    b.tokens = tokens.data();
    b.positions = positions.data();
    b.seq_of = seq_of.data();
    b.n_seqs = static_cast<int32_t>(row_begin.size());
    b.block_table_offsets = block_table_offsets.data();
    b.block_tables = block_tables.data();
    b.n_out_rows = static_cast<int32_t>(out_tokens.size());
    b.out_tokens = out_tokens.data();
    b.logits = logits;
    if (mask_words == 0) {
        b.struct_size = TROUPE_CUDA_BATCH_V2_SIZE;  // no tree: what a revision 2 backend takes too
        return b;
    }
    b.rows = rows.data();
    b.mask_base = mask_base.data();
    b.mask = mask.data();
    b.mask_words = mask_words;
    return b;
}

status flatten_batch(const forward_batch& batch, const cuda_batch_limits& limits, cuda_flat_batch& out) {
    out.tokens.clear();
    out.positions.clear();
    out.seq_of.clear();
    out.block_table_offsets.assign(1, 0);
    out.block_tables.clear();
    out.out_tokens.clear();
    out.row_begin.clear();
    out.n_rows.clear();
    out.rows.clear();
    out.mask_base.clear();
    out.mask.clear();
    out.mask_words = tree_mask_words(batch);
    std::vector<int32_t> nodes;  // draft_rows wants them; the backend has no taps
    for (size_t si = 0; si < batch.seqs.size(); ++si) {
        const sequence_step& s = batch.seqs[si];
        const std::string id = "sequence " + std::to_string(s.seq_id);
        if (s.tokens.empty()) return make_error(id + ": no tokens in the step");
        const int64_t end = static_cast<int64_t>(s.pos0) + static_cast<int64_t>(s.tokens.size());
        if (s.pos0 < 0 || end > limits.n_ctx) {
            return make_error(id + ": positions [" + std::to_string(s.pos0) + ", " + std::to_string(end) +
                              ") exceed the context of " + std::to_string(limits.n_ctx));
        }
        if (static_cast<int64_t>(s.block_table.size()) * limits.block_size < end) {
            return make_error(id + ": block table covers " + std::to_string(s.block_table.size() * limits.block_size) +
                              " positions, the step needs " + std::to_string(end));
        }
        for (int32_t b : s.block_table) {
            if (b < 0 || b >= limits.n_blocks) {
                return make_error(id + ": block id " + std::to_string(b) + " outside the pool of " +
                                  std::to_string(limits.n_blocks));
            }
        }
        if (status st = check_drafts(s, limits.no_trees); !st.ok()) return st;
        out.row_begin.push_back(static_cast<int32_t>(out.out_tokens.size()));
        const size_t t0 = out.tokens.size();
        for (size_t i = 0; i < s.tokens.size(); ++i) {
            const int32_t t = s.tokens[i];
            if (t < 0 || t >= limits.n_vocab) {
                return make_error(id + ": token id " + std::to_string(t) + " outside the vocabulary of " +
                                  std::to_string(limits.n_vocab));
            }
            if (s.all_logits || i + 1 == s.tokens.size()) {
                out.out_tokens.push_back(static_cast<int32_t>(out.tokens.size()));
            }
            out.tokens.push_back(t);
            out.positions.push_back(s.pos0 + static_cast<int32_t>(i));
            out.seq_of.push_back(static_cast<int32_t>(si));
        }
        if (out.mask_words > 0) {
            const size_t n = s.tokens.size(), w = static_cast<size_t>(out.mask_words);
            out.rows.resize(t0 + n);
            out.mask_base.resize(t0 + n);
            out.mask.resize((t0 + n) * w);
            nodes.resize(n);
            lay_out_drafts(s, out.mask_words,
                           {out.positions.data() + t0, nodes.data(), out.rows.data() + t0, out.mask_base.data() + t0,
                            out.mask.data() + t0 * w});
        }
        out.n_rows.push_back(static_cast<int32_t>(out.out_tokens.size()) - out.row_begin.back());
        out.block_tables.insert(out.block_tables.end(), s.block_table.begin(), s.block_table.end());
        out.block_table_offsets.push_back(static_cast<int32_t>(out.block_tables.size()));
    }
    return {};
}

}  // namespace troupe
