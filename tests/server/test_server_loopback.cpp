// The server end to end over loopback, in process, with the real stories260K model: OpenAI completions
// and chat completions (whole and streamed), errors, overload, disconnects, determinism, the WebSocket
// protocol, the admin API, /metrics and /health.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "actors/tokenizer/tokenizer_codec.h"
#include "tests/common/shared_data.h"
#include "tests/golden/golden_runs.h"
#include "tests/server/api_json.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"

namespace troupe::testing {
namespace {
namespace json = boost::json;
using namespace std::chrono_literals;

std::string str(const json::value& v) {
    return v.is_string() ? std::string(v.as_string()) : std::string();
}

class server_loopback : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto model = shared_file("models/stories260K.gguf");
        auto golden = shared_file("golden/stories260K-greedy.json");
        if (!model || !golden) return;
        std::string error;
        live_ = start_live_server(test_config(*model), false, error).release();
        if (!live_) {
            setup_error_ = error;
            return;
        }
        run_ = new golden_run(load_golden_runs(*golden).front());
        auto detok = make_tokenizer_codec(live_->model.tok)->make_decoder();
        std::string text;
        for (int32_t id : run_->generated_ids) text += detok->push(id);
        golden_text_ = new std::string(text + detok->flush());
    }
    static void TearDownTestSuite() {
        delete live_;
        live_ = nullptr;
        delete run_;
        delete golden_text_;
    }
    void SetUp() override {
        TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
        ASSERT_NE(live_, nullptr) << setup_error_;
        port_ = live_->port;
    }

    http_reply post(std::string_view target, std::string_view body) { return http_call(port_, "POST", target, body); }

    static inline live_server* live_ = nullptr;
    static inline golden_run* run_ = nullptr;
    static inline std::string* golden_text_ = nullptr;
    static inline std::string setup_error_;
    uint16_t port_ = 0;
};

const std::string greedy_completion =
    R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":48,"temperature":0})";

TEST_F(server_loopback, health_is_200_and_models_names_the_model_context_and_chat_template) {
    auto h = http_call(port_, "GET", "/health");
    EXPECT_EQ(h.status, 200) << h.error;
    EXPECT_EQ(parse_object(h.body)["status"].as_string(), "ok");
    auto m = http_call(port_, "GET", "/v1/models");
    ASSERT_EQ(m.status, 200);
    auto model = parse_object(m.body)["data"].as_array()[0].as_object();
    EXPECT_EQ(model["id"].as_string(), "stories260K");
    EXPECT_EQ(model["chat_template"].as_string(), "plain");
    EXPECT_GT(model["context_length"].as_int64(), 0);
}

TEST_F(server_loopback, a_greedy_completion_equals_the_golden_continuation_with_usage) {
    auto r = post("/v1/completions", greedy_completion);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["content-type"], "application/json");
    auto o = parse_object(r.body);
    auto choice = o["choices"].as_array()[0].as_object();
    EXPECT_EQ(str(choice["text"]), *golden_text_);
    EXPECT_EQ(str(choice["finish_reason"]), "length");
    EXPECT_EQ(o["usage"].as_object()["prompt_tokens"].as_int64(), static_cast<int64_t>(run_->prompt_ids.size()));
    EXPECT_EQ(o["usage"].as_object()["completion_tokens"].as_int64(), 48);
    EXPECT_EQ(o["usage"].as_object()["total_tokens"].as_int64(), 48 + static_cast<int64_t>(run_->prompt_ids.size()));
    EXPECT_EQ(str(o["object"]), "text_completion");
    EXPECT_EQ(str(o["id"]).rfind("cmpl-", 0), 0u);
}

TEST_F(server_loopback, the_sse_stream_concatenates_to_the_whole_answer_and_ends_with_usage_and_done) {
    auto r = post(
        "/v1/completions",
        R"({"prompt":"Once upon a time","max_tokens":48,"temperature":0,"stream":true,"stream_options":{"include_usage":true}})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["content-type"], "text/event-stream");
    bool done = false;
    auto events = sse_objects(r.body, done);
    EXPECT_TRUE(done);
    ASSERT_GE(events.size(), 3u);
    std::string text;
    std::string finish;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        auto choice = events[i]["choices"].as_array()[0].as_object();
        text += str(choice["text"]);
        if (choice["finish_reason"].is_string()) finish = str(choice["finish_reason"]);
        EXPECT_TRUE(events[i]["usage"].is_null());
    }
    EXPECT_EQ(text, *golden_text_);
    EXPECT_EQ(finish, "length");
    EXPECT_TRUE(events.back()["choices"].as_array().empty());
    EXPECT_EQ(events.back()["usage"].as_object()["completion_tokens"].as_int64(), 48);
}

TEST_F(server_loopback, chat_completions_use_the_plain_template_whole_and_streamed) {
    const std::string body =
        R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":48,"temperature":0)";
    auto r = post("/v1/chat/completions", body + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    auto o = parse_object(r.body);
    EXPECT_EQ(str(o["object"]), "chat.completion");
    auto message = o["choices"].as_array()[0].as_object()["message"].as_object();
    EXPECT_EQ(str(message["role"]), "assistant");
    EXPECT_EQ(str(message["content"]), *golden_text_);  // plain: the prompt is the message itself

    auto s = post("/v1/chat/completions", body + R"(,"stream":true})");
    ASSERT_EQ(s.status, 200) << s.body;
    bool done = false;
    auto events = sse_objects(s.body, done);
    EXPECT_TRUE(done);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(str(events[0]["choices"].as_array()[0].as_object()["delta"].as_object()["role"]), "assistant");
    std::string text;
    for (auto& e : events) {
        auto delta = e["choices"].as_array()[0].as_object()["delta"].as_object();
        if (delta.contains("content")) text += str(delta["content"]);
    }
    EXPECT_EQ(text, *golden_text_);
}

TEST_F(server_loopback, logprobs_and_stop_strings_follow_openai) {
    auto r = post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0,"logprobs":2})");
    ASSERT_EQ(r.status, 200) << r.body;
    auto lp = parse_object(r.body)["choices"].as_array()[0].as_object()["logprobs"];
    ASSERT_TRUE(lp.is_object()) << r.body;
    auto tokens = lp.as_object()["tokens"].as_array();
    EXPECT_EQ(tokens.size(), 8u);
    auto top = lp.as_object()["top_logprobs"].as_array();
    ASSERT_EQ(top.size(), 8u);
    EXPECT_EQ(top[0].as_object().size(), 2u);
    EXPECT_LE(lp.as_object()["token_logprobs"].as_array()[0].as_double(), 0.0);

    auto chat = post(
        "/v1/chat/completions",
        R"({"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4,"temperature":0,"logprobs":true,"top_logprobs":3})");
    ASSERT_EQ(chat.status, 200) << chat.body;
    auto content =
        parse_object(chat.body)["choices"].as_array()[0].as_object()["logprobs"].as_object()["content"].as_array();
    ASSERT_EQ(content.size(), 4u);
    EXPECT_EQ(content[0].as_object()["top_logprobs"].as_array().size(), 3u);

    // The golden text has "Lily." early: stopping at "." cuts there, with finish_reason stop.
    auto stop = post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":48,"temperature":0,"stop":"."})");
    ASSERT_EQ(stop.status, 200) << stop.body;
    auto choice = parse_object(stop.body)["choices"].as_array()[0].as_object();
    EXPECT_EQ(str(choice["text"]), golden_text_->substr(0, golden_text_->find('.')));
    EXPECT_EQ(str(choice["finish_reason"]), "stop");
}

TEST_F(server_loopback, bad_requests_get_openai_errors_with_the_right_status) {
    std::string long_prompt;
    for (int i = 0; i < 3000; ++i) long_prompt += "time ";
    struct row {
        const char* method;
        const char* target;
        std::string body;
        int status;
        const char* code_or_param;
    };
    const std::vector<row> rows = {
        {"POST", "/v1/completions", "{not json", 400, ""},
        {"POST", "/v1/completions", R"({"prompt":42})", 400, "prompt"},
        {"POST", "/v1/completions", R"({"prompt":"a","temperature":"hot"})", 400, "temperature"},
        {"POST", "/v1/completions", R"({"prompt":"a","bogus":true})", 400, "bogus"},
        {"POST", "/v1/completions", R"({"prompt":"a","n":0})", 400, "n"},
        {"POST", "/v1/completions", R"({"prompt":"a","logit_bias":{"100000":1}})", 400, "logit_bias"},
        {"POST", "/v1/chat/completions",
         R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"string","pattern":"(a)\\1"}}}})",
         400, "response_format"},
        {"POST", "/v1/completions", R"({"prompt":"a","model":"gpt-4"})", 404, "model_not_found"},
        {"POST", "/v1/completions", R"({"prompt":")" + long_prompt + R"("})", 400, "context_length_exceeded"},
        {"POST", "/v1/completions", R"({"prompt":")" + std::string(100000, 'x') + R"("})", 413, "request_too_large"},
        {"POST", "/v1/completions", "{\"prompt\":\"\xff\xfe\"}", 400, ""},
        {"POST", "/v1/chat/completions", R"({"messages":[]})", 400, "messages"},
        {"POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":""}]})", 200, ""},
        {"POST", "/v1/nothing", "{}", 404, "not_found"},
        {"GET", "/v1/completions", "", 405, "method_not_allowed"},
        {"POST", "/v1/completions", R"({"prompt":[999999]})", 400, "prompt"},
    };
    for (const auto& r : rows) {
        auto reply = http_call(port_, r.method, r.target, r.body);
        EXPECT_EQ(reply.status, r.status) << r.target << " " << r.body.substr(0, 80) << " -> " << reply.body;
        if (r.status == 200) continue;
        auto err = parse_object(reply.body)["error"].as_object();
        EXPECT_FALSE(str(err["message"]).empty());
        const std::string want = r.code_or_param;
        if (!want.empty()) {
            EXPECT_TRUE(str(err["code"]) == want || str(err["param"]) == want) << reply.body;
        }
    }
    EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
}

TEST_F(server_loopback, eight_identical_concurrent_greedy_requests_return_identical_text) {
    std::vector<std::string> texts(8);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&, i] {
            auto r = http_call(port_, "POST", "/v1/completions", greedy_completion);
            if (r.status == 200) {
                json::value v = json::parse(r.body);
                texts[i] = std::string(v.as_object().at("choices").as_array()[0].as_object().at("text").as_string());
            }
        });
    }
    for (auto& t : threads) t.join();
    for (const auto& t : texts) EXPECT_EQ(t, *golden_text_);
}

TEST_F(server_loopback, seeded_sampling_gives_the_same_text_alone_and_in_a_busy_batch) {
    const std::string seeded = R"({"prompt":"Tom had a","max_tokens":40,"temperature":0.9,"seed":1234})";
    auto alone = post("/v1/completions", seeded);
    ASSERT_EQ(alone.status, 200) << alone.body;
    const std::string expected = str(parse_object(alone.body)["choices"].as_array()[0].as_object()["text"]);
    EXPECT_FALSE(expected.empty());
    std::vector<std::thread> others;
    for (int i = 0; i < 4; ++i) {
        others.emplace_back([this, i] {
            (void)http_call(
                port_, "POST", "/v1/completions",
                R"({"prompt":"Lily went","max_tokens":60,"temperature":1.0,"seed":)" + std::to_string(i) + "}");
        });
    }
    auto busy = post("/v1/completions", seeded);
    for (auto& t : others) t.join();
    ASSERT_EQ(busy.status, 200) << busy.body;
    EXPECT_EQ(str(parse_object(busy.body)["choices"].as_array()[0].as_object()["text"]), expected);
}

TEST_F(server_loopback, the_websocket_streams_deltas_then_done_with_usage_and_timings) {
    ws_client ws;
    ASSERT_TRUE(ws.connect(port_));
    auto hello = ws.read(5000);
    ASSERT_TRUE(hello.has_value());
    EXPECT_EQ(str(parse_object(*hello)["type"]), "hello");
    ASSERT_TRUE(ws.send(
        R"({"type":"start","id":"a1","messages":[{"role":"user","content":"Once upon a time"}],"params":{"temperature":0,"max_tokens":48}})"));
    std::string text;
    json::object done;
    for (int i = 0; i < 200; ++i) {
        auto m = ws.read(10000);
        ASSERT_TRUE(m.has_value()) << "no message";
        auto o = parse_object(*m);
        EXPECT_EQ(str(o["id"]), "a1");
        if (str(o["type"]) == "delta") {
            text += str(o["text"]);
            continue;
        }
        done = o;
        break;
    }
    EXPECT_EQ(str(done["type"]), "done");
    EXPECT_EQ(str(done["finish_reason"]), "length");
    EXPECT_EQ(text, *golden_text_);
    EXPECT_EQ(done["usage"].as_object()["completion_tokens"].as_int64(), 48);
    EXPECT_GT(done["timings"].as_object()["ttft_ms"].as_double(), 0.0);

    ASSERT_TRUE(ws.send(R"({"type":"start","id":"a2"})"));
    auto err = ws.read(5000);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(str(parse_object(*err)["type"]), "error");
    EXPECT_EQ(str(parse_object(*err)["id"]), "a2");
    ASSERT_TRUE(ws.send("not json at all"));
    err = ws.read(5000);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(str(parse_object(*err)["type"]), "error");
}

TEST_F(server_loopback, a_websocket_client_that_never_reads_is_cut_off_and_its_requests_cancelled) {
    const int64_t closes_before = live_->srv->stats().n_slow_client_closes.load();
    ws_client ws;
    ws.set_small_receive_buffer();
    ASSERT_TRUE(ws.connect(port_));
    for (int i = 0; i < 100; ++i) {
        if (!ws.send(R"({"type":"start","id":"s)" + std::to_string(i) +
                     R"(","prompt":"Once upon a time","params":{"temperature":1,"seed":)" + std::to_string(i) +
                     R"(,"max_tokens":400,"ignore_eos":true}})")) {
            break;
        }
    }
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (live_->srv->stats().n_slow_client_closes.load() == closes_before &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_GT(live_->srv->stats().n_slow_client_closes.load(), closes_before);
    while (live_->srv->stats().n_active.load() > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(live_->srv->stats().n_active.load(), 0);
    EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
}

TEST_F(server_loopback, admin_needs_the_token_and_shows_state_metrics_has_the_names) {
    EXPECT_EQ(http_call(port_, "GET", "/admin/api/state").status, 401);
    EXPECT_EQ(http_call(port_, "GET", "/admin/api/state", {}, {{"Authorization", "Bearer wrong"}}).status, 401);
    EXPECT_EQ(http_call(port_, "POST", "/admin/api/drain").status, 401);
    auto page = http_call(port_, "GET", "/admin");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.headers["content-type"].find("text/html"), std::string::npos);
    EXPECT_EQ(http_call(port_, "GET", "/").status, 200);
    EXPECT_EQ(http_call(port_, "HEAD", "/health").status, 200);

    ASSERT_EQ(post("/v1/completions", R"({"prompt":"Once","max_tokens":2})").status, 200);  // the engine has run
    auto state = http_call(port_, "GET", "/admin/api/state", {}, {{"Authorization", "Bearer test-token"}});
    ASSERT_EQ(state.status, 200) << state.body;
    auto o = parse_object(state.body);
    EXPECT_EQ(str(o["chat_template"]), "plain");
    EXPECT_FALSE(o["plugins"].as_array().empty());
    EXPECT_NE(str(o["config_yaml"]).find("server:"), std::string::npos);
    EXPECT_TRUE(o["snapshot"].as_object()["kv"].as_object()["n_blocks"].as_int64() > 0);
    EXPECT_EQ(http_call(port_, "GET", "/admin/api/state?token=test-token").status, 200);
    EXPECT_EQ(http_call(port_, "POST", "/admin/api/cancel/999999", {}, {{"Authorization", "Bearer test-token"}}).status,
              404);

    auto metrics = http_call(port_, "GET", "/metrics");
    ASSERT_EQ(metrics.status, 200);
    for (const char* name :
         {"troupe_requests_running", "troupe_requests_waiting", "troupe_kv_blocks{state=\"used\"}",
          "troupe_kv_blocks{state=\"cached\"}", "troupe_kv_blocks{state=\"free\"}", "troupe_prefix_cache_hit_rate",
          "troupe_time_to_first_token_milliseconds{quantile=\"0.9\"}", "troupe_time_per_output_token_milliseconds",
          "troupe_generation_tokens_total", "troupe_http_requests_total{code=\"2xx\"}"}) {
        EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
    }
}

TEST(server_spec, with_spec_ngram_metrics_and_the_console_state_carry_acceptance_and_draft_length_per_plugin) {
    auto model = shared_file("models/stories260K.gguf");
    if (!model) {
        if (in_ci()) FAIL() << missing_shared_message("models/stories260K.gguf");
        GTEST_SKIP() << missing_shared_message("models/stories260K.gguf");
    }
    engine_config c = test_config(*model);
    c.plugins.spec.name = "ngram";
    std::string error;
    std::unique_ptr<live_server> live = start_live_server(c, false, error);
    ASSERT_TRUE(live) << error;
    // A prompt that repeats itself: prompt lookup finds drafts at once.
    const auto r = http_call(live->port, "POST", "/v1/completions",
                             R"({"prompt":"Once upon a time, there was a dog. Once upon a time, there was a dog. )"
                             R"(Once upon a time, there","max_tokens":48,"temperature":0,"ignore_eos":true})");
    ASSERT_EQ(r.status, 200) << r.body;
    const auto metrics = http_call(live->port, "GET", "/metrics");
    ASSERT_EQ(metrics.status, 200);
    for (const char* name :
         {"troupe_spec_acceptance_rate{plugin=\"spec/ngram\"}", "troupe_spec_acceptance_length{plugin=\"spec/ngram\"}",
          "troupe_spec_draft_length{plugin=\"spec/ngram\"}", "troupe_spec_draft_cap{plugin=\"spec/ngram\"}",
          "troupe_spec_accepted_tokens_total{plugin=\"spec/ngram\"}"}) {
        EXPECT_NE(metrics.body.find(name), std::string::npos) << name << "\n" << metrics.body;
    }
    auto state = http_call(live->port, "GET", "/admin/api/state", {}, {{"Authorization", "Bearer test-token"}});
    ASSERT_EQ(state.status, 200);
    auto spec = parse_object(state.body)["snapshot"].as_object()["spec"].as_object();
    EXPECT_EQ(str(spec["plugin"]), "spec/ngram");
    EXPECT_TRUE(spec["adaptive"].as_bool());
    EXPECT_GT(spec["n_proposals"].as_int64(), 0);
    EXPECT_GT(spec["n_accepted"].as_int64(), 0);  // the repeated sentence is drafted and accepted
    EXPECT_GE(spec["acceptance_length"].as_double(), 1.0);
    EXPECT_GT(spec["draft_length"].as_double(), 0.0);
}

// A second server whose engine runs on a lane only the test drives: requests stay in flight until polled.
class server_manual : public ::testing::Test {
protected:
    void SetUp() override {
        TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
        engine_config c = test_config(model_path);
        c.server.max_queue_requests = 2;
        std::string error;
        live_ = start_live_server(c, true, error);
        ASSERT_NE(live_, nullptr) << error;
        port_ = live_->port;
    }
    // Drives the engine's lane until cond holds or the time runs out.
    template <class F>
    bool drive_until(F cond, std::chrono::milliseconds limit = 20000ms) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        while (!cond()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            live_->manual->poll_one();
            std::this_thread::sleep_for(200us);
        }
        return true;
    }
    size_t n_requests() { return live_->eng->snapshot().requests.size(); }

    std::unique_ptr<live_server> live_;
    uint16_t port_ = 0;
};

TEST_F(server_manual, past_the_queue_bound_new_requests_get_429_at_once_and_running_ones_finish) {
    std::vector<http_reply> first(2);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
        threads.emplace_back([&, i] {
            first[i] = http_call(port_, "POST", "/v1/completions",
                                 R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
        });
    }
    ASSERT_TRUE(drive_until([&] { return live_->srv->stats().n_queued.load() == 2; }, 10000ms));
    const auto t0 = std::chrono::steady_clock::now();
    auto refused = http_call(port_, "POST", "/v1/completions", R"({"prompt":"Once","max_tokens":8})");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    EXPECT_EQ(refused.status, 429) << refused.body;
    EXPECT_EQ(str(parse_object(refused.body)["error"].as_object()["type"]), "rate_limit_error");
    ws_client ws;
    ASSERT_TRUE(ws.connect(port_));
    (void)ws.read(5000);  // hello
    ASSERT_TRUE(ws.send(R"({"type":"start","id":"x","prompt":"Once"})"));
    auto err = ws.read(5000);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(str(parse_object(*err)["type"]), "error");
    EXPECT_NE(str(parse_object(*err)["message"]).find("overloaded"), std::string::npos);

    ASSERT_TRUE(drive_until([&] { return live_->srv->stats().n_active.load() == 0; }));
    for (auto& t : threads) t.join();
    for (auto& r : first) {
        EXPECT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(parse_object(r.body)["usage"].as_object()["completion_tokens"].as_int64(), 8);
    }
}

TEST_F(server_manual, a_client_that_disconnects_mid_stream_cancels_its_request_and_frees_its_blocks) {
    std::atomic<bool> hung_up{false};
    std::string got;
    std::thread client([&] {
        got = post_then_hang_up(
            port_, "/v1/completions",
            R"({"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"temperature":0,"stream":true})", 300,
            20000);
        hung_up = true;
    });
    ASSERT_TRUE(drive_until([&] { return hung_up.load(); }));
    client.join();
    EXPECT_NE(got.find("data: "), std::string::npos);
    ASSERT_TRUE(drive_until([&] { return live_->srv->stats().n_disconnect_cancels.load() >= 1; }, 10000ms));
    ASSERT_TRUE(drive_until([&] { return n_requests() == 0; }, 10000ms));
    live_->manual->run_until_idle();
    const engine_snapshot s = live_->eng->snapshot();
    EXPECT_EQ(s.kv.n_used, 0);
    EXPECT_EQ(s.n_cancelled, 1);
    EXPECT_LT(s.n_generated_tokens, 300);
    EXPECT_EQ(live_->srv->stats().n_active.load(), 0);
}

TEST_F(server_manual, websocket_cancel_ends_the_request_with_finish_reason_cancelled) {
    ws_client ws;
    ASSERT_TRUE(ws.connect(port_));
    (void)ws.read(5000);  // hello
    ASSERT_TRUE(ws.send(
        R"({"type":"start","id":"c1","prompt":"Once upon a time","params":{"max_tokens":300,"ignore_eos":true}})"));
    ASSERT_TRUE(drive_until([&] { return n_requests() == 1; }, 10000ms));
    ASSERT_TRUE(ws.send(R"({"type":"cancel","id":"c1"})"));
    ASSERT_TRUE(drive_until([&] { return live_->srv->stats().n_active.load() == 0; }));
    std::optional<std::string> last;
    for (int i = 0; i < 400; ++i) {
        auto m = ws.read(5000);
        if (!m) break;
        last = m;
        if (str(parse_object(*m)["type"]) != "delta") break;
    }
    ASSERT_TRUE(last.has_value());
    auto o = parse_object(*last);
    EXPECT_EQ(str(o["type"]), "done") << *last;
    EXPECT_EQ(str(o["finish_reason"]), "cancelled");
    EXPECT_LT(o["usage"].as_object()["completion_tokens"].as_int64(), 300);
}

TEST_F(server_manual, admin_cancel_and_drain_act_on_the_engine) {
    http_reply pending;
    std::thread client([&] {
        pending = http_call(port_, "POST", "/v1/completions",
                            R"({"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true})");
    });
    ASSERT_TRUE(drive_until([&] { return n_requests() == 1; }, 10000ms));
    const request_id id = live_->eng->snapshot().requests[0].id;
    const header_list auth = {{"Authorization", "Bearer test-token"}};
    auto state = http_call(port_, "GET", "/admin/api/state", {}, auth);
    EXPECT_NE(state.body.find("\"id\":" + std::to_string(id)), std::string::npos);
    auto c = http_call(port_, "POST", "/admin/api/cancel/" + std::to_string(id), {}, auth);
    EXPECT_EQ(c.status, 200) << c.body;
    ASSERT_TRUE(drive_until([&] { return live_->srv->stats().n_active.load() == 0; }));
    client.join();
    EXPECT_EQ(pending.status, 503) << pending.body;  // an operator's cancel is an error to the client

    auto d = http_call(port_, "POST", "/admin/api/drain", {}, auth);
    EXPECT_EQ(d.status, 200);
    EXPECT_TRUE(live_->srv->draining());
    EXPECT_EQ(http_call(port_, "GET", "/health").status, 503);
    auto refused = http_call(port_, "POST", "/v1/completions", R"({"prompt":"Once"})");
    EXPECT_EQ(refused.status, 503) << refused.body;
    EXPECT_FALSE(parse_object(http_call(port_, "GET", "/admin/api/state", {}, auth).body)["snapshot"]
                     .as_object()["accepting"]
                     .as_bool());
}

TEST(server_start, before_the_model_is_attached_health_and_the_api_answer_503_and_the_pages_load) {
    engine_config c;
    c.server.port = 0;
    c.log_level = log_level::warn;
    server::http_server srv(c);
    auto port = srv.listen();
    ASSERT_TRUE(port.ok()) << port.message();
    auto h = http_call(*port, "GET", "/health");
    EXPECT_EQ(h.status, 503);
    EXPECT_EQ(parse_object(h.body)["status"].as_string(), "loading");
    EXPECT_EQ(http_call(*port, "POST", "/v1/completions", R"({"prompt":"a"})").status, 503);
    EXPECT_EQ(http_call(*port, "GET", "/v1/models").status, 503);
    EXPECT_EQ(http_call(*port, "GET", "/").status, 200);
    EXPECT_EQ(http_call(*port, "GET", "/metrics").status, 200);
    // No admin token configured: the admin API is disabled, with a message saying how to enable it.
    auto admin = http_call(*port, "GET", "/admin/api/state", {}, {{"Authorization", "Bearer "}});
    EXPECT_EQ(admin.status, 403);
    EXPECT_NE(admin.body.find("server.admin_token"), std::string::npos);
    srv.stop();
    EXPECT_NE(http_call(*port, "GET", "/health", {}, {}, 1000).status, 200);
}

}  // namespace
}  // namespace troupe::testing
