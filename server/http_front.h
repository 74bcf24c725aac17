// http_front: what the files of the Beast front end share (internal to troupe_server; Beast and Asio stay
// inside these files, http_server.h is plain C++): the connection types, the post target through which engine
// callbacks wake the I/O thread, the response helpers, and http_server::impl, whose members are defined by
// concern:
//   http_server.cpp    the listener and the public calls (listen, attach, drain, stop)
//   http_session.cpp   one HTTP connection: the request guard on the header, the body, dispatch, sending
//   http_routes.cpp    what is answered at once: /health, /metrics, /v1/models, admin, pages, /tokenize
//   http_generate.cpp  /v1/completions and /v1/chat/completions, whole or streamed (SSE)
//   ws_session.cpp     the WebSocket chat (/ws)
// Everything runs as C++20 coroutines on one I/O thread; everything protocol-shaped (parsing, JSON,
// Prometheus text, chat templates) lives in the plain files of troupe_server_core.
//
// Waiting for the engine: each request has a request_stream; its sink (engine lane) posts one wake-up
// to this thread, which cancels the connection's `wake` timer; the coroutine then take()s every event.
// Before waiting it checks pending(): a wake-up that arrived while it was writing is not repeated, and
// with one I/O thread nothing can slip in between that check and the wait, so no wake-up is lost.
//
// Off the I/O thread: request bodies are parsed, chat templates rendered and prompts tokenized on the
// prep pool (prep_pool.h), never on the I/O thread, which only moves bytes: a 1 MB prompt takes
// hundreds of milliseconds to tokenize, and /health, the pages and the running streams must not wait for
// it. The coroutine that read the body awaits the pool's answer and goes on (admission, submit) on the
// I/O thread. Bodies arrive in reads of at most 64 KiB (Beast's read size), each its own handler.
//
// Disconnects: while an HTTP request generates, a watcher waits for the socket to become readable; EOF
// or an error there (or a failed write) cancels the request at once. WebSocket: the read loop ending
// cancels the connection's requests.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <atomic>
#include <ctime>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "server/http_server.h"
#include "server/metrics_text.h"
#include "server/prep_pool.h"
#include "server/request_guard.h"
#include "server/request_parser.h"
#include "server/request_stream.h"
#include "server/routes.h"

namespace troupe::server {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

inline constexpr auto nothrow = net::as_tuple(net::use_awaitable);
inline constexpr std::string_view json_type = "application/json";
// Where engine-lane callbacks post their wake-ups; nulled when the server stops so that late callbacks
// from an engine that outlives the server do nothing.
struct post_target {
    std::mutex mutex;
    net::io_context* ioc = nullptr;

    template <class F>
    void post(F&& f) {
        std::lock_guard lock(mutex);
        if (ioc) net::post(*ioc, std::forward<F>(f));
    }
};

struct http_conn {
    beast::tcp_stream stream;
    net::steady_timer wake;
    bool disconnected = false;
    header_pairs cors;  // the current request's Access-Control-* headers (request_guard.h), on every answer

    explicit http_conn(tcp::socket s) : stream(std::move(s)), wake(stream.get_executor()) {}
};

struct ws_request {
    request_id id = 0;
    std::shared_ptr<request_stream> stream;
    bool client_cancelled = false;  // a cancel from this client: "done" with "cancelled"; any other, an error
};

struct ws_conn {
    websocket::stream<beast::tcp_stream> ws;
    net::steady_timer wake;
    std::deque<std::string> out;
    int64_t out_bytes = 0;
    std::map<std::string, ws_request> active;
    bool closed = false;

    explicit ws_conn(beast::tcp_stream s) : ws(std::move(s)), wake(ws.get_executor()) {}
};

inline int64_t unix_now() {
    return static_cast<int64_t>(std::time(nullptr));
}

// What request_guard checks, from a request's header (views into it).
template <class Header>
request_head head_of(const Header& h) {
    request_head r;
    r.method = h.method_string();
    const split_target t = split(h.target());
    r.path = t.path;
    r.query = t.query;
    if (auto it = h.find(http::field::host); it != h.end()) r.host = it->value();
    if (auto it = h.find(http::field::origin); it != h.end()) r.origin = it->value();
    r.authorization = h[http::field::authorization];
    r.ws_protocols = h[http::field::sec_websocket_protocol];
    r.http10 = h.version() < 11;
    r.websocket = websocket::is_upgrade(h);
    return r;
}

// The engine ended a request as cancelled though its HTTP client is still there: the operator (admin
// console) cancelled it, or the server stopped. Not a 429/5xx that SDKs retry at once: 503 without
// Retry-After.
inline api_error cancelled_error(request_id id, int32_t n_generated) {
    return api_error{503,
                     "Request " + std::to_string(id) + " was cancelled by the server (an operator's cancel, or a " +
                         "shutdown) after " + std::to_string(n_generated) + " generated tokens",
                     "server_error",
                     {},
                     "request_cancelled"};
}

// Every co_await takes only named objects: GCC 12 mis-handles temporaries that live across a co_await in the
// same full-expression (they can be destroyed twice), so responses and errors are built first, then sent.
using response = http::response<http::string_body>;
using request = http::request<http::string_body>;

class http_server::impl {
public:
    explicit impl(engine_config config)
        : config_(std::move(config)),
          sc_(config_.server),
          guard_(make_guard_policy(sc_)),
          target_(std::make_shared<post_target>()) {
        target_->ioc = &ioc_;
    }

    engine_config config_;
    const server_config& sc_;
    const guard_policy guard_;
    net::io_context ioc_{1};
    tcp::acceptor acceptor_{ioc_};
    net::steady_timer sampler_{ioc_};
    std::thread thread_;
    std::shared_ptr<post_target> target_;
    std::atomic<bool> ready_{false};
    std::atomic<bool> draining_{false};
    std::atomic<bool> stopped_{false};
    serving_model model_;  // written once by attach (on the I/O thread) before ready_
    server_stats stats_;
    metrics_history history_;
    steady_clock::time_point t_start_ = steady_clock::now();
    uint16_t port_ = 0;
    std::list<std::weak_ptr<http_conn>> http_conns_;
    std::list<std::weak_ptr<ws_conn>> ws_conns_;
    // After ioc_: joined (by stop(), or when destroyed) before the I/O context whose coroutines await it.
    // Its tasks may read only what does not change: the config, and model_ once ready_ was seen true.
    prep_pool prep_{stats_};

    double uptime_s() const { return std::chrono::duration<double>(steady_clock::now() - t_start_).count(); }

    server_figures figures() const {
        server_figures f = figures_of(stats_);
        f.ready = ready_.load();
        f.draining = draining_.load();
        f.uptime_s = uptime_s();
        return f;
    }

    engine_snapshot snapshot() const { return ready_.load() ? model_.eng->snapshot() : engine_snapshot{}; }

    // ---- listener (http_server.cpp) ----
    net::awaitable<void> accept_loop();
    net::awaitable<void> sample_loop();

    // ---- one HTTP connection (http_session.cpp) ----
    net::awaitable<void> http_session(std::shared_ptr<http_conn> c);
    // One request; false when the connection must close.
    net::awaitable<bool> handle(const std::shared_ptr<http_conn>& c, request& req);
    void count_status(unsigned status);
    static response make_response(unsigned status, std::string_view content_type, std::string body, bool keep_alive);
    static response error_response(const api_error& e, bool keep_alive);
    // Writes a whole response; false when the connection is no longer usable.
    net::awaitable<bool> send(http_conn& c, response& res);
    net::awaitable<bool> send_error(http_conn& c, const api_error& e, bool keep_alive);
    api_error too_large() const;
    static net::awaitable<void> drain(http_conn& c, beast::flat_buffer& buffer);

    // ---- answered at once (http_routes.cpp) ----
    response route(request& req);
    response preflight(request& req);
    response admin(request& req, const std::string& path, std::string_view query);
    static response method_not_allowed(const request& req, std::string_view path, std::string_view allowed);
    net::awaitable<bool> tokenize_route(const std::shared_ptr<http_conn>& c, request& req, bool tokenize);
    void begin_drain();

    // ---- generation over HTTP (http_generate.cpp) ----
    net::awaitable<bool> generate(const std::shared_ptr<http_conn>& c, request& req, api_kind kind);
    std::optional<api_error> refuse_now() const;
    std::function<void()> waker(const std::shared_ptr<http_conn>& c);
    std::shared_ptr<request_stream> make_stream(int32_t n_prompt_tokens, int32_t n_sinks = 1);
    static net::awaitable<void> wait_wake(net::steady_timer& wake);
    static net::awaitable<void> watch_disconnect(std::shared_ptr<http_conn> c, std::shared_ptr<bool> done);

    // ---- WebSocket (ws_session.cpp) ----
    net::awaitable<void> ws_session(const std::shared_ptr<http_conn>& hc, request& req);
    void ws_send(ws_conn& c, std::string msg);
    void ws_close(ws_conn& c);
    void ws_pump(ws_conn& c);
    net::awaitable<void> ws_writer(std::shared_ptr<ws_conn> c);
    void start_ws_request(const std::shared_ptr<ws_conn>& c, ws_start& s, std::optional<prepared>& prep_or_none);
};

}  // namespace troupe::server
