// quant/w4a16 on a real model: stories260K with its matrices quantized by round to nearest (kernels/ref/quants.h)
// to Q4_1 or W4_G64 (written with gguf_writer in a temporary folder; rows that are not whole groups, ffn_down's
// 172, stay F32), run by the default engine (quant: [q8, w4a16]), against the same weights dequantized to F32 and
// run in float32 without a plugin. The plugin multiplies exactly the dequantized weights: with float activations
// (params.activations: float) both runs compute the same products but for summation order, so the first step's
// logits agree to float rounding; with the default bf16 activations in decode (up to 16 tokens: this prompt) each
// activation also moves by up to 2^-9 of itself, and the logits by a few hundredths (measured 0.039 for Q4_1,
// 0.041 for W4_G64). Either way every greedy token is the same.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/gguf/gguf_file.h"
#include "core/gguf/gguf_writer.h"
#include "core/loader/model_loader.h"
#include "core/model/greedy.h"
#include "kernels/ref/quants.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_model.h"
#include "tests/golden/golden_runs.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;
using testing::golden_setup;

// Writes `source` with every matrix whose rows are whole groups of `type` quantized to it (to `quantized_path`),
// and the same file with those matrices dequantized back to F32 (to `dequantized_path`). Returns how many
// matrices were quantized.
int write_pair(const gguf::gguf_file& source, ggml_type type, const std::string& quantized_path,
               const std::string& dequantized_path) {
    gguf::gguf_writer quantized, dequantized;
    quantized.copy_metadata(source);
    dequantized.copy_metadata(source);
    int n_quantized = 0;
    for (const gguf::tensor_info& t : source.tensors()) {
        const std::span<const uint8_t> bytes(t.data, t.n_bytes);
        if (t.dims.size() != 2 || t.type != ggml_type::f32 || t.dims[0] % ref::w4_group_size(type) != 0) {
            quantized.add_tensor(t.name, t.type, t.dims, bytes);
            dequantized.add_tensor(t.name, t.type, t.dims, bytes);
            continue;
        }
        const int64_t n_in = t.dims[0], n_rows = t.dims[1];
        std::vector<uint8_t> q(row_bytes(type, n_in) * n_rows);
        std::vector<uint8_t> back(static_cast<size_t>(n_in * n_rows) * sizeof(float));
        for (int64_t r = 0; r < n_rows; ++r) {
            const auto* row = reinterpret_cast<const float*>(t.data) + r * n_in;
            uint8_t* qr = q.data() + r * row_bytes(type, n_in);
            ref::quantize_row(type, row, qr, n_in);
            ref::dequantize_row(type, qr, reinterpret_cast<float*>(back.data()) + r * n_in, n_in);
        }
        quantized.add_tensor(t.name, type, t.dims, q);
        dequantized.add_tensor(t.name, ggml_type::f32, t.dims, back);
        ++n_quantized;
    }
    EXPECT_TRUE(quantized.write(quantized_path).ok());
    EXPECT_TRUE(dequantized.write(dequantized_path).ok());
    return n_quantized;
}

struct w4_case {
    const char* name;
    ggml_type type;
    int min_quantized;        // matrices of stories260K whose rows are whole groups
    const char* activations;  // the plugin's params.activations
    float tolerance;          // of the first step's logits
};

class w4a16_stories : public ::testing::TestWithParam<w4_case> {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("troupe_w4a16_stories_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

TEST_P(w4a16_stories, the_default_engine_runs_the_quantized_file_as_its_dequantized_weights_in_float) {
    const w4_case& c = GetParam();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    std::vector<int32_t> prompt;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == "stories260K.gguf") prompt = r.prompt_ids;
    }
    ASSERT_FALSE(prompt.empty()) << "no stories260K.gguf run in " << golden_path;
    auto source = gguf::gguf_file::open(model_path);
    ASSERT_TRUE(source.ok()) << source.message();
    const std::string quantized = (dir_ / (std::string(c.name) + ".gguf")).string();
    const std::string dequantized = (dir_ / (std::string(c.name) + "-dequantized-f32.gguf")).string();
    EXPECT_GE(write_pair(**source, c.type, quantized, dequantized), c.min_quantized);

    const int32_t n_new = 48;
    auto f32 = testing::load_golden_model(dequantized, golden_setup::builtin_float);
    ASSERT_TRUE(f32.ok()) << f32.message();
    auto want = greedy_generate(*f32->runner, prompt, n_new);
    ASSERT_TRUE(want.ok()) << want.message();

    engine_config config;  // the defaults: plugins.quant [w4a16], kernels.activations: quantized
    config.model = quantized;
    config.scheduler.max_running_seqs = 4;
    ASSERT_EQ(config.plugins.quant_plugins().size(), 1u);
    ASSERT_EQ(config.plugins.quant.name, "w4a16");
    config.plugins.quant.params[std::string("activations")] = std::string(c.activations);
    auto w4 = load_model(config);
    ASSERT_TRUE(w4.ok()) << w4.message();
    auto got = greedy_generate(*w4->runner, prompt, n_new);
    ASSERT_TRUE(got.ok()) << got.message();

    ASSERT_EQ(got->first_logits.size(), want->first_logits.size());
    float worst = 0.0f;
    for (size_t i = 0; i < got->first_logits.size(); ++i) {
        worst = std::max(worst, std::fabs(got->first_logits[i] - want->first_logits[i]));
    }
    std::printf("  %s: first-step logits max |w4a16 - dequantized f32| = %.2g\n", c.name, worst);
    // The logits span about -10..+12: a wrong nibble, scale or min moves them by units.
    EXPECT_LE(worst, c.tolerance);
    EXPECT_EQ(got->tokens, want->tokens);
}

// kernels.weights: copy (the default) places the plugin's prepared rows in the host's regions, one per thread, in
// step order (troupe_quant_ops version 2); mmap leaves them in the plugin's own memory. Same logits bit for bit, on
// two and three threads (the regions follow the pool), prompt (prefill) and decode steps alike.
TEST_F(w4a16_stories, weights_placed_per_thread_give_the_logits_of_the_plugins_own_copy_bit_for_bit) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    TROUPE_REQUIRE_SHARED(golden_path, "golden/stories260K-greedy.json");
    std::vector<int32_t> prompt;
    for (const auto& r : testing::load_golden_runs(golden_path)) {
        if (r.model == "stories260K.gguf") prompt = r.prompt_ids;
    }
    ASSERT_FALSE(prompt.empty()) << "no stories260K.gguf run in " << golden_path;
    const std::vector<int32_t> long_prompt = [&] {  // a prefill past decode's 16 tokens
        std::vector<int32_t> p = prompt;
        while (p.size() < 40) p.insert(p.end(), prompt.begin(), prompt.end());
        return p;
    }();
    const std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + std::min<size_t>(prompt.size(), 5));
    auto source = gguf::gguf_file::open(model_path);
    ASSERT_TRUE(source.ok()) << source.message();
    for (const ggml_type type : {ggml_type::q4_1, ggml_type::w4_g64}) {
        const std::string name(traits(type).name);
        const std::string quantized = (dir_ / (name + ".gguf")).string();
        EXPECT_GE(write_pair(**source, type, quantized, (dir_ / (name + "-f32.gguf")).string()), 30);
        for (const int32_t threads : {2, 3}) {
            std::vector<std::unique_ptr<loaded_model>> models;  // placed, then the plugin's own copy
            for (const weight_memory where : {weight_memory::copy, weight_memory::mmap}) {
                engine_config config;
                config.model = quantized;
                config.threads = threads;
                config.kernels.weights = where;
                auto m = load_model(config);
                ASSERT_TRUE(m.ok()) << m.message();
                models.push_back(std::make_unique<loaded_model>(std::move(*m)));
            }
            for (const std::vector<int32_t>* p : {&short_prompt, &long_prompt}) {
                SCOPED_TRACE(name + ", " + std::to_string(threads) + " threads, prompt of " +
                             std::to_string(p->size()));
                auto placed = greedy_generate(*models[0]->runner, *p, 24);
                auto own = greedy_generate(*models[1]->runner, *p, 24);
                ASSERT_TRUE(placed.ok()) << placed.message();
                ASSERT_TRUE(own.ok()) << own.message();
                ASSERT_EQ(placed->first_logits.size(), own->first_logits.size());
                EXPECT_EQ(0, std::memcmp(placed->first_logits.data(), own->first_logits.data(),
                                         own->first_logits.size() * sizeof(float)));
                EXPECT_EQ(placed->tokens, own->tokens);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(stories260K, w4a16_stories,
                         ::testing::Values(w4_case{"q4_1", ggml_type::q4_1, 30, "float", 1e-3f},
                                           w4_case{"w4_g64", ggml_type::w4_g64, 30, "float", 1e-3f},
                                           w4_case{"q4_1_bf16", ggml_type::q4_1, 30, "bf16", 0.15f},
                                           w4_case{"w4_g64_bf16", ggml_type::w4_g64, 30, "bf16", 0.15f}),
                         [](const ::testing::TestParamInfo<w4_case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace troupe
