// Callables and their arguments: the globals (range, namespace, raise_exception, ...), bound methods
// ('x'.strip, d.items, ...), macros and caller(); plus the argument binder the filters and tests use.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/chat/jinja/value.h"

namespace troupe::jinja {

class evaluator;

// The arguments of one call: positional, then keyword, as written.
struct call_args {
    std::vector<value> pos;
    std::vector<std::pair<std::string, value>> kw;

    // The argument at position `index` or named `name`; `fallback` when neither was given.
    value get(size_t index, std::string_view name, value fallback = value::undefined("")) const;
    bool has(size_t index, std::string_view name) const;
    // Raises naming `what` when more positional arguments than `n` or a keyword outside `names` were given.
    void expect_at_most(std::string_view what, size_t n, std::initializer_list<std::string_view> names) const;
};

struct callable {
    std::string name;
    virtual ~callable() = default;
    virtual value call(const call_args& args, evaluator& ev) const = 0;
};

// A callable made of a C++ function.
struct native_function : callable {
    std::function<value(const call_args&, evaluator&)> fn;
    value call(const call_args& args, evaluator& ev) const override { return fn(args, ev); }
};

value make_function(std::string name, std::function<value(const call_args&, evaluator&)> fn);

}  // namespace troupe::jinja
