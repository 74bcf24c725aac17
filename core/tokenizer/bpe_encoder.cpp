#include "core/tokenizer/bpe_encoder.h"

#include <algorithm>
#include <string>

#include "core/tokenizer/pair_merge.h"
#include "core/tokenizer/utf8.h"

namespace troupe::tok {

void bpe_encode_word(const vocab& v, std::string_view word, std::vector<int32_t>& out) {
    if (word.empty()) return;
    if (v.ignore_merges) {
        if (const int32_t id = v.find(word); id >= 0) {
            out.push_back(id);
            return;
        }
    }
    std::string key;
    const auto rank = [&](std::string_view left, std::string_view right) -> std::optional<int32_t> {
        key.assign(left);
        key += ' ';
        key.append(right);
        auto it = v.merge_ranks.find(key);
        if (it == v.merge_ranks.end()) return std::nullopt;
        return it->second;
    };
    const std::vector<merge_symbol> symbols =
        merge_pairs<int32_t>(word, rank, [](int32_t a, int32_t b) { return a < b; });  // lower rank first

    for (int i = 0; i != -1; i = symbols[i].next) {
        const merge_symbol& s = symbols[i];
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
