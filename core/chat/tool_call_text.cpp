#include "core/chat/tool_call_text.h"

#include <boost/json.hpp>

namespace troupe::tool_text {

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

std::string trim(std::string_view s) {
    size_t b = 0;
    size_t e = s.size();
    while (b < e && is_space(s[b])) ++b;
    while (e > b && is_space(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
}

std::string_view skip_spaces(std::string_view s) {
    size_t b = 0;
    while (b < s.size() && is_space(s[b])) ++b;
    return s.substr(b);
}

std::optional<boost::json::value> parse_json(std::string_view text) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(text, ec);
    if (ec) return std::nullopt;
    return v;
}

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

// The end is found by bracket depth outside strings, then that span is parsed.
std::optional<std::pair<boost::json::value, size_t>> leading_json(std::string_view text) {
    size_t start = 0;
    while (start < text.size() && is_space(text[start])) ++start;
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

boost::json::value typed_argument(std::string_view text) {
    auto parsed = parse_json(text);
    if (parsed && !parsed->is_string()) return std::move(*parsed);
    return boost::json::string(text);
}

parsed_reply as_content(std::string_view text) {
    return parsed_reply{std::string(text), {}};
}

parsed_reply parse_blocks(std::string_view text, std::string_view open_marker, std::string_view close_marker,
                          block_parser parse_body) {
    parsed_reply out;
    std::string content;
    size_t pos = 0;
    while (true) {
        const size_t open = text.find(open_marker, pos);
        if (open == std::string_view::npos) break;
        const size_t body = open + open_marker.size();
        size_t close = text.find(close_marker, body);
        const bool closed = close != std::string_view::npos;
        if (!closed) close = text.size();
        auto calls = parse_body(text.substr(body, close - body));
        if (!calls || calls->empty()) return as_content(text);
        content += text.substr(pos, open - pos);
        for (auto& call : *calls) out.tool_calls.push_back(std::move(call));
        pos = closed ? close + close_marker.size() : text.size();
    }
    if (out.tool_calls.empty()) return as_content(text);
    content += text.substr(pos);
    out.content = trim(content);
    return out;
}

}  // namespace troupe::tool_text
