// Function calling over HTTP on the real engine: a copy of stories260K carrying tests/e2e/tools_template.jinja
// (a Llama 3.1-style tool template) behind an in-process server. tool_choice "required" holds the model's
// own reply to the calls' schema, so what comes back is deterministic: a get_time call, whole and streamed,
// parsed from the model's text by the server's llama3 tool-call parsing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/gguf/gguf_file.h"
#include "core/gguf/gguf_writer.h"
#include "tests/common/shared_data.h"
#include "tests/server/live_server.h"
#include "tests/server/loopback_client.h"

namespace troupe::testing {
namespace {

namespace json = boost::json;

const char* clock_tool = R"([{"type": "function", "function": {"name": "get_time", "description": "the time in a zone",
    "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
    "additionalProperties": false}}}])";

class tool_calls_loopback : public ::testing::Test {
protected:
    std::unique_ptr<live_server> live_;
    std::filesystem::path model_;  // the copy, removed at the end

    void TearDown() override {
        live_.reset();
        if (!model_.empty()) std::filesystem::remove(model_);
    }

    // The chat template the model copy carries.
    virtual std::string chat_template() {
        std::ifstream in(std::string(TROUPE_E2E_DIR) + "/tools_template.jinja", std::ios::binary);
        std::stringstream jinja;
        jinja << in.rdbuf();
        return jinja.str();
    }

    void SetUp() override {
        TROUPE_REQUIRE_SHARED(source, "models/stories260K.gguf");
        const std::string jinja = chat_template();
        ASSERT_FALSE(jinja.empty());
        auto file = gguf::gguf_file::open(source);
        ASSERT_TRUE(file) << file.message();
        gguf::gguf_writer w;
        w.copy_metadata(**file);
        w.set_string("tokenizer.chat_template", jinja);
        for (const auto& t : (*file)->tensors()) w.add_tensor(t.name, t.type, t.dims, std::span(t.data, t.n_bytes));
        const auto path =
            std::filesystem::path(::testing::TempDir()) / ("troupe_tool_calls_" + std::to_string(::getpid()) + ".gguf");
        model_ = path;
        ASSERT_TRUE(w.write(path.string()).ok());
        std::string error;
        live_ = start_live_server(test_config(path.string()), false, error);
        ASSERT_NE(live_, nullptr) << error;
    }

    http_reply chat(const std::string& fields) {
        return http_call(live_->port, "POST", "/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "What time is it?"}], "temperature": 0,
                             "max_tokens": 100, )" +
                             fields + "}");
    }
};

TEST_F(tool_calls_loopback, a_required_call_comes_back_as_tool_calls_whole_and_streamed) {
    if (IsSkipped() || HasFatalFailure()) return;
    http_reply r = chat(std::string(R"("tool_choice": "required", "tools": )") + clock_tool);
    ASSERT_EQ(r.status, 200) << r.body;
    const json::value v = json::parse(r.body);
    const json::value& choice = v.at("choices").at(0);
    EXPECT_EQ(choice.at("finish_reason"), "tool_calls") << r.body;
    EXPECT_TRUE(choice.at("message").at("content").is_null()) << r.body;
    const json::value& call = choice.at("message").at("tool_calls").at(0);
    EXPECT_EQ(call.at("type"), "function");
    EXPECT_TRUE(call.at("id").as_string().starts_with("call_")) << r.body;
    EXPECT_EQ(call.at("function").at("name"), "get_time");
    const json::value args = json::parse(call.at("function").at("arguments").as_string());
    const auto zone = args.at("zone").as_string();
    EXPECT_TRUE(zone == "UTC" || zone == "CET") << r.body;

    http_reply s = chat(std::string(R"("stream": true, "tool_choice": "required", "tools": )") + clock_tool);
    ASSERT_EQ(s.status, 200) << s.body;
    std::string content;
    json::value streamed_call;
    std::string finish;
    for (size_t at = s.body.find("data: {"); at != std::string::npos; at = s.body.find("data: {", at + 1)) {
        const json::value chunk = json::parse(s.body.substr(at + 6, s.body.find("\n\n", at) - at - 6));
        const json::value& c = chunk.at("choices").at(0);
        const json::object& delta = c.at("delta").as_object();
        if (const auto* text = delta.if_contains("content")) content += text->as_string();
        if (const auto* calls = delta.if_contains("tool_calls")) streamed_call = calls->at(0);
        if (c.at("finish_reason").is_string()) finish = c.at("finish_reason").as_string();
    }
    EXPECT_EQ(content, "");
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_TRUE(streamed_call.is_object()) << s.body;
    EXPECT_EQ(streamed_call.at("index"), 0);
    EXPECT_EQ(streamed_call.at("function"), call.at("function"));  // greedy: the same call as the whole reply
}

TEST_F(tool_calls_loopback, tools_reach_the_template_and_a_free_reply_is_text_or_calls) {
    if (IsSkipped() || HasFatalFailure()) return;
    http_reply plain = chat("\"stream\": false");
    http_reply with_tools = chat(std::string(R"("tools": )") + clock_tool);
    ASSERT_EQ(plain.status, 200) << plain.body;
    ASSERT_EQ(with_tools.status, 200) << with_tools.body;
    const json::value a = json::parse(plain.body);
    const json::value b = json::parse(with_tools.body);
    EXPECT_GT(b.at("usage").at("prompt_tokens").as_int64(), a.at("usage").at("prompt_tokens").as_int64() + 10);
    const json::value& choice = b.at("choices").at(0);
    if (choice.at("finish_reason") == "tool_calls") {
        EXPECT_FALSE(choice.at("message").at("tool_calls").as_array().empty());
    } else {
        EXPECT_TRUE(choice.at("message").at("content").is_string()) << with_tools.body;
        EXPECT_FALSE(choice.at("message").as_object().contains("tool_calls")) << with_tools.body;
    }
}

// chat_template_kwargs over HTTP: a template that reads enable_thinking, as Qwen3's and GLM's do.
class template_kwargs_loopback : public tool_calls_loopback {
protected:
    std::string chat_template() override {
        return "{{- bos_token }}{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
               "{{ m.content }}{% if enable_thinking is defined and not enable_thinking %} /no_think, answer in "
               "one short sentence{% endif %}<|eot_id|>{%- endfor %}{%- if add_generation_prompt %}"
               "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}";
    }
};

TEST_F(template_kwargs_loopback, chat_template_kwargs_reach_the_template_and_a_clash_or_a_non_object_is_a_400) {
    if (IsSkipped() || HasFatalFailure()) return;
    auto prompt_tokens = [](const http_reply& r) { return json::parse(r.body).at("usage").at("prompt_tokens"); };
    http_reply plain = chat(R"("max_tokens": 4)");
    http_reply off = chat(R"("max_tokens": 4, "chat_template_kwargs": {"enable_thinking": false})");
    http_reply on = chat(R"("max_tokens": 4, "chat_template_kwargs": {"enable_thinking": true, "unread": [1]})");
    ASSERT_EQ(plain.status, 200) << plain.body;
    ASSERT_EQ(off.status, 200) << off.body;
    ASSERT_EQ(on.status, 200) << on.body;
    EXPECT_GT(prompt_tokens(off).as_int64(), prompt_tokens(plain).as_int64() + 3);
    EXPECT_EQ(prompt_tokens(on), prompt_tokens(plain));  // read but true; a key the template never reads is ignored

    http_reply clash = chat(R"("chat_template_kwargs": {"add_generation_prompt": false})");
    EXPECT_EQ(clash.status, 400) << clash.body;
    const json::value clash_body = json::parse(clash.body);
    const json::value& e = clash_body.at("error");
    EXPECT_EQ(e.at("param"), "chat_template_kwargs");
    EXPECT_NE(std::string(e.at("message").as_string()).find("chat_template_kwargs.add_generation_prompt"),
              std::string::npos)
        << clash.body;
    http_reply not_object = chat(R"("chat_template_kwargs": "enable_thinking=false")");
    EXPECT_EQ(not_object.status, 400) << not_object.body;
    EXPECT_EQ(json::parse(not_object.body).at("error").at("param"), "chat_template_kwargs");
}

}  // namespace
}  // namespace troupe::testing
