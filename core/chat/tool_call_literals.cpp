// Gemma 4 and pythonic calls: arguments written as literals of Gemma's call syntax or of Python, read by a
// small recursive descent into JSON values.
//
//   gemma4    <|tool_call>call:f{city:<|"|>Paris<|"|>,days:2,opts:{deep:true},tags:[<|"|>a<|"|>]}<tool_call|>
//             strings between <|"|> marks (no escapes), keys bare; numbers, true/false, lists and maps
//   pythonic  [f(city="Paris", days=2, opts={"deep": True}, tags=['a']), g()]
//             keyword arguments only; str ('...' or "..." with Python's escapes), int, float, True/False/None,
//             lists, tuples (as lists) and dicts with string keys
#include "core/chat/tool_call_families.h"

#include <boost/json.hpp>

#include "core/chat/jinja/lexer.h"
#include "core/chat/jinja/unicode_case.h"
#include "core/chat/tool_call_text.h"

namespace troupe {
namespace {

namespace json = boost::json;
using tool_text::as_content;
using tool_text::trim;

enum class syntax { gemma, python };

// Reads values from `s` at `pos`; every read returns nullopt on text that is not a value of its syntax.
class literal_reader {
public:
    literal_reader(std::string_view s, syntax syn) : s_(s), syn_(syn) {}

    size_t pos() const { return pos_; }
    bool at_end() {
        skip();
        return pos_ >= s_.size();
    }
    bool eat(std::string_view token) {
        skip();
        if (!s_.substr(pos_).starts_with(token)) return false;
        pos_ += token.size();
        return true;
    }
    // A name: letters, digits, '_', and (for function names) '.' and '-'.
    std::string name(bool dotted) {
        skip();
        const size_t start = pos_;
        while (pos_ < s_.size()) {
            const char c = s_[pos_];
            const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                            (dotted && (c == '.' || c == '-'));
            if (!ok) break;
            ++pos_;
        }
        return std::string(s_.substr(start, pos_ - start));
    }

    std::optional<json::value> value() {
        skip();
        if (pos_ >= s_.size()) return std::nullopt;
        const char c = s_[pos_];
        if (syn_ == syntax::gemma && s_.substr(pos_).starts_with(gemma_quote)) return gemma_string();
        if (syn_ == syntax::python && (c == '"' || c == '\'')) return python_string();
        if (c == '[') return sequence(']');
        if (syn_ == syntax::python && c == '(') return sequence(')');
        if (c == '{') return mapping();
        return scalar();
    }

    // {k: v, ...} at pos; Gemma's keys bare (or quoted), Python's string literals.
    std::optional<json::value> mapping() {
        if (!eat("{")) return std::nullopt;
        json::object out;
        while (!eat("}")) {
            if (!out.empty() && !eat(",")) return std::nullopt;
            if (eat("}")) break;  // a trailing comma
            std::string key;
            if (syn_ == syntax::gemma) {
                skip();
                if (s_.substr(pos_).starts_with(gemma_quote)) {
                    auto k = gemma_string();
                    if (!k) return std::nullopt;
                    key = std::string(k->get_string());
                } else {
                    const size_t colon = s_.find(':', pos_);
                    if (colon == std::string_view::npos) return std::nullopt;
                    key = trim(s_.substr(pos_, colon - pos_));
                    if (key.find_first_of("{}[],<>\"") != std::string::npos) return std::nullopt;
                    pos_ = colon;
                }
            } else {
                auto k = value();
                if (!k || !k->is_string()) return std::nullopt;
                key = std::string(k->get_string());
            }
            if (key.empty() || !eat(":")) return std::nullopt;
            auto v = value();
            if (!v) return std::nullopt;
            out[key] = std::move(*v);
        }
        return out;
    }

private:
    static constexpr std::string_view gemma_quote = "<|\"|>";
    std::string_view s_;
    syntax syn_;
    size_t pos_ = 0;

    void skip() {
        while (pos_ < s_.size() && tool_text::is_space(s_[pos_])) ++pos_;
    }

    // [...] (or Python's (...)) at pos, whose opening bracket is skipped here.
    std::optional<json::value> sequence(char close) {
        ++pos_;
        json::array out;
        while (!eat(std::string_view(&close, 1))) {
            if (!out.empty() && !eat(",")) return std::nullopt;
            if (eat(std::string_view(&close, 1))) break;  // a trailing comma
            auto v = value();
            if (!v) return std::nullopt;
            out.push_back(std::move(*v));
        }
        return out;
    }

    std::optional<json::value> gemma_string() {
        pos_ += gemma_quote.size();
        const size_t end = s_.find(gemma_quote, pos_);
        if (end == std::string_view::npos) return std::nullopt;
        json::string out(s_.substr(pos_, end - pos_));
        pos_ = end + gemma_quote.size();
        return out;
    }

    static int hex_digit(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }

    std::optional<json::value> python_string() {
        const char quote = s_[pos_++];
        std::string out;
        while (pos_ < s_.size() && s_[pos_] != quote) {
            const char c = s_[pos_++];
            if (c == '\n') return std::nullopt;  // a one-line literal cannot hold a raw newline
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= s_.size()) return std::nullopt;
            const char e = s_[pos_++];
            const size_t n_hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
            if (n_hex > 0) {
                char32_t cp = 0;
                for (size_t k = 0; k < n_hex; ++k) {
                    const int d = pos_ < s_.size() ? hex_digit(s_[pos_]) : -1;
                    if (d < 0) return std::nullopt;
                    cp = cp * 16 + static_cast<char32_t>(d);
                    ++pos_;
                }
                if (cp > 0x10FFFF) return std::nullopt;
                jinja::append_utf8(out, cp);
                continue;
            }
            if (e == '\n') continue;  // a line continuation
            if (const auto simple = jinja::python_simple_escape(e)) {
                out += *simple;
                continue;
            }
            out += '\\';  // Python keeps an unknown escape as written
            out += e;
        }
        if (pos_ >= s_.size()) return std::nullopt;
        ++pos_;  // the closing quote
        return json::string(out);
    }

    // A number, true/false/null (and Python's True/False/None).
    std::optional<json::value> scalar() {
        const size_t start = pos_;
        while (pos_ < s_.size()) {
            const char c = s_[pos_];
            const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                              c == '-' || c == '+';
            if (!word) break;
            ++pos_;
        }
        const std::string_view w = s_.substr(start, pos_ - start);
        if (w == "true" || w == "True") return json::value(true);
        if (w == "false" || w == "False") return json::value(false);
        if (w == "null" || w == "None") return json::value(nullptr);
        std::string_view number = w;
        if (number.starts_with('+')) number.remove_prefix(1);
        auto v = tool_text::parse_json(number);
        if (!v || !v->is_number()) return std::nullopt;
        return v;
    }
};

// Gemma 4's block body: "call:f{...}".
std::optional<std::vector<parsed_tool_call>> gemma4_body(std::string_view body) {
    literal_reader r(body, syntax::gemma);
    if (!r.eat("call:")) return std::nullopt;
    parsed_tool_call call;
    call.name = r.name(true);
    if (call.name.empty()) return std::nullopt;
    auto args = r.mapping();
    if (!args || !r.at_end()) return std::nullopt;
    call.arguments = json::serialize(*args);
    return std::vector{std::move(call)};
}

// "[f(k=v, ...), g()]", the whole of `text`; nullopt if it is anything else (an empty list included).
std::optional<std::vector<parsed_tool_call>> python_calls(std::string_view text) {
    literal_reader r(text, syntax::python);
    if (!r.eat("[")) return std::nullopt;
    std::vector<parsed_tool_call> calls;
    while (!r.eat("]")) {
        if (!calls.empty() && !r.eat(",")) return std::nullopt;
        if (!calls.empty() && r.eat("]")) break;  // a trailing comma
        parsed_tool_call call;
        call.name = r.name(true);
        if (call.name.empty() || !r.eat("(")) return std::nullopt;
        json::object args;
        while (!r.eat(")")) {
            if (!args.empty() && !r.eat(",")) return std::nullopt;
            if (!args.empty() && r.eat(")")) break;
            const std::string key = r.name(false);
            if (key.empty() || !r.eat("=")) return std::nullopt;  // positional arguments have no name
            auto v = r.value();
            if (!v) return std::nullopt;
            args[key] = std::move(*v);
        }
        call.arguments = json::serialize(args);
        calls.push_back(std::move(call));
    }
    if (calls.empty() || !r.at_end()) return std::nullopt;
    return calls;
}

}  // namespace

parsed_reply parse_gemma4(std::string_view text) {
    return tool_text::parse_blocks(text, "<|tool_call>", "<tool_call|>", gemma4_body);
}

// The list is the whole reply, or follows <|python_start|> (Llama 4; up to <|python_end|>) or <|python_tag|>
// with the text before it as content.
parsed_reply parse_pythonic(std::string_view text) {
    std::string content;
    std::string_view body = text;
    for (std::string_view tag : {std::string_view("<|python_start|>"), std::string_view("<|python_tag|>")}) {
        const size_t at = text.find(tag);
        if (at == std::string_view::npos) continue;
        content = trim(text.substr(0, at));
        body = text.substr(at + tag.size());
        if (const size_t end = body.find("<|python_end|>"); end != std::string_view::npos) {
            if (!trim(body.substr(end + std::string_view("<|python_end|>").size())).empty()) return as_content(text);
            body = body.substr(0, end);
        }
        break;
    }
    auto calls = python_calls(trim(body));
    if (!calls) return as_content(text);
    return parsed_reply{std::move(content), std::move(*calls)};
}

}  // namespace troupe
