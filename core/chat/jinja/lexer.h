// jinja lexer: template text -> tokens, with jinja2's whitespace rules applied to the text between tags.
//
//   text {{ expr }} text {% stmt %} {# comment #} {% raw %}...{% endraw %}
//   -> text, var_begin, <expression tokens>, var_end, text, block_begin, <tokens>, block_end, ...
//
// Whitespace, exactly as jinja2's lexer (which transformers configures with trim_blocks and lstrip_blocks):
// - "\r\n" and "\r" become "\n"; one newline at the end of the template is dropped (keep_trailing_newline
//   false, jinja2's default).
// - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" strip all after it.
// - trim_blocks: one "\n" right after "%}" or "#}" is dropped ("+%}" keeps it).
// - lstrip_blocks: spaces and tabs between the start of a line and "{%" or "{#" are dropped ("{%+" keeps
//   them); never before "{{".
// A tag ends only where its brackets are balanced, so "}}" inside a dict literal does not end it.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::jinja {

enum class token_kind { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct token {
    token_kind kind = token_kind::eof;
    std::string text;  // text: the text; string: the decoded literal; op: the operator; name, numbers: as written
    int line = 1;
    int column = 1;
};

struct lexer_options {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
    bool keep_trailing_newline = false;
};

// A template that cannot be read: where (1-based line and column) and what.
struct syntax_error : std::runtime_error {
    int line;
    int column;
    syntax_error(const std::string& message, int line_, int column_)
        : std::runtime_error(message), line(line_), column(column_) {}
};

// The tokens of a template, ending with one eof token. Throws syntax_error.
std::vector<token> lex(std::string_view source, const lexer_options& options);

// The character a one-letter Python string escape stands for (\n \t \r \0 \a \b \f \v \\ \' \"), or nothing
// for any other letter (\x, \u and \U take digits; an unknown escape stays as written). Shared by the lexer and the
// parser of Python literals in tool calls (tool_call_literals.cpp).
std::optional<char> python_simple_escape(char e);

}  // namespace troupe::jinja
