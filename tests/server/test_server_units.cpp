// The server's plain parts without sockets: OpenAI request parsing and validation, response JSON, SSE
// framing, the WebSocket protocol, Prometheus text, admin JSON, routes and the request_stream hand-over.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <string>
#include <variant>

#include "server/metrics_text.h"
#include "server/request_parser.h"
#include "server/request_stream.h"
#include "server/response_builder.h"
#include "server/routes.h"
#include "server/serving.h"
#include "server/static_files.h"

namespace troupe::server {
namespace {
namespace json = boost::json;

const sampling_params defaults{};

generation_request ok_completion(std::string_view body) {
    auto r = parse_completion_request(body, defaults);
    if (auto* e = std::get_if<api_error>(&r)) ADD_FAILURE() << body << " -> " << e->message;
    return std::holds_alternative<generation_request>(r) ? std::get<generation_request>(r) : generation_request{};
}

api_error error_of(const parsed_request& r) {
    EXPECT_TRUE(std::holds_alternative<api_error>(r));
    return std::holds_alternative<api_error>(r) ? std::get<api_error>(r) : api_error{};
}

TEST(request_parser, a_completion_request_reads_every_openai_field) {
    auto r = ok_completion(R"({"model":"m","prompt":"Hi","max_tokens":7,"temperature":0,"top_p":0.5,"seed":42,
        "stop":["\n","."],"presence_penalty":0.5,"frequency_penalty":-0.5,"n":1,"stream":true,
        "stream_options":{"include_usage":true},"logprobs":3,"user":"u","echo":false,"best_of":1,"top_k":5})");
    EXPECT_EQ(r.kind, api_kind::completion);
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.prompt, "Hi");
    EXPECT_EQ(r.sampling.max_tokens, 7);
    EXPECT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
    EXPECT_EQ(r.sampling.seed, 42u);
    EXPECT_EQ(r.sampling.stop_strings, (std::vector<std::string>{"\n", "."}));
    EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
    EXPECT_EQ(r.sampling.top_k, 5);
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.logprobs, 3);
}

TEST(request_parser, absent_and_null_fields_keep_the_config_defaults) {
    auto r = ok_completion(R"({"prompt":"Hi","temperature":null,"stop":null})");
    EXPECT_EQ(r.sampling.temperature, defaults.temperature);
    EXPECT_EQ(r.sampling.max_tokens, defaults.max_tokens);
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(r.logprobs, -1);
    auto single = ok_completion(R"({"prompt":["one string"],"stop":"x"})");
    EXPECT_EQ(single.prompt, "one string");
    EXPECT_EQ(single.sampling.stop_strings, std::vector<std::string>{"x"});
    auto ids = ok_completion(R"({"prompt":[1,403,407]})");
    ASSERT_TRUE(ids.prompt_ids.has_value());
    EXPECT_EQ(*ids.prompt_ids, (std::vector<int32_t>{1, 403, 407}));
}

TEST(request_parser, invalid_requests_are_400_naming_the_field) {
    struct row {
        const char* body;
        const char* param;
        const char* message_part;
    };
    const row rows[] = {
        {R"({"prompt":"a","n":0})", "n", "between 1 and 128"},
        {R"({"prompt":"a","n":3,"best_of":2})", "best_of", "at least n (3)"},
        {R"({"prompt":"a","best_of":2,"stream":true})", "best_of", "cannot be used with stream"},
        {R"({"prompt":["a","b"],"best_of":65})", "prompt", "more than 128 choices"},
        {R"({"prompt":"a","temperature":"hot"})", "temperature", "expected a number, got a string"},
        {R"({"prompt":"a","temperature":3})", "temperature", "between 0 and 2"},
        {R"({"prompt":"a","max_tokens":0})", "max_tokens", "between 1"},
        {R"({"prompt":"a","max_tokens":1.5})", "max_tokens", "expected an integer"},
        {R"({"prompt":"a","top_p":-1})", "top_p", "between 0 and 1"},
        {R"({"prompt":"a","stop":["a","b","c","d","e"]})", "stop", "at most 4"},
        {R"({"prompt":"a","stop":[""]})", "stop", "cannot be empty"},
        {R"({"prompt":"a","stop":[1]})", "stop", "expected a string"},
        {R"({"prompt":"a","frobnicate":1})", "frobnicate", "Unrecognized request argument supplied: frobnicate"},
        {R"({"prompt":"a","stream_options":{"include_usage":true}})", "stream_options", "only allowed when stream"},
        {R"({"prompt":"a","echo":1})", "echo", "expected a boolean"},
        {R"({"prompt":"a","logprobs":21})", "logprobs", "between 0 and 20"},
        {R"({"prompt":"a","logit_bias":{"x":5}})", "logit_bias", "not a token id"},
        {R"({"prompt":"a","logit_bias":{"1":101}})", "logit_bias", "between -100 and 100"},
        {R"({"prompt":"a","logit_bias":[1]})", "logit_bias", "expected an object"},
        {R"({"prompt":["a",1]})", "prompt", "an array of prompts"},
        {R"({"prompt":[]})", "prompt", "empty array"},
        {R"({"prompt":{"x":1}})", "prompt", "expected a string"},
        {R"({"max_tokens":5})", "prompt", "required"},
        {R"({"prompt":"a","stream":"yes"})", "stream", "expected a boolean"},
    };
    for (const auto& r : rows) {
        api_error e = error_of(parse_completion_request(r.body, defaults));
        EXPECT_EQ(e.status, 400) << r.body;
        EXPECT_EQ(e.param, r.param) << r.body;
        EXPECT_NE(e.message.find(r.message_part), std::string::npos) << r.body << " -> " << e.message;
    }
}

TEST(request_parser, malformed_json_invalid_utf8_and_non_objects_are_400) {
    for (std::string body :
         {std::string("{"), std::string("{\"prompt\": \"a\",}"), std::string("[1,2]"), std::string("\"just a string\""),
          std::string(""), std::string("{\"prompt\":\"\xff\xfe\"}"), std::string("{\"prompt\":\"a\"} trailing"),
          std::string(40, '[') + std::string(40, ']')}) {
        api_error e = error_of(parse_completion_request(body, defaults));
        EXPECT_EQ(e.status, 400) << body;
        EXPECT_EQ(e.type, "invalid_request_error");
    }
}

TEST(request_parser, chat_requests_read_messages_logprobs_and_max_completion_tokens) {
    auto p = parse_chat_request(
        R"({"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]},{"role":"assistant","content":null}],
            "max_completion_tokens":9,"logprobs":true,"top_logprobs":2})",
        defaults);
    ASSERT_TRUE(std::holds_alternative<generation_request>(p)) << std::get<api_error>(p).message;
    const auto& r = std::get<generation_request>(p);
    EXPECT_EQ(r.kind, api_kind::chat);
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[1].content, "Hi there");
    EXPECT_EQ(r.messages[2].content, "");
    EXPECT_EQ(r.sampling.max_tokens, 9);
    EXPECT_EQ(r.logprobs, 2);

    struct row {
        const char* body;
        const char* message_part;
    };
    const row rows[] = {
        {R"({"messages":[]})", "at least one message"},
        {R"({"messages":"hi"})", "expected an array"},
        {R"({"messages":[{"content":"x"}]})", "role is required"},
        {R"({"messages":[{"role":"wizard","content":"x"}]})", "unknown role"},
        {R"({"messages":[{"role":"user","content":5}]})", "expected a string or an array"},
        {R"({"messages":[{"role":"user","content":"x","mood":"happy"}]})", "unknown field 'mood'"},
        {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "only parts"},
        {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "requires logprobs"},
        {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]})", "tools[0].type"},
        {R"({"messages":[{"role":"user","content":"x"}],"functions":[]})", "use tools"},
        {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}})", "unknown type 'xml'"},
        {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}})",
         "json_schema: required"},
        {R"({"model":"m"})", "messages: required"},
    };
    for (const auto& r : rows) {
        api_error e = error_of(parse_chat_request(r.body, defaults));
        EXPECT_EQ(e.status, 400) << r.body;
        EXPECT_NE(e.message.find(r.message_part), std::string::npos) << r.body << " -> " << e.message;
    }
}

// What clients written for OpenAI also send: bookkeeping (metadata, store, service_tier, user), hints (prediction,
// reasoning_effort) and modalities ["text"] are accepted and change nothing; wrong types and audio are 400s.
TEST(request_parser, openai_bookkeeping_and_hint_fields_are_accepted_and_checked) {
    auto p = parse_chat_request(
        R"({"messages":[{"role":"user","content":"x"}],"metadata":{"run":"7"},"store":false,"service_tier":"auto",
            "user":"u","reasoning_effort":"low","modalities":["text"],"prediction":{"type":"content","content":"x"}})",
        defaults);
    ASSERT_TRUE(std::holds_alternative<generation_request>(p)) << std::get<api_error>(p).message;
    EXPECT_TRUE(std::holds_alternative<generation_request>(
        parse_completion_request(R"({"prompt":"a","metadata":{},"store":true,"service_tier":"default"})", defaults)));
    const std::pair<const char*, const char*> rows[] = {
        {R"({"messages":[{"role":"user","content":"x"}],"metadata":{"run":7}})", "metadata.run: expected a string"},
        {R"({"messages":[{"role":"user","content":"x"}],"store":"yes"})", "store: expected a boolean"},
        {R"({"messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]})", "only \"text\""},
        {R"({"messages":[{"role":"user","content":"x"}],"prediction":{"type":"other"}})", "prediction: expected"},
    };
    for (const auto& [body, part] : rows) {
        api_error e = error_of(parse_chat_request(body, defaults));
        EXPECT_EQ(e.status, 400) << body;
        EXPECT_NE(e.message.find(part), std::string::npos) << body << " -> " << e.message;
    }
}

TEST(ws_protocol, start_cancel_and_bad_messages_parse_as_documented) {
    auto m = parse_ws_message(
        R"({"type":"start","id":"c1","messages":[{"role":"user","content":"Hi"}],"params":{"temperature":0,"max_tokens":5}})",
        defaults);
    ASSERT_TRUE(std::holds_alternative<ws_start>(m));
    const auto& s = std::get<ws_start>(m);
    EXPECT_EQ(s.id, "c1");
    EXPECT_EQ(s.request.kind, api_kind::chat);
    EXPECT_EQ(s.request.sampling.max_tokens, 5);
    EXPECT_EQ(s.request.sampling.temperature, 0.0f);
    auto prompt = parse_ws_message(R"({"type":"start","id":7,"prompt":"Once"})", defaults);
    ASSERT_TRUE(std::holds_alternative<ws_start>(prompt));
    EXPECT_EQ(std::get<ws_start>(prompt).id, "7");
    EXPECT_EQ(std::get<ws_start>(prompt).request.kind, api_kind::completion);
    auto cancel = parse_ws_message(R"({"type":"cancel","id":"c1"})", defaults);
    ASSERT_TRUE(std::holds_alternative<ws_cancel>(cancel));
    EXPECT_EQ(std::get<ws_cancel>(cancel).id, "c1");
    for (const char* bad : {"nope", R"({"type":"dance","id":"x"})", R"({"type":"start","id":"x"})",
                            R"({"type":"start","messages":[{"role":"user","content":"a"}]})",
                            R"({"type":"start","id":"x","prompt":"a","params":{"n":2}})",
                            R"({"type":"start","id":"x","prompt":"a","params":{"temperature":"warm"}})"}) {
        auto b = parse_ws_message(bad, defaults);
        EXPECT_TRUE(std::holds_alternative<ws_bad>(b)) << bad;
    }
}

TEST(response_builder, completion_and_chat_json_have_openai_shapes) {
    generation_result r;
    r.id = "cmpl-1";
    r.created = 123;
    r.model = "m";
    r.text = "Hello";
    r.finish_reason = "length";
    r.use = usage{5, 3, 0, 0};
    auto c = json::parse(completion_json(r)).as_object();
    EXPECT_EQ(c["object"].as_string(), "text_completion");
    EXPECT_EQ(c["choices"].as_array()[0].as_object()["text"].as_string(), "Hello");
    EXPECT_EQ(c["choices"].as_array()[0].as_object()["finish_reason"].as_string(), "length");
    EXPECT_TRUE(c["choices"].as_array()[0].as_object()["logprobs"].is_null());
    EXPECT_EQ(c["usage"].as_object()["total_tokens"].as_int64(), 8);
    auto chat = json::parse(chat_completion_json(r)).as_object();
    EXPECT_EQ(chat["object"].as_string(), "chat.completion");
    EXPECT_EQ(chat["choices"].as_array()[0].as_object()["message"].as_object()["role"].as_string(), "assistant");
    EXPECT_EQ(chat["choices"].as_array()[0].as_object()["message"].as_object()["content"].as_string(), "Hello");

    auto chunk = json::parse(chat_chunk_json(r, "He", true, {}, nullptr, true)).as_object();
    EXPECT_EQ(chunk["object"].as_string(), "chat.completion.chunk");
    auto delta = chunk["choices"].as_array()[0].as_object()["delta"].as_object();
    EXPECT_EQ(delta["role"].as_string(), "assistant");
    EXPECT_EQ(delta["content"].as_string(), "He");
    EXPECT_TRUE(chunk["choices"].as_array()[0].as_object()["finish_reason"].is_null());
    EXPECT_TRUE(chunk["usage"].is_null());
    auto last = json::parse(usage_chunk_json(r, true)).as_object();
    EXPECT_TRUE(last["choices"].as_array().empty());
    EXPECT_EQ(last["usage"].as_object()["completion_tokens"].as_int64(), 3);
    EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
    EXPECT_EQ(sse_done, "data: [DONE]\n\n");
}

TEST(response_builder, logprobs_follow_openai_shapes_and_partial_utf8_is_made_valid) {
    generation_result r;
    r.with_logprobs = true;
    r.finish_reason = "stop";
    r.logprobs.push_back({"\xE2\x96", -0.5f, {{"a", -0.5f}, {"b", -1.5f}}});
    auto c = json::parse(completion_json(r)).as_object();
    auto lp = c["choices"].as_array()[0].as_object()["logprobs"].as_object();
    EXPECT_EQ(lp["tokens"].as_array()[0].as_string(), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_DOUBLE_EQ(lp["token_logprobs"].as_array()[0].as_double(), -0.5);
    EXPECT_DOUBLE_EQ(lp["top_logprobs"].as_array()[0].as_object()["b"].as_double(), -1.5);
    auto chat = json::parse(chat_completion_json(r)).as_object();
    auto content = chat["choices"].as_array()[0].as_object()["logprobs"].as_object()["content"].as_array();
    EXPECT_EQ(content[0].as_object()["bytes"].as_array().size(), 2u);
    EXPECT_EQ(content[0].as_object()["top_logprobs"].as_array().size(), 2u);
    EXPECT_EQ(valid_utf8("ok \xC3\xA9 \xFF"), "ok \xC3\xA9 \xEF\xBF\xBD");
}

TEST(response_builder, errors_and_websocket_messages_have_the_documented_shape) {
    auto e =
        json::parse(error_json(api_error{404, "no such model", "invalid_request_error", "model", "model_not_found"}))
            .as_object()["error"]
            .as_object();
    EXPECT_EQ(e["message"].as_string(), "no such model");
    EXPECT_EQ(e["param"].as_string(), "model");
    EXPECT_EQ(e["code"].as_string(), "model_not_found");
    auto e2 = json::parse(error_json(bad_request("bad"))).as_object()["error"].as_object();
    EXPECT_TRUE(e2["param"].is_null());
    EXPECT_TRUE(e2["code"].is_null());

    EXPECT_EQ(ws_delta_json("c1", "Hi"), R"({"type":"delta","id":"c1","text":"Hi"})");
    auto done = json::parse(ws_done_json("c1", finish_reason::cancelled, usage{4, 2, 0, 0}, timings{1, 20, 50, 40}))
                    .as_object();
    EXPECT_EQ(done["type"].as_string(), "done");
    EXPECT_EQ(done["finish_reason"].as_string(), "cancelled");
    EXPECT_EQ(done["usage"].as_object()["total_tokens"].as_int64(), 6);
    EXPECT_DOUBLE_EQ(done["timings"].as_object()["ttft_ms"].as_double(), 20);
    EXPECT_DOUBLE_EQ(done["timings"].as_object()["tokens_per_s"].as_double(), 40);
    EXPECT_EQ(ws_error_json("c1", "overloaded"), R"({"type":"error","id":"c1","message":"overloaded"})");
    EXPECT_EQ(openai_finish_reason(finish_reason::context_full), "length");
}

engine_snapshot sample_snapshot() {
    engine_snapshot s;
    s.requests.push_back(request_view{7, request_state::decoding, 120.0, 10, 10, 3, 0, 1});
    s.requests.push_back(request_view{8, request_state::waiting, 5.0, 4, 0, 0, 0, 0});
    s.kv = kv_view{16, 100, 10, 5, 85, 20, 10, 0.5, 4096, 1};
    s.steps = step_view{42, 1, 1, 1.5, 9.0};
    s.steps.n_prefill_tokens = 300;
    s.steps.n_forks = 3;
    s.steps.n_forked_prompt_tokens = 81;
    s.ttft_ms = latency_summary{3, 12.0, 20.0, 25.0, 26.0, 15.0};
    s.tokens_per_s = 99.5;
    s.n_completed = 11;
    s.n_generated_tokens = 500;
    return s;
}

TEST(metrics_text, prometheus_text_has_the_names_types_and_values) {
    model_facts m;
    m.name = "stories";
    m.chat_template = "plain";
    server_figures f;
    f.ready = true;
    f.n_overloaded = 2;
    const std::string t = prometheus_text(sample_snapshot(), f, m);
    for (const char* line :
         {"# TYPE troupe_requests_running gauge\ntroupe_requests_running 1\n", "troupe_requests_waiting 1\n",
          "troupe_kv_blocks{state=\"used\"} 10\n", "troupe_kv_blocks{state=\"free\"} 85\n",
          "troupe_prefix_cache_hit_rate 0.5\n", "# TYPE troupe_time_to_first_token_milliseconds summary\n",
          "troupe_time_to_first_token_milliseconds{quantile=\"0.5\"} 12\n",
          "troupe_time_to_first_token_milliseconds_count 3\n", "troupe_generation_tokens_total 500\n",
          "troupe_requests_total{outcome=\"completed\"} 11\n", "troupe_overloaded_total 2\n", "troupe_ready 1\n",
          "troupe_steps_total 42\n", "# TYPE troupe_forks_total counter\ntroupe_forks_total 3\n",
          "troupe_forked_prompt_tokens_total 81\n", "troupe_prefill_tokens_total 300\n"}) {
        EXPECT_NE(t.find(line), std::string::npos) << line << "\n---\n" << t;
    }
}

TEST(metrics_text, admin_state_json_carries_the_snapshot_plugins_config_and_template) {
    model_facts m;
    m.name = "stories";
    m.chat_template = "plain";
    m.plugins = {"attention/gqa", "quant/q8"};
    m.config_yaml = "model: x\n";
    server_figures f;
    f.ready = true;
    metrics_history h(2);
    for (int i = 0; i < 3; ++i) h.add(sample_of(sample_snapshot(), i));
    EXPECT_EQ(h.samples().size(), 2u);
    auto o = json::parse(admin_state_json(sample_snapshot(), f, m, h.samples())).as_object();
    auto snap = o["snapshot"].as_object();
    EXPECT_EQ(snap["requests"].as_array().size(), 2u);
    EXPECT_EQ(snap["requests"].as_array()[0].as_object()["state"].as_string(), "decoding");
    EXPECT_EQ(snap["requests"].as_array()[0].as_object()["n_generated_tokens"].as_int64(), 3);
    EXPECT_EQ(snap["kv"].as_object()["n_free"].as_int64(), 85);
    EXPECT_EQ(snap["steps"].as_object()["n_forks"].as_int64(), 3);
    EXPECT_EQ(snap["steps"].as_object()["n_forked_prompt_tokens"].as_int64(), 81);
    EXPECT_DOUBLE_EQ(snap["ttft_ms"].as_object()["median_ms"].as_double(), 12.0);
    EXPECT_TRUE(snap["accepting"].as_bool());
    EXPECT_EQ(o["plugins"].as_array().size(), 2u);
    EXPECT_EQ(o["config_yaml"].as_string(), "model: x\n");
    EXPECT_EQ(o["chat_template"].as_string(), "plain");
    EXPECT_EQ(o["history"].as_array().size(), 2u);
    f.draining = true;
    auto drained = json::parse(admin_state_json(sample_snapshot(), f, m, {})).as_object();
    EXPECT_FALSE(drained["snapshot"].as_object()["accepting"].as_bool());
}

TEST(metrics_text, speculation_figures_appear_per_plugin_only_when_a_plugin_drafts) {
    model_facts m;
    server_figures f;
    engine_snapshot s = sample_snapshot();
    EXPECT_EQ(prometheus_text(s, f, m).find("troupe_spec_"), std::string::npos);
    s.spec.plugin = "spec/draft";
    s.spec.max_draft = 8;
    s.spec.draft_cap = 0;
    s.spec.adaptive = true;
    s.spec.n_draft_steps = 10;
    s.spec.n_drafted = 40;
    s.spec.n_accepted = 30;
    s.spec.acceptance_rate = 0.75;
    s.spec.acceptance_length = 4;
    s.spec.draft_length = 4;
    s.spec.n_steps_on = 10;
    s.spec.n_steps_off = 90;
    const std::string t = prometheus_text(s, f, m);
    for (const char* line :
         {"# TYPE troupe_spec_acceptance_rate gauge\ntroupe_spec_acceptance_rate{plugin=\"spec/draft\"} 0.75\n",
          "troupe_spec_acceptance_length{plugin=\"spec/draft\"} 4\n",
          "troupe_spec_draft_length{plugin=\"spec/draft\"} 4\n", "troupe_spec_draft_cap{plugin=\"spec/draft\"} 0\n",
          "troupe_spec_max_draft{plugin=\"spec/draft\"} 8\n", "# TYPE troupe_spec_accepted_tokens_total counter\n",
          "troupe_spec_accepted_tokens_total{plugin=\"spec/draft\"} 30\n",
          "troupe_spec_drafted_tokens_total{plugin=\"spec/draft\"} 40\n",
          "troupe_spec_decode_steps_total{plugin=\"spec/draft\",drafts=\"off\"} 90\n"}) {
        EXPECT_NE(t.find(line), std::string::npos) << line << "\n---\n" << t;
    }
    auto o = json::parse(admin_state_json(s, f, m, {})).as_object();
    auto spec = o["snapshot"].as_object()["spec"].as_object();
    EXPECT_EQ(spec["plugin"].as_string(), "spec/draft");
    EXPECT_DOUBLE_EQ(spec["acceptance_rate"].as_double(), 0.75);
    EXPECT_DOUBLE_EQ(spec["acceptance_length"].as_double(), 4);
    EXPECT_EQ(spec["draft_cap"].as_int64(), 0);
    EXPECT_EQ(spec["n_steps_off"].as_int64(), 90);
}

TEST(static_files, the_console_has_a_speculative_decoding_card_fed_by_snapshot_spec) {
    const static_file* page = find_static_file("/admin");
    ASSERT_NE(page, nullptr);
    EXPECT_NE(page->body.find("id=\"spec-card\""), std::string_view::npos);
    EXPECT_NE(page->body.find("id=\"spec-acceptance-rate\""), std::string_view::npos);
    const static_file* js = find_static_file("/admin/admin.js");
    ASSERT_NE(js, nullptr);
    EXPECT_NE(js->body.find("render_spec(snap.spec)"), std::string_view::npos);
}

TEST(routes, targets_split_query_params_decode_and_the_admin_token_is_checked) {
    EXPECT_EQ(split("/admin?token=a%20b").path, "/admin");
    EXPECT_EQ(query_param(split("/admin?x=1&token=a%20b").query, "token"), "a b");
    EXPECT_FALSE(query_param("x=1", "token").has_value());
    EXPECT_TRUE(admin_authorized("Bearer s3cret", "", "s3cret"));
    EXPECT_TRUE(admin_authorized("", "token=s3cret", "s3cret"));
    EXPECT_FALSE(admin_authorized("Bearer wrong", "", "s3cret"));
    EXPECT_FALSE(admin_authorized("", "", "s3cret"));
    EXPECT_FALSE(admin_authorized("Bearer ", "token=", ""));  // an empty token disables the console
    EXPECT_EQ(id_after("/admin/api/cancel/42", "/admin/api/cancel/"), 42);
    EXPECT_FALSE(id_after("/admin/api/cancel/4x", "/admin/api/cancel/").has_value());
    EXPECT_FALSE(id_after("/admin/api/cancel/-1", "/admin/api/cancel/").has_value());
}

TEST(static_files, the_chat_page_and_console_are_embedded) {
    const static_file* index = find_static_file("/");
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
    EXPECT_NE(index->body.find("<"), std::string_view::npos);
    ASSERT_NE(find_static_file("/admin"), nullptr);
    EXPECT_EQ(find_static_file("/admin")->path, "/admin/index.html");
    EXPECT_NE(find_static_file("/chat.js"), nullptr);
    EXPECT_EQ(find_static_file("/../etc/passwd"), nullptr);
}

TEST(request_stream, events_arrive_in_order_with_one_wake_up_per_batch_and_admission_is_released) {
    server_stats stats;
    int n_notified = 0;
    request_stream::params p;
    p.n_prompt_tokens = 12;
    p.stats = &stats;
    auto rs = std::make_shared<request_stream>(p);
    rs->set_notify([&] { ++n_notified; });
    EXPECT_EQ(stats.n_queued.load(), 1);
    EXPECT_EQ(stats.n_queued_tokens.load(), 12);
    request_sink sink = rs->make_sink();
    sink.on_text("Once");
    sink.on_text(" upon");
    EXPECT_EQ(n_notified, 1);
    EXPECT_EQ(stats.n_queued.load(), 0);
    EXPECT_EQ(stats.n_queued_tokens.load(), 0);
    auto ev = rs->take();
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].text + ev[1].text, "Once upon");
    sink.on_done(finish_reason::length, usage{5, 2, 0, 0}, timings{});
    EXPECT_EQ(n_notified, 2);
    EXPECT_TRUE(rs->ended());
    ev = rs->take();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].what, stream_event::kind::done);
    EXPECT_EQ(stats.n_active.load(), 1);
    sink = {};
    rs.reset();
    EXPECT_EQ(stats.n_active.load(), 0);
}

TEST(request_stream, unsent_output_past_the_bound_overflows_once_and_keeps_only_the_end) {
    request_stream::params p;
    p.max_pending_bytes = 1000;
    auto rs = std::make_shared<request_stream>(p);
    int n_overflow = 0;
    rs->set_on_overflow([&] { ++n_overflow; });
    request_sink sink = rs->make_sink();
    for (int i = 0; i < 100; ++i) sink.on_text(std::string(50, 'x'));
    EXPECT_TRUE(rs->overflowed());
    EXPECT_EQ(n_overflow, 1);
    sink.on_error("cancelled");
    auto ev = rs->take();
    EXPECT_LT(ev.size(), 20u);
    EXPECT_EQ(ev.back().what, stream_event::kind::error);
}

TEST(serving, admission_refuses_past_the_request_and_token_bounds) {
    server_config c;
    c.max_queue_requests = 2;
    c.max_queue_tokens = 100;
    server_stats s;
    EXPECT_FALSE(check_admission(c, s, 500).has_value());  // an empty queue takes any one request
    s.n_queued = 1;
    s.n_queued_tokens = 60;
    EXPECT_FALSE(check_admission(c, s, 40).has_value());
    auto e = check_admission(c, s, 41);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->status, 429);
    s.n_queued = 2;
    EXPECT_EQ(check_admission(c, s, 1)->status, 429);
    EXPECT_EQ(engine_error("overloaded: 5 requests").status, 429);
    EXPECT_EQ(engine_error("engine is draining").status, 503);
    EXPECT_EQ(engine_error("boom").status, 500);
}

}  // namespace
}  // namespace troupe::server
