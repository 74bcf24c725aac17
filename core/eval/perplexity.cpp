// The windows, the per-token NLL and its running statistics (see perplexity.h).
#include "core/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace troupe::eval {

result<window_plan> plan_windows(int64_t n_tokens, int32_t n_ctx) {
    if (n_ctx < min_window) {
        return make_error("a window of " + std::to_string(n_ctx) + " tokens scores nothing: it must be at least " +
                          std::to_string(min_window) +
                          " (the second half of each window, less its last token, is "
                          "scored)");
    }
    window_plan plan;
    plan.n_ctx = n_ctx;
    plan.first = n_ctx / 2;
    plan.n_windows = static_cast<int32_t>(std::min<int64_t>(n_tokens / n_ctx, std::numeric_limits<int32_t>::max()));
    if (plan.n_windows < 1) {
        return make_error("the text is " + std::to_string(n_tokens) + " tokens, shorter than one window of " +
                          std::to_string(n_ctx) + ": give a longer text or a smaller context");
    }
    if (plan.n_scored() < 2) {
        return make_error("the text is " + std::to_string(n_tokens) + " tokens: windows of " + std::to_string(n_ctx) +
                          " score " + std::to_string(plan.n_scored()) +
                          " token(s), the error bar needs at least 2: give a longer text or a larger context");
    }
    return plan;
}

std::vector<int32_t> window_tokens(std::span<const int32_t> tokens, const window_plan& plan, int32_t w,
                                   int32_t bos_id) {
    TROUPE_ASSERT(w >= 0 && w < plan.n_windows,
                  "window " + std::to_string(w) + " of " + std::to_string(plan.n_windows));
    const size_t begin = static_cast<size_t>(w) * plan.n_ctx;
    TROUPE_ASSERT(begin + plan.n_ctx <= tokens.size(), "window " + std::to_string(w) + " past the text's end");
    std::vector<int32_t> out(tokens.begin() + begin, tokens.begin() + begin + plan.n_ctx);
    if (bos_id >= 0) out[0] = bos_id;
    return out;
}

std::vector<window_chunk> window_chunks(const window_plan& plan, int32_t max_tokens) {
    TROUPE_ASSERT(max_tokens >= 1, "max_tokens " + std::to_string(max_tokens));
    std::vector<window_chunk> out;
    const window_chunk halves[] = {{0, plan.first, false}, {plan.first, plan.n_ctx, true}};
    for (const window_chunk& h : halves) {
        for (int32_t b = h.begin; b < h.end; b += max_tokens) {
            out.push_back({b, std::min(h.end, b + max_tokens), h.with_logits});
        }
    }
    return out;
}

double token_nll(std::span<const float> logits, int32_t token) {
    TROUPE_ASSERT(token >= 0 && static_cast<size_t>(token) < logits.size(),
                  "token " + std::to_string(token) + " outside " + std::to_string(logits.size()) + " logits");
    const double max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
    return max_logit + std::log(sum) - static_cast<double>(logits[token]);
}

void nll_accumulator::add(double nll) {
    ++n_;
    const double delta = nll - mean_;
    mean_ += delta / static_cast<double>(n_);
    m2_ += delta * (nll - mean_);
}

double nll_accumulator::ppl() const {
    return n_ > 0 ? std::exp(mean_) : std::numeric_limits<double>::quiet_NaN();
}

double nll_accumulator::ppl_error() const {
    if (n_ < 2) return std::numeric_limits<double>::quiet_NaN();
    const double n = static_cast<double>(n_);
    return ppl() * std::sqrt(m2_ / (n * (n - 1.0)));
}

}  // namespace troupe::eval
