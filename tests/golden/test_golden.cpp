// Golden tests: whole-model greedy outputs on the real models of ../shared equal those of an
// independent reference (../shared/golden), in each activation recipe troupe implements:
//
//   setup (golden_model.h)          | golden                          | models
//   --------------------------------+---------------------------------+-------------------------------------------
//   builtin_quantized (quant: none, | rand10M-greedy.json (8-bit      | rand10M F16, Q8_0, Q4_0, Q4_K_M, Q6_K;
//     kernels.activations:          |   activation blocks, F16-       |   stories260K F32, F16, Q8_0, Q4_0
//     quantized)                    |   rounded activations)          |
//   int8_recipe (quant/q8 W8A8)     | rand10M-greedy.json             | rand10M Q8_0
//   float_recipe (quant/q8 W8A16 +  | rand10M-greedy-floatact.json    | rand10M F16, Q8_0, Q4_0, Q4_K_M, Q6_K;
//     kernels.activations: float)   |   (float32 activations)         |   stories260K F32, F16, Q8_0, Q4_0
//   builtin_float (quant: none,     | rand10M-greedy-floatact.json    | rand10M Q8_0 (the builtin float kernels
//     kernels.activations: float)   |                                 |   instead of the plugin)
//   default_config (builtin         | rand10M-greedy.json,            | rand10M F16, Q8_0, Q4_0, Q4_K_M, Q6_K;
//     quantized, w4a16 for W4)      |   stories260K-greedy.json       |   stories260K F32, F16, Q8_0, Q4_0
//
// Each golden is matched by the path that computes its recipe: an integer dot-product path (quantized
// activations) the 8-bit one, a dequantize-then-multiply path (float activations) the float one. On the random
// rand10M model the two recipes differ by 2-4% in logits and part ways after 0-11 tokens, so a run in one
// recipe is not compared with the other's golden (F16 aside, where the recipes agree on rand10M's tokens).
// Tokens are equal; first-step logits agree within k_logit_tolerance (absolute; logits span about ±40 on rand10M).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/loader/model_loader.h"
#include "core/model/greedy.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

using testing::golden_setup;

constexpr float k_logit_tolerance = 0.02f;

struct golden_case {
    const char* golden;
    const char* model;
    golden_setup setup;
};

std::string case_name(const ::testing::TestParamInfo<golden_case>& info) {
    std::string s =
        std::string(testing::setup_name(info.param.setup)) + "_" + info.param.golden + "_" + info.param.model;
    for (char& c : s) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    return s;
}

// The run of `model` in the golden file at golden_path (fails the test when there is none).
testing::golden_run find_run(const std::string& golden_path, const std::string& model) {
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == model) return r;
    }
    ADD_FAILURE() << model << " has no run in " << golden_path;
    return {};
}

// Checks the first step's logits against the golden's (argmax, max logit, logits 0..7) within tolerance;
// returns the worst difference.
float expect_first_logits(const std::vector<float>& logits, const testing::golden_first_step& fs, float tolerance) {
    const auto max_it = std::max_element(logits.begin(), logits.end());
    EXPECT_EQ(max_it - logits.begin(), fs.argmax);
    EXPECT_NEAR(*max_it, fs.max_logit, tolerance);
    float worst = std::fabs(*max_it - fs.max_logit);
    for (size_t i = 0; i < fs.logits_0_7.size(); ++i) {
        EXPECT_NEAR(logits[i], fs.logits_0_7[i], tolerance) << "logit " << i;
        worst = std::max(worst, std::fabs(logits[i] - fs.logits_0_7[i]));
    }
    return worst;
}

class golden_greedy : public ::testing::TestWithParam<golden_case> {};

TEST_P(golden_greedy, greedy_tokens_equal_the_reference_and_first_logits_agree) {
    const golden_case& gc = GetParam();
    TROUPE_REQUIRE_SHARED(golden_path, std::string("golden/") + gc.golden);
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/") + gc.model);
    const testing::golden_run run = find_run(golden_path, gc.model);
    ASSERT_FALSE(run.prompt_ids.empty());

    auto model = testing::load_golden_model(model_path, gc.setup);
    ASSERT_TRUE(model.ok()) << model.message();

    // The tokenizer gives the golden prompt ids.
    EXPECT_EQ(model->tok->encode(run.prompt, true), run.prompt_ids);

    auto res = greedy_generate(*model->runner, run.prompt_ids, static_cast<int32_t>(run.generated_ids.size()));
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens, run.generated_ids);

    if (run.first_step) {
        const float worst = expect_first_logits(res->first_logits, *run.first_step, k_logit_tolerance);
        std::printf("  first-step logits: worst |troupe - golden| = %.5f (tolerance %.2f)\n", worst, k_logit_tolerance);
    }
}

// kv.dtype: f16 rounds every cached K/V value to a half (the goldens' reference keeps float32): the real
// stories260K models still produce their golden tokens, for every stored type, in both recipes.
TEST(golden_kv_f16, stories260k_with_an_f16_kv_cache_gives_the_golden_tokens) {
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    for (const char* model :
         {"stories260K.gguf", "stories260K-F16.gguf", "stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf"}) {
        TROUPE_REQUIRE_SHARED(model_path, std::string("models/") + model);
        const testing::golden_run run = find_run(golden_path, model);
        for (const golden_setup setup : {golden_setup::default_config, golden_setup::builtin_quantized}) {
            engine_config c = testing::golden_config(model_path, setup);
            c.kv.dtype = kv_cache_type::f16;
            auto m = load_model(c);
            ASSERT_TRUE(m.ok()) << m.message();
            auto res = greedy_generate(*m->runner, run.prompt_ids, static_cast<int32_t>(run.generated_ids.size()));
            ASSERT_TRUE(res.ok()) << res.message();
            EXPECT_EQ(res->tokens, run.generated_ids) << model << " " << testing::setup_name(setup);
        }
    }
}

// Greedy runs of a model in the builtin quantized recipe with kernels.weights: copy, then mmap, into results
// (prompt ids taken modulo the vocabulary: stories260K's is 512).
void greedy_copy_and_mmap(const std::string& model_path, int32_t n_new, std::vector<greedy_result>& results) {
    const std::vector<int32_t> prompt{1, 450, 4996, 17354, 1701, 432};
    for (const weight_memory where : {weight_memory::copy, weight_memory::mmap}) {
        engine_config c = testing::golden_config(model_path, golden_setup::builtin_quantized);
        c.kernels.weights = where;
        auto m = load_model(c);
        ASSERT_TRUE(m.ok()) << m.message();
        std::vector<int32_t> ids = prompt;
        for (int32_t& id : ids) id %= m->runner->n_vocab();
        auto res = greedy_generate(*m->runner, ids, n_new);
        ASSERT_TRUE(res.ok()) << res.message();
        results.push_back(*res);
    }
}

// kernels.weights: copy (the default, which every golden run above uses) reads the very bytes the file holds:
// the same model read in place from the mapped file gives bit-identical logits and tokens.
TEST(golden_weights, copied_weights_compute_exactly_what_the_mapped_file_computes) {
    TROUPE_REQUIRE_SHARED(model_path, "models/rand10M-Q4_K_M.gguf");
    std::vector<greedy_result> results;
    greedy_copy_and_mmap(model_path, 8, results);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].tokens, results[1].tokens);
    EXPECT_EQ(results[0].first_logits, results[1].first_logits);
}

// Q8_0 / Q4_0 weights placed by kernels.weights: copy are repacked into panels (kernels/cpu/q8_panels.h) where
// the CPU has the kernels; read in place they take the row kernels. Both are the same integer recipe (only the
// float sums' order differs): the same tokens, logits within float rounding.
TEST(golden_weights, q8_panels_and_the_mapped_rows_give_the_same_tokens) {
    for (const char* model : {"rand10M-Q8_0.gguf", "stories260K-Q4_0.gguf"}) {
        TROUPE_REQUIRE_SHARED(model_path, std::string("models/") + model);
        std::vector<greedy_result> results;
        greedy_copy_and_mmap(model_path, 16, results);
        ASSERT_EQ(results.size(), 2u) << model;
        EXPECT_EQ(results[0].tokens, results[1].tokens) << model;
        ASSERT_EQ(results[0].first_logits.size(), results[1].first_logits.size());
        for (size_t i = 0; i < results[0].first_logits.size(); ++i) {
            ASSERT_NEAR(results[0].first_logits[i], results[1].first_logits[i], 1e-3f) << model << " logit " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    shared_models, golden_greedy,
    ::testing::Values(
        // The 8-bit-activation recipe (llama.cpp's CPU path) on the builtin kernels.
        golden_case{"rand10M-greedy.json", "rand10M-F16.gguf", golden_setup::builtin_quantized},
        golden_case{"rand10M-greedy.json", "rand10M-Q8_0.gguf", golden_setup::builtin_quantized},
        golden_case{"rand10M-greedy.json", "rand10M-Q4_0.gguf", golden_setup::builtin_quantized},
        golden_case{"rand10M-greedy.json", "rand10M-Q4_K_M.gguf", golden_setup::builtin_quantized},
        golden_case{"rand10M-greedy.json", "rand10M-Q6_K.gguf", golden_setup::builtin_quantized},
        golden_case{"stories260K-greedy.json", "stories260K.gguf", golden_setup::builtin_quantized},
        golden_case{"stories260K-greedy.json", "stories260K-F16.gguf", golden_setup::builtin_quantized},
        golden_case{"stories260K-greedy.json", "stories260K-Q8_0.gguf", golden_setup::builtin_quantized},
        golden_case{"stories260K-greedy.json", "stories260K-Q4_0.gguf", golden_setup::builtin_quantized},
        // The same recipe with quant/q8 in int8 mode (W8A8) taking the Q8_0 tensors.
        golden_case{"rand10M-greedy.json", "rand10M-Q8_0.gguf", golden_setup::int8_recipe},
        // The float-activation recipe: quant/q8 W8A16 for Q8_0, kernels.activations: float for the rest.
        golden_case{"rand10M-greedy-floatact.json", "rand10M-F16.gguf", golden_setup::float_recipe},
        golden_case{"rand10M-greedy-floatact.json", "rand10M-Q8_0.gguf", golden_setup::float_recipe},
        golden_case{"rand10M-greedy-floatact.json", "rand10M-Q4_0.gguf", golden_setup::float_recipe},
        golden_case{"rand10M-greedy-floatact.json", "rand10M-Q4_K_M.gguf", golden_setup::float_recipe},
        golden_case{"rand10M-greedy-floatact.json", "rand10M-Q6_K.gguf", golden_setup::float_recipe},
        golden_case{"stories260K-greedy.json", "stories260K.gguf", golden_setup::float_recipe},
        golden_case{"stories260K-greedy.json", "stories260K-F16.gguf", golden_setup::float_recipe},
        golden_case{"stories260K-greedy.json", "stories260K-Q8_0.gguf", golden_setup::float_recipe},
        golden_case{"stories260K-greedy.json", "stories260K-Q4_0.gguf", golden_setup::float_recipe},
        // The builtin float kernels on Q8_0 without the plugin.
        golden_case{"rand10M-greedy-floatact.json", "rand10M-Q8_0.gguf", golden_setup::builtin_float},
        // The default config (the builtin kernels in the quantized recipe for every GGUF type, attention/gqa's fast
        // numerics): what `troupe run` gives.
        golden_case{"rand10M-greedy.json", "rand10M-F16.gguf", golden_setup::default_config},
        golden_case{"rand10M-greedy.json", "rand10M-Q8_0.gguf", golden_setup::default_config},
        golden_case{"rand10M-greedy.json", "rand10M-Q4_0.gguf", golden_setup::default_config},
        golden_case{"rand10M-greedy.json", "rand10M-Q4_K_M.gguf", golden_setup::default_config},
        golden_case{"rand10M-greedy.json", "rand10M-Q6_K.gguf", golden_setup::default_config},
        golden_case{"stories260K-greedy.json", "stories260K.gguf", golden_setup::default_config},
        golden_case{"stories260K-greedy.json", "stories260K-F16.gguf", golden_setup::default_config},
        golden_case{"stories260K-greedy.json", "stories260K-Q8_0.gguf", golden_setup::default_config},
        golden_case{"stories260K-greedy.json", "stories260K-Q4_0.gguf", golden_setup::default_config}),
    case_name);

}  // namespace
}  // namespace troupe
