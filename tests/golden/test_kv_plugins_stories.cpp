// The quantized KV caches (kv.plugin: int8, fp8, kivi) on a real model: stories260K (F32, head_dim 8, 4 kv heads)
// against the same model with the f32 cache. Perplexity on the shared stories text (llama-perplexity's estimate,
// the first 24 windows of 256 tokens) stays within each format's quality target, greedy text with the int8 cache
// is the f32 cache's, and sequences batched together read only their own window slots.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/eval/perplexity.h"
#include "core/loader/model_loader.h"
#include "core/model/greedy.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using testing::golden_setup;

engine_config kv_config(const std::string& model, const char* plugin, const char* params) {
    engine_config c = testing::golden_config(model, golden_setup::builtin_float);
    if (plugin != nullptr) {
        c.kv.plugin = plugin_config(plugin);
        c.kv.plugin.params = YAML::Load(params);
    }
    return c;
}

// Perplexity of the first n_windows windows of n_ctx tokens, as `troupe perplexity` computes it.
double perplexity(loaded_model& m, const std::string& text, int32_t n_ctx, int32_t n_windows) {
    const std::vector<int32_t> tokens = m.tok->encode(text, true, false);
    auto plan = eval::plan_windows(static_cast<int64_t>(tokens.size()), n_ctx);
    EXPECT_TRUE(plan.ok()) << plan.message();
    plan->n_windows = std::min(plan->n_windows, n_windows);
    const int32_t bos = m.tok->vocab().add_bos ? m.tok->bos_id() : -1;
    const int32_t bs = m.runner->kv().block_size;
    std::vector<int32_t> table((n_ctx + bs - 1) / bs);
    for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
    eval::nll_accumulator acc;
    forward_output out;
    for (int32_t w = 0; w < plan->n_windows; ++w) {
        const std::vector<int32_t> window = eval::window_tokens(tokens, *plan, w, bos);
        for (const eval::window_chunk& c : eval::window_chunks(*plan, 256)) {
            forward_batch batch;
            batch.seqs.push_back(sequence_step{w,
                                               std::vector<int32_t>(window.begin() + c.begin, window.begin() + c.end),
                                               c.begin, table, c.with_logits});
            const status st = m.runner->forward(batch, out);
            EXPECT_TRUE(st.ok()) << st.message();
            if (!st.ok()) return NAN;
            if (!c.with_logits) continue;
            for (int32_t pos = c.begin; pos < c.end && pos + 1 < n_ctx; ++pos) {
                acc.add(eval::token_nll(out.row(0, pos - c.begin), window[pos + 1]));
            }
        }
        m.runner->forget(w);
    }
    return acc.ppl();
}

struct quality_case {
    const char* name;
    const char* plugin;
    const char* params;
    // The target on PPL / PPL(f32 cache) - 1 (issue 8: int8 0.5%, fp8 1%, kivi 5%). Measured on these 24 windows:
    // see the printed line; on all 74 windows (`troupe perplexity ... --ctx 256`): int8 +0.12%, fp8 with
    // residual_blocks 2 (its default) +0.67%, fp8 without +1.36%, kivi (residual_blocks 8) +3.8%.
    double max_increase;
};

class kv_quality : public ::testing::TestWithParam<quality_case> {};

TEST_P(kv_quality, perplexity_on_stories_stays_within_the_formats_target_of_the_f32_caches) {
    const quality_case& q = GetParam();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(text_path, "text/stories.txt");
    std::ifstream in(text_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    auto f32 = load_model(kv_config(model_path, nullptr, ""));
    ASSERT_TRUE(f32.ok()) << f32.message();
    auto quant = load_model(kv_config(model_path, q.plugin, q.params));
    ASSERT_TRUE(quant.ok()) << quant.message();
    const double base = perplexity(*f32, text.str(), 256, 24);
    const double got = perplexity(*quant, text.str(), 256, 24);
    const double increase = got / base - 1.0;
    std::printf("  %s: PPL %.4f vs %.4f with the f32 cache (%+.2f%%, target %+.1f%%)\n", q.name, got, base,
                100.0 * increase, 100.0 * q.max_increase);
    EXPECT_LE(increase, q.max_increase);
    EXPECT_NE(got, base) << "a quantized cache that changes nothing cannot be in use";
}

INSTANTIATE_TEST_SUITE_P(stories260K, kv_quality,
                         ::testing::Values(quality_case{"int8", "int8", "{}", 0.005},
                                           quality_case{"fp8", "fp8", "{}", 0.01},
                                           quality_case{"fp8_no_residual", "fp8", "{residual_blocks: 0}", 0.02},
                                           quality_case{"kivi", "kivi", "{}", 0.05}),
                         [](const ::testing::TestParamInfo<quality_case>& info) {
                             return std::string(info.param.name);
                         });

std::vector<int32_t> golden_prompt(const std::string& golden_path) {
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == "stories260K.gguf") return r.prompt_ids;
    }
    return {};
}

TEST(kv_plugins_stories, greedy_tokens_with_the_int8_cache_equal_the_f32_caches_for_the_golden_prompt) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    const std::vector<int32_t> prompt = golden_prompt(golden_path);
    ASSERT_FALSE(prompt.empty());
    const int32_t n_new = 200;  // past several blocks of 16, so most of the context is read from int8 codes
    auto f32 = load_model(kv_config(model_path, nullptr, ""));
    ASSERT_TRUE(f32.ok()) << f32.message();
    auto int8 = load_model(kv_config(model_path, "int8", "{}"));
    ASSERT_TRUE(int8.ok()) << int8.message();
    auto want = greedy_generate(*f32->runner, prompt, n_new);
    ASSERT_TRUE(want.ok()) << want.message();
    auto got = greedy_generate(*int8->runner, prompt, n_new);
    ASSERT_TRUE(got.ok()) << got.message();
    EXPECT_EQ(got->tokens, want->tokens);
}

TEST(kv_plugins_stories, loading_refuses_a_budget_below_one_context_an_unknown_plugin_bad_params_and_cuda) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    struct refusal {
        const char* name;
        const char* plugin;
        const char* params;
        uint64_t memory;
        device_kind device;
        const char* expected;
    };
    for (const refusal& r : {
             refusal{"budget", "int8", "{}", 100 << 10, device_kind::cpu,
                     "kv.plugin int8: kv.memory 100.0 KiB holds 8 blocks of 16 tokens (kv/int8, 88.0 B/token/layer x 5 "
                     "layers = 7040 bytes a block, after 42.5 KiB of windows for 4 sequences), less than one full "
                     "context of 2048 tokens (128 blocks): raise kv.memory to at least 922.5 KiB"},
             refusal{"unknown", "int4", "{}", 1 << 30, device_kind::cpu, "plugin kv/int4: no such file"},
             refusal{"params", "kivi", "{value_group: 3}", 1 << 30, device_kind::cpu,
                     "plugin kv/kivi: layout failed: head_dim 8 must be a multiple of 4 and of params.value_group 3"},
             refusal{"cuda", "fp8", "{}", 1 << 30, device_kind::cuda,
                     "kv.plugin fp8: the CUDA backend does not take KV plugins yet"},
         }) {
        SCOPED_TRACE(r.name);
        engine_config c = kv_config(model_path, r.plugin, r.params);
        c.kv.memory = memory_budget{r.memory, 0.0};
        c.device = r.device;
        auto m = load_model(c);
        ASSERT_FALSE(m.ok());
        EXPECT_NE(m.message().find(r.expected), std::string::npos) << m.message();
    }
}

// Three sequences of different lengths decoded together (their blocks fill at different steps, each with its own
// window slot) give the tokens and logits each gives alone.
TEST(kv_plugins_stories, sequences_decoded_together_read_only_their_own_windows) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    const std::vector<int32_t> base = golden_prompt(golden_path);
    ASSERT_GE(base.size(), 4u);
    for (const char* plugin : {"kivi", "int8", "fp8"}) {
        SCOPED_TRACE(plugin);
        engine_config c = kv_config(model_path, plugin, "{residual_blocks: 1}");
        if (std::string(plugin) == "int8") c.kv.plugin.params = YAML::Load("{}");
        auto m = load_model(c);
        ASSERT_TRUE(m.ok()) << m.message();
        const std::vector<std::vector<int32_t>> prompts = {base, std::vector<int32_t>(base.begin(), base.begin() + 2),
                                                           std::vector<int32_t>(base.begin(), base.end() - 1)};
        const int32_t n_new = 40;
        std::vector<std::vector<int32_t>> solo;
        for (const auto& p : prompts) {
            auto r = greedy_generate(*m->runner, p, n_new);
            ASSERT_TRUE(r.ok()) << r.message();
            m->runner->forget(0);
            solo.push_back(r->tokens);
        }
        // Together: sequence i uses blocks [8 i, 8 i + 8).
        const int32_t bs = m->runner->kv().block_size;
        std::vector<sequence_step> seqs;
        for (size_t i = 0; i < prompts.size(); ++i) {
            std::vector<int32_t> table;
            for (int32_t b = 0; b < (static_cast<int32_t>(prompts[i].size()) + n_new + bs - 1) / bs; ++b) {
                table.push_back(static_cast<int32_t>(8 * i) + b);
            }
            seqs.push_back(sequence_step{static_cast<int64_t>(100 + i), prompts[i], 0, table, false});
        }
        std::vector<std::vector<int32_t>> together(prompts.size());
        forward_output out;
        for (int32_t step = 0; step < n_new; ++step) {
            forward_batch batch{seqs};
            ASSERT_TRUE(m->runner->forward(batch, out).ok());
            for (size_t i = 0; i < seqs.size(); ++i) {
                const auto row = out.row(i);
                const int32_t next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
                together[i].push_back(next);
                seqs[i].pos0 += static_cast<int32_t>(seqs[i].tokens.size());
                seqs[i].tokens = {next};
            }
        }
        for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "sequence " << i;
    }
}

}  // namespace
}  // namespace troupe
