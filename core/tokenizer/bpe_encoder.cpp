#include "core/tokenizer/bpe_encoder.h"

#include <algorithm>
#include <queue>
#include <string>

#include "core/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

struct symbol {
    size_t offset;
    size_t n;  // 0 once merged into its left neighbour
    int prev;
    int next;
};

struct bigram {
    int left;
    int right;
    int32_t rank;
    size_t size;
};

struct bigram_order {
    bool operator()(const bigram& a, const bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

void bpe_encode_word(const vocab& v, std::string_view word, std::vector<int32_t>& out) {
    if (word.empty()) return;
    if (v.ignore_merges) {
        if (const int32_t id = v.find(word); id >= 0) {
            out.push_back(id);
            return;
        }
    }
    std::vector<symbol> symbols;
    symbols.reserve(word.size());
    for (size_t offset = 0; offset < word.size();) {
        const size_t n = std::min(utf8_sequence_length(static_cast<uint8_t>(word[offset])), word.size() - offset);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({offset, n, index - 1, offset + n == word.size() ? -1 : index + 1});
        offset += n;
    }

    std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue;
    std::string key;
    const auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const symbol& l = symbols[left];
        const symbol& r = symbols[right];
        key.assign(word.substr(l.offset, l.n));
        key += ' ';
        key.append(word.substr(r.offset, r.n));
        auto it = v.merge_ranks.find(key);
        if (it == v.merge_ranks.end()) return;
        queue.push({left, right, it->second, l.n + r.n});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const bigram b = queue.top();
        queue.pop();
        symbol& l = symbols[b.left];
        symbol& r = symbols[b.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }

    for (int i = 0; i != -1; i = symbols[i].next) {
        const symbol& s = symbols[i];
        const std::string_view piece = word.substr(s.offset, s.n);
        if (const int32_t id = v.find(piece); id >= 0) {
            out.push_back(id);
            continue;
        }
        // Not a token: its characters one by one (llama.cpp looks them up byte by byte, which finds the
        // same single-character tokens for the ASCII part of the alphabet).
        for (size_t off = 0; off < piece.size();) {
            const size_t n = std::min(utf8_sequence_length(static_cast<uint8_t>(piece[off])), piece.size() - off);
            if (const int32_t id = v.find(piece.substr(off, n)); id >= 0) {
                out.push_back(id);
            } else if (v.unk_id >= 0) {
                out.push_back(v.unk_id);
            }
            off += n;
        }
    }
}

}  // namespace troupe::tok
