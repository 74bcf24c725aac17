// jinja evaluator: walks the syntax tree, writing the output text.
//
// Scopes follow jinja2: a for loop's body gets a fresh scope on every iteration (a `set` inside it neither
// survives to the next iteration nor leaks out; namespace() objects are the way out), `if` opens no scope,
// a macro call runs in a scope whose parent is the scope the macro was defined in (so it sees template
// variables set later, as jinja2 does). Names not found in any scope come from the globals (the render
// variables, then the built-in functions).
//
// Errors: operations raise render_error; the innermost expression or statement being evaluated adds its
// line and column (located_error). raise_exception(...) raises raised_error, which passes through unchanged.
// Limits keep a hostile template from exhausting the server: output size, loop items and call depth.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/chat/jinja/ast.h"
#include "core/chat/jinja/callable.h"
#include "core/chat/jinja/value.h"

namespace troupe::jinja {

struct located_error : render_error {
    int line;
    int column;
    located_error(const std::string& message, int line_, int column_)
        : render_error(message), line(line_), column(column_) {}
};

struct scope {
    dict vars;
    std::shared_ptr<scope> parent;
};

struct evaluator_limits {
    size_t max_output_bytes = size_t{64} << 20;
    size_t max_loop_items = 1'000'000;
    int max_call_depth = 200;
};

class evaluator {
public:
    // `globals`: the render variables (messages, bos_token, ...) and built-ins, looked up last.
    evaluator(const dict& globals, evaluator_limits limits = {});

    // Renders a whole template body into `out`.
    void render(const body& b, std::string& out);

    value eval(const expr& e);
    value call(const value& fn, const call_args& args);
    value apply_filter(std::string_view name, const value& operand, const call_args& args);
    bool apply_test(std::string_view name, const value& operand, const call_args& args);
    const evaluator_limits& limits() const { return limits_; }
    // obj.name and obj[index] with jinja2's lookup rules (attr, map and the attribute= filters use them too).
    value eval_attribute(const value& object, const std::string& name);
    value eval_subscript(const value& object, const value& index);

    // Macro calls (macro_function::call lands here).
    struct macro_call {
        std::string name;
        const std::vector<macro_param>* params = nullptr;  // in the syntax tree, which outlives the render
        std::shared_ptr<const body> content;               // the macro's (or call block's) body
        std::shared_ptr<scope> closure;                    // the scope it was defined in
        value caller;                                      // a call block's body; undefined otherwise
        bool catch_varargs = false;                        // macro_stmt's: extra arguments as varargs / kwargs
        bool catch_kwargs = false;
    };
    value run_macro(const macro_call& m, const call_args& args);

private:
    enum class flow { normal, break_loop, continue_loop };

    const dict& globals_;
    evaluator_limits limits_;
    std::shared_ptr<scope> scope_;
    std::string* out_ = nullptr;
    int depth_ = 0;

    value lookup(const std::string& name) const;
    void assign(const std::string& name, value v);

    flow render_body(const body& b);
    flow render_stmt(const stmt& s);
    flow render_for(const for_stmt& s);
    flow render_loop(const for_stmt& s, const value& iterable, int64_t depth0);
    void render_set(const set_stmt& s);
    std::string capture(const body& b);
    void write(std::string_view text);

    value eval_node(const expr& e);
    value eval_slice(const slice_expr& s);
    value eval_compare(const compare_expr& c);
    value eval_filter(const filter_expr& f, const value& operand);
    call_args eval_arguments(const arguments& a);
};

// Python's binary operators on values (operators.cpp).
value binary_operation(binary_op op, const value& a, const value& b);
value unary_operation(unary_op op, const value& a);
bool contains(const value& container, const value& item);

// Whether a filter (filters.cpp) or a test (is_tests.cpp) of that name exists.
bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// The built-in functions (globals.cpp): range, dict, namespace, joiner, cycler, raise_exception, strftime_now.
void add_builtin_globals(dict& globals);

// Methods of strings, lists and dicts (methods.cpp): a bound method, or undefined when `name` is none.
value bound_method(const value& object, const std::string& name);
// The methods that change a list or dict in place (append, pop, update, ...): transformers renders in jinja2's
// ImmutableSandboxedEnvironment, where reaching one gives an undefined value that raises SecurityError when
// called ("is defined" is false, it prints as ""), so a template that appends fails there and fails here.
// The list is jinja2 3.1.6's (3.1.2 still let list.pop and list.clear through, and the attr filter).
bool is_unsafe_method(const value& object, const std::string& name);
// That undefined value, carrying the sandbox's message.
value unsafe_attribute(const value& object, const std::string& name);

// value <-> text as JSON (json_text.cpp): Python's json.dumps as transformers' tojson filter calls it.
struct json_dump_options {
    std::optional<std::string> indent;  // none: one line; else one level's text (indent=2: "  ", indent='\t')
    bool sort_keys = false;
    bool ensure_ascii = false;
    std::optional<std::string> item_separator;  // none: ", " on one line, "," with an indent
    std::string key_separator = ": ";
};
std::string to_json(const value& v, const json_dump_options& options);

}  // namespace troupe::jinja
