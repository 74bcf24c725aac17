// Golden tests: whole-model greedy outputs on the real models of ../shared equal those of an
// independent reference (../shared/golden). Which golden each format must match:
//   stories260K (F32, F16, Q8_0, Q4_0): stories260K-greedy.json
//   rand10M: rand10M-greedy.json, the recipe troupe implements (8-bit activation blocks for quantized
//   weights, F16-rounded activations for F16 weights: kernels/ref/ops.h). The float-activation golden
//   is checked only where the two recipes agree (F16).
// First-step logits agree within kLogitTolerance (absolute; logits span about ±40 on rand10M).
#include <gtest/gtest.h>

#include "core/model/greedy.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

constexpr float kLogitTolerance = 0.02f;

struct golden_case {
    const char* golden;
    const char* model;
};

std::string case_name(const ::testing::TestParamInfo<golden_case>& info) {
    std::string s = std::string(info.param.golden) + "_" + info.param.model;
    for (char& c : s) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return s;
}

class golden_greedy : public ::testing::TestWithParam<golden_case> {};

TEST_P(golden_greedy, greedy_tokens_equal_the_reference_and_first_logits_agree) {
    const golden_case& gc = GetParam();
    TROUPE_REQUIRE_SHARED(golden_path, std::string("golden/") + gc.golden);
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/") + gc.model);
    testing::golden_run run;
    bool found = false;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == gc.model) {
            run = r;
            found = true;
        }
    }
    ASSERT_TRUE(found) << gc.model << " has no run in " << gc.golden;

    auto model = testing::load_golden_model(model_path);
    ASSERT_TRUE(model.ok()) << model.message();

    // The tokenizer gives the golden prompt ids.
    EXPECT_EQ(model->tok->encode(run.prompt, true), run.prompt_ids);

    auto res = greedy_generate(*model->runner, run.prompt_ids, static_cast<int32_t>(run.generated_ids.size()));
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens, run.generated_ids);

    if (run.first_step) {
        const auto& fs = *run.first_step;
        const auto& logits = res->first_logits;
        const auto max_it = std::max_element(logits.begin(), logits.end());
        EXPECT_EQ(max_it - logits.begin(), fs.argmax);
        EXPECT_NEAR(*max_it, fs.max_logit, kLogitTolerance);
        for (size_t i = 0; i < fs.logits_0_7.size(); ++i) {
            EXPECT_NEAR(logits[i], fs.logits_0_7[i], kLogitTolerance) << "logit " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(shared_models, golden_greedy,
                         ::testing::Values(golden_case{"stories260K-greedy.json", "stories260K.gguf"},
                                           golden_case{"stories260K-greedy.json", "stories260K-F16.gguf"},
                                           golden_case{"stories260K-greedy.json", "stories260K-Q8_0.gguf"},
                                           golden_case{"stories260K-greedy.json", "stories260K-Q4_0.gguf"},
                                           golden_case{"rand10M-greedy.json", "rand10M-F16.gguf"},
                                           golden_case{"rand10M-greedy.json", "rand10M-Q8_0.gguf"},
                                           golden_case{"rand10M-greedy.json", "rand10M-Q4_0.gguf"},
                                           golden_case{"rand10M-greedy.json", "rand10M-Q4_K_M.gguf"},
                                           golden_case{"rand10M-greedy.json", "rand10M-Q6_K.gguf"},
                                           golden_case{"rand10M-greedy-floatact.json", "rand10M-F16.gguf"}),
                         case_name);

}  // namespace
}  // namespace troupe
