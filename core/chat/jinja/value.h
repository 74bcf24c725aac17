// jinja::value: the dynamically typed value a Jinja template computes with, with Python's semantics as
// jinja2 (on CPython) gives them: None, bool, int, float, str, list, tuple, dict (insertion-ordered, string
// keys), namespace, callables, and jinja2's default Undefined (prints as "", is falsy, iterates as empty;
// using it further raises with the hint it carries, e.g. "'dict object' has no attribute 'tools'").
//
// Lists, dicts and namespaces are shared by reference, as Python objects are: `ns.found = true` and
// `list.append(x)` change the one object every name holding it sees.
//
// Strings are UTF-8 bytes; lengths, indexing and slicing count code points as Python does.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::jinja {

// A failure while rendering (or while checking a call's arguments): carried up to render(), which returns
// it as an error value. Exceptions stay inside the interpreter: every public entry point catches them.
struct render_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The template's own raise_exception(message): its message is reported unchanged.
struct raised_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class value_kind { undefined, none, boolean, integer, floating, string, list, tuple, dict, ns, callable };

struct value;
struct dict;
struct callable;
using list_ptr = std::shared_ptr<std::vector<value>>;
using dict_ptr = std::shared_ptr<dict>;
using callable_ptr = std::shared_ptr<const callable>;

struct value {
    value_kind kind = value_kind::undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
    std::string s;  // string; for undefined: the hint its use raises with
    list_ptr l;     // list, tuple
    dict_ptr d;     // dict, namespace; named attributes of a tuple (groupby's) or callable (a recursive loop)
    callable_ptr fn;

    value() = default;
    static value undefined(std::string hint);
    static value none();
    static value boolean(bool v);
    static value integer(int64_t v);
    static value floating(double v);
    static value string(std::string v);
    static value list(std::vector<value> items = {});
    static value tuple(std::vector<value> items);
    static value dict(jinja::dict items);
    static value dict();
    static value ns(jinja::dict items);
    static value function(callable_ptr f);

    bool is_undefined() const { return kind == value_kind::undefined; }
    bool is_none() const { return kind == value_kind::none; }
    bool is_string() const { return kind == value_kind::string; }
    bool is_number() const {
        return kind == value_kind::integer || kind == value_kind::floating || kind == value_kind::boolean;
    }
    bool is_sequence() const { return kind == value_kind::list || kind == value_kind::tuple; }
    bool is_mapping() const { return kind == value_kind::dict; }

    // Python's truth value (undefined is false).
    bool truthy() const;
    // The number as a double (bool and int too); the caller checked is_number().
    double as_double() const;
};

// An insertion-ordered dict with string keys (Python dicts keep insertion order; the dicts chat templates
// see are JSON objects). Lookup is linear: messages and tool schemas have a handful of keys. A key of another
// type (an int, as in `{0: 0, 512: 128}`, or None, a bool, a float) is held as the text dict_key() makes of
// it, which no string key can equal; key_value() gives the key back.
struct dict {
    std::vector<std::pair<std::string, value>> items;

    const value* find(std::string_view key) const;
    value* find(std::string_view key);
    void set(std::string key, value v);
    bool erase(std::string_view key);
};

// The key text a dict holds `key` under: a string as it is, another scalar tagged (raises, as Python's
// "unhashable type", for a list or dict). Python's equal keys give one text: 1, 1.0 and True are one key.
std::string dict_key(const value& key);
// The key a dict's key text stands for: the string, or the scalar dict_key() tagged.
value key_value(const std::string& key);

// The Python type name ('str', 'int', 'NoneType', ...), for error messages.
std::string type_name(const value& v);

// Raises (render_error) with the undefined value's hint; for using an undefined value as more than text.
[[noreturn]] void fail_undefined(const value& v);

// str(v) as a template prints it: "None", "True", Python's float repr, lists as their repr, undefined "".
std::string to_str(const value& v);
// repr(v): strings quoted as Python quotes them.
std::string repr(const value& v);
// Python's repr of a float: the shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string float_repr(double x);

// Python ==: numbers across int/float/bool, sequences and dicts by content.
bool equal(const value& a, const value& b);
// Python <: numbers, strings (code point order), sequences lexicographically; raises otherwise.
bool less(const value& a, const value& b);

// The items a for loop visits: a list's or tuple's items, a dict's keys, a string's characters; undefined
// gives none. Raises for what Python cannot iterate.
std::vector<value> iterate(const value& v);
// len(v); raises for what has no length (undefined is 0, as jinja2's length filter gives).
int64_t length(const value& v);

// UTF-8 helpers: the byte offset of each code point, and the code points of a string as strings.
std::vector<size_t> code_point_offsets(std::string_view s);
std::vector<std::string> code_points(std::string_view s);

}  // namespace troupe::jinja
