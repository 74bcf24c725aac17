// Shared by the quant plugins' CUDA test and benchmark: the real plugin .so loaded through the ABI (dlopen, query,
// create with a backend), device buffers and a stream through cudart, and random weights in the stored formats.
// Built only where nvcc was found (tests/cuda/CMakeLists.txt); without a GPU, gpu_skip_reason() says why.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <troupe/plugin.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "plugins/common/half.h"

namespace troupe::cuda_quant_testing {

// Empty when a CUDA device answers, else why the GPU parts skip.
inline const std::string& gpu_skip_reason() {
    static const std::string reason = [] {
        int n = 0;
        const cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
        return n > 0 ? std::string() : std::string("no CUDA device");
    }();
    return reason;
}

// A plugin library from the build's plugin folder (TROUPE_DEFAULT_PLUGIN_DIR/quant/libtroupe_quant_<name>.so).
class quant_plugin {
public:
    explicit quant_plugin(const std::string& name) {
        const std::string path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/quant/libtroupe_quant_" + name + ".so";
        handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle_ == nullptr) {
            error_ = path + ": " + ::dlerror();
            return;
        }
        auto query = reinterpret_cast<troupe_plugin_query_fn>(::dlsym(handle_, TROUPE_PLUGIN_ENTRY_POINT));
        desc_ = query != nullptr ? query(TROUPE_PLUGIN_ABI_VERSION, TROUPE_PLUGIN_ABI_VERSION, nullptr) : nullptr;
        if (desc_ == nullptr || desc_->quant == nullptr) error_ = path + ": no quant descriptor";
    }
    ~quant_plugin() {
        if (handle_ != nullptr) ::dlclose(handle_);
    }
    quant_plugin(const quant_plugin&) = delete;
    quant_plugin& operator=(const quant_plugin&) = delete;

    const std::string& error() const { return error_; }
    const troupe_plugin_descriptor& desc() const { return *desc_; }
    const troupe_quant_ops& ops() const { return *desc_->quant; }

    // An instance for `backend` with params {key: value}; null with *error set when create fails.
    troupe_plugin_instance* create(int32_t backend, const std::vector<std::pair<std::string, std::string>>& kv,
                                   std::string* error) const {
        std::vector<troupe_param> items;
        for (const auto& [k, v] : kv) items.push_back({k.c_str(), v.c_str()});
        troupe_plugin_params params{sizeof(troupe_plugin_params),
                                    TROUPE_PLUGIN_PARAMS_VERSION,
                                    items.data(),
                                    items.size(),
                                    "{}",
                                    backend,
                                    nullptr};
        troupe_plugin_instance* inst = nullptr;
        if (desc_->create(&params, &inst) != TROUPE_OK) *error = desc_->error_message(nullptr);
        return inst;
    }

private:
    void* handle_ = nullptr;
    const troupe_plugin_descriptor* desc_ = nullptr;
    std::string error_;
};

inline troupe_parallel parallel_on(int32_t backend, cudaStream_t stream) {
    troupe_parallel p{};
    p.struct_size = sizeof p;
    p.version = TROUPE_PARALLEL_VERSION;
    p.backend = backend;
    p.stream = stream;
    return p;
}

// Device memory of n floats, freed on destruction.
class device_floats {
public:
    explicit device_floats(size_t n) : n_(n) {
        if (cudaMalloc(&p_, n * sizeof(float)) != cudaSuccess) p_ = nullptr;
    }
    ~device_floats() {
        if (p_ != nullptr) cudaFree(p_);
    }
    device_floats(const device_floats&) = delete;
    device_floats& operator=(const device_floats&) = delete;
    float* get() const { return static_cast<float*>(p_); }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_;
};

// Rows of 4-bit group blocks {fp16 d, fp16 m, qs[g / 2]} (troupe/types.h): n_out rows of n_in / g blocks, scales
// d in [0.002, 0.02), m in [-0.1, 0.1), random codes.
inline std::vector<uint8_t> random_w4_blocks(int64_t n_in, int64_t n_out, int g, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d_dist(0.002f, 0.02f), m_dist(-0.1f, 0.1f);
    const size_t block = 4 + static_cast<size_t>(g / 2);
    std::vector<uint8_t> data(static_cast<size_t>(n_out * (n_in / g)) * block);
    for (size_t b = 0; b < data.size() / block; ++b) {
        uint8_t* p = data.data() + b * block;
        const uint16_t d = quant_common::fp32_to_fp16(d_dist(rng)), m = quant_common::fp32_to_fp16(m_dist(rng));
        std::memcpy(p, &d, 2);
        std::memcpy(p + 2, &m, 2);
        for (int j = 0; j < g / 2; ++j) p[4 + j] = static_cast<uint8_t>(rng() & 0xff);
    }
    return data;
}

// Weight k of row r of such blocks, dequantized: d * q + m.
inline float w4_weight(const uint8_t* data, int64_t n_in, int g, int64_t r, int64_t k) {
    const size_t block = 4 + static_cast<size_t>(g / 2);
    const uint8_t* p = data + (static_cast<size_t>(r * (n_in / g)) + static_cast<size_t>(k / g)) * block;
    uint16_t dh, mh;
    std::memcpy(&dh, p, 2);
    std::memcpy(&mh, p + 2, 2);
    const int j = static_cast<int>(k % g);
    const int q = j < g / 2 ? p[4 + j] & 15 : p[4 + j - g / 2] >> 4;
    return quant_common::fp16_to_fp32(dh) * static_cast<float>(q) + quant_common::fp16_to_fp32(mh);
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
}

}  // namespace troupe::cuda_quant_testing
