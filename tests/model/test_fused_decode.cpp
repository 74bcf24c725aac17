// cpu_llama runs q/k/v and gate/up as one matrix each in steps of up to k_max_fused_tokens (16) (linear::concatenated),
// laying the outputs out for the rest of the layer; larger steps run the parts one by one. Both must compute what a
// sequence gets alone: a step of 16 sequences (fused, outputs copied apart) and of 17 (separate products) give
// each sequence the logits its own 1-token step gives (fused, outputs used in place).
#include <gtest/gtest.h>

#include <cmath>

#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "kernels/cpu/q8_panels.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

using testing::golden_setup;

void expect_batched_decode_matches_each_alone(const std::string& model_path, golden_setup setup, int32_t n_seqs,
                                              int32_t fused_groups) {
    engine_config c = testing::golden_config(model_path, setup);
    c.scheduler.max_running_seqs = n_seqs;
    auto m = load_model(c);
    ASSERT_TRUE(m.ok()) << m.message();
    ASSERT_NE(m->cpu, nullptr);
    EXPECT_EQ(m->cpu->n_fused_groups(), fused_groups);
    model_runner& runner = *m->runner;
    const int32_t bs = runner.kv().block_size;
    constexpr int32_t k_prompt = 5;
    ASSERT_GE(runner.kv().n_blocks, n_seqs * ((k_prompt + bs) / bs));

    std::vector<std::vector<int32_t>> tables(n_seqs);
    for (int32_t s = 0; s < n_seqs; ++s) {
        for (int32_t b = 0; b < (k_prompt + bs) / bs; ++b) tables[s].push_back(s * ((k_prompt + bs) / bs) + b);
    }
    forward_output out;
    for (int32_t s = 0; s < n_seqs; ++s) {  // a different prompt per sequence, each prefilled alone
        std::vector<int32_t> prompt;
        for (int32_t i = 0; i < k_prompt; ++i) prompt.push_back(1 + (s * 37 + i * 11) % (runner.n_vocab() - 1));
        ASSERT_TRUE(runner.forward(forward_batch{{sequence_step{s, prompt, 0, tables[s]}}}, out).ok());
    }
    const auto next_token = [&](int32_t s) { return 1 + (s * 13) % (runner.n_vocab() - 1); };
    forward_batch together;
    for (int32_t s = 0; s < n_seqs; ++s)
        together.seqs.push_back(sequence_step{s, {next_token(s)}, k_prompt, tables[s]});
    forward_output batched;
    ASSERT_TRUE(runner.forward(together, batched).ok());
    for (int32_t s = 0; s < n_seqs; ++s) {  // the same step alone rewrites the same cache slot with the same values
        ASSERT_TRUE(runner.forward(forward_batch{{sequence_step{s, {next_token(s)}, k_prompt, tables[s]}}}, out).ok());
        const auto alone = out.row(0), in_batch = batched.row(s);
        float worst = 0;
        for (size_t i = 0; i < alone.size(); ++i) worst = std::max(worst, std::fabs(alone[i] - in_batch[i]));
        // Tiles of several tokens may sum in another order than one token (GEMM kernels): float rounding only.
        EXPECT_LT(worst, 1e-3f) << "sequence " << s << " of " << n_seqs;
    }
}

TEST(fused_decode, sixteen_and_seventeen_sequences_in_a_step_get_the_logits_they_get_alone) {
    TROUPE_REQUIRE_SHARED(f32_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(q8_path, "models/stories260K-Q8_0.gguf");
    for (int32_t n_seqs : {16, 17}) {
        SCOPED_TRACE(std::to_string(n_seqs) + " sequences");
        // Copied F32 rows lie back to back: every layer's q/k/v and gate/up run fused (5 layers).
        expect_batched_decode_matches_each_alone(f32_path, golden_setup::builtin_quantized, n_seqs, 10);
        expect_batched_decode_matches_each_alone(f32_path, golden_setup::builtin_float, n_seqs, 10);
        // Q8_0 panels (AVX-512): q/k/v (64, 32, 32 rows) fuse; gate (172 rows) ends in a padded panel, so gate/up
        // stay apart. Without panels (an AVX2 machine) the copied rows lie back to back and both fuse.
        const bool panels = cpu::q8_panels_supported(ggml_type::q8_0, cpu::activation_recipe::quantized);
        expect_batched_decode_matches_each_alone(q8_path, golden_setup::builtin_quantized, n_seqs, panels ? 5 : 10);
    }
}

}  // namespace
}  // namespace troupe
