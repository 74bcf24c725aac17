// The statement half of the evaluator: scopes, output, loops, assignments, macros and call blocks.
#include "core/chat/jinja/evaluator.h"

#include <algorithm>

namespace troupe::jinja {
namespace {

// A macro (or a call block's body as caller()) as a value.
struct macro_function : callable {
    evaluator::macro_call m;
    value call(const call_args& args, evaluator& ev) const override { return ev.run_macro(m, args); }
};

template <class... fs>
struct overloaded : fs... {
    using fs::operator()...;
};

}  // namespace

evaluator::evaluator(const dict& globals, evaluator_limits limits)
    : globals_(globals), limits_(limits), scope_(std::make_shared<scope>()) {}

void evaluator::render(const body& b, std::string& out) {
    out_ = &out;
    render_body(b);
    out_ = nullptr;
}

void evaluator::write(std::string_view text) {
    if (out_->size() + text.size() > limits_.max_output_bytes) {
        throw render_error("the rendered text passes the limit of " + std::to_string(limits_.max_output_bytes) +
                           " bytes");
    }
    out_->append(text);
}

value evaluator::lookup(const std::string& name) const {
    for (const scope* s = scope_.get(); s; s = s->parent.get()) {
        if (const value* v = s->vars.find(name)) return *v;
    }
    if (const value* v = globals_.find(name)) return *v;
    return value::undefined("'" + name + "' is undefined");
}

void evaluator::assign(const std::string& name, value v) {
    scope_->vars.set(name, std::move(v));
}

evaluator::flow evaluator::render_body(const body& b) {
    for (const auto& s : b) {
        const flow f = render_stmt(*s);
        if (f != flow::normal) return f;
    }
    return flow::normal;
}

std::string evaluator::capture(const body& b) {
    std::string text;
    std::string* saved = out_;
    out_ = &text;
    const flow f = render_body(b);
    out_ = saved;
    if (f != flow::normal) throw render_error("'break' or 'continue' outside a for loop");
    return text;
}

evaluator::flow evaluator::render_stmt(const stmt& s) {
    try {
        return std::visit(
            overloaded{
                [&](const text_stmt& t) {
                    write(t.text);
                    return flow::normal;
                },
                [&](const output_stmt& o) {
                    write(to_str(eval(*o.value)));
                    return flow::normal;
                },
                [&](const if_stmt& i) {
                    for (const auto& [condition, branch] : i.branches) {
                        if (eval(*condition).truthy()) return render_body(branch);
                    }
                    return render_body(i.otherwise);
                },
                [&](const for_stmt& f) { return render_for(f); },
                [&](const set_stmt& a) {
                    render_set(a);
                    return flow::normal;
                },
                [&](const set_block_stmt& a) {
                    value v = value::string(capture(a.content));
                    for (const auto& f : a.filters) v = eval_filter(std::get<filter_expr>(f->node), v);
                    assign(a.target, std::move(v));
                    return flow::normal;
                },
                [&](const macro_stmt& m) {
                    auto fn = std::make_shared<macro_function>();
                    fn->name = m.name;
                    fn->m = macro_call{m.name,          &m.params,     m.content, scope_, value::undefined(""),
                                       m.catch_varargs, m.catch_kwargs};
                    assign(m.name, value::function(std::move(fn)));
                    return flow::normal;
                },
                [&](const call_block_stmt& c) {
                    const auto& call = std::get<call_expr>(c.call->node);
                    const value callee = eval(*call.callee);
                    const auto* target = callee.fn ? dynamic_cast<const macro_function*>(callee.fn.get()) : nullptr;
                    if (!target) throw render_error("a call block must call a macro");
                    auto caller = std::make_shared<macro_function>();
                    caller->name = "caller";
                    caller->m = macro_call{"caller", &c.caller_params, c.content, scope_, value::undefined("")};
                    macro_call m = target->m;
                    m.caller = value::function(std::move(caller));
                    write(to_str(run_macro(m, eval_arguments(call.args))));
                    return flow::normal;
                },
                [&](const filter_block_stmt& f) {
                    value v = value::string(capture(f.content));
                    for (const auto& filter : f.filters) v = eval_filter(std::get<filter_expr>(filter->node), v);
                    write(to_str(v));
                    return flow::normal;
                },
                [&](const break_stmt&) { return flow::break_loop; },
                [&](const continue_stmt&) { return flow::continue_loop; },
                [&](const generation_stmt& g) { return render_body(g.content); },
                [&](const with_stmt& w) {
                    dict names;
                    for (const auto& [name, e] : w.assignments) names.set(name, eval(*e));
                    const std::shared_ptr<scope> saved = scope_;
                    scope_ = std::make_shared<scope>(scope{std::move(names), saved});
                    flow f = flow::normal;
                    try {
                        f = render_body(w.content);
                    } catch (...) {
                        scope_ = saved;
                        throw;
                    }
                    scope_ = saved;
                    return f;
                },
            },
            s.node);
    } catch (const located_error&) {
        throw;
    } catch (const render_error& e) {
        throw located_error(e.what(), s.line, s.column);
    }
}

namespace {

void bind_targets(dict& vars, const std::vector<std::string>& targets, const value& item) {
    if (targets.size() == 1) {
        vars.set(targets[0], item);
        return;
    }
    const std::vector<value> parts = iterate(item);
    if (parts.size() != targets.size()) {
        throw render_error(std::string(parts.size() > targets.size() ? "too many" : "not enough") +
                           " values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                           std::to_string(parts.size()) + ")");
    }
    for (size_t k = 0; k < targets.size(); ++k) vars.set(targets[k], parts[k]);
}

value make_loop(size_t index, const std::vector<value>& items, int64_t depth0) {
    const auto n = static_cast<int64_t>(items.size());
    const auto k = static_cast<int64_t>(index);
    dict loop;
    loop.set("index", value::integer(k + 1));
    loop.set("index0", value::integer(k));
    loop.set("revindex", value::integer(n - k));
    loop.set("revindex0", value::integer(n - k - 1));
    loop.set("first", value::boolean(k == 0));
    loop.set("last", value::boolean(k == n - 1));
    loop.set("length", value::integer(n));
    loop.set("depth", value::integer(depth0 + 1));
    loop.set("depth0", value::integer(depth0));
    loop.set("previtem", k > 0 ? items[index - 1] : value::undefined("there is no previous item"));
    loop.set("nextitem", k + 1 < n ? items[index + 1] : value::undefined("there is no next item"));
    loop.set("cycle", make_function("cycle", [index](const call_args& args, evaluator&) {
                 if (args.pos.empty()) throw render_error("loop.cycle() needs at least one value");
                 return args.pos[index % args.pos.size()];
             }));
    return value::dict(std::move(loop));
}

}  // namespace

evaluator::flow evaluator::render_for(const for_stmt& f) {
    return render_loop(f, eval(*f.iterable), 0);
}

evaluator::flow evaluator::render_loop(const for_stmt& f, const value& iterable, int64_t depth0) {
    std::vector<value> items = iterate(iterable);
    if (items.size() > limits_.max_loop_items) {
        throw render_error("a for loop over " + std::to_string(items.size()) + " items passes the limit of " +
                           std::to_string(limits_.max_loop_items));
    }
    if (f.filter) {
        std::vector<value> kept;
        for (auto& item : items) {
            auto s = std::make_shared<scope>(scope{{}, scope_});
            bind_targets(s->vars, f.targets, item);
            std::swap(scope_, s);
            const bool keep = eval(*f.filter).truthy();
            std::swap(scope_, s);
            if (keep) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    const std::shared_ptr<scope> outer = scope_;
    for (size_t k = 0; k < items.size(); ++k) {
        scope_ = std::make_shared<scope>(scope{{}, outer});
        value loop = make_loop(k, items, depth0);
        if (f.recursive) {
            // loop(xs): the same body over xs one level deeper, as text; `loop` keeps its attributes.
            if (depth0 + 1 >= limits_.max_call_depth) {
                throw render_error("a recursive loop nests deeper than " + std::to_string(limits_.max_call_depth));
            }
            value recurse = make_function("loop", [this, &f, depth0](const call_args& args, evaluator&) {
                if (args.pos.size() != 1 || !args.kw.empty()) throw render_error("loop() takes one iterable");
                std::string text;
                std::string* saved_out = out_;
                const std::shared_ptr<scope> saved_scope = scope_;
                out_ = &text;
                try {
                    render_loop(f, args.pos[0], depth0 + 1);
                } catch (...) {
                    out_ = saved_out;
                    scope_ = saved_scope;
                    throw;
                }
                out_ = saved_out;
                scope_ = saved_scope;
                return value::string(std::move(text));
            });
            recurse.d = loop.d;
            loop = std::move(recurse);
        }
        scope_->vars.set("loop", std::move(loop));
        flow fl = flow::normal;
        try {
            bind_targets(scope_->vars, f.targets, items[k]);
            fl = render_body(f.loop_body);
        } catch (...) {
            scope_ = outer;
            throw;
        }
        scope_ = outer;
        if (fl == flow::break_loop) break;
    }
    if (items.empty()) {
        scope_ = std::make_shared<scope>(scope{{}, outer});
        const flow fl = render_body(f.otherwise);
        scope_ = outer;
        return fl;
    }
    return flow::normal;
}

void evaluator::render_set(const set_stmt& s) {
    value v = eval(*s.value);
    if (!s.attribute.empty()) {
        value target = lookup(s.targets[0]);
        if (target.kind != value_kind::ns) {
            throw render_error("cannot assign attribute '" + s.attribute + "' on '" + s.targets[0] +
                               "': only namespace() objects take attribute assignments, this is a " +
                               type_name(target));
        }
        target.d->set(s.attribute, std::move(v));
        return;
    }
    if (s.targets.size() == 1) {
        assign(s.targets[0], std::move(v));
        return;
    }
    dict parts;
    bind_targets(parts, s.targets, v);
    for (auto& [name, part] : parts.items) assign(name, std::move(part));
}

value evaluator::run_macro(const macro_call& m, const call_args& args) {
    const auto& params = *m.params;
    if (args.pos.size() > params.size() && !m.catch_varargs) {
        throw render_error("macro '" + m.name + "' takes not more than " + std::to_string(params.size()) +
                           " argument(s), " + std::to_string(args.pos.size()) + " given");
    }
    dict extra_kwargs;
    for (const auto& [name, v] : args.kw) {
        bool known = false;
        for (const auto& p : params) known = known || p.name == name;
        if (!known && !m.catch_kwargs) {
            throw render_error("macro '" + m.name + "' takes no keyword argument '" + name + "'");
        }
        if (!known) extra_kwargs.set(name, v);
    }
    if (depth_ >= limits_.max_call_depth) {
        throw render_error("macro calls nest deeper than " + std::to_string(limits_.max_call_depth));
    }
    const std::shared_ptr<scope> saved = scope_;
    scope_ = std::make_shared<scope>(scope{{}, m.closure});
    ++depth_;
    std::string text;
    try {
        if (!m.caller.is_undefined()) scope_->vars.set("caller", m.caller);
        if (m.catch_varargs) {
            const size_t named = std::min(args.pos.size(), params.size());
            scope_->vars.set("varargs",
                             value::tuple({args.pos.begin() + static_cast<std::ptrdiff_t>(named), args.pos.end()}));
        }
        if (m.catch_kwargs) scope_->vars.set("kwargs", value::dict(std::move(extra_kwargs)));
        for (size_t k = 0; k < params.size(); ++k) {
            const auto& p = params[k];
            if (k < args.pos.size()) {
                scope_->vars.set(p.name, args.pos[k]);
            } else if (args.has(k, p.name)) {
                scope_->vars.set(p.name, args.get(k, p.name));
            } else if (p.fallback) {
                scope_->vars.set(p.name, eval(*p.fallback));
            } else {
                scope_->vars.set(p.name, value::undefined("parameter '" + p.name + "' was not provided"));
            }
        }
        text = capture(*m.content);
    } catch (...) {
        --depth_;
        scope_ = saved;
        throw;
    }
    --depth_;
    scope_ = saved;
    return value::string(std::move(text));
}

}  // namespace troupe::jinja
