// sampler: penalties -> (greedy argmax) -> temperature -> top-k -> top-p -> min-p -> softmax -> draw.
//
// Efficiency on 32k-150k vocabularies: the vocabulary is never sorted as a whole. With top_k set, one
// pass keeps the k best in a small heap (one comparison per token for almost all of them), and only
// those k are sorted. Without top_k, min-p is applied during the one pass over the logits as a linear
// filter (p_i >= min_p * p_max <=> (l_i - l_max) / T >= log(min_p)), and top-p sorts a growing prefix
// (partial_sort) only until the cumulative mass reaches top_p. That is exactly the documented order:
// top-p and min-p both keep a prefix of the candidates sorted by descending logit, and min-p is
// relative to the maximum, which top-p always keeps, so their intersection does not depend on the
// order; top-p's mass stays normalized over the set before min-p (the top-k set, or everything).
//
// Determinism: candidates are ordered by (logit descending, token id ascending), so ties break to the
// lower id; draws walk the kept tokens in ascending id order, so sample() and draw(distribution())
// pick the same token from the same RNG state. NaN and -inf logits are never kept.
#include "core/sampling/sampler.h"

#include "core/result.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
}

// The largest value, NaN ignored (-inf when there is none). Eight independent running maxima so the
// loop is not one long dependency chain (the compiler may vectorize it).
float max_value(std::span<const float> x) {
    float m[8] = {neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf, neg_inf};
    size_t i = 0;
    for (; i + 8 <= x.size(); i += 8) {
        for (size_t j = 0; j < 8; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    }
    for (; i < x.size(); ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
    float best = m[0];
    for (float v : m) best = v > best ? v : best;
    return best;
}

// The lowest id holding the largest value (0 when every value is NaN).
int32_t argmax(std::span<const float> x) {
    const float best = max_value(x);
    for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] == best) return static_cast<int32_t>(i);
    }
    return 0;
}

// The k best (logit, id) by `better`, NaN and -inf skipped, sorted best first. One comparison per token
// for all but the few that enter the heap (whose top is the worst kept).
void select_top_k(std::span<const float> logits, size_t k, std::vector<std::pair<float, int32_t>>& out) {
    out.clear();
    out.reserve(k);
    for (size_t i = 0; i < logits.size(); ++i) {
        const float l = logits[i];
        if (!(l > neg_inf)) continue;
        if (out.size() < k) {
            out.emplace_back(l, static_cast<int32_t>(i));
            std::push_heap(out.begin(), out.end(), better);
        } else if (l > out.front().first) {  // equal logits lose: the later id is worse
            std::pop_heap(out.begin(), out.end(), better);
            out.back() = {l, static_cast<int32_t>(i)};
            std::push_heap(out.begin(), out.end(), better);
        }
    }
    std::sort(out.begin(), out.end(), better);
}

// Penalties over the last penalty_last_n tokens of history, applied in place.
void apply_penalties(const sampling_params& p, std::span<const int32_t> history, std::span<float> logits) {
    const bool any = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    if (!any || history.empty() || p.penalty_last_n == 0) return;
    size_t n = history.size();
    if (p.penalty_last_n > 0) n = std::min(n, static_cast<size_t>(p.penalty_last_n));
    std::vector<int32_t> window(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    std::sort(window.begin(), window.end());
    for (size_t i = 0; i < window.size();) {
        size_t j = i;
        while (j < window.size() && window[j] == window[i]) ++j;
        const int32_t token = window[i];
        const auto count = static_cast<float>(j - i);
        i = j;
        if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;
        float& l = logits[static_cast<size_t>(token)];
        if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
        l -= count * p.frequency_penalty + p.presence_penalty;
    }
}

void apply_bias(const sampling_params& p, std::span<float> logits) {
    for (const auto& [token, bias] : p.logit_bias) {
        if (token >= 0 && static_cast<size_t>(token) < logits.size()) logits[static_cast<size_t>(token)] += bias;
    }
}

}  // namespace

sampler::sampler(const sampling_params& params) : params_(params), rng_(params.seed) {
    if (params_.constraint) state_ = params_.constraint->start();
}

void sampler::adjust(std::span<float> logits, std::span<const int32_t> history) const {
    apply_penalties(params_, history, logits);
    apply_bias(params_, logits);
    if (params_.constraint) {
        const auto mask = next_mask_ ? next_mask_ : params_.constraint->mask_for(state_);
        mask->apply(logits);
    }
}

void sampler::candidates(std::span<const float> logits, std::vector<std::pair<float, int32_t>>& cand) const {
    TROUPE_ASSERT(!logits.empty(), "sampler: empty logits");
    const float inv_t = 1.0f / params_.temperature;
    const float log_min_p = params_.min_p > 0.0f ? std::log(params_.min_p) : neg_inf;
    const bool top_p = params_.top_p < 1.0f;
    // From here cand[i].first is the scaled logit s = (l - l_max) / T <= 0; exp(s) is the unnormalized
    // probability. z is the normalizer of the set before min-p (top-p's mass is relative to it).
    double z = 0.0;
    bool sorted = false;
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < logits.size()) {
        select_top_k(logits, static_cast<size_t>(params_.top_k), cand);
        if (cand.empty()) {  // everything masked: token 0
            cand.emplace_back(0.0f, 0);
            return;
        }
        const float l_max = cand.front().first;
        for (auto& c : cand) {
            c.first = (c.first - l_max) * inv_t;
            z += std::exp(static_cast<double>(c.first));
        }
        size_t keep = cand.size();
        while (keep > 1 && cand[keep - 1].first < log_min_p) --keep;  // sorted: min-p keeps a prefix
        cand.resize(keep);
        sorted = true;
    } else {
        const float l_max = max_value(logits);
        cand.clear();
        if (!(l_max > neg_inf)) {  // everything masked: token 0
            cand.emplace_back(0.0f, 0);
            return;
        }
        cand.reserve(logits.size());
        for (size_t i = 0; i < logits.size(); ++i) {
            const float l = logits[i];
            if (!(l > neg_inf)) continue;
            const float sl = (l - l_max) * inv_t;
            if (top_p) z += static_cast<double>(std::exp(sl));
            if (sl >= log_min_p) cand.emplace_back(sl, static_cast<int32_t>(i));
        }
    }
    if (top_p) {
        // Sort a growing prefix until it holds top_p of the mass (all of it is sorted after top-k).
        const double target = static_cast<double>(params_.top_p) * z;
        size_t m = sorted ? cand.size() : std::min<size_t>(cand.size(), 256);
        for (;;) {
            if (!sorted) {
                std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(m), cand.end(), better);
            }
            double cum = 0.0;
            size_t keep = 0;
            while (keep < m && cum < target) cum += static_cast<double>(std::exp(cand[keep++].first));
            if (cum >= target || m == cand.size()) {
                cand.resize(std::max<size_t>(keep, 1));
                break;
            }
            m = std::min(cand.size(), m * 4);
        }
        sorted = true;
    }
    if (sorted) {
        std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    }
    // Softmax over the kept set; first holds the probability from here on.
    double sum = 0.0;
    for (auto& c : cand) {
        c.first = std::exp(c.first);
        sum += static_cast<double>(c.first);
    }
    const auto inv_sum = static_cast<float>(1.0 / sum);
    for (auto& c : cand) c.first *= inv_sum;
}

void sampler::distribution(std::span<const float> logits, std::span<const int32_t> history,
                           std::vector<float>& probs) const {
    TROUPE_ASSERT(!logits.empty(), "sampler: empty logits");
    probs.assign(logits.begin(), logits.end());
    adjust(probs, history);
    if (greedy()) {
        const int32_t best = argmax(probs);
        std::fill(probs.begin(), probs.end(), 0.0f);
        probs[static_cast<size_t>(best)] = 1.0f;
        return;
    }
    std::vector<std::pair<float, int32_t>> cand;
    candidates(probs, cand);
    std::fill(probs.begin(), probs.end(), 0.0f);
    for (const auto& c : cand) probs[static_cast<size_t>(c.second)] = c.first;
}

void sampler::penalized(std::span<const float> logits, std::span<const int32_t> history,
                        std::vector<float>& out) const {
    out.assign(logits.begin(), logits.end());
    apply_penalties(params_, history, out);
    apply_bias(params_, out);
}

int32_t sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    TROUPE_ASSERT(!logits.empty(), "sampler: empty logits");
    scratch_logits_.assign(logits.begin(), logits.end());
    adjust(scratch_logits_, history);
    next_mask_.reset();
    const int32_t token = pick(scratch_logits_);
    if (params_.constraint) state_ = params_.constraint->after(state_, token);
    return token;
}

int32_t sampler::pick(std::span<const float> logits) {
    if (greedy()) return argmax(logits);
    candidates(logits, scratch_candidates_);
    double total = 0.0;
    for (const auto& c : scratch_candidates_) total += c.first;
    const double u = uniform_double() * (total > 0.0 ? total : 1.0);
    double cum = 0.0;
    for (const auto& c : scratch_candidates_) {
        cum += c.first;
        if (u < cum) return c.second;
    }
    return scratch_candidates_.back().second;
}

int32_t sampler::draw(std::span<const float> probs) {
    TROUPE_ASSERT(!probs.empty(), "sampler: empty distribution");
    double total = 0.0;
    for (float p : probs) total += p;
    const double u = uniform_double() * (total > 0.0 ? total : 1.0);
    // Same walk as sample(): a float running sum over kept tokens in id order (zeros add nothing).
    double cum = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] <= 0.0f) continue;
        cum += probs[i];
        last = static_cast<int32_t>(i);
        if (u < cum) return last;
    }
    return last >= 0 ? last : 0;
}

double sampler::uniform_double() {
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

float sampler::uniform() {
    return static_cast<float>(rng_() >> 40) * 0x1.0p-24f;
}

}  // namespace troupe
