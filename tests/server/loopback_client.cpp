#include "tests/server/loopback_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace troupe::testing {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
namespace {

void set_timeouts(tcp::socket& s, int timeout_ms) {
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool connect_to(net::io_context& ioc, tcp::socket& s, uint16_t port, int timeout_ms) {
    beast::error_code ec;
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
    if (ec) return false;
    set_timeouts(s, timeout_ms);
    return true;
}

}  // namespace

http_reply http_call(uint16_t port, std::string_view method, std::string_view target, std::string_view body,
                     const header_list& headers, int timeout_ms) {
    http_reply reply;
    net::io_context ioc;
    tcp::socket s(ioc);
    if (!connect_to(ioc, s, port, timeout_ms)) {
        reply.error = "connect failed";
        return reply;
    }
    http::request<http::string_body> req{http::string_to_verb(method), std::string(target), 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = std::string(body);
    req.prepare_payload();
    beast::error_code ec;
    http::write(s, req, ec);
    if (ec) {
        reply.error = "write: " + ec.message();
        // The server may still have answered (413 before reading the body).
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    if (method == "HEAD") parser.skip(true);  // the answer to HEAD has headers only
    http::read(s, buffer, parser, ec);
    if (ec) {
        reply.error += (reply.error.empty() ? "" : "; ") + std::string("read: ") + ec.message();
        if (!parser.is_header_done()) return reply;
    }
    auto& res = parser.get();
    reply.status = res.result_int();
    reply.body = res.body();
    for (const auto& f : res) {
        std::string name(f.name_string());
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        reply.headers[name] = std::string(f.value());
    }
    beast::error_code ignored;
    s.shutdown(tcp::socket::shutdown_both, ignored);
    return reply;
}

std::string raw_exchange(uint16_t port, std::string_view data, int timeout_ms) {
    net::io_context ioc;
    tcp::socket s(ioc);
    if (!connect_to(ioc, s, port, timeout_ms)) return {};
    beast::error_code ec;
    net::write(s, net::buffer(data.data(), data.size()), ec);
    s.shutdown(tcp::socket::shutdown_send, ec);
    std::string out;
    char buf[4096];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline && out.size() < (1u << 20)) {
        const size_t n = s.read_some(net::buffer(buf), ec);
        if (ec) break;
        out.append(buf, n);
    }
    return out;
}

std::string post_then_hang_up(uint16_t port, std::string_view target, std::string_view body, size_t n_bytes,
                              int timeout_ms) {
    net::io_context ioc;
    tcp::socket s(ioc);
    if (!connect_to(ioc, s, port, timeout_ms)) return {};
    std::string req = "POST " + std::string(target) +
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
    beast::error_code ec;
    net::write(s, net::buffer(req), ec);
    std::string out;
    char buf[256];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (out.size() < n_bytes && std::chrono::steady_clock::now() < deadline) {
        const size_t n = s.read_some(net::buffer(buf), ec);
        if (ec) break;
        out.append(buf, n);
    }
    // A hard close: RST, like a client process that dies.
    s.set_option(net::socket_base::linger(true, 0), ec);
    s.close(ec);
    return out;
}

struct raw_connection::impl {
    net::io_context ioc;
    tcp::socket s{ioc};
    std::string got;
    std::string error;
    bool closed = false;
};

raw_connection::raw_connection() : impl_(std::make_unique<impl>()) {}
raw_connection::~raw_connection() = default;

bool raw_connection::connect(uint16_t port, int timeout_ms) {
    return connect_to(impl_->ioc, impl_->s, port, timeout_ms);
}

bool raw_connection::write(std::string_view bytes) {
    beast::error_code ec;
    net::write(impl_->s, net::buffer(bytes.data(), bytes.size()), ec);
    if (ec) impl_->error = "write: " + ec.message();
    return !ec;
}

std::string raw_connection::read_until(std::string_view until, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[65536];
    while (!impl_->closed && (until.empty() || impl_->got.find(until) == std::string::npos) &&
           std::chrono::steady_clock::now() < deadline) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        set_timeouts(impl_->s, static_cast<int>(std::max<int64_t>(1, left.count())));
        beast::error_code ec;
        const size_t n = impl_->s.read_some(net::buffer(buf), ec);
        if (ec == net::error::would_block || ec == net::error::try_again) continue;  // SO_RCVTIMEO passed
        if (ec) {
            if (ec != net::error::eof) impl_->error = "read: " + ec.message();
            impl_->closed = true;
            break;
        }
        impl_->got.append(buf, n);
    }
    return impl_->got;
}

std::string raw_connection::read_to_close(int timeout_ms) {
    return read_until({}, timeout_ms);
}

bool raw_connection::closed_by_server() const {
    return impl_->closed;
}

const std::string& raw_connection::error() const {
    return impl_->error;
}

struct ws_client::impl {
    net::io_context ioc;
    websocket::stream<tcp::socket> ws{ioc};
    bool small_buffer = false;
};

ws_client::ws_client() : impl_(std::make_unique<impl>()) {}
ws_client::~ws_client() {
    close();
}

void ws_client::set_small_receive_buffer() {
    impl_->small_buffer = true;
}

bool ws_client::connect(uint16_t port, int timeout_ms) {
    auto& s = impl_->ws.next_layer();
    beast::error_code ec;
    s.open(tcp::v4(), ec);
    if (impl_->small_buffer) s.set_option(net::socket_base::receive_buffer_size(4096), ec);
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
    if (ec) return false;
    set_timeouts(s, timeout_ms);
    impl_->ws.handshake("127.0.0.1", "/ws", ec);
    return !ec;
}

ws_handshake ws_client::connect_with(uint16_t port, std::string_view target, const header_list& headers,
                                     int timeout_ms) {
    ws_handshake out;
    auto& s = impl_->ws.next_layer();
    beast::error_code ec;
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
    if (ec) {
        out.error = "connect: " + ec.message();
        return out;
    }
    set_timeouts(s, timeout_ms);
    std::string host = "127.0.0.1";
    header_list extra;
    for (const auto& [k, v] : headers) {
        if (beast::iequals(k, "host")) {
            host = v;
        } else {
            extra.emplace_back(k, v);
        }
    }
    impl_->ws.set_option(websocket::stream_base::decorator([extra](websocket::request_type& req) {
        for (const auto& [k, v] : extra) req.set(k, v);
    }));
    websocket::response_type res;
    impl_->ws.handshake(res, host, target, ec);
    out.status = res.result_int();
    out.body = res.body();
    out.protocol = std::string(res[http::field::sec_websocket_protocol]);
    if (ec) out.error = "handshake: " + ec.message();
    return out;
}

bool ws_client::send(std::string_view text) {
    beast::error_code ec;
    impl_->ws.text(true);
    impl_->ws.write(net::buffer(text.data(), text.size()), ec);
    return !ec;
}

std::optional<std::string> ws_client::read(int timeout_ms) {
    set_timeouts(impl_->ws.next_layer(), timeout_ms);
    beast::flat_buffer buffer;
    beast::error_code ec;
    impl_->ws.read(buffer, ec);
    if (ec) return std::nullopt;
    return beast::buffers_to_string(buffer.data());
}

void ws_client::close() {
    if (!impl_) return;
    beast::error_code ec;
    if (impl_->ws.next_layer().is_open()) {
        impl_->ws.next_layer().set_option(net::socket_base::linger(true, 0), ec);
        impl_->ws.next_layer().close(ec);
    }
}

}  // namespace troupe::testing
