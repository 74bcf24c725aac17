// collected: one request's output gathered from its sink on the engine's threads; wait() blocks until the request
// ended. For tests that run a real engine with its own lanes (the pipeline, speculative decoding end to end).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "actors/common/request_types.h"

namespace troupe::testing {

struct collected {
    std::mutex mutex;
    std::condition_variable cv;
    std::string text;
    std::string error;
    bool ended = false;
    usage use;
    timings time;
    std::vector<steady_clock::time_point> delta_times;  // when each text delta arrived

    request_sink sink() {
        request_sink s;
        s.on_text = [this](std::string_view d) {
            std::lock_guard lock(mutex);
            text += d;
            delta_times.push_back(steady_clock::now());
        };
        s.on_done = [this](finish_reason, const usage& u, const timings& t) {
            std::lock_guard lock(mutex);
            use = u;
            time = t;
            ended = true;
            cv.notify_all();
        };
        s.on_error = [this](const std::string& m) {
            std::lock_guard lock(mutex);
            error = m;
            ended = true;
            cv.notify_all();
        };
        return s;
    }
    void wait() {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return ended; });
    }
};

}  // namespace troupe::testing
