#include "core/chat/chat_template.h"

namespace troupe {
namespace {

bool contains(std::string_view text, std::string_view marker) {
    return text.find(marker) != std::string_view::npos;
}

bool is_system(std::string_view role) {
    return role == "system" || role == "developer";
}

// llama2 and mistral fold the system text into the first user turn (llama2 inside <<SYS>>).
std::string render_llama2(std::span<const chat_message> messages, const chat_special_tokens& t, bool with_sys_block) {
    std::string system;
    std::string out;
    bool first_user = true;
    for (const auto& m : messages) {
        if (is_system(m.role)) {
            if (!system.empty()) system += "\n";
            system += m.content;
            continue;
        }
        if (m.role == "user") {
            std::string content = m.content;
            if (first_user && !system.empty()) {
                content =
                    with_sys_block ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content : system + "\n\n" + content;
            }
            if (!first_user) out += t.bos;  // the first BOS comes from the tokenizer
            out += "[INST] " + content + " [/INST]";
            first_user = false;
        } else {  // assistant
            out += with_sys_block ? " " + m.content + " " + t.eos : m.content + t.eos;
        }
    }
    if (first_user && !system.empty()) {  // only a system message: give it its own turn
        out +=
            with_sys_block ? "[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n [/INST]" : "[INST] " + system + " [/INST]";
    }
    return out;
}

}  // namespace

std::string_view chat_template_name(chat_template_kind kind) {
    switch (kind) {
        case chat_template_kind::llama2:
            return "llama2";
        case chat_template_kind::llama3:
            return "llama3";
        case chat_template_kind::chatml:
            return "chatml";
        case chat_template_kind::zephyr:
            return "zephyr";
        case chat_template_kind::mistral:
            return "mistral";
        case chat_template_kind::plain:
            return "plain";
    }
    return "?";
}

std::optional<chat_template_kind> parse_chat_template_name(std::string_view name) {
    for (auto k : {chat_template_kind::llama2, chat_template_kind::llama3, chat_template_kind::chatml,
                   chat_template_kind::zephyr, chat_template_kind::mistral, chat_template_kind::plain}) {
        if (chat_template_name(k) == name) return k;
    }
    return std::nullopt;
}

chat_template_kind detect_chat_template(std::string_view jinja) {
    if (contains(jinja, "<|start_header_id|>")) return chat_template_kind::llama3;
    if (contains(jinja, "<|im_start|>")) return chat_template_kind::chatml;
    if (contains(jinja, "<|user|>")) return chat_template_kind::zephyr;
    if (contains(jinja, "[INST]")) {
        return contains(jinja, "<<SYS>>") ? chat_template_kind::llama2 : chat_template_kind::mistral;
    }
    return chat_template_kind::plain;
}

bool valid_chat_role(std::string_view role) {
    return role == "system" || role == "user" || role == "assistant" || role == "developer";
}

std::string render_chat(chat_template_kind kind, std::span<const chat_message> messages,
                        const chat_special_tokens& tokens) {
    std::string out;
    switch (kind) {
        case chat_template_kind::llama2:
            return render_llama2(messages, tokens, true);
        case chat_template_kind::mistral:
            return render_llama2(messages, tokens, false);
        case chat_template_kind::llama3:
            for (const auto& m : messages) {
                const std::string role = is_system(m.role) ? "system" : m.role;
                out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
            }
            out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            return out;
        case chat_template_kind::chatml:
            for (const auto& m : messages) {
                const std::string role = is_system(m.role) ? "system" : m.role;
                out += "<|im_start|>" + role + "\n" + m.content + "<|im_end|>\n";
            }
            out += "<|im_start|>assistant\n";
            return out;
        case chat_template_kind::zephyr:
            for (const auto& m : messages) {
                const std::string role = is_system(m.role) ? "system" : m.role;
                out += "<|" + role + "|>\n" + m.content + tokens.eos + "\n";
            }
            out += "<|assistant|>\n";
            return out;
        case chat_template_kind::plain:
            for (size_t i = 0; i < messages.size(); ++i) {
                if (i > 0) out += "\n";
                out += messages[i].content;
            }
            return out;
    }
    return out;
}

}  // namespace troupe
