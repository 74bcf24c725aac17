#include "plugins/spec/lookahead/ngram_pool.h"

#include <algorithm>

namespace troupe::spec_plugins {

void ngram_pool::add(int32_t key, const int32_t* continuation) {
    std::vector<int32_t>& rows = by_key_[key];
    const auto width = static_cast<std::ptrdiff_t>(n_ - 1);
    const auto n_entries = static_cast<std::ptrdiff_t>(rows.size()) / width;
    for (std::ptrdiff_t e = 0; e < n_entries; ++e) {
        auto at = rows.begin() + e * width;
        if (std::equal(at, at + width, continuation)) {
            // Seen again: rotate it to the back (most recent).
            std::rotate(at, at + width, rows.end());
            return;
        }
    }
    if (n_entries == capacity_) rows.erase(rows.begin(), rows.begin() + width);
    rows.insert(rows.end(), continuation, continuation + width);
}

void ngram_pool::add_text(std::span<const int32_t> tokens, int64_t from) {
    const auto size = static_cast<int64_t>(tokens.size());
    // The n-gram starting at s ends at s + n - 1.
    for (int64_t s = std::max<int64_t>(0, from - (n_ - 1)); s + n_ <= size; ++s) {
        add(tokens[static_cast<size_t>(s)], tokens.data() + s + 1);
    }
}

}  // namespace troupe::spec_plugins
