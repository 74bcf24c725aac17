#include "core/sampling/grammar/token_constraint.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>

#include "core/result.h"

namespace troupe::grammar {

vocab_index::vocab_index(std::vector<std::string> pieces, std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)) {
    std::sort(eog_.begin(), eog_.end());
    for (size_t i = 0; i < pieces_.size(); ++i) {
        const auto id = static_cast<int32_t>(i);
        if (pieces_[i].empty() || std::binary_search(eog_.begin(), eog_.end(), id)) continue;
        sorted_.push_back({id, 0});
    }
    std::sort(sorted_.begin(), sorted_.end(), [&](const entry& a, const entry& b) {
        const auto& pa = pieces_[static_cast<size_t>(a.id)];
        const auto& pb = pieces_[static_cast<size_t>(b.id)];
        return pa != pb ? pa < pb : a.id < b.id;
    });
    for (size_t i = 1; i < sorted_.size(); ++i) {
        const auto& a = pieces_[static_cast<size_t>(sorted_[i - 1].id)];
        const auto& b = pieces_[static_cast<size_t>(sorted_[i].id)];
        uint32_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        sorted_[i].lcp = n;
    }
}

void token_mask::apply(std::span<float> logits) const {
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    for (size_t w = 0; w < bits.size(); ++w) {
        const uint64_t word = bits[w];
        if (word == ~uint64_t{0}) continue;
        const size_t end = std::min(logits.size(), (w + 1) * 64);
        for (size_t i = w * 64; i < end; ++i) {
            if (!((word >> (i & 63)) & 1u)) logits[i] = neg_inf;
        }
    }
}

int32_t token_mask::count() const {
    int32_t n = 0;
    for (uint64_t w : bits) n += std::popcount(w);
    return n;
}

size_t token_constraint::state_hash::operator()(const grammar_state& s) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t w : s.words) h = (h ^ w) * 1099511628211ull;
    return static_cast<size_t>(h);
}

token_constraint::token_constraint(grammar g, std::shared_ptr<const vocab_index> vocab, size_t max_cache_bytes)
    : g_(std::move(g)), vocab_(std::move(vocab)), max_cache_bytes_(max_cache_bytes) {
    TROUPE_ASSERT(vocab_ != nullptr, "token_constraint needs a vocabulary");
}

grammar_state token_constraint::start() const {
    return matcher(g_).start();
}

grammar_state token_constraint::after(const grammar_state& s, int32_t token) const {
    if (std::binary_search(vocab_->eog().begin(), vocab_->eog().end(), token)) return s;
    grammar_state next = s;
    if (token < 0 || token >= vocab_->n_vocab() || vocab_->piece(token).empty()) return {};
    if (!matcher(g_).advance(next, vocab_->piece(token))) return {};
    return next;
}

token_mask token_constraint::compute(const grammar_state& s) const {
    const matcher m(g_);
    token_mask mask;
    mask.bits.assign((static_cast<size_t>(vocab_->n_vocab()) + 63) / 64, 0);
    auto allow = [&](int32_t id) { mask.bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
    if (matcher::complete(s)) {
        for (int32_t id : vocab_->eog()) {
            if (id >= 0 && id < vocab_->n_vocab()) allow(id);
        }
    }
    if (s.dead()) return mask;
    // depth[k]: the state after the first k bytes of the current piece, valid for k <= valid.
    thread_local std::vector<grammar_state> depth;
    if (depth.size() < 2) depth.resize(2);
    depth[0] = s;
    size_t valid = 0;
    size_t dead_at = std::numeric_limits<size_t>::max();  // a prefix of this length is refused
    for (const auto& e : vocab_->sorted()) {
        if (e.lcp >= dead_at) continue;  // under a refused prefix
        dead_at = std::numeric_limits<size_t>::max();
        const std::string& p = vocab_->piece(e.id);
        if (depth.size() < p.size() + 1) depth.resize(p.size() + 1);
        valid = std::min<size_t>(valid, e.lcp);
        bool ok = true;
        for (size_t k = valid; k < p.size(); ++k) {
            m.advance(depth[k], static_cast<unsigned char>(p[k]), depth[k + 1]);
            if (depth[k + 1].dead()) {
                dead_at = k + 1;
                valid = k;
                ok = false;
                break;
            }
            valid = k + 1;
        }
        if (ok) allow(e.id);
    }
    return mask;
}

std::shared_ptr<const token_mask> token_constraint::mask_for(const grammar_state& s) const {
    const grammar_state* one[] = {&s};
    return masks_for(one)[0];
}

std::vector<std::shared_ptr<const token_mask>> token_constraint::masks_for(
    std::span<const grammar_state* const> states) const {
    std::vector<std::shared_ptr<const token_mask>> out(states.size());
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < states.size(); ++i) {
        ++stats_.n_lookups;
        if (auto it = cache_.find(*states[i]); it != cache_.end()) {
            out[i] = it->second;
            continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto mask = std::make_shared<const token_mask>(compute(*states[i]));
        stats_.compute_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++stats_.n_computed;
        const size_t bytes = mask->bits.size() * 8 + states[i]->words.size() * 4 + 128;
        if (cache_bytes_ + bytes > max_cache_bytes_) {
            cache_.clear();
            cache_bytes_ = 0;
        }
        cache_.emplace(*states[i], mask);
        cache_bytes_ += bytes;
        out[i] = std::move(mask);
    }
    return out;
}

constraint_stats token_constraint::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

}  // namespace troupe::grammar
