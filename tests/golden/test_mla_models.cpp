// The deepseek2 files (multi-head latent attention, ../shared/models/arch/tiny-deepseek2*.gguf) through troupe's
// loader, beyond arch-greedy.json's equality (test_arch_golden.cpp):
//   - the default attention (gqa) becomes attention/mla, the KV pool holds one latent row per token and layer, and a
//     plugin without MLA given by path is refused naming mla;
//   - a file with YaRN scaling loads (llama_hparams lets rope.scaling.type yarn through to mla_params) with its
//     attention scale, and the scaling changes the logits;
//   - both of attention/mla's paths, with F32 and F16 latent pools, give the golden's 48 ids;
//   - speculative verification: each node of a tree of drafts gets the logits of its path run as a chain, and after
//     keeping an accepted path (rows moved in the latent pool) decoding continues as if the path had run as a chain.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/gguf/gguf_writer.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "core/model/greedy.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

engine_config mla_config(const std::string& path, const std::string& mla_path, kv_cache_type kv) {
    engine_config c = testing::golden_config(path, testing::golden_setup::builtin_float);
    c.plugins.attention = plugin_config("mla");
    c.plugins.attention.params = YAML::Load("{path: " + mla_path + "}");
    c.kv.dtype = kv;
    c.scheduler.max_running_seqs = 8;
    return c;
}

TEST(mla_models, the_default_attention_becomes_attention_mla_with_one_latent_row_per_token_and_layer) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-deepseek2.gguf");
    auto m = load_model(testing::golden_config(path, testing::golden_setup::builtin_float));
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_NE(std::find(m->plugins.begin(), m->plugins.end(), "attention/mla"), m->plugins.end());
    EXPECT_NE(m->kv_summary.find("f32 MLA latent, 320.0 B/token/layer"), std::string::npos) << m->kv_summary;
    // 3 layers of (64 latent + 16 RoPE) floats; multi-head attention would keep 4 heads x (48 + 32) per layer.
    EXPECT_EQ(m->runner->kv_bytes_per_token(), size_t{3 * 80 * 4});
}

TEST(mla_models, an_attention_plugin_without_mla_given_by_path_is_refused_naming_mla) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-deepseek2.gguf");
    engine_config c = testing::golden_config(path, testing::golden_setup::builtin_float);
    c.plugins.attention.path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/attention/libtroupe_attention_gqa.so";
    auto m = load_model(c);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.message().find("needs multi-head latent attention, which attention plugin attention/gqa does not"),
              std::string::npos)
        << m.message();
    EXPECT_NE(m.message().find("use plugins.attention: mla"), std::string::npos) << m.message();
}

// tiny-deepseek2.gguf as the file would be with YaRN scaling (factor 4 of an original context of 512).
TEST(mla_models, a_file_with_yarn_scaling_loads_with_its_attention_scale_and_the_scaling_changes_the_logits) {
    TROUPE_REQUIRE_SHARED(path, "models/arch/tiny-deepseek2.gguf");
    auto plain = gguf::gguf_file::open(path);
    ASSERT_TRUE(plain.ok()) << plain.message();
    gguf::gguf_writer w;
    w.copy_metadata(**plain);
    w.set_string("deepseek2.rope.scaling.type", "yarn");
    w.set_f32("deepseek2.rope.scaling.factor", 4.0f);
    w.set_u32("deepseek2.rope.scaling.original_context_length", 512);
    for (const gguf::tensor_info& t : (*plain)->tensors())
        w.add_tensor(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.n_bytes));
    const std::filesystem::path yarn_path =
        std::filesystem::temp_directory_path() / ("troupe_mla_yarn_" + std::to_string(::getpid()) + ".gguf");
    ASSERT_TRUE(w.write(yarn_path.string()).ok());
    auto scaled = load_model(mla_config(yarn_path.string(), "auto", kv_cache_type::f32));
    std::filesystem::remove(yarn_path);
    ASSERT_TRUE(scaled.ok()) << scaled.message();
    ASSERT_TRUE(scaled->cpu->hparams().mla->yarn.has_value());
    auto unscaled = load_model(mla_config(path, "auto", kv_cache_type::f32));
    ASSERT_TRUE(unscaled.ok()) << unscaled.message();
    const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
    auto a = greedy_generate(*scaled->runner, prompt, 1);
    auto b = greedy_generate(*unscaled->runner, prompt, 1);
    ASSERT_TRUE(a.ok() && b.ok());
    // The attention scale takes mscale² (the file's yarn_log_multiplier 0.0707: mscale = 1 + 0.0707 ln 4), and the
    // interpolated pairs rotate differently from position 1 on: the logits move.
    const float mscale = 1.0f + 0.0707f * std::log(4.0f);
    EXPECT_NEAR(scaled->cpu->hparams().mla->attention_scale(), mscale * mscale / std::sqrt(48.0f), 1e-6f);
    float worst = 0;
    for (size_t i = 0; i < a->first_logits.size(); ++i)
        worst = std::max(worst, std::fabs(a->first_logits[i] - b->first_logits[i]));
    EXPECT_GT(worst, 1e-3f);
}

struct path_case {
    const char* model;
    const char* path;
    kv_cache_type kv;
};

void PrintTo(const path_case& c, std::ostream* os) {
    *os << c.model << " path " << c.path << " kv " << kv_cache_type_name(c.kv);
}

std::string path_case_name(const ::testing::TestParamInfo<path_case>& info) {
    std::string s =
        std::string(info.param.path) + "_" + std::string(kv_cache_type_name(info.param.kv)) + "_" + info.param.model;
    for (char& ch : s) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return s;
}

class mla_paths : public ::testing::TestWithParam<path_case> {};

TEST_P(mla_paths, give_the_golden_ids) {
    const path_case& pc = GetParam();
    TROUPE_REQUIRE_SHARED(golden_path, "golden/arch-greedy.json");
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/arch/") + pc.model);
    std::optional<testing::golden_run> run;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == pc.model) run = r;
    }
    ASSERT_TRUE(run.has_value()) << pc.model << " has no run in " << golden_path;
    auto m = load_model(mla_config(model_path, pc.path, pc.kv));
    ASSERT_TRUE(m.ok()) << m.message();
    auto res = greedy_generate(*m->runner, run->prompt_ids, static_cast<int32_t>(run->generated_ids.size()));
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens, run->generated_ids);
}

INSTANTIATE_TEST_SUITE_P(deepseek2, mla_paths,
                         ::testing::Values(path_case{"tiny-deepseek2.gguf", "naive", kv_cache_type::f32},
                                           path_case{"tiny-deepseek2.gguf", "absorbed", kv_cache_type::f32},
                                           path_case{"tiny-deepseek2.gguf", "naive", kv_cache_type::f16},
                                           path_case{"tiny-deepseek2.gguf", "absorbed", kv_cache_type::f16},
                                           path_case{"tiny-deepseek2-lite.gguf", "naive", kv_cache_type::f32},
                                           path_case{"tiny-deepseek2-lite.gguf", "absorbed", kv_cache_type::f16}),
                         path_case_name);

// Speculative verification over the latent cache: blocks of 16 rows handed out in reverse per sequence slot.
std::vector<int32_t> slot_table(int32_t slot) {
    std::vector<int32_t> t;
    for (int32_t b = 0; b < 8; ++b) t.push_back(slot * 8 + (7 - b));
    return t;
}

std::vector<int32_t> some_tokens(int32_t n, int32_t salt) {
    std::vector<int32_t> p;
    for (int32_t i = 0; i < n; ++i) p.push_back(3 + (salt * 31 + i * 17) % 500);
    return p;
}

// Logits of the last token of a fresh chain `tokens` from position 0 (slot 7).
std::vector<float> chain_logits(model_runner& r, const std::vector<int32_t>& tokens) {
    forward_batch b;
    b.seqs.push_back(sequence_step{900, tokens, 0, slot_table(7)});
    forward_output out;
    const status st = r.forward(b, out);
    EXPECT_TRUE(st.ok()) << st.message();
    return {out.row(0).begin(), out.row(0).end()};
}

float max_diff(std::span<const float> a, const std::vector<float>& b) {
    float worst = 0;
    for (size_t i = 0; i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

class mla_trees : public ::testing::TestWithParam<path_case> {};

TEST_P(mla_trees, nodes_get_their_paths_logits_and_a_kept_path_decodes_on_as_a_chain) {
    const path_case& pc = GetParam();
    TROUPE_REQUIRE_SHARED(model_path, std::string("models/arch/") + pc.model);
    auto m = load_model(mla_config(model_path, pc.path, pc.kv));
    ASSERT_TRUE(m.ok()) << m.message();
    model_runner& r = *m->runner;
    ASSERT_TRUE(r.supports_trees());
    // F16 latents of the same token can round differently in a tree step and in a chain (the products' batching
    // differs); a row read from the wrong place moves logits by far more.
    const float tolerance = pc.kv == kv_cache_type::f16 ? 1e-2f : 2e-4f;
    const std::vector<int32_t> context = some_tokens(14, 5);  // drafts start at row 14: the tree crosses blocks
    const std::vector<int32_t> parents = {-1, 0, 0, 1, -1, 4, 2, 6, 3, 8};
    const std::vector<int32_t> drafts = some_tokens(10, 6);
    const std::vector<std::vector<int32_t>> paths = {{4, 5}, {0, 1, 3, 8, 9}, {}};
    forward_batch b;
    for (int32_t s = 0; s < static_cast<int32_t>(paths.size()); ++s)
        b.seqs.push_back(sequence_step{s, std::vector<int32_t>(context.begin(), context.end() - 1), 0, slot_table(s)});
    forward_output out;
    ASSERT_TRUE(r.forward(b, out).ok());
    b.seqs.clear();
    for (int32_t s = 0; s < static_cast<int32_t>(paths.size()); ++s) {
        sequence_step st{s, {context.back()}, 13, slot_table(s), true};
        st.tokens.insert(st.tokens.end(), drafts.begin(), drafts.end());
        st.n_draft = 10;
        st.tree_parents = parents;
        b.seqs.push_back(st);
    }
    const status tree_step = r.forward(b, out);
    ASSERT_TRUE(tree_step.ok()) << tree_step.message();
    for (int32_t i = 0; i < 10; ++i) {
        std::vector<int32_t> chain = context;
        std::vector<int32_t> tail;
        for (int32_t n = i; n >= 0; n = parents[n]) tail.insert(tail.begin(), drafts[n]);
        chain.insert(chain.end(), tail.begin(), tail.end());
        EXPECT_LT(max_diff(out.row(0, 1 + i), chain_logits(r, chain)), tolerance) << "node " << i;
    }
    for (size_t s = 0; s < paths.size(); ++s) {
        const status kept = r.keep_tree_path(b.seqs[s], paths[s]);
        ASSERT_TRUE(kept.ok()) << kept.message();
    }
    const std::vector<int32_t> next = some_tokens(2, 7);
    for (size_t s = 0; s < paths.size(); ++s) {
        SCOPED_TRACE("path of " + std::to_string(paths[s].size()) + " nodes");
        std::vector<int32_t> chain = context;
        for (int32_t node : paths[s]) chain.push_back(drafts[node]);
        for (const int32_t token : next) {
            forward_batch d;
            d.seqs.push_back(sequence_step{static_cast<int64_t>(s),
                                           {token},
                                           static_cast<int32_t>(chain.size()),
                                           slot_table(static_cast<int32_t>(s))});
            ASSERT_TRUE(r.forward(d, out).ok());
            chain.push_back(token);
            EXPECT_LT(max_diff(out.row(0), chain_logits(r, chain)), tolerance);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(deepseek2, mla_trees,
                         ::testing::Values(path_case{"tiny-deepseek2.gguf", "naive", kv_cache_type::f32},
                                           path_case{"tiny-deepseek2.gguf", "absorbed", kv_cache_type::f32},
                                           path_case{"tiny-deepseek2.gguf", "auto", kv_cache_type::f16}),
                         path_case_name);

}  // namespace
}  // namespace troupe
