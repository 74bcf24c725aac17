// tool_call_parser: each family's tool-call output split into content and calls, the format detected from
// templates in tests/chat/templates, and text that only looks like a call left as content.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <boost/json.hpp>

#include "core/chat/tool_call_parser.h"

namespace troupe {
namespace {

struct expected_call {
    const char* id;
    const char* name;
    const char* arguments;
};

struct row {
    tool_call_format format;
    const char* text;
    const char* content;
    std::vector<expected_call> calls;
};

TEST(tool_call_parser, each_familys_calls_become_tool_calls_with_json_arguments) {
    const row rows[] = {
        {tool_call_format::hermes,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>",
         "",
         {{"", "get_weather", R"({"city":"Paris","days":2})"}}},
        {tool_call_format::hermes,
         "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
         "{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
         "Let me check both.",
         {{"", "a", "{}"}, {"", "b", R"({"x":[1,2]})"}}},
        {tool_call_format::hermes,  // cut at the stop token before the closing tag
         "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"é\"}}",
         "",
         {{"", "a", R"({"q":"é"})"}}},
        {tool_call_format::llama3,
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
         "",
         {{"", "get_weather", R"({"city":"Paris"})"}}},
        {tool_call_format::llama3,
         "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
         "",
         {{"", "a", R"({"n":1})"}, {"", "b", "{}"}}},
        {tool_call_format::mistral,
         "[TOOL_CALLS] [{\"name\": \"lookup\", \"arguments\": {\"city\": \"Tokyo\"}, \"id\": \"abc123xyz\"}, "
         "{\"name\": \"lookup\", \"arguments\": {\"city\": \"Osaka\"}, \"id\": \"def456uvw\"}]",
         "",
         {{"abc123xyz", "lookup", R"({"city":"Tokyo"})"}, {"def456uvw", "lookup", R"({"city":"Osaka"})"}}},
        {tool_call_format::mistral,
         "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"q\": \"x\"}",
         "",
         {{"", "get_weather", R"({"city":"Paris"})"}, {"", "search", R"({"q":"x"})"}}},
        {tool_call_format::hermes,  // arguments written as a JSON string are kept as that text
         "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
         "",
         {{"", "f", R"({"a": 1})"}}},
        {tool_call_format::hermes,  // Qwen3-Coder's XML body, as its template writes a call: text values as
                                    // strings, JSON ones (numbers, lists) as JSON, one newline around each dropped
         "I'll look.\n<tool_call>\n<function=search>\n<parameter=query>\nnews\ntoday\n</parameter>\n"
         "<parameter=limit>\n3\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n</function>\n"
         "</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>",
         "I'll look.",
         {{"", "search", R"({"query":"news\ntoday","limit":3,"tags":["a","b"]})"}, {"", "now", "{}"}}},
        {tool_call_format::phi4,  // as Phi-4-mini's template writes a call
         "<|tool_call|>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}<|/tool_call|>"
         "<|tool_call|>{\"name\": \"b\", \"arguments\": \"{}\"}<|/tool_call|>",
         "",
         {{"", "get_weather", R"({"city":"Paris"})"}, {"", "b", "{}"}}},
        {tool_call_format::nemotron,  // Nemotron Nano v2: a JSON array inside <TOOLCALL>
         "Checking.\n<TOOLCALL>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": "
         "{}}]</TOOLCALL>",
         "Checking.",
         {{"", "a", R"({"x":1})"}, {"", "b", "{}"}}},
        {tool_call_format::seed_oss,  // Seed-OSS: Qwen3-Coder's XML inside <seed:tool_call>, values unwrapped
         "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>2"
         "</parameter>\n</function>\n</seed:tool_call>",
         "",
         {{"", "get_weather", R"({"city":"Paris","days":2})"}}},
    };
    for (const auto& r : rows) {
        const parsed_reply p = parse_tool_calls(r.format, r.text);
        EXPECT_EQ(p.content, r.content) << r.text;
        ASSERT_EQ(p.tool_calls.size(), r.calls.size()) << r.text;
        for (size_t k = 0; k < r.calls.size(); ++k) {
            EXPECT_EQ(p.tool_calls[k].id, r.calls[k].id) << r.text;
            EXPECT_EQ(p.tool_calls[k].name, r.calls[k].name) << r.text;
            EXPECT_EQ(p.tool_calls[k].arguments, r.calls[k].arguments) << r.text;
        }
    }
}

TEST(tool_call_parser, text_that_is_no_valid_call_stays_content_untouched) {
    const std::pair<tool_call_format, const char*> rows[] = {
        {tool_call_format::hermes, "The weather is fine."},
        {tool_call_format::hermes, "<tool_call>\n{not json}\n</tool_call>"},
        {tool_call_format::hermes, "<tool_call>{\"arguments\": {}}</tool_call>"},
        {tool_call_format::hermes, "<tool_call>\n<function=f>\n<parameter=x>unclosed\n</function>\n</tool_call>"},
        {tool_call_format::llama3, "Paris is sunny today."},
        {tool_call_format::llama3, "{\"name\": \"a\", \"parameters\": {}} and then some prose"},
        {tool_call_format::llama3, "{\"city\": \"Paris\"}"},
        {tool_call_format::mistral, "No calls here."},
        {tool_call_format::mistral, "[TOOL_CALLS] [{\"name\": 3}]"},
        {tool_call_format::none, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"},
        {tool_call_format::nemotron, "<TOOLCALL>[{\"name\": \"a\"}, {\"arguments\": {}}]</TOOLCALL>"},
        {tool_call_format::phi4, "<|tool_call|>not json<|/tool_call|>"},
    };
    for (const auto& [format, text] : rows) {
        const parsed_reply p = parse_tool_calls(format, text);
        EXPECT_EQ(p.content, text) << tool_call_format_name(format);
        EXPECT_TRUE(p.tool_calls.empty()) << text;
    }
}

std::string template_text(const std::string& name) {
    std::ifstream in(std::string(TROUPE_CHAT_TEMPLATES_DIR) + "/" + name);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

TEST(tool_call_parser, the_format_is_detected_from_each_familys_template) {
    const std::pair<const char*, tool_call_format> rows[] = {
        {"hermes_tool_use.jinja", tool_call_format::hermes},
        {"qwen25_tools.jinja", tool_call_format::hermes},
        {"llama3_tools.jinja", tool_call_format::llama3},
        {"mistral_v3_tools.jinja", tool_call_format::mistral},
        {"mistral_v7.jinja", tool_call_format::mistral},
        {"gemma.jinja", tool_call_format::none},
        {"phi3.jinja", tool_call_format::none},
    };
    for (const auto& [file, format] : rows) {
        const std::string text = template_text(file);
        ASSERT_FALSE(text.empty()) << file;
        EXPECT_EQ(detect_tool_call_format(text), format) << file;
    }
    // The markers of the families whose templates are not among tests/chat/templates, as their templates write them.
    EXPECT_EQ(detect_tool_call_format("{{- '<|tool|>' + (tool | tojson) + '<|/tool|>' -}} <|tool_call|>"),
              tool_call_format::phi4);
    EXPECT_EQ(detect_tool_call_format("{{- '<TOOLCALL>[' -}}"), tool_call_format::nemotron);
    EXPECT_EQ(detect_tool_call_format("{%- set toolcall_begin_token = '<seed:tool_call>' -%}"),
              tool_call_format::seed_oss);
    for (auto f :
         {tool_call_format::none, tool_call_format::hermes, tool_call_format::llama3, tool_call_format::mistral,
          tool_call_format::phi4, tool_call_format::nemotron, tool_call_format::seed_oss}) {
        EXPECT_EQ(parse_tool_call_format_name(tool_call_format_name(f)), f);
    }
}

TEST(tool_call_parser, calls_become_openai_tool_calls_with_ids_kept_or_made) {
    const parsed_reply p = parse_tool_calls(
        tool_call_format::mistral,
        "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abc123xyz\"}, {\"name\": \"b\", "
        "\"arguments\": {}}]");
    EXPECT_EQ(boost::json::serialize(tool_calls_json(p.tool_calls, "call_7_")),
              R"([{"id":"abc123xyz","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}},)"
              R"({"id":"call_7_1","type":"function","function":{"name":"b","arguments":"{}"}}])");
}

}  // namespace
}  // namespace troupe
