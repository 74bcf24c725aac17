// Several choices per request (n, best_of, prompt arrays, echo): the parser's fields, and the collector
// that folds the engine requests' events into one response (indices, best_of's pick, usage, streaming).
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "server/choices.h"
#include "server/request_parser.h"
#include "tests/common/shared_data.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"

namespace troupe::server {
namespace {
namespace json = boost::json;

generation_request completion(std::string_view body) {
    auto r = parse_completion_request(body, sampling_params{});
    EXPECT_TRUE(std::holds_alternative<generation_request>(r)) << body;
    return std::get<generation_request>(r);
}

TEST(choices, the_parser_reads_n_best_of_echo_logit_bias_and_several_prompts) {
    const auto r = completion(
        R"({"prompt":["Once", [1, 403]], "n": 2, "best_of": 3, "echo": true, "logit_bias": {"5": -100, "7": 2.5}})");
    EXPECT_EQ(r.n, 2);
    EXPECT_EQ(r.best_of, 3);
    EXPECT_TRUE(r.echo);
    ASSERT_EQ(r.prompts.size(), 2u);
    EXPECT_EQ(r.prompts[0].text, "Once");
    EXPECT_EQ(*r.prompts[1].ids, (std::vector<int32_t>{1, 403}));
    EXPECT_EQ(r.prompt, "Once");
    EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
    const auto one = completion(R"({"prompt":"a","n":4})");
    EXPECT_EQ(one.best_of, 4);
    EXPECT_TRUE(one.prompts.empty());
    auto chat = parse_chat_request(
        R"({"messages":[{"role":"user","content":"x"}],"n":2,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"integer"}}}})",
        sampling_params{});
    ASSERT_TRUE(std::holds_alternative<generation_request>(chat));
    EXPECT_EQ(std::get<generation_request>(chat).n, 2);
    EXPECT_EQ(std::get<generation_request>(chat).format.what, response_format::kind::json_schema);
    EXPECT_EQ(std::get<generation_request>(chat).format.schema, R"({"type":"integer"})");
}

stream_event text(int32_t index, std::string t) {
    stream_event e;
    e.what = stream_event::kind::text;
    e.index = index;
    e.text = std::move(t);
    return e;
}

stream_event logprob(int32_t index, float lp) {
    stream_event e;
    e.what = stream_event::kind::logprobs;
    e.index = index;
    e.logprob.logprob = lp;
    return e;
}

stream_event done(int32_t index, int32_t n_prompt, int32_t n_completion) {
    stream_event e;
    e.what = stream_event::kind::done;
    e.index = index;
    e.reason = finish_reason::length;
    e.use.n_prompt_tokens = n_prompt;
    e.use.n_completion_tokens = n_completion;
    return e;
}

generation_result head() {
    generation_result h;
    h.id = "cmpl-1";
    h.model = "m";
    return h;
}

TEST(choices, best_of_keeps_the_n_most_likely_choices_per_prompt_indexed_prompt_major) {
    choice_layout layout{2, 1, 3, {"P0:", "P1:"}};
    choice_collector c(head(), api_kind::completion, layout, false);
    // Prompt 0: choices 0..2 with cumulative logprobs -3, -1, -2; prompt 1: -0.5, -4, -9.
    const float lps[] = {-3, -1, -2, -0.5f, -4, -9};
    std::vector<stream_event> events;
    for (int32_t i = 0; i < 6; ++i) {
        events.push_back(logprob(i, lps[i]));
        events.push_back(text(i, "c" + std::to_string(i)));
    }
    EXPECT_TRUE(c.add(std::move(events), false).empty());
    EXPECT_FALSE(c.ended());
    std::vector<stream_event> ends;
    for (int32_t i = 0; i < 6; ++i) ends.push_back(done(i, 4 + i / 3, 1));
    (void)c.add(std::move(ends), false);
    ASSERT_TRUE(c.ended());
    const json::value v = json::parse(c.whole());
    const auto& cs = v.at("choices").as_array();
    ASSERT_EQ(cs.size(), 2u);
    EXPECT_EQ(cs[0].at("text"), "P0:c1");
    EXPECT_EQ(cs[0].at("index"), 0);
    EXPECT_EQ(cs[0].at("logprobs"), nullptr);  // not asked for by the client
    EXPECT_EQ(cs[1].at("text"), "P1:c3");
    EXPECT_EQ(cs[1].at("index"), 1);
    // Prompt tokens once per prompt; completion tokens of every sampled choice.
    EXPECT_EQ(v.at("usage").at("prompt_tokens"), 9);
    EXPECT_EQ(v.at("usage").at("completion_tokens"), 6);
}

TEST(choices, streamed_choices_carry_their_index_and_each_ends_with_its_own_finish_reason) {
    choice_layout layout{1, 2, 2, {}};
    generation_result h = head();
    choice_collector c(h, api_kind::chat, layout, true);
    std::string out = c.add({text(1, "b"), text(0, "a"), done(1, 3, 1)}, true);
    (void)c.add({done(0, 3, 1)}, true);
    ASSERT_TRUE(c.ended());
    out += c.stream_end();
    std::vector<json::value> chunks;
    for (size_t at = 0; (at = out.find("data: ", at)) != std::string::npos;) {
        const size_t end = out.find("\n\n", at);
        chunks.push_back(json::parse(out.substr(at + 6, end - at - 6)));
        at = end;
    }
    ASSERT_EQ(chunks.size(), 4u);
    EXPECT_EQ(chunks[0].at("choices").at(0).at("index"), 1);
    EXPECT_EQ(chunks[0].at("choices").at(0).at("delta").at("role"), "assistant");
    EXPECT_EQ(chunks[1].at("choices").at(0).at("index"), 0);
    EXPECT_EQ(chunks[1].at("choices").at(0).at("delta").at("content"), "a");
    EXPECT_EQ(chunks[2].at("choices").at(0).at("finish_reason"), "length");
    EXPECT_EQ(chunks[2].at("choices").at(0).at("index"), 1);
    EXPECT_TRUE(chunks[3].at("choices").as_array().empty());
    EXPECT_EQ(chunks[3].at("usage").at("completion_tokens"), 2);
    EXPECT_EQ(chunks[3].at("usage").at("prompt_tokens"), 3);
}

// On the real model: the choices of one prompt are one sequence until its first token (the prompt computed once, its
// KV blocks shared by forks), and two prompts with n = 2 and echo come back prompt-major, each choice starting with
// its prompt.
TEST(choices, the_choices_of_one_prompt_fork_from_one_computation_of_it_and_come_back_in_order) {
    TROUPE_REQUIRE_SHARED(model, "models/stories260K.gguf");
    std::string error;
    auto live = testing::start_live_server(testing::test_config(model), false, error);
    ASSERT_TRUE(live) << error;
    const std::string prompt =
        "Once upon a time there was a little girl named Lily who loved to play in the park with her friends and "
        "her dog every day after school";
    const engine_snapshot before = live->eng->snapshot();
    const auto reply =
        testing::http_call(live->port, "POST", "/v1/completions",
                           R"({"prompt":")" + prompt + R"(","n":4,"max_tokens":4,"temperature":1,"seed":7})");
    ASSERT_EQ(reply.status, 200) << reply.body;
    const json::value v = json::parse(reply.body);
    ASSERT_EQ(v.at("choices").as_array().size(), 4u);
    const int64_t n_prompt = v.at("usage").at("prompt_tokens").as_int64();  // counted once per prompt
    ASSERT_GT(n_prompt, live->eng->snapshot().kv.block_size);
    // The first choice computes the whole prompt; the three others fork from it (no prefix-cache lookups of their own).
    const engine_snapshot after = live->eng->snapshot();
    EXPECT_EQ(after.steps.n_prefill_tokens - before.steps.n_prefill_tokens, n_prompt);
    EXPECT_EQ(after.steps.n_forks - before.steps.n_forks, 3);
    EXPECT_EQ(after.kv.n_prefix_queries - before.kv.n_prefix_queries, n_prompt / after.kv.block_size);
    EXPECT_EQ(after.steps.n_forked_prompt_tokens - before.steps.n_forked_prompt_tokens, 3 * n_prompt);
    // The same counts on /metrics, as an operator reads them.
    const auto metrics = testing::http_call(live->port, "GET", "/metrics", "");
    ASSERT_EQ(metrics.status, 200);
    EXPECT_NE(metrics.body.find("\ntroupe_forks_total " + std::to_string(after.steps.n_forks) + "\n"),
              std::string::npos)
        << metrics.body;
    EXPECT_NE(metrics.body.find("\ntroupe_forked_prompt_tokens_total " +
                                std::to_string(after.steps.n_forked_prompt_tokens) + "\n"),
              std::string::npos)
        << metrics.body;

    const auto two = testing::http_call(live->port, "POST", "/v1/completions",
                                        R"({"prompt":["Tom","The cat"],"n":2,"echo":true,"max_tokens":3,"seed":1})");
    ASSERT_EQ(two.status, 200) << two.body;
    const json::value answer = json::parse(two.body);
    const auto& cs = answer.at("choices").as_array();
    ASSERT_EQ(cs.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(cs[i].at("index"), static_cast<int64_t>(i));
        EXPECT_TRUE(std::string(cs[i].at("text").as_string()).starts_with(i < 2 ? "Tom" : "The cat")) << two.body;
    }
}

}  // namespace
}  // namespace troupe::server
