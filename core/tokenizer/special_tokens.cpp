#include "core/tokenizer/special_tokens.h"

namespace troupe::tok {

std::vector<fragment> split_special(const vocab& v, std::string_view text, bool parse_special) {
    std::vector<fragment> fragments;
    if (text.empty()) return fragments;
    fragments.push_back({-1, text});
    std::vector<fragment> next;
    for (int32_t id : v.special_ids) {
        const token_data& t = v.tokens[id];
        if (!parse_special && t.kind != token_kind::user_defined) continue;
        const std::string_view needle = t.text;
        bool found = false;
        next.clear();
        for (const fragment& f : fragments) {
            if (f.token_id >= 0 || f.text.size() < needle.size()) {
                next.push_back(f);
                continue;
            }
            size_t start = 0;
            for (size_t at = f.text.find(needle); at != std::string_view::npos; at = f.text.find(needle, start)) {
                found = true;
                if (at > start) next.push_back({-1, f.text.substr(start, at - start)});
                next.push_back({id, needle});
                start = at + needle.size();
            }
            if (start < f.text.size()) next.push_back({-1, f.text.substr(start)});
        }
        if (found) fragments.swap(next);
    }
    return fragments;
}

}  // namespace troupe::tok
