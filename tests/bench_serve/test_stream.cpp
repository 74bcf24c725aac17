// The wire: SSE framing split anywhere, OpenAI chunks, request bodies, URLs.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "cli/bench_serve/openai_protocol.h"
#include "cli/bench_serve/sse_parser.h"

namespace troupe::bench {
namespace {

const std::string stream =
    ": keep-alive\n\n"
    "data: {\"choices\":[{\"text\":\"Once\",\"finish_reason\":null}]}\n\n"
    "event: message\r\ndata: {\"choices\":[{\"text\":\" upon\"}]}\r\n\r\n"
    "data: line one\ndata: line two\n\n"
    "data: [DONE]\n\n";

TEST(sse, events_are_the_same_however_the_bytes_are_split) {
    const std::vector<std::string> expected = {"{\"choices\":[{\"text\":\"Once\",\"finish_reason\":null}]}",
                                               "{\"choices\":[{\"text\":\" upon\"}]}", "line one\nline two", "[DONE]"};
    for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, stream.size()}) {
        sse_parser p;
        std::vector<std::string> events;
        for (size_t i = 0; i < stream.size(); i += piece) p.feed(std::string_view(stream).substr(i, piece), events);
        EXPECT_EQ(events, expected) << "pieces of " << piece;
        EXPECT_EQ(p.pending(), 0u);
    }
}

TEST(sse, an_unfinished_event_waits_for_its_blank_line) {
    sse_parser p;
    std::vector<std::string> events;
    p.feed("data: {\"a\":1}\n", events);
    EXPECT_TRUE(events.empty());
    p.feed("\n", events);
    EXPECT_EQ(events, std::vector<std::string>{"{\"a\":1}"});
}

TEST(chunks, completion_text_chat_deltas_usage_done_and_errors) {
    auto c = parse_stream_chunk(R"({"choices":[{"index":0,"text":"Hi","finish_reason":null}]})");
    EXPECT_TRUE(c.token);
    EXPECT_EQ(c.text, "Hi");
    auto empty_text = parse_stream_chunk(R"({"choices":[{"text":"","finish_reason":null}]})");
    EXPECT_TRUE(empty_text.token);  // a token whose text is not complete yet
    auto last = parse_stream_chunk(R"({"choices":[{"text":"","finish_reason":"length"}]})");
    EXPECT_FALSE(last.token);
    EXPECT_EQ(last.finish_reason, "length");
    auto role = parse_stream_chunk(R"({"choices":[{"delta":{"role":"assistant"},"finish_reason":null}]})");
    EXPECT_FALSE(role.token);
    auto delta = parse_stream_chunk(R"({"choices":[{"delta":{"content":" there"}}]})");
    EXPECT_TRUE(delta.token);
    EXPECT_EQ(delta.text, " there");
    auto usage = parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34}})");
    EXPECT_FALSE(usage.token);
    EXPECT_EQ(usage.prompt_tokens, 12);
    EXPECT_EQ(usage.completion_tokens, 34);
    EXPECT_TRUE(parse_stream_chunk("[DONE]").done);
    EXPECT_EQ(parse_stream_chunk(R"({"error":{"message":"overloaded","type":"x"}})").error, "overloaded");
    EXPECT_FALSE(parse_stream_chunk("{nope").error.empty());
}

TEST(requests, bodies_ask_for_a_stream_with_usage_and_exact_lengths) {
    output_config o;
    o.temperature = 0.5;
    auto v = boost::json::parse(request_body(endpoint_kind::completions, "m", "Once", 17, o)).as_object();
    EXPECT_EQ(v.at("model").as_string(), "m");
    EXPECT_EQ(v.at("prompt").as_string(), "Once");
    EXPECT_EQ(v.at("max_tokens").as_int64(), 17);
    EXPECT_TRUE(v.at("stream").as_bool());
    EXPECT_TRUE(v.at("ignore_eos").as_bool());
    EXPECT_TRUE(v.at("stream_options").as_object().at("include_usage").as_bool());
    auto chat = boost::json::parse(request_body(endpoint_kind::chat, "m", "Hi", 3, o)).as_object();
    EXPECT_FALSE(chat.contains("prompt"));
    EXPECT_EQ(chat.at("messages").as_array()[0].as_object().at("content").as_string(), "Hi");
    EXPECT_EQ(endpoint_path(endpoint_kind::chat), "/v1/chat/completions");
}

TEST(urls, host_port_and_path_are_split_and_bad_ones_refused) {
    auto u = parse_url("http://127.0.0.1:8123/api/");
    ASSERT_TRUE(u) << u.message();
    EXPECT_EQ(u->host, "127.0.0.1");
    EXPECT_EQ(u->port, "8123");
    EXPECT_EQ(u->base_path, "/api");
    auto d = parse_url("http://localhost");
    ASSERT_TRUE(d);
    EXPECT_EQ(d->port, "80");
    EXPECT_FALSE(parse_url("https://x:1"));
    EXPECT_FALSE(parse_url("http://x:99999"));
    EXPECT_FALSE(parse_url("http://:80"));
}

TEST(models, the_first_model_id_is_taken_from_v1_models) {
    auto id = first_model_id(R"({"object":"list","data":[{"id":"stories","object":"model"}]})");
    ASSERT_TRUE(id);
    EXPECT_EQ(*id, "stories");
    EXPECT_FALSE(first_model_id(R"({"data":[]})"));
}

}  // namespace
}  // namespace troupe::bench
