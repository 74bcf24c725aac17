// chat_formatter: the model's own Jinja template by default, the built-ins as fallback (and why), the
// variables apply_chat_template passes, and one BOS for the tokenizer.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "core/chat/chat_formatter.h"
#include "core/gguf/gguf_file.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

const char* chatml_jinja =
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if tools %}[{{ tools | length }} tools]{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}";

chat_template_tokens test_tokens(bool add_bos) {
    chat_template_tokens t;
    t.named = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    t.bos = "<s>";
    t.add_bos = add_bos;
    return t;
}

boost::json::array conversation() {
    return boost::json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])")
        .as_array();
}

TEST(chat_formatter, the_models_own_template_renders_with_messages_tools_and_the_generation_prompt) {
    const auto f = chat_formatter::from_model(chatml_jinja, test_tokens(true));
    ASSERT_TRUE(f.uses_jinja()) << f.why();
    EXPECT_EQ(f.name(), "jinja");
    const auto messages = conversation();
    const auto tools = boost::json::parse(R"([{"type": "function"}, {"type": "function"}])").as_array();
    auto text = f.render({&messages, &tools, true});
    ASSERT_TRUE(text) << text.message();
    EXPECT_EQ(*text,
              "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n[2 tools]"
              "<|im_start|>assistant\n");
    auto no_prompt = f.render({&messages, nullptr, false});
    ASSERT_TRUE(no_prompt) << no_prompt.message();
    EXPECT_EQ(*no_prompt, "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(chat_formatter, extra_variables_reach_the_template_and_may_not_replace_the_renderers_own) {
    const auto f = chat_formatter::from_model(
        "{% if enable_thinking is defined and not enable_thinking %}/no_think {% endif %}{{ budget.tokens }} "
        "{{ messages | length }}",
        test_tokens(false));
    const auto messages = conversation();
    const auto extra = boost::json::parse(R"({"enable_thinking": false, "budget": {"tokens": 64}})").as_object();
    auto text = f.render({&messages, nullptr, true, &extra});
    ASSERT_TRUE(text) << text.message();
    EXPECT_EQ(*text, "/no_think 64 2");
    for (const char* name : {"messages", "add_generation_prompt", "eos_token", "range", "raise_exception"}) {
        EXPECT_TRUE(is_reserved_template_variable(name)) << name;
        const boost::json::object clash{{name, 1}};
        auto refused = f.render({&messages, nullptr, true, &clash});
        ASSERT_FALSE(refused) << name;
        EXPECT_NE(refused.message().find("'" + std::string(name) + "'"), std::string::npos) << refused.message();
    }
    EXPECT_FALSE(is_reserved_template_variable("enable_thinking"));
}

TEST(chat_formatter, a_template_that_prints_call_arguments_as_text_is_found_and_gets_them_as_json_text) {
    const std::pair<const char*, bool> rows[] = {
        // DeepSeek R1 / V3.1 add the arguments to strings: an object fails there
        {"{% for m in messages %}{% for c in m.tool_calls or [] %}{{ 'args: ' + c.function.arguments }}{% endfor %}"
         "{% endfor %}",
         true},
        // DeepSeek V3 prints them with |string: an object comes out as a Python dict
        {"{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | string }}{% endfor %}"
         "{% endfor %}",
         true},
        {"{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}{% endfor %}"
         "{% endfor %}",
         false},
        {"{% for m in messages %}{{ m.content }}{% endfor %}", false},
    };
    for (const auto& [jinja, text] : rows) {
        EXPECT_EQ(chat_formatter::from_model(jinja, test_tokens(false)).wants_text_arguments(), text) << jinja;
    }
    const auto messages = boost::json::parse(R"([{"role": "user", "content": "x"}, {"role": "assistant",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"city": "Paris", "n": 2.5}}},
                       {"type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}]}])")
                              .as_array();
    const auto converted = arguments_as_text(messages);
    EXPECT_EQ(converted[1].at("tool_calls").at(0).at("function").at("arguments"), R"({"city": "Paris", "n": 2.5})");
    EXPECT_EQ(converted[1].at("tool_calls").at(1).at("function").at("arguments"), R"({"a":1})");
    EXPECT_EQ(converted[0], messages[0]);
}

TEST(chat_formatter, the_tokenizer_gets_one_bos_when_it_adds_bos_itself) {
    const auto messages = conversation();
    const auto adds = chat_formatter::from_model(chatml_jinja, test_tokens(true));
    auto text = adds.prompt_for_tokenizer({&messages, nullptr, true});
    ASSERT_TRUE(text) << text.message();
    EXPECT_TRUE(text->starts_with("<|im_start|>system")) << *text;
    const auto keeps = chat_formatter::from_model(chatml_jinja, test_tokens(false));
    auto kept = keeps.prompt_for_tokenizer({&messages, nullptr, true});
    ASSERT_TRUE(kept) << kept.message();
    EXPECT_TRUE(kept->starts_with("<s><|im_start|>system")) << *kept;
}

// Templates without a system turn: Gemma's raises on one, this Phi-3 one drops it. The prompt the model gets has the
// system text at the head of the next user message, as llama-server renders these (its test-chat-template
// expectations); render() stays transformers' (the raise, or the system text gone); a template with a system turn is
// left as it is.
TEST(chat_formatter, system_messages_fold_into_the_next_user_message_where_the_template_has_no_system_turn) {
    const auto messages = boost::json::parse(R"([{"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"}, {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"}])")
                              .as_array();
    const auto gemma = chat_formatter::from_model(
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
        test_tokens(true));
    ASSERT_TRUE(gemma.uses_jinja()) << gemma.why();
    EXPECT_FALSE(gemma.renders_system_role());
    auto raised = gemma.render({&messages, nullptr, true});
    ASSERT_FALSE(raised);
    EXPECT_NE(raised.message().find("System role not supported"), std::string::npos) << raised.message();
    auto folded = gemma.prompt_for_tokenizer({&messages, nullptr, true});
    ASSERT_TRUE(folded) << folded.message();
    EXPECT_EQ(*folded,
              "<start_of_turn>user\nYou are a helpful assistant\nHello<end_of_turn>\n<start_of_turn>model\nHi "
              "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
              "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n");

    const auto phi3 = chat_formatter::from_model(
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
        "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}"
        "{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
        test_tokens(true));
    EXPECT_FALSE(phi3.renders_system_role());
    auto dropped = phi3.render({&messages, nullptr, true});
    ASSERT_TRUE(dropped) << dropped.message();
    EXPECT_EQ(dropped->find("You are a helpful assistant"), std::string::npos);
    auto kept = phi3.prompt_for_tokenizer({&messages, nullptr, true});
    ASSERT_TRUE(kept) << kept.message();
    EXPECT_EQ(*kept,
              "<|user|>\nYou are a helpful assistant\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are "
              "you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
              "<|assistant|>\n");

    const auto chatml = chat_formatter::from_model(chatml_jinja, test_tokens(true));
    EXPECT_TRUE(chatml.renders_system_role());
    auto as_is = chatml.prompt_for_tokenizer({&messages, nullptr, true});
    ASSERT_TRUE(as_is) << as_is.message();
    EXPECT_EQ(as_is->rfind("<|im_start|>system\nYou are a helpful assistant<|im_end|>\n", 0), 0u) << *as_is;
}

TEST(chat_formatter, folding_puts_each_system_text_before_the_next_user_message_text_parts_included) {
    const auto messages = boost::json::parse(R"([{"role": "system", "content": "A"}, {"role": "developer",
        "content": [{"type": "text", "text": "B"}]}, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "ok"}, {"role": "system", "content": "C"}])")
                              .as_array();
    EXPECT_EQ(boost::json::serialize(fold_system_messages(messages)),
              R"([{"role":"user","content":[{"type":"text","text":"A\nB\n"},{"type":"text","text":"hi"}]},)"
              R"({"role":"assistant","content":"ok"},{"role":"user","content":"C"}])");
}

TEST(chat_formatter, a_template_that_does_not_parse_falls_back_to_the_builtin_its_markers_show_and_says_why) {
    const auto f = chat_formatter::from_model("{% for m in messages %}<|im_start|>{{ m.role }}", test_tokens(true));
    EXPECT_FALSE(f.uses_jinja());
    EXPECT_EQ(f.name(), "chatml");
    EXPECT_NE(f.why().find("does not parse"), std::string::npos) << f.why();
    EXPECT_NE(f.why().find("line 1"), std::string::npos) << f.why();
    const auto messages = conversation();
    auto text = f.render({&messages, nullptr, true});
    ASSERT_TRUE(text) << text.message();
    EXPECT_EQ(*text,
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

    const auto none = chat_formatter::from_model("", test_tokens(true));
    EXPECT_EQ(none.name(), "plain");
    EXPECT_NE(none.why().find("no tokenizer.chat_template"), std::string::npos) << none.why();
}

TEST(chat_formatter, a_template_that_raises_is_an_error_with_its_message) {
    const auto f = chat_formatter::from_model(
        "{% if messages[0].role != 'user' %}{{ raise_exception('The first message must be from the user') }}"
        "{% endif %}",
        test_tokens(true));
    const auto messages = conversation();
    auto text = f.render({&messages, nullptr, true});
    ASSERT_FALSE(text);
    EXPECT_EQ(text.message(), "The first message must be from the user");
}

TEST(chat_formatter, special_tokens_come_from_the_models_vocabulary) {
    TROUPE_REQUIRE_SHARED(path, "models/llama-2-tiny-random.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file) << file.message();
    auto tok = tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok) << tok.message();
    const chat_template_tokens t = chat_tokens_from(**tok);
    EXPECT_EQ(t.find("bos_token"), "<s>");
    EXPECT_EQ(t.find("eos_token"), "</s>");
    EXPECT_EQ(t.find("unk_token"), "<unk>");
    EXPECT_TRUE(t.add_bos);
}

}  // namespace
}  // namespace troupe
