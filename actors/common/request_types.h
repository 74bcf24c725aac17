// Types every actor and the engine's clients share: request ids, the client's sink, finish reasons,
// usage and timings. Plain values only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

using request_id = int64_t;  // also the id of the request's (single) sequence
using steady_clock = std::chrono::steady_clock;
using time_point = steady_clock::time_point;

enum class finish_reason {
    stop,          // end-of-generation token, a stop token, or a stop string
    length,        // max_tokens reached
    context_full,  // the sequence filled the model's context (OpenAI clients see "length")
    cancelled,     // cancel(request_id)
};

inline std::string_view finish_reason_name(finish_reason r) {
    switch (r) {
        case finish_reason::stop:
            return "stop";
        case finish_reason::length:
            return "length";
        case finish_reason::context_full:
            return "context_full";
        case finish_reason::cancelled:
            return "cancelled";
    }
    return "?";
}

// How a request ended, for the engine's accounting.
enum class request_outcome { done, cancelled, failed };

struct usage {
    int32_t n_prompt_tokens = 0;
    int32_t n_completion_tokens = 0;  // sampled tokens consumed, including a final end-of-generation token
    int32_t n_draft_tokens = 0;       // speculative decoding: tokens proposed
    int32_t n_draft_accepted = 0;     // of which accepted
};

struct timings {
    double queue_ms = 0;                // submit -> admitted (KV granted)
    double time_to_first_token_ms = 0;  // submit -> first token delivered
    double total_ms = 0;                // submit -> done
    double decode_tokens_per_s = 0;     // completion tokens after the first / time after the first
};

// Where a request's output goes. Called on the streamer's lane, in order: on_text* then exactly one of
// on_done or on_error. Callbacks must not block (a front end posts to its own executor).
// One sampled token with its log-probability and the top alternatives (OpenAI `logprobs`), sent when
// the request asked for logprobs. Log-probabilities are of the distribution the token was drawn from
// after penalties, before temperature and truncation (what OpenAI reports).
struct token_logprobs {
    int32_t token = 0;
    std::string piece;  // the token's text (bytes; may be a partial UTF-8 sequence)
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // [top_logprobs] (token, logprob), most likely first
};

struct request_sink {
    std::function<void(std::string_view delta)> on_text;
    // Optional: called once per generated token, before the text that token completes, when
    // request.logprobs > 0 (or == 0 for the sampled token's own logprob only). Not called otherwise.
    std::function<void(const token_logprobs&)> on_logprobs;
    // Optional: called once, before the first token's callbacks, when request.prompt_logprobs: one entry per prompt
    // token, each token's logprob under the model's raw distribution after the tokens before it (no penalties) and
    // the top request.logprobs; the first entry has only its token and piece (nothing comes before it).
    std::function<void(const std::vector<token_logprobs>&)> on_prompt_logprobs;
    std::function<void(finish_reason, const usage&, const timings&)> on_done;
    std::function<void(const std::string& message)> on_error;
};

inline double ms_between(time_point a, time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace troupe
