// request_window: the finished requests of the last few minutes, for engine::snapshot()'s latency
// percentiles (TTFT, TPOT, E2E) and rates. Recorded on the streamer's lane when a request ends, read
// from any thread; a mutex guards it (one record per request: uncontended).
#pragma once

#include <chrono>
#include <deque>
#include <mutex>

#include "actors/common/request_types.h"
#include "core/runtime/latency_histogram.h"

namespace troupe {

struct window_figures {
    latency_summary ttft_ms;  // the *_us fields hold milliseconds here (see engine_snapshot.h)
    latency_summary tpot_ms;
    latency_summary e2e_ms;
    double tokens_per_s = 0;    // generated tokens per second over the last minute
    double requests_per_s = 0;  // finished requests per second over the last minute
};

class request_window {
public:
    explicit request_window(std::chrono::seconds span = std::chrono::seconds(300)) : span_(span) {}

    void record(const usage& u, const timings& t, time_point now);
    window_figures figures(time_point now) const;

private:
    struct entry {
        time_point when;
        double ttft_ms;
        double tpot_ms;  // < 0: fewer than two tokens
        double e2e_ms;
        int32_t n_tokens;
    };
    void trim(time_point now) const;

    std::chrono::seconds span_;
    mutable std::mutex mutex_;
    mutable std::deque<entry> entries_;
};

}  // namespace troupe
