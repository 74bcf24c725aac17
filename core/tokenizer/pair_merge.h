// pair_merge: the merge loop SentencePiece (llama) and byte-level BPE (gpt2) share. The text starts as
// one symbol per UTF-8 character in a doubly linked list; the best adjacent pair that forms a token
// (highest score for SentencePiece, lowest merge rank for BPE; leftmost on ties) is merged until no
// pair qualifies. Queue entries that went stale (a side already merged) are recognized by their size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

#include "core/tokenizer/utf8.h"

namespace troupe::tok {

struct merge_symbol {
    size_t offset;  // into the text
    size_t n;       // bytes; 0 once merged into its left neighbour
    int prev;       // -1: none
    int next;       // -1: none
};

// The symbols of `text` after every merge, as a list starting at index 0 (empty for empty text).
// priority(left_text, right_text) -> std::optional<P>: whether the pair merges, and how good it is;
// better(a, b): whether priority a is merged before b.
template <class P, class Priority, class Better>
std::vector<merge_symbol> merge_pairs(std::string_view text, Priority priority, Better better) {
    std::vector<merge_symbol> symbols;
    symbols.reserve(text.size());
    for (size_t offset = 0; offset < text.size();) {
        const size_t n = std::min(utf8_sequence_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({offset, n, index - 1, offset + n == text.size() ? -1 : index + 1});
        offset += n;
    }
    struct pair {
        int left;
        int right;
        P priority;
        size_t size;  // bytes of the merged text, to detect stale entries
    };
    const auto after = [&better](const pair& a, const pair& b) {  // a is merged after b
        if (better(b.priority, a.priority)) return true;
        return !better(a.priority, b.priority) && a.left > b.left;
    };
    std::priority_queue<pair, std::vector<pair>, decltype(after)> queue(after);
    const auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const merge_symbol& l = symbols[left];
        const merge_symbol& r = symbols[right];
        if (std::optional<P> p = priority(text.substr(l.offset, l.n), text.substr(r.offset, r.n))) {
            queue.push({left, right, *p, l.n + r.n});
        }
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
        const pair b = queue.top();
        queue.pop();
        merge_symbol& l = symbols[b.left];
        merge_symbol& r = symbols[b.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }
    return symbols;
}

}  // namespace troupe::tok
