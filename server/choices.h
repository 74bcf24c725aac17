// choices: one API request as several engine requests — each prompt of a completions request times
// best_of (n, when best_of is not given) — and the fold of their events back into one response.
//
// Engine request i serves prompt i / best_of, choice i % best_of, sampled with seed + choice (so choice 0
// is what n = 1 gives). A prompt's choices are one sequence until its first token: the first choice computes
// the prompt once and the others fork from it there (engine request::n_forks / fork_of), sharing its KV
// blocks (fork_leader: the engine request each forks from). best_of > n keeps, per prompt, the n choices
// with the highest cumulative log-probability (every engine request then reports its tokens' logprobs).
// The response's choice index is prompt * n + rank.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/generation_request.h"
#include "server/request_stream.h"
#include "server/response_builder.h"
#include "server/serving.h"

namespace troupe::server {

struct choice_layout {
    int32_t n_prompts = 1;
    int32_t n = 1;
    int32_t best_of = 1;
    std::vector<std::string> echo;  // [n_prompts] text each choice of the prompt starts with (empty: none)
    tool_call_format tools = tool_call_format::none;  // chat with tools: each reply parsed for tool calls
    int32_t n_requests() const { return n_prompts * best_of; }
    // The engine request that request i forks from (its prompt's first choice); i itself for a first choice.
    size_t fork_leader(size_t i) const { return i - i % static_cast<size_t>(best_of); }
};

struct prepared_choices {
    std::vector<request> requests;  // [layout.n_requests()]
    choice_layout layout;
    int32_t n_prompt_tokens = 0;  // over all requests (queue admission)
};

std::variant<prepared_choices, api_error> prepare_choices(const serving_model& m, const server_config& config,
                                                          generation_request& r);

// The engine ids of a request's choices, for cancelling them all (filled on the I/O thread, read by a sink
// on the engine's lane when the client stops reading).
struct request_ids {
    std::mutex mutex;
    std::vector<request_id> ids;
    void add(request_id id) {
        std::lock_guard lock(mutex);
        ids.push_back(id);
    }
    std::vector<request_id> all() {
        std::lock_guard lock(mutex);
        return ids;
    }
};

class choice_collector {
public:
    // head: id, created, model, with_logprobs (what the client asked for).
    choice_collector(generation_result head, api_kind kind, choice_layout layout, bool include_usage);

    // Folds events in. Streaming: returns the SSE events to send (a chunk per text, a final chunk per choice
    // that ended); whole: returns nothing.
    std::string add(std::vector<stream_event> events, bool stream);
    bool ended() const { return n_done_ == static_cast<int32_t>(choices_.size()) || error_.has_value(); }
    const std::optional<std::string>& error() const { return error_; }
    bool cancelled() const { return cancelled_; }
    usage total_usage() const;
    // Streaming, after ended(): the usage chunk when asked for (the caller adds [DONE]).
    std::string stream_end() const;
    // Whole, after ended() without error: the response JSON.
    std::string whole() const;

private:
    struct choice {
        generation_result r;
        std::vector<token_logprob> pending;  // streaming: logprobs not yet sent
        bool first = true;
        bool done = false;
        double sum_logprob = 0;
        std::optional<tool_call_stream> calls;  // streaming with tools: holds back what may start a call
    };
    // Non-streamed with tools: the choice's text split into content and tool_calls.
    void parse_calls(int32_t i);
    // Streaming with tools, at the choice's end: the held text as content, or the calls' chunk.
    std::string stream_calls(int32_t i);
    std::string call_id_prefix(int32_t i) const;
    // The client's index of engine request i while streaming (best_of == n then).
    int32_t client_index(int32_t i) const;

    generation_result head_;
    api_kind kind_;
    choice_layout layout_;
    bool include_usage_;
    std::vector<choice> choices_;  // [layout.n_requests()]
    int32_t n_done_ = 0;
    std::optional<std::string> error_;
    bool cancelled_ = false;
};

}  // namespace troupe::server
