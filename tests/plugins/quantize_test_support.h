// Helpers of the offline quantization method tests (test_quantize_methods.cpp): a minimal host that loads a
// quant plugin with dlopen and drives its taps and quantize tables as `troupe quantize` does, and synthetic
// weights with calibration inputs where calibration matters.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <troupe/plugin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/ref/quants.h"

namespace troupe::testing::quantize {

// ---- a minimal host: dlopen, negotiate, create, call -------------------------------------------------------

inline int32_t threaded_parallel_for(void*, int64_t n, troupe_range_fn fn, void* fn_ctx) {
    constexpr int n_threads = 3;  // uneven splits catch range bugs
    std::vector<std::thread> threads;
    for (int i = 0; i < n_threads; ++i) {
        const int64_t begin = n * i / n_threads, end = n * (i + 1) / n_threads;
        if (begin < end) threads.emplace_back([=] { fn(fn_ctx, begin, end); });
    }
    for (auto& t : threads) t.join();
    return TROUPE_OK;
}

inline void quiet_log(void*, int32_t, const char*, const char*) {}

inline const troupe_host_services k_services = {sizeof(troupe_host_services), TROUPE_HOST_SERVICES_VERSION, nullptr,
                                                quiet_log, threaded_parallel_for};
inline const troupe_parallel k_parallel = [] {
    troupe_parallel p{};  // the later versions' fields zero: no ranges, shares or thread count offered
    p.struct_size = sizeof p;
    p.version = TROUPE_PARALLEL_VERSION;
    p.parallel_for = threaded_parallel_for;
    p.backend = TROUPE_BACKEND_CPU;
    return p;
}();

struct library {
    explicit library(const std::string& name) {
        const std::string path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/quant/libtroupe_quant_" + name + ".so";
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) return;
        auto query = reinterpret_cast<troupe_plugin_query_fn>(dlsym(handle, TROUPE_PLUGIN_ENTRY_POINT));
        if (query != nullptr) descriptor = query(TROUPE_PLUGIN_ABI_VERSION, TROUPE_PLUGIN_ABI_VERSION, &k_services);
    }
    ~library() {
        if (handle != nullptr) dlclose(handle);
    }
    void* handle = nullptr;
    const troupe_plugin_descriptor* descriptor = nullptr;
};

// One instance of a method made from (key, value) parameters; `status` and `error` say how create went.
struct method {
    method(const library& lib, std::vector<std::pair<std::string, std::string>> kv)
        : d(lib.descriptor), items(std::move(kv)) {
        std::vector<troupe_param> params;
        for (const auto& [k, v] : items) params.push_back({k.c_str(), v.c_str()});
        troupe_plugin_params p{};
        p.struct_size = sizeof p;
        p.version = TROUPE_PLUGIN_PARAMS_VERSION;
        p.items = params.data();
        p.n_items = params.size();
        p.yaml = "{}";
        p.backend = TROUPE_BACKEND_CPU;
        status = d->create(&p, &instance);
        if (status != TROUPE_OK) error = d->error_message(nullptr);
    }
    ~method() {
        if (instance != nullptr) d->destroy(instance);
    }
    int32_t observe(int32_t layer, int32_t tap, const std::vector<float>& x, int64_t width) {
        const int64_t n_rows = static_cast<int64_t>(x.size()) / width;
        std::vector<int64_t> seq(static_cast<size_t>(n_rows), 0);
        std::vector<int32_t> pos(static_cast<size_t>(n_rows));
        for (int64_t r = 0; r < n_rows; ++r) pos[r] = static_cast<int32_t>(r);
        const troupe_tap_data data = {sizeof(troupe_tap_data),
                                      TROUPE_TAP_DATA_VERSION,
                                      tap,
                                      layer,
                                      n_rows,
                                      width,
                                      x.data(),
                                      seq.data(),
                                      pos.data(),
                                      TROUPE_BACKEND_CPU,
                                      nullptr,
                                      nullptr};
        return d->taps->observe(instance, &data);
    }
    std::string message() const { return d->error_message(instance); }

    const troupe_plugin_descriptor* d;
    std::vector<std::pair<std::string, std::string>> items;
    troupe_plugin_instance* instance = nullptr;
    int32_t status = TROUPE_ERR_INTERNAL;
    std::string error;
};

// ---- synthetic weights and activations ----------------------------------------------------------------------

struct problem {
    int64_t n_in = 0, n_out = 0;
    std::vector<float> w;      // [n_out, n_in]
    std::vector<float> calib;  // [n_calib, n_in]
    std::vector<float> test;   // [n_test, n_in] held out
};

// x = (z A + 0.5 noise) · channel_scale with z [rank] gaussian, A [rank, n_in]; `n_outliers` channels scaled by 20.
inline problem make_problem(int64_t n_in, int64_t n_out, int64_t n_calib, int64_t n_test, uint32_t seed,
                            int n_outliers = 4, int rank = 32) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    problem p;
    p.n_in = n_in;
    p.n_out = n_out;
    p.w.resize(static_cast<size_t>(n_out * n_in));
    for (float& x : p.w) x = 0.05f * normal(rng);
    std::vector<float> a(static_cast<size_t>(rank * n_in));  // [rank, n_in]
    for (float& x : a) x = normal(rng) / std::sqrt(static_cast<float>(rank));
    std::vector<float> channel_scale(static_cast<size_t>(n_in), 1.0f);
    for (int i = 0; i < n_outliers; ++i) channel_scale[(i * 37 + 5) % n_in] = 20.0f;
    auto rows = [&](int64_t n_rows) {
        std::vector<float> x(static_cast<size_t>(n_rows * n_in));
        std::vector<float> z(static_cast<size_t>(rank));
        for (int64_t r = 0; r < n_rows; ++r) {
            for (float& v : z) v = normal(rng);
            for (int64_t i = 0; i < n_in; ++i) {
                float s = 0.5f * normal(rng);
                for (int k = 0; k < rank; ++k) s += z[k] * a[k * n_in + i];
                x[r * n_in + i] = s * channel_scale[i];
            }
        }
        return x;
    };
    p.calib = rows(n_calib);
    p.test = rows(n_test);
    return p;
}

// Quantizes p.w as `type` with method m after observing p.calib (layer 0, ATTN_NORM); returns the weight the model
// computes with, [n_out, n_in] (decoded, input scales folded), or an empty vector when a call failed.
inline std::vector<float> quantize_with(method& m, const problem& p, uint32_t type, bool with_input_scales) {
    for (size_t r0 = 0; r0 < p.calib.size(); r0 += static_cast<size_t>(100 * p.n_in)) {  // steps of 100 rows
        const size_t r1 = std::min(p.calib.size(), r0 + static_cast<size_t>(100 * p.n_in));
        const std::vector<float> step(p.calib.begin() + static_cast<std::ptrdiff_t>(r0),
                                      p.calib.begin() + static_cast<std::ptrdiff_t>(r1));
        EXPECT_EQ(m.observe(0, TROUPE_TAP_ATTN_NORM, step, p.n_in), TROUPE_OK) << m.message();
    }
    const size_t row_bytes = troupe_row_bytes(type, p.n_in);
    std::vector<uint8_t> out(row_bytes * static_cast<size_t>(p.n_out) + 64, 0xAB);  // 64 guard bytes
    std::vector<float> scales(static_cast<size_t>(p.n_in), -1.0f);
    const troupe_quantize_weight weight = {sizeof(troupe_quantize_weight),
                                           TROUPE_QUANTIZE_WEIGHT_VERSION,
                                           "blk.0.attn_q.weight",
                                           p.w.data(),
                                           p.n_out,
                                           type,
                                           out.data()};
    const troupe_quantize_group group = {sizeof(troupe_quantize_group),
                                         TROUPE_QUANTIZE_GROUP_VERSION,
                                         0,
                                         TROUPE_TAP_ATTN_NORM,
                                         p.n_in,
                                         1,
                                         &weight,
                                         with_input_scales ? scales.data() : nullptr};
    const int32_t rc = m.d->quantize->quantize_group(m.instance, &group, &k_parallel);
    EXPECT_EQ(rc, TROUPE_OK) << m.message();
    if (rc != TROUPE_OK) return {};
    for (size_t i = row_bytes * static_cast<size_t>(p.n_out); i < out.size(); ++i) {
        EXPECT_EQ(out[i], 0xAB) << "wrote past the last row";
        if (out[i] != 0xAB) return {};
    }
    if (with_input_scales) {
        for (float s : scales) {
            EXPECT_TRUE(std::isfinite(s) && s > 0.0f) << "input scale " << s;
            if (!(std::isfinite(s) && s > 0.0f)) return {};
        }
    }
    std::vector<float> q(p.w.size());
    for (int64_t r = 0; r < p.n_out; ++r) {
        troupe::ref::dequantize_row(static_cast<troupe::ggml_type>(type), out.data() + r * row_bytes,
                                    q.data() + r * p.n_in, p.n_in);
        if (with_input_scales) {
            for (int64_t i = 0; i < p.n_in; ++i) q[r * p.n_in + i] /= scales[i];
        }
    }
    return q;
}

// ||(W - Q) X||² over the held-out rows.
inline double output_error(const problem& p, const std::vector<float>& q) {
    std::vector<double> diff(p.w.size());
    for (size_t i = 0; i < diff.size(); ++i) diff[i] = static_cast<double>(p.w[i]) - q[i];
    double err = 0.0;
    const int64_t n_test = static_cast<int64_t>(p.test.size()) / p.n_in;
    for (int64_t t = 0; t < n_test; ++t) {
        const float* x = p.test.data() + t * p.n_in;
        for (int64_t r = 0; r < p.n_out; ++r) {
            double y = 0.0;
            for (int64_t i = 0; i < p.n_in; ++i) y += diff[r * p.n_in + i] * x[i];
            err += y * y;
        }
    }
    return err;
}

}  // namespace troupe::testing::quantize
