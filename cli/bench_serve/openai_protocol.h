// openai_protocol: what the load generator sends to and reads from an OpenAI-compatible server.
//
// Requests: POST /v1/completions {"model", "prompt", "max_tokens", "temperature", "ignore_eos", "stream": true,
// "stream_options": {"include_usage": true}} or /v1/chat/completions with "messages" instead of "prompt".
// Streamed chunks: {"choices": [{"text" | "delta": {"content"}, "finish_reason"}], "usage": {...}} and the
// terminal "[DONE]". A chunk with text (a completion chunk also without text unless it only carries a
// finish_reason) counts as a token arrival, as vLLM's benchmark counts them; a usage-only chunk does not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cli/bench_serve/load_config.h"
#include "core/result.h"

namespace troupe::bench {

struct http_url {
    std::string host;       // "127.0.0.1"
    std::string port;       // "8080"
    std::string base_path;  // "" or "/prefix" (no trailing slash)
};

// "http://host[:port][/path]"; port 80 when absent. https is refused with a message.
result<http_url> parse_url(std::string_view url);

// The request path for an endpoint: "/v1/completions" or "/v1/chat/completions".
std::string_view endpoint_path(endpoint_kind k);

// The JSON body of one streamed request.
std::string request_body(endpoint_kind endpoint, const std::string& model, const std::string& prompt,
                         int32_t max_tokens, const output_config& output);

struct stream_chunk {
    bool done = false;   // "[DONE]"
    bool token = false;  // counts as a token arrival
    std::string text;    // the text delta
    std::string finish_reason;
    std::optional<int32_t> prompt_tokens;      // from usage
    std::optional<int32_t> completion_tokens;  // from usage
    std::string error;                         // an {"error": ...} payload or unparsable JSON
};

// Interprets one SSE event's data.
stream_chunk parse_stream_chunk(std::string_view data);

// The first model id of a GET /v1/models answer ({"data": [{"id": ...}]}).
result<std::string> first_model_id(std::string_view models_json);

}  // namespace troupe::bench
