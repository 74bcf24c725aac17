// The statement half of the parser, and the token helpers both halves use.
#include "core/chat/jinja/parser.h"

#include <utility>

namespace troupe::jinja {
namespace {

template <class node_t>
stmt_ptr make_stmt(const token& at, node_t node) {
    auto s = std::make_unique<stmt>();
    s->node = std::move(node);
    s->line = at.line;
    s->column = at.column;
    return s;
}

}  // namespace

body parse(const std::vector<token>& tokens) {
    return parser(tokens).parse_template();
}

const token& parser::peek(size_t ahead) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
}

const token& parser::next() {
    const token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
}

bool parser::at_op(std::string_view op) const {
    return current().kind == token_kind::op && current().text == op;
}
bool parser::at_name(std::string_view name) const {
    return current().kind == token_kind::name && current().text == name;
}
bool parser::skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
}
bool parser::skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
}

void parser::expect_op(std::string_view op, std::string_view context) {
    if (!skip_op(op))
        fail("expected '" + std::string(op) + "' " + std::string(context) + ", got " + describe(current()));
}

std::string parser::expect_name(std::string_view context) {
    if (current().kind != token_kind::name)
        fail("expected a name " + std::string(context) + ", got " + describe(current()));
    return next().text;
}

void parser::fail(const std::string& message) const {
    fail_at(message, current());
}

void parser::fail_at(const std::string& message, const token& t) const {
    throw syntax_error(message, t.line, t.column);
}

std::string parser::describe(const token& t) {
    switch (t.kind) {
        case token_kind::text:
            return "template text";
        case token_kind::var_begin:
            return "'{{'";
        case token_kind::var_end:
            return "the end of the print statement '}}'";
        case token_kind::block_begin:
            return "'{%'";
        case token_kind::block_end:
            return "the end of the statement block '%}'";
        case token_kind::name:
            return "'" + t.text + "'";
        case token_kind::string:
            return "a string";
        case token_kind::integer:
        case token_kind::floating:
            return "the number " + t.text;
        case token_kind::op:
            return "'" + t.text + "'";
        case token_kind::eof:
            return "the end of the template";
    }
    return "?";
}

body parser::parse_template() {
    body b = parse_body({}, "");
    return b;
}

// Statements up to a block tag named in `ends` (left unread at its name), or to the end of the template
// when `ends` is empty.
body parser::parse_body(std::initializer_list<std::string_view> ends, std::string_view block) {
    const depth_guard guard(*this);
    body out;
    while (true) {
        const token& t = current();
        switch (t.kind) {
            case token_kind::eof: {
                if (ends.size() == 0) return out;
                std::string wanted;
                for (auto e : ends) wanted += std::string(wanted.empty() ? "" : " or ") + "'" + std::string(e) + "'";
                fail_at("unexpected end of template: the '" + std::string(block) + "' block opened at line " +
                            open_blocks_.back() + " needs " + wanted,
                        t);
            }
            case token_kind::text:
                out.push_back(make_stmt(t, text_stmt{t.text}));
                next();
                break;
            case token_kind::var_begin: {
                next();
                const token& at = current();
                if (current().kind == token_kind::var_end) fail("expected an expression inside '{{ }}', got nothing");
                expr_ptr e = parse_expression();
                if (current().kind != token_kind::var_end) {
                    fail("expected the end of the print statement '}}', got " + describe(current()));
                }
                next();
                out.push_back(make_stmt(at, output_stmt{std::move(e)}));
                break;
            }
            case token_kind::block_begin: {
                const token& name = peek();
                if (name.kind == token_kind::name) {
                    for (auto e : ends) {
                        if (name.text == e) {
                            next();
                            return out;
                        }
                    }
                }
                next();
                out.push_back(parse_statement());
                break;
            }
            case token_kind::var_end:
            case token_kind::block_end:
            case token_kind::name:
            case token_kind::string:
            case token_kind::integer:
            case token_kind::floating:
            case token_kind::op:
                fail("unexpected " + describe(t));
        }
    }
}

void parser::expect_block_end(std::string_view tag) {
    if (current().kind != token_kind::block_end) {
        fail("expected the end of the '" + std::string(tag) + "' tag '%}', got " + describe(current()));
    }
    next();
}

// After "{%": the statement named by the next token.
stmt_ptr parser::parse_statement() {
    const token& at = current();
    if (at.kind != token_kind::name) fail("expected a statement name after '{%', got " + describe(at));
    const std::string& tag = at.text;
    next();
    if (tag == "if") return parse_if(at);
    if (tag == "for") return parse_for(at);
    if (tag == "set") return parse_set(at);
    if (tag == "macro") return parse_macro(at);
    if (tag == "call") return parse_call_block(at);
    if (tag == "filter") return parse_filter_block(at);
    if (tag == "break" || tag == "continue") {
        expect_block_end(tag);
        if (tag == "break") return make_stmt(at, break_stmt{});
        return make_stmt(at, continue_stmt{});
    }
    if (tag == "generation") {
        expect_block_end(tag);
        open_blocks_.push_back(std::to_string(at.line));
        generation_stmt g{parse_body({"endgeneration"}, "generation")};
        open_blocks_.pop_back();
        next();
        expect_block_end("endgeneration");
        return make_stmt(at, std::move(g));
    }
    if (tag == "with") {
        with_stmt w;
        while (current().kind != token_kind::block_end) {
            if (!w.assignments.empty()) expect_op(",", "between the 'with' tag's assignments");
            std::string name = expect_name("in the 'with' tag");
            expect_op("=", "after a name in the 'with' tag");
            w.assignments.emplace_back(std::move(name), parse_expression());
        }
        expect_block_end(tag);
        open_blocks_.push_back(std::to_string(at.line));
        w.content = parse_body({"endwith"}, "with");
        open_blocks_.pop_back();
        next();
        expect_block_end("endwith");
        return make_stmt(at, std::move(w));
    }
    if (tag.starts_with("end") || tag == "elif" || tag == "else") {
        fail_at("unexpected '" + tag + "': no open block here ends with it", at);
    }
    fail_at("unknown statement '" + tag +
                "' (known: if, for, set, macro, call, filter, with, raw, break, continue, generation)",
            at);
}

stmt_ptr parser::parse_if(const token& at) {
    if_stmt s;
    open_blocks_.push_back(std::to_string(at.line));
    expr_ptr condition = parse_expression();
    expect_block_end("if");
    while (true) {
        body b = parse_body({"elif", "else", "endif"}, "if");
        s.branches.emplace_back(std::move(condition), std::move(b));
        const std::string which = next().text;
        if (which == "elif") {
            condition = parse_expression();
            expect_block_end("elif");
            continue;
        }
        if (which == "else") {
            expect_block_end("else");
            s.otherwise = parse_body({"endif"}, "if");
            next();
        }
        expect_block_end("endif");
        break;
    }
    open_blocks_.pop_back();
    return make_stmt(at, std::move(s));
}

stmt_ptr parser::parse_for(const token& at) {
    for_stmt s;
    open_blocks_.push_back(std::to_string(at.line));
    const bool parenthesized = skip_op("(");
    do {
        s.targets.push_back(expect_name("as a loop variable"));
    } while (skip_op(","));
    if (parenthesized) expect_op(")", "after the loop variables");
    if (!skip_name("in")) fail("expected 'in' after the loop variables, got " + describe(current()));
    s.iterable = parse_expression(false);
    if (skip_name("if")) s.filter = parse_expression();
    s.recursive = skip_name("recursive");
    expect_block_end("for");
    s.loop_body = parse_body({"else", "endfor"}, "for");
    if (next().text == "else") {
        expect_block_end("else");
        s.otherwise = parse_body({"endfor"}, "for");
        next();
    }
    expect_block_end("endfor");
    open_blocks_.pop_back();
    return make_stmt(at, std::move(s));
}

stmt_ptr parser::parse_set(const token& at) {
    std::vector<std::string> targets{expect_name("after 'set'")};
    std::string attribute;
    if (skip_op(".")) {
        attribute = expect_name("after '.' in a set target");
    } else {
        while (skip_op(",")) targets.push_back(expect_name("in the set targets"));
    }
    if (skip_op("=")) {
        const token& value_at = current();
        expr_ptr v = parse_expression();
        if (at_op(",")) {  // {% set a, b = 1, 2 %}: an implicit tuple
            list_expr tuple{{}, true};
            tuple.items.push_back(std::move(v));
            while (skip_op(",")) tuple.items.push_back(parse_expression());
            v = make(value_at, std::move(tuple));
        }
        expect_block_end("set");
        return make_stmt(at, set_stmt{std::move(targets), std::move(attribute), std::move(v)});
    }
    if (targets.size() != 1 || !attribute.empty()) fail("a set block assigns one plain name");
    set_block_stmt s;
    s.target = targets[0];
    if (at_op("|")) s.filters = parse_filter_chain();
    expect_block_end("set");
    open_blocks_.push_back(std::to_string(at.line));
    s.content = parse_body({"endset"}, "set");
    open_blocks_.pop_back();
    next();
    expect_block_end("endset");
    return make_stmt(at, std::move(s));
}

// "(a, b=1, ...)" of a macro or a call block's caller.
std::vector<macro_param> parser::parse_params() {
    std::vector<macro_param> params;
    expect_op("(", "before the parameters");
    while (!skip_op(")")) {
        if (!params.empty()) {
            expect_op(",", "between parameters");
            if (skip_op(")")) break;
        }
        macro_param p{expect_name("as a parameter"), nullptr};
        if (skip_op("=")) p.fallback = parse_expression();
        params.push_back(std::move(p));
    }
    return params;
}

stmt_ptr parser::parse_macro(const token& at) {
    macro_stmt s;
    s.name = expect_name("after 'macro'");
    s.params = parse_params();
    expect_block_end("macro");
    open_blocks_.push_back(std::to_string(at.line));
    const bool outer_varargs = std::exchange(names_varargs_, false);
    const bool outer_kwargs = std::exchange(names_kwargs_, false);
    s.content = std::make_shared<const body>(parse_body({"endmacro"}, "macro"));
    s.catch_varargs = names_varargs_;
    s.catch_kwargs = names_kwargs_;
    names_varargs_ = outer_varargs || names_varargs_;
    names_kwargs_ = outer_kwargs || names_kwargs_;
    open_blocks_.pop_back();
    next();
    if (current().kind == token_kind::name) next();  // {% endmacro name %}
    expect_block_end("endmacro");
    return make_stmt(at, std::move(s));
}

stmt_ptr parser::parse_call_block(const token& at) {
    call_block_stmt s;
    if (at_op("(")) s.caller_params = parse_params();
    s.call = parse_expression();
    if (!std::holds_alternative<call_expr>(s.call->node)) fail_at("a call block needs a macro call", at);
    expect_block_end("call");
    open_blocks_.push_back(std::to_string(at.line));
    s.content = std::make_shared<const body>(parse_body({"endcall"}, "call"));
    open_blocks_.pop_back();
    next();
    expect_block_end("endcall");
    return make_stmt(at, std::move(s));
}

// "name(args) | name ..." (the first '|' optional): filters with no operand, applied in order.
std::vector<expr_ptr> parser::parse_filter_chain() {
    std::vector<expr_ptr> filters;
    do {
        const token& at = current();
        skip_op("|");
        filters.push_back(parse_filter(nullptr, at));
    } while (at_op("|"));
    return filters;
}

stmt_ptr parser::parse_filter_block(const token& at) {
    filter_block_stmt s;
    s.filters = parse_filter_chain();
    expect_block_end("filter");
    open_blocks_.push_back(std::to_string(at.line));
    s.content = parse_body({"endfilter"}, "filter");
    open_blocks_.pop_back();
    next();
    expect_block_end("endfilter");
    return make_stmt(at, std::move(s));
}

}  // namespace troupe::jinja
