// One HTTP/1.1 connection (http_front.h): the request guard on each header (Host, Origin, the API key, the
// body's size, Expect: 100-continue), the body read within server.max_body_bytes (an over-limit one answered
// with 413 and drained), the WebSocket upgrade handed to ws_session, every other request dispatched by handle(),
// and the writing of whole responses.
#include "core/log/log.h"
#include "server/http_front.h"

namespace troupe::server {
namespace {

// Past an over-limit body the server reads (and drops) at most this much, for at most this long, before
// it closes, so the client can finish sending and read the 413 instead of a connection reset.
constexpr uint64_t max_drain_bytes = 32u << 20;
constexpr auto max_drain_time = std::chrono::seconds(5);

}  // namespace

void http_server::impl::count_status(unsigned status) {
    stats_.n_http_requests.fetch_add(1);
    if (status < 300) {
        stats_.n_http_2xx.fetch_add(1);
    } else if (status < 500) {
        stats_.n_http_4xx.fetch_add(1);
    } else {
        stats_.n_http_5xx.fetch_add(1);
    }
}

http::response<http::string_body> http_server::impl::make_response(unsigned status, std::string_view content_type,
                                                                   std::string body, bool keep_alive) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "troupe");
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
}

response http_server::impl::error_response(const api_error& e, bool keep_alive) {
    auto res = make_response(static_cast<unsigned>(e.status), json_type, error_json(e), keep_alive);
    if (e.status == 401) res.set(http::field::www_authenticate, "Bearer");
    if (e.status == 429 || (e.status == 503 && e.code != "request_cancelled")) {
        res.set(http::field::retry_after, "1");
    }
    return res;
}

// Writes a whole response; false when the connection is no longer usable.
net::awaitable<bool> http_server::impl::send(http_conn& c, response& res) {
    count_status(res.result_int());
    for (const auto& [name, value] : c.cors) res.set(name, value);
    const bool keep = res.keep_alive();
    auto [ec, n] = co_await http::async_write(c.stream, res, nothrow);
    co_return !ec && keep;
}

net::awaitable<bool> http_server::impl::send_error(http_conn& c, const api_error& e, bool keep_alive) {
    response res = error_response(e, keep_alive);
    const bool ok = co_await send(c, res);
    co_return ok;
}

api_error http_server::impl::too_large() const {
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
net::awaitable<void> http_server::impl::drain(http_conn& c, beast::flat_buffer& buffer) {
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

net::awaitable<void> http_server::impl::http_session(std::shared_ptr<http_conn> c) {
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
net::awaitable<bool> http_server::impl::handle(const std::shared_ptr<http_conn>& c,
                                               http::request<http::string_body>& req) {
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

}  // namespace troupe::server
