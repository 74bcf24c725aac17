#include "server/template_kwargs.h"

#include <boost/json.hpp>

#include "core/chat/chat_formatter.h"
#include "server/json_kind_name.h"

namespace troupe::server {

std::optional<api_error> read_template_kwargs(const boost::json::value& v, boost::json::object& out) {
    const boost::json::object* o = v.if_object();
    if (!o) {
        return bad_request(
            "chat_template_kwargs: expected an object of chat template variables (e.g. {\"enable_thinking\": "
            "false}), got " +
                std::string(json_kind_name(v)),
            "chat_template_kwargs");
    }
    for (const auto& kv : *o) {
        if (is_reserved_template_variable(kv.key())) {
            return bad_request("chat_template_kwargs." + std::string(kv.key()) + ": '" + std::string(kv.key()) +
                                   "' is a variable the server sets for every chat template (messages, tools, "
                                   "documents, add_generation_prompt, the special tokens) or a template "
                                   "global; it cannot be overridden, use the request's own fields",
                               "chat_template_kwargs");
        }
    }
    out = *o;
    return std::nullopt;
}

}  // namespace troupe::server
