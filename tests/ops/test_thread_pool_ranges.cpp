// thread_pool::parallel_ranges: every item once, shares streamed front to back, stealing from a stalled
// thread's share, and no piece running after its call returned when jobs of both kinds alternate.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace troupe {
namespace {

TEST(thread_pool_ranges, visits_every_index_exactly_once_in_pieces_of_the_grain) {
    for (int threads : {1, 2, 3, 5}) {
        cpu::thread_pool pool(threads);
        for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
            for (int64_t grain : {1, 3, 16, 2000}) {
                std::vector<std::atomic<int>> hits(n);
                pool.parallel_ranges(n, grain, [&](int64_t b, int64_t e) {
                    ASSERT_LE(0, b);
                    ASSERT_LT(b, e);
                    ASSERT_LE(e, n);
                    // A piece is one grain (the last one shorter), or everything when the job runs inline.
                    ASSERT_TRUE((b % grain == 0 && e - b <= grain) || (b == 0 && e == n));
                    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
                });
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " grain " << grain;
            }
        }
    }
}

TEST(thread_pool_ranges, given_shares_are_cut_into_grains_from_their_own_start) {
    for (int threads : {2, 3}) {
        cpu::thread_pool pool(threads);
        const std::vector<int64_t> bounds = threads == 2 ? std::vector<int64_t>{0, 37, 1000}
                                                         : std::vector<int64_t>{0, 0, 513, 514};  // an empty share too
        const int64_t n = bounds.back(), grain = 16;
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_ranges(bounds, grain, [&](int64_t b, int64_t e) {
            size_t s = 0;
            while (bounds[s + 1] <= b) ++s;  // the share holding b
            ASSERT_LE(e, bounds[s + 1]) << "a piece crosses a share bound";
            ASSERT_EQ((b - bounds[s]) % grain, 0);
            ASSERT_TRUE(e - b == grain || e == bounds[s + 1]);
            for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " item " << i;
    }
}

TEST(thread_pool_ranges, the_caller_streams_share_zero_at_every_call) {
    // Thread i takes share i when it is there in time: the caller claims share 0 right after publishing the job,
    // the worker starts with share 1. (A preempted caller may lose its share now and then: hence 180 of 200.)
    cpu::thread_pool pool(2);
    const auto caller = std::this_thread::get_id();
    const std::vector<int64_t> bounds{0, 500, 1000};
    int caller_took_share_zero = 0;
    for (int call = 0; call < 200; ++call) {
        std::atomic<int64_t> callers_first{-1};
        pool.parallel_ranges(bounds, 10, [&](int64_t b, int64_t) {
            int64_t none = -1;
            if (std::this_thread::get_id() == caller) callers_first.compare_exchange_strong(none, b);
        });
        caller_took_share_zero += callers_first.load() == 0 ? 1 : 0;
    }
    EXPECT_GE(caller_took_share_zero, 180);
}

TEST(thread_pool_ranges, more_grains_than_a_share_word_holds_still_visit_every_index_once) {
    cpu::thread_pool pool(2);
    const int64_t n = 3'000'000;  // grain 1 would be 3M grains: the pool coarsens the grain
    std::vector<std::atomic<uint8_t>> hits(n);
    pool.parallel_ranges(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

TEST(thread_pool_ranges, each_thread_streams_its_share_front_to_back_before_stealing) {
    cpu::thread_pool pool(2);
    const int64_t n = 4000, grain = 10;
    for (int rep = 0; rep < 20; ++rep) {
        std::mutex m;
        std::map<std::thread::id, std::vector<int64_t>> begins;  // per thread, in the order it ran them
        pool.parallel_ranges(n, grain, [&](int64_t b, int64_t) {
            std::lock_guard lock(m);
            begins[std::this_thread::get_id()].push_back(b);
        });
        for (const auto& [id, seq] : begins) {
            // A thread opens a share at its first grain (grains [0, 200) or [200, 400) for two threads) and runs
            // its grains one after another to the end of the share or where a thief took over. Then it may open
            // the other share if nobody claimed it (a preempted caller loses share 0 so) and stream that too.
            // Whatever it runs after that it steals from the back of the other share: descending grains.
            const auto opens_a_share = [&](int64_t b) { return b == 0 || b == n / 2; };
            ASSERT_TRUE(opens_a_share(seq.front())) << seq.front();
            size_t i = 0;
            for (int opened = 0; opened < 2 && i < seq.size() && opens_a_share(seq[i]); ++opened) {
                ++i;
                while (i < seq.size() && seq[i] == seq[i - 1] + grain) ++i;
            }
            for (size_t j = i + 1; j < seq.size(); ++j) ASSERT_EQ(seq[j], seq[j - 1] - grain) << "piece " << j;
        }
    }
}

TEST(thread_pool_ranges, a_stalled_thread_has_the_rest_of_its_share_stolen) {
    cpu::thread_pool pool(2);
    const auto caller = std::this_thread::get_id();
    const int64_t n = 200;
    std::atomic<int64_t> by_others{0};
    std::atomic<bool> caller_stalled{false};
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_ranges(n, 1, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() == caller && !caller_stalled.exchange(true)) {
            // Hold this grain until the worker has run every other one (its share and the rest of ours).
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (by_others.load() < n - 1 && std::chrono::steady_clock::now() < deadline)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            return;
        }
        if (std::this_thread::get_id() != caller) by_others.fetch_add(e - b);
    });
    EXPECT_EQ(by_others.load(), n - 1);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(thread_pool_ranges, no_piece_runs_after_its_call_returned_when_both_kinds_of_job_alternate) {
    // Late workers (more threads than cores) must not take a grain or a chunk of the next job, whichever
    // kind it is; a share's generation tag and the claim counter's are what stop them.
    for (int threads : {2, 4, 8}) {
        cpu::thread_pool pool(threads, /*spin_us=*/1000);
        std::atomic<int64_t> total{0};
        std::atomic<int> in_flight{0};
        const auto piece = [&](int64_t b, int64_t e) {
            in_flight.fetch_add(1);
            total.fetch_add(e - b);
            in_flight.fetch_sub(1);
        };
        const int n_calls = threads == 2 ? 100000 : 5000;
        for (int call = 0; call < n_calls; ++call) {
            const int64_t n = 1 + (call * 7) % 61;
            total.store(0, std::memory_order_relaxed);
            if (call % 3 == 0) {
                pool.parallel_for(n, piece);
            } else {
                pool.parallel_ranges(n, 1 + call % 4, piece);
            }
            const int64_t done = total.load();
            const int running = in_flight.load();
            if (done != n || running != 0) {
                FAIL() << threads << " threads, call " << call << ": " << done << " of " << n
                       << " items when it returned, " << running << " pieces still running";
            }
        }
    }
}

TEST(thread_pool_ranges, a_nested_call_runs_inline) {
    cpu::thread_pool pool(2);
    std::atomic<int64_t> sum{0};
    pool.parallel_ranges(2, 1, [&](int64_t, int64_t) {
        pool.parallel_ranges(10, 2, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    });
    EXPECT_EQ(sum.load(), 20);
}

}  // namespace
}  // namespace troupe
