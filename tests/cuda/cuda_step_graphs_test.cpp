// Step graphs (kernels/cuda/cuda_step_graphs.h): decode-sized steps are captured once per shape and replayed. On a
// GPU, a runner with graphs (the default) and one without (TROUPE_CUDA_GRAPHS=0) give the same logits step after
// step: through a shape's eager first step, its capture and its replays, a second sequence joining (a new shape), a
// long prefill that grows the step's buffers (the graphs made before must be dropped, not replayed into freed
// memory), decode after it, and verify-sized steps (4 tokens, every row's logits: prefill's tiled attention inside a
// graph); with F32 and F16 KV.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/cuda_runner.h"
#include "core/backend/llama_view_of.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

using testing::logits_row;
using testing::max_abs_diff;

std::vector<int32_t> table_of(int32_t slot) {
    std::vector<int32_t> t;
    for (int32_t b = 0; b < 16; ++b) t.push_back(slot * 16 + b);
    return t;
}

std::unique_ptr<cuda_runner> runner_with_graphs(const llama_weights& weights, bool graphs, bool kv_f16) {
    if (graphs) {
        unsetenv("TROUPE_CUDA_GRAPHS");
    } else {
        setenv("TROUPE_CUDA_GRAPHS", "0", 1);
    }
    cuda_runner_params p;
    p.block_size = 16;
    p.n_blocks = 64;
    p.dequantize_to = cuda_weight_type::f32;
    p.kv_f16 = kv_f16;
    auto made = cuda_runner::create(llama_view_of(weights), p);
    unsetenv("TROUPE_CUDA_GRAPHS");
    EXPECT_TRUE(made.ok()) << made.message();
    return made.ok() ? std::move(made.value()) : nullptr;
}

class cuda_step_graphs : public ::testing::TestWithParam<bool> {};  // F16 KV or F32

TEST_P(cuda_step_graphs, replayed_steps_give_the_logits_of_steps_launched_one_by_one) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    auto with = runner_with_graphs(weights.value(), true, GetParam());
    auto without = runner_with_graphs(weights.value(), false, GetParam());
    ASSERT_TRUE(with && without);

    // Each step on both runners; the logits of every sequence compared.
    int32_t n_steps = 0;
    const auto step = [&](const forward_batch& batch) {
        forward_output a, b;
        ASSERT_TRUE(with->forward(batch, a).ok());
        ASSERT_TRUE(without->forward(batch, b).ok());
        for (size_t s = 0; s < batch.seqs.size(); ++s) {
            const int32_t n_rows = batch.seqs[s].all_logits ? static_cast<int32_t>(batch.seqs[s].tokens.size()) : 1;
            for (int32_t i = 0; i < n_rows; ++i) {
                EXPECT_LT(max_abs_diff(logits_row(a, s, i), logits_row(b, s, i)), 1e-5f)
                    << "step " << n_steps << " seq " << s << " row " << i;
            }
        }
        ++n_steps;
    };
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 10; ++i) prompt.push_back(1 + (i * 37) % 500);
    step({{sequence_step{1, prompt, 0, table_of(0)}}});
    int32_t pos1 = 10, pos2 = 0;
    for (int32_t i = 0; i < 6; ++i)
        step({{sequence_step{1, {100 + i}, pos1++, table_of(0)}}});  // eager, capture, replays
    std::vector<int32_t> long_prompt;
    for (int32_t i = 0; i < 200; ++i) long_prompt.push_back(1 + (i * 11) % 500);
    step({{sequence_step{2, long_prompt, 0, table_of(1)}}});  // grows the step's buffers
    pos2 = 200;
    for (int32_t i = 0; i < 5; ++i) {
        step({{sequence_step{1, {200 + i}, pos1++, table_of(0)}, sequence_step{2, {300 + i}, pos2++, table_of(1)}}});
        step({{sequence_step{1, {250 + i}, pos1++, table_of(0)}}});  // back to the one-sequence shape
    }
    // Verify-sized steps (a token and 3 drafts, every row's logits): the tiled attention inside a graph, whose tiles
    // are uploaded with each step's indices.
    for (int32_t i = 0; i < 4; ++i) {
        sequence_step verify{1, {400 + i, 410 + i, 420 + i, 430 + i}, pos1, table_of(0), true};
        verify.n_draft = 3;
        step({{verify}});
        pos1 += 4;
    }
}

INSTANTIATE_TEST_SUITE_P(kv, cuda_step_graphs, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "f16" : "f32"; });

}  // namespace
}  // namespace troupe
