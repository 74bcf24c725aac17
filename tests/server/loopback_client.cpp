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
