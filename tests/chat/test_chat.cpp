// Chat templates: detection from real template texts' markers, and the exact prompt each family renders.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/chat/chat_template.h"
#include "core/gguf/gguf_file.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

// Excerpts of the templates these families ship in their GGUF files.
TEST(chat_template, each_family_is_detected_from_its_markers) {
    struct row {
        const char* jinja;
        chat_template_kind kind;
    };
    const row rows[] = {
        {"{% for message in messages %}{{'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'}}",
         chat_template_kind::llama3},
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
         "'<|im_end|>' + '\n'}}{% endfor %}",
         chat_template_kind::chatml},
        {"{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + "
         "eos_token }}",
         chat_template_kind::zephyr},
        {"{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + "
         "'\\n<</SYS>>\\n\\n' %}{{ bos_token + '[INST] ' + content + ' [/INST]' }}",
         chat_template_kind::llama2},
        {"{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}",
         chat_template_kind::mistral},
        {"", chat_template_kind::plain},
        {"{{ messages | join }}", chat_template_kind::plain},
    };
    for (const auto& r : rows) EXPECT_EQ(detect_chat_template(r.jinja), r.kind) << r.jinja;
}

TEST(chat_template, names_round_trip) {
    for (auto k : {chat_template_kind::llama2, chat_template_kind::llama3, chat_template_kind::chatml,
                   chat_template_kind::zephyr, chat_template_kind::mistral, chat_template_kind::plain}) {
        EXPECT_EQ(parse_chat_template_name(chat_template_name(k)), k);
    }
    EXPECT_FALSE(parse_chat_template_name("jinja").has_value());
}

TEST(chat_template, each_family_renders_the_expected_prompt_with_the_assistant_turn_open) {
    const std::vector<chat_message> conv = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Name a color."}};
    const chat_special_tokens st{"<s>", "</s>"};
    struct row {
        chat_template_kind kind;
        std::string expected;
    };
    const row rows[] = {
        {chat_template_kind::llama2,
         "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Name a color. [/INST]"},
        {chat_template_kind::mistral, "[INST] Be brief.\n\nHi [/INST]Hello!</s><s>[INST] Name a color. [/INST]"},
        {chat_template_kind::llama3,
         "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nName a color.<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {chat_template_kind::chatml,
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
         "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nName a color.<|im_end|>\n"
         "<|im_start|>assistant\n"},
        {chat_template_kind::zephyr,
         "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n<|user|>\nName a color.</s>\n"
         "<|assistant|>\n"},
        {chat_template_kind::plain, "Be brief.\nHi\nHello!\nName a color."},
    };
    for (const auto& r : rows) {
        EXPECT_EQ(render_chat(r.kind, conv, st), r.expected) << chat_template_name(r.kind);
    }
}

TEST(chat_template, a_single_user_message_renders_one_turn_and_developer_reads_as_system) {
    const std::vector<chat_message> one = {{"user", "Hi"}};
    const chat_special_tokens st{"<s>", "</s>"};
    EXPECT_EQ(render_chat(chat_template_kind::llama2, one, st), "[INST] Hi [/INST]");
    EXPECT_EQ(render_chat(chat_template_kind::plain, one, st), "Hi");
    const std::vector<chat_message> dev = {{"developer", "Rules."}, {"user", "Hi"}};
    EXPECT_EQ(render_chat(chat_template_kind::chatml, dev, st),
              "<|im_start|>system\nRules.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_TRUE(valid_chat_role("assistant"));
    EXPECT_FALSE(valid_chat_role("tool"));
}

TEST(chat_template, stories260k_has_no_template_and_falls_back_to_plain) {
    TROUPE_REQUIRE_SHARED(path, "models/stories260K.gguf");
    auto file = gguf::gguf_file::open(path);
    ASSERT_TRUE(file.ok()) << file.message();
    EXPECT_EQ((*file)->find("tokenizer.chat_template"), nullptr);
    EXPECT_EQ(detect_chat_template((*file)->string_or("tokenizer.chat_template", "")), chat_template_kind::plain);
}

}  // namespace
}  // namespace troupe
