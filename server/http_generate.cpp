// /v1/completions and /v1/chat/completions (http_front.h): the body parsed, rendered and tokenized on the prep
// pool, admission, one engine request per choice (n, best_of, several prompts), then the answer whole or
// streamed as SSE (chunked, or close-delimited for HTTP/1.0) while a watcher cancels the requests when the
// client goes away.
#include "core/log/log.h"
#include "core/tokenizer/tokenizer.h"
#include "server/choices.h"
#include "server/http_front.h"
#include "server/response_builder.h"

namespace troupe::server {

// The checks every generation request passes before submit; the error to answer, if any.
std::optional<api_error> http_server::impl::refuse_now() const {
    if (!ready_.load()) return unavailable("The model is loading; retry shortly");
    if (draining_.load() || stopped_.load()) return unavailable("The server is draining: no new requests");
    return std::nullopt;
}

std::function<void()> http_server::impl::waker(const std::shared_ptr<http_conn>& c) {
    return [target = target_, weak = std::weak_ptr<http_conn>(c)] {
        target->post([weak] {
            if (auto conn = weak.lock()) conn->wake.cancel();
        });
    };
}

std::shared_ptr<request_stream> http_server::impl::make_stream(int32_t n_prompt_tokens, int32_t n_sinks) {
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

net::awaitable<void> http_server::impl::wait_wake(net::steady_timer& wake) {
    wake.expires_at(steady_clock::time_point::max());
    auto [ec] = co_await wake.async_wait(nothrow);
    (void)ec;
}

net::awaitable<void> http_server::impl::watch_disconnect(std::shared_ptr<http_conn> c, std::shared_ptr<bool> done) {
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

net::awaitable<bool> http_server::impl::generate(const std::shared_ptr<http_conn>& c,
                                                 http::request<http::string_body>& req, api_kind kind) {
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
    parsed_and_prepared pp = co_await prep_.run(std::move(work));
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
    rs->set_on_overflow([eng = model_.eng, ids, target = target_, weak = std::weak_ptr<http_conn>(c), stats = &stats_] {
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
                     static_cast<long long>(id), kind == api_kind::chat ? "chat" : "completion", p.requests.size(),
                     p.n_prompt_tokens, r.sampling.max_tokens, r.stream ? ", streamed" : "");

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

}  // namespace troupe::server
