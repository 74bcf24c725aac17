#include "core/chat/jinja/callable.h"

namespace troupe::jinja {

value call_args::get(size_t index, std::string_view name, value fallback) const {
    if (index < pos.size()) return pos[index];
    for (const auto& [k, v] : kw) {
        if (k == name) return v;
    }
    return fallback;
}

bool call_args::has(size_t index, std::string_view name) const {
    if (index < pos.size()) return true;
    for (const auto& kv : kw) {
        if (kv.first == name) return true;
    }
    return false;
}

void call_args::expect_at_most(std::string_view what, size_t n, std::initializer_list<std::string_view> names) const {
    if (pos.size() > n) {
        throw render_error(std::string(what) + " takes at most " + std::to_string(n) + " positional argument(s), " +
                           std::to_string(pos.size()) + " given");
    }
    for (const auto& kv : kw) {
        bool known = false;
        for (auto name : names) known = known || kv.first == name;
        if (!known) {
            std::string valid;
            for (auto name : names) valid += std::string(valid.empty() ? "" : ", ") + std::string(name);
            throw render_error(std::string(what) + " got an unexpected keyword argument '" + kv.first +
                               "' (valid: " + (valid.empty() ? "none" : valid) + ")");
        }
    }
}

value make_function(std::string name, std::function<value(const call_args&, evaluator&)> fn) {
    auto f = std::make_shared<native_function>();
    f->name = std::move(name);
    f->fn = std::move(fn);
    return value::function(std::move(f));
}

}  // namespace troupe::jinja
