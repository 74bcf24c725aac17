// The quant plugins' CUDA kernels (quant/w4a16, quant/fp8) through the real plugin .so and the ABI: a CPU instance
// and a CUDA instance of the same plugin prepare the same stored weight, the CUDA one multiplies device activations
// on a stream, and the two products must agree on odd shapes (n_out not a multiple of any tile, 1..40 tokens and
// past the 64-token tile) within a bound derived per element from S = sum_k |w[r, k] * x[t, k]|:
//
//   decode (1..8 tokens, f32 FMA):  |y_gpu - y_cpu| <= (2 n_in + 4) 2^-24 S            (two f32 sums of n_in terms)
//   prefill (f16 wmma, f32 sums):   |y_gpu - y_cpu| <= (2^-10 + (2 n_in + 4) 2^-24) S + n_in 2^-24 (max|w| + 1)
//                                   (x, and the 4-bit weights d * q + m, rounded to f16: 2^-11 each; fp8 is exact
//                                   in f16; an f16 subnormal loses at most 2^-25, and |x| <= 1)
//
// The GPU cases skip on a machine without a CUDA device; the ones that need no device run everywhere this is built
// (only where nvcc was found).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "plugins/common/fp8.h"
#include "tests/cuda/cuda_quant_support.h"

namespace troupe::cuda_quant_testing {
namespace {

#define REQUIRE_CUDA_DEVICE()                                                            \
    do {                                                                                 \
        if (!gpu_skip_reason().empty()) GTEST_SKIP() << "no GPU: " << gpu_skip_reason(); \
    } while (0)

using params_list = std::vector<std::pair<std::string, std::string>>;

// A weight as stored plus its dequantized values |w| (what the tolerance needs), row-major [n_out][n_in].
struct stored_weight {
    troupe_weight weight{};
    std::vector<uint8_t> bytes;
    std::vector<float> abs_w;  // [n_out][n_in]
    float max_abs = 0.0f;
};

stored_weight w4_weight_of(uint32_t type, int g, int64_t n_in, int64_t n_out, uint32_t seed) {
    stored_weight s;
    s.bytes = random_w4_blocks(n_in, n_out, g, seed);
    s.weight = troupe_weight{sizeof(troupe_weight),
                             TROUPE_WEIGHT_VERSION,
                             type,
                             s.bytes.data(),
                             n_in,
                             n_out,
                             static_cast<size_t>(n_in / g) * (4 + static_cast<size_t>(g / 2))};
    s.abs_w.resize(static_cast<size_t>(n_in * n_out));
    for (int64_t r = 0; r < n_out; ++r) {
        for (int64_t k = 0; k < n_in; ++k) {
            const float a = std::fabs(w4_weight(s.bytes.data(), n_in, g, r, k));
            s.abs_w[static_cast<size_t>(r * n_in + k)] = a;
            s.max_abs = std::max(s.max_abs, a);
        }
    }
    return s;
}

// F32 rows; abs_w are the fp8 weights the plugin makes of them (fp8_panels.h: scale = max|row| / max_finite).
stored_weight f32_weight_of(fp8::format f, int64_t n_in, int64_t n_out, uint32_t seed) {
    stored_weight s;
    const std::vector<float> w = random_floats(static_cast<size_t>(n_in * n_out), seed, -0.5f, 0.5f);
    s.bytes.resize(w.size() * sizeof(float));
    std::memcpy(s.bytes.data(), w.data(), s.bytes.size());
    s.weight = troupe_weight{sizeof(troupe_weight),
                             TROUPE_WEIGHT_VERSION,
                             TROUPE_TYPE_F32,
                             s.bytes.data(),
                             n_in,
                             n_out,
                             static_cast<size_t>(n_in) * sizeof(float)};
    s.abs_w.resize(w.size());
    for (int64_t r = 0; r < n_out; ++r) {
        float amax = 0.0f;
        for (int64_t k = 0; k < n_in; ++k) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * n_in + k)]));
        const float scale = amax / fp8::traits(f).max_finite;
        for (int64_t k = 0; k < n_in; ++k) {
            const size_t i = static_cast<size_t>(r * n_in + k);
            const float q = scale > 0.0f ? scale * fp8::decode(fp8::encode(w[i] / scale, f), f) : 0.0f;
            s.abs_w[i] = std::fabs(q);
            s.max_abs = std::max(s.max_abs, s.abs_w[i]);
        }
    }
    return s;
}

struct backend_pair {
    troupe_plugin_instance* cpu = nullptr;
    troupe_plugin_instance* gpu = nullptr;
    troupe_prepared_weight* cpu_w = nullptr;
    troupe_prepared_weight* gpu_w = nullptr;
};

// Prepares `s` on a CPU and a CUDA instance of `plugin` and checks their products for every token count in `tokens`.
void expect_backends_agree(const quant_plugin& plugin, const params_list& params, const stored_weight& s,
                           const std::vector<int64_t>& tokens, int x_offset, const std::string& what) {
    const troupe_quant_ops& ops = plugin.ops();
    std::string error;
    backend_pair p;
    p.cpu = plugin.create(TROUPE_BACKEND_CPU, params, &error);
    ASSERT_NE(p.cpu, nullptr) << what << ": " << error;
    p.gpu = plugin.create(TROUPE_BACKEND_CUDA, params, &error);
    ASSERT_NE(p.gpu, nullptr) << what << ": " << error;
    ASSERT_EQ(ops.prepare(p.cpu, &s.weight, &p.cpu_w), TROUPE_OK) << what << ": " << plugin.desc().error_message(p.cpu);
    ASSERT_EQ(ops.prepare(p.gpu, &s.weight, &p.gpu_w), TROUPE_OK) << what << ": " << plugin.desc().error_message(p.gpu);
    EXPECT_GT(ops.prepared_bytes(p.gpu, p.gpu_w), 0u);

    const int64_t n_in = s.weight.n_in, n_out = s.weight.n_out;
    const int64_t max_tokens = *std::max_element(tokens.begin(), tokens.end());
    const std::vector<float> x = random_floats(static_cast<size_t>(max_tokens * n_in), 99);  // [tokens, n_in]
    device_floats dx(x.size() + static_cast<size_t>(x_offset)), dy(static_cast<size_t>(max_tokens * n_out));
    ASSERT_NE(dx.get(), nullptr);
    ASSERT_NE(dy.get(), nullptr);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx.get() + x_offset, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    const troupe_parallel on_cpu = parallel_on(TROUPE_BACKEND_CPU, nullptr);
    const troupe_parallel on_gpu = parallel_on(TROUPE_BACKEND_CUDA, stream);

    for (const int64_t n_tokens : tokens) {
        std::vector<float> y_cpu(static_cast<size_t>(n_tokens * n_out)), y_gpu(y_cpu.size(), NAN);
        ASSERT_EQ(ops.matmul(p.cpu, p.cpu_w, x.data(), y_cpu.data(), n_tokens, &on_cpu), TROUPE_OK)
            << plugin.desc().error_message(p.cpu);
        ASSERT_EQ(cudaMemsetAsync(dy.get(), 0xff, dy.size() * sizeof(float), stream), cudaSuccess);  // NaNs
        ASSERT_EQ(ops.matmul(p.gpu, p.gpu_w, dx.get() + x_offset, dy.get(), n_tokens, &on_gpu), TROUPE_OK)
            << what << ", " << n_tokens << " tokens: " << plugin.desc().error_message(p.gpu);
        ASSERT_EQ(cudaMemcpyAsync(y_gpu.data(), dy.get(), y_gpu.size() * sizeof(float), cudaMemcpyDeviceToHost, stream),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what << ", " << n_tokens << " tokens";
        const bool prefill = n_tokens > 8;
        const double sum_bound = (prefill ? std::ldexp(1.0, -10) : 0.0) + (2.0 * n_in + 4) * std::ldexp(1.0, -24);
        const double abs_bound = prefill ? n_in * std::ldexp(1.0, -24) * (s.max_abs + 1.0) : 0.0;  // |x| <= 1
        int failures = 0;
        for (int64_t t = 0; t < n_tokens && failures < 5; ++t) {
            for (int64_t r = 0; r < n_out && failures < 5; ++r) {
                double sum = 0.0;
                for (int64_t k = 0; k < n_in; ++k) {
                    sum += std::fabs(static_cast<double>(s.abs_w[static_cast<size_t>(r * n_in + k)]) *
                                     x[static_cast<size_t>(t * n_in + k)]);
                }
                const size_t i = static_cast<size_t>(t * n_out + r);
                const double tol = sum_bound * sum + abs_bound;
                if (!(std::fabs(static_cast<double>(y_gpu[i]) - y_cpu[i]) <= tol)) {
                    ADD_FAILURE() << what << ", " << n_tokens << " tokens: y[" << t << ", " << r << "] cuda "
                                  << y_gpu[i] << " vs cpu " << y_cpu[i] << " (tolerance " << tol << ")";
                    ++failures;
                }
            }
        }
    }
    // A CUDA instance's weight lives on the device: a CPU call with it is refused, not run on device memory.
    std::vector<float> y(static_cast<size_t>(n_out));
    EXPECT_NE(ops.matmul(p.gpu, p.gpu_w, x.data(), y.data(), 1, &on_cpu), TROUPE_OK);
    EXPECT_NE(std::string(plugin.desc().error_message(p.gpu)).find("instance made for backend 1"), std::string::npos)
        << plugin.desc().error_message(p.gpu);
    ops.release(p.cpu, p.cpu_w);
    ops.release(p.gpu, p.gpu_w);
    plugin.desc().destroy(p.cpu);
    plugin.desc().destroy(p.gpu);
    cudaStreamDestroy(stream);
}

std::vector<int64_t> token_counts() {
    std::vector<int64_t> t;
    for (int64_t n = 1; n <= 40; ++n) t.push_back(n);
    t.push_back(65);   // past one 64-token tile
    t.push_back(130);  // three tiles, the last with 2 tokens
    return t;
}

TEST(cuda_quant_plugins, both_plugins_score_cuda_when_built_with_nvcc) {
    for (const char* name : {"w4a16", "fp8"}) {
        quant_plugin plugin(name);
        ASSERT_TRUE(plugin.error().empty()) << plugin.error();
        ASSERT_NE(plugin.desc().score, nullptr) << name;
        EXPECT_EQ(plugin.desc().score(TROUPE_BACKEND_CPU), 50) << name;
        EXPECT_EQ(plugin.desc().score(TROUPE_BACKEND_CUDA), 50) << name;
        std::string error;
        troupe_plugin_instance* inst = plugin.create(TROUPE_BACKEND_CUDA, {}, &error);
        EXPECT_NE(inst, nullptr) << name << ": " << error;
        if (inst != nullptr) plugin.desc().destroy(inst);
    }
}

TEST(cuda_quant_plugins, a_cpu_instance_refuses_a_product_on_the_cuda_backend) {
    quant_plugin plugin("w4a16");
    ASSERT_TRUE(plugin.error().empty()) << plugin.error();
    std::string error;
    troupe_plugin_instance* cpu = plugin.create(TROUPE_BACKEND_CPU, {}, &error);
    ASSERT_NE(cpu, nullptr) << error;
    const stored_weight s = w4_weight_of(TROUPE_TYPE_Q4_1, 32, 64, 3, 1);
    troupe_prepared_weight* w = nullptr;
    ASSERT_EQ(plugin.ops().prepare(cpu, &s.weight, &w), TROUPE_OK) << plugin.desc().error_message(cpu);
    std::vector<float> x(64, 1.0f), y(3);
    const troupe_parallel on_gpu = parallel_on(TROUPE_BACKEND_CUDA, nullptr);
    EXPECT_EQ(plugin.ops().matmul(cpu, w, x.data(), y.data(), 1, &on_gpu), TROUPE_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(plugin.desc().error_message(cpu)),
              "matmul on backend 1 with an instance made for backend 0 (its weights live there)");
    plugin.ops().release(cpu, w);
    plugin.desc().destroy(cpu);
}

TEST(cuda_quant_plugins, w4a16_on_cuda_matches_its_cpu_path_on_odd_shapes) {
    REQUIRE_CUDA_DEVICE();
    quant_plugin plugin("w4a16");
    ASSERT_TRUE(plugin.error().empty()) << plugin.error();
    struct w4_case {
        uint32_t type;
        int g;
        int64_t n_in, n_out;
        int x_offset;  // floats: 1 makes x not 16-byte aligned (scalar loads)
    };
    const std::vector<w4_case> cases = {
        {TROUPE_TYPE_Q4_1, 32, 32, 1, 0},         {TROUPE_TYPE_Q4_1, 32, 96, 67, 0},
        {TROUPE_TYPE_Q4_1, 32, 1024, 129, 1},     {TROUPE_TYPE_W4_G64, 64, 64, 5, 0},
        {TROUPE_TYPE_W4_G64, 64, 384, 131, 0},    {TROUPE_TYPE_W4_G128, 128, 128, 67, 0},
        {TROUPE_TYPE_W4_G128, 128, 1152, 200, 1},
    };
    uint32_t seed = 10;
    for (const w4_case& c : cases) {
        const stored_weight s = w4_weight_of(c.type, c.g, c.n_in, c.n_out, ++seed);
        const std::string what = std::string(c.type == TROUPE_TYPE_Q4_1 ? "Q4_1" : "W4_G") +
                                 (c.type == TROUPE_TYPE_Q4_1 ? "" : std::to_string(c.g)) + " [" +
                                 std::to_string(c.n_out) + ", " + std::to_string(c.n_in) + "]" +
                                 (c.x_offset != 0 ? " (x unaligned)" : "");
        // The CPU path with float activations (its decode's default rounds them to bf16; the CUDA path does not).
        expect_backends_agree(plugin, {{"activations", "float"}}, s, token_counts(), c.x_offset, what);
    }
}

TEST(cuda_quant_plugins, fp8_on_cuda_matches_its_cpu_path_on_odd_shapes) {
    REQUIRE_CUDA_DEVICE();
    quant_plugin plugin("fp8");
    ASSERT_TRUE(plugin.error().empty()) << plugin.error();
    struct fp8_case {
        fp8::format format;
        int64_t n_in, n_out;
        int x_offset;
    };
    const std::vector<fp8_case> cases = {
        {fp8::format::e4m3, 16, 1, 0},     {fp8::format::e4m3, 100, 37, 0}, {fp8::format::e4m3, 256, 67, 1},
        {fp8::format::e4m3, 1000, 129, 0}, {fp8::format::e5m2, 48, 5, 0},   {fp8::format::e5m2, 520, 131, 0},
    };
    uint32_t seed = 40;
    for (const fp8_case& c : cases) {
        const char* format = c.format == fp8::format::e4m3 ? "e4m3" : "e5m2";
        const stored_weight s = f32_weight_of(c.format, c.n_in, c.n_out, ++seed);
        const std::string what = std::string(format) + " [" + std::to_string(c.n_out) + ", " + std::to_string(c.n_in) +
                                 "]" + (c.x_offset != 0 ? " (x unaligned)" : "");
        expect_backends_agree(plugin, {{"format", format}}, s, token_counts(), c.x_offset, what);
    }
}

}  // namespace
}  // namespace troupe::cuda_quant_testing
