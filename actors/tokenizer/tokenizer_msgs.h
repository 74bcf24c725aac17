// Messages to the tokenizer actor, the pipeline's entry. Cancels and aborts pass through it so that
// they reach the scheduler after the submissions they refer to.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/common/request_types.h"
#include "actors/scheduler/scheduler_msgs.h"
#include "core/sampling/sampler.h"

namespace troupe {

struct submit_request {
    static constexpr const char* name = "submit_request";
    request_id id = 0;
    std::string prompt;
    std::optional<std::vector<int32_t>> prompt_ids;  // used as given (no BOS added) when present
    std::shared_ptr<const sampling_params> params;
    std::shared_ptr<const request_sink> sink;
    time_point t_submit;
    int32_t logprobs = -1;         // request.logprobs
    bool prompt_logprobs = false;  // request.prompt_logprobs
    int32_t n_forks = 0;           // request.n_forks
    request_id fork_of = 0;        // request.fork_of
};

using tokenizer_msg = std::variant<submit_request, cancel_request, abort_all>;

}  // namespace troupe
