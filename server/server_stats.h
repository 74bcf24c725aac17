// server_stats: the front end's own counters (atomics, bumped on the I/O thread, read by /metrics and
// the console), beside the engine's snapshot.
#pragma once

#include <atomic>
#include <cstdint>

namespace troupe::server {

struct server_stats {
    std::atomic<int64_t> n_http_requests{0};
    std::atomic<int64_t> n_http_2xx{0};
    std::atomic<int64_t> n_http_4xx{0};
    std::atomic<int64_t> n_http_5xx{0};
    std::atomic<int64_t> n_overloaded{0};          // answered 429 (or the WebSocket's overload error)
    std::atomic<int64_t> n_disconnect_cancels{0};  // requests cancelled because their client went away
    std::atomic<int64_t> n_slow_client_closes{0};  // connections closed: output queue past its bound
    std::atomic<int64_t> n_connections{0};         // open now (HTTP and WebSocket)
    std::atomic<int64_t> n_websockets{0};          // open now
    std::atomic<int64_t> n_queued{0};              // server requests submitted, no token yet
    std::atomic<int64_t> n_queued_tokens{0};       // their prompt tokens
    std::atomic<int64_t> n_active{0};              // server requests submitted and not ended
    std::atomic<int64_t> n_preparing{0};           // bodies being parsed and prompts tokenized (off the I/O thread)
};

// A copy for the text builders.
struct server_figures {
    int64_t n_http_requests = 0, n_http_2xx = 0, n_http_4xx = 0, n_http_5xx = 0;
    int64_t n_overloaded = 0, n_disconnect_cancels = 0, n_slow_client_closes = 0;
    int64_t n_connections = 0, n_websockets = 0, n_queued = 0, n_queued_tokens = 0, n_active = 0;
    int64_t n_preparing = 0;
    bool ready = false;     // the model is loaded
    bool draining = false;  // new requests are refused
    double uptime_s = 0;
};

inline server_figures figures_of(const server_stats& s) {
    server_figures f;
    f.n_http_requests = s.n_http_requests.load();
    f.n_http_2xx = s.n_http_2xx.load();
    f.n_http_4xx = s.n_http_4xx.load();
    f.n_http_5xx = s.n_http_5xx.load();
    f.n_overloaded = s.n_overloaded.load();
    f.n_disconnect_cancels = s.n_disconnect_cancels.load();
    f.n_slow_client_closes = s.n_slow_client_closes.load();
    f.n_connections = s.n_connections.load();
    f.n_websockets = s.n_websockets.load();
    f.n_queued = s.n_queued.load();
    f.n_queued_tokens = s.n_queued_tokens.load();
    f.n_active = s.n_active.load();
    f.n_preparing = s.n_preparing.load();
    return f;
}

}  // namespace troupe::server
