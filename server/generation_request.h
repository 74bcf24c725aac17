// generation_request: one parsed and validated API request (OpenAI completions or chat completions, or a
// WebSocket "start"), in plain values, before it is rendered and tokenized.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/chat/chat_template.h"
#include "core/sampling/sampler.h"
#include "server/response_format.h"
#include "server/tool_calls.h"

namespace troupe::server {

enum class api_kind { completion, chat };

// One prompt of a completions request that sent several (a string, or token ids).
struct generation_prompt {
    std::string text;
    std::optional<std::vector<int32_t>> ids;
};

struct generation_request {
    api_kind kind = api_kind::completion;
    std::string model;                               // as the client named it; empty: the served model
    std::string prompt;                              // completion: the prompt text
    std::optional<std::vector<int32_t>> prompt_ids;  // completion: a prompt given as token ids
    std::vector<chat_message> messages;              // chat: the conversation

    boost::json::array messages_json;  // chat: the conversation as the template sees it (tool turns kept)
    tool_request tools;                // chat: tools and tool_choice
    boost::json::object template_kwargs;  // chat: chat_template_kwargs, further template variables

    sampling_params sampling;                        // the config's defaults with the request's fields applied
    response_format format;                          // chat: response_format (sampling.constraint made from it)
    bool stream = false;
    bool include_usage = false;        // stream_options.include_usage: a last chunk with usage
    int32_t n = 1;        // choices per prompt
    int32_t best_of = 1;  // completions: choices sampled per prompt (>= n); the n most likely are returned
    bool echo = false;    // completions: each choice's text starts with its prompt
    std::vector<generation_prompt> prompts;  // completions with several prompts: all of them, in order
    int32_t logprobs = -1;             // -1: off; else top-k alternatives per token (0: the sampled token's only)
    bool max_tokens_given = false;     // max_tokens (max_completion_tokens) was in the request
    bool truncate_to_context = false;  // troupe's opt-in: a max_tokens past the context stops there, not 400
};

}  // namespace troupe::server
