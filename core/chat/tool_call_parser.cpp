#include "core/chat/tool_call_parser.h"

#include <boost/json.hpp>

#include "core/chat/tool_call_families.h"
#include "core/chat/tool_call_text.h"

namespace troupe {
namespace {

using tool_text::as_content;
using tool_text::call_of;
using tool_text::leading_json;
using tool_text::parse_json;
using tool_text::trim;

bool contains(std::string_view text, std::string_view marker) {
    return text.find(marker) != std::string_view::npos;
}

// Qwen3-Coder's call inside <tool_call>: <function=NAME> then <parameter=KEY>VALUE</parameter> per argument,
// then </function>. The template writes one newline around each value (dropped here), and a value as text
// (a string) or as JSON (objects, lists); numbers, true/false and null read as JSON too, as the template
// writes those with | string. nullopt if the body is not of that shape.
std::optional<parsed_tool_call> xml_function_call(std::string_view body) {
    const std::string b = trim(body);
    std::string_view rest = b;
    if (!rest.starts_with("<function=")) return std::nullopt;
    const size_t name_end = rest.find('>');
    if (name_end == std::string_view::npos) return std::nullopt;
    parsed_tool_call call;
    call.name =
        trim(rest.substr(std::string_view("<function=").size(), name_end - std::string_view("<function=").size()));
    if (call.name.empty()) return std::nullopt;
    rest = rest.substr(name_end + 1);
    boost::json::object args;
    while (true) {
        const size_t k = rest.find_first_not_of(" \n\t\r");
        rest = k == std::string_view::npos ? std::string_view{} : rest.substr(k);
        if (rest.empty() || rest.starts_with("</function>")) break;
        if (!rest.starts_with("<parameter=")) return std::nullopt;
        const size_t key_end = rest.find('>');
        const size_t value_end = rest.find("</parameter>");
        if (key_end == std::string_view::npos || value_end == std::string_view::npos || value_end < key_end) {
            return std::nullopt;
        }
        const std::string key(
            rest.substr(std::string_view("<parameter=").size(), key_end - std::string_view("<parameter=").size()));
        std::string_view value = rest.substr(key_end + 1, value_end - key_end - 1);
        if (value.starts_with('\n')) value.remove_prefix(1);
        if (value.ends_with('\n')) value.remove_suffix(1);
        args[key] = tool_text::typed_argument(value);
        rest = rest.substr(value_end + std::string_view("</parameter>").size());
    }
    call.arguments = boost::json::serialize(args);
    return call;
}

// The body of one block of Hermes' <tool_call>, Phi-4-mini's <|tool_call|>, Nemotron's <TOOLCALL> or
// Seed-OSS's <seed:tool_call>: a JSON call, a JSON array of calls, or the
// <function=f><parameter=k>v</parameter></function> XML of Qwen3-Coder and Seed-OSS.
std::optional<std::vector<parsed_tool_call>> tagged_body(std::string_view inner) {
    std::vector<parsed_tool_call> calls;
    if (auto v = parse_json(trim(inner))) {
        if (v->is_array()) {
            for (const auto& item : v->get_array()) {
                auto call = call_of(item);
                if (!call) return std::nullopt;
                calls.push_back(std::move(*call));
            }
        } else if (auto call = call_of(*v)) {
            calls.push_back(std::move(*call));
        }
    } else if (auto call = xml_function_call(inner)) {
        calls.push_back(std::move(*call));
    }
    if (calls.empty()) return std::nullopt;
    return calls;
}

parsed_reply parse_llama3(std::string_view text) {
    std::string_view body = text;
    std::string prefix;
    if (const size_t tag = text.find("<|python_tag|>"); tag != std::string_view::npos) {
        prefix = trim(text.substr(0, tag));
        body = text.substr(tag + std::string_view("<|python_tag|>").size());
    }
    parsed_reply out;
    const std::string trimmed = trim(body);
    if (trimmed.empty() || trimmed.front() != '{') return as_content(text);
    std::string_view rest = trimmed;
    while (!rest.empty()) {
        auto v = leading_json(rest);
        auto call = v ? call_of(v->first) : std::nullopt;
        if (!call) return as_content(text);
        out.tool_calls.push_back(std::move(*call));
        rest = rest.substr(v->second);
        const std::string after = trim(rest);
        if (after.empty()) break;
        if (after.front() != ';') return as_content(text);
        rest = rest.substr(rest.find(';') + 1);
    }
    out.content = prefix;
    return out;
}

parsed_reply parse_mistral(std::string_view text) {
    const size_t tag = text.find("[TOOL_CALLS]");
    if (tag == std::string_view::npos) return as_content(text);
    parsed_reply out;
    out.content = trim(text.substr(0, tag));
    std::string_view rest = text.substr(tag + std::string_view("[TOOL_CALLS]").size());
    const std::string trimmed = trim(rest);
    if (!trimmed.empty() && trimmed.front() == '[') {  // v3: a JSON array of calls
        auto v = leading_json(trimmed);
        if (!v || !v->first.is_array()) return as_content(text);
        for (const auto& item : v->first.get_array()) {
            auto call = call_of(item);
            if (!call) return as_content(text);
            out.tool_calls.push_back(std::move(*call));
        }
        return out;
    }
    // v7 / v11: name[ARGS]{json}, repeated, each optionally after another [TOOL_CALLS].
    while (true) {
        const size_t args = rest.find("[ARGS]");
        if (args == std::string_view::npos) break;
        parsed_tool_call call;
        call.name = trim(rest.substr(0, args));
        auto v = leading_json(rest.substr(args + std::string_view("[ARGS]").size()));
        if (call.name.empty() || !v || !v->first.is_object()) return as_content(text);
        call.arguments = boost::json::serialize(v->first);
        out.tool_calls.push_back(std::move(call));
        rest = rest.substr(args + std::string_view("[ARGS]").size() + v->second);
        const std::string after = trim(rest);
        if (after.starts_with("[TOOL_CALLS]")) {
            rest = rest.substr(rest.find("[TOOL_CALLS]") + std::string_view("[TOOL_CALLS]").size());
        } else if (!after.empty()) {
            return as_content(text);
        }
    }
    if (out.tool_calls.empty()) return as_content(text);
    return out;
}

}  // namespace

std::string_view tool_call_format_name(tool_call_format format) {
    switch (format) {
        case tool_call_format::none:
            return "none";
        case tool_call_format::hermes:
            return "hermes";
        case tool_call_format::llama3:
            return "llama3";
        case tool_call_format::mistral:
            return "mistral";
        case tool_call_format::phi4:
            return "phi4";
        case tool_call_format::nemotron:
            return "nemotron";
        case tool_call_format::seed_oss:
            return "seed_oss";
        case tool_call_format::glm45:
            return "glm45";
        case tool_call_format::minimax_m2:
            return "minimax_m2";
        case tool_call_format::command_r7b:
            return "command_r7b";
        case tool_call_format::deepseek:
            return "deepseek";
        case tool_call_format::kimi_k2:
            return "kimi_k2";
        case tool_call_format::gemma4:
            return "gemma4";
        case tool_call_format::pythonic:
            return "pythonic";
    }
    return "?";
}

std::string_view tool_call_open_marker(tool_call_format format) {
    switch (format) {
        case tool_call_format::hermes:
        case tool_call_format::glm45:
            return "<tool_call>";
        case tool_call_format::mistral:
            return "[TOOL_CALLS]";
        case tool_call_format::llama3:
            return "<|python_tag|>";
        case tool_call_format::phi4:
            return "<|tool_call|>";
        case tool_call_format::nemotron:
            return "<TOOLCALL>";
        case tool_call_format::seed_oss:
            return "<seed:tool_call>";
        case tool_call_format::minimax_m2:
            return "<minimax:tool_call>";
        case tool_call_format::command_r7b:
            return "<|START_ACTION|>";
        case tool_call_format::deepseek:
            return deepseek_calls_begin;
        case tool_call_format::kimi_k2:
            return "<|tool_calls_section_begin|>";
        case tool_call_format::gemma4:
            return "<|tool_call>";
        case tool_call_format::pythonic:
            return "<|python_start|>";
        case tool_call_format::none:
            break;
    }
    return {};
}

std::span<const std::string_view> tool_call_marker_texts(tool_call_format format) {
    using sv = std::string_view;
    static constexpr sv hermes[] = {"<tool_call>", "</tool_call>"};
    static constexpr sv llama3[] = {"<|python_tag|>"};
    static constexpr sv pythonic[] = {"<|python_start|>", "<|python_end|>", "<|python_tag|>"};
    static constexpr sv mistral[] = {"[TOOL_CALLS]", "[ARGS]"};
    static constexpr sv phi4[] = {"<|tool_call|>", "<|/tool_call|>"};
    static constexpr sv nemotron[] = {"<TOOLCALL>", "</TOOLCALL>"};
    static constexpr sv seed_oss[] = {"<seed:tool_call>", "</seed:tool_call>"};
    static constexpr sv glm45[] = {"<tool_call>", "</tool_call>", "<arg_key>",
                                   "</arg_key>",  "<arg_value>",  "</arg_value>"};
    static constexpr sv minimax_m2[] = {"<minimax:tool_call>", "</minimax:tool_call>"};
    static constexpr sv command_r7b[] = {"<|START_ACTION|>", "<|END_ACTION|>"};
    static constexpr sv deepseek[] = {deepseek_calls_begin, deepseek_calls_end, deepseek_call_begin, deepseek_call_end,
                                      deepseek_sep};
    static constexpr sv kimi_k2[] = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                     "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    static constexpr sv gemma4[] = {"<|tool_call>", "<tool_call|>", "<|\"|>"};
    switch (format) {
        case tool_call_format::hermes:
            return hermes;
        case tool_call_format::llama3:
            return llama3;
        case tool_call_format::pythonic:
            return pythonic;
        case tool_call_format::mistral:
            return mistral;
        case tool_call_format::phi4:
            return phi4;
        case tool_call_format::nemotron:
            return nemotron;
        case tool_call_format::seed_oss:
            return seed_oss;
        case tool_call_format::glm45:
            return glm45;
        case tool_call_format::minimax_m2:
            return minimax_m2;
        case tool_call_format::command_r7b:
            return command_r7b;
        case tool_call_format::deepseek:
            return deepseek;
        case tool_call_format::kimi_k2:
            return kimi_k2;
        case tool_call_format::gemma4:
            return gemma4;
        case tool_call_format::none:
            break;
    }
    return {};
}

std::span<const tool_call_format> all_tool_call_formats() {
    static constexpr tool_call_format all[] = {
        tool_call_format::none,        tool_call_format::hermes,   tool_call_format::llama3,
        tool_call_format::mistral,     tool_call_format::phi4,     tool_call_format::nemotron,
        tool_call_format::seed_oss,    tool_call_format::glm45,    tool_call_format::minimax_m2,
        tool_call_format::command_r7b, tool_call_format::deepseek, tool_call_format::kimi_k2,
        tool_call_format::gemma4,      tool_call_format::pythonic};
    return all;
}

std::optional<tool_call_format> parse_tool_call_format_name(std::string_view name) {
    for (auto f : all_tool_call_formats()) {
        if (tool_call_format_name(f) == name) return f;
    }
    return std::nullopt;
}

tool_call_format detect_tool_call_format(std::string_view t) {
    // GLM-4.5 writes <tool_call> too, with <arg_key> pairs inside: checked before Hermes.
    if (contains(t, "<arg_key>")) return tool_call_format::glm45;
    if (contains(t, "<minimax:tool_call>")) return tool_call_format::minimax_m2;
    if (contains(t, "<|START_ACTION|>")) return tool_call_format::command_r7b;
    if (contains(t, deepseek_calls_begin)) return tool_call_format::deepseek;
    if (contains(t, "<|tool_calls_section_begin|>")) return tool_call_format::kimi_k2;
    if (contains(t, "<|tool_call>")) return tool_call_format::gemma4;
    // Llama 3.2 / 4 and Gemma 3 pythonic templates quote the format they ask for:
    // [func_name1(params_name1=params_value1, ...), func_name2(params)].
    if (contains(t, "[func_name1(")) return tool_call_format::pythonic;
    if (contains(t, "<tool_call>")) return tool_call_format::hermes;
    if (contains(t, "<|tool_call|>")) return tool_call_format::phi4;
    if (contains(t, "<TOOLCALL>")) return tool_call_format::nemotron;
    if (contains(t, "<seed:tool_call>")) return tool_call_format::seed_oss;
    if (contains(t, "[TOOL_CALLS]")) return tool_call_format::mistral;
    if (contains(t, "<|python_tag|>") || (contains(t, "<|start_header_id|>") && contains(t, "\"parameters\""))) {
        return tool_call_format::llama3;
    }
    return tool_call_format::none;
}

parsed_reply parse_tool_calls(tool_call_format format, std::string_view text) {
    switch (format) {
        case tool_call_format::none:
            return as_content(text);
        case tool_call_format::hermes:
            return tool_text::parse_blocks(text, "<tool_call>", "</tool_call>", tagged_body);
        case tool_call_format::phi4:
            return tool_text::parse_blocks(text, "<|tool_call|>", "<|/tool_call|>", tagged_body);
        case tool_call_format::nemotron:
            return tool_text::parse_blocks(text, "<TOOLCALL>", "</TOOLCALL>", tagged_body);
        case tool_call_format::seed_oss:
            return tool_text::parse_blocks(text, "<seed:tool_call>", "</seed:tool_call>", tagged_body);
        case tool_call_format::llama3:
            return parse_llama3(text);
        case tool_call_format::mistral:
            return parse_mistral(text);
        case tool_call_format::glm45:
            return parse_glm45(text);
        case tool_call_format::minimax_m2:
            return parse_minimax_m2(text);
        case tool_call_format::command_r7b:
            return parse_command_r7b(text);
        case tool_call_format::deepseek:
            return parse_deepseek(text);
        case tool_call_format::kimi_k2:
            return parse_kimi_k2(text);
        case tool_call_format::gemma4:
            return parse_gemma4(text);
        case tool_call_format::pythonic:
            return parse_pythonic(text);
    }
    return as_content(text);
}

boost::json::array tool_calls_json(const std::vector<parsed_tool_call>& calls, std::string_view id_prefix) {
    boost::json::array out;
    for (size_t k = 0; k < calls.size(); ++k) {
        const auto& c = calls[k];
        const std::string id = c.id.empty() ? std::string(id_prefix) + std::to_string(k) : c.id;
        out.push_back(
            boost::json::object{{"id", id},
                                {"type", "function"},
                                {"function", boost::json::object{{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return out;
}

}  // namespace troupe
