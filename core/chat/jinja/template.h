// jinja::chat_jinja_template: a parsed Jinja template and its rendering, the interpreter's public face.
//
//   auto t = jinja::parse_template(text);            // syntax errors: "line 3, column 14: expected ..."
//   jinja::dict vars; vars.set("messages", ...);
//   auto out = t->render(vars);                       // raise_exception(msg): exactly msg
//
// Defaults are those of transformers' apply_chat_template environment: trim_blocks and lstrip_blocks on,
// the last newline of the template dropped, the built-in functions range, dict, namespace,
// raise_exception and strftime_now, loop controls (break, continue) and {% generation %}.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/chat/jinja/value.h"
#include "core/result.h"

namespace boost::json {
class value;
}

namespace troupe::jinja {

struct body_holder;

struct template_options {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
    bool keep_trailing_newline = false;
};

class chat_jinja_template {
public:
    // The text for these variables (looked up before the built-in functions). Errors name the line and
    // column of the expression that failed; the template's raise_exception(message) gives the message as is.
    result<std::string> render(const dict& variables) const;

private:
    friend result<chat_jinja_template> parse_template(std::string_view, const template_options&);
    std::shared_ptr<const body_holder> body_;
};

result<chat_jinja_template> parse_template(std::string_view source, const template_options& options = {});

// A JSON document as template values: objects become dicts (key order kept), arrays lists, numbers int
// where integral in the text, float otherwise.
value value_from_json(const boost::json::value& json);

}  // namespace troupe::jinja
