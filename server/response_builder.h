// response_builder: the JSON the server sends — OpenAI completions and chat completions (whole and as
// SSE chunks), /v1/models, errors in OpenAI's shape, and the WebSocket protocol's server messages.
// Plain strings in, strings out; no sockets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/common/request_types.h"
#include "server/api_error.h"
#include "server/generation_request.h"

namespace troupe::server {

// One generated token for `logprobs`: its text, log-probability and the top alternatives.
struct token_logprob {
    std::string token;  // bytes, may be a partial UTF-8 sequence (JSON gets it with U+FFFD, `bytes` exact)
    float logprob = 0;
    std::vector<std::pair<std::string, float>> top;  // most likely first
    bool prompt = false;                             // a prompt token's (echo)
    bool has_logprob = true;  // false for the prompt's first token: nothing before it (JSON null)
};

// Everything one finished (or finishing) generation reports.
struct generation_result {
    std::string id;  // "cmpl-..." / "chatcmpl-..."
    int64_t created = 0;
    std::string model;
    std::string text;
    std::string finish_reason;  // "stop" / "length"
    usage use;
    std::vector<token_logprob> logprobs;  // when asked for
    bool with_logprobs = false;
    int32_t index = 0;              // the choice's index (n > 1, several prompts)
    boost::json::array tool_calls;  // chat with tools: the calls parsed from the reply (text: what is left)
};

// OpenAI's finish_reason: context_full reads as "length"; cancelled (by the operator, or a server that stops)
// as "content_filter", the one value of OpenAI's set that says the server, not the model, ended the output
// (an SSE error event follows it; WebSocket clients that cancelled themselves see "cancelled").
std::string_view openai_finish_reason(finish_reason r);

std::string error_json(const api_error& e);

std::string completion_json(const generation_result& r);
std::string chat_completion_json(const generation_result& r);
// Several choices: id, created, model and usage from `head`; text, logprobs, finish_reason and index per choice.
std::string completion_json(const generation_result& head, const std::vector<generation_result>& choices);
std::string chat_completion_json(const generation_result& head, const std::vector<generation_result>& choices);

// Streaming chunks. `text` is the delta; finish_reason empty while streaming. with_usage_null: the
// client asked for include_usage, so every chunk but the last carries "usage": null.
std::string completion_chunk_json(const generation_result& r, std::string_view text, std::string_view finish_reason,
                                  const std::vector<token_logprob>* logprobs, bool with_usage_null);
// The first chat chunk carries the role; later ones only content.
std::string chat_chunk_json(const generation_result& r, std::string_view text, bool first,
                            std::string_view finish_reason, const std::vector<token_logprob>* logprobs,
                            bool with_usage_null);
// The last chunk when include_usage: "choices": [] and the usage.
std::string usage_chunk_json(const generation_result& r, bool chat);

// Server-sent events framing.
std::string sse_event(std::string_view json);
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

std::string models_json(std::string_view model, int64_t created, int32_t context_length,
                        std::string_view chat_template);
// GET /v1/models/{id}: the one model object.
std::string model_json(std::string_view model, int64_t created, int32_t context_length, std::string_view chat_template);

// WebSocket server messages (README.md, "Serving").
std::string ws_hello_json(std::string_view model, std::string_view chat_template, int32_t context_length);
std::string ws_delta_json(std::string_view id, std::string_view text);
std::string ws_done_json(std::string_view id, finish_reason r, const usage& u, const timings& t);
std::string ws_error_json(std::string_view id, std::string_view message);

// Bytes made valid UTF-8: each invalid byte becomes U+FFFD.
std::string valid_utf8(std::string_view bytes);

}  // namespace troupe::server
