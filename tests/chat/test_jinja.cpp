// The Jinja interpreter on its own: tables of template -> text for the semantics chat templates rely on
// (the byte-for-byte comparison with Python's jinja2 over whole templates is jinja_reference.py), and the
// errors: syntax errors with line and column, raise_exception's message, undefined names, the limits.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "core/chat/jinja/template.h"

namespace troupe::jinja {
namespace {

struct row {
    const char* source;
    const char* expected;
};

dict vars_of(const char* json_text) {
    dict vars;
    const boost::json::value v = boost::json::parse(json_text);
    for (const auto& kv : v.as_object()) vars.set(std::string(kv.key()), value_from_json(kv.value()));
    return vars;
}

std::string render(const char* source, const dict& vars) {
    auto t = parse_template(source);
    if (!t) return "PARSE ERROR: " + t.message();
    auto out = t->render(vars);
    if (!out) return "RENDER ERROR: " + out.message();
    return *out;
}

void check_rows(std::initializer_list<row> rows, const char* vars_json = "{}") {
    const dict vars = vars_of(vars_json);
    for (const auto& r : rows) EXPECT_EQ(render(r.source, vars), r.expected) << r.source;
}

TEST(jinja, undefined_values_print_empty_are_falsy_and_fail_when_used_further) {
    check_rows(
        {
            {"[{{ nothing }}]", "[]"},
            {"{{ d.missing is defined }} {{ d.missing is undefined }} {{ not d.missing }}", "False True True"},
            {"{% for x in nothing %}x{% else %}empty{% endfor %}", "empty"},
            {"{{ nothing | default('fallback') }} {{ nothing | length }} {{ d.missing ~ 'x' }}", "fallback 0 x"},
            {"{{ d.missing == none }} {{ nothing == nothing }}", "False True"},
        },
        R"({"d": {}})");
    const dict vars = vars_of(R"({"d": {}})");
    EXPECT_EQ(render("{{ d.missing.deeper }}", vars),
              "RENDER ERROR: template error at line 1, column 4: 'dict object' has no attribute 'missing'");
    EXPECT_EQ(render("\n  {{ nothing + 1 }}", vars),
              "RENDER ERROR: template error at line 2, column 6: 'nothing' is undefined");
    EXPECT_EQ(render("{{ no_such_function(1) }}", vars),
              "RENDER ERROR: template error at line 1, column 4: 'no_such_function' is undefined");
}

TEST(jinja, a_set_inside_a_loop_stays_in_its_iteration_and_a_namespace_carries_out) {
    check_rows({
        {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "231"},
        {"{% for i in [1, 2, 3] %}{% if i == 1 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}", "[5][][]"},
        {"{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "6"},
        {"{% if true %}{% set z = 'leaks from if' %}{% endif %}{{ z }}", "leaks from if"},
        {"{% macro m() %}{{ later }}{% endmacro %}{% set later = 'seen' %}{{ m() }}", "seen"},
    });
}

TEST(jinja, integers_stay_integers_and_floats_print_as_python_does) {
    check_rows({
        {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 7 }} {{ 2 ** 3 }} {{ 2 ** -1 }}", "3 -4 2 1.0 8 0.5"},
        {"{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 100.0 }} {{ -0.5 }}",
         "0.30000000000000004 1e+16 1000000000000000.0 1e-05 0.0001 100.0 -0.5"},
        {"{{ true + 1 }} {{ 1 == 1.0 }} {{ 3 | float }} {{ 3.9 | int }} {{ 2.5 | round }} {{ 3 | round }}",
         "2 True 3.0 3 2.0 3"},
    });
}

TEST(jinja, values_print_as_python_reprs) {
    check_rows({
        {"{{ [1, 'a', none, true, 1.5] }}", "[1, 'a', None, True, 1.5]"},
        {"{{ {'k': \"it's\"} }} {{ (1,) }} {{ () }} {{ ('a', 2) }}", "{'k': \"it's\"} (1,) () ('a', 2)"},
        {"{{ 'tab\\there' }}|{{ ['tab\\there', 'back\\\\slash'] }}", "tab\there|['tab\\there', 'back\\\\slash']"},
        {"{{ {'a': 1}.items() | list }}", "[('a', 1)]"},
    });
}

TEST(jinja, tojson_writes_what_json_dumps_writes_with_ensure_ascii_off) {
    check_rows(
        {
            {"{{ x | tojson }}", R"({"s": "é \"q\" \n", "n": null, "l": [1, 2.5, true], "e": {}})"},
            {"{{ x.l | tojson(indent=2) }}", "[\n  1,\n  2.5,\n  true\n]"},
            {"{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", R"({"a": 2, "b": 1})"},
            {"{{ 'é' | tojson(ensure_ascii=true) }}", R"("\u00e9")"},
            {"{{ '\\x01' | tojson }}", R"("\u0001")"},
        },
        R"({"x": {"s": "é \"q\" \n", "n": null, "l": [1, 2.5, true], "e": {}}})");
}

TEST(jinja, whitespace_control_follows_trim_blocks_and_lstrip_blocks) {
    check_rows({
        {"{% if true %}\nyes\n{% endif %}\nend", "yes\nend"},
        {"  {% if true %}\n  x\n  {% endif %}\n", "  x\n"},
        {"a  {{- 'b' -}}  \n c", "abc"},
        {"  {{ 'var' }}\n", "  var"},
        {"{%+ if true %}x{% endif +%}\ny", "x\ny"},
        {"  {%+ if true %}x{% endif %}", "  x"},
        {"a {# note #}\nb", "a b"},
        {"line\r\nnext\r\n", "line\nnext"},
        {"{% raw %}{{ kept }}{% endraw %}", "{{ kept }}"},
    });
}

TEST(jinja, loops_know_their_position_neighbours_and_filter_condition) {
    check_rows({
        {"{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}"
         "{{ loop.length }} {% endfor %}",
         "103TrueFalse3 212FalseFalse3 321FalseTrue3 "},
        {"{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}:{{ x }}<{{ loop.previtem }}>{% endfor %}",
         "1:2<>2:4<2>"},
        {"{% for x in range(9) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
         "{{ x }}{% endfor %}",
         "023"},
        {"{% for k, v in {'a': 1, 'b': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}", "a1b2"},
        {"{% for x in [1, 2] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "ab"},
    });
}

TEST(jinja, macros_take_defaults_keywords_and_a_caller) {
    check_rows({
        {"{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }} {{ f(1, 3) }} {{ f(b=5, a=0) }}", "1-2 1-3 0-5"},
        {"{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}in{% endcall %}", "[in]"},
        {"{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
         "{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}",
         "<1><2>"},
        {"{% set b %}x{{ 1 }}{% endset %}{{ b }}{{ b | length }}", "x12"},
        {"{% filter upper %}shout{% endfilter %}", "SHOUT"},
    });
    const dict vars;
    EXPECT_EQ(render("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", vars),
              "RENDER ERROR: template error at line 1, column 34: macro 'f' takes not more than 1 argument(s), 2 "
              "given");
}

// transformers' sandbox (jinja2's ImmutableSandboxedEnvironment) hides the methods that change a list or dict:
// they are undefined (calling one raises: jinja_reference.py compares the message with jinja2's).
TEST(jinja, methods_that_change_a_list_or_dict_are_undefined_as_in_transformers_sandbox) {
    check_rows({
        {"{{ [1].append is defined }} {{ {}.update is defined }} {{ [1].copy() }} {{ {'a': 1}.get('a') }} "
         "[{{ [1].append }}] {{ [1].pop is callable }}",
         "False False [1] 1 [] True"},
    });
}

// Python's ints are unbounded and troupe's are 64-bit: a result past that range is an error naming it, never
// a wrapped number (and a huge exponent is no loop of that many steps).
TEST(jinja, integers_past_64_bits_fail_instead_of_wrapping) {
    const dict vars;
    for (const char* source : {"{{ 2 ** 64 }}", "{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                               "{{ 4294967296 * 4294967296 }}", "{{ 3 ** 999999999999 }}"}) {
        const std::string out = render(source, vars);
        EXPECT_NE(out.find("integer overflow"), std::string::npos) << source << " -> " << out;
    }
}

TEST(jinja, raise_exception_gives_the_templates_own_message) {
    const dict vars;
    EXPECT_EQ(render("ok so far {{ raise_exception('Roles must alternate user/assistant') }}", vars),
              "RENDER ERROR: Roles must alternate user/assistant");
}

TEST(jinja, syntax_errors_name_line_and_column) {
    struct error_row {
        const char* source;
        const char* message;
    };
    const error_row rows[] = {
        {"a\n{% for x in xs %}\n",
         "template syntax error at line 2, column 18: unexpected end of template: the "
         "'for' block opened at line 2 needs 'else' or 'endfor'"},
        {"{{ 1 + }}",
         "template syntax error at line 1, column 8: expected an expression, got the end of the print "
         "statement '}}'"},
        {"x\n  {% endif %}",
         "template syntax error at line 2, column 6: unexpected 'endif': no open block here "
         "ends with it"},
        {"{% frob %}",
         "template syntax error at line 1, column 4: unknown statement 'frob' (known: if, for, set, "
         "macro, call, filter, with, raw, break, continue, generation)"},
        {"{{ [1, 2 }}", "template syntax error at line 1, column 10: unexpected '}', expected ']'"},
        {"{{ 'open }}", "template syntax error at line 1, column 4: unterminated string literal"},
    };
    for (const auto& r : rows) {
        auto t = parse_template(r.source);
        ASSERT_FALSE(t) << r.source;
        EXPECT_EQ(t.message(), r.message) << r.source;
    }
}

TEST(jinja, limits_stop_a_runaway_template_with_a_clear_error) {
    const dict vars;
    const std::string deep_expression = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    EXPECT_NE(render(deep_expression.c_str(), vars).find("PARSE ERROR: template syntax error at line 1, column "),
              std::string::npos);
    EXPECT_NE(render(deep_expression.c_str(), vars).find("nests deeper than 256 levels"), std::string::npos);
    std::string deep_blocks;
    for (int k = 0; k < 2000; ++k) deep_blocks += "{% if true %}";
    EXPECT_NE(render(deep_blocks.c_str(), vars).find("nests deeper than 256 levels"), std::string::npos);
    EXPECT_EQ(render("{{ ((((1)))) + [[[2]]][0][0][0] }}", vars), "3");
    EXPECT_EQ(render("{% for i in range(100000000) %}{% endfor %}", vars),
              "RENDER ERROR: template error at line 1, column 13: range() of 100000000 items passes the limit of "
              "1000000");
    EXPECT_EQ(render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", vars).substr(0, 60),
              "RENDER ERROR: template error at line 1, column 20: macro cal");
}

}  // namespace
}  // namespace troupe::jinja
