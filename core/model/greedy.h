// greedy_generate: the plainest driver of a model_runner (one sequence, prefill then argmax decode).
// Used by the golden tests and benchmarks to exercise the model without the actor pipeline.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/model/model_runner.h"

namespace troupe {

struct greedy_result {
    std::vector<int32_t> tokens;      // the n_new generated ids
    std::vector<float> first_logits;  // [n_vocab] logits after the prompt
};

// Blocks 0..k-1 of the pool serve as the sequence's block table.
result<greedy_result> greedy_generate(model_runner& model, std::span<const int32_t> prompt, int32_t n_new);

}  // namespace troupe
