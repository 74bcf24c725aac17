#include "core/chat/jinja/template.h"

#include <boost/json.hpp>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/lexer.h"
#include "core/chat/jinja/parser.h"

namespace troupe::jinja {

struct body_holder {
    body content;
};

namespace {

std::string position(int line, int column) {
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace

result<chat_jinja_template> parse_template(std::string_view source, const template_options& options) {
    try {
        const auto tokens =
            lex(source, lexer_options{options.trim_blocks, options.lstrip_blocks, options.keep_trailing_newline});
        auto holder = std::make_shared<body_holder>();
        holder->content = parse(tokens);
        chat_jinja_template t;
        t.body_ = std::move(holder);
        return t;
    } catch (const syntax_error& e) {
        return make_error("template syntax error at " + position(e.line, e.column) + ": " + e.what());
    }
}

result<std::string> chat_jinja_template::render(const dict& variables) const {
    dict globals;
    add_builtin_globals(globals);
    for (const auto& [k, v] : variables.items) globals.set(k, v);
    std::string out;
    try {
        evaluator ev(globals);
        ev.render(body_->content, out);
    } catch (const raised_error& e) {
        return make_error(e.what());
    } catch (const located_error& e) {
        return make_error("template error at " + position(e.line, e.column) + ": " + e.what());
    } catch (const render_error& e) {
        return make_error(std::string("template error: ") + e.what());
    }
    return out;
}

value value_from_json(const boost::json::value& json) {
    switch (json.kind()) {
        case boost::json::kind::null:
            return value::none();
        case boost::json::kind::bool_:
            return value::boolean(json.get_bool());
        case boost::json::kind::int64:
            return value::integer(json.get_int64());
        case boost::json::kind::uint64:
            return value::integer(static_cast<int64_t>(json.get_uint64()));
        case boost::json::kind::double_:
            return value::floating(json.get_double());
        case boost::json::kind::string:
            return value::string(std::string(json.get_string()));
        case boost::json::kind::array: {
            std::vector<value> items;
            for (const auto& v : json.get_array()) items.push_back(value_from_json(v));
            return value::list(std::move(items));
        }
        case boost::json::kind::object: {
            dict d;
            for (const auto& kv : json.get_object()) d.set(std::string(kv.key()), value_from_json(kv.value()));
            return value::dict(std::move(d));
        }
    }
    return value::none();
}

}  // namespace troupe::jinja
