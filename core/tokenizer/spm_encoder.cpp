#include "core/tokenizer/spm_encoder.h"

#include <algorithm>
#include <queue>

#include "core/tokenizer/utf8.h"

namespace troupe::tok {
namespace {

struct symbol {
    size_t offset;  // into the text
    size_t n;       // bytes; 0 once merged into its left neighbour
    int prev;       // -1: none
    int next;       // -1: none
};

struct bigram {
    int left;
    int right;
    float score;
    size_t size;  // bytes of the merged text, to detect stale entries
};

struct bigram_order {
    bool operator()(const bigram& a, const bigram& b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

}  // namespace

void spm_encode(const vocab& v, std::string_view text, std::vector<int32_t>& out) {
    std::vector<symbol> symbols;
    symbols.reserve(text.size());
    for (size_t offset = 0; offset < text.size();) {
        const size_t n = std::min(utf8_sequence_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({offset, n, index - 1, offset + n == text.size() ? -1 : index + 1});
        offset += n;
    }

    std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue;
    const auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const symbol& l = symbols[left];
        const symbol& r = symbols[right];
        const std::string_view merged = text.substr(l.offset, l.n + r.n);
        const int32_t id = v.find(merged);
        if (id < 0) return;
        queue.push({left, right, v.tokens[id].score, merged.size()});
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

    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
        const symbol& s = symbols[i];
        const std::string_view piece = text.substr(s.offset, s.n);
        const int32_t id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char c : piece) {
            const int32_t byte_id = v.byte_ids[static_cast<uint8_t>(c)];
            if (byte_id >= 0) {
                out.push_back(byte_id);
            } else if (v.unk_id >= 0) {
                out.push_back(v.unk_id);
            }
        }
    }
}

}  // namespace troupe::tok
