// serving: what stands between a parsed API request and engine::submit, without sockets — the served
// model's facts, chat rendering and tokenization, the context-length checks (400
// context_length_exceeded: the prompt, or prompt plus an explicit max_tokens), the model-name check (404), queue
// admission (429) and the mapping of engine refusals to HTTP statuses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "actors/engine/engine.h"
#include "core/chat/chat_formatter.h"
#include "core/chat/chat_template.h"
#include "core/config/engine_config.h"
#include "server/api_error.h"
#include "server/generation_request.h"
#include "server/metrics_text.h"
#include "server/response_format.h"
#include "server/server_stats.h"

namespace troupe {
class tokenizer;
}

namespace troupe::server {

// The model a ready server serves. The engine is owned by the caller and outlives the server's use of it.
struct serving_model {
    engine* eng = nullptr;
    std::shared_ptr<const tokenizer> tok;
    model_facts facts;
    chat_template_kind chat = chat_template_kind::plain;
    chat_special_tokens special;
    // The model's own chat template (tokenizer.chat_template as Jinja), or the built-in fallback; when null,
    // `chat` and `special` render.
    std::shared_ptr<const chat_formatter> chat_format;
    int32_t n_ctx = 0;
    // response_format's compiled grammars for this model's vocabulary (shared by requests, thread-safe).
    std::shared_ptr<response_formats> formats = std::make_shared<response_formats>();
};

// Fills chat_format (the model's Jinja template, or the built-in its markers show when it has none or it does
// not parse: logged with the reason), chat, special tokens and facts.chat_template ("jinja" or the built-in's
// name) from the GGUF's tokenizer.chat_template text. A chat request whose rendering fails (the template
// raises) is a 400 with the template's message.
void set_chat_template(serving_model& m, std::string_view jinja);

struct prepared_request {
    request req;  // prompt_ids filled
    int32_t n_prompt_tokens = 0;
};
using prepared = std::variant<prepared_request, api_error>;

// Renders (chat), tokenizes and checks the request. max_prompt_tokens 0: the context less one.
prepared prepare_request(const serving_model& m, const server_config& config, generation_request& r);

// 429 when one more request of n_prompt_tokens would pass the server's queue bounds.
std::optional<api_error> check_admission(const server_config& config, const server_stats& stats,
                                         int32_t n_prompt_tokens);

// An engine refusal (submit's error or a sink's on_error before any output) as an API error:
// "overloaded: ..." -> 429, "engine is draining/stopping/not started" -> 503, else 500.
api_error engine_error(const std::string& message);

// "cmpl-<n>" / "chatcmpl-<n>", unique in this process.
std::string next_response_id(api_kind kind);

}  // namespace troupe::server
