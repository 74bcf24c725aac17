// Protocol fixes (issue 11.4) and llama-server's endpoints, against a live stories260K server, with the
// requests a polite client does not send: a huge body with and without Expect: 100-continue, an HTTP/1.0
// stream, an operator's cancel, prompts and max_tokens past the context; then /tokenize, /detokenize and
// GET /v1/models/{id}.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/shared_data.h"
#include "tests/server/api_json.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"

namespace troupe::testing {
namespace {
namespace json = boost::json;
using namespace std::chrono_literals;

class server_protocol : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto model = shared_file("models/stories260K.gguf");
        if (!model) return;
        std::string error;
        live_ = start_live_server(test_config(*model), false, error).release();  // max_body_bytes 64 KiB
        if (!live_) setup_error_ = error;
    }
    static void TearDownTestSuite() {
        delete live_;
        live_ = nullptr;
    }
    void SetUp() override {
        TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
        ASSERT_NE(live_, nullptr) << setup_error_;
        port_ = live_->port;
        n_ctx_ = context_length();
    }
    int64_t context_length() {
        auto m = http_call(port_, "GET", "/v1/models/stories260K");
        return parse_object(m.body)["context_length"].as_int64();
    }
    static std::string post_head(std::string_view target, size_t length, std::string_view extra = {}) {
        return "POST " + std::string(target) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
               std::string(extra) + "Content-Length: " + std::to_string(length) + "\r\n\r\n";
    }

    static inline live_server* live_ = nullptr;
    static inline std::string setup_error_;
    uint16_t port_ = 0;
    int64_t n_ctx_ = 0;
};

TEST_F(server_protocol, an_over_limit_body_is_answered_413_and_the_client_reads_it_after_sending_the_whole_body) {
    // 8 MB against a 64 KiB limit: more than the socket buffers hold, so the server answers while the
    // client is still sending. Closing at once would reset the connection and lose the answer.
    // Most clients give up at a failed write without reading what the server said, so the whole body must
    // be taken (and dropped) before the answer is read.
    const std::string body = R"({"prompt":")" + std::string(8u << 20, 'x') + R"("})";
    for (int attempt = 0; attempt < 3; ++attempt) {
        raw_connection c;
        ASSERT_TRUE(c.connect(port_));
        EXPECT_TRUE(c.write(post_head("/v1/completions", body.size()) + body))
            << "attempt " << attempt << ": " << c.error();
        const std::string got = c.read_to_close(5000);
        EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << "attempt " << attempt << ": " << got.substr(0, 100);
        EXPECT_NE(got.find("request_too_large"), std::string::npos);
    }
    auto r = http_call(port_, "POST", "/v1/completions", body);
    EXPECT_EQ(r.status, 413) << r.error;
    EXPECT_EQ(str_of(error_of(r.body), "code"), "request_too_large");
    EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
}

TEST_F(server_protocol, with_expect_100_continue_an_over_limit_body_is_refused_before_it_is_sent) {
    raw_connection c;
    ASSERT_TRUE(c.connect(port_));
    ASSERT_TRUE(c.write(post_head("/v1/completions", 8u << 20, "Expect: 100-continue\r\n")));
    const std::string got = c.read_to_close(5000);
    EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 200);
    EXPECT_EQ(got.find("100 Continue"), std::string::npos);
    EXPECT_NE(got.find("request_too_large"), std::string::npos);
    EXPECT_TRUE(c.closed_by_server());
}

TEST_F(server_protocol, with_expect_100_continue_a_body_within_the_limit_is_invited_and_answered) {
    const std::string body = R"({"prompt":"Once upon a time","max_tokens":2,"temperature":0})";
    raw_connection c;
    ASSERT_TRUE(c.connect(port_));
    ASSERT_TRUE(c.write(post_head("/v1/completions", body.size(), "Expect: 100-continue\r\n")));
    const std::string interim = c.read_until("\r\n\r\n", 5000);
    ASSERT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << interim;
    ASSERT_TRUE(c.write(body));
    const std::string got = c.read_until("\"usage\"", 10000);
    EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
}

TEST_F(server_protocol, a_refusal_known_from_the_header_is_sent_before_an_expected_body) {
    raw_connection c;
    ASSERT_TRUE(c.connect(port_));
    ASSERT_TRUE(
        c.write("POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 100\r\n"
                "Expect: 100-continue\r\n\r\n"));
    const std::string got = c.read_to_close(5000);
    EXPECT_EQ(got.rfind("HTTP/1.1 403", 0), 0u) << got.substr(0, 200);
}

TEST_F(server_protocol, an_http_1_0_client_gets_a_close_delimited_stream_without_chunks) {
    const std::string body = R"({"prompt":"Once upon a time","max_tokens":12,"temperature":0,"stream":true})";
    raw_connection c;
    ASSERT_TRUE(c.connect(port_));
    ASSERT_TRUE(c.write("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body));
    const std::string got = c.read_to_close(20000);
    ASSERT_TRUE(c.closed_by_server()) << "the stream must end with the connection";
    const size_t head_end = got.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << got;
    std::string head = got.substr(0, head_end);
    for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_EQ(head.find("transfer-encoding"), std::string::npos) << head;
    EXPECT_EQ(head.find("content-length"), std::string::npos) << head;
    EXPECT_NE(head.find("connection: close"), std::string::npos) << head;
    const std::string payload = got.substr(head_end + 4);
    EXPECT_EQ(payload.rfind("data: {", 0), 0u) << "a chunk size line before the first event: " << payload.substr(0, 40);
    bool done = false;
    auto events = sse_objects(payload, done);
    EXPECT_TRUE(done);
    EXPECT_GE(events.size(), 2u);
    EXPECT_TRUE(payload.ends_with("data: [DONE]\n\n"))
        << "bytes after the last event: " << payload.substr(payload.size() - 20);
}

TEST_F(server_protocol, a_prompt_past_the_context_is_400_context_length_exceeded_in_openai_shape) {
    std::string long_prompt;
    for (int i = 0; i < 3000; ++i) long_prompt += "time ";
    for (const auto& [target, body] : std::vector<std::pair<std::string, std::string>>{
             {"/v1/completions", R"({"prompt":")" + long_prompt + R"("})"},
             {"/v1/chat/completions", R"({"messages":[{"role":"user","content":")" + long_prompt + R"("}]})"}}) {
        auto r = http_call(port_, "POST", target, body);
        EXPECT_EQ(r.status, 400) << target << ": " << r.body;
        auto e = error_of(r.body);
        EXPECT_EQ(str_of(e, "code"), "context_length_exceeded");
        EXPECT_EQ(str_of(e, "type"), "invalid_request_error");
        EXPECT_NE(str_of(e, "message").find("maximum context length is " + std::to_string(n_ctx_)), std::string::npos);
    }
}

TEST_F(server_protocol, max_tokens_past_the_context_is_refused_unless_the_request_opts_in_to_truncation) {
    const std::string past = std::to_string(n_ctx_);
    auto refused = http_call(port_, "POST", "/v1/completions",
                             R"({"prompt":"Once upon a time","temperature":0,"max_tokens":)" + past + "}");
    ASSERT_EQ(refused.status, 400) << refused.body;
    auto e = error_of(refused.body);
    EXPECT_EQ(str_of(e, "code"), "context_length_exceeded");
    EXPECT_EQ(str_of(e, "param"), "max_tokens");
    EXPECT_NE(str_of(e, "message").find("truncate_to_context"), std::string::npos);
    auto chat = http_call(port_, "POST", "/v1/chat/completions",
                          R"({"messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":)" + past + "}");
    EXPECT_EQ(chat.status, 400) << chat.body;

    // A prompt 8 tokens short of the context's end: opting in stops there, with finish_reason "length".
    std::string ids = "[1";
    for (int64_t i = 1; i < n_ctx_ - 8; ++i) ids += ",100";
    ids += "]";
    auto cut = http_call(port_, "POST", "/v1/completions",
                         R"({"prompt":)" + ids + R"(,"temperature":0,"ignore_eos":true,"max_tokens":64,)" +
                             R"("truncate_to_context":true})");
    ASSERT_EQ(cut.status, 200) << cut.body;
    auto o = parse_object(cut.body);
    EXPECT_EQ(str_of(o["choices"].as_array()[0].as_object(), "finish_reason"), "length");
    const int64_t n_out = o["usage"].as_object()["completion_tokens"].as_int64();
    EXPECT_GT(n_out, 0);
    EXPECT_LT(n_out, 64);
    // Without max_tokens the config's default is an upper bound, not a request: capped, not refused.
    auto capped =
        http_call(port_, "POST", "/v1/completions", R"({"prompt":)" + ids + R"(,"temperature":0,"ignore_eos":true})");
    EXPECT_EQ(capped.status, 200) << capped.body;
}

TEST_F(server_protocol, tokenize_and_detokenize_take_and_give_llama_servers_bodies) {
    auto t = http_call(port_, "POST", "/tokenize", R"({"content":"Once upon a time"})");
    ASSERT_EQ(t.status, 200) << t.body;
    auto tokens = parse_object(t.body)["tokens"].as_array();
    ASSERT_FALSE(tokens.empty());
    auto with_bos = http_call(port_, "POST", "/tokenize", R"({"content":"Once upon a time","add_special":true})");
    auto bos_tokens = parse_object(with_bos.body)["tokens"].as_array();
    ASSERT_EQ(bos_tokens.size(), tokens.size() + 1) << "add_special adds the BOS";
    EXPECT_EQ(bos_tokens[0].as_int64(), live_->model.tok->bos_id());

    auto d = http_call(port_, "POST", "/detokenize", R"({"tokens":)" + json::serialize(tokens) + "}");
    ASSERT_EQ(d.status, 200) << d.body;
    EXPECT_EQ(str_of(parse_object(d.body), "content"), "Once upon a time");

    auto pieces = http_call(port_, "POST", "/tokenize", R"({"content":"Once upon","with_pieces":true})");
    ASSERT_EQ(pieces.status, 200);
    std::string joined;
    const json::array piece_tokens = parse_object(pieces.body)["tokens"].as_array();
    for (const auto& p : piece_tokens) {
        EXPECT_TRUE(p.as_object().contains("id"));
        joined += std::string(p.as_object().at("piece").as_string());
    }
    EXPECT_EQ(joined, " Once upon");

    for (const auto& [target, body] :
         std::vector<std::pair<std::string, std::string>>{{"/tokenize", "{}"},
                                                          {"/tokenize", R"({"content":5})"},
                                                          {"/tokenize", R"({"content":"a","bogus":1})"},
                                                          {"/detokenize", R"({"tokens":[1,99999999]})"},
                                                          {"/detokenize", R"({"tokens":[-1]})"},
                                                          {"/detokenize", R"({"tokens":"1 2"})"},
                                                          {"/detokenize", "not json"}}) {
        auto r = http_call(port_, "POST", target, body);
        EXPECT_EQ(r.status, 400) << target << " " << body << " -> " << r.body;
        EXPECT_FALSE(str_of(error_of(r.body), "message").empty());
    }
    EXPECT_EQ(http_call(port_, "GET", "/tokenize").status, 405);
}

TEST_F(server_protocol, the_model_is_retrieved_by_id_and_an_unknown_id_is_404_model_not_found) {
    auto m = http_call(port_, "GET", "/v1/models/stories260K");
    ASSERT_EQ(m.status, 200) << m.body;
    auto o = parse_object(m.body);
    EXPECT_EQ(str_of(o, "id"), "stories260K");
    EXPECT_EQ(str_of(o, "object"), "model");
    EXPECT_EQ(str_of(o, "owned_by"), "troupe");
    for (const char* unknown : {"/v1/models/gpt-4", "/v1/models/org%2Fstories260K", "/v1/models/"}) {
        auto r = http_call(port_, "GET", unknown);
        EXPECT_EQ(r.status, 404) << unknown;
        auto e = error_of(r.body);
        EXPECT_EQ(str_of(e, "code"), "model_not_found");
        EXPECT_EQ(str_of(e, "param"), "model");
    }
}

TEST_F(server_protocol, without_an_api_key_a_rebinding_host_and_a_foreign_origin_are_still_refused) {
    EXPECT_EQ(http_call(port_, "GET", "/metrics", {}, {{"Host", "attacker.example"}}).status, 403);
    EXPECT_EQ(http_call(port_, "POST", "/v1/completions", R"({"prompt":"a"})", {{"Host", "attacker.example"}}).status,
              403);
    ws_client ws;
    EXPECT_EQ(ws.connect_with(port_, "/ws", {{"Origin", "https://attacker.example"}}).status, 403);
    ws_client own;
    EXPECT_EQ(own.connect_with(port_, "/ws",
                               {{"Origin", "http://localhost:" + std::to_string(port_)},
                                {"Host", "localhost:" + std::to_string(port_)}})
                  .status,
              101);
}

// The engine on a lane the test drives, so requests stay in flight until an operator cancels them.
class server_cancel : public ::testing::Test {
protected:
    void SetUp() override {
        TROUPE_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
        std::string error;
        live_ = start_live_server(test_config(model_path), true, error);
        ASSERT_NE(live_, nullptr) << error;
        port_ = live_->port;
    }
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
    // Waits for one request with some output, cancels it through the admin API, runs the engine dry.
    void cancel_the_running_request() {
        ASSERT_TRUE(drive_until([&] {
            auto s = live_->eng->snapshot();
            return s.requests.size() == 1 && s.n_generated_tokens >= 3;
        }));
        const request_id id = live_->eng->snapshot().requests[0].id;
        auto c = http_call(port_, "POST", "/admin/api/cancel/" + std::to_string(id), {},
                           {{"Authorization", "Bearer test-token"}});
        EXPECT_EQ(c.status, 200) << c.body;
        ASSERT_TRUE(drive_until([&] { return live_->srv->stats().n_active.load() == 0; }));
    }

    std::unique_ptr<live_server> live_;
    uint16_t port_ = 0;
};

const std::string long_request = R"("prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"temperature":0)";

TEST_F(server_cancel, an_operators_cancel_reaches_a_stream_as_an_error_event_after_a_non_stop_finish_reason) {
    http_reply reply;
    std::thread client(
        [&] { reply = http_call(port_, "POST", "/v1/completions", "{" + long_request + R"(,"stream":true})"); });
    cancel_the_running_request();
    client.join();
    ASSERT_EQ(reply.status, 200) << reply.body;
    bool done = false;
    auto events = sse_objects(reply.body, done);
    EXPECT_TRUE(done);
    ASSERT_GE(events.size(), 2u);
    const auto& error = events.back();
    ASSERT_TRUE(error.contains("error")) << json::serialize(error);
    EXPECT_EQ(str_of(error.at("error").as_object(), "code"), "request_cancelled");
    std::string finish;
    for (const auto& e : events) {
        if (!e.contains("choices")) continue;
        const auto& choice = e.at("choices").as_array()[0].as_object();
        if (choice.at("finish_reason").is_string()) finish = std::string(choice.at("finish_reason").as_string());
    }
    EXPECT_EQ(finish, "content_filter") << "one of OpenAI's finish reasons, and not \"stop\"";
}

TEST_F(server_cancel, an_operators_cancel_of_a_whole_response_is_503_request_cancelled_without_retry_after) {
    http_reply reply;
    std::thread client([&] { reply = http_call(port_, "POST", "/v1/completions", "{" + long_request + "}"); });
    cancel_the_running_request();
    client.join();
    EXPECT_EQ(reply.status, 503) << reply.body;
    EXPECT_EQ(str_of(error_of(reply.body), "code"), "request_cancelled");
    EXPECT_EQ(reply.headers.count("retry-after"), 0u);
}

TEST_F(server_cancel, an_operators_cancel_reaches_a_websocket_client_as_an_error_not_as_its_own_cancel) {
    ws_client ws;
    ASSERT_TRUE(ws.connect(port_));
    (void)ws.read(5000);  // hello
    ASSERT_TRUE(ws.send(R"({"type":"start","id":"w1","prompt":"Once upon a time","params":{"max_tokens":300,)"
                        R"("ignore_eos":true}})"));
    cancel_the_running_request();
    std::optional<std::string> last;
    for (int i = 0; i < 400; ++i) {
        auto m = ws.read(5000);
        if (!m) break;
        last = m;
        if (str_of(parse_object(*m), "type") != "delta") break;
    }
    ASSERT_TRUE(last.has_value());
    auto o = parse_object(*last);
    EXPECT_EQ(str_of(o, "type"), "error") << *last;
    EXPECT_EQ(str_of(o, "id"), "w1");
    EXPECT_NE(str_of(o, "message").find("cancelled by the server"), std::string::npos);
}

}  // namespace
}  // namespace troupe::testing
