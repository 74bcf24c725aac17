#include "token_groups.h"

#include <algorithm>
#include <utility>

#include "attention_kernels.h"

namespace troupe::gqa {

int32_t make_token_groups(const troupe_attention_call& call, int32_t* tokens, int32_t n, int32_t max_tokens,
                          token_group* groups) {
    auto key = [&call](int32_t t) { return std::make_pair(call.seq_of[t], first_key(call, t)); };
    std::stable_sort(tokens, tokens + n, [&key](int32_t a, int32_t b) { return key(a) < key(b); });
    int32_t n_groups = 0;
    for (int32_t i = 0; i < n;) {
        int32_t j = i + 1;
        while (j < n && j - i < max_tokens && key(tokens[j]) == key(tokens[i])) ++j;
        groups[n_groups++] = {i, j - i};
        i = j;
    }
    return n_groups;
}

}  // namespace troupe::gqa
