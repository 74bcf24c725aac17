// Shared helpers of the plugin tests: hosts pointed at the built plugins or at the test fixtures,
// parallel_for functions (inline and threaded), and seeded random data.
#pragma once

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/model/ops.h"
#include "core/plugin_host/plugin_host.h"

namespace troupe::testing {

inline plugin_host real_plugins() {
    return plugin_host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR});
}
inline plugin_host fixture_plugins() {
    return plugin_host(plugin_host_options{TROUPE_TEST_FIXTURE_DIR});
}

// No parallel_for: the plugin runs the whole range itself.
inline parallel_for_fn no_parallel_for() {
    return {};
}

// Splits [0, n) into `n_threads` uneven ranges on fresh threads (odd splits catch range bugs).
inline parallel_for_fn threaded_parallel_for(int n_threads = 3) {
    return [n_threads](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
        std::vector<std::thread> threads;
        for (int i = 0; i < n_threads; ++i) {
            const int64_t begin = n * i / n_threads;
            const int64_t end = n * (i + 1) / n_threads;
            if (begin < end) threads.emplace_back([&fn, begin, end] { fn(begin, end); });
        }
        for (auto& t : threads) t.join();
    };
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

inline YAML::Node yaml(const std::string& text) {
    return YAML::Load(text);
}

}  // namespace troupe::testing
