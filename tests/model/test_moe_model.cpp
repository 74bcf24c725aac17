// MoE layers inside the graph (tiny-mixtral: 4 experts, top 2): a decode step's weight bytes count the router and the
// two selected experts of each layer only (bench's bandwidth bound), counted here from the file's tensor table; a step
// of several sequences, whose tokens route to different experts, gives each sequence the logits its own step gives;
// a prompt run as one step ends with the logits of the same prompt run token by token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

using testing::golden_setup;

constexpr const char* k_model = "models/arch/tiny-mixtral.gguf";

TEST(moe_model, a_decode_step_reads_the_router_and_the_selected_experts_only) {
    TROUPE_REQUIRE_SHARED(path, k_model);
    auto m = load_model(testing::golden_config(path, golden_setup::builtin_quantized));
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_NE(m->cpu, nullptr);
    auto f = gguf::gguf_file::open(path);
    ASSERT_TRUE(f.ok()) << f.message();
    const int64_t n_experts = static_cast<int64_t>((*f)->uint_or("llama.expert_count", 0));
    const int64_t n_used = static_cast<int64_t>((*f)->uint_or("llama.expert_used_count", 0));
    ASSERT_EQ(n_experts, 4);
    ASSERT_EQ(n_used, 2);
    size_t expected = 0;
    for (const gguf::tensor_info& t : (*f)->tensors()) {
        if (t.name == "token_embd.weight") {
            expected += t.n_bytes / t.dims[1];  // one row
        } else if (t.dims.size() == 3) {
            expected += t.n_bytes / n_experts * n_used;  // stacked experts: the selected ones
        } else {
            expected += t.n_bytes;  // attention, router, norms, output
        }
    }
    EXPECT_EQ(m->cpu->weight_bytes_per_token(), expected);
    const int64_t dim = 128, ffn = 256;
    EXPECT_LT(m->cpu->matmul_macs_per_token(), 2 * (n_experts * 3 * dim * ffn));  // not every expert
}

// Last-token logits of each sequence: all of them in one step, and each in a step of its own.
TEST(moe_model, sequences_decoded_together_get_the_logits_each_gets_alone) {
    TROUPE_REQUIRE_SHARED(path, k_model);
    for (const golden_setup setup : {golden_setup::builtin_quantized, golden_setup::builtin_float}) {
        engine_config c = testing::golden_config(path, setup);
        constexpr int32_t n_seqs = 6, n_prompt = 5;
        c.scheduler.max_running_seqs = n_seqs;
        auto m = load_model(c);
        ASSERT_TRUE(m.ok()) << m.message();
        model_runner& runner = *m->runner;
        const int32_t bs = runner.kv().block_size;
        std::vector<std::vector<int32_t>> tables(n_seqs);
        forward_output out;
        for (int32_t s = 0; s < n_seqs; ++s) {
            for (int32_t b = 0; b * bs < n_prompt + 1; ++b) tables[s].push_back(s * 4 + b);
            std::vector<int32_t> prompt;
            for (int32_t i = 0; i < n_prompt; ++i) prompt.push_back(1 + (s * 37 + i * 11) % (runner.n_vocab() - 1));
            ASSERT_TRUE(runner.forward(forward_batch{{sequence_step{s, prompt, 0, tables[s]}}}, out).ok());
        }
        const auto next = [&](int32_t s) { return 1 + (s * 53) % (runner.n_vocab() - 1); };
        forward_batch together;
        for (int32_t s = 0; s < n_seqs; ++s) together.seqs.push_back(sequence_step{s, {next(s)}, n_prompt, tables[s]});
        forward_output batched;
        ASSERT_TRUE(runner.forward(together, batched).ok());
        for (int32_t s = 0; s < n_seqs; ++s) {
            ASSERT_TRUE(runner.forward(forward_batch{{sequence_step{s, {next(s)}, n_prompt, tables[s]}}}, out).ok());
            for (int32_t v = 0; v < runner.n_vocab(); ++v) {
                ASSERT_NEAR(batched.logits[static_cast<size_t>(s) * runner.n_vocab() + v], out.logits[v], 2e-3f)
                    << testing::setup_name(setup) << " sequence " << s << " logit " << v;
            }
        }
    }
}

TEST(moe_model, a_prompt_in_one_step_ends_with_the_logits_of_the_prompt_token_by_token) {
    TROUPE_REQUIRE_SHARED(path, k_model);
    auto m = load_model(testing::golden_config(path, golden_setup::builtin_float));
    ASSERT_TRUE(m.ok()) << m.message();
    model_runner& runner = *m->runner;
    const int32_t bs = runner.kv().block_size;
    constexpr int32_t n_prompt = 40;  // experts get more than moe_ffn::k_max_fused_tokens rows
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < n_prompt; ++i) prompt.push_back(1 + (i * 29) % (runner.n_vocab() - 1));
    std::vector<int32_t> table_a, table_b;
    for (int32_t b = 0; b * bs < n_prompt; ++b) {
        table_a.push_back(b);
        table_b.push_back(100 + b);
    }
    forward_output whole, step;
    ASSERT_TRUE(runner.forward(forward_batch{{sequence_step{0, prompt, 0, table_a}}}, whole).ok());
    for (int32_t i = 0; i < n_prompt; ++i)
        ASSERT_TRUE(runner.forward(forward_batch{{sequence_step{1, {prompt[i]}, i, table_b}}}, step).ok());
    ASSERT_EQ(whole.logits.size(), step.logits.size());
    for (size_t v = 0; v < whole.logits.size(); ++v) ASSERT_NEAR(whole.logits[v], step.logits[v], 2e-3f) << v;
}

}  // namespace
}  // namespace troupe
