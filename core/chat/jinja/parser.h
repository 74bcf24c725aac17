// jinja parser: tokens -> syntax tree, by recursive descent following jinja2's grammar and precedence:
//
//   expression  := or_expr ["if" or_expr ["else" expression]]
//   or_expr     := and_expr ("or" and_expr)*          and_expr := not_expr ("and" not_expr)*
//   not_expr    := "not" not_expr | compare           compare  := math1 (cmp_op math1 | ["not"] "in" math1)*
//   math1       := concat (("+"|"-") concat)*         concat   := math2 ("~" math2)*
//   math2       := pow (("*"|"/"|"//"|"%") pow)*      pow      := unary ("**" unary)*
//   unary       := ("-"|"+") unary | primary postfix* ("|" filter | "is" ["not"] test | call)*
//   postfix     := "." name | "[" subscript-or-slice "]" | "(" arguments ")"
//
// Statements: if/elif/else, for (with unpacking, a filter condition and else), set (names, a namespace
// attribute, or a block), macro, call, filter, break, continue, generation. Throws syntax_error.
#pragma once

#include <vector>

#include "core/chat/jinja/ast.h"
#include "core/chat/jinja/lexer.h"

namespace troupe::jinja {

body parse(const std::vector<token>& tokens);

// The parser's state, shared by its statement part (parser.cpp) and expression part (parse_expression.cpp).
class parser {
public:
    explicit parser(const std::vector<token>& tokens) : tokens_(tokens) {}

    body parse_template();

    expr_ptr parse_expression(bool with_conditional = true);

private:
    const std::vector<token>& tokens_;
    size_t pos_ = 0;
    std::vector<std::string> open_blocks_;  // for the "innermost block" in end-of-template errors
    int depth_ = 0;                         // nesting of expressions and blocks being parsed
    bool names_varargs_ = false;            // a `varargs` / `kwargs` name read since the innermost macro began
    bool names_kwargs_ = false;

    // Counts one level of nesting for its lifetime; past max_depth the template is refused rather than
    // exhausting the stack (the parser and the evaluator recurse as deep as the template nests).
    static constexpr int max_depth = 256;
    struct depth_guard {
        parser& p;
        explicit depth_guard(parser& owner) : p(owner) {
            if (++p.depth_ > max_depth)
                p.fail("the template nests deeper than " + std::to_string(max_depth) + " levels");
        }
        ~depth_guard() { --p.depth_; }
        depth_guard(const depth_guard&) = delete;
        depth_guard& operator=(const depth_guard&) = delete;
    };

    const token& current() const { return tokens_[pos_]; }
    const token& peek(size_t ahead = 1) const;
    const token& next();
    bool at_op(std::string_view op) const;
    bool at_name(std::string_view name) const;
    bool skip_op(std::string_view op);
    bool skip_name(std::string_view name);
    void expect_op(std::string_view op, std::string_view context);
    std::string expect_name(std::string_view context);
    [[noreturn]] void fail(const std::string& message) const;
    [[noreturn]] void fail_at(const std::string& message, const token& t) const;
    static std::string describe(const token& t);

    // Statements.
    body parse_body(std::initializer_list<std::string_view> ends, std::string_view block);
    stmt_ptr parse_statement();
    void expect_block_end(std::string_view tag);
    stmt_ptr parse_if(const token& at);
    stmt_ptr parse_for(const token& at);
    stmt_ptr parse_set(const token& at);
    stmt_ptr parse_macro(const token& at);
    stmt_ptr parse_call_block(const token& at);
    stmt_ptr parse_filter_block(const token& at);
    std::vector<macro_param> parse_params();
    std::vector<expr_ptr> parse_filter_chain();

    // Expressions.
    expr_ptr parse_or();
    expr_ptr parse_and();
    expr_ptr parse_not();
    expr_ptr parse_compare();
    expr_ptr parse_math1();
    expr_ptr parse_concat();
    expr_ptr parse_math2();
    expr_ptr parse_pow();
    expr_ptr parse_unary(bool with_filter);
    expr_ptr parse_primary();
    expr_ptr parse_postfix(expr_ptr node);
    expr_ptr parse_filters_and_tests(expr_ptr node);
    expr_ptr parse_filter(expr_ptr operand, const token& at);
    expr_ptr parse_subscript(expr_ptr object);
    expr_ptr parse_tuple_or_expression(const token& at);
    arguments parse_arguments();
    template <class node_t>
    static expr_ptr make(const token& at, node_t node) {
        return make_at(at.line, at.column, std::move(node));
    }
    // A node that starts where `line`/`column` say (a postfix, filter or test starts with its operand).
    template <class node_t>
    static expr_ptr make_at(int line, int column, node_t node) {
        auto e = std::make_unique<expr>();
        e->node = std::move(node);
        e->line = line;
        e->column = column;
        return e;
    }
};

}  // namespace troupe::jinja
