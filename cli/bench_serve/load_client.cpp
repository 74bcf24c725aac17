// The load generator's HTTP client: Asio coroutines and Beast (see load_client.h). Beast I/O throws at
// this edge; every exception becomes the failed request's error message.
#include "cli/bench_serve/load_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <exception>

#include "cli/bench_serve/sse_parser.h"

namespace troupe::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

double seconds(steady::duration d) {
    return std::chrono::duration<double>(d).count();
}

struct run_context {
    const load_run_params& params;
    std::string target;  // the request path
    int32_t in_flight = 0;
    int64_t live_tokens = 0;                   // prompt + received tokens of the requests in flight
    bool finished = false;                     // every request has ended
    asio::steady_timer* slot_freed = nullptr;  // cancelled whenever a request ends
    asio::steady_timer* poll_wait = nullptr;   // cancelled when the run ends
};

void on_event(const std::string& data, request_record& rec, bool& done, int32_t& n_token_chunks, double& last_token_s,
              double now_s, int64_t& live_tokens) {
    stream_chunk c = parse_stream_chunk(data);
    if (!c.error.empty()) {
        if (rec.error.empty()) rec.error = "server error in stream: " + c.error;
        return;
    }
    if (c.done) done = true;
    if (c.token) {
        if (n_token_chunks == 0)
            rec.ttft_s = now_s;
        else
            rec.itl_s.push_back(now_s - last_token_s);
        last_token_s = now_s;
        ++n_token_chunks;
        ++live_tokens;
    }
    if (c.completion_tokens) {
        rec.output_tokens = *c.completion_tokens;
        rec.usage_reported = true;
    }
    if (c.prompt_tokens) rec.prompt_tokens = *c.prompt_tokens;
}

asio::awaitable<void> one_request(run_context& ctx, const request_spec& spec, request_record& rec,
                                  steady::time_point run_start) {
    const load_run_params& p = ctx.params;
    auto ex = co_await asio::this_coro::executor;
    rec.requested_tokens = spec.max_tokens;
    rec.prompt_tokens = spec.prompt_tokens;
    const steady::time_point sent = steady::now();
    const steady::time_point deadline =
        sent + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(p.timeout_s));
    rec.start_s = seconds(sent - run_start);
    ctx.live_tokens += spec.prompt_tokens;
    bool done = false;
    int32_t n_token_chunks = 0;
    double last_token_s = 0.0;
    try {
        beast::tcp_stream stream(ex);
        tcp::resolver resolver(ex);
        const auto endpoints = co_await resolver.async_resolve(p.url.host, p.url.port, asio::use_awaitable);
        stream.expires_at(deadline);
        co_await stream.async_connect(endpoints, asio::use_awaitable);

        http::request<http::string_body> req{http::verb::post, ctx.target, 11};
        req.set(http::field::host, p.url.host + ":" + p.url.port);
        req.set(http::field::content_type, "application/json");
        req.set(http::field::accept, "text/event-stream");
        req.set(http::field::user_agent, "troupe-bench-serve");
        req.keep_alive(false);
        req.body() = request_body(p.endpoint, p.model, spec.prompt, spec.max_tokens, p.output);
        req.prepare_payload();
        stream.expires_at(deadline);
        co_await http::async_write(stream, req, asio::use_awaitable);

        beast::flat_buffer buffer;
        http::response_parser<http::buffer_body> parser;
        parser.body_limit(boost::none);
        stream.expires_at(deadline);
        co_await http::async_read_header(stream, buffer, parser, asio::use_awaitable);
        const unsigned status = parser.get().result_int();
        std::string error_body;
        sse_parser sse;
        std::vector<std::string> events;
        char chunk[16384];
        while (!parser.is_done()) {
            parser.get().body().data = chunk;
            parser.get().body().size = sizeof chunk;
            stream.expires_at(deadline);
            auto [ec, n] = co_await http::async_read_some(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
            if (ec == http::error::need_buffer) ec = {};
            if (ec && ec != http::error::end_of_stream) throw boost::system::system_error(ec);
            const size_t got = sizeof chunk - parser.get().body().size;
            const double now_s = seconds(steady::now() - sent);
            if (status != 200) {
                if (error_body.size() < 300) error_body.append(chunk, std::min(got, 300 - error_body.size()));
            } else if (got > 0) {
                events.clear();
                sse.feed(std::string_view(chunk, got), events);
                for (const auto& e : events)
                    on_event(e, rec, done, n_token_chunks, last_token_s, now_s, ctx.live_tokens);
            }
            if (ec == http::error::end_of_stream) break;
        }
        rec.e2e_s = seconds(steady::now() - sent);
        if (status != 200) {
            rec.error = "HTTP " + std::to_string(status) + ": " + error_body;
        } else if (rec.error.empty() && !done) {
            rec.error = "the stream ended without data: [DONE]";
        } else if (rec.error.empty() && n_token_chunks == 0) {
            rec.error = "the stream carried no tokens";
        }
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    } catch (const boost::system::system_error& e) {
        rec.e2e_s = seconds(steady::now() - sent);
        rec.error =
            steady::now() >= deadline ? "timed out after " + std::to_string(p.timeout_s) + " s" : e.code().message();
    } catch (const std::exception& e) {
        rec.e2e_s = seconds(steady::now() - sent);
        rec.error = e.what();
    }
    ctx.live_tokens -= spec.prompt_tokens + n_token_chunks;
    if (!rec.usage_reported) rec.output_tokens = n_token_chunks;
    rec.ok = rec.error.empty();
}

asio::awaitable<void> tracked_request(run_context& ctx, const request_spec& spec, request_record& rec,
                                      steady::time_point run_start) {
    co_await one_request(ctx, spec, rec, run_start);
    --ctx.in_flight;
    ctx.slot_freed->cancel();
}

asio::awaitable<void> get_body(const http_url& url, std::string target, double timeout_s, const std::string& bearer,
                               unsigned& status, std::string& body, std::string& error);

asio::awaitable<void> poll_metrics(run_context& ctx, load_run_result& out, steady::time_point run_start) {
    const load_run_params& p = ctx.params;
    const auto interval =
        std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(p.metrics_interval_s));
    while (!ctx.finished) {
        metrics_poll poll;
        poll.t_s = seconds(steady::now() - run_start);
        poll.client_live_tokens = ctx.live_tokens;
        poll.n_in_flight = ctx.in_flight;
        unsigned status = 0;
        std::string error;
        co_await get_body(p.url, p.url.base_path + "/metrics", 5.0, "", status, poll.text, error);
        if (status != 200) co_return;  // no /metrics: stop asking
        if (!p.admin_token.empty()) {
            co_await get_body(p.url, p.url.base_path + "/admin/api/state", 5.0, p.admin_token, status, poll.admin_state,
                              error);
            if (status != 200) poll.admin_state.clear();
        }
        if (ctx.finished) co_return;
        out.polls.push_back(std::move(poll));
        ctx.poll_wait->expires_after(interval);
        co_await ctx.poll_wait->async_wait(asio::as_tuple(asio::use_awaitable));
    }
}

asio::awaitable<void> run_all(run_context& ctx, load_run_result& out, steady::time_point run_start) {
    auto ex = co_await asio::this_coro::executor;
    const load_run_params& p = ctx.params;
    asio::steady_timer arrival(ex);
    asio::steady_timer slot_freed(ex);
    asio::steady_timer poll_wait(ex);
    ctx.slot_freed = &slot_freed;
    ctx.poll_wait = &poll_wait;
    if (p.metrics_interval_s > 0) asio::co_spawn(ex, poll_metrics(ctx, out, run_start), asio::detached);
    for (size_t i = 0; i < p.requests.size(); ++i) {
        const auto at = run_start + std::chrono::duration_cast<steady::duration>(
                                        std::chrono::duration<double>(p.requests[i].arrival_s));
        if (at > steady::now()) {
            arrival.expires_at(at);
            co_await arrival.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        while (p.max_concurrency > 0 && ctx.in_flight >= p.max_concurrency) {
            slot_freed.expires_at(steady::time_point::max());
            co_await slot_freed.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        ++ctx.in_flight;
        asio::co_spawn(ex, tracked_request(ctx, p.requests[i], out.records[i], run_start), asio::detached);
    }
    while (ctx.in_flight > 0) {
        slot_freed.expires_at(steady::time_point::max());
        co_await slot_freed.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    ctx.finished = true;
    poll_wait.cancel();
}

asio::awaitable<void> get_body(const http_url& url, std::string target, double timeout_s, const std::string& bearer,
                               unsigned& status, std::string& body, std::string& error) {
    auto ex = co_await asio::this_coro::executor;
    try {
        beast::tcp_stream stream(ex);
        tcp::resolver resolver(ex);
        const auto endpoints = co_await resolver.async_resolve(url.host, url.port, asio::use_awaitable);
        stream.expires_after(std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(timeout_s)));
        co_await stream.async_connect(endpoints, asio::use_awaitable);
        http::request<http::empty_body> req{http::verb::get, target, 11};
        req.set(http::field::host, url.host + ":" + url.port);
        if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
        req.keep_alive(false);
        co_await http::async_write(stream, req, asio::use_awaitable);
        beast::flat_buffer buffer;
        http::response<http::string_body> res;
        co_await http::async_read(stream, buffer, res, asio::use_awaitable);
        status = res.result_int();
        body = std::move(res.body());
    } catch (const boost::system::system_error& e) {
        error = e.code().message();
    } catch (const std::exception& e) {
        error = e.what();
    }
}

}  // namespace

load_run_result run_load(const load_run_params& params) {
    load_run_result out;
    out.records.resize(params.requests.size());
    run_context ctx{params, params.url.base_path + std::string(endpoint_path(params.endpoint))};
    asio::io_context io;
    const steady::time_point run_start = steady::now();
    std::exception_ptr failure;
    asio::co_spawn(io, run_all(ctx, out, run_start), [&](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) std::rethrow_exception(failure);  // a bug in the dispatcher, not a request failure
    double end_s = 0.0;
    for (const auto& r : out.records) end_s = std::max(end_s, r.start_s + r.e2e_s);
    out.duration_s = end_s;
    return out;
}

result<std::string> http_get(const http_url& url, std::string_view path, double timeout_s, const std::string& bearer) {
    asio::io_context io;
    unsigned status = 0;
    std::string body, error;
    const std::string target = url.base_path + std::string(path);
    asio::co_spawn(io, get_body(url, target, timeout_s, bearer, status, body, error), asio::detached);
    io.run();
    if (!error.empty()) return make_error("GET " + target + " from " + url.host + ":" + url.port + ": " + error);
    if (status != 200) {
        return make_error("GET " + target + ": HTTP " + std::to_string(status) + ": " + body.substr(0, 200));
    }
    return body;
}

}  // namespace troupe::bench
