// troupe synth --arch: each architecture's random model has the tensors and keys of the independent reference's
// model of that architecture (../shared/models/arch/tiny-*.gguf): the same tensor names in every layer (ranks and
// F32 vectors alike) and every "<arch>.*" key the reference file sets (but the RoPE scaling keys it stores with no
// effect). (llama's own layout: test_cli's synth tests.) And troupe runs each one: it loads as `troupe run` loads
// it and decodes greedily with finite logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "cli/synth_model.h"
#include "core/model/greedy.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"

namespace troupe {
namespace {

// Tensor names with the layer number replaced by N, and each one's rank and whether it is F32.
std::map<std::string, std::pair<size_t, bool>> tensor_kinds(const gguf::gguf_file& f) {
    static const std::regex layer("^blk\\.[0-9]+\\.");
    std::map<std::string, std::pair<size_t, bool>> kinds;
    for (const gguf::tensor_info& t : f.tensors()) {
        kinds[std::regex_replace(t.name, layer, "blk.N.")] = {t.dims.size(), t.type == ggml_type::f32};
    }
    return kinds;
}

struct arch_case {
    cli::synth_arch arch;
    const char* reference;  // file under models/arch
};

class synth_arch_vs_reference : public ::testing::TestWithParam<arch_case> {};

TEST_P(synth_arch_vs_reference, the_random_model_has_the_reference_models_tensors_and_keys_and_runs) {
    const arch_case& c = GetParam();
    TROUPE_REQUIRE_SHARED(ref_path, std::string("models/arch/") + c.reference);
    auto ref = gguf::gguf_file::open(ref_path);
    ASSERT_TRUE(ref.ok()) << ref.message();
    const std::string out = ::testing::TempDir() + "synth-" + std::string(cli::synth_arch_name(c.arch)) + ".gguf";
    cli::synth_params p;
    p.shape = *cli::find_synth_shape("tiny");
    p.arch = c.arch;
    p.type = ggml_type::q8_0;
    auto summary = cli::write_synth_model(p, **ref, out);
    ASSERT_TRUE(summary.ok()) << summary.message();
    auto f = gguf::gguf_file::open(out);
    ASSERT_TRUE(f.ok()) << f.message();
    const gguf::gguf_file& g = **f;

    const std::string arch = g.string_or("general.architecture", "");
    EXPECT_EQ(arch, (*ref)->string_or("general.architecture", "?"));
    const auto kinds = tensor_kinds(g), ref_kinds = tensor_kinds(**ref);
    for (const auto& [name, kind] : ref_kinds) {
        auto it = kinds.find(name);
        ASSERT_NE(it, kinds.end()) << name << " is missing";
        EXPECT_EQ(it->second.first, kind.first) << name << " rank";
        EXPECT_EQ(it->second.second, kind.second) << name << " F32";
    }
    for (const auto& [name, kind] : kinds) EXPECT_TRUE(ref_kinds.count(name)) << name << " is not in the reference";
    for (const std::string& key : (*ref)->keys()) {
        if (key.rfind(arch + ".", 0) != 0 || key.find(".rope.scaling.") != std::string::npos) continue;
        EXPECT_NE(g.find(key), nullptr) << key;
    }
    if (cli::synth_arch_has_experts(c.arch)) {
        EXPECT_LT(summary->n_active_params, summary->n_params);
    } else {
        EXPECT_EQ(summary->n_active_params, summary->n_params);
    }

    auto model = testing::load_golden_model(out, testing::golden_setup::builtin_quantized);
    ASSERT_TRUE(model.ok()) << model.message();
    const std::vector<int32_t> prompt{1, 403, 407, 261, 378};
    auto res = greedy_generate(*model->runner, prompt, 4);
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens.size(), 4u);
    for (float l : res->first_logits) ASSERT_TRUE(std::isfinite(l));
    std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(architectures, synth_arch_vs_reference,
                         ::testing::Values(arch_case{cli::synth_arch::qwen2, "tiny-qwen2.gguf"},
                                           arch_case{cli::synth_arch::phi3, "tiny-phi3.gguf"},
                                           arch_case{cli::synth_arch::gemma2, "tiny-gemma2.gguf"},
                                           arch_case{cli::synth_arch::mixtral, "tiny-mixtral.gguf"},
                                           arch_case{cli::synth_arch::deepseek2, "tiny-deepseek2.gguf"}),
                         [](const ::testing::TestParamInfo<arch_case>& info) {
                             return std::string(cli::synth_arch_name(info.param.arch));
                         });

}  // namespace
}  // namespace troupe
