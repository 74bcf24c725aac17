// greedy_agreement: how often a drafter's greedy token is the target's, the figure that decides what greedy
// speculative decoding gains (each drafted token is accepted while the two agree).
//
// The target generates n_new tokens greedily after the prompt; the drafter then runs the prompt and those tokens in
// one step with logits for every row, and position i agrees when the drafter's argmax after prompt + tokens[0, i)
// is tokens[i]. So every position is judged in the context the target produced, as verification sees it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/model/model_runner.h"
#include "core/result.h"

namespace troupe::testing {

struct agreement {
    std::vector<int32_t> target_tokens;   // [n_new] the target's greedy continuation
    std::vector<int32_t> drafter_tokens;  // [n_new] the drafter's argmax at each of those positions
    int32_t n_agree = 0;
    double rate() const { return target_tokens.empty() ? 0.0 : double(n_agree) / double(target_tokens.size()); }
};

// The argmax of every row when `model` runs `tokens` in one step from position 0.
result<std::vector<int32_t>> argmax_of_every_row(model_runner& model, std::span<const int32_t> tokens);

result<agreement> greedy_agreement(model_runner& target, model_runner& drafter, std::span<const int32_t> prompt,
                                   int32_t n_new);

}  // namespace troupe::testing
