// The CUDA backend's grouping of a prefill's (token, slot) pairs by expert (kernels/cuda/cuda_moe_groups.h) is the
// CPU's (core/model/moe_router.h expert_groups) on random routings, and refuses an expert id out of range. Host
// arithmetic: runs everywhere.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/model/moe_router.h"
#include "kernels/cuda/cuda_moe_groups.h"

namespace troupe {
namespace {

TEST(cuda_moe_groups, group_the_pairs_as_the_cpu_does) {
    std::mt19937 rng(5);
    for (const auto& [n_tokens, n_used, n_experts] :
         {std::tuple{1, 1, 1}, std::tuple{300, 2, 4}, std::tuple{129, 6, 64}, std::tuple{37, 2, 8},
          std::tuple{200, 8, 160}}) {
        SCOPED_TRACE(std::to_string(n_tokens) + " tokens, top " + std::to_string(n_used) + " of " +
                     std::to_string(n_experts));
        std::vector<int32_t> experts;
        for (int32_t t = 0; t < n_tokens; ++t) {
            std::vector<int32_t> ids(n_experts);
            for (int32_t e = 0; e < n_experts; ++e) ids[e] = e;
            std::shuffle(ids.begin(), ids.end(), rng);  // distinct experts per token, as a router chooses them
            experts.insert(experts.end(), ids.begin(), ids.begin() + n_used);
        }
        expert_groups cpu;
        cpu.build(experts.data(), n_tokens, n_used, n_experts);
        cuda::moe_host_groups gpu;
        ASSERT_TRUE(gpu.build(experts.data(), n_tokens, n_used, n_experts));
        EXPECT_EQ(gpu.offsets, cpu.offsets);
        const int32_t pairs = n_tokens * n_used;
        ASSERT_EQ(gpu.rows.size(), 2 * static_cast<size_t>(pairs));
        EXPECT_EQ(std::vector<int32_t>(gpu.token_of(), gpu.token_of() + pairs), cpu.token_of);
        EXPECT_EQ(std::vector<int32_t>(gpu.row_of(), gpu.row_of() + pairs), cpu.row_of);
        for (int32_t p = 0; p < pairs; ++p) {  // a pair's row lies in its expert's range and holds its token
            const int32_t r = gpu.row_of()[p], e = experts[p];
            EXPECT_GE(r, gpu.offsets[e]);
            EXPECT_LT(r, gpu.offsets[e + 1]);
            EXPECT_EQ(gpu.token_of()[r], p / n_used);
        }
    }
}

TEST(cuda_moe_groups, refuse_an_expert_id_out_of_range) {
    cuda::moe_host_groups g;
    const std::vector<int32_t> high = {0, 4}, negative = {-1, 2};
    EXPECT_FALSE(g.build(high.data(), 1, 2, 4));
    EXPECT_FALSE(g.build(negative.data(), 1, 2, 4));
    const std::vector<int32_t> fine = {3, 0};
    EXPECT_TRUE(g.build(fine.data(), 1, 2, 4));
    EXPECT_EQ(g.count(3), 1);
    EXPECT_EQ(g.count(1), 0);
}

}  // namespace
}  // namespace troupe
