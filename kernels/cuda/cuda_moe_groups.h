// A prefill step's (token, slot) pairs grouped by expert on the host, for the experts' batched products
// (cuda_model_forward.cpp: moe_ffn_grouped): the rule of the CPU's expert_groups (core/model/moe_router.h), which
// the backend does not link. Pure host arithmetic, so tests on any machine check it.
//
//   pair p = (token p / k, slot p % k) runs expert experts[p]; rows [offsets[e], offsets[e + 1]) are expert e's, in
//   pair order; row r holds token token_of(r); pair p's row is row_of(p).
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::cuda {

struct moe_host_groups {
    std::vector<int32_t> offsets;  // [n_experts + 1]
    std::vector<int32_t> rows;     // [2 * pairs]: token_of for each row, then row_of for each pair (one upload)
    int32_t n_pairs = 0;

    // False where an expert id is outside [0, n_experts) (a routing the kernels cannot have made).
    bool build(const int32_t* experts, int32_t n_tokens, int32_t n_used, int32_t n_experts) {
        n_pairs = n_tokens * n_used;
        offsets.assign(static_cast<size_t>(n_experts) + 1, 0);
        rows.resize(2 * static_cast<size_t>(n_pairs));
        for (int32_t p = 0; p < n_pairs; ++p) {
            if (experts[p] < 0 || experts[p] >= n_experts) return false;
            ++offsets[experts[p] + 1];
        }
        for (int32_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
        std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
        for (int32_t p = 0; p < n_pairs; ++p) {
            const int32_t r = next[experts[p]]++;
            rows[r] = p / n_used;
            rows[n_pairs + p] = r;
        }
        return true;
    }
    int32_t count(int32_t e) const { return offsets[e + 1] - offsets[e]; }
    const int32_t* token_of() const { return rows.data(); }
    const int32_t* row_of() const { return rows.data() + n_pairs; }
};

}  // namespace troupe::cuda
