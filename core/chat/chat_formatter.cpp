#include "core/chat/chat_formatter.h"

#include <boost/json.hpp>

#include "core/chat/jinja/evaluator.h"
#include "core/log/log.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe {

std::string_view chat_template_tokens::find(std::string_view name) const {
    for (const auto& [k, v] : named) {
        if (k == name) return v;
    }
    return {};
}

bool is_reserved_template_variable(std::string_view name) {
    static constexpr std::string_view reserved[] = {
        "messages",  "tools", "documents", "add_generation_prompt", "bos_token",    "eos_token", "unk_token",
        "pad_token", "range", "namespace", "raise_exception",       "strftime_now", "dict",      "joiner",
        "cycler"};
    for (std::string_view r : reserved) {
        if (r == name) return true;
    }
    return false;
}

chat_template_tokens chat_tokens_from(const tokenizer& tok) {
    chat_template_tokens t;
    const auto& v = tok.vocab();
    auto add = [&](const char* name, int32_t id) {
        if (id >= 0 && id < tok.n_vocab()) t.named.emplace_back(name, tok.token_to_piece(id));
    };
    add("bos_token", v.bos_id);
    add("eos_token", v.eos_id);
    add("unk_token", v.unk_id);
    add("pad_token", v.pad_id);
    t.bos = std::string(t.find("bos_token"));
    t.add_bos = v.add_bos && v.bos_id >= 0;
    return t;
}

chat_formatter chat_formatter::builtin(chat_template_kind kind, chat_template_tokens tokens, std::string why) {
    chat_formatter f;
    f.builtin_ = kind;
    f.tokens_ = std::move(tokens);
    f.why_ = std::move(why);
    return f;
}

result<chat_formatter> chat_formatter::from_jinja(std::string_view jinja_text, chat_template_tokens tokens) {
    auto parsed = jinja::parse_template(jinja_text);
    if (!parsed) return parsed.err();
    chat_formatter f;
    f.jinja_ = std::make_shared<const jinja::chat_jinja_template>(std::move(*parsed));
    f.tokens_ = std::move(tokens);
    f.reads_tools_ = jinja_text.find("tools") != std::string_view::npos;
    f.tool_format_ = detect_tool_call_format(jinja_text);
    f.text_arguments_ = jinja_text.find("tool_calls") != std::string_view::npos && f.renders_text_arguments();
    f.system_role_ = f.shows_system_text();
    f.why_ = "the model's own chat template (tokenizer.chat_template, " + std::to_string(jinja_text.size()) +
             " bytes of Jinja)";
    return f;
}

chat_formatter chat_formatter::from_model(std::string_view jinja_text, chat_template_tokens tokens) {
    if (jinja_text.empty()) {
        return builtin(chat_template_kind::plain, std::move(tokens),
                       "built-in plain template: the model has no tokenizer.chat_template");
    }
    auto f = from_jinja(jinja_text, tokens);
    if (f) return std::move(*f);
    const chat_template_kind kind = detect_chat_template(jinja_text);
    return builtin(kind, std::move(tokens),
                   "built-in " + std::string(chat_template_name(kind)) +
                       " template (chosen by the markers in the model's template): the model's "
                       "tokenizer.chat_template does not parse: " +
                       f.message());
}

std::string chat_formatter::name() const {
    return jinja_ ? std::string("jinja") : std::string(chat_template_name(builtin_));
}

namespace {

// The built-in templates take role and text: a message's content string, or its text parts joined.
std::vector<chat_message> simple_messages(const boost::json::array& messages) {
    std::vector<chat_message> out;
    for (const auto& m : messages) {
        const auto* o = m.if_object();
        if (!o) continue;
        chat_message cm;
        if (const auto* r = o->if_contains("role"); r && r->is_string()) cm.role = std::string(r->get_string());
        if (const auto* c = o->if_contains("content")) {
            if (c->is_string()) {
                cm.content = std::string(c->get_string());
            } else if (c->is_array()) {
                for (const auto& part : c->get_array()) {
                    const auto* p = part.if_object();
                    const auto* text = p ? p->if_contains("text") : nullptr;
                    if (text && text->is_string()) cm.content += std::string(text->get_string());
                }
            }
        }
        out.push_back(std::move(cm));
    }
    return out;
}

}  // namespace

result<std::string> chat_formatter::render(const chat_render_request& request) const {
    if (!request.messages) return make_error("chat template: no messages");
    if (!jinja_) {
        const auto messages = simple_messages(*request.messages);
        chat_special_tokens special{std::string(tokens_.find("bos_token")), std::string(tokens_.find("eos_token"))};
        return render_chat(builtin_, messages, special);
    }
    jinja::dict vars;
    vars.set("messages", jinja::value_from_json(*request.messages));
    vars.set("tools", request.tools ? jinja::value_from_json(*request.tools) : jinja::value::none());
    vars.set("documents", jinja::value::none());
    vars.set("add_generation_prompt", jinja::value::boolean(request.add_generation_prompt));
    for (const auto& [name, text] : tokens_.named) vars.set(name, jinja::value::string(text));
    if (request.extra_variables) {
        for (const auto& kv : *request.extra_variables) {
            if (is_reserved_template_variable(kv.key())) {
                return make_error("chat template: the extra variable '" + std::string(kv.key()) +
                                  "' would replace one the renderer sets; use another name");
            }
            vars.set(std::string(kv.key()), jinja::value_from_json(kv.value()));
        }
    }
    return jinja_->render(vars);
}

bool chat_formatter::renders_text_arguments() const {
    const std::string_view key = "troupe_probe_argument";
    auto probe = [&](boost::json::value arguments) {
        boost::json::object fn{{"name", "troupe_probe"}, {"arguments", std::move(arguments)}};
        boost::json::object call{{"id", "abcdefghi"}, {"type", "function"}, {"function", std::move(fn)}};
        const boost::json::array messages{
            boost::json::object{{"role", "user"}, {"content", "x"}},
            boost::json::object{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {std::move(call)}}}};
        return render({&messages, nullptr, false});
    };
    const auto as_object = probe(boost::json::object{{key, "v"}});
    const auto as_text = probe(boost::json::string("{\"troupe_probe_argument\": \"v\"}"));
    const std::string quoted = "\"" + std::string(key) + "\"";
    if (!as_text || as_text->find(quoted) == std::string::npos) return false;
    if (!as_object) return true;
    return as_object->find("'" + std::string(key) + "'") != std::string::npos &&
           as_object->find(quoted) == std::string::npos;
}

boost::json::array arguments_as_text(const boost::json::array& messages) {
    boost::json::array out = messages;
    for (auto& m : out) {
        auto* calls = m.is_object() ? m.get_object().if_contains("tool_calls") : nullptr;
        if (!calls || !calls->is_array()) continue;
        for (auto& call : calls->get_array()) {
            auto* fn = call.is_object() ? call.get_object().if_contains("function") : nullptr;
            auto* args = fn && fn->is_object() ? fn->get_object().if_contains("arguments") : nullptr;
            if (!args || !args->is_object()) continue;
            *args = boost::json::string(jinja::to_json(jinja::value_from_json(*args), jinja::json_dump_options{}));
        }
    }
    return out;
}

bool chat_formatter::shows_system_text() const {
    const std::string_view probe = "troupe system probe 7f3a";
    const boost::json::array messages{boost::json::object{{"role", "system"}, {"content", probe}},
                                      boost::json::object{{"role", "user"}, {"content", "x"}}};
    const auto text = render({&messages, nullptr, false});
    return text && text->find(probe) != std::string::npos;
}

boost::json::array fold_system_messages(const boost::json::array& messages) {
    const auto role_of = [](const boost::json::value& m) -> std::string_view {
        const auto* o = m.if_object();
        const auto* r = o ? o->if_contains("role") : nullptr;
        return r && r->is_string() ? std::string_view(r->get_string()) : std::string_view();
    };
    const auto text_of = [](const boost::json::value& content) {
        if (content.is_string()) return std::string(content.get_string());
        std::string text;
        if (const auto* parts = content.if_array()) {
            for (const auto& part : *parts) {
                const auto* p = part.if_object();
                const auto* t = p ? p->if_contains("text") : nullptr;
                if (t && t->is_string()) text += std::string(t->get_string());
            }
        }
        return text;
    };
    boost::json::array out;
    std::string pending;  // system text waiting for the next user message
    for (const auto& m : messages) {
        const std::string_view role = role_of(m);
        if (role == "system" || role == "developer") {
            const auto* content = m.get_object().if_contains("content");
            if (content != nullptr) pending += (pending.empty() ? "" : "\n") + text_of(*content);
            continue;
        }
        if (role != "user" || pending.empty()) {
            out.push_back(m);
            continue;
        }
        boost::json::object user = m.get_object();
        boost::json::value& content = user["content"];
        if (auto* parts = content.if_array()) {
            parts->insert(parts->begin(), boost::json::object{{"type", "text"}, {"text", pending + "\n"}});
        } else {
            content = pending + "\n" + text_of(content);
        }
        pending.clear();
        out.push_back(std::move(user));
    }
    if (!pending.empty()) out.push_back(boost::json::object{{"role", "user"}, {"content", pending}});
    return out;
}

result<std::string> chat_formatter::prompt_for_tokenizer(const chat_render_request& request) const {
    std::optional<boost::json::array> folded;
    chat_render_request r = request;
    if (!system_role_ && request.messages != nullptr) {
        folded = fold_system_messages(*request.messages);
        r.messages = &*folded;
    }
    auto text = render(r);
    if (!text) return text;
    if (jinja_ && tokens_.add_bos && !tokens_.bos.empty() && text->starts_with(tokens_.bos)) {
        text->erase(0, tokens_.bos.size());
    }
    return text;
}

boost::json::array messages_to_json(std::span<const chat_message> messages) {
    boost::json::array out;
    for (const auto& m : messages) out.push_back(boost::json::object{{"role", m.role}, {"content", m.content}});
    return out;
}

}  // namespace troupe
