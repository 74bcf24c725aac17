// Shared by the CUDA tests: whether a GPU can run them (else the reason to skip), the loaded backend,
// random data, and a tiny random Llama model as a llama_weights_view with owned storage.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend/cuda_library.h"
#include "core/backend/llama_weights_view.h"
#include "core/model/llama_weights.h"
#include "core/model/model_runner.h"
#include "core/result.h"

namespace troupe::testing {

// Empty when the backend is built and a GPU answers; else why the GPU tests skip.
const std::string& cuda_skip_reason();
// The loaded backend; only valid when cuda_skip_reason() is empty.
const troupe_cuda_ops& cuda_ops();
// Whether this machine has an NVIDIA device node (a GPU-less machine has none).
bool nvidia_device_node_present();

#define TROUPE_REQUIRE_GPU()                                                                        \
    do {                                                                                            \
        if (!::troupe::testing::cuda_skip_reason().empty())                                         \
            GTEST_SKIP() << "no GPU for the CUDA tests: " << ::troupe::testing::cuda_skip_reason(); \
    } while (0)

// A fixture holding a backend context of two lanes for a test's kernels (the test skips without a GPU).
class gpu_context_test : public ::testing::Test {
protected:
    void SetUp() override {
        TROUPE_REQUIRE_GPU();
        const char* e = cuda_ops().context_create(0, 2, &ctx_);
        ASSERT_EQ(e, nullptr) << e;
    }
    void TearDown() override {
        if (ctx_) cuda_ops().context_destroy(ctx_);
    }
    troupe_cuda_context* ctx_ = nullptr;
};

// A GGUF model's weights (models/*.gguf of ../shared), bound as a Llama.
result<llama_weights> load_llama_weights(const std::string& path);
// Row i of sequence seq's logits, copied; the largest |a[i] - b[i]|.
std::vector<float> logits_row(const forward_output& out, size_t seq, int32_t i = 0);
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);
// Largest |a - b| over max(1, largest |b|): one relative figure per op (every element of a must be finite).
float max_rel_error(const std::vector<float>& a, const std::vector<float>& b);

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// A tiny random Llama (dim 32, 2 layers, 4 heads / 2 KV heads of 8, FFN 48, vocab 50, context 64) whose
// matrices are stored as `type` (F32 or Q8_0; norms stay F32), tied or separate output.
struct tiny_model {
    llama_weights_view view;
    std::vector<std::vector<uint8_t>> storage;
};
std::unique_ptr<tiny_model> make_tiny_model(ggml_type type, bool tied_output, uint32_t seed = 7);

}  // namespace troupe::testing

// An entry point of the backend's op table that must succeed (a message fails the test).
#define EXPECT_OK(call)                             \
    do {                                            \
        const char* troupe_e_ = (call);             \
        ASSERT_EQ(troupe_e_, nullptr) << troupe_e_; \
    } while (0)
