#include "kernels/cpu/limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/huge_page_buffer.h"
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

// Both measurements hand the pool many small pieces (the pool's threads claim them), so every thread
// works until the end even if one starts late, and take the best of many short runs: on a shared machine
// that is the run no other process interrupted.

namespace {

constexpr int64_t k_read_pieces = 256;

// A buffer of about `bytes` (whole pieces of 64 floats each) in the memory the weights are streamed from
// (kernels.weights: copy; plain pages where huge ones are refused), first touched by the pool's threads (pages
// spread like the reads).
class read_buffer {
public:
    read_buffer(thread_pool& pool, size_t bytes)
        : piece_(std::max<size_t>(64, bytes / sizeof(float) / k_read_pieces / 64 * 64)) {
        const size_t n = piece_ * k_read_pieces;
        data_ = huge_.allocate(n * sizeof(float)) ? reinterpret_cast<float*>(huge_.data()) : plain_.as<float>(n);
        pool.parallel_for(k_read_pieces, [&](int64_t p0, int64_t p1) {
            std::memset(data_ + p0 * piece_, 0, (p1 - p0) * piece_ * sizeof(float));
        });
    }
    size_t bytes() const { return piece_ * k_read_pieces * sizeof(float); }

    // Reads the whole buffer once with the pool's threads (pieces claimed by the threads, so every thread works
    // until the end even if one starts late) and the given AVX-512 prefetch scheme.
    void read(thread_pool& pool, detail::stream_prefetch how) const { read_pieces(pool, 0, k_read_pieces, how); }

    // Reads n pieces from piece `first` on, wrapping around the buffer's end.
    void read_pieces(thread_pool& pool, int64_t first, int64_t n, detail::stream_prefetch how) const {
        const dispatch_level level = best_level();
        std::atomic<float> sink{0};
        const auto read_run = [&](int64_t p0, int64_t p1) {  // pieces [p0, p1) of the buffer: contiguous
            const float* p = data_ + p0 * piece_;
            const size_t count = (p1 - p0) * piece_;
            float s = 0;
            switch (level) {
                case dispatch_level::avx512:
                    s = detail::read_stream_avx512(p, count, how);
                    break;
                case dispatch_level::avx2:
                    s = detail::read_stream_avx2(p, count);
                    break;
                case dispatch_level::scalar:
                    s = read_stream_scalar(p, count);
                    break;
            }
            sink.store(s, std::memory_order_relaxed);
        };
        pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1;) {  // split where the range wraps around
                const int64_t p = (first + i) % k_read_pieces;
                const int64_t run = std::min(i1 - i, k_read_pieces - p);
                read_run(p, p + run);
                i += run;
            }
        });
    }

private:
    size_t piece_;  // floats per piece
    huge_page_buffer huge_;
    aligned_buffer plain_;
    float* data_ = nullptr;
};

}  // namespace

double measure_read_bandwidth(thread_pool& pool, size_t buffer_bytes) {
    const read_buffer buffer(pool, buffer_bytes);
    double best = 0;
    for (int run = 0; run < 12; ++run) {
        const auto start = clock_type::now();
        // every prefetch scheme the kernels use, the best
        buffer.read(pool, static_cast<detail::stream_prefetch>(run % 3));
        const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
        best = std::max(best, static_cast<double>(buffer.bytes()) / seconds / 1e9);
    }
    return best;
}

struct step_read_stream::state {
    read_buffer buffer;
    size_t piece_bytes;
    int64_t next = 0;  // the piece the next read starts at
};

step_read_stream::step_read_stream(thread_pool& pool, size_t buffer_bytes)
    : pool_(pool), state_(new state{read_buffer(pool, buffer_bytes), 0}) {
    state_->piece_bytes = state_->buffer.bytes() / k_read_pieces;
}

step_read_stream::~step_read_stream() {
    delete state_;
}

double step_read_stream::read(size_t bytes) {
    const int64_t n = std::max<int64_t>(
        1, static_cast<int64_t>((bytes + state_->piece_bytes / 2) / state_->piece_bytes));  // whole pieces, nearest
    const int64_t first = state_->next;
    state_->next = (first + n) % k_read_pieces;
    const auto start = clock_type::now();
    state_->buffer.read_pieces(pool_, first, n, detail::stream_prefetch::l1_and_l2);
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

namespace {

// Best rate (G per second) of `chains(level)` run on every thread of the pool in many small pieces.
template <class Chains>
double measure_peak(thread_pool& pool, const Chains& chains) {
    const dispatch_level level = best_level();
    const int64_t n_pieces = 8 * pool.n_threads();
    double best = 0;
    for (int run = 0; run < 30; ++run) {
        std::atomic<double> ops{0};
        const auto start = clock_type::now();
        pool.parallel_for(n_pieces, [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c) {
                const double f = chains(level);
                double cur = ops.load();
                while (!ops.compare_exchange_weak(cur, cur + f)) {
                }
            }
        });
        const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
        best = std::max(best, ops.load() / seconds / 1e9);
    }
    return best;
}

}  // namespace

double measure_fma_peak(thread_pool& pool) {
    constexpr int64_t iterations = 50'000;  // per piece: ~0.2 ms with AVX-512
    return measure_peak(pool, [](dispatch_level level) {
        switch (level) {
            case dispatch_level::avx512:
                return detail::fma_chains_avx512(iterations);
            case dispatch_level::avx2:
                return detail::fma_chains_avx2(iterations);
            case dispatch_level::scalar:
                return fma_chains_scalar(iterations / 4);
        }
        return 0.0;
    });
}

double measure_int8_peak(thread_pool& pool) {
    constexpr int64_t iterations = 50'000;
    return measure_peak(pool, [](dispatch_level level) {
        switch (level) {
            case dispatch_level::avx512:
                return detail::int8_dot_chains_avx512(iterations);
            case dispatch_level::avx2:
                return detail::int8_dot_chains_avx2(iterations);
            case dispatch_level::scalar:
                return 0.0;
        }
        return 0.0;
    });
}

double measure_int8_nibble_peak(thread_pool& pool) {
    constexpr int64_t iterations = 10'000;  // 8 products per chain an iteration
    return measure_peak(pool, [](dispatch_level level) {
        switch (level) {
            case dispatch_level::avx512:
                return detail::int8_dot_chains_avx512(iterations * 4);
            case dispatch_level::avx2:
                return detail::int8_nibble_chains_avx2(iterations);
            case dispatch_level::scalar:
                return 0.0;
        }
        return 0.0;
    });
}

}  // namespace troupe::cpu
