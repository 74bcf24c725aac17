// The actor layer itself: lanes, bounded mailboxes, supervision, the latency histogram.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <thread>
#include <variant>

#include "core/runtime/lane.h"
#include "core/runtime/latency_histogram.h"
#include "core/runtime/mailbox.h"

namespace troupe {
namespace {

struct ping {
    static constexpr const char* name = "ping";
    int value = 0;
};
struct boom {
    static constexpr const char* name = "boom";
    int value = 0;
};
using test_msg = std::variant<ping, boom>;

struct recorder {
    std::vector<int> handled;
    std::vector<std::string> failures;
};

mailbox<test_msg> make_box(lane& l, recorder& r, int32_t capacity) {
    return mailbox<test_msg>(
        l, "test", capacity,
        [&r](test_msg& m) {
            if (auto* b = std::get_if<boom>(&m)) throw std::runtime_error("boom " + std::to_string(b->value));
            r.handled.push_back(std::get<ping>(m).value);
        },
        [&r](const test_msg& m, const std::string& what) { r.failures.push_back(what); });
}

TEST(lane, runs_handlers_in_post_order_on_the_callers_thread) {
    lane l("manual");
    std::vector<int> order;
    for (int i = 0; i < 5; ++i) l.post([&order, i] { order.push_back(i); });
    l.post([&] { l.post([&order] { order.push_back(99); }); });  // posted while running: runs too
    EXPECT_TRUE(order.empty());
    EXPECT_EQ(l.run_until_idle(), 7u);
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 99}));
}

TEST(lane, a_threaded_lane_runs_on_its_own_thread_and_stop_runs_what_is_queued) {
    lane l("worker");
    l.start();
    std::vector<int> order;
    std::thread::id ran_on;
    bool in_lane = false;
    for (int i = 0; i < 1000; ++i) l.post([&order, i] { order.push_back(i); });
    l.post([&] {
        ran_on = std::this_thread::get_id();
        in_lane = l.in_lane();
    });
    l.stop();
    EXPECT_EQ(order.size(), 1000u);
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
    EXPECT_NE(ran_on, std::this_thread::get_id());
    EXPECT_TRUE(in_lane);
    EXPECT_FALSE(l.in_lane());
}

TEST(mailbox, a_full_mailbox_refuses_a_bounded_post_until_it_drains) {
    lane l("manual");
    recorder r;
    auto box = make_box(l, r, 2);
    EXPECT_TRUE(box.try_post(ping{1}));
    EXPECT_TRUE(box.try_post(ping{2}));
    EXPECT_FALSE(box.try_post(ping{3}));
    box.post(ping{4});  // control posts are not refused
    EXPECT_EQ(box.stats().pending, 2);
    l.run_until_idle();
    EXPECT_EQ(r.handled, (std::vector<int>{1, 2, 4}));
    EXPECT_TRUE(box.try_post(ping{5}));
    l.run_until_idle();
    auto s = box.stats();
    EXPECT_EQ(s.n_rejected, 1);
    EXPECT_EQ(s.high_water, 2);
    EXPECT_EQ(s.pending, 0);
    EXPECT_EQ(s.n_handled, 4);
    box.close();
    EXPECT_FALSE(box.try_post(ping{6}));
}

TEST(mailbox, a_throwing_handler_is_reported_with_its_message_and_the_next_message_is_handled) {
    lane l("manual");
    recorder r;
    auto box = make_box(l, r, 8);
    std::vector<std::string> traced;
    l.set_trace([&](const std::string& e) { traced.push_back(e); });
    box.post(ping{1});
    box.post(boom{7});
    box.post(ping{2});
    l.run_until_idle();
    EXPECT_EQ(r.handled, (std::vector<int>{1, 2}));
    EXPECT_EQ(r.failures, (std::vector<std::string>{"boom 7"}));
    EXPECT_EQ(box.stats().n_handler_failures, 1);
    EXPECT_EQ(traced, (std::vector<std::string>{"test <- ping", "test <- boom", "test <- ping"}));
}

TEST(mailbox, bounded_posts_from_many_threads_never_exceed_the_capacity) {
    lane l("worker");
    recorder r;
    auto box = make_box(l, r, 64);
    std::atomic<int> accepted{0};
    std::vector<std::thread> posters;
    for (int t = 0; t < 4; ++t) {
        posters.emplace_back([&] {
            for (int i = 0; i < 500; ++i) accepted += box.try_post(ping{i}) ? 1 : 0;
        });
    }
    for (auto& t : posters) t.join();
    EXPECT_EQ(accepted.load(), 64);  // nothing ran yet: the lane is not started
    l.start();
    l.stop();
    EXPECT_EQ(static_cast<int>(r.handled.size()), 64);
    EXPECT_EQ(box.stats().n_rejected, 4 * 500 - 64);
}

TEST(latency_histogram, quantiles_are_within_two_percent_of_the_exact_ones) {
    latency_histogram h;
    std::mt19937_64 rng(3);
    std::lognormal_distribution<double> dist(9.0, 1.5);  // around 8 us, long tail
    std::vector<int64_t> xs;
    for (int i = 0; i < 20000; ++i) {
        auto v = static_cast<int64_t>(dist(rng));
        xs.push_back(v);
        h.record(v);
    }
    std::sort(xs.begin(), xs.end());
    for (double q : {0.5, 0.9, 0.99}) {
        double exact = static_cast<double>(xs[static_cast<size_t>(q * xs.size()) - 1]);
        EXPECT_NEAR(h.quantile_ns(q), exact, exact * 0.02) << "q=" << q;
    }
    auto s = h.summary();
    EXPECT_EQ(s.n, 20000);
    EXPECT_DOUBLE_EQ(s.max_us, static_cast<double>(xs.back()) / 1e3);
    h.reset();
    EXPECT_EQ(h.summary().n, 0);
    EXPECT_EQ(h.quantile_ns(0.5), 0.0);
}

TEST(latency_histogram, small_values_are_exact) {
    latency_histogram h;
    for (int64_t v : {5, 7, 9, 11, 13}) h.record(v);
    EXPECT_EQ(h.quantile_ns(0.5), 9.0);
    EXPECT_EQ(h.quantile_ns(1.0), 13.0);
}

}  // namespace
}  // namespace troupe
