// The scheduler's policy choices (config: scheduler.policy, scheduler.preemption), shared by the
// scheduler core and engine_params.
#pragma once

#include <optional>
#include <string_view>

namespace troupe {

enum class batching_policy {
    continuous,    // iteration-level: sequences join and leave the batch at every step
    static_batch,  // admit a batch when nothing runs, run it to completion (the baseline)
};

enum class preemption_mode {
    recompute,  // free the blocks; recompute the KV from the tokens on resumption
    swap,       // copy the blocks to host memory and back (where the runner has separate device memory)
};

inline std::string_view batching_policy_name(batching_policy p) {
    switch (p) {
        case batching_policy::continuous:
            return "continuous";
        case batching_policy::static_batch:
            return "static";
    }
    return "?";
}

inline std::optional<batching_policy> parse_batching_policy(std::string_view s) {
    if (s == "continuous") return batching_policy::continuous;
    if (s == "static") return batching_policy::static_batch;
    return std::nullopt;
}

inline std::string_view preemption_mode_name(preemption_mode p) {
    switch (p) {
        case preemption_mode::recompute:
            return "recompute";
        case preemption_mode::swap:
            return "swap";
    }
    return "?";
}

inline std::optional<preemption_mode> parse_preemption_mode(std::string_view s) {
    if (s == "recompute") return preemption_mode::recompute;
    if (s == "swap") return preemption_mode::swap;
    return std::nullopt;
}

}  // namespace troupe
