#include "actors/engine/request_window.h"

#include <algorithm>
#include <vector>

namespace troupe {
namespace {

// Percentiles of exact values (the window holds at most a few thousand entries per minute).
latency_summary summarize(std::vector<double>& v) {
    latency_summary s;
    s.n = static_cast<int64_t>(v.size());
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) {
        return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
    };
    s.median_us = at(0.5);
    s.p90_us = at(0.9);
    s.p99_us = at(0.99);
    s.max_us = v.back();
    double sum = 0;
    for (double x : v) sum += x;
    s.mean_us = sum / static_cast<double>(v.size());
    return s;
}

}  // namespace

void request_window::record(const usage& u, const timings& t, time_point now) {
    std::lock_guard lock(mutex_);
    const double tpot = u.n_completion_tokens > 1 && t.decode_tokens_per_s > 0 ? 1e3 / t.decode_tokens_per_s : -1;
    entries_.push_back({now, t.time_to_first_token_ms, tpot, t.total_ms, u.n_completion_tokens});
    trim(now);
}

void request_window::trim(time_point now) const {
    while (!entries_.empty() && now - entries_.front().when > span_) entries_.pop_front();
}

window_figures request_window::figures(time_point now) const {
    std::vector<double> ttft, tpot, e2e;
    window_figures f;
    double tokens_minute = 0, requests_minute = 0;
    {
        std::lock_guard lock(mutex_);
        trim(now);
        for (const entry& e : entries_) {
            ttft.push_back(e.ttft_ms);
            if (e.tpot_ms >= 0) tpot.push_back(e.tpot_ms);
            e2e.push_back(e.e2e_ms);
            if (now - e.when <= std::chrono::minutes(1)) {
                tokens_minute += e.n_tokens;
                requests_minute += 1;
            }
        }
    }
    f.ttft_ms = summarize(ttft);
    f.tpot_ms = summarize(tpot);
    f.e2e_ms = summarize(e2e);
    f.tokens_per_s = tokens_minute / 60.0;
    f.requests_per_s = requests_minute / 60.0;
    return f;
}

}  // namespace troupe
