// request_parser: JSON request bodies into generation_request, with OpenAI's validation rules.
//
// Bodies are parsed with Boost.JSON without exceptions (invalid UTF-8, depth past 32 and trailing
// garbage are errors). Every field is checked for its type and range; unknown fields are rejected as
// OpenAI does ("Unrecognized request argument supplied: x"); features troupe does not have (the deprecated
// functions API) are rejected with a message naming the field, never silently ignored. tools, tool_choice and
// the messages' tool turns are read by server/tool_calls.
// Sampling extensions that vLLM also accepts: top_k, min_p, repetition_penalty, ignore_eos.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "core/sampling/sampler.h"
#include "server/api_error.h"
#include "server/generation_request.h"

namespace troupe::server {

using parsed_request = std::variant<generation_request, api_error>;

// POST /v1/completions
parsed_request parse_completion_request(std::string_view body, const sampling_params& defaults);
// POST /v1/chat/completions
parsed_request parse_chat_request(std::string_view body, const sampling_params& defaults);

// WebSocket client messages (see README.md, "Serving"):
//   {"type":"start","id":"c1","messages":[{"role":"user","content":"Hi"}],"params":{"temperature":0}}
//   {"type":"start","id":"c2","prompt":"Once upon a time","params":{...}}   (no chat template)
//   {"type":"cancel","id":"c1"}
struct ws_start {
    std::string id;
    generation_request request;
};
struct ws_cancel {
    std::string id;
};
struct ws_bad {
    std::string id;  // when the message had one
    std::string message;
};
using ws_client_message = std::variant<ws_start, ws_cancel, ws_bad>;
ws_client_message parse_ws_message(std::string_view text, const sampling_params& defaults);

}  // namespace troupe::server
