#include "kernels/cpu/limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/limits_kernels.h"

namespace troupe::cpu {
namespace {

using clock_type = std::chrono::steady_clock;

float read_stream_scalar(const float* p, size_t n) {
    float s[8] = {};
    for (size_t i = 0; i < n; i += 8) {
        for (int j = 0; j < 8; ++j) s[j] += p[i + j];
    }
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

double fma_chains_scalar(int64_t iterations) {
    float acc[8] = {};
    for (int64_t i = 0; i < iterations; ++i) {
        for (float& a : acc) a = a * 0.999999f + 1e-7f;
    }
    volatile float sink = acc[0];
    (void)sink;
    return static_cast<double>(iterations) * 8 * 2;
}

}  // namespace

double measure_read_bandwidth(thread_pool& pool, size_t buffer_bytes) {
    const size_t n = buffer_bytes / sizeof(float) / 64 * 64;
    aligned_buffer buffer;
    float* data = buffer.as<float>(n);
    const int64_t n_chunks = pool.n_threads();
    const auto chunk = [&](int64_t c, size_t& begin, size_t& count) {
        begin = n * c / n_chunks / 64 * 64;
        const size_t end = c + 1 == n_chunks ? n : n * (c + 1) / n_chunks / 64 * 64;
        count = end - begin;
    };
    // First touch by the thread that reads it (pages local to its memory node).
    pool.parallel_for(n_chunks, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            size_t begin = 0, count = 0;
            chunk(c, begin, count);
            std::memset(data + begin, 0, count * sizeof(float));
        }
    });
    const dispatch_level level = best_level();
    std::atomic<float> sink{0};
    double best = 0;
    for (int run = 0; run < 10; ++run) {
        const auto start = clock_type::now();
        pool.parallel_for(n_chunks, [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c) {
                size_t begin = 0, count = 0;
                chunk(c, begin, count);
                float s = 0;
                switch (level) {
                    case dispatch_level::avx512:
                        s = detail::read_stream_avx512(data + begin, count);
                        break;
                    case dispatch_level::avx2:
                        s = detail::read_stream_avx2(data + begin, count);
                        break;
                    case dispatch_level::scalar:
                        s = read_stream_scalar(data + begin, count);
                        break;
                }
                sink.store(s, std::memory_order_relaxed);
            }
        });
        const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
        best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
    }
    return best;
}

double measure_fma_peak(thread_pool& pool) {
    const dispatch_level level = best_level();
    // Many short runs (~1 ms): on a shared machine the best one is the one no other process interrupted.
    const int64_t iterations = 200'000;
    double best = 0;
    for (int run = 0; run < 30; ++run) {
        std::atomic<double> flops{0};
        const auto start = clock_type::now();
        pool.parallel_for(pool.n_threads(), [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c) {
                double f = 0;
                switch (level) {
                    case dispatch_level::avx512:
                        f = detail::fma_chains_avx512(iterations);
                        break;
                    case dispatch_level::avx2:
                        f = detail::fma_chains_avx2(iterations);
                        break;
                    case dispatch_level::scalar:
                        f = fma_chains_scalar(iterations / 4);
                        break;
                }
                double cur = flops.load();
                while (!flops.compare_exchange_weak(cur, cur + f)) {
                }
            }
        });
        const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
        best = std::max(best, flops.load() / seconds / 1e9);
    }
    return best;
}

}  // namespace troupe::cpu
