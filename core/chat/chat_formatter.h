// chat_formatter: the prompt text of a conversation, from the model's own chat template (the Jinja in the
// GGUF's tokenizer.chat_template, run by core/chat/jinja as transformers' apply_chat_template runs it), or
// from a built-in template (chat_template.h) when the model has none or its template does not parse.
//
// Rendering follows apply_chat_template: the variables are messages (the request's message objects as
// JSON, every field kept: role, content, tool_calls, tool_call_id, name, ...), tools (the tool schemas, or
// None when the request has none), add_generation_prompt, and the special tokens (bos_token, eos_token,
// unk_token, pad_token) as their texts, and the request's chat_template_kwargs as further variables (as
// vLLM and llama-server pass them: {"enable_thinking": false} for Qwen3's and GLM's templates). Those may not
// take the name of a variable set here or of the interpreter's globals (is_reserved_template_variable).
//
// Most templates begin with {{ bos_token }} while the tokenizer adds BOS itself: prompt_for_tokenizer()
// removes that one leading BOS text so the model sees one BOS, as llama.cpp does.
//
// Some templates have no system turn: Gemma's and Mistral's first ones raise "System role not supported", some
// of Phi-3's drop system messages without a word. Clients send one anyway (a UI's system prompt), so for such
// a template prompt_for_tokenizer() folds each system message into the next user message ("system text\nuser
// text"), as llama-server does; render() stays transformers' (it raises, or drops them).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "core/chat/chat_template.h"
#include "core/chat/jinja/template.h"
#include "core/chat/tool_call_parser.h"
#include "core/result.h"

namespace troupe {

class tokenizer;

// The special tokens a template may use, by their transformers names ("bos_token" -> "<s>").
struct chat_template_tokens {
    std::vector<std::pair<std::string, std::string>> named;
    std::string bos;       // "" where the model has none
    bool add_bos = false;  // the tokenizer adds BOS to an encoded prompt

    std::string_view find(std::string_view name) const;
};

// bos_token, eos_token, unk_token and pad_token as the tokenizer writes them, and whether it adds BOS.
chat_template_tokens chat_tokens_from(const tokenizer& tok);

struct chat_render_request {
    const boost::json::array* messages = nullptr;  // required
    const boost::json::array* tools = nullptr;     // null: tools is None
    bool add_generation_prompt = true;
    const boost::json::object* extra_variables = nullptr;  // chat_template_kwargs; null: none
};

// A name render() sets for every template (messages, tools, documents, add_generation_prompt, bos_token,
// eos_token, unk_token, pad_token) or the interpreter defines (range, namespace, raise_exception, ...).
bool is_reserved_template_variable(std::string_view name);

class chat_formatter {
public:
    // The model's template when `jinja_text` parses; else the built-in family its markers show (plain
    // when none). `why()` says which and why, for the log.
    static chat_formatter from_model(std::string_view jinja_text, chat_template_tokens tokens);
    // Only the given template; a syntax error is an error naming its line and column.
    static result<chat_formatter> from_jinja(std::string_view jinja_text, chat_template_tokens tokens);
    static chat_formatter builtin(chat_template_kind kind, chat_template_tokens tokens, std::string why);

    bool uses_jinja() const { return jinja_ != nullptr; }
    // "jinja" for the model's own template, else the built-in family's name.
    std::string name() const;
    const std::string& why() const { return why_; }
    // The model's template reads the `tools` variable (it can show the model tools); false for built-ins.
    bool reads_tools() const { return reads_tools_; }
    // The tool-call format the model's template shows (detect_tool_call_format); none for built-ins.
    tool_call_format tool_format() const { return tool_format_; }
    // The template prints a call's arguments as text: DeepSeek's templates add them to strings (an object
    // fails there) or print them with |string (an object comes out as a Python dict). Found when the
    // template is loaded, by rendering one call with object and with text arguments; the server then hands
    // arguments over as JSON text (arguments_as_text) instead of transformers' objects.
    bool wants_text_arguments() const { return text_arguments_; }

    // The rendered text, exactly as the template writes it. A template error (a raise_exception in the
    // template, or a failure while rendering) is an error with the template's message; so is an extra
    // variable with a reserved name. The built-in templates take no extra variables and ignore them.
    result<std::string> render(const chat_render_request& request) const;
    // render() less one leading BOS text when the tokenizer adds BOS itself, system messages folded into user
    // messages where the template has no system turn.
    result<std::string> prompt_for_tokenizer(const chat_render_request& request) const;

    // The model's template shows a system message's text (found when it is loaded, by rendering one); true for
    // the built-ins, which fold system text themselves.
    bool renders_system_role() const { return system_role_; }

private:
    std::shared_ptr<const jinja::chat_jinja_template> jinja_;
    chat_template_kind builtin_ = chat_template_kind::plain;
    chat_template_tokens tokens_;
    std::string why_;
    bool reads_tools_ = false;
    tool_call_format tool_format_ = tool_call_format::none;
    bool system_role_ = true;
    bool text_arguments_ = false;

    bool renders_text_arguments() const;
    bool shows_system_text() const;
};

// The messages with each assistant tool call's object arguments as JSON text, written as Python's
// json.dumps writes them (what a client sending json.dumps(arguments) sends).
boost::json::array arguments_as_text(const boost::json::array& messages);

// The messages with each system (or developer) message's text folded into the next user message, "system\nuser"
// (text parts: a text part in front); system text after the last user message becomes a user message of its own.
boost::json::array fold_system_messages(const boost::json::array& messages);

// The API's simple messages (role and text content) as the JSON the templates see.
boost::json::array messages_to_json(std::span<const chat_message> messages);

}  // namespace troupe
