// The front end stays responsive while a large prompt is parsed and tokenized (issue 11.2).
//
// Asserted by order, not by wall time. /metrics reports the requests being prepared (parsed, rendered,
// tokenized) off the I/O thread; the I/O thread answering two /metrics requests that both see the one
// large prompt still in preparation proves it served them while the prompt was being tokenized, and
// /health answers and stream events between those two answers happened during it too. A server that
// tokenizes on its I/O thread can never show the prompt in preparation: nothing else runs meanwhile. The
// preparing threads (troupe-prep) must also sit below the I/O thread (troupe-io) in priority: what keeps
// that order when the cores are short.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tests/common/shared_data.h"
#include "tests/server/live_server.h"
#include "tests/server/stall_probe.h"

namespace troupe::testing {
namespace {
using namespace std::chrono_literals;

constexpr size_t big_prompt_bytes = 1000000;

TEST(server_stall, health_and_a_running_stream_are_answered_while_a_large_prompt_is_tokenized) {
    TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
    engine_config config = test_config(model_path);
    config.server.max_body_bytes = 4 << 20;
    config.server.max_send_queue_bytes = 4 << 20;
    std::string error;
    auto live = start_live_server(config, false, error);
    ASSERT_NE(live, nullptr) << error;

    stream_watch stream(live->port, R"({"prompt":"Once upon a time","stream":true,"temperature":0,)"
                                    R"("ignore_eos":true,"max_tokens":1000})");
    http_poller health(live->port, 2ms);
    http_poller metrics(live->port, 2ms, "/metrics",
                        [](const std::string& body) { return prometheus_value(body, "troupe_requests_preparing"); });
    const auto deadline = stall_clock::now() + 60s;
    auto running = [&] {
        const auto a = stream.arrivals();
        return !a.empty() && a.back().size() >= 3 && !health.samples().empty() && !metrics.samples().empty();
    };
    while (!running() && stall_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(running()) << "the stream, /health or /metrics did not start: " << stream.error();

    const auto answers = big_prompt_storm(live->port, big_prompt_body(big_prompt_bytes), 1, 120000);
    health.stop();
    metrics.stop();
    stream.stop();
    ASSERT_EQ(answers.size(), 1u);
    // stories260K's context is far shorter than a 1 MB prompt: refused once tokenized.
    EXPECT_TRUE(answers[0].status >= 400 && answers[0].status < 500) << answers[0].status;

    // The first and last /metrics answers that saw the prompt in preparation.
    auto first = stall_clock::time_point::max();
    auto last = stall_clock::time_point::min();
    int n_seen = 0;
    for (const auto& m : metrics.samples()) {
        ASSERT_GE(m.value, 0) << "/metrics has no troupe_requests_preparing";
        if (m.answered == stall_clock::time_point{} || m.value < 1) continue;
        n_seen++;
        first = std::min(first, m.answered);
        last = std::max(last, m.sent);
    }
    ASSERT_GE(n_seen, 2) << "/metrics was never answered (twice) while the large prompt was being prepared";
    int n_health = 0;
    for (const auto& s : health.samples()) {
        if (s.sent > first && s.answered != stall_clock::time_point{} && s.answered < last) {
            EXPECT_EQ(s.status, 200);
            n_health++;
        }
    }
    int n_events = 0;
    for (const auto& s : stream.arrivals()) {
        for (const auto& t : s) n_events += t > first && t < last ? 1 : 0;
    }
    const double window_ms = std::chrono::duration<double, std::milli>(last - first).count();

    // What keeps that order on a machine whose cores are busy: the preparation runs on its own threads
    // below the I/O thread's priority, so a core goes to the I/O thread and the engine first.
    const auto io = threads_named("troupe-io");
    const auto prep = threads_named("troupe-prep");
    ASSERT_EQ(io.size(), 1u) << "no thread named troupe-io (the server's I/O thread)";
    ASSERT_FALSE(prep.empty()) << "no thread named troupe-prep prepared the prompt";
    for (const auto& t : prep) {
        EXPECT_TRUE(t.nice > io[0].nice || (t.policy == SCHED_IDLE && io[0].policy != SCHED_IDLE))
            << "prep thread " << t.tid << " (nice " << t.nice << ", policy " << t.policy
            << ") is not below the I/O thread (nice " << io[0].nice << ", policy " << io[0].policy << ")";
    }
    EXPECT_GT(n_health, 0) << "no /health answer while the prompt was being prepared (" << window_ms << " ms)";
    EXPECT_GT(n_events, 0) << "the running stream sent nothing while the prompt was being prepared (" << window_ms
                           << " ms)";
}

}  // namespace
}  // namespace troupe::testing
