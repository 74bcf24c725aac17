#include "core/chat/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "core/chat/jinja/string_ops.h"
#include "core/chat/jinja/unicode_case.h"

namespace troupe::jinja {
namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
// Whitespace control ({%- -%}, lstrip_blocks) strips what jinja2's regexes call \s: Python's Unicode
// whitespace, so U+00A0 and U+3000 too. The length of the whitespace character at byte k, or 0.
size_t space_at(std::string_view s, size_t k) {
    if (is_space(s[k])) return 1;
    if (static_cast<unsigned char>(s[k]) < 0x80) return 0;
    const std::string stripped = py_strip(s.substr(k, std::min<size_t>(4, s.size() - k)), std::nullopt, true, false);
    const size_t n = std::min<size_t>(4, s.size() - k) - stripped.size();
    return n > 1 ? n : 0;
}
void strip_trailing_spaces(std::string& text) {
    text = py_strip(text, std::nullopt, false, true);
}
bool all_spaces(std::string_view text) {
    return py_strip(text, std::nullopt, true, true).empty();
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

std::string normalize_newlines(std::string_view in, bool keep_trailing_newline) {
    std::string out;
    out.reserve(in.size());
    for (size_t k = 0; k < in.size(); ++k) {
        if (in[k] == '\r') {
            out += '\n';
            if (k + 1 < in.size() && in[k + 1] == '\n') ++k;
        } else {
            out += in[k];
        }
    }
    if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

class lexer {
public:
    lexer(std::string_view source, const lexer_options& options)
        : src_(normalize_newlines(source, options.keep_trailing_newline)), opt_(options) {
        line_starts_.push_back(0);
        for (size_t k = 0; k < src_.size(); ++k) {
            if (src_[k] == '\n') line_starts_.push_back(k + 1);
        }
    }

    std::vector<token> run() {
        while (pos_ < src_.size()) {
            const size_t tag = find_tag(pos_);
            if (tag == std::string::npos) {
                emit(token_kind::text, src_.substr(pos_), pos_);
                break;
            }
            root_text(tag);
        }
        emit(token_kind::eof, "", src_.size());
        return std::move(tokens_);
    }

private:
    std::string src_;
    lexer_options opt_;
    std::vector<size_t> line_starts_;
    std::vector<token> tokens_;
    size_t pos_ = 0;
    bool line_starting_ = true;  // the last thing read ended with "\n" (lstrip_blocks at the start of a text)

    [[noreturn]] void fail(const std::string& message, size_t at) const {
        auto [line, column] = where(at);
        throw syntax_error(message, line, column);
    }

    std::pair<int, int> where(size_t at) const {
        auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
        const size_t line = static_cast<size_t>(it - line_starts_.begin());
        return {static_cast<int>(line), static_cast<int>(at - line_starts_[line - 1] + 1)};
    }

    void emit(token_kind kind, std::string text, size_t at) {
        auto [line, column] = where(at);
        tokens_.push_back(token{kind, std::move(text), line, column});
    }

    bool starts_with(size_t at, std::string_view s) const { return src_.compare(at, s.size(), s) == 0; }

    size_t find_tag(size_t from) const {
        for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
            if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
        }
        return std::string::npos;
    }

    // "{% raw %}" (with optional - / + signs) at `at`: the position after it, or npos.
    size_t match_raw_begin(size_t at, bool& strip_after) const {
        size_t k = at + 2;
        if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) ++k;
        while (k < src_.size() && is_space(src_[k])) ++k;
        if (!starts_with(k, "raw")) return std::string::npos;
        k += 3;
        if (k < src_.size() && is_name_char(src_[k])) return std::string::npos;
        while (k < src_.size() && is_space(src_[k])) ++k;
        strip_after = starts_with(k, "-%}");
        if (strip_after) return k + 3;
        return starts_with(k, "%}") ? k + 2 : std::string::npos;
    }

    // Emits the text before a tag (whitespace control applied) and reads the tag.
    void root_text(size_t tag) {
        const char type = src_[tag + 1];
        const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
        std::string text = src_.substr(pos_, tag - pos_);
        if (sign == '-') {
            strip_trailing_spaces(text);
        } else if (sign != '+' && opt_.lstrip_blocks && type != '{') {
            const size_t line_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
            if ((line_pos > 0 || line_starting_) && line_pos < text.size() &&
                all_spaces(std::string_view(text).substr(line_pos))) {
                text.resize(line_pos);
            }
        }
        if (!text.empty()) emit(token_kind::text, std::move(text), pos_);
        const size_t open_end = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
        line_starting_ = false;
        if (type == '#') {
            comment(tag, open_end);
            return;
        }
        bool strip_after = false;
        if (type == '%') {
            if (size_t after = match_raw_begin(tag, strip_after); after != std::string::npos) {
                pos_ = after;
                if (strip_after) skip_spaces();
                raw_body(tag);
                return;
            }
        }
        pos_ = open_end;
        tag_tokens(type == '{', tag);
    }

    void skip_spaces() {
        for (size_t n; pos_ < src_.size() && (n = space_at(src_, pos_)) > 0;) {
            line_starting_ = src_[pos_] == '\n';
            pos_ += n;
        }
    }

    // After a block or comment end: "-" strips all whitespace, "+" nothing, else trim_blocks one newline.
    void after_block_end(char sign) {
        if (sign == '-') {
            skip_spaces();
        } else if (sign != '+' && opt_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            line_starting_ = true;
        }
    }

    void comment(size_t tag, size_t from) {
        const size_t end = src_.find("#}", from);
        if (end == std::string::npos) fail("missing end of comment tag '#}'", tag);
        const char sign = end > from && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
        pos_ = end + 2;
        after_block_end(sign);
    }

    void raw_body(size_t tag) {
        for (size_t k = src_.find("{%", pos_); k != std::string::npos; k = src_.find("{%", k + 1)) {
            size_t j = k + 2;
            const char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : '\0';
            if (sign) ++j;
            while (j < src_.size() && is_space(src_[j])) ++j;
            if (!starts_with(j, "endraw")) continue;
            j += 6;
            while (j < src_.size() && is_space(src_[j])) ++j;
            char end_sign = '\0';
            if (starts_with(j, "-%}") || starts_with(j, "+%}")) {
                end_sign = src_[j];
                j += 3;
            } else if (starts_with(j, "%}")) {
                j += 2;
            } else {
                continue;
            }
            std::string text = src_.substr(pos_, k - pos_);
            if (sign == '-') {
                strip_trailing_spaces(text);
            } else if (sign != '+' && opt_.lstrip_blocks) {
                const size_t nl = text.rfind('\n');
                const size_t line_pos = nl == std::string::npos ? 0 : nl + 1;
                if ((line_pos > 0 || line_starting_) && line_pos < text.size() &&
                    all_spaces(std::string_view(text).substr(line_pos))) {
                    text.resize(line_pos);
                }
            }
            if (!text.empty()) emit(token_kind::text, std::move(text), pos_);
            pos_ = j;
            line_starting_ = false;
            after_block_end(end_sign);
            return;
        }
        fail("missing end of raw directive ({% endraw %})", tag);
    }

    // The tokens of a {{ ... }} or {% ... %} tag, up to its end at balanced brackets.
    void tag_tokens(bool variable, size_t tag) {
        emit(variable ? token_kind::var_begin : token_kind::block_begin, "", tag);
        std::vector<char> balance;
        while (true) {
            for (size_t n; pos_ < src_.size() && (n = space_at(src_, pos_)) > 0;) pos_ += n;
            if (pos_ >= src_.size()) {
                fail(std::string("unexpected end of template inside a ") + (variable ? "'{{ ... }}'" : "'{% ... %}'") +
                         " tag that starts here (missing '" + (variable ? "}}" : "%}") + "')",
                     tag);
            }
            if (balance.empty()) {
                const std::string_view close = variable ? "}}" : "%}";
                char sign = '\0';
                size_t len = 0;
                if (starts_with(pos_, close)) {
                    len = 2;
                } else if ((src_[pos_] == '-' || (!variable && src_[pos_] == '+')) && starts_with(pos_ + 1, close)) {
                    sign = src_[pos_];
                    len = 3;
                }
                if (len > 0) {
                    emit(variable ? token_kind::var_end : token_kind::block_end, "", pos_);
                    pos_ += len;
                    if (variable) {
                        if (sign == '-') skip_spaces();
                    } else {
                        after_block_end(sign);
                    }
                    return;
                }
            }
            expression_token(balance);
        }
    }

    void expression_token(std::vector<char>& balance) {
        const size_t start = pos_;
        const char c = src_[pos_];
        if (is_digit(c)) {
            number(start);
            return;
        }
        if (is_name_start(c)) {
            while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
            emit(token_kind::name, src_.substr(start, pos_ - start), start);
            return;
        }
        if (c == '\'' || c == '"') {
            string_literal(start);
            return;
        }
        static const std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
        for (auto op : two) {
            if (starts_with(pos_, op)) {
                pos_ += 2;
                emit(token_kind::op, std::string(op), start);
                return;
            }
        }
        if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
            fail(std::string("unexpected character '") + c + "'", start);
        }
        if (c == '(' || c == '[' || c == '{') {
            balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
            if (balance.empty()) fail(std::string("unexpected '") + c + "'", start);
            if (balance.back() != c)
                fail(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", start);
            balance.pop_back();
        }
        ++pos_;
        emit(token_kind::op, std::string(1, c), start);
    }

    void number(size_t start) {
        auto digits = [&] {
            while (pos_ < src_.size() && (is_digit(src_[pos_]) ||
                                          (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1])))) {
                ++pos_;
            }
        };
        digits();
        bool is_float = false;
        // A float cannot follow '.', so "x.0.1" reads as attributes 0 and 1 (as jinja2's lexer does).
        const bool after_dot = start > 0 && src_[start - 1] == '.';
        if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
            ++pos_;
            digits();
            is_float = true;
        }
        if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
            size_t k = pos_ + 1;
            if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
            if (k < src_.size() && is_digit(src_[k])) {
                pos_ = k;
                digits();
                is_float = true;
            }
        }
        std::string text = src_.substr(start, pos_ - start);
        std::erase(text, '_');
        emit(is_float ? token_kind::floating : token_kind::integer, std::move(text), start);
    }

    // A quoted string with Python's escapes (\n \t \\ \' \" \xNN \uNNNN \UNNNNNNNN); others stay as written.
    void string_literal(size_t start) {
        const char quote = src_[pos_++];
        std::string out;
        while (true) {
            if (pos_ >= src_.size()) fail("unterminated string literal", start);
            const char c = src_[pos_++];
            if (c == quote) break;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (pos_ >= src_.size()) fail("unterminated string literal", start);
            const char e = src_[pos_++];
            if (e == '\n') continue;  // a line continuation
            if (const auto simple = python_simple_escape(e)) {
                out += *simple;
                continue;
            }
            if (e == 'x' || e == 'u' || e == 'U') {
                const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                if (pos_ + n > src_.size() ||
                    !std::all_of(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                 src_.begin() + static_cast<std::ptrdiff_t>(pos_ + n),
                                 [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
                    fail(std::string("truncated \\") + e + " escape in a string literal", pos_ - 2);
                }
                append_utf8(out, static_cast<char32_t>(std::stoul(src_.substr(pos_, n), nullptr, 16)));
                pos_ += n;
                continue;
            }
            out += '\\';  // Python keeps an unknown escape as written
            out += e;
        }
        emit(token_kind::string, std::move(out), start);
    }
};

}  // namespace

std::optional<char> python_simple_escape(char e) {
    switch (e) {
        case 'n':
            return '\n';
        case 't':
            return '\t';
        case 'r':
            return '\r';
        case '0':
            return '\0';
        case 'a':
            return '\a';
        case 'b':
            return '\b';
        case 'f':
            return '\f';
        case 'v':
            return '\v';
        case '\\':
        case '\'':
        case '"':
            return e;
        default:
            return std::nullopt;
    }
}

std::vector<token> lex(std::string_view source, const lexer_options& options) {
    return lexer(source, options).run();
}

}  // namespace troupe::jinja
