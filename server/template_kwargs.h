// template_kwargs: the chat request's `chat_template_kwargs`, as vLLM and llama-server accept it: an object
// whose keys become further variables of the model's chat template ({"enable_thinking": false} for Qwen3's
// and GLM's templates, {"thinking": true} for DeepSeek V3.1's). A key may not replace a variable the
// renderer sets (messages, tools, add_generation_prompt, bos_token, ...) or one of the interpreter's
// globals: that is a 400 naming the key. A template that never reads a key ignores it, as jinja2 does; the
// built-in templates ignore them all.
#pragma once

#include <boost/json/fwd.hpp>

#include <optional>

#include "server/api_error.h"

namespace troupe::server {

std::optional<api_error> read_template_kwargs(const boost::json::value& v, boost::json::object& out);

}  // namespace troupe::server
