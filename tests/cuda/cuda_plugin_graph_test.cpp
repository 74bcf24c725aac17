// The CUDA graph calls plugins (backend ABI revision 6): a quant plugin's CUDA kernel makes the products of the
// weights it takes (through the ABI with device pointers and the compute lane's stream), and tap observers see the
// graph's intermediates. On a GPU: a W4_G128 model (quant/w4a16) and an FP8 model (quant/fp8, quantized at load) follow
// the CPU's greedy path (logits within tolerance at every step), and a tap observer gets the same hidden states on
// both within tolerance.
// Skipped without a GPU (kernels/cuda/gpu_check.sh runs them, and makes the W4_G128 file with troupe quantize).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/backend/cuda_runner.h"
#include "core/backend/llama_view_of.h"
#include "core/loader/model_loader.h"
#include "core/model/cpu_llama.h"
#include "core/model/greedy.h"
#include "core/model/tap_sink.h"
#include "tests/common/shared_data.h"
#include "tests/cuda/cuda_test_support.h"

namespace troupe {
namespace {

std::vector<int32_t> prompt_of(int32_t n, int32_t salt, int32_t n_vocab) {
    std::vector<int32_t> t{1};
    for (int32_t i = 1; i < n; ++i) t.push_back(3 + (salt * 37 + i * 11) % (n_vocab - 3));
    return t;
}

engine_config with_quant(const std::string& model, const std::string& quant, device_kind device) {
    engine_config c;
    c.model = model;
    c.device = device;
    c.plugins.quant = plugin_config(quant);
    c.plugins.more_quant.clear();
    return c;
}

// One model on the CPU and on the GPU, the GPU's matrices in the plugin's CUDA kernels: along the CPU's greedy
// continuation of each prompt, every step's logits agree within `tolerance` (relative to the largest logit), and the
// GPU picks the CPU's token except where the CPU's own best two are closer than that (the two backends round the
// activations differently: bf16 in the CPU's decode, F16 or F32 on the GPU, so a random model's near-ties may fall
// either way; exact greedy equality over many steps would test the rounding, not the kernels).
void expect_same_greedy_path(const std::string& model, const std::string& quant, float tolerance) {
    auto cpu = load_model(with_quant(model, quant, device_kind::cpu));
    ASSERT_TRUE(cpu.ok()) << cpu.message();
    auto gpu = load_model(with_quant(model, quant, device_kind::cuda));
    ASSERT_TRUE(gpu.ok()) << gpu.message();
    ASSERT_EQ(gpu->device, device_kind::cuda) << "fell back to the CPU";
    const std::string description = gpu->runner->description();
    EXPECT_NE(description.find(quant + "'s CUDA kernels"), std::string::npos) << description;
    int32_t near_ties = 0;
    for (int32_t salt : {1, 2, 3}) {
        std::vector<int32_t> context = prompt_of(12, salt, gpu->runner->n_vocab());
        float worst = 0;
        for (int32_t step = 0; step < 16; ++step) {
            auto want = greedy_generate(*cpu->runner, context, 1);
            ASSERT_TRUE(want.ok()) << want.message();
            auto got = greedy_generate(*gpu->runner, context, 1);
            ASSERT_TRUE(got.ok()) << got.message();
            const std::vector<float>& w = want->first_logits;
            float scale = 0;
            for (float v : w) scale = std::max(scale, std::fabs(v));
            const float diff = testing::max_abs_diff(got->first_logits, w);
            worst = std::max(worst, diff / scale);
            EXPECT_LT(diff, tolerance * scale) << "prompt " << salt << " step " << step;
            const int32_t cpu_token = want->tokens[0], gpu_token = got->tokens[0];
            if (gpu_token != cpu_token) {
                ++near_ties;
                EXPECT_LT(w[cpu_token] - w[gpu_token], tolerance * scale)
                    << "prompt " << salt << " step " << step << ": the GPU picked " << gpu_token << ", the CPU "
                    << cpu_token;
            }
            context.push_back(cpu_token);
        }
        std::printf("%s prompt %d: largest logit difference %.2e of the largest logit\n", quant.c_str(), salt, worst);
    }
    std::printf("%s: %d of 48 steps picked another token of a near-tie\n", quant.c_str(), near_ties);
    EXPECT_LE(near_ties, 4);
}

TEST(cuda_plugin_graph, w4_g128_weights_in_w4a16s_cuda_kernels_follow_the_cpus_greedy_path) {
    TROUPE_REQUIRE_GPU();
    const char* path = std::getenv("TROUPE_W4_G128_MODEL");
    if (path == nullptr || *path == '\0') {
        GTEST_SKIP() << "TROUPE_W4_G128_MODEL names no file (kernels/cuda/gpu_check.sh makes one with troupe quantize "
                        "--type w4_g128)";
    }
    expect_same_greedy_path(path, "w4a16", 2e-2f);
}

TEST(cuda_plugin_graph, fp8_weights_quantized_at_load_in_fp8s_cuda_kernels_follow_the_cpus_greedy_path) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/rand10M-F16.gguf");
    expect_same_greedy_path(model_path, "fp8", 2e-2f);
}

// Records every observation of the taps it wants, host memory only (the default on a GPU: copies).
class recorder final : public tap_sink {
public:
    uint64_t wanted() const override {
        return tap_bit(tap_point::attn_norm) | tap_bit(tap_point::layer_out) | tap_bit(tap_point::logits);
    }
    status observe(const tap_data& d) override {
        if (d.stream != nullptr) return make_error("recorder: asked for host memory, got device rows");
        auto& rows = seen[{static_cast<int32_t>(d.tap), d.layer, n_seen[{static_cast<int32_t>(d.tap), d.layer}]++}];
        rows.assign(d.data, d.data + d.n_rows * d.width);
        positions[static_cast<int32_t>(d.tap)].assign(d.positions, d.positions + d.n_rows);
        return {};
    }
    std::map<std::tuple<int32_t, int32_t, int32_t>, std::vector<float>> seen;  // (tap, layer, step) -> rows
    std::map<std::pair<int32_t, int32_t>, int32_t> n_seen;
    std::map<int32_t, std::vector<int32_t>> positions;  // the last step's, per tap
};

TEST(cuda_plugin_graph, a_tap_observer_gets_the_same_hidden_states_on_cuda_as_on_the_cpu) {
    TROUPE_REQUIRE_GPU();
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    auto cpu_model = load_model(with_quant(model_path, "none", device_kind::cpu));
    ASSERT_TRUE(cpu_model.ok()) << cpu_model.message();
    ASSERT_NE(cpu_model->cpu, nullptr);
    auto on_cpu = std::make_shared<recorder>();
    cpu_model->cpu->attach_taps(on_cpu);

    auto weights = testing::load_llama_weights(model_path);
    ASSERT_TRUE(weights.ok()) << weights.message();
    auto on_gpu = std::make_shared<recorder>();
    cuda_runner_params params;
    params.dequantize_to = cuda_weight_type::f32;
    params.taps = {on_gpu};
    auto gpu = cuda_runner::create(llama_view_of(weights.value()), params);
    ASSERT_TRUE(gpu.ok()) << gpu.message();

    const std::vector<int32_t> prompt = prompt_of(20, 4, 512);
    auto want = greedy_generate(*cpu_model->runner, prompt, 6);
    ASSERT_TRUE(want.ok()) << want.message();
    auto got = greedy_generate(*gpu.value(), prompt, 6);
    ASSERT_TRUE(got.ok()) << got.message();
    EXPECT_EQ(got->tokens, want->tokens);

    ASSERT_FALSE(on_cpu->seen.empty());
    EXPECT_EQ(on_gpu->n_seen, on_cpu->n_seen);  // every tap of every layer, once per step
    for (const auto& [key, rows] : on_cpu->seen) {
        const auto it = on_gpu->seen.find(key);
        ASSERT_NE(it, on_gpu->seen.end()) << "tap " << std::get<0>(key) << " layer " << std::get<1>(key);
        ASSERT_EQ(it->second.size(), rows.size()) << "tap " << std::get<0>(key) << " layer " << std::get<1>(key);
        EXPECT_LT(testing::max_abs_diff(it->second, rows), 2e-3f)
            << "tap " << std::get<0>(key) << " layer " << std::get<1>(key) << " step " << std::get<2>(key);
    }
    EXPECT_EQ(on_gpu->positions, on_cpu->positions);
}

}  // namespace
}  // namespace troupe
