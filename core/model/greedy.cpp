#include "core/model/greedy.h"

#include <algorithm>

namespace troupe {

result<greedy_result> greedy_generate(model_runner& model, std::span<const int32_t> prompt, int32_t n_new) {
    if (prompt.empty()) return make_error("greedy_generate: empty prompt");
    const kv_geometry kv = model.kv();
    const int64_t n_total = static_cast<int64_t>(prompt.size()) + n_new;
    const int64_t n_blocks = (n_total + kv.block_size - 1) / kv.block_size;
    if (n_blocks > kv.n_blocks) return make_error("greedy_generate: the KV pool is too small for the request");
    sequence_step step{0, std::vector<int32_t>(prompt.begin(), prompt.end()), 0, {}, false};
    for (int32_t b = 0; b < n_blocks; ++b) step.block_table.push_back(b);

    greedy_result res;
    forward_batch batch;
    forward_output out;
    for (int32_t i = 0; i < n_new; ++i) {
        batch.seqs = {step};
        if (status st = model.forward(batch, out); !st.ok()) return st.err();
        const auto row = out.row(0);
        if (i == 0) res.first_logits.assign(row.begin(), row.end());
        const int32_t next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        res.tokens.push_back(next);
        step.pos0 += static_cast<int32_t>(step.tokens.size());
        step.tokens = {next};
    }
    return res;
}

}  // namespace troupe
