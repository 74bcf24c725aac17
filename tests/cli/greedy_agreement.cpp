#include "tests/cli/greedy_agreement.h"

#include <algorithm>

#include "core/model/greedy.h"

namespace troupe::testing {

result<std::vector<int32_t>> argmax_of_every_row(model_runner& model, std::span<const int32_t> tokens) {
    const kv_geometry kv = model.kv();
    const auto n_blocks =
        static_cast<int32_t>((static_cast<int64_t>(tokens.size()) + kv.block_size - 1) / kv.block_size);
    if (n_blocks > kv.n_blocks) return make_error("argmax_of_every_row: the KV pool is too small for the tokens");
    sequence_step step{};
    step.tokens.assign(tokens.begin(), tokens.end());
    step.all_logits = true;
    for (int32_t b = 0; b < n_blocks; ++b) step.block_table.push_back(b);
    forward_batch batch{{step}};
    forward_output out;
    if (status st = model.forward(batch, out); !st.ok()) return st.err();
    model.forget(0);
    std::vector<int32_t> argmax;
    for (int32_t i = 0; i < out.n_rows[0]; ++i) {
        const auto row = out.row(0, i);
        argmax.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    }
    return argmax;
}

result<agreement> greedy_agreement(model_runner& target, model_runner& drafter, std::span<const int32_t> prompt,
                                   int32_t n_new) {
    if (n_new < 1) return make_error("greedy_agreement: n_new must be at least 1");
    auto generated = greedy_generate(target, prompt, n_new);
    if (!generated) return generated.err();
    target.forget(0);
    std::vector<int32_t> tokens(prompt.begin(), prompt.end());
    tokens.insert(tokens.end(), generated->tokens.begin(), generated->tokens.end());
    tokens.pop_back();  // the last generated token is predicted, never fed
    auto predicted = argmax_of_every_row(drafter, tokens);
    if (!predicted) return predicted.err();
    agreement a;
    a.target_tokens = generated->tokens;
    a.drafter_tokens.assign(predicted->end() - n_new, predicted->end());
    for (int32_t i = 0; i < n_new; ++i) {
        a.n_agree += a.drafter_tokens[static_cast<size_t>(i)] == a.target_tokens[static_cast<size_t>(i)] ? 1 : 0;
    }
    return a;
}

}  // namespace troupe::testing
