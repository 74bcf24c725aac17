// The expression half of the parser (see parser.h for the grammar).
#include <charconv>

#include "core/chat/jinja/parser.h"

namespace troupe::jinja {

expr_ptr parser::parse_expression(bool with_conditional) {
    const depth_guard guard(*this);
    const token& at = current();
    expr_ptr node = parse_or();
    if (!with_conditional) return node;
    while (skip_name("if")) {
        expr_ptr condition = parse_or();
        expr_ptr otherwise = skip_name("else") ? parse_expression() : nullptr;
        node = make(at, conditional_expr{std::move(condition), std::move(node), std::move(otherwise)});
    }
    return node;
}

expr_ptr parser::parse_or() {
    const token& at = current();
    expr_ptr node = parse_and();
    while (skip_name("or")) node = make(at, binary_expr{binary_op::or_, std::move(node), parse_and()});
    return node;
}

expr_ptr parser::parse_and() {
    const token& at = current();
    expr_ptr node = parse_not();
    while (skip_name("and")) node = make(at, binary_expr{binary_op::and_, std::move(node), parse_not()});
    return node;
}

expr_ptr parser::parse_not() {
    const token& at = current();
    if (skip_name("not")) return make(at, unary_expr{unary_op::not_, parse_not()});
    return parse_compare();
}

expr_ptr parser::parse_compare() {
    const token& at = current();
    expr_ptr first = parse_math1();
    std::vector<std::pair<compare_op, expr_ptr>> rest;
    while (true) {
        compare_op op;
        if (skip_op("==")) {
            op = compare_op::eq;
        } else if (skip_op("!=")) {
            op = compare_op::ne;
        } else if (skip_op("<")) {
            op = compare_op::lt;
        } else if (skip_op("<=")) {
            op = compare_op::le;
        } else if (skip_op(">")) {
            op = compare_op::gt;
        } else if (skip_op(">=")) {
            op = compare_op::ge;
        } else if (skip_name("in")) {
            op = compare_op::in;
        } else if (at_name("not") && peek().kind == token_kind::name && peek().text == "in") {
            pos_ += 2;
            op = compare_op::not_in;
        } else {
            break;
        }
        rest.emplace_back(op, parse_math1());
    }
    if (rest.empty()) return first;
    return make(at, compare_expr{std::move(first), std::move(rest)});
}

expr_ptr parser::parse_math1() {
    const token& at = current();
    expr_ptr node = parse_concat();
    while (at_op("+") || at_op("-")) {
        const binary_op op = next().text == "+" ? binary_op::add : binary_op::sub;
        node = make(at, binary_expr{op, std::move(node), parse_concat()});
    }
    return node;
}

expr_ptr parser::parse_concat() {
    const token& at = current();
    expr_ptr node = parse_math2();
    while (skip_op("~")) node = make(at, binary_expr{binary_op::concat, std::move(node), parse_math2()});
    return node;
}

expr_ptr parser::parse_math2() {
    const token& at = current();
    expr_ptr node = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
        const std::string& t = next().text;
        const binary_op op = t == "*"    ? binary_op::mul
                             : t == "/"  ? binary_op::div
                             : t == "//" ? binary_op::floordiv
                                         : binary_op::mod;
        node = make(at, binary_expr{op, std::move(node), parse_pow()});
    }
    return node;
}

expr_ptr parser::parse_pow() {
    const token& at = current();
    expr_ptr node = parse_unary(true);
    while (skip_op("**")) node = make(at, binary_expr{binary_op::pow, std::move(node), parse_unary(true)});
    return node;
}

expr_ptr parser::parse_unary(bool with_filter) {
    const depth_guard guard(*this);
    const token& at = current();
    expr_ptr node;
    if (skip_op("-")) {
        node = make(at, unary_expr{unary_op::neg, parse_unary(false)});
    } else if (skip_op("+")) {
        node = make(at, unary_expr{unary_op::pos, parse_unary(false)});
    } else {
        node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters_and_tests(std::move(node)) : std::move(node);
}

expr_ptr parser::parse_primary() {
    const token& at = current();
    switch (at.kind) {
        case token_kind::name: {
            next();
            if (at.text == "true" || at.text == "True") return make(at, literal_expr{value::boolean(true)});
            if (at.text == "false" || at.text == "False") return make(at, literal_expr{value::boolean(false)});
            if (at.text == "none" || at.text == "None") return make(at, literal_expr{value::none()});
            names_varargs_ = names_varargs_ || at.text == "varargs";
            names_kwargs_ = names_kwargs_ || at.text == "kwargs";
            return make(at, name_expr{at.text});
        }
        case token_kind::string: {
            std::string s;
            while (current().kind == token_kind::string) s += next().text;  // adjacent literals concatenate
            return make(at, literal_expr{value::string(std::move(s))});
        }
        case token_kind::integer: {
            next();
            int64_t v = 0;
            auto [p, ec] = std::from_chars(at.text.data(), at.text.data() + at.text.size(), v);
            (void)p;
            if (ec != std::errc()) fail_at("integer literal " + at.text + " is out of range (64-bit)", at);
            return make(at, literal_expr{value::integer(v)});
        }
        case token_kind::floating:
            next();
            return make(at, literal_expr{value::floating(std::stod(at.text))});
        case token_kind::op:
            if (at.text == "(") {
                next();
                return parse_tuple_or_expression(at);
            }
            if (at.text == "[") {
                next();
                list_expr list;
                while (!at_op("]")) {
                    if (!list.items.empty()) expect_op(",", "between list items");
                    if (at_op("]")) break;
                    list.items.push_back(parse_expression());
                }
                next();
                return make(at, std::move(list));
            }
            if (at.text == "{") {
                next();
                dict_expr dict;
                while (!at_op("}")) {
                    if (!dict.items.empty()) expect_op(",", "between dict items");
                    if (at_op("}")) break;
                    expr_ptr key = parse_expression();
                    expect_op(":", "after a dict key");
                    dict.items.emplace_back(std::move(key), parse_expression());
                }
                next();
                return make(at, std::move(dict));
            }
            break;
        case token_kind::text:
        case token_kind::var_begin:
        case token_kind::var_end:
        case token_kind::block_begin:
        case token_kind::block_end:
        case token_kind::eof:
            break;
    }
    fail_at("expected an expression, got " + describe(at), at);
}

// After "(": () is the empty tuple, (x) is x, (x,) and (x, y) are tuples.
expr_ptr parser::parse_tuple_or_expression(const token& at) {
    list_expr tuple{{}, true};
    bool saw_comma = false;
    while (!at_op(")")) {
        if (!tuple.items.empty()) {
            expect_op(",", "between tuple items");
            saw_comma = true;
            if (at_op(")")) break;
        }
        tuple.items.push_back(parse_expression());
    }
    next();
    if (tuple.items.size() == 1 && !saw_comma) return std::move(tuple.items[0]);
    return make(at, std::move(tuple));
}

expr_ptr parser::parse_postfix(expr_ptr node) {
    while (true) {
        const int line = node->line;
        const int column = node->column;
        if (skip_op(".")) {
            const token& attr = next();
            if (attr.kind == token_kind::name) {
                node = make_at(line, column, attribute_expr{std::move(node), attr.text});
            } else if (attr.kind == token_kind::integer) {
                node = make_at(
                    line, column,
                    subscript_expr{std::move(node), make(attr, literal_expr{value::integer(std::stoll(attr.text))})});
            } else {
                fail_at("expected an attribute name after '.', got " + describe(attr), attr);
            }
        } else if (skip_op("[")) {
            node = parse_subscript(std::move(node));
        } else if (skip_op("(")) {
            node = make_at(line, column, call_expr{std::move(node), parse_arguments()});
        } else {
            return node;
        }
    }
}

// After "[": x[i] or x[start:stop:step] with any part left out.
expr_ptr parser::parse_subscript(expr_ptr object) {
    const int line = object->line;
    const int column = object->column;
    expr_ptr parts[3];
    int n_colons = 0;
    if (!at_op(":")) parts[0] = parse_expression();
    while (n_colons < 2 && skip_op(":")) {
        ++n_colons;
        if (!at_op(":") && !at_op("]")) parts[n_colons] = parse_expression();
    }
    expect_op("]", "to close the subscript");
    if (n_colons == 0) return make_at(line, column, subscript_expr{std::move(object), std::move(parts[0])});
    return make_at(line, column,
                   slice_expr{std::move(object), std::move(parts[0]), std::move(parts[1]), std::move(parts[2])});
}

expr_ptr parser::parse_filters_and_tests(expr_ptr node) {
    while (true) {
        const int line = node->line;
        const int column = node->column;
        if (skip_op("|")) {
            node = parse_filter(std::move(node), current());
        } else if (skip_name("is")) {
            test_expr test;
            test.negated = skip_name("not");
            test.name = expect_name("after 'is'");
            while (skip_op(".")) test.name += "." + expect_name("in a dotted test name");
            const token& arg = current();
            if (skip_op("(")) {
                test.args = parse_arguments();
            } else if ((arg.kind == token_kind::name || arg.kind == token_kind::string ||
                        arg.kind == token_kind::integer || arg.kind == token_kind::floating || at_op("[") ||
                        at_op("{")) &&
                       !(arg.kind == token_kind::name &&
                         (arg.text == "else" || arg.text == "or" || arg.text == "and" || arg.text == "if" ||
                          arg.text == "not" || arg.text == "in" || arg.text == "is"))) {
                // "x is divisibleby 3": one argument without parentheses.
                test.args.pos.push_back(parse_postfix(parse_primary()));
            }
            test.operand = std::move(node);
            node = make_at(line, column, std::move(test));
        } else if (skip_op("(")) {
            node = make_at(line, column, call_expr{std::move(node), parse_arguments()});
        } else {
            return node;
        }
    }
}

expr_ptr parser::parse_filter(expr_ptr operand, const token& at) {
    filter_expr f;
    f.operand = std::move(operand);
    f.name = expect_name("after '|'");
    while (skip_op(".")) f.name += "." + expect_name("in a dotted filter name");
    if (skip_op("(")) f.args = parse_arguments();
    return make(at, std::move(f));
}

// After "(": positional and keyword arguments up to ")".
arguments parser::parse_arguments() {
    arguments args;
    bool first = true;
    while (!skip_op(")")) {
        if (!first) {
            expect_op(",", "between arguments");
            if (skip_op(")")) break;
        }
        first = false;
        // jinja2's order: positional arguments, then *args and keywords, then **kwargs.
        if (skip_op("*")) {
            if (args.star_args || args.star_kwargs) fail("*args given twice or after **kwargs");
            args.star_args = parse_expression();
        } else if (skip_op("**")) {
            if (args.star_kwargs) fail("**kwargs given twice");
            args.star_kwargs = parse_expression();
        } else if (current().kind == token_kind::name && peek().kind == token_kind::op && peek().text == "=") {
            if (args.star_kwargs) fail("a keyword argument follows **kwargs");
            std::string name = next().text;
            next();
            args.kw.push_back(keyword_arg{std::move(name), parse_expression()});
        } else {
            if (!args.kw.empty() || args.star_args || args.star_kwargs) {
                fail("a positional argument follows a keyword argument or *args");
            }
            args.pos.push_back(parse_expression());
        }
    }
    return args;
}

}  // namespace troupe::jinja
