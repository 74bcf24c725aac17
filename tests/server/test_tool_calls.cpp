// Function calling on /v1/chat/completions without sockets: the request's tools, tool_choice and tool turns
// (server::parse_chat_request), their rendering by real tool-capable templates (Qwen2.5, Llama 3.1,
// Mistral v3 from tests/chat/templates) through server::prepare_request on stories260K's tokenizer, and a
// model's reply text parsed per family into OpenAI's message and stream chunks (server::tool_calls and the
// choice collector). The model's text here is written by the test: this is the seam the server runs every
// reply through (a tiny model's own replies are random text).
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <fstream>
#include <sstream>
#include <variant>

#include "actors/tokenizer/tokenizer_codec.h"
#include "core/chat/chat_formatter.h"
#include "core/gguf/gguf_file.h"
#include "core/tokenizer/tokenizer.h"
#include "server/choices.h"
#include "server/request_parser.h"
#include "server/serving.h"
#include "server/tool_calls.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

namespace json = boost::json;

std::string read_template(const std::string& name) {
    std::ifstream in(std::string(TROUPE_CHAT_TEMPLATES_DIR) + "/" + name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

const char* weather_tools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

server::generation_request parse_ok(const std::string& body) {
    auto p = server::parse_chat_request(body, sampling_params{});
    if (auto* e = std::get_if<server::api_error>(&p)) {
        ADD_FAILURE() << e->message;
        return {};
    }
    return std::get<server::generation_request>(p);
}

server::api_error parse_error(const std::string& body) {
    auto p = server::parse_chat_request(body, sampling_params{});
    if (auto* e = std::get_if<server::api_error>(&p)) return *e;
    ADD_FAILURE() << "accepted: " << body;
    return {};
}

TEST(tool_request, tools_and_a_conversation_with_tool_turns_are_read_for_the_template) {
    auto r = parse_ok(std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}], "tool_choice": "auto", )") +
                      weather_tools + "}");
    EXPECT_TRUE(r.tools.given);
    EXPECT_TRUE(r.tools.conversation_has_tools);
    ASSERT_EQ(r.messages_json.size(), 3u);
    const json::object& call = r.messages_json[1].at("tool_calls").at(0).as_object();
    // arguments arrive as JSON text and reach the template as an object (transformers' convention)
    EXPECT_EQ(call.at("function").at("arguments"), (json::object{{"city", "Paris"}}));
    EXPECT_EQ(call.at("id"), "call_1");
    EXPECT_TRUE(r.messages_json[1].at("content").is_null());
    EXPECT_EQ(r.messages_json[2].at("tool_call_id"), "call_1");
    EXPECT_EQ(r.messages_json[2].at("content"), "18 C");
}

TEST(tool_request, malformed_tools_and_unsupported_choices_are_400s_naming_the_field) {
    auto e = parse_error(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]})");
    EXPECT_EQ(e.param, "tools");
    EXPECT_NE(e.message.find("tools[0].type"), std::string::npos) << e.message;
    e = parse_error(
        R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})");
    EXPECT_NE(e.message.find("tools[0].function.name"), std::string::npos) << e.message;
    e = parse_error(std::string(R"({"messages": [{"role": "user", "content": "x"}],
        "tool_choice": {"type": "function", "function": {"name": "get_time"}}, )") +
                    weather_tools + "}");
    EXPECT_EQ(e.param, "tool_choice");
    EXPECT_NE(e.message.find("'get_time' is not among the tools"), std::string::npos) << e.message;
    e = parse_error(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})");
    EXPECT_NE(e.message.find("only allowed when tools are specified"), std::string::npos) << e.message;
    e = parse_error(R"({"messages": [{"role": "tool", "content": "18 C"}]})");
    EXPECT_NE(e.message.find("messages[0].tool_call_id: required"), std::string::npos) << e.message;
    e = parse_error(
        R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})");
    EXPECT_NE(e.message.find("messages[0].tool_calls[0].function.arguments"), std::string::npos) << e.message;
}

class tool_serving : public ::testing::Test {
protected:
    server::serving_model model_;
    server_config config_;

    void load(std::string_view jinja) {
        TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
        auto file = gguf::gguf_file::open(path);
        ASSERT_TRUE(file) << file.message();
        auto tok = tokenizer::from_gguf(**file);
        ASSERT_TRUE(tok) << tok.message();
        model_.tok = *tok;
        model_.facts.name = "stories260K";
        model_.n_ctx = 4096;
        server::set_chat_template(model_, jinja);
    }

    std::variant<std::string, server::api_error> rendered(server::generation_request& r) {
        auto p = server::prepare_request(model_, config_, r);
        if (auto* e = std::get_if<server::api_error>(&p)) return *e;
        return model_.tok->decode(*std::get<server::prepared_request>(p).req.prompt_ids);
    }
};

TEST_F(tool_serving, a_qwen_template_shows_the_tools_and_the_tool_turns_and_its_replies_parse_as_hermes) {
    load(read_template("qwen25_tools.jinja"));
    if (HasFatalFailure() || IsSkipped()) return;
    auto r = parse_ok(std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}], )") +
                      weather_tools + "}");
    auto text = rendered(r);
    auto* s = std::get_if<std::string>(&text);
    ASSERT_NE(s, nullptr) << std::get<server::api_error>(text).message;
    EXPECT_NE(s->find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos)
        << *s;
    EXPECT_NE(s->find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
              std::string::npos)
        << *s;
    EXPECT_NE(s->find("<tool_response>\n18 C\n</tool_response>"), std::string::npos) << *s;
    EXPECT_EQ(r.tools.format, tool_call_format::hermes);

    // tool_choice none: the tools are not shown and the reply is text
    auto none = parse_ok(std::string(R"({"messages": [{"role": "user", "content": "Hi"}], "tool_choice": "none", )") +
                         weather_tools + "}");
    text = rendered(none);
    ASSERT_TRUE(std::holds_alternative<std::string>(text));
    EXPECT_EQ(std::get<std::string>(text).find("<tools>"), std::string::npos);
    EXPECT_EQ(none.tools.format, tool_call_format::none);
}

TEST_F(tool_serving, each_family_template_picks_its_reply_format) {
    const std::pair<const char*, tool_call_format> cases[] = {
        {"hermes_tool_use.jinja", tool_call_format::hermes},
        {"llama3_tools.jinja", tool_call_format::llama3},
        {"mistral_v3_tools.jinja", tool_call_format::mistral},
        {"glm45_tools.jinja", tool_call_format::glm45},
        {"minimax_m2_tools.jinja", tool_call_format::minimax_m2},
        {"command_r7b_actions.jinja", tool_call_format::command_r7b},
        {"deepseek_v31_tools.jinja", tool_call_format::deepseek},
        {"kimi_k2_tools.jinja", tool_call_format::kimi_k2},
        {"gemma4_tools.jinja", tool_call_format::gemma4},
        {"llama32_pythonic.jinja", tool_call_format::pythonic}};
    for (const auto& [file, format] : cases) {
        load(read_template(file));
        if (HasFatalFailure() || IsSkipped()) return;
        auto r = parse_ok(std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], )") +
                          weather_tools + "}");
        auto text = rendered(r);
        ASSERT_TRUE(std::holds_alternative<std::string>(text))
            << file << ": " << std::get<server::api_error>(text).message;
        EXPECT_NE(std::get<std::string>(text).find("get_weather"), std::string::npos) << file;
        EXPECT_EQ(r.tools.format, format) << file;
    }
}

TEST_F(tool_serving, chat_template_kwargs_reach_the_template_as_variables) {
    load(read_template("glm45_tools.jinja"));
    if (HasFatalFailure() || IsSkipped()) return;
    const std::string messages = R"({"messages": [{"role": "user", "content": "Hi"}])";
    auto plain = parse_ok(messages + "}");
    auto no_thinking = parse_ok(messages + R"(, "chat_template_kwargs": {"enable_thinking": false}})");
    auto a = rendered(plain);
    auto b = rendered(no_thinking);
    ASSERT_TRUE(std::holds_alternative<std::string>(a));
    ASSERT_TRUE(std::holds_alternative<std::string>(b));
    EXPECT_EQ(std::get<std::string>(a).find("/nothink"), std::string::npos) << std::get<std::string>(a);
    EXPECT_NE(std::get<std::string>(b).find("Hi/nothink"), std::string::npos) << std::get<std::string>(b);
    EXPECT_TRUE(std::get<std::string>(b).ends_with("<|assistant|>\n<think></think>")) << std::get<std::string>(b);
}

// A GGUF may make a format's markers control tokens, which decoding leaves out: a request with tools has
// the streamer write them (sampling.shown_special_tokens), so the parser finds them.
TEST_F(tool_serving, a_request_with_tools_has_its_formats_markers_written_even_as_control_tokens) {
    load(read_template("qwen25_tools.jinja"));
    if (HasFatalFailure() || IsSkipped()) return;
    auto with_tools =
        parse_ok(std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + weather_tools + "}");
    ASSERT_TRUE(std::holds_alternative<std::string>(rendered(with_tools)));
    EXPECT_EQ(with_tools.sampling.shown_special_tokens, (std::vector<std::string>{"<tool_call>", "</tool_call>"}));
    auto plain = parse_ok(R"({"messages": [{"role": "user", "content": "x"}]})");
    ASSERT_TRUE(std::holds_alternative<std::string>(rendered(plain)));
    EXPECT_TRUE(plain.sampling.shown_special_tokens.empty());

    // stories260K's </s> is a control token: left out by the plain decoder, written by one that shows it
    const int32_t eos = model_.tok->eos_id();
    ASSERT_GE(eos, 0);
    ASSERT_TRUE(model_.tok->is_control(eos));
    const auto codec = make_tokenizer_codec(model_.tok);
    EXPECT_EQ(codec->make_decoder()->push(eos), "");
    EXPECT_EQ(codec->make_decoder_showing({"</s>", "not one token"})->push(eos), "</s>");
    for (auto f : all_tool_call_formats()) {
        EXPECT_EQ(tool_call_marker_texts(f).empty(), f == tool_call_format::none) << tool_call_format_name(f);
        if (f != tool_call_format::none) {
            EXPECT_EQ(tool_call_marker_texts(f).front(), tool_call_open_marker(f)) << tool_call_format_name(f);
        }
    }
}

TEST_F(tool_serving, a_deepseek_template_gets_the_calls_arguments_as_json_text) {
    for (const char* file : {"deepseek_v3.jinja", "qwen25_tools.jinja"}) {
        load(read_template(file));
        if (HasFatalFailure() || IsSkipped()) return;
        auto r = parse_ok(R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}]})");
        auto text = rendered(r);
        auto* s = std::get_if<std::string>(&text);
        ASSERT_NE(s, nullptr) << file << ": " << std::get<server::api_error>(text).message;
        EXPECT_NE(s->find("{\"city\": \"Paris\"}"), std::string::npos) << file << "\n" << *s;
        EXPECT_EQ(s->find("{'city': 'Paris'}"), std::string::npos) << file << "\n" << *s;
    }
}

TEST(tool_request, chat_template_kwargs_not_an_object_or_naming_a_variable_the_server_sets_is_a_400) {
    const std::string messages = R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": )";
    auto e = parse_error(messages + "[1]}");
    EXPECT_EQ(e.param, "chat_template_kwargs");
    EXPECT_NE(e.message.find("expected an object"), std::string::npos) << e.message;
    for (const char* key : {"add_generation_prompt", "messages", "tools", "bos_token", "raise_exception"}) {
        e = parse_error(messages + "{\"enable_thinking\": true, \"" + key + "\": 1}}");
        EXPECT_EQ(e.param, "chat_template_kwargs") << key;
        EXPECT_NE(e.message.find("chat_template_kwargs." + std::string(key) + ":"), std::string::npos) << e.message;
    }
    auto r = parse_ok(messages + R"({"enable_thinking": false, "thinking": {"budget": 3}}})");
    EXPECT_EQ(r.template_kwargs, (json::object{{"enable_thinking", false}, {"thinking", {{"budget", 3}}}}));
}

TEST_F(tool_serving, a_required_or_named_call_is_forced_by_the_calls_json_schema_for_every_template) {
    load(read_template("llama3_tools.jinja"));
    if (HasFatalFailure() || IsSkipped()) return;
    const std::string two_tools =
        R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}}}}, {"type": "function", "function": {"name": "get_time"}}])";
    auto r = parse_ok(R"({"messages": [{"role": "user", "content": "Weather?"}], "tool_choice": "required", )" +
                      two_tools + "}");
    ASSERT_TRUE(std::holds_alternative<std::string>(rendered(r)));
    EXPECT_EQ(r.format.what, server::response_format::kind::json_schema);
    const json::value any_of = json::parse(r.format.schema).at("anyOf");
    ASSERT_EQ(any_of.as_array().size(), 2u);
    EXPECT_EQ(any_of.at(0).at("properties").at("name").at("const"), "get_weather");
    EXPECT_EQ(any_of.at(0).at("properties").at("parameters").at("properties").at("city").at("type"), "string");
    EXPECT_EQ(any_of.at(1).at("properties").at("name").at("const"), "get_time");
    EXPECT_EQ(r.tools.format, tool_call_format::llama3);

    auto named = parse_ok(R"({"messages": [{"role": "user", "content": "Time?"}],
        "tool_choice": {"type": "function", "function": {"name": "get_time"}}, )" +
                          two_tools + "}");
    ASSERT_TRUE(std::holds_alternative<std::string>(rendered(named)));
    const json::value only = json::parse(named.format.schema).at("anyOf");
    ASSERT_EQ(only.as_array().size(), 1u);
    EXPECT_EQ(only.at(0).at("properties").at("name").at("const"), "get_time");

    auto both = parse_ok(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
        "response_format": {"type": "json_object"}, )" +
                         two_tools + "}");
    auto text = rendered(both);
    ASSERT_TRUE(std::holds_alternative<server::api_error>(text));
    EXPECT_NE(std::get<server::api_error>(text).message.find("cannot be combined with response_format"),
              std::string::npos);

    // A template whose own calls sit inside markers (hermes <tool_call>, Qwen2.5's) is forced the same way, as vLLM
    // forces it: the reply is the call as JSON, read by the llama3 parser (before, a 400). The tools still reach
    // the template.
    load(read_template("qwen25_tools.jinja"));
    auto hermes = parse_ok(R"({"messages": [{"role": "user", "content": "x"}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, )" +
                           two_tools + "}");
    text = rendered(hermes);
    ASSERT_TRUE(std::holds_alternative<std::string>(text)) << std::get<server::api_error>(text).message;
    EXPECT_NE(std::get<std::string>(text).find("get_weather"), std::string::npos);
    EXPECT_EQ(hermes.format.what, server::response_format::kind::json_schema);
    EXPECT_EQ(json::parse(hermes.format.schema).at("anyOf").at(0).at("properties").at("name").at("const"),
              "get_weather");
    EXPECT_EQ(hermes.tools.format, tool_call_format::llama3);
    const auto reply = server::parse_tool_reply(
        hermes.tools.format, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})", "stop", "1");
    ASSERT_EQ(reply.tool_calls.size(), 1u);
    EXPECT_EQ(reply.tool_calls.at(0).at("function").at("name"), "get_weather");
    EXPECT_EQ(json::parse(reply.tool_calls.at(0).at("function").at("arguments").as_string()),
              json::parse(R"({"city": "Oslo"})"));
}

TEST_F(tool_serving, tools_for_a_template_without_them_are_a_400_saying_so) {
    load("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}");
    if (HasFatalFailure() || IsSkipped()) return;
    auto r = parse_ok(std::string(R"({"messages": [{"role": "user", "content": "Hi"}], )") + weather_tools + "}");
    auto text = rendered(r);
    auto* e = std::get_if<server::api_error>(&text);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "tools");
    EXPECT_NE(e->message.find("does not define tools"), std::string::npos) << e->message;

    load("");  // no template: built-in plain, which cannot show a tool result either
    auto turns = parse_ok(R"({"messages": [{"role": "tool", "tool_call_id": "c", "content": "18 C"}]})");
    text = rendered(turns);
    e = std::get_if<server::api_error>(&text);
    ASSERT_NE(e, nullptr);
    EXPECT_NE(e->message.find("need the model's own chat template"), std::string::npos) << e->message;
}

TEST(tool_reply, a_hermes_reply_becomes_an_assistant_message_with_tool_calls) {
    const auto reply = server::parse_tool_reply(
        tool_call_format::hermes,
        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "stop", "7_0");
    EXPECT_EQ(reply.finish_reason, "tool_calls");
    EXPECT_EQ(reply.content, "Let me look.");
    const json::object msg = server::assistant_message(reply.content, reply.tool_calls);
    EXPECT_EQ(msg, json::parse(R"({"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_7_0_0",
        "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})"));
}

TEST(tool_reply, text_that_is_not_a_call_stays_content_and_a_cut_reply_keeps_its_finish_reason) {
    auto reply = server::parse_tool_reply(tool_call_format::llama3, "It is sunny.", "stop", "1_0");
    EXPECT_TRUE(reply.tool_calls.empty());
    EXPECT_EQ(reply.content, "It is sunny.");
    EXPECT_EQ(reply.finish_reason, "stop");
    EXPECT_EQ(server::assistant_message(reply.content, reply.tool_calls),
              json::parse(R"({"role": "assistant", "content": "It is sunny."})"));
    reply =
        server::parse_tool_reply(tool_call_format::hermes, "<tool_call>\n{\"name\": \"f\", \"argu", "length", "1_0");
    EXPECT_TRUE(reply.tool_calls.empty());
    EXPECT_EQ(reply.finish_reason, "length");
    reply = server::parse_tool_reply(tool_call_format::mistral,
                                     "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}, \"id\": \"abc123xyz\"}]",
                                     "stop", "1_0");
    ASSERT_EQ(reply.tool_calls.size(), 1u);
    EXPECT_EQ(reply.tool_calls[0].at("id"), "abc123xyz");
    EXPECT_TRUE(server::assistant_message(reply.content, reply.tool_calls).at("content").is_null());
}

TEST(tool_call_stream, text_is_sent_until_a_marker_and_what_may_start_one_is_held_back) {
    server::tool_call_stream s(tool_call_format::hermes);
    EXPECT_EQ(s.push("Let me <to"), "Let me ");  // "<to" may open <tool_call>
    EXPECT_EQ(s.push("day>"), "<today>");        // it did not
    EXPECT_EQ(s.push(" ok <tool_"), " ok ");
    EXPECT_EQ(s.push("call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"), "");
    std::string rest;
    const auto calls = s.finish(rest);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "f");
    EXPECT_EQ(calls[0].arguments, "{\"a\":1}");
    EXPECT_EQ(rest, "");
}

TEST(tool_call_stream, a_llama3_reply_opening_with_a_brace_is_held_and_given_back_when_it_is_no_call) {
    server::tool_call_stream s(tool_call_format::llama3);
    EXPECT_EQ(s.push("  "), "");
    EXPECT_EQ(s.push("{oops"), "");
    EXPECT_EQ(s.push(" not json"), "");
    std::string rest;
    EXPECT_TRUE(s.finish(rest).empty());
    EXPECT_EQ(rest, "  {oops not json");

    server::tool_call_stream text(tool_call_format::llama3);
    EXPECT_EQ(text.push("Sunny"), "Sunny");
    EXPECT_EQ(text.push(" {x}"), " {x}");  // a brace later in a text reply is text
}

TEST(tool_reply, each_newer_familys_reply_becomes_tool_calls_and_finish_reason_tool_calls) {
    const std::pair<tool_call_format, const char*> rows[] = {
        {tool_call_format::glm45,
         "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
         "</tool_call>"},
        {tool_call_format::minimax_m2,
         "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">"
         "Paris</parameter>\n</invoke>\n</minimax:tool_call>"},
        {tool_call_format::command_r7b,
         "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", "
         "\"parameters\": {\"city\": \"Paris\"}}]<|END_ACTION|>"},
        {tool_call_format::deepseek,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
         "\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
        {tool_call_format::kimi_k2,
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
         "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
         "<|tool_calls_section_end|>"},
        {tool_call_format::gemma4, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"},
        {tool_call_format::pythonic, "[get_weather(city='Paris')]"},
    };
    for (const auto& [format, text] : rows) {
        auto reply = server::parse_tool_reply(format, text, "stop", "5_0");
        EXPECT_EQ(reply.finish_reason, "tool_calls") << text;
        EXPECT_EQ(reply.content, "") << text;
        ASSERT_EQ(reply.tool_calls.size(), 1u) << text;
        EXPECT_EQ(reply.tool_calls[0].at("function"),
                  json::parse(R"({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})"))
            << text;
    }
}

TEST(tool_call_stream, a_deepseek_marker_split_inside_a_character_and_a_pythonic_list_are_held_back) {
    server::tool_call_stream s(tool_call_format::deepseek);
    const std::string marker = "<｜tool▁calls▁begin｜>";
    EXPECT_EQ(s.push("Checking." + marker.substr(0, 3)), "Checking.");  // 3 bytes: '<' and part of U+FF5C
    EXPECT_EQ(s.push(marker.substr(3) + "<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜>"), "");
    std::string rest;
    auto calls = s.finish(rest);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, "now");
    EXPECT_EQ(rest, "");

    server::tool_call_stream py(tool_call_format::pythonic);
    EXPECT_EQ(py.push(" [get_weather(city="), "");
    EXPECT_EQ(py.push("\"Paris\")]"), "");
    calls = py.finish(rest);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].arguments, R"({"city":"Paris"})");

    server::tool_call_stream list(tool_call_format::pythonic);  // a reply that opens with a list of numbers
    EXPECT_EQ(list.push("[1, 2]"), "");
    calls = list.finish(rest);
    EXPECT_TRUE(calls.empty());
    EXPECT_EQ(rest, "[1, 2]");
    server::tool_call_stream text(tool_call_format::pythonic);
    EXPECT_EQ(text.push("Sunny [really]"), "Sunny [really]");
}

// The collector's stream for a choice whose reply is a call: content first, then one chunk with the calls,
// then finish_reason "tool_calls".
TEST(tool_call_stream, a_streamed_choice_ends_with_the_calls_chunk_and_finish_reason_tool_calls) {
    server::generation_result head;
    head.id = "chatcmpl-42";
    head.model = "m";
    server::choice_layout layout;
    layout.tools = tool_call_format::hermes;
    server::choice_collector c(head, server::api_kind::chat, layout, false);
    std::vector<server::stream_event> events(3);
    events[0].text = "Checking. <tool";
    events[1].text = "_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    events[2].what = server::stream_event::kind::done;
    events[2].reason = finish_reason::stop;
    const std::string sse = c.add(events, true);
    std::vector<json::value> chunks;
    for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
        chunks.push_back(json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6)));
    }
    ASSERT_EQ(chunks.size(), 3u) << sse;
    EXPECT_EQ(chunks[0].at("choices").at(0).at("delta").at("content"), "Checking. ");
    EXPECT_EQ(chunks[1].at("choices").at(0).at("delta"),
              json::parse(R"({"tool_calls": [{"id": "call_42_0_0", "type": "function", "function":
                  {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}, "index": 0}]})"));
    EXPECT_EQ(chunks[2].at("choices").at(0).at("finish_reason"), "tool_calls");
    EXPECT_TRUE(c.ended());
}

TEST(tool_reply, a_whole_chat_completion_carries_the_calls_and_finish_reason_tool_calls) {
    server::generation_result head;
    head.id = "chatcmpl-9";
    server::choice_layout layout;
    layout.tools = tool_call_format::hermes;
    server::choice_collector c(head, server::api_kind::chat, layout, false);
    std::vector<server::stream_event> events(2);
    events[0].text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    events[1].what = server::stream_event::kind::done;
    events[1].reason = finish_reason::stop;
    c.add(events, false);
    ASSERT_TRUE(c.ended());
    const json::value whole = json::parse(c.whole());
    const json::value& choice = whole.at("choices").at(0);
    EXPECT_EQ(choice.at("finish_reason"), "tool_calls");
    EXPECT_TRUE(choice.at("message").at("content").is_null());
    EXPECT_EQ(choice.at("message").at("tool_calls").at(0).at("function").at("name"), "get_weather");
    EXPECT_EQ(choice.at("message").at("tool_calls").at(0).at("id"), "call_9_0_0");
}

}  // namespace
}  // namespace troupe
