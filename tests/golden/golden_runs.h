// The golden runs of ../shared/golden/*.json: prompt ids, greedy continuations, first-step logits.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace troupe::testing {

struct golden_first_step {
    int32_t argmax;
    float max_logit;
    std::vector<float> logits_0_7;
};

struct golden_run {
    std::string model;  // file name under models/
    std::string prompt;
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> generated_ids;
    std::optional<golden_first_step> first_step;
};

// All runs of one golden file; throws std::runtime_error on a malformed file (test code).
std::vector<golden_run> load_golden_runs(const std::string& path);

}  // namespace troupe::testing
