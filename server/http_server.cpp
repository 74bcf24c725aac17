// The front end's listener and its public calls: bind and accept (each connection an http_session), the
// one-second metrics sampler, attach, drain and stop. The shared pieces and the map of the other files are in
// http_front.h.
#include "server/http_server.h"

#include <pthread.h>

#include <future>

#include "core/log/log.h"
#include "server/http_front.h"

namespace troupe::server {

net::awaitable<void> http_server::impl::accept_loop() {
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

net::awaitable<void> http_server::impl::sample_loop() {
    for (;;) {
        sampler_.expires_after(std::chrono::seconds(1));
        auto [ec] = co_await sampler_.async_wait(nothrow);
        if (ec || stopped_.load()) co_return;
        if (ready_.load()) history_.add(sample_of(model_.eng->snapshot(), uptime_s()));
        http_conns_.remove_if([](const auto& w) { return w.expired(); });
        ws_conns_.remove_if([](const auto& w) { return w.expired(); });
    }
}

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
        (void)::pthread_setname_np(::pthread_self(), "troupe-io");  // top -H; the stall test finds it by name
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
