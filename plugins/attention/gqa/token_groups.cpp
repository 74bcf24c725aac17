#include "token_groups.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "attention_kernels.h"

namespace troupe::gqa {

int32_t make_token_groups(const troupe_attention_call& call, int32_t* tokens, int32_t n, int32_t max_tokens,
                          token_group* groups) {
    auto key = [&call](int32_t t) { return std::make_pair(call.seq_of[t], first_key(call, t)); };
    std::vector<int32_t> rank(static_cast<size_t>(call.n_tokens));  // a token's place in the order given
    for (int32_t i = 0; i < n; ++i) rank[static_cast<size_t>(tokens[i])] = i;
    std::stable_sort(tokens, tokens + n, [&key](int32_t a, int32_t b) { return key(a) < key(b); });
    int32_t n_groups = 0;
    for (int32_t i = 0; i < n;) {
        int32_t j = i + 1;
        while (j < n && j - i < max_tokens && key(tokens[j]) == key(tokens[i])) ++j;
        groups[n_groups++] = {i, j - i};
        i = j;
    }
    // The groups in the order of their first tokens as given (the callers list the costliest first, so that the
    // threads' shares balance), not by sequence.
    std::sort(groups, groups + n_groups, [&](const token_group& a, const token_group& b) {
        return rank[static_cast<size_t>(tokens[a.first])] < rank[static_cast<size_t>(tokens[b.first])];
    });
    return n_groups;
}

}  // namespace troupe::gqa
