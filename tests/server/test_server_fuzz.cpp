// Fuzzing the request parsers with a seeded random mutator (byte flips, insertions, deletions,
// truncations, splices of valid requests, random JSON values): for a few seconds nothing may crash or
// throw, and every answer is a request or a 4xx error. Then a few hundred mutated raw HTTP requests go
// to a live loopback server, which must keep answering /health.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "server/request_parser.h"
#include "server/response_builder.h"
#include "server/routes.h"
#include "tests/common/shared_data.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"

namespace troupe::testing {
namespace {
using namespace std::chrono_literals;

const std::vector<std::string> corpus = {
    R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":8,"temperature":0})",
    R"({"prompt":[1,403,407],"stream":true,"stream_options":{"include_usage":true},"stop":["."],"logprobs":2})",
    R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_completion_tokens":4,"logprobs":true,"top_logprobs":2,"seed":7})",
    R"({"type":"start","id":"c1","messages":[{"role":"user","content":"Hi"}],"params":{"temperature":0.5,"max_tokens":5}})",
    R"({"type":"cancel","id":"c1"})",
    R"({"prompt":"a","n":1,"presence_penalty":0.1,"frequency_penalty":-0.1,"top_p":0.9,"top_k":3,"user":"x"})",
};

const std::vector<std::string> json_values = {"null",
                                              "true",
                                              "false",
                                              "0",
                                              "-1",
                                              "1e309",
                                              "18446744073709551616",
                                              "\"\"",
                                              "\"\\u0000\"",
                                              "\"\\ud800\"",
                                              "[]",
                                              "{}",
                                              "[[[[[[]]]]]]",
                                              "\"\xff\"",
                                              "1.5",
                                              "-0",
                                              "{\"a\":[1,{\"b\":null}]}"};

std::string mutate(std::string s, std::mt19937_64& rng) {
    auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
    const int n_mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < n_mutations; ++m) {
        switch (rng() % 7) {
            case 0:  // flip a byte
                if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
                break;
            case 1:  // insert a random byte
                s.insert(s.begin() + static_cast<std::ptrdiff_t>(pick(s.size() + 1)), static_cast<char>(rng() % 256));
                break;
            case 2: {  // delete a range
                if (s.empty()) break;
                const size_t at = pick(s.size());
                s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
                break;
            }
            case 3:  // truncate
                s.resize(pick(s.size() + 1));
                break;
            case 4: {  // splice with another valid request
                const std::string& other = corpus[pick(corpus.size())];
                s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size() + 1));
                break;
            }
            case 5: {  // a random JSON value after a ':' or '['
                const size_t colon = s.find_first_of(":[", pick(s.size() + 1));
                if (colon == std::string::npos) break;
                const size_t end = s.find_first_of(",}]", colon + 1);
                s = s.substr(0, colon + 1) + json_values[pick(json_values.size())] +
                    (end == std::string::npos ? std::string() : s.substr(end));
                break;
            }
            case 6:  // duplicate a chunk
                if (!s.empty()) {
                    const size_t at = pick(s.size());
                    s.insert(at, s.substr(at, 1 + pick(32)));
                }
                break;
        }
    }
    return s;
}

TEST(server_fuzz, mutated_requests_never_crash_the_parsers_and_errors_are_4xx) {
    std::mt19937_64 rng(20261130);
    const sampling_params defaults{};
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    int64_t n = 0, n_ok = 0;
    while (std::chrono::steady_clock::now() < deadline && n < 2000000) {
        const std::string input = mutate(corpus[rng() % corpus.size()], rng);
        for (auto* parse : {&server::parse_completion_request, &server::parse_chat_request}) {
            auto r = parse(input, defaults);
            if (auto* e = std::get_if<server::api_error>(&r)) {
                ASSERT_GE(e->status, 400);
                ASSERT_LT(e->status, 500);
                ASSERT_FALSE(server::error_json(*e).empty());
            } else {
                ++n_ok;
            }
        }
        auto w = server::parse_ws_message(input, defaults);
        if (auto* bad = std::get_if<server::ws_bad>(&w)) {
            ASSERT_FALSE(server::ws_error_json(bad->id, bad->message).empty());
        }
        (void)server::query_param(input, "token");
        (void)server::admin_authorized(input, input, "t");
        (void)server::valid_utf8(input);
        ++n;
    }
    EXPECT_GT(n, 1000);
    EXPECT_GT(n_ok, 0);  // some mutations stay valid: the parsers are exercised past the first check
    std::printf("server_fuzz: %lld mutated inputs, %lld parsed as requests\n", static_cast<long long>(n),
                static_cast<long long>(n_ok));
}

std::string http_text(const std::string& body) {
    return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(server_fuzz, mutated_raw_http_requests_never_stop_the_live_server) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    engine_config c = test_config(model);
    c.sampling.max_tokens = 8;
    std::string error;
    auto live = start_live_server(c, false, error);
    ASSERT_NE(live, nullptr) << error;
    std::mt19937_64 rng(7);
    const std::vector<std::string> seeds = {
        http_text(corpus[0]),
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /admin/api/state?token=%zz HTTP/1.1\r\nAuthorization: Bearer \r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"mes\r\n0\r\n\r\n",
        "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    };
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    int n = 0;
    int n_answered = 0;
    for (; n < 300 && std::chrono::steady_clock::now() < deadline; ++n) {
        std::string req = seeds[rng() % seeds.size()];
        const int n_mut = static_cast<int>(rng() % 4);
        for (int m = 0; m < n_mut; ++m) {
            const size_t at = rng() % (req.size() + 1);
            switch (rng() % 4) {
                case 0:
                    if (at < req.size()) req[at] = static_cast<char>(rng() % 256);
                    break;
                case 1:
                    req.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng() % 256)));
                    break;
                case 2:
                    req.resize(at);
                    break;
                case 3:
                    req.insert(at, "\r\n");
                    break;
            }
        }
        if (raw_exchange(live->port, req, 2000).rfind("HTTP/1.1 ", 0) == 0) ++n_answered;
        if (n % 50 == 0) {
            ASSERT_EQ(http_call(live->port, "GET", "/health", {}, {}, 5000).status, 200) << "after " << n;
        }
    }
    EXPECT_EQ(http_call(live->port, "GET", "/health", {}, {}, 5000).status, 200);
    EXPECT_GE(n, 100);
    EXPECT_GT(n_answered, n / 4);  // most mutations still reach the router or the HTTP parser's 400
    std::printf("server_fuzz: %d raw requests, %d answered\n", n, n_answered);
}

}  // namespace
}  // namespace troupe::testing
