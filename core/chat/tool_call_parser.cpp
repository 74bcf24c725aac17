#include "core/chat/tool_call_parser.h"

#include <boost/json.hpp>

namespace troupe {
namespace {

bool contains(std::string_view text, std::string_view marker) {
    return text.find(marker) != std::string_view::npos;
}

std::string trim(std::string_view s) {
    size_t b = 0;
    size_t e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\n' || s[b] == '\t' || s[b] == '\r')) ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\n' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
    return std::string(s.substr(b, e - b));
}

std::optional<boost::json::value> parse_json(std::string_view text) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(text, ec);
    if (ec) return std::nullopt;
    return v;
}

// {"name": ..., "arguments" | "parameters": {...} or "...", "id"?: ...} as a call; nullopt if it is not one.
std::optional<parsed_tool_call> call_of(const boost::json::value& v) {
    const auto* o = v.if_object();
    if (!o) return std::nullopt;
    const auto* name = o->if_contains("name");
    if (!name || !name->is_string()) return std::nullopt;
    parsed_tool_call call;
    call.name = std::string(name->get_string());
    const boost::json::value* args = o->if_contains("arguments");
    if (!args) args = o->if_contains("parameters");
    if (!args || args->is_null()) {
        call.arguments = "{}";
    } else if (args->is_string()) {
        call.arguments = std::string(args->get_string());  // already JSON text, as some models write it
    } else {
        call.arguments = boost::json::serialize(*args);
    }
    if (const auto* id = o->if_contains("id"); id && id->is_string()) call.id = std::string(id->get_string());
    return call;
}

// One JSON object or array at the start of `text` (after spaces): the value and the bytes it took. The
// end is found by bracket depth outside strings, then that span is parsed.
std::optional<std::pair<boost::json::value, size_t>> leading_json(std::string_view text) {
    size_t start = 0;
    while (start < text.size() && (text[start] == ' ' || text[start] == '\n' || text[start] == '\t')) ++start;
    if (start >= text.size() || (text[start] != '{' && text[start] != '[')) return std::nullopt;
    int depth = 0;
    bool in_string = false;
    for (size_t k = start; k < text.size(); ++k) {
        const char c = text[k];
        if (in_string) {
            if (c == '\\') {
                ++k;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            auto v = parse_json(text.substr(start, k + 1 - start));
            if (!v) return std::nullopt;
            return std::make_pair(std::move(*v), k + 1);
        }
    }
    return std::nullopt;
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
        auto parsed = parse_json(value);
        const bool json_value = parsed && !parsed->is_string();
        args[key] = json_value ? *parsed : boost::json::value(boost::json::string(value));
        rest = rest.substr(value_end + std::string_view("</parameter>").size());
    }
    call.arguments = boost::json::serialize(args);
    return call;
}

// Calls between an opening and a closing marker, repeated (Hermes' <tool_call>, Phi-4-mini's <|tool_call|>,
// Nemotron's <TOOLCALL>, Seed-OSS's <seed:tool_call>): each body a JSON call, a JSON array of calls, or the
// <function=f><parameter=k>v</parameter></function> XML of Qwen3-Coder and Seed-OSS.
parsed_reply parse_tagged(std::string_view text, std::string_view open_marker, std::string_view close_marker) {
    parsed_reply out;
    std::string content;
    size_t pos = 0;
    while (true) {
        const size_t open = text.find(open_marker, pos);
        if (open == std::string_view::npos) break;
        const size_t body = open + open_marker.size();
        size_t close = text.find(close_marker, body);
        const bool closed = close != std::string_view::npos;
        if (!closed) close = text.size();  // a reply cut at the stop token may lack the closing tag
        const std::string_view inner = text.substr(body, close - body);
        std::vector<parsed_tool_call> calls;
        if (auto v = parse_json(trim(inner))) {
            if (v->is_array()) {
                for (const auto& item : v->get_array()) {
                    auto call = call_of(item);
                    if (!call) return parsed_reply{std::string(text), {}};
                    calls.push_back(std::move(*call));
                }
            } else if (auto call = call_of(*v)) {
                calls.push_back(std::move(*call));
            }
        } else if (auto call = xml_function_call(inner)) {
            calls.push_back(std::move(*call));
        }
        if (calls.empty()) return parsed_reply{std::string(text), {}};
        content += text.substr(pos, open - pos);
        for (auto& call : calls) out.tool_calls.push_back(std::move(call));
        pos = closed ? close + close_marker.size() : text.size();
    }
    if (out.tool_calls.empty()) return parsed_reply{std::string(text), {}};
    content += text.substr(pos);
    out.content = trim(content);
    return out;
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
    if (trimmed.empty() || trimmed.front() != '{') return parsed_reply{std::string(text), {}};
    std::string_view rest = trimmed;
    while (!rest.empty()) {
        auto v = leading_json(rest);
        auto call = v ? call_of(v->first) : std::nullopt;
        if (!call) return parsed_reply{std::string(text), {}};
        out.tool_calls.push_back(std::move(*call));
        rest = rest.substr(v->second);
        const std::string after = trim(rest);
        if (after.empty()) break;
        if (after.front() != ';') return parsed_reply{std::string(text), {}};
        rest = rest.substr(rest.find(';') + 1);
    }
    out.content = prefix;
    return out;
}

parsed_reply parse_mistral(std::string_view text) {
    const size_t tag = text.find("[TOOL_CALLS]");
    if (tag == std::string_view::npos) return parsed_reply{std::string(text), {}};
    parsed_reply out;
    out.content = trim(text.substr(0, tag));
    std::string_view rest = text.substr(tag + std::string_view("[TOOL_CALLS]").size());
    const std::string trimmed = trim(rest);
    if (!trimmed.empty() && trimmed.front() == '[') {  // v3: a JSON array of calls
        auto v = leading_json(trimmed);
        if (!v || !v->first.is_array()) return parsed_reply{std::string(text), {}};
        for (const auto& item : v->first.get_array()) {
            auto call = call_of(item);
            if (!call) return parsed_reply{std::string(text), {}};
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
        if (call.name.empty() || !v || !v->first.is_object()) return parsed_reply{std::string(text), {}};
        call.arguments = boost::json::serialize(v->first);
        out.tool_calls.push_back(std::move(call));
        rest = rest.substr(args + std::string_view("[ARGS]").size() + v->second);
        const std::string after = trim(rest);
        if (after.starts_with("[TOOL_CALLS]")) {
            rest = rest.substr(rest.find("[TOOL_CALLS]") + std::string_view("[TOOL_CALLS]").size());
        } else if (!after.empty()) {
            return parsed_reply{std::string(text), {}};
        }
    }
    if (out.tool_calls.empty()) return parsed_reply{std::string(text), {}};
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
    }
    return "?";
}

std::optional<tool_call_format> parse_tool_call_format_name(std::string_view name) {
    for (auto f :
         {tool_call_format::none, tool_call_format::hermes, tool_call_format::llama3, tool_call_format::mistral,
          tool_call_format::phi4, tool_call_format::nemotron, tool_call_format::seed_oss}) {
        if (tool_call_format_name(f) == name) return f;
    }
    return std::nullopt;
}

tool_call_format detect_tool_call_format(std::string_view t) {
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
            return parsed_reply{std::string(text), {}};
        case tool_call_format::hermes:
            return parse_tagged(text, "<tool_call>", "</tool_call>");
        case tool_call_format::phi4:
            return parse_tagged(text, "<|tool_call|>", "<|/tool_call|>");
        case tool_call_format::nemotron:
            return parse_tagged(text, "<TOOLCALL>", "</TOOLCALL>");
        case tool_call_format::seed_oss:
            return parse_tagged(text, "<seed:tool_call>", "</seed:tool_call>");
        case tool_call_format::llama3:
            return parse_llama3(text);
        case tool_call_format::mistral:
            return parse_mistral(text);
    }
    return parsed_reply{std::string(text), {}};
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
