// bench_cuda_quant: the quant plugins' CUDA products through the real plugin .so, against the device's own measured
// copy bandwidth (the bound a weight-streaming GEMV can reach). Prints one line per product:
//
//   copy: <GB/s> GB/s (device to device, read + write)
//   w4a16 W4_G128 [28672, 8192], 1 tokens: <us> us, <GB/s> GB/s of weights = <pct>% of copy
//   ...
//   w4a16 W4_G128 [28672, 8192], 512 tokens: <us> us, <TFLOP/s> TFLOP/s
//
// Run by kernels/cuda/gpu_check.sh; exits 0 with a message when no CUDA device answers, 1 when a product fails.
// Weights are random: the speed does not depend on their values.
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/cuda/cuda_quant_support.h"

namespace {

using namespace troupe::cuda_quant_testing;

// Milliseconds per call of f (enqueued on `stream`), over `reps` calls after 3 warm-up calls.
template <class F>
float time_ms(cudaStream_t stream, int reps, F&& f) {
    for (int i = 0; i < 3; ++i) f();
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream);
    for (int i = 0; i < reps; ++i) f();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / static_cast<float>(reps);
}

double copy_gb_per_s(cudaStream_t stream) {
    const size_t bytes = size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0.0;
    cudaMemsetAsync(a, 1, bytes, stream);
    const float ms = time_ms(stream, 10, [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream); });
    cudaFree(a);
    cudaFree(b);
    return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

// Prepares `w` on a CUDA instance of `plugin` and times its products; false when something fails.
bool bench_weight(const char* name, const std::vector<std::pair<std::string, std::string>>& params,
                  const troupe_weight& w, const std::string& what, double copy_gbs, cudaStream_t stream) {
    quant_plugin plugin(name);
    if (!plugin.error().empty()) {
        std::fprintf(stderr, "%s\n", plugin.error().c_str());
        return false;
    }
    std::string error;
    troupe_plugin_instance* inst = plugin.create(TROUPE_BACKEND_CUDA, params, &error);
    troupe_prepared_weight* pw = nullptr;
    if (inst == nullptr || plugin.ops().prepare(inst, &w, &pw) != TROUPE_OK) {
        std::fprintf(stderr, "%s: %s\n", what.c_str(),
                     inst == nullptr ? error.c_str() : plugin.desc().error_message(inst));
        if (inst != nullptr) plugin.desc().destroy(inst);
        return false;
    }
    const double bytes = static_cast<double>(plugin.ops().prepared_bytes(inst, pw));
    const int64_t max_tokens = 512;
    const std::vector<float> x = random_floats(static_cast<size_t>(max_tokens * w.n_in), 5);
    device_floats dx(x.size()), dy(static_cast<size_t>(max_tokens * w.n_out));
    cudaMemcpy(dx.get(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
    const troupe_parallel par = parallel_on(TROUPE_BACKEND_CUDA, stream);
    bool ok = true;
    for (const int64_t n_tokens : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8}, int64_t{64}, max_tokens}) {
        int32_t rc = TROUPE_OK;
        const float ms = time_ms(stream, 20, [&] {
            if (rc == TROUPE_OK) rc = plugin.ops().matmul(inst, pw, dx.get(), dy.get(), n_tokens, &par);
        });
        if (rc != TROUPE_OK || cudaStreamSynchronize(stream) != cudaSuccess) {
            std::fprintf(stderr, "%s, %ld tokens: %s\n", what.c_str(), static_cast<long>(n_tokens),
                         plugin.desc().error_message(inst));
            ok = false;
            break;
        }
        const double s = ms * 1e-3;
        if (n_tokens <= 8) {
            std::printf("%s, %ld tokens: %.1f us, %.0f GB/s of weights = %.0f%% of copy\n", what.c_str(),
                        static_cast<long>(n_tokens), ms * 1e3, bytes / s / 1e9, 100.0 * bytes / s / 1e9 / copy_gbs);
        } else {
            const double flops = 2.0 * static_cast<double>(n_tokens) * static_cast<double>(w.n_in * w.n_out);
            std::printf("%s, %ld tokens: %.1f us, %.1f TFLOP/s\n", what.c_str(), static_cast<long>(n_tokens), ms * 1e3,
                        flops / s / 1e12);
        }
    }
    plugin.ops().release(inst, pw);
    plugin.desc().destroy(inst);
    return ok;
}

}  // namespace

int main() {
    if (!gpu_skip_reason().empty()) {
        std::printf("bench_cuda_quant: skipped, no GPU: %s\n", gpu_skip_reason().c_str());
        return 0;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    const double copy = copy_gb_per_s(stream);
    std::printf("device: %s, copy: %.0f GB/s (device to device, read + write)\n", prop.name, copy);

    bool ok = true;
    const int64_t n_in = 8192, n_out = 28672;  // 117 MB at 4 bits: past the L2 cache
    for (const auto& [type, g, label] : {std::tuple{uint32_t{TROUPE_TYPE_W4_G128}, 128, "W4_G128"},
                                         std::tuple{uint32_t{TROUPE_TYPE_Q4_1}, 32, "Q4_1"}}) {
        const std::vector<uint8_t> blocks = random_w4_blocks(n_in, n_out, g, 1);
        const troupe_weight w{sizeof(troupe_weight),
                              TROUPE_WEIGHT_VERSION,
                              type,
                              blocks.data(),
                              n_in,
                              n_out,
                              static_cast<size_t>(n_in / g) * (4 + static_cast<size_t>(g / 2))};
        ok = bench_weight("w4a16", {}, w, std::string("w4a16 ") + label + " [28672, 8192]", copy, stream) && ok;
    }
    const int64_t fp8_out = 14336;  // 117 MB of fp8 codes
    const std::vector<float> f32 = random_floats(static_cast<size_t>(n_in * fp8_out), 2, -0.5f, 0.5f);
    const troupe_weight w{sizeof(troupe_weight),
                          TROUPE_WEIGHT_VERSION,
                          TROUPE_TYPE_F32,
                          f32.data(),
                          n_in,
                          fp8_out,
                          static_cast<size_t>(n_in) * sizeof(float)};
    for (const char* format : {"e4m3", "e5m2"}) {
        ok = bench_weight("fp8", {{"format", format}}, w, std::string("fp8 ") + format + " [14336, 8192]", copy,
                          stream) &&
             ok;
    }
    cudaStreamDestroy(stream);
    return ok ? 0 : 1;
}
