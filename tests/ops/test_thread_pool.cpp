#include <gtest/gtest.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/limits.h"
#include "kernels/cpu/thread_pool.h"

namespace troupe {
namespace {

TEST(thread_pool, parallel_for_visits_every_index_exactly_once) {
    for (int threads : {1, 2, 3, 5}) {
        cpu::thread_pool pool(threads);
        EXPECT_EQ(pool.n_threads(), threads);
        for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
            std::vector<std::atomic<int>> hits(n);
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                ASSERT_LE(0, b);
                ASSERT_LE(b, e);
                ASSERT_LE(e, n);
                for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
            });
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n;
        }
    }
}

TEST(thread_pool, work_runs_on_several_threads_and_back_to_back_calls_complete) {
    cpu::thread_pool pool(2);
    // Two chunks that each wait for the other's thread: only completes if a worker takes one of them.
    std::atomic<int> arrived{0};
    std::atomic<bool> met{false};
    pool.parallel_for(2, [&](int64_t, int64_t) {
        arrived.fetch_add(1);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (arrived.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        if (arrived.load() == 2) met.store(true);
    });
    EXPECT_TRUE(met.load());
    int64_t total = 0;
    std::atomic<int64_t> sum{0};
    for (int i = 0; i < 20000; ++i) {
        pool.parallel_for(4, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
        total += 4;
    }
    EXPECT_EQ(sum.load(), total);
}

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

TEST(thread_pool, the_caller_sleeps_while_a_long_chunk_runs_on_a_worker) {
    cpu::thread_pool pool(2, /*spin_us=*/100);
    const auto caller = std::this_thread::get_id();
    std::atomic<bool> worker_started{false};
    double cpu_after_own_chunk = 0;
    const auto wall = std::chrono::steady_clock::now();
    pool.parallel_for(2, [&](int64_t, int64_t) {
        if (std::this_thread::get_id() == caller) {
            // Wait (sleeping) until the worker holds the other chunk, then stop working.
            for (int i = 0; i < 5000 && !worker_started.load(); ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            cpu_after_own_chunk = thread_cpu_seconds();
        } else {
            worker_started.store(true);
            std::this_thread::sleep_for(std::chrono::milliseconds(150));
        }
    });
    const double cpu_waiting = thread_cpu_seconds() - cpu_after_own_chunk;
    ASSERT_TRUE(worker_started.load());
    EXPECT_GE(std::chrono::steady_clock::now() - wall, std::chrono::milliseconds(100));
    EXPECT_LT(cpu_waiting, 0.03) << "the caller spun while waiting for the worker";
}

TEST(thread_pool, no_chunk_runs_twice_or_after_its_call_returned_in_back_to_back_calls_of_varying_size) {
    // Changing n changes the number of chunks between calls: the case where a worker that read the previous
    // job's counter could claim a chunk of the next one. More threads than cores, so workers get preempted
    // inside the claim; the caller does as little as possible between calls to keep the window open.
    for (int threads : {2, 4, 8}) {
        cpu::thread_pool pool(threads, /*spin_us=*/1000);
        std::atomic<int64_t> total{0};
        std::atomic<int> in_flight{0};
        const int n_calls = threads == 2 ? 100000 : 5000;  // oversubscribed pools are slow by design
        for (int call = 0; call < n_calls; ++call) {
            const int64_t n = 1 + (call * 7) % 61;
            total.store(0, std::memory_order_relaxed);
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                in_flight.fetch_add(1);
                total.fetch_add(e - b);
                in_flight.fetch_sub(1);
            });
            const int64_t done = total.load();
            const int running = in_flight.load();
            if (done != n || running != 0) {
                FAIL() << threads << " threads, call " << call << ": " << done << " of " << n
                       << " items when it returned, " << running << " chunks still running";
            }
        }
    }
}

TEST(thread_pool, a_nested_parallel_for_runs_inline) {
    cpu::thread_pool pool(2);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(
        2, [&](int64_t, int64_t) { pool.parallel_for(10, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); }); });
    EXPECT_EQ(sum.load(), 20);
}

TEST(thread_pool, sleeping_workers_wake_for_the_next_job) {
    cpu::thread_pool pool(2, /*spin_us=*/10);
    std::atomic<int64_t> sum{0};
    for (int i = 0; i < 3; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        pool.parallel_for(2, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    }
    EXPECT_EQ(sum.load(), 6);
}

TEST(cpu_features, scalar_is_always_available_and_levels_can_be_forced) {
    const auto levels = cpu::available_levels();
    ASSERT_FALSE(levels.empty());
    EXPECT_EQ(levels.front(), cpu::dispatch_level::scalar);
    EXPECT_EQ(levels.back(), cpu::best_level());
    const auto saved = cpu::active_level();
    for (auto level : levels) {
        cpu::force_level(level);
        EXPECT_EQ(cpu::active_level(), level);
    }
    cpu::force_level(saved);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TEST(limits, measured_bandwidth_and_fma_peak_are_positive_and_plausible) {
    cpu::thread_pool pool(2);
    const double gbs = cpu::measure_read_bandwidth(pool, size_t{16} << 20);
    EXPECT_GT(gbs, 0.5);
    EXPECT_LT(gbs, 5000.0);
    const double gflops = cpu::measure_fma_peak(pool);
    EXPECT_GT(gflops, 0.5);
    EXPECT_LT(gflops, 100000.0);
}

TEST(limits, step_read_stream_times_reads_of_any_size_wrapping_around_its_buffer) {
    cpu::thread_pool pool(2);
    cpu::step_read_stream stream(pool, size_t{16} << 20);  // pieces of 64 KiB
    // Less than a piece, a few pieces, and more than the whole buffer from a position inside it (wraps twice).
    for (const size_t bytes : {size_t{1}, size_t{200} << 10, size_t{40} << 20}) {
        const double seconds = stream.read(bytes);
        EXPECT_GT(seconds, 0.0) << bytes;
        EXPECT_LT(seconds, 10.0) << bytes;
    }
    // The rate of a read of 64 MiB: plausible for any machine.
    const double gbs = static_cast<double>(size_t{64} << 20) / stream.read(size_t{64} << 20) / 1e9;
    EXPECT_GT(gbs, 0.5);
    EXPECT_LT(gbs, 5000.0);
}

}  // namespace
}  // namespace troupe
