// Whole models on the GPU: greedy tokens equal the goldens of ../shared (the recipe each path implements),
// GPU logits agree with the CPU runner's, batching and block copies change nothing. Skips without a GPU.
//
// Recipes: float and F16/BF16 weights multiply activations of their own type (F16 weights: activations
// rounded to F16, as rand10M-greedy.json's reference); quantized weights dequantized to F32 on the host
// multiply F32 activations (rand10M-greedy-floatact.json). stories260K's goldens are the same for every
// format, so its quantized files run the default F16 dequantization.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ostream>

#include "core/backend/cuda_runner.h"
#include "core/backend/llama_view_of.h"
#include "core/gguf/gguf_file.h"
#include "core/model/cpu_llama.h"
#include "core/model/greedy.h"
#include "core/model/llama_weights.h"
#include "kernels/ref/attention.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using testing::logits_row;
using testing::max_abs_diff;

constexpr float kLogitTolerance = 0.02f;   // against the golden's first-step logits (as tests/golden)
constexpr float kCpuGpuTolerance = 1e-3f;  // F32 model: GPU vs CPU runner, largest |difference| of logits

cuda_runner_params small_pool(cuda_weight_type to = cuda_weight_type::f16, bool kv_f16 = false) {
    cuda_runner_params p;
    p.block_size = 16;
    p.n_blocks = 256;
    p.dequantize_to = to;
    p.kv_f16 = kv_f16;
    return p;
}

struct gpu_golden_case {
    const char* golden;
    const char* model;
    cuda_weight_type dequantize_to;
    bool kv_f16;
};

// Readable parameters in test names and ctest listings: "stories260K_Q8_0_gguf_kv_f16".
void PrintTo(const gpu_golden_case& c, std::ostream* os) {
    *os << c.model << (c.kv_f16 ? " kv F16" : "") << (c.dequantize_to == cuda_weight_type::f32 ? " dequant F32" : "");
}

std::string case_name(const ::testing::TestParamInfo<gpu_golden_case>& info) {
    std::string name = info.param.model;
    for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    if (info.param.kv_f16) name += "_kv_f16";
    return name;
}

class cuda_golden : public ::testing::TestWithParam<gpu_golden_case> {};

TEST_P(cuda_golden, greedy_tokens_on_the_gpu_equal_the_reference) {
    TROUPE_REQUIRE_GPU();
    const gpu_golden_case& c = GetParam();
    TROUPE_REQUIRE_SHARED(golden_path, std::string("golden/") + c.golden);
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/") + c.model);
    const auto runs = testing::load_golden_runs(golden_path);
    const auto run = std::find_if(runs.begin(), runs.end(), [&](const auto& r) { return r.model == c.model; });
    ASSERT_NE(run, runs.end()) << c.model << " has no run in " << c.golden;

    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    auto runner = cuda_runner::create(llama_view_of(weights.value()), small_pool(c.dequantize_to, c.kv_f16));
    ASSERT_TRUE(runner.ok()) << runner.message();
    auto res = greedy_generate(*runner.value(), run->prompt_ids, static_cast<int32_t>(run->generated_ids.size()));
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens, run->generated_ids) << runner.value()->description();
    if (run->first_step) {
        const auto& fs = *run->first_step;
        const auto& logits = res->first_logits;
        EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), fs.argmax);
        for (size_t i = 0; i < fs.logits_0_7.size(); ++i) {
            EXPECT_NEAR(logits[i], fs.logits_0_7[i], kLogitTolerance) << "logit " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    shared_models, cuda_golden,
    ::testing::Values(
        gpu_golden_case{"stories260K-greedy.json", "stories260K.gguf", cuda_weight_type::f16, false},
        gpu_golden_case{"stories260K-greedy.json", "stories260K.gguf", cuda_weight_type::f16, true},
        gpu_golden_case{"stories260K-greedy.json", "stories260K-F16.gguf", cuda_weight_type::f16, false},
        gpu_golden_case{"stories260K-greedy.json", "stories260K-Q8_0.gguf", cuda_weight_type::f16, false},
        gpu_golden_case{"stories260K-greedy.json", "stories260K-Q4_0.gguf", cuda_weight_type::f16, false},
        gpu_golden_case{"rand10M-greedy.json", "rand10M-F16.gguf", cuda_weight_type::f16, false},
        gpu_golden_case{"rand10M-greedy-floatact.json", "rand10M-Q8_0.gguf", cuda_weight_type::f32, false},
        gpu_golden_case{"rand10M-greedy-floatact.json", "rand10M-Q4_0.gguf", cuda_weight_type::f32, false},
        gpu_golden_case{"rand10M-greedy-floatact.json", "rand10M-Q4_K_M.gguf", cuda_weight_type::f32, false},
        gpu_golden_case{"rand10M-greedy-floatact.json", "rand10M-Q6_K.gguf", cuda_weight_type::f32, false}),
    case_name);

class ref_attention final : public attention_op {
public:
    std::string name() const override { return "ref"; }
    status forward(const attention_call& call, const parallel_for_fn&) override {
        ref::attention(call);
        return {};
    }
};

TEST(cuda_model, gpu_logits_agree_with_the_cpu_runner_on_an_f32_model) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    auto gpu = cuda_runner::create(llama_view_of(weights.value()), small_pool());
    ASSERT_TRUE(gpu.ok()) << gpu.message();
    cpu_llama_params cp;
    cp.attention = std::make_shared<ref_attention>();
    cp.max_seqs = 1;
    auto cpu = cpu_llama::create(std::move(weights.value()), cp);
    ASSERT_TRUE(cpu.ok()) << cpu.message();

    const std::vector<int32_t> prompt{1, 403, 407, 261, 378};
    auto on_gpu = greedy_generate(*gpu.value(), prompt, 24);
    auto on_cpu = greedy_generate(*cpu.value(), prompt, 24);
    ASSERT_TRUE(on_gpu.ok() && on_cpu.ok());
    EXPECT_EQ(on_gpu->tokens, on_cpu->tokens);
    float worst = 0.0f;
    for (size_t i = 0; i < on_cpu->first_logits.size(); ++i) {
        worst = std::max(worst, std::fabs(on_gpu->first_logits[i] - on_cpu->first_logits[i]));
    }
    EXPECT_LT(worst, kCpuGpuTolerance);
}

TEST(cuda_model, sequences_batched_together_get_the_logits_they_get_alone_and_copied_blocks_decode_alike) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    auto made = cuda_runner::create(llama_view_of(weights.value()), small_pool());
    ASSERT_TRUE(made.ok()) << made.message();
    cuda_runner& gpu = *made.value();
    ASSERT_EQ(gpu.kv().block_size, 16);

    const sequence_step a{1, {1, 403, 407, 261, 378}, 0, {3}, false};
    const sequence_step b{
        2, {1, 261, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315}, 0, {8, 9}, true};
    forward_output alone_a, alone_b, together;
    ASSERT_TRUE(gpu.forward({{a}}, alone_a).ok());
    ASSERT_TRUE(gpu.forward({{b}}, alone_b).ok());
    sequence_step a2 = a, b2 = b;
    a2.block_table = {20};
    b2.block_table = {21, 22};
    ASSERT_TRUE(gpu.forward({{a2, b2}}, together).ok());
    ASSERT_EQ(together.n_rows, (std::vector<int32_t>{1, 18}));
    EXPECT_LT(max_abs_diff(logits_row(together, 0), logits_row(alone_a, 0)), 1e-4f);
    for (int32_t i = 0; i < 18; ++i)
        EXPECT_LT(max_abs_diff(logits_row(together, 1, i), logits_row(alone_b, 0, i)), 1e-4f) << i;

    // Decode one token after a's prompt from its blocks, then from a copy of them made on the copy lane.
    const std::vector<int32_t> src{20}, dst{40};
    ASSERT_TRUE(gpu.copy_blocks(src, dst).ok());
    forward_output from_original, from_copy;
    ASSERT_TRUE(gpu.forward({{sequence_step{1, {432}, 5, {20}, false}}}, from_original).ok());
    ASSERT_TRUE(gpu.forward({{sequence_step{1, {432}, 5, {40}, false}}}, from_copy).ok());
    EXPECT_EQ(logits_row(from_original, 0), logits_row(from_copy, 0));

    forward_output bad;
    const status s = gpu.forward({{sequence_step{1, {432}, 5, {9999}, false}}}, bad);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message(), "sequence 1: block id 9999 outside the pool of 256");
}

}  // namespace
}  // namespace troupe
