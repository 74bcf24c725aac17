// The Beast front end: listener, HTTP sessions (API, SSE, admin, pages) and WebSocket sessions, all as
// C++20 coroutines on one I/O thread. Everything protocol-shaped (parsing, JSON, Prometheus text, chat
// templates) lives in the plain files beside this one; this file moves bytes and waits for the engine.
//
// Waiting for the engine: each request has a request_stream; its sink (engine lane) posts one wake-up
// to this thread, which cancels the connection's `wake` timer; the coroutine then take()s every event.
// Before waiting it checks pending(): a wake-up that arrived while it was writing is not repeated, and
// with one I/O thread nothing can slip in between that check and the wait, so no wake-up is lost.
//
// Off the I/O thread: request bodies are parsed, chat templates rendered and prompts tokenized on the
// prep pool (prep_threads threads), never on the I/O thread, which only moves bytes: a 1 MB prompt takes
// hundreds of milliseconds to tokenize, and /health, the pages and the running streams must not wait for
// it. The coroutine that read the body awaits the pool's answer and goes on (admission, submit) on the
// I/O thread. Bodies arrive in reads of at most 64 KiB (Beast's read size), each its own handler.
//
// Disconnects: while an HTTP request generates, a watcher waits for the socket to become readable; EOF
// or an error there (or a failed write) cancels the request at once. WebSocket: the read loop ending
// cancels the connection's requests.
#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <atomic>
#include <ctime>
#include <future>
#include <list>
#include <map>
#include <thread>

#include "core/log/log.h"
#include "core/tokenizer/tokenizer.h"
#include "server/choices.h"
#include "server/metrics_text.h"
#include "server/request_guard.h"
#include "server/request_parser.h"
#include "server/request_stream.h"
#include "server/response_builder.h"
#include "server/routes.h"
#include "server/static_files.h"
#include "server/tokenize_api.h"

namespace troupe::server {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
namespace {

constexpr auto nothrow = net::as_tuple(net::use_awaitable);
constexpr std::string_view json_type = "application/json";
// Threads that parse and tokenize request bodies. Two: a huge prompt does not hold up every small one
// behind it, and the executor's threads keep most of the cores. Their nice value: tokenizing is batch work,
// so where cores are short the I/O thread and the executor (the running streams) go first.
constexpr int prep_threads = 2;
constexpr int prep_nice = 10;

// Lowers the calling prep thread's priority, once per thread (Linux: nice is per thread).
void lower_prep_priority() {
    thread_local bool lowered = false;
    if (lowered) return;
    lowered = true;
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), prep_nice);
}

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

int64_t unix_now() {
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
api_error cancelled_error(request_id id, int32_t n_generated) {
    return api_error{503,
                     "Request " + std::to_string(id) + " was cancelled by the server (an operator's cancel, or a " +
                         "shutdown) after " + std::to_string(n_generated) + " generated tokens",
                     "server_error",
                     {},
                     "request_cancelled"};
}

// Past an over-limit body the server reads (and drops) at most this much, for at most this long, before
// it closes, so the client can finish sending and read the 413 instead of a connection reset.
constexpr uint64_t max_drain_bytes = 32u << 20;
constexpr auto max_drain_time = std::chrono::seconds(5);

}  // namespace

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
    net::thread_pool prep_{prep_threads};

    double uptime_s() const { return std::chrono::duration<double>(steady_clock::now() - t_start_).count(); }

    server_figures figures() const {
        server_figures f = figures_of(stats_);
        f.ready = ready_.load();
        f.draining = draining_.load();
        f.uptime_s = uptime_s();
        return f;
    }

    engine_snapshot snapshot() const { return ready_.load() ? model_.eng->snapshot() : engine_snapshot{}; }

    // POST /tokenize and /detokenize (llama-server's bodies), tokenized on the prep pool as prompts are: a
    // megabyte of text must not stall /health and the running streams.
    net::awaitable<bool> tokenize_route(const std::shared_ptr<http_conn>& c, http::request<http::string_body>& req,
                                        bool tokenize) {
        const bool keep = req.keep_alive();
        auto work = [this, tokenize, body = std::move(req.body())] {
            return tokenize ? tokenize_answer(body, *model_.tok) : detokenize_answer(body, *model_.tok);
        };
        api_answer a = co_await off_io(std::move(work));
        if (const auto* e = std::get_if<api_error>(&a)) co_return co_await send_error(*c, *e, keep);
        response res = make_response(200, json_type, std::move(std::get<std::string>(a)), keep);
        const bool again = co_await send(*c, res);
        co_return again;
    }

    // Runs f (a request's parse, render and tokenization) on the prep pool and resumes the calling
    // coroutine on the I/O thread with its value. f may read only what does not change: the config, and
    // model_ once ready_ was seen true. /metrics counts the requests in there (troupe_requests_preparing).
    template <class F>
    net::awaitable<std::invoke_result_t<F&>> off_io(F f) {
        using value = std::invoke_result_t<F&>;
        auto task = [f = std::move(f)]() mutable -> net::awaitable<value> {
            lower_prep_priority();
            co_return f();
        };
        stats_.n_preparing.fetch_add(1);
        net::awaitable<value> done = net::co_spawn(prep_, std::move(task), net::use_awaitable);
        value v = co_await std::move(done);
        stats_.n_preparing.fetch_sub(1);
        co_return v;
    }

    // ---- listener -------------------------------------------------------------------------------

    net::awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept(nothrow);
            if (ec) {
                if (ec == net::error::operation_aborted || !acceptor_.is_open()) co_return;
                // E.g. too many open files: keep serving the open connections, retry a little later.
                TROUPE_LOG_WARN("server", "accept failed: %s", ec.message().c_str());
                net::steady_timer backoff(ioc_, std::chrono::milliseconds(50));
                auto [ec2] = co_await backoff.async_wait(nothrow);
                (void)ec2;
                continue;
            }
            // A fixed kernel send buffer (no autotuning to megabytes): with server.max_send_queue_bytes it
            // bounds what one client that does not read can hold, and such a client is noticed soon.
            beast::error_code ignored;
            socket.set_option(net::socket_base::send_buffer_size(256 * 1024), ignored);
            auto c = std::make_shared<http_conn>(std::move(socket));
            http_conns_.push_back(c);
            net::co_spawn(ioc_, http_session(c), net::detached);
        }
    }

    net::awaitable<void> sample_loop() {
        for (;;) {
            sampler_.expires_after(std::chrono::seconds(1));
            auto [ec] = co_await sampler_.async_wait(nothrow);
            if (ec || stopped_.load()) co_return;
            if (ready_.load()) history_.add(sample_of(model_.eng->snapshot(), uptime_s()));
            http_conns_.remove_if([](const auto& w) { return w.expired(); });
            ws_conns_.remove_if([](const auto& w) { return w.expired(); });
        }
    }

    // ---- HTTP -----------------------------------------------------------------------------------

    void count_status(unsigned status) {
        stats_.n_http_requests.fetch_add(1);
        if (status < 300) {
            stats_.n_http_2xx.fetch_add(1);
        } else if (status < 500) {
            stats_.n_http_4xx.fetch_add(1);
        } else {
            stats_.n_http_5xx.fetch_add(1);
        }
    }

    static http::response<http::string_body> make_response(unsigned status, std::string_view content_type,
                                                           std::string body, bool keep_alive) {
        http::response<http::string_body> res{static_cast<http::status>(status), 11};
        res.set(http::field::server, "troupe");
        res.set(http::field::content_type, content_type);
        res.keep_alive(keep_alive);
        res.body() = std::move(body);
        res.prepare_payload();
        return res;
    }

    // Every co_await below takes only named objects: GCC 12 mis-handles temporaries that live across a
    // co_await in the same full-expression (they can be destroyed twice), so responses and errors are
    // built first, then sent.
    using response = http::response<http::string_body>;

    static response error_response(const api_error& e, bool keep_alive) {
        auto res = make_response(static_cast<unsigned>(e.status), json_type, error_json(e), keep_alive);
        if (e.status == 401) res.set(http::field::www_authenticate, "Bearer");
        if (e.status == 429 || (e.status == 503 && e.code != "request_cancelled")) {
            res.set(http::field::retry_after, "1");
        }
        return res;
    }

    // Writes a whole response; false when the connection is no longer usable.
    net::awaitable<bool> send(http_conn& c, response& res) {
        count_status(res.result_int());
        for (const auto& [name, value] : c.cors) res.set(name, value);
        const bool keep = res.keep_alive();
        auto [ec, n] = co_await http::async_write(c.stream, res, nothrow);
        co_return !ec && keep;
    }

    net::awaitable<bool> send_error(http_conn& c, const api_error& e, bool keep_alive) {
        response res = error_response(e, keep_alive);
        const bool ok = co_await send(c, res);
        co_return ok;
    }

    api_error too_large() const {
        return api_error{
            413,
            "The request body is larger than server.max_body_bytes (" + std::to_string(sc_.max_body_bytes) + " bytes)",
            "invalid_request_error",
            {},
            "request_too_large"};
    }

    // After an early answer to a request whose body is still coming: half-close (the answer and a FIN
    // reach the client), then read and drop what it still sends, bounded in bytes and time, so the close
    // does not reset the connection under the client's feet and take the answer with it.
    static net::awaitable<void> drain(http_conn& c, beast::flat_buffer& buffer) {
        beast::error_code ignored;
        c.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
        uint64_t n_read = buffer.size();
        buffer.consume(buffer.size());
        c.stream.expires_after(max_drain_time);
        std::vector<char> sink(64 * 1024);
        while (n_read < max_drain_bytes) {
            auto [ec, n] = co_await c.stream.async_read_some(net::buffer(sink), nothrow);
            if (ec) break;
            n_read += n;
        }
    }

    net::awaitable<void> http_session(std::shared_ptr<http_conn> c) {
        stats_.n_connections.fetch_add(1);
        beast::flat_buffer buffer;
        for (;;) {
            // The header first: Host, Origin, the API key and the body's size are checked before any body is
            // read, and Expect: 100-continue is answered (a final status instead, when the request fails).
            http::request_parser<http::string_body> parser;
            parser.body_limit(boost::none);  // checked below, from Content-Length or while chunks arrive
            parser.header_limit(16 * 1024);
            c->stream.expires_after(std::chrono::seconds(60));
            auto [ec, n] = co_await http::async_read_header(c->stream, buffer, parser, nothrow);
            if (ec) {
                if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
                    ec != http::error::end_of_stream && ec != http::error::partial_message) {
                    const api_error e = bad_request("malformed HTTP request: " + ec.message());
                    (void)co_await send_error(*c, e, false);
                }
                break;
            }
            std::optional<api_error> refused;
            bool expect_continue = false;
            {
                const auto& h = parser.get();
                const request_head rh = head_of(h);
                c->cors = cors_headers(rh, guard_, false);
                refused = check_request(rh, guard_);
                expect_continue = beast::iequals(h[http::field::expect], "100-continue");
            }
            const auto length = parser.content_length();
            const bool over_limit = length && *length > static_cast<uint64_t>(sc_.max_body_bytes);
            if (over_limit && !refused) refused = too_large();
            if (refused && !parser.is_done() && (expect_continue || over_limit)) {
                // Answered before the body: a client that sent Expect sends none after a final status; any
                // other gets its body drained.
                (void)co_await send_error(*c, *refused, false);
                if (!expect_continue) co_await drain(*c, buffer);
                break;
            }
            if (expect_continue && !parser.is_done()) {
                static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
                auto [ec2, n2] = co_await net::async_write(c->stream, net::buffer(go_on.data(), go_on.size()), nothrow);
                if (ec2) break;
            }
            parser.body_limit(static_cast<uint64_t>(sc_.max_body_bytes));
            auto [ec3, n3] = co_await http::async_read(c->stream, buffer, parser, nothrow);
            if (ec3 == http::error::body_limit) {  // a chunked body past the limit
                const api_error e = too_large();
                (void)co_await send_error(*c, e, false);
                co_await drain(*c, buffer);
                break;
            }
            if (ec3) break;
            c->stream.expires_never();
            http::request<http::string_body> req = parser.release();
            if (refused) {  // the body was small and read: the connection stays usable
                if (!co_await send_error(*c, *refused, req.keep_alive())) break;
                continue;
            }
            if (websocket::is_upgrade(req)) {
                if (split(req.target()).path == "/ws") {
                    stats_.n_connections.fetch_sub(1);
                    co_await ws_session(c, req);
                    co_return;
                }
                const api_error e{404, "WebSocket endpoint is /ws", "invalid_request_error", {}, "not_found"};
                (void)co_await send_error(*c, e, false);
                break;
            }
            const bool again = co_await handle(c, req);
            if (!again) break;
        }
        beast::error_code ignored;
        c->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
        c->stream.socket().close(ignored);
        stats_.n_connections.fetch_sub(1);
    }

    // One request; false when the connection must close.
    net::awaitable<bool> handle(const std::shared_ptr<http_conn>& c, http::request<http::string_body>& req) {
        const std::string path(split(req.target()).path);
        if (path == "/v1/completions" || path == "/v1/chat/completions") {
            if (req.method() == http::verb::post) {
                const api_kind kind = path == "/v1/chat/completions" ? api_kind::chat : api_kind::completion;
                const bool again = co_await generate(c, req, kind);
                co_return again;
            }
        }
        if ((path == "/tokenize" || path == "/detokenize") && req.method() == http::verb::post && ready_.load()) {
            const bool again = co_await tokenize_route(c, req, path == "/tokenize");
            co_return again;
        }
        response res = route(req);
        if (req.method() == http::verb::head) {  // the headers of the GET, no body
            const std::string length = std::to_string(res.body().size());
            res.body().clear();
            res.set(http::field::content_length, length);
        }
        const bool again = co_await send(*c, res);
        co_return again;
    }

    static response method_not_allowed(const http::request<http::string_body>& req, std::string_view path,
                                       std::string_view allowed) {
        response res = error_response(api_error{405,
                                                "Method " + std::string(req.method_string()) + " is not allowed on " +
                                                    std::string(path) + " (allowed: " + std::string(allowed) + ")",
                                                "invalid_request_error",
                                                {},
                                                "method_not_allowed"},
                                      req.keep_alive());
        res.set(http::field::allow, allowed);
        return res;
    }

    // Everything but generation: answered at once.
    response route(http::request<http::string_body>& req) {
        const bool keep = req.keep_alive();
        const split_target t = split(req.target());
        const std::string path(t.path);
        const auto method = req.method();
        const bool get = method == http::verb::get || method == http::verb::head;
        auto wrong_method = [&](std::string_view allowed) { return method_not_allowed(req, path, allowed); };
        if (method == http::verb::options) return preflight(req);
        if (path == "/health") {
            if (!get) return wrong_method("GET");
            const bool ok = ready_.load() && !draining_.load();
            const char* state = !ready_.load() ? "loading" : draining_.load() ? "draining" : "ok";
            return make_response(ok ? 200 : 503, json_type, std::string("{\"status\":\"") + state + "\"}", keep);
        }
        if (path == "/metrics") {
            if (!get) return wrong_method("GET");
            return make_response(200, "text/plain; version=0.0.4; charset=utf-8",
                                 prometheus_text(snapshot(), figures(), model_.facts), keep);
        }
        if (path == "/v1/models") {
            if (!get) return wrong_method("GET");
            if (!ready_.load()) return error_response(unavailable("The model is loading"), keep);
            return make_response(
                200, json_type,
                models_json(model_.facts.name, unix_now(), model_.facts.context_length, model_.facts.chat_template),
                keep);
        }
        if (path.starts_with("/v1/models/")) {
            if (!get) return wrong_method("GET");
            if (!ready_.load()) return error_response(unavailable("The model is loading"), keep);
            // A name may hold '/' ("org/model"), sent as is or percent-encoded.
            const std::string id = percent_decoded(path.substr(std::string_view("/v1/models/").size()));
            if (id != model_.facts.name) {
                return error_response(
                    api_error{404,
                              "The model '" + id + "' does not exist; this server serves '" + model_.facts.name + "'",
                              "invalid_request_error", "model", "model_not_found"},
                    keep);
            }
            return make_response(
                200, json_type,
                model_json(model_.facts.name, unix_now(), model_.facts.context_length, model_.facts.chat_template),
                keep);
        }
        if (path == "/tokenize" || path == "/detokenize") {  // a POST to a ready server went to tokenize_route
            if (method != http::verb::post) return wrong_method("POST");
            return error_response(unavailable("The model is loading"), keep);
        }
        if (path == "/v1/completions" || path == "/v1/chat/completions") return wrong_method("POST");
        if (path.starts_with("/admin/api/")) return admin(req, path, t.query);
        if (get) {
            if (const static_file* f = find_static_file(path)) {
                auto res = make_response(200, f->content_type, std::string(f->body), keep);
                res.set(http::field::cache_control, "no-cache");
                return res;
            }
        }
        return error_response(api_error{404,
                                        "Unknown route: " + std::string(req.method_string()) + " " + path,
                                        "invalid_request_error",
                                        {},
                                        "not_found"},
                              keep);
    }

    // OPTIONS: the CORS preflight of a listed origin (request_guard refused the others), or the methods.
    response preflight(http::request<http::string_body>& req) {
        response res = make_response(204, "text/plain", {}, req.keep_alive());
        res.erase(http::field::content_type);
        res.set(http::field::allow, "GET, HEAD, POST, OPTIONS");
        const request_head h = head_of(req);
        for (const auto& [name, value] :
             cors_headers(h, guard_, true, req[http::field::access_control_request_headers])) {
            res.set(name, value);
        }
        return res;
    }

    response admin(http::request<http::string_body>& req, const std::string& path, std::string_view query) {
        const bool keep = req.keep_alive();
        if (sc_.admin_token.empty()) {
            return error_response(
                api_error{403,
                          "The admin console is disabled (server.admin_console: false, or no server.admin_token)",
                          "permission_error",
                          {},
                          "admin_disabled"},
                keep);
        }
        const auto auth = req[http::field::authorization];
        if (!admin_authorized(std::string_view(auth.data(), auth.size()), query, sc_.admin_token)) {
            return error_response(api_error{401,
                                            "The admin API needs the token: Authorization: Bearer <server.admin_token>",
                                            "authentication_error",
                                            {},
                                            "invalid_admin_token"},
                                  keep);
        }
        auto wrong_method = [&](std::string_view allowed) { return method_not_allowed(req, path, allowed); };
        if (path == "/admin/api/state") {
            if (req.method() != http::verb::get) return wrong_method("GET");
            return make_response(200, json_type,
                                 admin_state_json(snapshot(), figures(), model_.facts, history_.samples()), keep);
        }
        if (req.method() != http::verb::post) return wrong_method("POST");
        if (path == "/admin/api/drain") {
            begin_drain();
            return make_response(200, json_type, "{\"draining\":true}", keep);
        }
        if (auto id = id_after(path, "/admin/api/cancel/")) {
            if (!ready_.load()) return error_response(unavailable("The model is loading"), keep);
            bool found = false;
            for (const auto& r : model_.eng->snapshot().requests) found = found || r.id == *id;
            if (!found) {
                return error_response(api_error{404,
                                                "No request " + std::to_string(*id) + " is in flight",
                                                "invalid_request_error",
                                                {},
                                                "not_found"},
                                      keep);
            }
            model_.eng->cancel(*id);
            return make_response(200, json_type, "{\"cancelled\":" + std::to_string(*id) + "}", keep);
        }
        return error_response(api_error{404, "Unknown admin route: " + path, "invalid_request_error", {}, "not_found"},
                              keep);
    }

    void begin_drain() {
        if (draining_.exchange(true)) return;
        TROUPE_LOG_INFO("server", "draining: new requests are refused, running ones finish");
        if (ready_.load()) model_.eng->drain();
    }

    // The checks every generation request passes before submit; the error to answer, if any.
    std::optional<api_error> refuse_now() const {
        if (!ready_.load()) return unavailable("The model is loading; retry shortly");
        if (draining_.load() || stopped_.load()) return unavailable("The server is draining: no new requests");
        return std::nullopt;
    }

    std::function<void()> waker(const std::shared_ptr<http_conn>& c) {
        return [target = target_, weak = std::weak_ptr<http_conn>(c)] {
            target->post([weak] {
                if (auto conn = weak.lock()) conn->wake.cancel();
            });
        };
    }

    std::shared_ptr<request_stream> make_stream(int32_t n_prompt_tokens, int32_t n_sinks = 1) {
        request_stream::params p;
        p.n_sinks = n_sinks;
        p.max_pending_bytes = sc_.max_send_queue_bytes;
        p.n_prompt_tokens = n_prompt_tokens;
        p.stats = &stats_;
        p.piece = [tok = model_.tok](int32_t id) {
            return id >= 0 && id < tok->n_vocab() ? tok->token_to_piece(id) : std::string();
        };
        return std::make_shared<request_stream>(std::move(p));
    }

    static net::awaitable<void> wait_wake(net::steady_timer& wake) {
        wake.expires_at(steady_clock::time_point::max());
        auto [ec] = co_await wake.async_wait(nothrow);
        (void)ec;
    }

    static net::awaitable<void> watch_disconnect(std::shared_ptr<http_conn> c, std::shared_ptr<bool> done) {
        auto [ec] = co_await c->stream.socket().async_wait(tcp::socket::wait_read, nothrow);
        if (*done || ec == net::error::operation_aborted) co_return;
        if (!ec) {
            beast::error_code ec2;
            const size_t n = c->stream.socket().available(ec2);
            if (!ec2 && n > 0) co_return;  // a pipelined request, not a disconnect
        }
        c->disconnected = true;
        c->wake.cancel();
    }

    net::awaitable<bool> generate(const std::shared_ptr<http_conn>& c, http::request<http::string_body>& req,
                                  api_kind kind) {
        const bool keep = req.keep_alive();
        if (auto e = refuse_now()) co_return co_await send_error(*c, *e, keep);
        // Parse, render and tokenize on the prep pool (ready_ is true: model_ is set).
        struct parsed_and_prepared {
            parsed_request parsed;
            std::optional<std::variant<prepared_choices, api_error>> prep;
        };
        auto work = [this, kind, body = std::move(req.body())] {
            parsed_and_prepared out{kind == api_kind::chat ? parse_chat_request(body, config_.sampling)
                                                           : parse_completion_request(body, config_.sampling),
                                    std::nullopt};
            if (auto* r = std::get_if<generation_request>(&out.parsed)) out.prep = prepare_choices(model_, sc_, *r);
            return out;
        };
        parsed_and_prepared pp = co_await off_io(std::move(work));
        if (auto* e = std::get_if<api_error>(&pp.parsed)) co_return co_await send_error(*c, *e, keep);
        generation_request& r = std::get<generation_request>(pp.parsed);
        if (auto* e = std::get_if<api_error>(&*pp.prep)) co_return co_await send_error(*c, *e, keep);
        prepared_choices& p = std::get<prepared_choices>(*pp.prep);
        if (auto e = check_admission(sc_, stats_, p.n_prompt_tokens)) {
            stats_.n_overloaded.fetch_add(1);
            co_return co_await send_error(*c, *e, keep);
        }

        auto rs = make_stream(p.n_prompt_tokens, p.layout.n_requests());
        auto ids = std::make_shared<request_ids>();
        rs->set_notify(waker(c));
        rs->set_on_overflow([eng = model_.eng, ids, target = target_, weak = std::weak_ptr<http_conn>(c),
                             stats = &stats_] {
            for (const request_id id : ids->all()) eng->cancel(id);
            stats->n_slow_client_closes.fetch_add(1);
            target->post([weak] {
                if (auto conn = weak.lock()) {
                    conn->disconnected = true;
                    beast::error_code ignored;
                    conn->stream.socket().close(ignored);
                    conn->wake.cancel();
                }
            });
        });
        for (size_t i = 0; i < p.requests.size(); ++i) {
            if (const size_t lead = p.layout.fork_leader(i); lead != i) p.requests[i].fork_of = ids->all()[lead];
            auto submitted = model_.eng->submit(std::move(p.requests[i]), rs->make_sink(static_cast<int32_t>(i)));
            if (!submitted) {
                for (const request_id id : ids->all()) model_.eng->cancel(id);
                rs->release_admission();
                api_error e = engine_error(submitted.message());
                if (e.status == 429) stats_.n_overloaded.fetch_add(1);
                co_return co_await send_error(*c, e, keep);
            }
            ids->add(*submitted);
        }
        const request_id id = ids->all().front();
        TROUPE_LOG_DEBUG("server", "request %lld: %s, %zu engine requests, %d prompt tokens, max_tokens %d%s",
                         static_cast<long long>(id), kind == api_kind::chat ? "chat" : "completion",
                         p.requests.size(), p.n_prompt_tokens, r.sampling.max_tokens, r.stream ? ", streamed" : "");

        generation_result res;
        res.id = next_response_id(kind);
        res.created = unix_now();
        res.model = model_.facts.name;
        res.with_logprobs = r.logprobs >= 0;
        choice_collector choices(res, kind, p.layout, r.include_usage);

        auto done = std::make_shared<bool>(false);
        net::co_spawn(ioc_, watch_disconnect(c, done), net::detached);
        auto stop_watch = [&] {
            *done = true;
            beast::error_code ignored;
            c->stream.socket().cancel(ignored);
        };
        auto client_gone = [&] {
            *done = true;
            for (const request_id one : ids->all()) model_.eng->cancel(one);
            stats_.n_disconnect_cancels.fetch_add(1);
            TROUPE_LOG_INFO("server", "request %lld: the client went away; cancelled", static_cast<long long>(id));
        };

        if (!r.stream) {
            while (!choices.ended()) {
                (void)choices.add(rs->take(), false);
                if (choices.ended()) break;
                if (c->disconnected) {
                    client_gone();
                    co_return false;
                }
                if (!rs->pending()) co_await wait_wake(c->wake);
            }
            stop_watch();
            if (choices.error()) {
                for (const request_id one : ids->all()) model_.eng->cancel(one);
                api_error e = engine_error(*choices.error());
                if (e.status == 429) stats_.n_overloaded.fetch_add(1);
                co_return co_await send_error(*c, e, keep);
            }
            if (choices.cancelled()) {
                const api_error e = cancelled_error(id, choices.total_usage().n_completion_tokens);
                co_return co_await send_error(*c, e, keep);
            }
            response whole = make_response(200, json_type, choices.whole(), keep);
            const bool again = co_await send(*c, whole);
            co_return again;
        }

        // Streaming: the header waits for the first event, so an engine refusal can still be a 429. An
        // HTTP/1.0 client cannot read chunks: its stream is close-delimited (no length, Connection: close).
        const bool close_delimited = req.version() < 11;
        bool header_sent = false;
        http::response<http::empty_body> head{http::status::ok, 11};
        head.set(http::field::server, "troupe");
        head.set(http::field::content_type, "text/event-stream");
        head.set(http::field::cache_control, "no-cache");
        head.keep_alive(keep && !close_delimited);
        head.chunked(!close_delimited);
        for (const auto& [name, value] : c->cors) head.set(name, value);
        http::response_serializer<http::empty_body> serializer{head};
        for (;;) {
            std::string out = choices.add(rs->take(), true);
            const bool ended = choices.ended();
            if (choices.error()) {
                for (const request_id one : ids->all()) model_.eng->cancel(one);
                api_error e = engine_error(*choices.error());
                if (e.status == 429) stats_.n_overloaded.fetch_add(1);
                if (!header_sent) {
                    stop_watch();
                    co_return co_await send_error(*c, e, keep);
                }
                out += sse_event(error_json(e));
                out += sse_done;
            } else if (ended) {
                out += choices.stream_end();
                if (choices.cancelled()) {
                    // OpenAI's SDKs raise on an error object in the stream: the client learns it was cut
                    // short, after the chunks with their finish_reason.
                    out += sse_event(error_json(cancelled_error(id, choices.total_usage().n_completion_tokens)));
                }
                out += sse_done;
            }
            if (!out.empty() && !header_sent) {
                count_status(200);
                auto [ec, n] = co_await http::async_write_header(c->stream, serializer, nothrow);
                if (ec) {
                    client_gone();
                    co_return false;
                }
                header_sent = true;
            }
            if (!out.empty() && close_delimited) {
                auto [ec, n] = co_await net::async_write(c->stream, net::buffer(out), nothrow);
                if (ec) {
                    if (!ended) client_gone();
                    co_return false;
                }
            } else if (!out.empty()) {
                const auto chunk = http::make_chunk(net::buffer(out));
                auto [ec, n] = co_await net::async_write(c->stream, chunk, nothrow);
                if (ec) {
                    if (!ended) client_gone();
                    co_return false;
                }
            }
            if (ended) break;
            if (c->disconnected) {
                client_gone();
                co_return false;
            }
            if (!rs->pending()) co_await wait_wake(c->wake);
        }
        stop_watch();
        if (close_delimited) co_return false;  // the close ends the body
        const auto last = http::make_chunk_last();
        auto [ec, n] = co_await net::async_write(c->stream, last, nothrow);
        co_return !ec && keep;
    }

    // ---- WebSocket ------------------------------------------------------------------------------

    void ws_send(ws_conn& c, std::string msg) {
        if (c.closed) return;
        c.out_bytes += static_cast<int64_t>(msg.size());
        c.out.push_back(std::move(msg));
        if (c.out_bytes > sc_.max_send_queue_bytes) {
            stats_.n_slow_client_closes.fetch_add(1);
            TROUPE_LOG_INFO("server", "websocket: the client does not read (%lld bytes unsent); closing",
                            static_cast<long long>(c.out_bytes));
            ws_close(c);
            return;
        }
        c.wake.cancel();
    }

    // Cancels the connection's requests and closes its socket (reads and writes fail at once).
    void ws_close(ws_conn& c) {
        if (c.closed) return;
        c.closed = true;
        for (auto& [name, r] : c.active) {
            model_.eng->cancel(r.id);
            stats_.n_disconnect_cancels.fetch_add(1);
        }
        c.active.clear();
        c.out.clear();
        c.out_bytes = 0;
        beast::error_code ignored;
        beast::get_lowest_layer(c.ws).socket().close(ignored);
        c.wake.cancel();
    }

    // Moves every request's new events into the outgoing queue.
    void ws_pump(ws_conn& c) {
        for (auto it = c.active.begin(); it != c.active.end();) {
            bool ended = false;
            for (auto& e : it->second.stream->take()) {
                switch (e.what) {
                    case stream_event::kind::text:
                        ws_send(c, ws_delta_json(it->first, e.text));
                        break;
                    case stream_event::kind::logprobs:
                        break;
                    case stream_event::kind::done:
                        if (e.reason == finish_reason::cancelled && !it->second.client_cancelled) {
                            ws_send(c,
                                    ws_error_json(it->first,
                                                  cancelled_error(it->second.id, e.use.n_completion_tokens).message));
                        } else {
                            ws_send(c, ws_done_json(it->first, e.reason, e.use, e.time));
                        }
                        ended = true;
                        break;
                    case stream_event::kind::error:
                        ws_send(c, ws_error_json(it->first, e.text));
                        ended = true;
                        break;
                }
                if (c.closed) return;
            }
            it = ended ? c.active.erase(it) : std::next(it);
        }
    }

    net::awaitable<void> ws_writer(std::shared_ptr<ws_conn> c) {
        while (!c->closed) {
            while (!c->out.empty() && !c->closed) {
                std::string msg = std::move(c->out.front());
                c->out.pop_front();
                c->out_bytes -= static_cast<int64_t>(msg.size());
                c->ws.text(true);
                auto [ec, n] = co_await c->ws.async_write(net::buffer(msg), nothrow);
                if (ec) {
                    ws_close(*c);
                    co_return;
                }
            }
            if (c->closed) break;
            co_await wait_wake(c->wake);
        }
    }

    // prep_or_none: the request rendered and tokenized on the prep pool; nullopt when the model was not
    // ready then.
    void start_ws_request(const std::shared_ptr<ws_conn>& c, ws_start& s, std::optional<prepared>& prep_or_none) {
        if (c->active.count(s.id)) return ws_send(*c, ws_error_json(s.id, "a request with this id is running"));
        if (auto e = refuse_now()) return ws_send(*c, ws_error_json(s.id, e->message));
        if (!prep_or_none) return ws_send(*c, ws_error_json(s.id, "The model is loading; retry shortly"));
        prepared& prep = *prep_or_none;
        if (auto* e = std::get_if<api_error>(&prep)) return ws_send(*c, ws_error_json(s.id, e->message));
        prepared_request& p = std::get<prepared_request>(prep);
        if (auto e = check_admission(sc_, stats_, p.n_prompt_tokens)) {
            stats_.n_overloaded.fetch_add(1);
            return ws_send(*c, ws_error_json(s.id, e->message));
        }
        auto rs = make_stream(p.n_prompt_tokens);
        rs->set_notify([target = target_, weak = std::weak_ptr<ws_conn>(c), this] {
            target->post([weak, this] {
                if (auto conn = weak.lock()) ws_pump(*conn);
            });
        });
        rs->set_on_overflow([target = target_, weak = std::weak_ptr<ws_conn>(c), this] {
            target->post([weak, this] {
                if (auto conn = weak.lock()) {
                    stats_.n_slow_client_closes.fetch_add(1);
                    ws_close(*conn);
                }
            });
        });
        auto submitted = model_.eng->submit(std::move(p.req), rs->make_sink());
        if (!submitted) {
            rs->release_admission();
            if (engine_error(submitted.message()).status == 429) stats_.n_overloaded.fetch_add(1);
            return ws_send(*c, ws_error_json(s.id, submitted.message()));
        }
        c->active[s.id] = ws_request{*submitted, rs};
        ws_pump(*c);  // events that arrived before the request was registered
    }

    net::awaitable<void> ws_session(const std::shared_ptr<http_conn>& hc, http::request<http::string_body>& req) {
        auto c = std::make_shared<ws_conn>(std::move(hc->stream));
        ws_conns_.push_back(c);
        c->ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
        c->ws.read_message_max(static_cast<uint64_t>(sc_.max_body_bytes));
        // A browser that offered subprotocols (the chat page: troupe and troupe.key.<key>) needs one back.
        const std::string protocol(ws_subprotocol(req[http::field::sec_websocket_protocol]));
        if (!protocol.empty()) {
            c->ws.set_option(websocket::stream_base::decorator(
                [protocol](websocket::response_type& res) { res.set(http::field::sec_websocket_protocol, protocol); }));
        }
        auto [ec] = co_await c->ws.async_accept(req, nothrow);
        if (ec) co_return;
        count_status(101);
        stats_.n_connections.fetch_add(1);
        stats_.n_websockets.fetch_add(1);
        net::co_spawn(ioc_, ws_writer(c), net::detached);
        if (ready_.load()) {
            ws_send(*c, ws_hello_json(model_.facts.name, model_.facts.chat_template, model_.facts.context_length));
        }
        beast::flat_buffer buffer;
        while (!c->closed) {
            auto [rec, n] = co_await c->ws.async_read(buffer, nothrow);
            if (rec) break;
            std::string text = beast::buffers_to_string(buffer.data());
            buffer.consume(buffer.size());
            // Parse, render and tokenize on the prep pool; one connection's messages stay in order.
            struct parsed_and_prepared {
                ws_client_message m;
                std::optional<prepared> prep;
            };
            auto work = [this, text = std::move(text)] {
                parsed_and_prepared out{parse_ws_message(text, config_.sampling), std::nullopt};
                auto* s = std::get_if<ws_start>(&out.m);
                if (s && ready_.load()) out.prep = prepare_request(model_, sc_, s->request);
                return out;
            };
            parsed_and_prepared pp = co_await off_io(std::move(work));
            ws_client_message& m = pp.m;
            if (auto* s = std::get_if<ws_start>(&m)) {
                start_ws_request(c, *s, pp.prep);
            } else if (auto* x = std::get_if<ws_cancel>(&m)) {
                auto it = c->active.find(x->id);
                if (it != c->active.end()) {
                    it->second.client_cancelled = true;
                    model_.eng->cancel(it->second.id);
                }
            } else {
                const auto& bad = std::get<ws_bad>(m);
                ws_send(*c, ws_error_json(bad.id, bad.message));
            }
        }
        ws_close(*c);
        stats_.n_connections.fetch_sub(1);
        stats_.n_websockets.fetch_sub(1);
    }
};

http_server::http_server(engine_config config) : impl_(std::make_unique<impl>(std::move(config))) {}

http_server::~http_server() {
    stop();
}

result<uint16_t> http_server::listen() {
    impl& m = *impl_;
    const exposure_check exposure = check_exposure(m.sc_);
    if (exposure.error) return make_error(*exposure.error);
    if (exposure.warning) TROUPE_LOG_WARN("server", "%s", exposure.warning->c_str());
    beast::error_code ec;
    const auto address = net::ip::make_address(m.sc_.host, ec);
    if (ec) return make_error("server.host: '" + m.sc_.host + "' is not an IP address (like 127.0.0.1 or 0.0.0.0)");
    const tcp::endpoint ep{address, static_cast<uint16_t>(m.sc_.port)};
    m.acceptor_.open(ep.protocol(), ec);
    if (!ec) m.acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) m.acceptor_.bind(ep, ec);
    if (!ec) m.acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
        return make_error("cannot listen on " + m.sc_.host + ":" + std::to_string(m.sc_.port) + ": " + ec.message());
    }
    m.port_ = m.acceptor_.local_endpoint().port();
    net::co_spawn(m.ioc_, m.accept_loop(), net::detached);
    net::co_spawn(m.ioc_, m.sample_loop(), net::detached);
    m.thread_ = std::thread([&m] {
        for (;;) {
            try {
                m.ioc_.run();
                return;
            } catch (const std::exception& e) {  // the edge: a handler threw; log it and keep serving
                TROUPE_LOG_ERROR("server", "I/O handler failed: %s", e.what());
            }
        }
    });
    return m.port_;
}

uint16_t http_server::port() const {
    return impl_->port_;
}

void http_server::attach(serving_model model) {
    impl& m = *impl_;
    std::promise<void> done;
    auto f = done.get_future();
    net::post(m.ioc_, [&m, &model, &done] {
        m.model_ = std::move(model);
        m.ready_.store(true);
        if (m.draining_.load()) m.model_.eng->drain();
        done.set_value();
    });
    f.wait();
    TROUPE_LOG_INFO("server", "ready: model '%s', chat template %s", m.model_.facts.name.c_str(),
                    m.model_.facts.chat_template.c_str());
}

void http_server::begin_drain() {
    impl& m = *impl_;
    net::post(m.ioc_, [&m] { m.begin_drain(); });
    m.draining_.store(true);
}

bool http_server::draining() const {
    return impl_->draining_.load();
}

bool http_server::wait_idle(std::chrono::steady_clock::time_point deadline) const {
    while (impl_->stats_.n_active.load() > 0) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

void http_server::stop() {
    impl& m = *impl_;
    if (m.stopped_.exchange(true)) return;
    if (m.thread_.joinable()) {
        net::post(m.ioc_, [&m] {
            beast::error_code ignored;
            m.acceptor_.close(ignored);
            m.sampler_.cancel();
            for (auto& w : m.http_conns_) {
                if (auto c = w.lock()) {
                    c->stream.socket().close(ignored);
                    c->wake.cancel();
                }
            }
            for (auto& w : m.ws_conns_) {
                if (auto c = w.lock()) m.ws_close(*c);
            }
        });
        // Let the sessions unwind, then stop whatever is left.
        const auto deadline = steady_clock::now() + std::chrono::seconds(2);
        while (!m.ioc_.stopped() && steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        m.ioc_.stop();
        m.thread_.join();
    }
    m.prep_.join();  // a prep task still running finishes; its answer goes to the stopped I/O context
    std::lock_guard lock(m.target_->mutex);
    m.target_->ioc = nullptr;
}

const server_stats& http_server::stats() const {
    return impl_->stats_;
}

}  // namespace troupe::server
