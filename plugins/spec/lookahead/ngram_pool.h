// ngram_pool: the n-grams one sequence has seen, by first token. For each key it keeps up to `capacity`
// continuations (the n-1 tokens that followed the key), the most recently seen last: seeing an n-gram again moves it
// to the back, and a new one pushes the oldest out when the key is full (LRU, as the lookahead paper's pool with a
// guess-set cap). Fed from the prompt, from the generated text and from the Jacobi window's trajectory.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace troupe::spec_plugins {

class ngram_pool {
public:
    // n: tokens per n-gram (>= 2); capacity: continuations kept per key (>= 1).
    ngram_pool(int32_t n, int32_t capacity) : n_(n), capacity_(capacity) {}

    // Adds the n-gram (key, continuation[0, n-1)).
    void add(int32_t key, const int32_t* continuation);
    // Adds every n-gram of tokens[0, size) that ends at or after index `from` (so text already added is skipped).
    void add_text(std::span<const int32_t> tokens, int64_t from);

    // The continuations of `key`, most recent first, each n-1 tokens: fn(const int32_t* continuation) until fn
    // returns false.
    template <class F>
    void for_each_recent(int32_t key, F&& fn) const {
        const auto it = by_key_.find(key);
        if (it == by_key_.end()) return;
        const std::vector<int32_t>& rows = it->second;  // [n_entries, n - 1], oldest first
        const size_t width = static_cast<size_t>(n_ - 1);
        for (size_t e = rows.size() / width; e-- > 0;) {
            if (!fn(rows.data() + e * width)) return;
        }
    }

    int32_t n() const { return n_; }
    void clear() { by_key_.clear(); }

private:
    int32_t n_;
    int32_t capacity_;
    std::unordered_map<int32_t, std::vector<int32_t>> by_key_;  // key -> [n_entries, n - 1], oldest first
};

}  // namespace troupe::spec_plugins
