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
    // Each piece adds nodes for its bytes past the common prefix; a piece equal to the one before adds none.
    std::vector<uint32_t> open;  // [depth - 1] the node of each byte of the current piece
    for (size_t i = 0; i < sorted_.size(); ++i) {
        const std::string& p = pieces_[static_cast<size_t>(sorted_[i].id)];
        const size_t lcp = i == 0 ? 0 : sorted_[i].lcp;
        TROUPE_ASSERT(p.size() < 65536, "vocab_index: a token of " + std::to_string(p.size()) + " bytes");
        for (size_t d = lcp; d < open.size(); ++d) trie_[open[d]].end = static_cast<uint32_t>(trie_.size());
        open.resize(lcp);
        for (size_t d = lcp; d < p.size(); ++d) {
            open.push_back(static_cast<uint32_t>(trie_.size()));
            trie_.push_back({static_cast<uint8_t>(p[d]), static_cast<uint16_t>(d + 1), 0, 0, 0});
        }
        node& last = trie_[open.back()];
        if (last.token_end == 0) last.token_begin = static_cast<uint32_t>(i);
        last.token_end = static_cast<uint32_t>(i + 1);
        max_depth_ = std::max(max_depth_, p.size());
    }
    for (uint32_t n : open) trie_[n].end = static_cast<uint32_t>(trie_.size());
}

void token_mask::apply(std::span<float> logits) const {
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    // Per 64 tokens: all allowed (inside a string, most words) nothing; all refused (outside one, most words) a
    // plain fill the compiler vectorizes; otherwise only the refused ones (a bit test per token cost ~20 us a step on
    // a 32,000-token vocabulary).
    for (size_t w = 0; w < bits.size(); ++w) {
        const uint64_t word = bits[w];
        if (word == ~uint64_t{0}) continue;
        const size_t begin = w * 64;
        if (begin >= logits.size()) break;
        const size_t n = std::min<size_t>(64, logits.size() - begin);
        if (word == 0) {
            std::fill_n(logits.begin() + static_cast<std::ptrdiff_t>(begin), n, neg_inf);
            continue;
        }
        for (uint64_t refused = ~word; refused != 0; refused &= refused - 1) {
            const size_t i = begin + static_cast<size_t>(std::countr_zero(refused));
            if (i < logits.size()) logits[i] = neg_inf;
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

int32_t token_constraint::intern(const grammar_state& s) const {
    if (auto it = dfa_.ids.find(s); it != dfa_.ids.end()) return it->second;
    // Bounded memory (1 KiB of transitions per state, and the states' words): compute_locked starts the DFA
    // over past the bounds; within one walk it may grow to 4x them, then a new state reads as refused (a
    // pathological grammar loses some allowed tokens, never the validity of what it allows).
    if (dfa_.states.size() >= 4 * max_dfa_states || dfa_.n_words + s.words.size() > 4 * max_dfa_words) return -1;
    dfa_.n_words += s.words.size();
    const auto id = static_cast<int32_t>(dfa_.states.size());
    auto [it, inserted] = dfa_.ids.emplace(s, id);
    dfa_.states.push_back(&it->first);
    std::array<int32_t, 256> unknown;
    unknown.fill(-2);
    dfa_.next.push_back(unknown);
    dfa_.complete.push_back(matcher::complete(s) ? 1 : 0);
    return id;
}

int32_t token_constraint::step(const matcher& m, int32_t id, unsigned char c) const {
    int32_t n = dfa_.next[static_cast<size_t>(id)][c];
    if (n != -2) return n;
    grammar_state out;
    m.advance(*dfa_.states[static_cast<size_t>(id)], c, out);
    if (out.dead()) {
        n = -1;
    } else {
        m.canonicalize(out);
        n = intern(out);
    }
    dfa_.next[static_cast<size_t>(id)][c] = n;
    return n;
}

token_mask token_constraint::compute(const grammar_state& s) const {
    std::lock_guard lock(mutex_);
    return compute_locked(s);
}

token_mask token_constraint::compute_locked(const grammar_state& s) const {
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
    grammar_state start = s;
    m.canonicalize(start);
    if (dfa_.states.size() >= max_dfa_states || dfa_.n_words >= max_dfa_words) dfa_ = dfa{};
    // A depth-first walk of the trie: at[d] is the state after the current node's first d bytes; a refused
    // byte skips the node's whole subtree.
    std::vector<int32_t> at(vocab_->max_depth() + 1);
    at[0] = intern(start);
    if (at[0] < 0) return mask;
    const auto& nodes = vocab_->trie();
    const auto& sorted = vocab_->sorted();
    for (size_t i = 0; i < nodes.size();) {
        const vocab_index::node& n = nodes[i];
        const int32_t from = at[n.depth - 1u];
        // The transition table first (nearly every node once the DFA has its states), step() where it is unknown:
        // a call per node cost a third of the walk.
        int32_t next = dfa_.next[static_cast<size_t>(from)][n.byte];
        if (next == -2) next = step(m, from, n.byte);
        if (next < 0) {
            i = n.end;
            continue;
        }
        at[n.depth] = next;
        for (uint32_t t = n.token_begin; t < n.token_end; ++t) allow(sorted[t].id);
        ++i;
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
        auto mask = std::make_shared<const token_mask>(compute_locked(*states[i]));
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
