// Safe to expose (issue 11.3): the request guard's rules from tables (Host, Origin, API key, CORS, the
// refusal to listen beyond loopback without a key), then hostile requests against a live server with a
// key: missing and wrong keys, an evil Origin on /ws and on the API, a rebinding Host, CORS preflights.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/http_server.h"
#include "server/request_guard.h"
#include "tests/common/shared_data.h"
#include "tests/server/api_json.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"

namespace troupe::testing {
namespace {
using server::check_exposure;
using server::check_request;
using server::cors_headers;
using server::guard_policy;
using server::host_allowed;
using server::offered_key;
using server::request_head;

guard_policy policy_with(std::string key, std::vector<std::string> hosts = {}, std::vector<std::string> ws = {},
                         std::vector<std::string> cors = {}) {
    server_config c;
    c.api_key = std::move(key);
    c.allowed_hosts = std::move(hosts);
    c.allowed_origins = std::move(ws);
    c.cors_origins = std::move(cors);
    return server::make_guard_policy(c);
}

TEST(request_guard, host_must_be_localhost_an_ip_address_or_an_allowed_name_whatever_the_port) {
    const guard_policy p = policy_with("", {"API.example.com"});
    struct row {
        const char* host;
        bool allowed;
    };
    for (const row& r : std::vector<row>{{"localhost", true},
                                         {"localhost:8080", true},
                                         {"LOCALHOST.", true},
                                         {"127.0.0.1:9", true},
                                         {"[::1]:8080", true},
                                         {"192.168.1.5:8080", true},
                                         {"api.example.com:443", true},
                                         {"evil.example", false},
                                         {"evil.example:8080", false},
                                         {"localhost.evil.example", false},
                                         {"127.0.0.1.evil.example", false},
                                         {"", false},
                                         {"[::1", false}}) {
        EXPECT_EQ(host_allowed(r.host, p), r.allowed) << r.host;
    }
    EXPECT_TRUE(host_allowed("anything.example", policy_with("", {"*"})));
}

TEST(request_guard, checks_host_then_origin_then_the_api_key_with_statuses_and_codes) {
    const guard_policy p = policy_with("sk-secret", {}, {"https://chat.example"}, {"https://app.example"});
    auto head = [](std::string_view method, std::string_view path) {
        request_head h;
        h.method = method;
        h.path = path;
        h.host = "127.0.0.1:8080";
        return h;
    };
    struct row {
        std::string what;
        request_head h;
        int status;  // 0: let through
        std::string code;
    };
    std::vector<row> rows;
    auto add = [&](std::string what, request_head h, int status, std::string code = {}) {
        rows.push_back({std::move(what), h, status, std::move(code)});
    };
    request_head h = head("POST", "/v1/completions");
    add("no key", h, 401, "invalid_api_key");
    h.authorization = "Bearer sk-wrong";
    add("wrong key", h, 401, "invalid_api_key");
    h.authorization = "Bearer sk-secre";
    add("a prefix of the key", h, 401, "invalid_api_key");
    h.authorization = "Bearer sk-secretX";
    add("the key and more", h, 401, "invalid_api_key");
    h.authorization = "Basic sk-secret";
    add("another scheme", h, 401, "invalid_api_key");
    h.authorization = "Bearer sk-secret";
    add("the key", h, 0);
    h.authorization = "bearer   sk-secret";
    add("the scheme in lower case, spaces", h, 0);
    h.host = "evil.example:8080";
    add("a rebinding host, even with the key", h, 403, "host_not_allowed");
    h.host = std::nullopt;
    add("HTTP/1.1 without Host", h, 400);
    h.http10 = true;
    add("HTTP/1.0 without Host", h, 0);
    h = head("POST", "/v1/chat/completions");
    h.authorization = "Bearer sk-secret";
    h.origin = "https://evil.example";
    add("a foreign page's POST", h, 403, "origin_not_allowed");
    h.origin = "https://app.example";
    add("a listed CORS origin", h, 0);
    h.origin = "http://127.0.0.1:8080";
    add("the server's own page", h, 0);
    h.origin = "null";
    add("an opaque origin", h, 403, "origin_not_allowed");
    h = head("GET", "/ws");
    h.websocket = true;
    add("a websocket without a key", h, 401, "invalid_api_key");
    h.ws_protocols = "troupe, troupe.key.sk-secret";
    add("a websocket with the key as a subprotocol", h, 0);
    h.origin = "https://evil.example";
    add("a websocket from a foreign page", h, 403, "origin_not_allowed");
    h.origin = "https://app.example";
    add("a CORS origin is not a websocket origin", h, 403, "origin_not_allowed");
    h.origin = "https://chat.example";
    add("an allowed websocket origin", h, 0);
    h = head("GET", "/metrics");
    add("metrics without the key", h, 401, "invalid_api_key");
    for (const char* open : {"/health", "/", "/chat.js", "/admin", "/admin/api/state"}) {
        add(std::string("no key on ") + open, head("GET", open), 0);
    }
    add("/tokenize without the key", head("POST", "/tokenize"), 401, "invalid_api_key");
    add("/v1/models/x without the key", head("GET", "/v1/models/x"), 401, "invalid_api_key");
    h = head("OPTIONS", "/v1/chat/completions");
    h.origin = "https://app.example";
    add("a preflight carries no key", h, 0);
    h.origin = "https://evil.example";
    add("a foreign preflight", h, 403, "origin_not_allowed");

    for (const row& r : rows) {
        const auto e = check_request(r.h, p);
        EXPECT_EQ(e ? e->status : 0, r.status) << r.what << (e ? ": " + e->message : std::string());
        if (e && !r.code.empty()) {
            EXPECT_EQ(e->code, r.code) << r.what;
        }
        if (e) {
            EXPECT_FALSE(e->message.empty()) << r.what;
        }
    }
    request_head no_key_needed = head("POST", "/v1/completions");
    EXPECT_FALSE(check_request(no_key_needed, policy_with("")).has_value()) << "no api_key configured";
}

TEST(request_guard, the_key_comes_from_bearer_and_for_websockets_also_from_the_subprotocol_or_query) {
    request_head h;
    h.authorization = "Bearer k1";
    EXPECT_EQ(offered_key(h), "k1");
    h = {};
    h.query = "api_key=k2";
    EXPECT_EQ(offered_key(h), "") << "plain HTTP does not take the key from the URL";
    h.websocket = true;
    EXPECT_EQ(offered_key(h), "k2");
    h.ws_protocols = "troupe,troupe.key.k3";
    EXPECT_EQ(offered_key(h), "k3");
    EXPECT_EQ(server::ws_subprotocol("chat, troupe"), "troupe");
    EXPECT_EQ(server::ws_subprotocol("troupe.key.abc"), "");
}

TEST(request_guard, cors_headers_go_to_listed_origins_only_and_preflights_get_methods_and_headers) {
    const guard_policy p = policy_with("", {}, {}, {"https://app.example/"});
    request_head h;
    h.method = "OPTIONS";
    h.host = "127.0.0.1:8080";
    h.origin = "https://app.example";
    auto headers = cors_headers(h, p, true, "authorization, content-type");
    auto value = [&](std::string_view name) {
        for (const auto& [k, v] : headers) {
            if (k == name) return v;
        }
        return std::string();
    };
    EXPECT_EQ(value("Access-Control-Allow-Origin"), "https://app.example");
    EXPECT_EQ(value("Vary"), "Origin");
    EXPECT_NE(value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
    EXPECT_EQ(value("Access-Control-Allow-Headers"), "authorization, content-type");
    h.origin = "https://evil.example";
    EXPECT_TRUE(cors_headers(h, p, true).empty());
    h.origin = "http://127.0.0.1:8080";
    EXPECT_TRUE(cors_headers(h, p, false).empty()) << "same origin needs no CORS";
    h.origin = "https://evil.example";
    EXPECT_EQ(cors_headers(h, policy_with("", {}, {}, {"*"}), false).size(), 2u);
}

TEST(request_guard, a_host_beyond_loopback_needs_an_api_key_or_allow_insecure_which_warns) {
    server_config c;
    for (const char* local : {"127.0.0.1", "127.0.0.2", "::1", "localhost"}) {
        c.host = local;
        EXPECT_FALSE(check_exposure(c).error.has_value()) << local;
        EXPECT_FALSE(check_exposure(c).warning.has_value()) << local;
    }
    for (const char* exposed : {"0.0.0.0", "::", "192.168.1.5"}) {
        c.host = exposed;
        c.api_key.clear();
        c.allow_insecure = false;
        const auto refused = check_exposure(c);
        ASSERT_TRUE(refused.error.has_value()) << exposed;
        EXPECT_NE(refused.error->find("server.api_key"), std::string::npos);
        EXPECT_NE(refused.error->find("allow_insecure"), std::string::npos);
        c.allow_insecure = true;
        EXPECT_FALSE(check_exposure(c).error.has_value());
        EXPECT_TRUE(check_exposure(c).warning.has_value());
        c.allow_insecure = false;
        c.api_key = "k";
        EXPECT_FALSE(check_exposure(c).error.has_value());
        EXPECT_FALSE(check_exposure(c).warning.has_value());
    }
}

TEST(server_start, listening_on_every_interface_without_an_api_key_is_refused_with_allow_insecure_it_starts) {
    engine_config c;
    c.server.port = 0;
    c.server.host = "0.0.0.0";
    c.log_level = log_level::error;
    {
        server::http_server refused(c);
        auto port = refused.listen();
        ASSERT_FALSE(port.ok());
        EXPECT_NE(port.message().find("server.api_key"), std::string::npos) << port.message();
    }
    c.server.allow_insecure = true;
    {
        server::http_server insecure(c);
        auto port = insecure.listen();
        ASSERT_TRUE(port.ok()) << port.message();
        EXPECT_EQ(http_call(*port, "GET", "/health").status, 503);  // up, loading
        insecure.stop();
    }
    c.server.allow_insecure = false;
    c.server.api_key = "sk-k";
    server::http_server keyed(c);
    ASSERT_TRUE(keyed.listen().ok());
    keyed.stop();
}

// A live server with a key, an allowed host, a websocket origin and a CORS origin.
class server_secure : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto model = shared_file("models/stories260K.gguf");
        if (!model) return;
        engine_config c = test_config(*model);
        c.server.api_key = key;
        c.server.allowed_hosts = {"api.example"};
        c.server.allowed_origins = {"https://chat.example"};
        c.server.cors_origins = {"https://app.example"};
        std::string error;
        live_ = start_live_server(c, false, error).release();
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
    }
    // A browser sends its page's origin and the host with the port.
    std::string own_host() const { return "127.0.0.1:" + std::to_string(port_); }
    std::string own_origin() const { return "http://" + own_host(); }

    static constexpr const char* key = "sk-troupe-test-0123456789";
    static inline const header_list auth = {{"Authorization", std::string("Bearer ") + key}};
    static inline live_server* live_ = nullptr;
    static inline std::string setup_error_;
    uint16_t port_ = 0;
};

const std::string small_completion = R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})";

TEST_F(server_secure, the_api_answers_a_missing_or_wrong_key_401_in_openai_shape_and_the_key_200) {
    for (const header_list& bad : std::vector<header_list>{
             {}, {{"Authorization", "Bearer sk-wrong"}}, {{"Authorization", std::string("Basic ") + key}}}) {
        for (const auto& [method, target] :
             std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/models"},
                                                              {"POST", "/v1/completions"},
                                                              {"POST", "/v1/chat/completions"},
                                                              {"GET", "/v1/models/stories260K"},
                                                              {"POST", "/tokenize"},
                                                              {"POST", "/detokenize"},
                                                              {"GET", "/metrics"}}) {
            auto r = http_call(port_, method, target, method == "POST" ? small_completion : "", bad);
            EXPECT_EQ(r.status, 401) << method << " " << target << ": " << r.body;
            EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
            auto e = error_of(r.body);
            EXPECT_EQ(str_of(e, "code"), "invalid_api_key");
            EXPECT_EQ(str_of(e, "type"), "invalid_request_error");
            EXPECT_EQ(str_of(e, "message").find("sk-wrong"), std::string::npos) << "the offered key is not echoed";
        }
    }
    EXPECT_EQ(http_call(port_, "GET", "/v1/models", {}, auth).status, 200);
    auto r = http_call(port_, "POST", "/v1/completions", small_completion, auth);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(http_call(port_, "GET", "/metrics", {}, auth).status, 200);
}

TEST_F(server_secure, health_and_the_pages_stay_open_and_the_admin_api_wants_its_own_token_not_the_key) {
    EXPECT_EQ(http_call(port_, "GET", "/health").status, 200);
    EXPECT_EQ(http_call(port_, "GET", "/").status, 200);
    EXPECT_EQ(http_call(port_, "GET", "/admin").status, 200);
    EXPECT_EQ(http_call(port_, "GET", "/admin/api/state", {}, auth).status, 401);
    EXPECT_EQ(http_call(port_, "GET", "/admin/api/state", {}, {{"Authorization", "Bearer test-token"}}).status, 200);
    // Every admin failure keeps its status: a wrong method is 405, not a 400.
    EXPECT_EQ(http_call(port_, "GET", "/admin/api/drain", {}, {{"Authorization", "Bearer test-token"}}).status, 405);
    EXPECT_FALSE(live_->srv->draining());
}

TEST_F(server_secure, a_websocket_needs_the_key_as_a_header_a_subprotocol_or_a_query_parameter) {
    {
        ws_client ws;
        auto h = ws.connect_with(port_, "/ws", {});
        EXPECT_EQ(h.status, 401) << h.error;
        EXPECT_EQ(str_of(error_of(h.body), "code"), "invalid_api_key");
    }
    {
        ws_client ws;
        auto h = ws.connect_with(port_, "/ws", {{"Sec-WebSocket-Protocol", "troupe, troupe.key.sk-wrong"}});
        EXPECT_EQ(h.status, 401);
    }
    for (const auto& [target, headers] : std::vector<std::pair<std::string, header_list>>{
             {"/ws", auth},
             {"/ws", {{"Sec-WebSocket-Protocol", std::string("troupe, troupe.key.") + key}}},
             {std::string("/ws?api_key=") + key, {}}}) {
        ws_client ws;
        auto h = ws.connect_with(port_, target, headers);
        ASSERT_EQ(h.status, 101) << target << ": " << h.error << " " << h.body;
        if (!headers.empty() && headers[0].first == "Sec-WebSocket-Protocol") {
            EXPECT_EQ(h.protocol, "troupe");
        }
        auto hello = ws.read(5000);
        ASSERT_TRUE(hello.has_value());
        EXPECT_EQ(str_of(parse_object(*hello), "type"), "hello");
    }
}

TEST_F(server_secure, a_websocket_from_a_foreign_origin_is_refused_and_from_its_own_page_or_an_allowed_origin_opens) {
    for (const char* evil : {"https://evil.example", "null", "http://127.0.0.1:1"}) {
        ws_client ws;
        auto h = ws.connect_with(port_, "/ws", {{"Origin", evil}, {"Host", own_host()}, auth[0]});
        EXPECT_EQ(h.status, 403) << evil;
        EXPECT_EQ(str_of(error_of(h.body), "code"), "origin_not_allowed");
    }
    for (const std::string& good : {own_origin(), std::string("https://chat.example")}) {
        ws_client ws;
        auto h = ws.connect_with(port_, "/ws", {{"Origin", good}, {"Host", own_host()}, auth[0]});
        EXPECT_EQ(h.status, 101) << good << ": " << h.body;
    }
}

TEST_F(server_secure, a_rebinding_host_is_refused_on_every_route_even_with_the_key_and_an_allowed_host_passes) {
    for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{{"GET", "/health"},
                                                                                         {"GET", "/"},
                                                                                         {"GET", "/metrics"},
                                                                                         {"GET", "/v1/models"},
                                                                                         {"POST", "/v1/completions"},
                                                                                         {"GET", "/admin/api/state"}}) {
        header_list h = auth;
        h.emplace_back("Host", "rebind.evil.example:" + std::to_string(port_));
        auto r = http_call(port_, method, target, method == "POST" ? small_completion : "", h);
        EXPECT_EQ(r.status, 403) << target;
        EXPECT_EQ(str_of(error_of(r.body), "code"), "host_not_allowed");
    }
    ws_client ws;
    auto h = ws.connect_with(port_, "/ws", {{"Host", "rebind.evil.example"}, auth[0]});
    EXPECT_EQ(h.status, 403);
    header_list allowed = auth;
    allowed.emplace_back("Host", "api.example");
    EXPECT_EQ(http_call(port_, "GET", "/v1/models", {}, allowed).status, 200);
}

TEST_F(server_secure, cors_answers_the_listed_origin_only_and_a_foreign_pages_post_is_refused_before_it_runs) {
    auto pre = http_call(port_, "OPTIONS", "/v1/chat/completions", {},
                         {{"Origin", "https://app.example"},
                          {"Access-Control-Request-Method", "POST"},
                          {"Access-Control-Request-Headers", "authorization, content-type"}});
    EXPECT_EQ(pre.status, 204) << pre.body;
    EXPECT_EQ(pre.headers["access-control-allow-origin"], "https://app.example");
    EXPECT_NE(pre.headers["access-control-allow-methods"].find("POST"), std::string::npos);
    EXPECT_EQ(pre.headers["access-control-allow-headers"], "authorization, content-type");

    header_list from_app = auth;
    from_app.emplace_back("Origin", "https://app.example");
    auto ok = http_call(port_, "POST", "/v1/completions", small_completion, from_app);
    EXPECT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.headers["access-control-allow-origin"], "https://app.example");
    EXPECT_EQ(ok.headers["vary"], "Origin");

    auto foreign_pre = http_call(port_, "OPTIONS", "/v1/completions", {},
                                 {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
    EXPECT_EQ(foreign_pre.status, 403);
    EXPECT_EQ(foreign_pre.headers.count("access-control-allow-origin"), 0u);
    const int64_t before = live_->eng->snapshot().n_generated_tokens;
    header_list from_evil = auth;
    from_evil.emplace_back("Origin", "https://evil.example");
    auto refused = http_call(port_, "POST", "/v1/completions", small_completion, from_evil);
    EXPECT_EQ(refused.status, 403);
    EXPECT_EQ(refused.headers.count("access-control-allow-origin"), 0u);
    EXPECT_EQ(live_->eng->snapshot().n_generated_tokens, before) << "a refused request generated tokens";

    header_list same = auth;
    same.emplace_back("Origin", own_origin());
    same.emplace_back("Host", own_host());
    auto own = http_call(port_, "GET", "/v1/models", {}, same);
    EXPECT_EQ(own.status, 200);
    EXPECT_EQ(own.headers.count("access-control-allow-origin"), 0u) << "same origin needs no CORS headers";
}

}  // namespace
}  // namespace troupe::testing
