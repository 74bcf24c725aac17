// perplexity: the estimate llama.cpp's llama-perplexity prints, as pure functions over token ids and logits, so
// that `troupe perplexity` figures compare with its figures.
//
// The text is tokenized once, with BOS at the start, and cut into non-overlapping windows of n_ctx tokens (a
// trailing part shorter than a window is left out). Each window runs as its own sequence from position 0 with
// its first token replaced by BOS (where the vocabulary adds one), so every window starts like a document.
// Only the second half is scored, so every scored token has at least n_ctx/2 tokens of context:
//
//   window w:  tokens[w·n_ctx .. (w+1)·n_ctx)          positions 0 .. n_ctx-1
//              [BOS t1 t2 ... t(first-1) | t(first) ... t(n_ctx-1)]
//   scored:    logits at positions first .. n_ctx-2 predict the tokens at first+1 .. n_ctx-1,  first = n_ctx/2
//              (n_ctx - first - 1 tokens per window)
//
//   NLL of a token = log Σ exp(logits) - logits[token]      (natural log, in double)
//   PPL           = exp(mean NLL)
//   error bar     = PPL · (standard error of the mean NLL) = PPL · sqrt(Σ(x - mean)² / (n (n - 1)))
//                   (first-order propagation of the mean's error through exp, as llama.cpp reports it)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"

namespace troupe::eval {

struct window_plan {
    int32_t n_ctx = 0;      // tokens per window
    int32_t n_windows = 0;  // whole windows in the text
    int32_t first = 0;      // n_ctx / 2: the first position whose logits are scored

    int32_t n_scored_per_window() const { return n_ctx - first - 1; }
    int64_t n_scored() const { return static_cast<int64_t>(n_windows) * n_scored_per_window(); }
};

// The smallest window that scores a token (n_ctx - n_ctx/2 - 1 >= 1).
inline constexpr int32_t min_window = 4;

// The windows of a text of n_tokens tokens. Errors: n_ctx below min_window, or a text that gives fewer than
// two scored tokens (no error bar) or no whole window; each message says what would be right.
result<window_plan> plan_windows(int64_t n_tokens, int32_t n_ctx);

// The tokens window w runs: tokens[w·n_ctx, (w+1)·n_ctx) with the first replaced by bos_id (bos_id < 0: kept).
std::vector<int32_t> window_tokens(std::span<const int32_t> tokens, const window_plan& plan, int32_t w, int32_t bos_id);

// One forward step of a window: positions [begin, end); with_logits when a row of it is scored.
struct window_chunk {
    int32_t begin = 0;
    int32_t end = 0;
    bool with_logits = false;
};

// How a window runs in steps of at most max_tokens tokens (>= 1): the unscored first half and the scored second
// half are separate steps, so logits are computed only for rows that are scored (the last row's too, which
// predicts nothing; it is one row).
std::vector<window_chunk> window_chunks(const window_plan& plan, int32_t max_tokens);

// -log softmax(logits)[token], computed as logsumexp in double. Asserts 0 <= token < logits.size().
double token_nll(std::span<const float> logits, int32_t token);

// Running mean and spread of the NLLs (Welford), so the error bar does not suffer from cancellation.
class nll_accumulator {
public:
    void add(double nll);
    int64_t count() const { return n_; }
    double mean_nll() const { return mean_; }
    double ppl() const;
    // PPL · standard error of the mean NLL; NaN with fewer than two values.
    double ppl_error() const;

private:
    int64_t n_ = 0;
    double mean_ = 0.0;
    double m2_ = 0.0;  // Σ (x - mean)²
};

}  // namespace troupe::eval
