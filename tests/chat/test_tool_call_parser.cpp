// tool_call_parser: each family's tool-call output split into content and calls, the format detected from
// templates in tests/chat/templates, and text that only looks like a call left as content.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <boost/json.hpp>

#include "core/chat/chat_formatter.h"
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

enum class arguments_compared { as_text, as_json };

// The reply parsed in its format gives the row's content and calls; arguments equal as text, or as JSON values
// (where a parser's own serialization of numbers is not what the row writes).
void expect_parsed(const row& r, arguments_compared how) {
    const parsed_reply p = parse_tool_calls(r.format, r.text);
    EXPECT_EQ(p.content, r.content) << r.text;
    ASSERT_EQ(p.tool_calls.size(), r.calls.size()) << r.text;
    for (size_t k = 0; k < r.calls.size(); ++k) {
        EXPECT_EQ(p.tool_calls[k].id, r.calls[k].id) << r.text;
        EXPECT_EQ(p.tool_calls[k].name, r.calls[k].name) << r.text;
        if (how == arguments_compared::as_text) {
            EXPECT_EQ(p.tool_calls[k].arguments, r.calls[k].arguments) << r.text;
        } else {
            EXPECT_EQ(boost::json::parse(p.tool_calls[k].arguments), boost::json::parse(r.calls[k].arguments))
                << r.text << "\n"
                << p.tool_calls[k].arguments;
        }
    }
}

// Text that is no valid call in its format comes back as content, untouched, with no calls.
void expect_left_as_content(tool_call_format format, const char* text) {
    const parsed_reply p = parse_tool_calls(format, text);
    EXPECT_EQ(p.content, text) << tool_call_format_name(format);
    EXPECT_TRUE(p.tool_calls.empty()) << text;
}

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
    for (const auto& r : rows) expect_parsed(r, arguments_compared::as_text);
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
    for (const auto& [format, text] : rows) expect_left_as_content(format, text);
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
        {"deepseek_v3.jinja", tool_call_format::deepseek},
        {"glm45_tools.jinja", tool_call_format::glm45},
        {"minimax_m2_tools.jinja", tool_call_format::minimax_m2},
        {"command_r7b_actions.jinja", tool_call_format::command_r7b},
        {"deepseek_r1_tools.jinja", tool_call_format::deepseek},
        {"deepseek_v31_tools.jinja", tool_call_format::deepseek},
        {"kimi_k2_tools.jinja", tool_call_format::kimi_k2},
        {"gemma4_tools.jinja", tool_call_format::gemma4},
        {"llama32_pythonic.jinja", tool_call_format::pythonic},
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
    for (auto f : all_tool_call_formats()) {
        EXPECT_EQ(parse_tool_call_format_name(tool_call_format_name(f)), f);
        EXPECT_EQ(tool_call_open_marker(f).empty(), f == tool_call_format::none) << tool_call_format_name(f);
    }
}

// The families whose calls are not Hermes-, Llama- or Mistral-style JSON, as their templates write them.
TEST(tool_call_parser, glm_minimax_command_r_deepseek_kimi_gemma_and_pythonic_calls_become_tool_calls) {
    const row rows[] = {
        {tool_call_format::glm45,  // string values as text, others as JSON; text before and between the calls
         "<think></think>\nLet me look.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York"
         "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>"
         "{\"metric\": true}</arg_value>\n</tool_call>\n<tool_call>now</tool_call>",
         "<think></think>\nLet me look.",
         {{"", "get_weather", R"({"city":"New York","days":3,"opts":{"metric":true}})"}, {"", "now", "{}"}}},
        {tool_call_format::minimax_m2,  // several invokes in one block
         "<think>\nweather\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">"
         "Paris</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke name=\"search\">\n"
         "<parameter name=\"query\">rain \"today\"</parameter>\n<parameter name=\"tags\">[\"a\"]</parameter>\n"
         "</invoke>\n</minimax:tool_call>",
         "<think>\nweather\n</think>",
         {{"", "get_weather", R"({"city":"Paris","days":2})"},
          {"", "search", R"({"query":"rain \"today\"","tags":["a"]})"}}},
        {tool_call_format::command_r7b,  // the index ids the template writes are not kept
         "<|START_THINKING|>I will check.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
         "\"tool_name\": "
         "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}},\n    {\"tool_call_id\": \"1\", \"tool_name\": "
         "\"now\", "
         "\"parameters\": {}}\n]<|END_ACTION|>",
         "<|START_THINKING|>I will check.<|END_THINKING|>",
         {{"", "get_weather", R"({"city":"Paris"})"}, {"", "now", "{}"}}},
        {tool_call_format::deepseek,  // V3 / R1: type, name, and the arguments in a json fence
         "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
         "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n"
         "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "Checking.",
         {{"", "get_weather", R"({"city":"Paris"})"}, {"", "now", "{}"}}},
        {tool_call_format::deepseek,  // V3.1: name<｜tool▁sep｜>arguments
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": [1, 2]}"
         "<｜tool▁call▁end｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "",
         {{"", "get_weather", R"({"city":"Paris","days":[1,2]})"}, {"", "now", "{}"}}},
        {tool_call_format::deepseek,  // cut at the stop token before the closing markers
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"x\": 1}",
         "",
         {{"", "f", R"({"x":1})"}}},
        {tool_call_format::kimi_k2,  // ids functions.<name>:<index> kept, as the template writes them back
         "I'll check both.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
         "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.now:1"
         "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
         "I'll check both.",
         {{"functions.get_weather:0", "get_weather", R"({"city":"Paris"})"}, {"functions.now:1", "now", "{}"}}},
        {tool_call_format::gemma4,  // strings in <|"|> marks, bare keys, nested maps and lists
         "Sure.<|tool_call>call:get_weather{city:<|\"|>São Paulo, \"SP\"<|\"|>,days:2,metric:true,opts:{depth:1.5},"
         "tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>]}<tool_call|><|tool_call>call:now{}<tool_call|>",
         "Sure.",
         {{"", "get_weather",
           R"({"city":"São Paulo, \"SP\"","days":2,"metric":true,"opts":{"depth":1.5E0},"tags":["a","b"]})"},
          {"", "now", "{}"}}},
        {tool_call_format::pythonic,  // Python literals: quotes of both kinds, escapes, True/None, dicts, tuples
         "[get_weather(city=\"Paris\", days=2, metric=True), search(query='it\\'s \\u00e9t\\u00e9', "
         "opts={'k': None}, span=(1, 2)), now()]",
         "",
         {{"", "get_weather", R"({"city":"Paris","days":2,"metric":true})"},
          {"", "search", R"({"query":"it's été","opts":{"k":null},"span":[1,2]})"},
          {"", "now", "{}"}}},
        {tool_call_format::pythonic,  // Python's one-letter escapes (\t \v \0 ...), hex, and an unknown one kept as
                                      // written
         "[f(s='a\\tb\\vc\\x41\\q')]",
         "",
         {{"", "f", R"({"s":"a\tb\u000bcA\\q"})"}}},
        {tool_call_format::pythonic,  // Llama 4's python block after text
         "Calling.<|python_start|>[f(a=-1.5e3, b=\"x\")]<|python_end|>",
         "Calling.",
         {{"", "f", R"({"a":-1.5E3,"b":"x"})"}}},
    };
    for (const auto& r : rows) expect_parsed(r, arguments_compared::as_json);
}

TEST(tool_call_parser, malformed_calls_of_the_newer_families_stay_content_untouched) {
    const std::pair<tool_call_format, const char*> rows[] = {
        {tool_call_format::glm45, "<tool_call>get_weather\n<arg_key>city</arg_key>\n</tool_call>"},
        {tool_call_format::glm45, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"},
        {tool_call_format::glm45, "Plain text about <arg_key> tags."},
        {tool_call_format::minimax_m2,
         "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"x\">1\n</invoke>\n"
         "</minimax:tool_call>"},
        {tool_call_format::minimax_m2, "<minimax:tool_call>\n</minimax:tool_call>"},
        {tool_call_format::command_r7b, "<|START_ACTION|>[{\"name\": \"f\"}]<|END_ACTION|>"},
        {tool_call_format::command_r7b, "<|START_ACTION|>[{\"tool_name\": \"f\", \"parameters\": [1]}]<|END_ACTION|>"},
        {tool_call_format::deepseek,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{oops}\n```<｜tool▁call▁end｜>"
         "<｜tool▁calls▁end｜>"},
        {tool_call_format::deepseek, "<｜tool▁calls▁begin｜>f(x=1)<｜tool▁calls▁end｜>"},
        {tool_call_format::kimi_k2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:x<|tool_call_argument_begin|>{}<|tool_call_end|>"
         "<|tool_calls_section_end|>"},
        {tool_call_format::kimi_k2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]"
         "<|tool_call_end|><|tool_calls_section_end|>"},
        {tool_call_format::gemma4, "<|tool_call>call:f{city:<|\"|>Paris}<tool_call|>"},
        {tool_call_format::gemma4, "<|tool_call>f{}<tool_call|>"},
        {tool_call_format::pythonic, "[1, 2, 3]"},
        {tool_call_format::pythonic, "[]"},
        {tool_call_format::pythonic, "Let me check: [get_weather(city=\"Paris\")]"},
        {tool_call_format::pythonic, "[f(\"positional\")]"},
        {tool_call_format::pythonic, "[f(x=unquoted)]"},
        {tool_call_format::pythonic, "[f(x=1)] and more"},
    };
    for (const auto& [format, text] : rows) expect_left_as_content(format, text);
}

// Each family's template (tests/chat/templates) renders an assistant turn with two calls; the parser reads
// back from that turn the calls that went in, typed arguments and all.
TEST(tool_call_parser, each_familys_template_writes_calls_its_parser_reads_back) {
    struct template_row {
        const char* file;
        tool_call_format format;
        const char* turn_start;  // the text that opens the assistant's turn
        const char* turn_end;    // the text that closes it
    };
    const template_row rows[] = {
        {"glm45_tools.jinja", tool_call_format::glm45, "<|assistant|>", "<|user|>"},
        {"minimax_m2_tools.jinja", tool_call_format::minimax_m2, "]~b]ai\n", "[e~["},
        {"command_r7b_actions.jinja", tool_call_format::command_r7b, "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"},
        {"deepseek_r1_tools.jinja", tool_call_format::deepseek, "<｜Assistant｜>", "<｜end▁of▁sentence｜>"},
        {"deepseek_v31_tools.jinja", tool_call_format::deepseek, "<｜Assistant｜></think>", "<｜end▁of▁sentence｜>"},
        {"kimi_k2_tools.jinja", tool_call_format::kimi_k2, "<|im_assistant|>assistant<|im_middle|>", "<|im_end|>"},
        {"gemma4_tools.jinja", tool_call_format::gemma4, "<|turn>model\n", "<turn|>"},
        {"llama32_pythonic.jinja", tool_call_format::pythonic, "<|start_header_id|>assistant<|end_header_id|>\n\n",
         "<|eot_id|>"},
        {"qwen25_tools.jinja", tool_call_format::hermes, "<|im_start|>assistant\n", "<|im_end|>"},
    };
    const auto messages = boost::json::parse(R"([
        {"role": "user", "content": "Weather in Paris, and the time?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather",
             "arguments": {"city": "Paris", "days": 3, "metric": true, "tags": ["a", "b"], "opts": {"deep": false}}}},
            {"id": "functions.now:1", "type": "function", "function": {"name": "now", "arguments": {}}}]},
        {"role": "user", "content": "Thanks"}])")
                              .as_array();
    const auto tools = boost::json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])")
                           .as_array();
    for (const auto& r : rows) {
        const std::string jinja = template_text(r.file);
        ASSERT_FALSE(jinja.empty()) << r.file;
        EXPECT_EQ(detect_tool_call_format(jinja), r.format) << r.file;
        auto f = chat_formatter::from_jinja(jinja, chat_template_tokens{});
        ASSERT_TRUE(f) << r.file << ": " << f.message();
        auto text = f->render({&messages, &tools, false});
        ASSERT_TRUE(text) << r.file << ": " << text.message();
        const size_t start = text->find(r.turn_start, text->find("Weather in Paris"));
        ASSERT_NE(start, std::string::npos) << r.file << "\n" << *text;
        const size_t body = start + std::string_view(r.turn_start).size();
        const std::string turn = text->substr(body, text->find(r.turn_end, body) - body);
        const parsed_reply p = parse_tool_calls(r.format, turn);
        ASSERT_EQ(p.tool_calls.size(), 2u) << r.file << "\n" << turn;
        EXPECT_EQ(p.tool_calls[0].name, "get_weather") << r.file;
        EXPECT_EQ(boost::json::parse(p.tool_calls[0].arguments),
                  boost::json::parse(R"({"city": "Paris", "days": 3, "metric": true, "tags": ["a", "b"],
                      "opts": {"deep": false}})"))
            << r.file << "\n"
            << turn;
        EXPECT_EQ(p.tool_calls[1].name, "now") << r.file;
        EXPECT_EQ(p.tool_calls[1].arguments, "{}") << r.file;
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
