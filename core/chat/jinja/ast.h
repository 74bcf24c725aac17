// The syntax tree the parser builds and the evaluator walks: expressions (a variant of node structs) and
// statements (likewise). Every node keeps the line and column it starts at, for runtime error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/chat/jinja/value.h"

namespace troupe::jinja {

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct keyword_arg {
    std::string name;
    expr_ptr value;
};

struct arguments {
    std::vector<expr_ptr> pos;
    std::vector<keyword_arg> kw;
    expr_ptr star_args;    // f(*xs): more positional arguments, after pos; null when not given
    expr_ptr star_kwargs;  // f(**d): more keyword arguments, after kw
};

enum class unary_op { neg, pos, not_ };
enum class binary_op { add, sub, mul, div, floordiv, mod, pow, concat, and_, or_ };
enum class compare_op { eq, ne, lt, le, gt, ge, in, not_in };

struct literal_expr {
    value v;
};
struct name_expr {
    std::string name;
};
struct list_expr {
    std::vector<expr_ptr> items;
    bool tuple = false;
};
struct dict_expr {
    std::vector<std::pair<expr_ptr, expr_ptr>> items;
};
struct unary_expr {
    unary_op op;
    expr_ptr operand;
};
struct binary_expr {
    binary_op op;
    expr_ptr lhs;
    expr_ptr rhs;
};
// a < b <= c: each operator compares its neighbours, and all must hold (Python's chained comparison).
struct compare_expr {
    expr_ptr first;
    std::vector<std::pair<compare_op, expr_ptr>> rest;
};
struct attribute_expr {
    expr_ptr object;
    std::string name;
};
struct subscript_expr {
    expr_ptr object;
    expr_ptr index;
};
struct slice_expr {
    expr_ptr object;
    expr_ptr start;  // each may be null
    expr_ptr stop;
    expr_ptr step;
};
struct call_expr {
    expr_ptr callee;
    arguments args;
};
// value | name(args); operand is null inside {% filter %} blocks and set blocks, where the body is the value.
struct filter_expr {
    expr_ptr operand;
    std::string name;
    arguments args;
};
struct test_expr {
    expr_ptr operand;
    std::string name;
    arguments args;
    bool negated = false;
};
struct conditional_expr {
    expr_ptr condition;
    expr_ptr then;
    expr_ptr otherwise;  // null: undefined when the condition is false
};

struct expr {
    std::variant<literal_expr, name_expr, list_expr, dict_expr, unary_expr, binary_expr, compare_expr, attribute_expr,
                 subscript_expr, slice_expr, call_expr, filter_expr, test_expr, conditional_expr>
        node;
    int line = 0;
    int column = 0;
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body = std::vector<stmt_ptr>;

struct text_stmt {
    std::string text;
};
struct output_stmt {
    expr_ptr value;
};
struct if_stmt {
    std::vector<std::pair<expr_ptr, body>> branches;  // if and each elif
    body otherwise;
};
struct for_stmt {
    std::vector<std::string> targets;  // one name, or several unpacked from each item
    expr_ptr iterable;
    expr_ptr filter;  // {% for x in xs if cond %}; may be null
    body loop_body;
    body otherwise;          // runs when no item was visited
    bool recursive = false;  // {% for ... recursive %}: loop(items) renders the body over items, one level deeper
};
// {% set a = v %}, {% set a, b = v %}, {% set ns.attr = v %}.
struct set_stmt {
    std::vector<std::string> targets;
    std::string attribute;  // non-empty: targets[0] is a namespace and this its attribute
    expr_ptr value;
};
// {% set a %}body{% endset %}, optionally {% set a | filter %}.
struct set_block_stmt {
    std::string target;
    std::vector<expr_ptr> filters;  // filter_expr nodes with null operands, applied in order
    body content;
};
struct macro_param {
    std::string name;
    expr_ptr fallback;  // null: required
};
struct macro_stmt {
    std::string name;
    std::vector<macro_param> params;
    std::shared_ptr<const body> content;  // shared with the macro values made from it
    // As in jinja2: a body that reads `varargs` takes extra positional arguments (as that tuple), one that
    // reads `kwargs` extra keyword arguments (as that dict); otherwise extra arguments are an error.
    bool catch_varargs = false;
    bool catch_kwargs = false;
};
// {% call(params) macro(args) %}body{% endcall %}: calls the macro with caller() rendering the body.
struct call_block_stmt {
    expr_ptr call;
    std::vector<macro_param> caller_params;
    std::shared_ptr<const body> content;
};
struct filter_block_stmt {
    std::vector<expr_ptr> filters;  // filter_expr nodes with null operands
    body content;
};
struct break_stmt {};
struct continue_stmt {};
// {% generation %}...{% endgeneration %} (transformers' AssistantTracker): renders its body.
struct generation_stmt {
    body content;
};
// {% with a = 1, b = x %}body{% endwith %}: the body in a scope of its own holding those names (each value
// computed in the enclosing scope); nothing set inside leaks out.
struct with_stmt {
    std::vector<std::pair<std::string, expr_ptr>> assignments;
    body content;
};

struct stmt {
    std::variant<text_stmt, output_stmt, if_stmt, for_stmt, set_stmt, set_block_stmt, macro_stmt, call_block_stmt,
                 filter_block_stmt, break_stmt, continue_stmt, generation_stmt, with_stmt>
        node;
    int line = 0;
    int column = 0;
};

}  // namespace troupe::jinja
