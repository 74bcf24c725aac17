// sampler: turns a row of logits into the next token for one request.
//
// Order (as llama.cpp and vLLM do): penalties over the recent history (repetition, frequency,
// presence) -> logit_bias -> the grammar's token mask (response_format) -> greedy argmax when temperature == 0 ->
// temperature -> top-k -> top-p -> min-p -> softmax -> draw with the request's own RNG. The RNG is seeded from the
// request's seed alone and advanced once per drawn token, so results never depend on what else is in the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/sampling/grammar/token_constraint.h"

namespace troupe {

struct sampling_params {
    float temperature = 0.8f;         // 0 = greedy
    int32_t top_k = 40;               // <= 0: off
    float top_p = 0.95f;              // 1: off
    float min_p = 0.05f;              // 0: off
    float repetition_penalty = 1.0f;  // 1: off (llama.cpp style: divide positive logits, multiply negative)
    float frequency_penalty = 0.0f;   // OpenAI style: minus count * f
    float presence_penalty = 0.0f;    // minus p if present
    int32_t penalty_last_n = 64;      // history window for penalties; -1: whole context
    uint64_t seed = 0;                // per request
    int32_t max_tokens = 128;
    std::vector<int32_t> stop_tokens;       // in addition to the model's end-of-generation tokens
    std::vector<std::string> stop_strings;  // checked on the detokenized text by the streamer
    // Control tokens whose text the streamer writes, which it otherwise leaves out (a tool-call format's
    // markers, such as <|python_tag|> or [TOOL_CALLS], that the server parses the reply by).
    std::vector<std::string> shown_special_tokens;
    bool ignore_eos = false;
    std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added to its logit), after penalties
    // Only the tokens this grammar allows next (response_format); shared by the requests of one schema.
    std::shared_ptr<const grammar::token_constraint> constraint;
};

class sampler {
public:
    explicit sampler(const sampling_params& params);

    bool greedy() const { return params_.temperature <= 0.0f; }
    const sampling_params& params() const { return params_; }

    // The distribution the next token is drawn from: penalties, temperature and truncation applied,
    // normalized over the vocabulary (zeros outside the kept set). Greedy: one-hot at the argmax.
    void distribution(std::span<const float> logits, std::span<const int32_t> history, std::vector<float>& probs) const;

    // The logits after penalties (before temperature and truncation): what logprobs are reported on.
    void penalized(std::span<const float> logits, std::span<const int32_t> history, std::vector<float>& out) const;

    // distribution() + draw(), or the argmax (after penalties) when greedy.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

    // Draws one token from a distribution with this request's RNG.
    int32_t draw(std::span<const float> probs);
    // Uniform in [0, 1) from this request's RNG (speculative verification's accept test).
    float uniform();

    // With a constraint: the grammar's state after the tokens sampled so far.
    bool constrained() const { return params_.constraint != nullptr; }
    const grammar::grammar_state& constraint_state() const { return state_; }
    // The mask for the next sample(), when the caller fetched it (batched over a step); else sample()
    // looks it up itself.
    void set_next_mask(std::shared_ptr<const grammar::token_mask> mask) { next_mask_ = std::move(mask); }

private:
    // Kept tokens after temperature and truncation as (probability, token id), ascending by id.
    void candidates(std::span<const float> logits, std::vector<std::pair<float, int32_t>>& cand) const;
    double uniform_double();
    // Greedy argmax or a draw from the adjusted logits.
    int32_t pick(std::span<const float> logits);
    // Penalties, logit_bias and (with a constraint) the grammar's mask, in place.
    void adjust(std::span<float> logits, std::span<const int32_t> history) const;

    sampling_params params_;
    std::mt19937_64 rng_;
    std::vector<float> scratch_logits_;                          // [n_vocab] penalized logits
    std::vector<std::pair<float, int32_t>> scratch_candidates_;  // [n_kept]
    grammar::grammar_state state_;                               // with a constraint
    std::shared_ptr<const grammar::token_mask> next_mask_;
};

}  // namespace troupe
