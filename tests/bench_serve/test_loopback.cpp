// The load client against a fake OpenAI server on loopback (Beast, in this process, its own thread): the
// fake sends the first token after ttft_ms and the rest ito_ms apart, so TTFT and ITL have known floors.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <thread>

#include "cli/bench_serve/load_client.h"
#include "cli/bench_serve/report.h"

namespace troupe::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct fake_server_params {
    int ttft_ms = 30;
    int itl_ms = 10;
    int status = 200;  // anything else: the answer is an error body
};

class fake_openai_server {
public:
    explicit fake_openai_server(fake_server_params p)
        : params_(p), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
        asio::co_spawn(io_, accept_loop(), asio::detached);
        thread_ = std::thread([this] { io_.run(); });
    }
    ~fake_openai_server() {
        io_.stop();
        thread_.join();
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
    int peak_in_flight() const { return peak_.load(); }
    int served() const { return served_.load(); }

private:
    asio::awaitable<void> accept_loop() {
        while (true) {
            tcp::socket s = co_await acceptor_.async_accept(asio::use_awaitable);
            s.set_option(tcp::no_delay(true));
            asio::co_spawn(io_, serve(std::move(s)), asio::detached);
        }
    }

    static std::string chunk(const std::string& data) {
        const std::string event = "data: " + data + "\n\n";
        char size[16];
        std::snprintf(size, sizeof size, "%zx\r\n", event.size());
        return size + event + "\r\n";
    }

    asio::awaitable<void> serve(tcp::socket socket) {
        beast::tcp_stream stream(std::move(socket));
        beast::flat_buffer buffer;
        http::request<http::string_body> req;
        auto [ec, n] = co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        if (req.method() == http::verb::get) {
            http::response<http::string_body> res{http::status::ok, 11};
            res.body() = req.target() == "/v1/models" ? R"({"object":"list","data":[{"id":"fake-model"}]})"
                                                      : "# TYPE troupe_prefix_cache_hits_total counter\n"
                                                        "troupe_prefix_cache_hits_total " +
                                                            std::to_string(served_.load()) + "\n";
            res.prepare_payload();
            co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
            co_return;
        }
        const int now = ++in_flight_;
        int peak = peak_.load();
        while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
        }
        asio::steady_timer timer(co_await asio::this_coro::executor);
        if (params_.status != 200) {
            http::response<http::string_body> res{static_cast<http::status>(params_.status), 11};
            res.body() = R"({"error":{"message":"overloaded"}})";
            res.prepare_payload();
            co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
            --in_flight_;
            co_return;
        }
        const auto body = boost::json::parse(req.body()).as_object();
        const int64_t max_tokens = body.at("max_tokens").as_int64();
        std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: "
            "close\r\n\r\n";
        co_await asio::async_write(stream.socket(), asio::buffer(head), asio::as_tuple(asio::use_awaitable));
        for (int64_t i = 0; i < max_tokens; ++i) {
            timer.expires_after(std::chrono::milliseconds(i == 0 ? params_.ttft_ms : params_.itl_ms));
            co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
            const std::string c = chunk(R"({"choices":[{"index":0,"text":" tok","finish_reason":null}]})");
            co_await asio::async_write(stream.socket(), asio::buffer(c), asio::as_tuple(asio::use_awaitable));
        }
        std::string tail = chunk(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})") +
                           chunk(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":)" +
                                 std::to_string(max_tokens) + "}}") +
                           chunk("[DONE]") + "0\r\n\r\n";
        // Counted before the last write: the client may read it, finish and check (or start its next
        // request) before this coroutine resumes.
        ++served_;
        --in_flight_;
        co_await asio::async_write(stream.socket(), asio::buffer(tail), asio::as_tuple(asio::use_awaitable));
        beast::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }

    fake_server_params params_;
    asio::io_context io_;
    tcp::acceptor acceptor_;
    std::thread thread_;
    std::atomic<int> in_flight_{0};
    std::atomic<int> peak_{0};
    std::atomic<int> served_{0};
};

std::vector<request_spec> specs(int n, int32_t max_tokens) {
    std::vector<request_spec> v;
    for (int i = 0; i < n; ++i) v.push_back({"prompt " + std::to_string(i), 3, max_tokens, 0.0});
    return v;
}

load_run_params params_for(const std::string& url, std::span<const request_spec> reqs) {
    load_run_params p;
    p.url = *parse_url(url);
    p.model = "fake-model";
    p.timeout_s = 20;
    p.requests = reqs;
    return p;
}

TEST(loopback, ttft_and_itl_follow_the_servers_pacing_and_the_concurrency_cap_holds) {
    fake_openai_server server({30, 10, 200});
    const auto reqs = specs(6, 8);
    load_run_params p = params_for(server.url(), reqs);
    p.max_concurrency = 2;
    p.metrics_interval_s = 0.05;
    const load_run_result run = run_load(p);
    ASSERT_EQ(run.records.size(), 6u);
    EXPECT_EQ(server.served(), 6);
    // About 0.33 s of run polled every 50 ms; each poll saw what was in flight then.
    EXPECT_GE(run.polls.size(), 3u);
    for (const auto& poll : run.polls) {
        EXPECT_NE(poll.text.find("troupe_prefix_cache_hits_total"), std::string::npos);
        EXPECT_LE(poll.n_in_flight, 2);
        EXPECT_LE(poll.client_live_tokens, 2 * (3 + 8));
    }
    EXPECT_EQ(server.peak_in_flight(), 2);
    for (const auto& r : run.records) {
        ASSERT_TRUE(r.ok) << r.error;
        EXPECT_TRUE(r.usage_reported);
        EXPECT_EQ(r.output_tokens, 8);
        EXPECT_EQ(r.prompt_tokens, 7);  // the server's usage replaces the estimate
        EXPECT_GE(r.ttft_s, 0.029);
        EXPECT_LT(r.ttft_s, 1.0);
        ASSERT_EQ(r.itl_s.size(), 7u);  // eight token chunks
        // The server sleeps 10 ms between chunks, but a busy client can read two chunks together after
        // a late one: single gaps may be short, their sum cannot.
        double itl_sum = 0;
        for (double g : r.itl_s) {
            EXPECT_GE(g, 0.0);
            EXPECT_LT(g, 0.5);
            itl_sum += g;
        }
        EXPECT_GE(itl_sum, 7 * 0.009);
        EXPECT_GE(r.e2e_s, r.ttft_s + 7 * 0.009);
    }
    // Three waves of two: the run lasts at least three requests' time.
    EXPECT_GE(run.duration_s, 3 * (0.03 + 7 * 0.01) * 0.95);
    const auto s = summarize(run.records, run.duration_s, slo_config{1000, 0, 0});
    EXPECT_EQ(s.completed, 6);
    EXPECT_EQ(s.n_good, 6);
    EXPECT_GE(s.itl_ms.median, 9.0);
    EXPECT_LT(s.itl_ms.median, 60.0);
    EXPECT_GE(s.tpot_ms.mean, 9.0);
}

TEST(loopback, arrivals_are_honoured_when_slots_are_free) {
    fake_openai_server server({5, 5, 200});
    auto reqs = specs(3, 2);
    reqs[1].arrival_s = 0.2;
    reqs[2].arrival_s = 0.4;
    const load_run_result run = run_load(params_for(server.url(), reqs));
    ASSERT_TRUE(run.records[2].ok) << run.records[2].error;
    EXPECT_NEAR(run.records[1].start_s, 0.2, 0.05);
    EXPECT_NEAR(run.records[2].start_s, 0.4, 0.05);
}

TEST(loopback, error_answers_and_refused_connections_are_failures_with_reasons) {
    fake_openai_server server({5, 5, 503});
    const auto reqs = specs(2, 4);
    const load_run_result run = run_load(params_for(server.url(), reqs));
    for (const auto& r : run.records) {
        EXPECT_FALSE(r.ok);
        EXPECT_NE(r.error.find("HTTP 503"), std::string::npos) << r.error;
        EXPECT_NE(r.error.find("overloaded"), std::string::npos) << r.error;
    }
    // A port nobody listens on: take a free one and close it.
    std::string closed_url;
    {
        asio::io_context io;
        tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
        closed_url = "http://127.0.0.1:" + std::to_string(a.local_endpoint().port());
    }
    const load_run_result refused = run_load(params_for(closed_url, reqs));
    EXPECT_FALSE(refused.records[0].ok);
    EXPECT_FALSE(refused.records[0].error.empty());
}

TEST(loopback, models_and_metrics_are_read_and_a_report_is_written) {
    fake_openai_server server({5, 5, 200});
    const http_url url = *parse_url(server.url());
    auto models = http_get(url, "/v1/models", 5);
    ASSERT_TRUE(models) << models.message();
    EXPECT_EQ(*first_model_id(*models), "fake-model");
    run_report report;
    report.metrics_before = parse_prometheus(*http_get(url, "/metrics", 5));
    const auto reqs = specs(4, 5);
    const load_run_result run = run_load(params_for(server.url(), reqs));
    report.metrics_after = parse_prometheus(*http_get(url, "/metrics", 5));
    report.config.name = "loopback";
    report.config.target.model = "fake-model";
    report.summary = summarize(run.records, run.duration_s, report.config.slo);
    report.requests = run.records;
    auto json = boost::json::parse(report_json(report)).as_object();
    EXPECT_EQ(json.at("completed").as_int64(), 4);
    EXPECT_EQ(json.at("total_output_tokens").as_int64(), 20);
    EXPECT_GT(json.at("output_throughput").as_double(), 0.0);
    EXPECT_GT(json.at("ttft_ms").as_object().at("median").as_double(), 4.0);
    EXPECT_DOUBLE_EQ(
        json.at("server_metrics").as_object().at("troupe_prefix_cache_hits_total").as_object().at("delta").as_double(),
        4.0);
    EXPECT_EQ(json.at("requests").as_array().size(), 4u);
    const std::string md = report_markdown(report);
    EXPECT_NE(md.find("| completed / failed | 4 / 0 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| ITL |"), std::string::npos) << md;
}

}  // namespace
}  // namespace troupe::bench
