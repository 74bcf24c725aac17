// The engine end to end with a fake model and codec on threaded lanes (test_engine.cpp drives one caller-driven
// lane): the same sampled text with and without planning ahead, stop draining the requests in flight or failing
// what its timeout cuts off, and concurrent submits and cancels ending every request exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "actors/engine/engine.h"
#include "tests/actors/fakes.h"
#include "tests/actors/sink_recorder.h"

namespace troupe {
namespace {

using testing::fake_model_params;
using testing::fake_model_runner;
using testing::greedy;
using testing::record_into;
using testing::sink_record;

TEST(engine, threaded_lanes_give_the_same_sampled_text_with_and_without_planning_ahead) {
    for (lane_layout layout : {lane_layout::control_and_compute, lane_layout::lane_per_actor}) {
        std::vector<std::string> texts[2];
        int64_t n_ahead[2] = {0, 0};
        for (int ahead = 0; ahead < 2; ++ahead) {
            fake_model_params model;
            model.step_time = std::chrono::microseconds(300);
            auto runner = std::make_shared<fake_model_runner>(model);
            engine_params params;
            params.lanes = layout;
            params.plan_ahead = ahead != 0;
            engine eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), {}}, params);
            ASSERT_TRUE(eng.start().ok());
            std::vector<std::shared_ptr<sink_record>> rs;
            const char* prompts[] = {"ab", "mno", "x", "fgh", "qr", "st"};
            for (int i = 0; i < 6; ++i) {
                sampling_params p;
                p.temperature = 0.9f;
                p.top_k = 0;
                p.top_p = 1;
                p.min_p = 0;
                p.max_tokens = 4 + 3 * i;
                p.seed = 200 + static_cast<uint64_t>(i);
                rs.push_back(std::make_shared<sink_record>());
                ASSERT_TRUE(eng.submit(request{prompts[i], p, std::nullopt}, record_into(rs.back())).ok());
            }
            ASSERT_TRUE(eng.stop(std::chrono::seconds(30)).ok());
            for (const auto& r : rs) {
                EXPECT_EQ(r->n_endings, 1);
                texts[ahead].push_back(r->text);
            }
            n_ahead[ahead] = eng.snapshot().steps.n_steps_ahead;
        }
        EXPECT_EQ(texts[1], texts[0]);
        EXPECT_EQ(n_ahead[0], 0);
        EXPECT_GT(n_ahead[1], 0);
    }
}

TEST(engine, stop_drains_the_requests_in_flight_on_threaded_lanes) {
    for (lane_layout layout : {lane_layout::one_lane, lane_layout::control_and_compute, lane_layout::lane_per_actor}) {
        fake_model_params model;
        model.step_time = std::chrono::microseconds(200);
        auto runner = std::make_shared<fake_model_runner>(model);
        engine_params params;
        params.lanes = layout;
        engine eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), {}}, params);
        ASSERT_TRUE(eng.start().ok());
        std::vector<std::shared_ptr<sink_record>> rs;
        for (const char* prompt : {"ab", "cd", "ef", "gh"}) {
            rs.push_back(std::make_shared<sink_record>());
            ASSERT_TRUE(eng.submit(request{prompt, greedy(20), std::nullopt}, record_into(rs.back())).ok());
        }
        status st = eng.stop(std::chrono::seconds(20));
        EXPECT_TRUE(st.ok()) << st.message();
        EXPECT_EQ(rs[0]->text, "cdefghijklmnopqrstuv");
        EXPECT_EQ(rs[3]->text, "ijklmnopqrstuvwxyz");
        for (const auto& r : rs) EXPECT_EQ(r->n_endings, 1);
        EXPECT_FALSE(eng.submit(request{"ab", greedy(2), std::nullopt}, {}).ok());
        EXPECT_EQ(eng.stats().n_in_flight, 0);
    }
}

TEST(engine, stop_fails_what_the_drain_timeout_cuts_off_with_the_reason) {
    fake_model_params model;
    model.step_time = std::chrono::milliseconds(5);
    auto runner = std::make_shared<fake_model_runner>(model);
    engine eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), {}}, engine_params{});
    ASSERT_TRUE(eng.start().ok());
    auto r = std::make_shared<sink_record>();
    sampling_params p = greedy(60);
    p.ignore_eos = true;
    ASSERT_TRUE(eng.submit(request{"a", p, std::nullopt}, record_into(r)).ok());
    status st = eng.stop(std::chrono::milliseconds(20));
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("1 requests unfinished"), std::string::npos) << st.message();
    ASSERT_TRUE(r->error.has_value());
    EXPECT_NE(r->error->find("drain timeout of 20 ms"), std::string::npos) << *r->error;
    EXPECT_EQ(r->n_endings, 1);
}

// Many requests on five threads with cancels from another thread and small queues: every accepted
// request ends exactly once (done, cancelled, or refused as overloaded by the scheduler), nothing is
// said to a sink after its end, and the engine's counts add up.
TEST(engine, concurrent_submits_and_cancels_end_every_request_exactly_once) {
    struct tally {
        std::mutex m;
        int n_endings = 0;
        bool text_after_end = false;
        std::string error;
    };
    fake_model_params model;
    model.n_ctx = 96;
    model.block_size = 16;  // paged: several blocks per sequence
    model.n_blocks = 24;
    model.step_time = std::chrono::microseconds(50);
    auto runner = std::make_shared<fake_model_runner>(model);
    runner->keep_batches(false);
    engine_params params;
    params.lanes = lane_layout::lane_per_actor;
    params.max_running = 6;
    params.submit_capacity = 16;
    params.max_waiting = 8;  // some requests are refused later, by the scheduler
    engine eng(engine_parts{runner, std::make_shared<testing::fake_codec>(), {}}, params);
    ASSERT_TRUE(eng.start().ok());

    const int n = 300;
    std::vector<std::shared_ptr<tally>> tallies;
    std::vector<request_id> accepted;
    std::mt19937 rng(5);
    std::atomic<bool> done_submitting{false};
    std::mutex ids_mutex;
    std::thread canceller([&] {
        std::mt19937 crng(6);
        while (!done_submitting.load()) {
            std::lock_guard lock(ids_mutex);
            if (!accepted.empty()) eng.cancel(accepted[crng() % accepted.size()]);
            std::this_thread::yield();
        }
    });
    int n_refused = 0;
    for (int i = 0; i < n; ++i) {
        auto t = std::make_shared<tally>();
        request_sink sink;
        sink.on_text = [t](std::string_view) {
            std::lock_guard lock(t->m);
            if (t->n_endings > 0) t->text_after_end = true;
        };
        sink.on_done = [t](finish_reason, const usage&, const timings&) {
            std::lock_guard lock(t->m);
            t->n_endings++;
        };
        sink.on_error = [t](const std::string& m) {
            std::lock_guard lock(t->m);
            t->n_endings++;
            t->error = m;
        };
        sampling_params p = greedy(1 + static_cast<int32_t>(rng() % 40));
        if (i % 3 == 0) p.stop_strings = {"mno"};
        const std::string prompt(1 + rng() % 5, static_cast<char>('a' + rng() % 20));
        auto id = eng.submit(request{prompt, p, std::nullopt}, sink);
        while (!id.ok()) {  // a client backing off from "overloaded"
            ASSERT_EQ(id.message().rfind("overloaded:", 0), 0u) << id.message();
            n_refused++;
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            id = eng.submit(request{prompt, p, std::nullopt}, sink);
        }
        tallies.push_back(t);
        if (i % 4 == 0) eng.cancel(*id);  // at once: it is cancelled wherever it has got to
        std::lock_guard lock(ids_mutex);
        accepted.push_back(*id);
    }
    done_submitting.store(true);
    canceller.join();
    status st = eng.stop(std::chrono::seconds(30));
    EXPECT_TRUE(st.ok()) << st.message();
    for (const auto& t : tallies) {
        EXPECT_EQ(t->n_endings, 1);
        EXPECT_FALSE(t->text_after_end);
        if (!t->error.empty()) {
            EXPECT_EQ(t->error.rfind("overloaded: ", 0), 0u) << t->error;
        }
    }
    auto s = eng.stats();
    EXPECT_EQ(s.n_in_flight, 0);
    EXPECT_EQ(s.n_submitted, n);
    EXPECT_EQ(s.n_refused, n_refused);
    EXPECT_EQ(s.n_completed + s.n_cancelled + s.n_failed, s.n_submitted);
    EXPECT_GT(s.n_cancelled, 0);
    EXPECT_GT(s.n_completed, 0);
    EXPECT_GT(n_refused, 0);
}

}  // namespace
}  // namespace troupe
