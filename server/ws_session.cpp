// The WebSocket chat, /ws (http_front.h): one read loop per connection whose messages are parsed, rendered
// and tokenized on the prep pool in order, a writer draining an outgoing queue bounded by
// server.max_send_queue_bytes, and the connection's requests pumped from their streams into that queue;
// the read loop ending (or a client that does not read) cancels them.
#include "core/log/log.h"
#include "server/http_front.h"
#include "server/response_builder.h"

namespace troupe::server {
namespace {

// WebSocket messages up to this size are parsed on the I/O thread (microseconds; a cancel is ~40 bytes).
constexpr size_t ws_parse_here_bytes = 4096;

}  // namespace

void http_server::impl::ws_send(ws_conn& c, std::string msg) {
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
void http_server::impl::ws_close(ws_conn& c) {
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
void http_server::impl::ws_pump(ws_conn& c) {
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
                        ws_send(c, ws_error_json(it->first,
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

net::awaitable<void> http_server::impl::ws_writer(std::shared_ptr<ws_conn> c) {
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
void http_server::impl::start_ws_request(const std::shared_ptr<ws_conn>& c, ws_start& s,
                                         std::optional<prepared>& prep_or_none) {
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

net::awaitable<void> http_server::impl::ws_session(const std::shared_ptr<http_conn>& hc,
                                                   http::request<http::string_body>& req) {
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
        // A small message (a cancel, a short start) is parsed here, so that a cancel never waits behind the
        // prep pool, whose threads run below the engine's and wait while it generates on every core; a start
        // is rendered and tokenized on the pool, and a large message parsed there too. One connection's
        // messages stay in order: the next is read once this one is handled.
        struct parsed_and_prepared {
            ws_client_message m;
            std::optional<prepared> prep;
        };
        auto prepare = [this](parsed_and_prepared out) {
            auto* s = std::get_if<ws_start>(&out.m);
            if (s && ready_.load()) out.prep = prepare_request(model_, sc_, s->request);
            return out;
        };
        parsed_and_prepared pp;
        if (text.size() > ws_parse_here_bytes) {
            auto work = [this, prepare, text = std::move(text)] {
                return prepare(parsed_and_prepared{parse_ws_message(text, config_.sampling), std::nullopt});
            };
            pp = co_await prep_.run(std::move(work));
        } else {
            pp.m = parse_ws_message(text, config_.sampling);
            if (std::holds_alternative<ws_start>(pp.m)) {
                auto work = [prepare, parsed = std::move(pp)]() mutable { return prepare(std::move(parsed)); };
                pp = co_await prep_.run(std::move(work));
            }
        }
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

}  // namespace troupe::server
