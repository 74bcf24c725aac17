// Messages to the streamer actor. From the tokenizer: open_stream (before the request reaches the
// scheduler). From the scheduler: deliver_tokens (bounded), fail_stream. From the engine: close_all.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/common/request_types.h"

namespace troupe {

struct open_stream {
    static constexpr const char* name = "open_stream";
    request_id id = 0;
    std::shared_ptr<const request_sink> sink;
    std::shared_ptr<const std::vector<std::string>> stop_strings;    // may be null
    std::shared_ptr<const std::vector<std::string>> shown_specials;  // special tokens written as text; may be null
    int32_t n_prompt_tokens = 0;
    time_point t_submit;
};

struct token_delivery {
    request_id id = 0;
    std::vector<int32_t> tokens;  // to detokenize, in order (a final end-of-generation token is not here)
    int32_t n_counted = 0;        // completion tokens this delivery accounts for (tokens + a final EOG token)
    int32_t n_drafted = 0;
    int32_t n_accepted = 0;
    time_point t_sampled;                         // when the executor sampled these tokens
    time_point t_admitted;                        // when the request got its KV blocks
    std::optional<finish_reason> finish;          // set on the request's last delivery
    std::vector<token_logprobs> logprobs;         // per delivered token (and a final stop token), when asked for
    std::vector<token_logprobs> prompt_logprobs;  // per prompt token (sink.on_prompt_logprobs), on the first delivery
};

struct deliver_tokens {
    static constexpr const char* name = "deliver_tokens";
    std::vector<token_delivery> entries;
};

struct fail_stream {
    static constexpr const char* name = "fail_stream";
    request_id id = 0;
    std::string message;
};

struct close_all {
    static constexpr const char* name = "close_all";
    std::string reason;
};

using streamer_msg = std::variant<open_stream, deliver_tokens, fail_stream, close_all>;

}  // namespace troupe
