#include "core/tokenizer/spm_encoder.h"

#include <algorithm>

#include "core/tokenizer/pair_merge.h"
#include "core/tokenizer/utf8.h"

namespace troupe::tok {

void spm_encode(const vocab& v, std::string_view text, std::vector<int32_t>& out) {
    const auto score = [&](std::string_view left, std::string_view right) -> std::optional<float> {
        const int32_t id =
            v.find(text.substr(static_cast<size_t>(left.data() - text.data()), left.size() + right.size()));
        if (id < 0) return std::nullopt;
        return v.tokens[id].score;
    };
    const std::vector<merge_symbol> symbols =
        merge_pairs<float>(text, score, [](float a, float b) { return a > b; });  // higher score first

    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
        const merge_symbol& s = symbols[i];
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
