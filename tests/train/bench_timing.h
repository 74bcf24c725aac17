// The train benchmarks' helpers: the best of `reps` runs of f, in seconds (the least disturbed one on a shared
// machine), and their inputs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

namespace troupe::train::bench {

template <class F>
double best_seconds(int reps, F&& f) {
    using clock_type = std::chrono::steady_clock;
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = clock_type::now();
        f();
        best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    return best;
}

// Standard normal values from a generator the caller keeps (successive calls differ).
class normal_values {
public:
    explicit normal_values(uint32_t seed) : rng_(seed) {}
    std::vector<float> operator()(int64_t count) {
        std::vector<float> v(static_cast<size_t>(count));
        for (float& x : v) x = normal_(rng_);
        return v;
    }

private:
    std::mt19937 rng_;
    std::normal_distribution<float> normal_{0.0f, 1.0f};
};

}  // namespace troupe::train::bench
