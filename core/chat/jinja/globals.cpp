// The functions every template sees, as transformers' chat template environment provides them: jinja2's
// range, dict, namespace, joiner and cycler, and transformers' raise_exception and strftime_now.
#include <ctime>
#include <memory>

#include "core/chat/jinja/evaluator.h"

namespace troupe::jinja {
namespace {

int64_t int_arg(const value& v, const char* what) {
    if (v.kind == value_kind::boolean) return v.b;
    if (v.kind != value_kind::integer) {
        throw render_error(std::string("range() ") + what + " must be an integer, not " + type_name(v));
    }
    return v.i;
}

value range(const call_args& args, evaluator& ev) {
    args.expect_at_most("range()", 3, {});
    if (args.pos.empty()) throw render_error("range() expects at least 1 argument, got 0");
    int64_t start = 0;
    int64_t stop = 0;
    int64_t step = 1;
    if (args.pos.size() == 1) {
        stop = int_arg(args.pos[0], "stop");
    } else {
        start = int_arg(args.pos[0], "start");
        stop = int_arg(args.pos[1], "stop");
        if (args.pos.size() == 3) step = int_arg(args.pos[2], "step");
    }
    if (step == 0) throw render_error("range() arg 3 must not be zero");
    const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                               : (start > stop ? (start - stop - step - 1) / -step : 0);
    if (static_cast<uint64_t>(n) > ev.limits().max_loop_items) {
        throw render_error("range() of " + std::to_string(n) + " items passes the limit of " +
                           std::to_string(ev.limits().max_loop_items));
    }
    std::vector<value> items;
    items.reserve(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) items.push_back(value::integer(start + k * step));
    return value::list(std::move(items));
}

// dict(mapping or pairs, **kwargs) and namespace(...) take the same arguments.
dict dict_from(const call_args& args, const char* what) {
    if (args.pos.size() > 1) throw render_error(std::string(what) + " takes at most 1 positional argument");
    dict out;
    if (!args.pos.empty()) {
        const value& src = args.pos[0];
        if (src.kind == value_kind::dict || src.kind == value_kind::ns) {
            out = *src.d;
        } else {
            for (const value& pair : iterate(src)) {
                const std::vector<value> kv = iterate(pair);
                if (kv.size() != 2 || !kv[0].is_string()) {
                    throw render_error(std::string(what) + " needs a mapping or (string key, value) pairs");
                }
                out.set(kv[0].s, kv[1]);
            }
        }
    }
    for (const auto& [k, v] : args.kw) out.set(k, v);
    return out;
}

// jinja2's joiner(sep=", "): a function that gives "" the first time and sep after.
value joiner(const call_args& args, evaluator&) {
    args.expect_at_most("joiner()", 1, {"sep"});
    const value sep = args.get(0, "sep", value::string(", "));
    auto used = std::make_shared<bool>(false);
    return make_function("joiner", [sep, used](const call_args&, evaluator&) {
        if (!*used) {
            *used = true;
            return value::string("");
        }
        return sep;
    });
}

// jinja2's cycler(*items): .next() gives the current item and moves on (wrapping), .current the item next()
// gives next, .reset() goes back to the first.
value cycler(const call_args& args, evaluator&) {
    if (args.pos.empty()) throw render_error("cycler() needs at least one item");
    struct state {
        std::vector<value> items;
        size_t pos = 0;
        std::weak_ptr<dict> names;  // the object's attributes, to keep .current in step
        void set_current() const {
            if (auto d = names.lock()) d->set("current", items[pos]);
        }
    };
    auto st = std::make_shared<state>();
    st->items = args.pos;
    dict names;
    names.set("next", make_function("next", [st](const call_args&, evaluator&) {
                  value v = st->items[st->pos];
                  st->pos = (st->pos + 1) % st->items.size();
                  st->set_current();
                  return v;
              }));
    names.set("reset", make_function("reset", [st](const call_args&, evaluator&) {
                  st->pos = 0;
                  st->set_current();
                  return value::none();
              }));
    names.set("current", st->items[0]);
    value object = value::ns(std::move(names));
    st->names = object.d;
    return object;
}

}  // namespace

void add_builtin_globals(dict& globals) {
    globals.set("joiner", make_function("joiner", joiner));
    globals.set("cycler", make_function("cycler", cycler));
    globals.set("range", make_function("range", range));
    globals.set("dict", make_function("dict", [](const call_args& args, evaluator&) {
                    return value::dict(dict_from(args, "dict()"));
                }));
    globals.set("namespace", make_function("namespace", [](const call_args& args, evaluator&) {
                    return value::ns(dict_from(args, "namespace()"));
                }));
    globals.set("raise_exception", make_function("raise_exception", [](const call_args& args, evaluator&) -> value {
                    throw raised_error(to_str(args.get(0, "message")));
                }));
    globals.set("strftime_now", make_function("strftime_now", [](const call_args& args, evaluator&) {
                    const value format = args.get(0, "format");
                    if (!format.is_string()) throw render_error("strftime_now() needs a format string");
                    const std::time_t now = std::time(nullptr);
                    std::tm local{};
                    localtime_r(&now, &local);
                    char buf[512];
                    const size_t n = std::strftime(buf, sizeof buf, format.s.c_str(), &local);
                    return value::string(std::string(buf, n));
                }));
}

}  // namespace troupe::jinja
