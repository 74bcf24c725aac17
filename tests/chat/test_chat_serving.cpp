// The server's chat path with a model's own template: server::prepare_request renders the messages with the
// Jinja template (one BOS: the tokenizer's), a template that raises is a 400 carrying its message, and a system
// message reaches a template without a system turn inside the user message.
#include <gtest/gtest.h>

#include <variant>

#include "core/gguf/gguf_file.h"
#include "core/tokenizer/tokenizer.h"
#include "server/serving.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {

class chat_serving : public ::testing::Test {
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
        model_.n_ctx = 512;
        server::set_chat_template(model_, jinja);
    }

    server::prepared prepare(std::vector<chat_message> messages) {
        server::generation_request r;
        r.kind = server::api_kind::chat;
        r.messages = std::move(messages);
        return server::prepare_request(model_, config_, r);
    }
};

TEST_F(chat_serving, a_chat_request_is_rendered_by_the_models_own_template_with_one_bos) {
    load(
        "{{ bos_token }}{% for m in messages %}{{ m.role | upper }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT:{% endif %}");
    if (HasFatalFailure() || IsSkipped()) return;
    EXPECT_EQ(model_.facts.chat_template, "jinja");
    auto p = prepare({{"system", "Be kind."}, {"user", "Once upon a time"}});
    auto* ok = std::get_if<server::prepared_request>(&p);
    ASSERT_NE(ok, nullptr) << std::get<server::api_error>(p).message;
    ASSERT_TRUE(ok->req.prompt_ids.has_value());
    const std::vector<int32_t>& ids = *ok->req.prompt_ids;
    EXPECT_EQ(ids, model_.tok->encode("SYSTEM: Be kind.\nUSER: Once upon a time\nASSISTANT:", true));
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids[0], model_.tok->bos_id());
    EXPECT_NE(ids[1], model_.tok->bos_id());
}

TEST_F(chat_serving, a_template_that_raises_answers_400_with_its_message) {
    load(
        "{% if messages[-1].role != 'user' %}{{ raise_exception('The conversation must end with a user message') }}"
        "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}");
    if (HasFatalFailure() || IsSkipped()) return;
    auto p = prepare({{"user", "Hi"}, {"assistant", "Hello"}});
    auto* err = std::get_if<server::api_error>(&p);
    ASSERT_NE(err, nullptr);
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->param, "messages");
    EXPECT_EQ(err->message,
              "messages: the model's chat template failed: The conversation must end with a user message");
    EXPECT_TRUE(std::holds_alternative<server::prepared_request>(prepare({{"user", "Hi"}})));
}

// A template without a system turn (Gemma's raises on one) still takes a client's system prompt: folded into the
// user message, as llama-server does, instead of a 400.
TEST_F(chat_serving, a_system_message_reaches_a_template_without_a_system_turn_in_the_user_message) {
    load(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ m.role | upper }}: {{ m.content }}\n{% endfor %}");
    if (HasFatalFailure() || IsSkipped()) return;
    auto p = prepare({{"system", "Be kind."}, {"user", "Once upon a time"}});
    auto* ok = std::get_if<server::prepared_request>(&p);
    ASSERT_NE(ok, nullptr) << std::get<server::api_error>(p).message;
    EXPECT_EQ(*ok->req.prompt_ids, model_.tok->encode("USER: Be kind.\nOnce upon a time\n", true));
}

TEST_F(chat_serving, a_template_that_does_not_parse_falls_back_to_the_builtin_its_markers_show) {
    load("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n");
    if (HasFatalFailure() || IsSkipped()) return;
    EXPECT_EQ(model_.facts.chat_template, "chatml");
    EXPECT_NE(model_.chat_format->why().find("does not parse"), std::string::npos) << model_.chat_format->why();
    EXPECT_TRUE(std::holds_alternative<server::prepared_request>(prepare({{"user", "Hi"}})));
}

}  // namespace
}  // namespace troupe
