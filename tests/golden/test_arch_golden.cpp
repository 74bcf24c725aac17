// Golden tests of the architecture families: ../shared/models/arch/tiny-*.gguf (F16 matrices, random weights) run
// greedily through `troupe run`'s loader give the 48 ids of ../shared/golden/arch-greedy.json, whose description
// documents each architecture as its independent reference computes it, and first-step logits within tolerance,
// in both activation recipes of the builtin F16 path:
//
//   builtin_quantized (kernels.activations: quantized): activations rounded to F16 inside the products, as the
//     reference computes them; logits within 0.02.
//   builtin_float (kernels.activations: float): float32 activations against the same weights; the golden's
//     description gives the same 48 ids and logits moving by up to about 0.007 (0.04 for tiny-gemma2, whose 26
//     layers accumulate the difference); troupe evaluates GELU on F16-rounded gates in both recipes (as llama.cpp's
//     CPU GELU does), which keeps tiny-gemma2 within 0.02 too.
//
// Also: a KV plugin, or an attention op without the features, is refused for gemma2 at load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/gguf/gguf_file.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "core/model/greedy.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using testing::golden_setup;

struct arch_case {
    const char* model;  // under models/arch/
    golden_setup setup;
    float logit_tolerance;
};

std::string case_name(const ::testing::TestParamInfo<arch_case>& info) {
    std::string s = std::string(testing::setup_name(info.param.setup)) + "_" + info.param.model;
    for (char& c : s) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return s;
}

class arch_golden : public ::testing::TestWithParam<arch_case> {};

TEST_P(arch_golden, greedy_tokens_equal_the_reference_and_first_logits_agree) {
    const arch_case& ac = GetParam();
    TROUPE_REQUIRE_SHARED(golden_path, "golden/arch-greedy.json");
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/arch/") + ac.model);
    std::optional<testing::golden_run> run;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == ac.model) run = r;
    }
    ASSERT_TRUE(run.has_value()) << ac.model << " has no run in " << golden_path;
    ASSERT_TRUE(run->first_step.has_value());

    auto model = testing::load_golden_model(model_path, ac.setup);
    ASSERT_TRUE(model.ok()) << model.message();
    EXPECT_EQ(model->tok->encode(run->prompt, true), run->prompt_ids);

    auto res = greedy_generate(*model->runner, run->prompt_ids, static_cast<int32_t>(run->generated_ids.size()));
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens, run->generated_ids);

    const testing::golden_first_step& fs = *run->first_step;
    const auto max_it = std::max_element(res->first_logits.begin(), res->first_logits.end());
    EXPECT_EQ(max_it - res->first_logits.begin(), fs.argmax);
    float worst = std::fabs(*max_it - fs.max_logit);
    EXPECT_NEAR(*max_it, fs.max_logit, ac.logit_tolerance);
    for (size_t i = 0; i < fs.logits_0_7.size(); ++i) {
        EXPECT_NEAR(res->first_logits[i], fs.logits_0_7[i], ac.logit_tolerance) << "logit " << i;
        worst = std::max(worst, std::fabs(res->first_logits[i] - fs.logits_0_7[i]));
    }
    std::printf("  %s %s: first-step logits worst |troupe - golden| = %.5f (tolerance %.3f)\n", ac.model,
                testing::setup_name(ac.setup), worst, ac.logit_tolerance);
}

INSTANTIATE_TEST_SUITE_P(arch_models, arch_golden,
                         ::testing::Values(arch_case{"tiny-qwen2.gguf", golden_setup::builtin_quantized, 0.02f},
                                           arch_case{"tiny-qwen2.gguf", golden_setup::builtin_float, 0.02f},
                                           arch_case{"tiny-phi3.gguf", golden_setup::builtin_quantized, 0.02f},
                                           arch_case{"tiny-phi3.gguf", golden_setup::builtin_float, 0.02f},
                                           arch_case{"tiny-gemma2.gguf", golden_setup::builtin_quantized, 0.02f},
                                           arch_case{"tiny-gemma2.gguf", golden_setup::builtin_float, 0.02f},
                                           arch_case{"tiny-mixtral.gguf", golden_setup::builtin_quantized, 0.02f},
                                           arch_case{"tiny-mixtral.gguf", golden_setup::builtin_float, 0.02f},
                                           arch_case{"tiny-deepseek2.gguf", golden_setup::builtin_quantized, 0.02f},
                                           arch_case{"tiny-deepseek2.gguf", golden_setup::builtin_float, 0.02f},
                                           arch_case{"tiny-deepseek2-lite.gguf", golden_setup::builtin_quantized,
                                                     0.02f},
                                           arch_case{"tiny-deepseek2-lite.gguf", golden_setup::builtin_float, 0.02f}),
                         case_name);

// kv.dtype: f16 rounds every cached K/V value to a half; the golden's description says every run keeps its 48 ids.
TEST(arch_golden_kv_f16, the_dense_families_with_an_f16_kv_cache_give_the_golden_tokens) {
    TROUPE_REQUIRE_SHARED(golden_path, "golden/arch-greedy.json");
    const auto runs = testing::load_golden_runs(golden_path);
    for (const char* model : {"tiny-qwen2.gguf", "tiny-phi3.gguf", "tiny-gemma2.gguf"}) {
        TROUPE_REQUIRE_SHARED(model_path, std::string("models/arch/") + model);
        const auto run = std::find_if(runs.begin(), runs.end(), [&](const auto& r) { return r.model == model; });
        ASSERT_NE(run, runs.end()) << model;
        engine_config c = testing::golden_config(model_path, golden_setup::builtin_quantized);
        c.kv.dtype = kv_cache_type::f16;
        auto m = load_model(c);
        ASSERT_TRUE(m.ok()) << m.message();
        auto res = greedy_generate(*m->runner, run->prompt_ids, static_cast<int32_t>(run->generated_ids.size()));
        ASSERT_TRUE(res.ok()) << res.message();
        EXPECT_EQ(res->tokens, run->generated_ids) << model;
    }
}

// Gemma 2's soft-capping and windows are the attention op's: a KV plugin (which owns its attention and has neither) is
// refused at load naming what the model needs, and so is an attention plugin without the features.
TEST(arch_refusals, a_kv_plugin_or_an_attention_plugin_without_softcap_and_window_is_refused_for_gemma2) {
    TROUPE_REQUIRE_SHARED(model_path, "models/arch/tiny-gemma2.gguf");
    engine_config c = testing::golden_config(model_path, golden_setup::builtin_float);
    c.kv.plugin = plugin_config("int8");
    auto m = load_model(c);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.message().find("tiny-gemma2.gguf: gemma2 needs attention soft-capping and sliding-window attention, "
                               "which the KV plugin kv/int8 does not do"),
              std::string::npos)
        << m.message();

    // An attention op that declares no features (a plugin built before version 4 reads as one).
    class plain_attention final : public attention_op {
    public:
        std::string name() const override { return "attention/plain"; }
        status forward(const attention_call&, const parallel_for_fn&) override {
            return make_error("attention/plain: not for running");
        }
    };
    auto file = gguf::gguf_file::open(model_path);
    ASSERT_TRUE(file.ok()) << file.message();
    auto w = bind_llama_weights(*file);
    ASSERT_TRUE(w.ok()) << w.message();
    cpu_llama_params params;
    params.attention = std::make_shared<plain_attention>();
    params.n_threads = 1;
    auto runner = cpu_llama::create(std::move(*w), params);
    ASSERT_FALSE(runner.ok());
    EXPECT_NE(runner.message().find("gemma2 needs attention soft-capping and sliding-window attention, which attention "
                                    "plugin attention/plain does not declare (troupe_attention_ops.features)"),
              std::string::npos)
        << runner.message();

    TROUPE_REQUIRE_SHARED(qwen2_path, "models/arch/tiny-qwen2.gguf");
    engine_config q = testing::golden_config(qwen2_path, golden_setup::builtin_float);
    q.kv.plugin = plugin_config("int8");
    auto qwen2 = load_model(q);  // no soft-capping, no window: a KV plugin runs it
    EXPECT_TRUE(qwen2.ok()) << qwen2.message();
}

}  // namespace
}  // namespace troupe
