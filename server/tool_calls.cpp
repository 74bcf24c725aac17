#include "server/tool_calls.h"

#include <boost/json.hpp>

#include "server/json_kind_name.h"

#include "core/chat/chat_formatter.h"
#include "core/json/precise_parse.h"

namespace troupe::server {

namespace json = boost::json;

namespace {

api_error tools_error(std::string message, std::string param) {
    return bad_request(std::move(message), std::move(param));
}

bool valid_function_name(std::string_view name) {
    if (name.empty() || name.size() > 64) return false;
    for (char c : name) {
        const bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

}  // namespace

std::optional<api_error> read_tools(const json::value& v, tool_request& out) {
    if (!v.is_array()) {
        return tools_error("tools: expected an array of tools, got " + std::string(json_kind_name(v)), "tools");
    }
    for (size_t i = 0; i < v.get_array().size(); ++i) {
        const json::value& t = v.get_array()[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        const json::object* o = t.if_object();
        if (!o)
            return tools_error(where + ": expected an object {\"type\": \"function\", \"function\": {...}}", "tools");
        const json::value* type = o->if_contains("type");
        if (!type || !type->is_string() || type->get_string() != "function") {
            return tools_error(where + ".type: must be \"function\" (the only tool type troupe serves)", "tools");
        }
        const json::value* fn = o->if_contains("function");
        if (!fn || !fn->is_object()) {
            return tools_error(where + ".function: required, an object with name, description and parameters", "tools");
        }
        const json::value* name = fn->get_object().if_contains("name");
        if (!name || !name->is_string() || !valid_function_name(name->get_string())) {
            return tools_error(
                where + ".function.name: required, 1 to 64 characters of a-z, A-Z, 0-9, underscore or dash", "tools");
        }
        if (const json::value* d = fn->get_object().if_contains("description"); d && !d->is_string()) {
            return tools_error(
                where + ".function.description: expected a string, got " + std::string(json_kind_name(*d)), "tools");
        }
        if (const json::value* p = fn->get_object().if_contains("parameters"); p && !p->is_object()) {
            return tools_error(
                where + ".function.parameters: expected a JSON Schema object, got " + std::string(json_kind_name(*p)),
                "tools");
        }
        out.tools.push_back(t);
    }
    out.given = !out.tools.empty();
    return std::nullopt;
}

std::optional<api_error> read_tool_choice(const json::value& v, tool_request& out) {
    out.choice_given = true;
    if (v.is_string()) {
        const auto s = v.get_string();
        if (s == "none") {
            out.choice = tool_choice_mode::none;
            return std::nullopt;
        }
        if (s == "auto") {
            out.choice = tool_choice_mode::automatic;
            return std::nullopt;
        }
        if (s == "required") {
            out.choice = tool_choice_mode::required;
            return std::nullopt;
        }
        return tools_error("tool_choice: unknown value '" + std::string(s) + "' (valid: none, auto, required)",
                           "tool_choice");
    }
    if (const json::object* o = v.if_object()) {
        const json::value* type = o->if_contains("type");
        const json::value* fn = o->if_contains("function");
        const json::value* name = fn && fn->is_object() ? fn->get_object().if_contains("name") : nullptr;
        if (!type || !type->is_string() || type->get_string() != "function" || !name || !name->is_string()) {
            return tools_error("tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}",
                               "tool_choice");
        }
        out.choice = tool_choice_mode::required;
        out.forced_name = std::string(name->get_string());
        return std::nullopt;
    }
    return tools_error("tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}, got " +
                           std::string(json_kind_name(v)),
                       "tool_choice");
}

std::optional<api_error> finish_tools(const tool_request& t) {
    if (t.choice_given && !t.given) {
        return tools_error("tool_choice: only allowed when tools are specified", "tool_choice");
    }
    if (!t.forced_name.empty()) {
        for (const auto& tool : t.tools) {
            if (tool.at("function").at("name").get_string() == t.forced_name) return std::nullopt;
        }
        return tools_error("tool_choice: the function '" + t.forced_name + "' is not among the tools", "tool_choice");
    }
    return std::nullopt;
}

std::optional<api_error> read_message_tool_calls(const json::value& v, const std::string& where, json::array& out) {
    if (!v.is_array()) return tools_error(where + ": expected an array of tool calls", "messages");
    for (size_t i = 0; i < v.get_array().size(); ++i) {
        const std::string at = where + "[" + std::to_string(i) + "]";
        const json::object* call = v.get_array()[i].if_object();
        const json::value* fn = call ? call->if_contains("function") : nullptr;
        const json::object* f = fn ? fn->if_object() : nullptr;
        const json::value* name = f ? f->if_contains("name") : nullptr;
        if (!f || !name || !name->is_string()) {
            return tools_error(
                at + ": expected {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                "messages");
        }
        json::object fn_out{{"name", name->get_string()}};
        const json::value* args = f->if_contains("arguments");
        if (args && args->is_string()) {
            // OpenAI sends arguments as JSON text; the templates (transformers' convention) want the object.
            boost::system::error_code ec;
            json::value parsed = json_text::parse_precise(args->get_string(), ec);
            if (ec || !parsed.is_object()) {
                return tools_error(at + ".function.arguments: expected a JSON object as text, got '" +
                                       std::string(args->get_string()) + "'",
                                   "messages");
            }
            fn_out["arguments"] = std::move(parsed);
        } else if (args && args->is_object()) {
            fn_out["arguments"] = *args;
        } else if (!args || args->is_null()) {
            fn_out["arguments"] = json::object{};
        } else {
            return tools_error(at + ".function.arguments: expected a string of JSON", "messages");
        }
        json::object out_call{{"type", "function"}, {"function", std::move(fn_out)}};
        if (const json::value* id = call->if_contains("id"); id && id->is_string()) out_call["id"] = id->get_string();
        out.push_back(std::move(out_call));
    }
    return std::nullopt;
}

namespace {

// The replies a forced call may be in the llama3 format: {"name": <a tool's>, "parameters": <its schema>}.
json::object forced_call_schema(const tool_request& t) {
    json::array calls;
    for (const auto& tool : t.tools) {
        const json::object& fn = tool.at("function").get_object();
        if (!t.forced_name.empty() && fn.at("name").get_string() != t.forced_name) continue;
        const json::value* params = fn.if_contains("parameters");
        calls.push_back(json::object{
            {"type", "object"},
            {"properties",
             json::object{{"name", json::object{{"const", fn.at("name")}}},
                          {"parameters", params ? *params : json::value(json::object{{"type", "object"}})}}},
            {"required", json::array{"name", "parameters"}},
            {"additionalProperties", false}});
    }
    return json::object{{"anyOf", std::move(calls)}};
}

}  // namespace

std::optional<api_error> resolve_tools(const chat_formatter* formatter, tool_request& t, response_format& format) {
    t.format = tool_call_format::none;
    const bool jinja = formatter && formatter->uses_jinja();
    const std::string name = formatter ? formatter->name() : std::string("built-in");
    if (t.conversation_has_tools && !jinja) {
        return tools_error(
            "messages: tool calls and tool results need the model's own chat template, and this model is served "
            "with the built-in '" +
                name + "' template (no usable tokenizer.chat_template)",
            "messages");
    }
    if (!t.given || t.choice == tool_choice_mode::none) return std::nullopt;
    if (!jinja || !formatter->reads_tools()) {
        return tools_error("tools: the model's chat template (" + name +
                               ") does not define tools (it never reads the `tools` variable), so the model cannot "
                               "be shown them; send the request without tools, or serve a model whose template "
                               "supports tool calling",
                           "tools");
    }
    if (t.choice == tool_choice_mode::required) {
        // A required or named call is forced as vLLM forces it, for every template: the reply is held to the call
        // as JSON, {"name": <a tool's>, "parameters": <its schema>}, and read as such (the llama3 parser reads that
        // form), whatever markers the template's own format writes around its calls.
        const std::string what = t.forced_name.empty() ? "\"required\"" : "a named function";
        if (format.what != response_format::kind::text) {
            return tools_error(
                "tool_choice: " + what + " cannot be combined with response_format (both set the output's grammar)",
                "tool_choice");
        }
        t.format = tool_call_format::llama3;
        format.what = response_format::kind::json_schema;
        format.schema = json::serialize(forced_call_schema(t));
        return std::nullopt;
    }
    if (formatter->tool_format() == tool_call_format::none) {
        return tools_error(
            "tools: the model's chat template reads tools, but its tool-call format is not one troupe parses "
            "(hermes <tool_call>, llama3 <|python_tag|> / ipython, pythonic [f(k=v)], mistral [TOOL_CALLS], phi4 "
            "<|tool_call|>, nemotron <TOOLCALL>, seed_oss <seed:tool_call>, glm45 <arg_key>, minimax_m2 "
            "<minimax:tool_call>, command_r7b <|START_ACTION|>, deepseek <｜tool▁calls▁begin｜>, "
            "kimi_k2 <|tool_calls_section_begin|>, gemma4 <|tool_call>); tool_choice \"required\" or a named "
            "function still works",
            "tools");
    }
    t.format = formatter->tool_format();
    return std::nullopt;
}

const json::array* template_tools(const tool_request& t) {
    return t.given && t.choice != tool_choice_mode::none ? &t.tools : nullptr;
}

tool_reply parse_tool_reply(tool_call_format format, std::string_view text, std::string_view finish_reason,
                            std::string_view id_prefix) {
    tool_reply out;
    parsed_reply parsed = parse_tool_calls(format, text);
    out.content = std::move(parsed.content);
    out.tool_calls = tool_calls_json(parsed.tool_calls, "call_" + std::string(id_prefix) + "_");
    out.finish_reason = std::string(finish_reason);
    if (!out.tool_calls.empty() && finish_reason == "stop") out.finish_reason = "tool_calls";
    return out;
}

json::object assistant_message(std::string_view content, const json::array& tool_calls) {
    json::object m{{"role", "assistant"}};
    if (tool_calls.empty()) {
        m["content"] = content;
    } else {
        m["content"] = content.empty() ? json::value(nullptr) : json::value(content);
        m["tool_calls"] = tool_calls;
    }
    return m;
}

std::string tool_call_stream::push(std::string_view delta) {
    held_ += delta;
    if (in_call_) return {};
    // llama3's and pythonic's call is the whole reply, opening with '{' or '['.
    const char opening = format_ == tool_call_format::llama3 ? '{' : format_ == tool_call_format::pythonic ? '[' : '\0';
    if (opening != '\0' && at_start_) {
        const size_t first = held_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return {};  // only spaces so far: the reply may still open with a call
        if (held_[first] == opening) {
            in_call_ = true;
            return {};
        }
        at_start_ = false;
    }
    const std::string_view marker = tool_call_open_marker(format_);
    if (marker.empty()) return std::exchange(held_, {});
    if (const size_t at = held_.find(marker); at != std::string::npos) {
        std::string out = held_.substr(0, at);
        held_.erase(0, at);
        in_call_ = true;
        return out;
    }
    // Hold back the longest end of the text that is the start of the marker.
    size_t keep = std::min(held_.size(), marker.size() - 1);
    while (keep > 0 && std::string_view(held_).substr(held_.size() - keep) != marker.substr(0, keep)) --keep;
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::vector<parsed_tool_call> tool_call_stream::finish(std::string& rest_content) {
    if (!in_call_) {
        rest_content = std::exchange(held_, {});
        return {};
    }
    parsed_reply parsed = parse_tool_calls(format_, held_);
    if (parsed.tool_calls.empty()) {
        rest_content = std::exchange(held_, {});
        return {};
    }
    held_.clear();
    rest_content = std::move(parsed.content);
    return std::move(parsed.tool_calls);
}

std::string chat_tool_calls_chunk_json(std::string_view id, int64_t created, std::string_view model, int32_t index,
                                       const json::array& tool_calls, bool first, bool with_usage_null) {
    json::array calls;
    for (size_t k = 0; k < tool_calls.size(); ++k) {
        json::object c = tool_calls[k].get_object();
        c["index"] = static_cast<int64_t>(k);
        calls.push_back(std::move(c));
    }
    json::object delta;
    if (first) delta["role"] = "assistant";
    delta["tool_calls"] = std::move(calls);
    json::object choice{
        {"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    json::object o{{"id", id},
                   {"object", "chat.completion.chunk"},
                   {"created", created},
                   {"model", model},
                   {"choices", json::array{std::move(choice)}}};
    if (with_usage_null) o["usage"] = nullptr;
    return json::serialize(o);
}

}  // namespace troupe::server
