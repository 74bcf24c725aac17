// stall_probe: the clients of the front end's stall check (issue 11.2), shared by the loopback test and
// bench_server_stall. While large prompts arrive, an http_poller asks /health (or /metrics) over one
// keep-alive connection again and again, and a stream_watch keeps a streamed completion running (a new one as soon
// as one ends); both record when each answer or event arrived. big_prompt_storm sends the large prompts at
// once, each on its own connection, and records when each answer came back.
//
// Everything here is blocking socket code with timeouts on its own threads; nothing waits forever.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace troupe::testing {

using stall_clock = std::chrono::steady_clock;

// A /v1/completions body whose prompt is n_bytes of simple English (the shared stories repeated, or a
// fixed sentence where they are absent), with max_tokens 1.
std::string big_prompt_body(size_t n_bytes);

struct probe_sample {
    stall_clock::time_point sent;
    stall_clock::time_point answered;  // time_point{} when no answer came (error)
    int status = 0;
    double value = 0;  // what the poller's read function found in the body
};

// GET target in a loop (every interval) until stop(); read (optional) extracts a number from each body.
class http_poller {
public:
    http_poller(uint16_t port, std::chrono::milliseconds interval, std::string target = "/health",
                std::function<double(const std::string&)> read = {});
    ~http_poller();
    void stop();
    // Copies of what was recorded so far (thread-safe).
    std::vector<probe_sample> samples() const;

private:
    void run();
    uint16_t port_;
    std::chrono::milliseconds interval_;
    std::string target_;
    std::function<double(const std::string&)> read_;
    std::atomic<bool> stop_{false};
    mutable std::mutex mutex_;
    std::vector<probe_sample> samples_;
    std::thread thread_;
};

// Streamed completions back to back until stop(): the arrival time of every read that brought SSE bytes.
class stream_watch {
public:
    stream_watch(uint16_t port, std::string body);
    ~stream_watch();
    void stop();
    // [stream][read] arrival times; a stream's first entry is its first event, not its request.
    std::vector<std::vector<stall_clock::time_point>> arrivals() const;
    std::string error() const;

private:
    void run();
    uint16_t port_;
    std::string body_;
    std::atomic<bool> stop_{false};
    mutable std::mutex mutex_;
    std::vector<std::vector<stall_clock::time_point>> arrivals_;
    std::string error_;
    std::thread thread_;
};

// Posts body to /v1/completions n times at once (one connection and thread each); returns when every
// answer arrived or timed out. sent is when the request's last byte was handed to the kernel.
std::vector<probe_sample> big_prompt_storm(uint16_t port, const std::string& body, int n, int timeout_ms);

// The value of a Prometheus sample without labels ("name 3" on its own line) in a /metrics body; -1 if absent.
double prometheus_value(const std::string& body, const std::string& name);

// A thread of this process as the kernel schedules it (/proc/self/task/<tid>/comm and stat).
struct thread_sched {
    long tid = 0;
    std::string name;
    int policy = 0;  // SCHED_OTHER 0, SCHED_BATCH 3, SCHED_IDLE 5
    int nice = 0;
};
// This process's threads whose name starts with prefix.
std::vector<thread_sched> threads_named(const std::string& prefix);

// The longest gap between consecutive arrivals of one stream, counting only gaps that end inside [from, to].
double longest_gap_ms(const std::vector<std::vector<stall_clock::time_point>>& arrivals, stall_clock::time_point from,
                      stall_clock::time_point to);

}  // namespace troupe::testing
