// The field readers share one shape: read(value, name) -> an error message or nothing, so that each
// request kind is a table of (field name, reader). Numbers accept any JSON number of the right kind;
// null means "absent" for every optional field, as OpenAI's SDKs send it.
#include "server/request_parser.h"

#include <boost/json.hpp>

#include "server/json_kind_name.h"
#include "server/template_kwargs.h"

#include "core/json/precise_parse.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>

namespace troupe::server {
namespace json = boost::json;
namespace {

using field_fn = std::function<std::optional<api_error>(const json::value&)>;
struct field {
    std::string_view name;
    field_fn read;
};

api_error wrong_type(std::string_view name, std::string_view expected, const json::value& v) {
    return bad_request(std::string(name) + ": expected " + std::string(expected) + ", got " + json_kind_name(v),
                       std::string(name));
}

std::optional<double> number_of(const json::value& v) {
    if (v.is_int64()) return static_cast<double>(v.get_int64());
    if (v.is_uint64()) return static_cast<double>(v.get_uint64());
    if (v.is_double()) return v.get_double();
    return std::nullopt;
}

// An integer; a double with an integral value is accepted (JavaScript clients send 5.0 as 5 anyway).
std::optional<int64_t> integer_of(const json::value& v) {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64()) {
        if (v.get_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
        return static_cast<int64_t>(v.get_uint64());
    }
    if (v.is_double()) {
        const double d = v.get_double();
        if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    return std::nullopt;
}

std::string num_text(double x) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
}

field float_field(std::string_view name, float& out, double lo, double hi) {
    return {name, [name, &out, lo, hi](const json::value& v) -> std::optional<api_error> {
                auto x = number_of(v);
                if (!x) return wrong_type(name, "a number", v);
                if (!(*x >= lo && *x <= hi)) {
                    return bad_request(std::string(name) + ": must be between " + num_text(lo) + " and " +
                                           num_text(hi) + ", got " + num_text(*x),
                                       std::string(name));
                }
                out = static_cast<float>(*x);
                return std::nullopt;
            }};
}

template <class T>
field int_field(std::string_view name, T& out, int64_t lo, int64_t hi) {
    return {name, [name, &out, lo, hi](const json::value& v) -> std::optional<api_error> {
                auto x = integer_of(v);
                if (!x) return wrong_type(name, "an integer", v);
                if (*x < lo || *x > hi) {
                    return bad_request(std::string(name) + ": must be between " + std::to_string(lo) + " and " +
                                           std::to_string(hi) + ", got " + std::to_string(*x),
                                       std::string(name));
                }
                out = static_cast<T>(*x);
                return std::nullopt;
            }};
}

// max_tokens / max_completion_tokens: also notes that the client chose it (a choice past the context is
// refused unless truncate_to_context; the config's default is only capped).
field max_tokens_field(std::string_view name, generation_request& r) {
    field f = int_field(name, r.sampling.max_tokens, 1, 1 << 30);
    return {name, [read = std::move(f.read), &r](const json::value& v) -> std::optional<api_error> {
                r.max_tokens_given = true;
                return read(v);
            }};
}

field bool_field(std::string_view name, bool& out) {
    return {name, [name, &out](const json::value& v) -> std::optional<api_error> {
                if (!v.is_bool()) return wrong_type(name, "a boolean", v);
                out = v.get_bool();
                return std::nullopt;
            }};
}

field ignored_string(std::string_view name) {
    return {name, [name](const json::value& v) -> std::optional<api_error> {
                if (!v.is_string()) return wrong_type(name, "a string", v);
                return std::nullopt;
            }};
}

// OpenAI fields that change nothing troupe produces (bookkeeping and hints), checked for their type and accepted: a
// client written for OpenAI sends them (metadata and store for stored completions, service_tier).
field ignored_metadata() {
    return {"metadata", [](const json::value& v) -> std::optional<api_error> {
                if (v.is_null()) return std::nullopt;
                if (!v.is_object()) return wrong_type("metadata", "an object of strings", v);
                for (const auto& kv : v.get_object()) {
                    if (!kv.value().is_string()) {
                        return wrong_type("metadata." + std::string(kv.key()), "a string", kv.value());
                    }
                }
                return std::nullopt;
            }};
}

field ignored_bool(std::string_view name) {
    return {name, [name](const json::value& v) -> std::optional<api_error> {
                if (!v.is_bool() && !v.is_null()) return wrong_type(name, "a boolean", v);
                return std::nullopt;
            }};
}

field unsupported(std::string_view name, std::string why) {
    return {name, [name, why](const json::value&) -> std::optional<api_error> {
                return bad_request(std::string(name) + ": " + why, std::string(name));
            }};
}

// stop: a string or an array of up to 4 non-empty strings.
field stop_field(std::vector<std::string>& out) {
    return {"stop", [&out](const json::value& v) -> std::optional<api_error> {
                std::vector<std::string> stops;
                auto add = [&](const json::value& s) -> std::optional<api_error> {
                    if (!s.is_string()) return wrong_type("stop", "a string or an array of strings", s);
                    if (s.get_string().empty()) return bad_request("stop: a stop string cannot be empty", "stop");
                    stops.emplace_back(s.get_string());
                    return std::nullopt;
                };
                if (v.is_array()) {
                    if (v.get_array().size() > 4) {
                        return bad_request(
                            "stop: at most 4 stop sequences, got " + std::to_string(v.get_array().size()), "stop");
                    }
                    for (const auto& s : v.get_array()) {
                        if (auto e = add(s)) return e;
                    }
                } else if (auto e = add(v)) {
                    return e;
                }
                out = std::move(stops);
                return std::nullopt;
            }};
}

// logit_bias: {"token id": bias in [-100, 100]}, at most 1024 entries (ids are checked against the
// vocabulary when the request is prepared).
std::optional<api_error> read_logit_bias(const json::value& v, std::vector<std::pair<int32_t, float>>& out) {
    if (!v.is_object()) return wrong_type("logit_bias", "an object of token id -> bias", v);
    const json::object& o = v.get_object();
    if (o.size() > 1024) {
        return bad_request("logit_bias: at most 1024 entries, got " + std::to_string(o.size()), "logit_bias");
    }
    out.clear();
    for (const auto& kv : o) {
        const std::string_view key = kv.key();
        int64_t id = -1;
        const auto r = std::from_chars(key.data(), key.data() + key.size(), id);
        if (r.ec != std::errc{} || r.ptr != key.data() + key.size() || id < 0 ||
            id > std::numeric_limits<int32_t>::max()) {
            return bad_request("logit_bias: key '" + std::string(key) + "' is not a token id (a non-negative integer)",
                               "logit_bias");
        }
        auto bias = number_of(kv.value());
        if (!bias) return wrong_type("logit_bias[" + std::string(key) + "]", "a number", kv.value());
        if (!(*bias >= -100.0 && *bias <= 100.0)) {
            return bad_request(
                "logit_bias[" + std::string(key) + "]: must be between -100 and 100, got " + num_text(*bias),
                "logit_bias");
        }
        out.emplace_back(static_cast<int32_t>(id), static_cast<float>(*bias));
    }
    return std::nullopt;
}

// The sampling and streaming fields every generation request has.
struct common_fields {
    generation_request& r;
    int64_t n = 1;
    std::optional<bool> include_usage;

    std::vector<field> fields() {
        sampling_params& s = r.sampling;
        return {
            {"model",
             [this](const json::value& v) -> std::optional<api_error> {
                 if (!v.is_string()) return wrong_type("model", "a string", v);
                 r.model = v.get_string();
                 return std::nullopt;
             }},
            max_tokens_field("max_tokens", r),
            bool_field("truncate_to_context", r.truncate_to_context),
            float_field("temperature", s.temperature, 0.0, 2.0),
            float_field("top_p", s.top_p, 0.0, 1.0),
            int_field("top_k", s.top_k, 0, 1 << 30),
            float_field("min_p", s.min_p, 0.0, 1.0),
            float_field("repetition_penalty", s.repetition_penalty, 1e-3, 100.0),
            float_field("presence_penalty", s.presence_penalty, -2.0, 2.0),
            float_field("frequency_penalty", s.frequency_penalty, -2.0, 2.0),
            bool_field("ignore_eos", s.ignore_eos),
            {"seed",
             [&s](const json::value& v) -> std::optional<api_error> {
                 auto x = integer_of(v);
                 if (!x && v.is_uint64()) {
                     s.seed = v.get_uint64();
                     return std::nullopt;
                 }
                 if (!x) return wrong_type("seed", "an integer", v);
                 s.seed = static_cast<uint64_t>(*x);
                 return std::nullopt;
             }},
            stop_field(s.stop_strings),
            int_field("n", n, 1, 128),
            bool_field("stream", r.stream),
            {"stream_options",
             [this](const json::value& v) -> std::optional<api_error> {
                 if (!v.is_object()) return wrong_type("stream_options", "an object", v);
                 for (const auto& kv : v.get_object()) {
                     if (kv.key() != "include_usage") {
                         return bad_request(
                             "stream_options: unknown field '" + std::string(kv.key()) + "' (valid: include_usage)",
                             "stream_options");
                     }
                     if (kv.value().is_null()) continue;
                     if (!kv.value().is_bool())
                         return wrong_type("stream_options.include_usage", "a boolean", kv.value());
                     include_usage = kv.value().get_bool();
                 }
                 return std::nullopt;
             }},
            ignored_string("user"),
            ignored_metadata(),
            ignored_bool("store"),
            ignored_string("service_tier"),
            {"logit_bias", [&s](const json::value& v) { return read_logit_bias(v, s.logit_bias); }},
        };
    }
};

// Walks the body's fields against the table; unknown fields are rejected.
std::optional<api_error> read_fields(const json::object& body, const std::vector<field>& fields) {
    for (const auto& kv : body) {
        const field* found = nullptr;
        for (const auto& f : fields) {
            if (f.name == kv.key()) found = &f;
        }
        if (!found) {
            return bad_request("Unrecognized request argument supplied: " + std::string(kv.key()),
                               std::string(kv.key()));
        }
        if (kv.value().is_null()) continue;
        if (auto e = found->read(kv.value())) return e;
    }
    return std::nullopt;
}

std::variant<json::object, api_error> parse_object(std::string_view body) {
    boost::system::error_code ec;
    json::parse_options opt;
    opt.max_depth = 32;
    json::value v = json_text::parse_precise(body, ec, opt);  // doubles correctly rounded, as Python reads them
    if (ec) return bad_request("the request body is not valid JSON: " + ec.message());
    if (!v.is_object()) return bad_request("the request body must be a JSON object, got " + json_kind_name(v));
    return std::move(v.get_object());
}

std::optional<api_error> finish_common(common_fields& c) {
    c.r.n = static_cast<int32_t>(c.n);
    c.r.best_of = c.r.n;
    if (c.include_usage.has_value()) {
        if (!c.r.stream) return bad_request("stream_options: only allowed when stream is true", "stream_options");
        c.r.include_usage = *c.include_usage;
    }
    return std::nullopt;
}

// One prompt: a string or an array of token ids.
std::optional<api_error> read_one_prompt(const json::value& v, generation_prompt& out) {
    if (v.is_string()) {
        out.text = v.get_string();
        return std::nullopt;
    }
    if (!v.is_array()) return wrong_type("prompt", "a string, an array of token ids or an array of prompts", v);
    const auto& a = v.get_array();
    if (a.empty()) return bad_request("prompt: cannot be an empty array", "prompt");
    std::vector<int32_t> ids;
    ids.reserve(a.size());
    for (const auto& t : a) {
        auto x = integer_of(t);
        if (!x) return wrong_type("prompt", "an array of token ids (integers)", t);
        if (*x < 0 || *x > std::numeric_limits<int32_t>::max()) {
            return bad_request("prompt: token id out of range: " + std::to_string(*x), "prompt");
        }
        ids.push_back(static_cast<int32_t>(*x));
    }
    out.ids = std::move(ids);
    return std::nullopt;
}

// prompt: a string, token ids, or an array of either (several prompts: r.prompts holds them all, and
// prompt / prompt_ids the first).
std::optional<api_error> read_prompt(const json::value& v, generation_request& r) {
    r.prompts.clear();
    const json::array* a = v.if_array();
    if (a && !a->empty() && ((*a)[0].is_string() || (*a)[0].is_array())) {
        if (a->size() > 64)
            return bad_request("prompt: at most 64 prompts, got " + std::to_string(a->size()), "prompt");
        for (const auto& one : *a) {
            if (!one.is_string() && !one.is_array()) {
                return wrong_type("prompt", "an array of prompts (strings or arrays of token ids)", one);
            }
            generation_prompt p;
            if (auto e = read_one_prompt(one, p)) return e;
            r.prompts.push_back(std::move(p));
        }
    } else {
        generation_prompt p;
        if (auto e = read_one_prompt(v, p)) return e;
        r.prompts.push_back(std::move(p));
    }
    r.prompt = r.prompts[0].text;
    r.prompt_ids = r.prompts[0].ids;
    if (r.prompts.size() == 1) r.prompts.clear();
    return std::nullopt;
}

// `tools` null (WebSocket): text turns only; else role "tool" and assistant tool_calls are read too, and
// `template_out` gets each message as the chat template sees it.
std::optional<api_error> read_messages(const json::value& v, std::vector<chat_message>& out,
                                       json::array* template_out = nullptr, tool_request* tools = nullptr) {
    if (!v.is_array()) return wrong_type("messages", "an array of messages", v);
    const auto& a = v.get_array();
    if (a.empty()) return bad_request("messages: at least one message is required", "messages");
    for (size_t i = 0; i < a.size(); ++i) {
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!a[i].is_object()) return wrong_type(where, "an object with role and content", a[i]);
        chat_message m;
        bool has_role = false;
        json::object for_template;
        for (const auto& kv : a[i].get_object()) {
            const json::value& f = kv.value();
            if (kv.key() == "role") {
                if (!f.is_string()) return wrong_type(where + ".role", "a string", f);
                m.role = f.get_string();
                if (!valid_chat_role(m.role) && !(tools && m.role == "tool")) {
                    return bad_request(where + ".role: unknown role '" + m.role +
                                           "' (valid: system, developer, user, assistant" + (tools ? ", tool)" : ")"),
                                       "messages");
                }
                has_role = true;
            } else if (kv.key() == "content") {
                if (f.is_null()) continue;
                if (f.is_string()) {
                    m.content = f.get_string();
                } else if (f.is_array()) {
                    for (const auto& part : f.get_array()) {
                        const json::object* p = part.if_object();
                        const json::value* type = p ? p->if_contains("type") : nullptr;
                        const json::value* text = p ? p->if_contains("text") : nullptr;
                        if (!type || !type->is_string() || type->get_string() != "text" || !text ||
                            !text->is_string()) {
                            return bad_request(where +
                                                   ".content: only parts of the form {\"type\": \"text\", \"text\": "
                                                   "...} are supported",
                                               "messages");
                        }
                        m.content += text->get_string();
                    }
                } else {
                    return wrong_type(where + ".content", "a string or an array of text parts", f);
                }
            } else if (kv.key() == "name") {
                if (!f.is_string() && !f.is_null()) return wrong_type(where + ".name", "a string", f);
                if (f.is_string()) for_template["name"] = f;
            } else if (tools && kv.key() == "tool_calls") {
                if (f.is_null()) continue;
                json::array calls;
                if (auto e = read_message_tool_calls(f, where + ".tool_calls", calls)) return e;
                if (!calls.empty()) for_template["tool_calls"] = std::move(calls);
            } else if (tools && kv.key() == "tool_call_id") {
                if (!f.is_string()) return wrong_type(where + ".tool_call_id", "a string", f);
                for_template["tool_call_id"] = f;
            } else {
                return bad_request(where + ": unknown field '" + std::string(kv.key()) +
                                       "' (valid: role, content, name" + (tools ? ", tool_calls, tool_call_id)" : ")"),
                                   "messages");
            }
        }
        if (!has_role) return bad_request(where + ": role is required", "messages");
        if (for_template.contains("tool_calls") && m.role != "assistant") {
            return bad_request(where + ".tool_calls: only assistant messages carry tool calls", "messages");
        }
        if (m.role == "tool" && !for_template.contains("tool_call_id")) {
            return bad_request(where + ".tool_call_id: required in a tool message (the id of the call it answers)",
                               "messages");
        }
        if (template_out) {
            const bool calls = for_template.contains("tool_calls");
            if (tools && (calls || m.role == "tool")) tools->conversation_has_tools = true;
            for_template["role"] = m.role;
            for_template["content"] = calls && m.content.empty() ? json::value(nullptr) : json::value(m.content);
            template_out->push_back(std::move(for_template));
        }
        out.push_back(std::move(m));
    }
    return std::nullopt;
}

}  // namespace

parsed_request parse_completion_request(std::string_view body, const sampling_params& defaults) {
    auto obj = parse_object(body);
    if (auto* e = std::get_if<api_error>(&obj)) return *e;
    const json::object& o = std::get<json::object>(obj);
    generation_request r;
    r.kind = api_kind::completion;
    r.sampling = defaults;
    common_fields c{r, 1, std::nullopt};
    std::vector<field> fields = c.fields();
    bool has_prompt = false;
    fields.push_back({"prompt", [&](const json::value& v) -> std::optional<api_error> {
                          has_prompt = true;
                          return read_prompt(v, r);
                      }});
    fields.push_back({"logprobs", [&](const json::value& v) -> std::optional<api_error> {
                          auto x = integer_of(v);
                          if (!x) return wrong_type("logprobs", "an integer (how many alternatives per token)", v);
                          if (*x < 0 || *x > 20) {
                              return bad_request("logprobs: must be between 0 and 20, got " + std::to_string(*x),
                                                 "logprobs");
                          }
                          r.logprobs = static_cast<int32_t>(*x);
                          return std::nullopt;
                      }});
    fields.push_back(bool_field("echo", r.echo));
    int64_t best_of = 0;
    fields.push_back(int_field("best_of", best_of, 1, 128));
    fields.push_back(unsupported("suffix", "not supported by troupe"));
    if (auto e = read_fields(o, fields)) return *e;
    if (!has_prompt) return bad_request("prompt: required", "prompt");
    if (auto e = finish_common(c)) return *e;
    r.best_of = best_of > 0 ? static_cast<int32_t>(best_of) : r.n;
    if (r.best_of < r.n) {
        return bad_request(
            "best_of: must be at least n (" + std::to_string(r.n) + "), got " + std::to_string(r.best_of), "best_of");
    }
    if (r.best_of > r.n && r.stream) return bad_request("best_of: cannot be used with stream", "best_of");
    const size_t n_prompts = std::max<size_t>(r.prompts.size(), 1);
    if (n_prompts * static_cast<size_t>(r.best_of) > 128) {
        return bad_request("prompt: " + std::to_string(n_prompts) + " prompts x best_of " + std::to_string(r.best_of) +
                               " make more than 128 choices",
                           "prompt");
    }
    return r;
}

parsed_request parse_chat_request(std::string_view body, const sampling_params& defaults) {
    auto obj = parse_object(body);
    if (auto* e = std::get_if<api_error>(&obj)) return *e;
    const json::object& o = std::get<json::object>(obj);
    generation_request r;
    r.kind = api_kind::chat;
    r.sampling = defaults;
    common_fields c{r, 1, std::nullopt};
    std::vector<field> fields = c.fields();
    bool has_messages = false;
    bool logprobs = false;
    int32_t top_logprobs = -1;
    fields.push_back({"messages", [&](const json::value& v) -> std::optional<api_error> {
                          has_messages = true;
                          return read_messages(v, r.messages, &r.messages_json, &r.tools);
                      }});
    fields.push_back(max_tokens_field("max_completion_tokens", r));
    fields.push_back(bool_field("logprobs", logprobs));
    fields.push_back(int_field("top_logprobs", top_logprobs, 0, 20));
    fields.push_back({"response_format", [&](const json::value& v) { return read_response_format(v, r.format); }});
    fields.push_back({"tools", [&](const json::value& v) { return read_tools(v, r.tools); }});
    fields.push_back({"tool_choice", [&](const json::value& v) { return read_tool_choice(v, r.tools); }});
    fields.push_back(
        {"chat_template_kwargs", [&](const json::value& v) { return read_template_kwargs(v, r.template_kwargs); }});
    fields.push_back({"parallel_tool_calls", [&](const json::value& v) -> std::optional<api_error> {
                          if (v.is_bool() && v.get_bool()) return std::nullopt;
                          return bad_request(
                              "parallel_tool_calls: only true is supported (the reply's calls are all returned)",
                              "parallel_tool_calls");
                      }});
    // reasoning_effort is for models that reason at a set effort (OpenAI's o-series); a chat template that reads it
    // gets it through chat_template_kwargs.
    fields.push_back(ignored_string("reasoning_effort"));
    fields.push_back({"modalities", [](const json::value& v) -> std::optional<api_error> {
                          if (!v.is_array()) return wrong_type("modalities", "an array of strings", v);
                          for (const auto& m : v.get_array()) {
                              if (!m.is_string() || m.get_string() != "text") {
                                  return bad_request("modalities: only \"text\" is supported (troupe writes text)",
                                                     "modalities");
                              }
                          }
                          return std::nullopt;
                      }});
    // Predicted outputs only speed OpenAI up; the reply does not depend on them.
    fields.push_back({"prediction", [](const json::value& v) -> std::optional<api_error> {
                          const json::object* o = v.if_object();
                          const json::value* type = o ? o->if_contains("type") : nullptr;
                          if (!type || !type->is_string() || type->get_string() != "content" ||
                              !o->contains("content")) {
                              return wrong_type("prediction", "{\"type\": \"content\", \"content\": ...}", v);
                          }
                          return std::nullopt;
                      }});
    for (const char* name : {"functions", "function_call"}) {
        fields.push_back(unsupported(name, "the deprecated functions API is not supported by troupe; use tools"));
    }
    if (auto e = read_fields(o, fields)) return *e;
    if (!has_messages) return bad_request("messages: required", "messages");
    if (auto e = finish_tools(r.tools)) return *e;
    if (top_logprobs >= 0 && !logprobs) {
        return bad_request("top_logprobs: requires logprobs to be true", "top_logprobs");
    }
    if (logprobs) r.logprobs = top_logprobs < 0 ? 0 : top_logprobs;
    if (auto e = finish_common(c)) return *e;
    return r;
}

ws_client_message parse_ws_message(std::string_view text, const sampling_params& defaults) {
    auto obj = parse_object(text);
    if (auto* e = std::get_if<api_error>(&obj)) return ws_bad{{}, e->message};
    const json::object& o = std::get<json::object>(obj);
    std::string id;
    if (const json::value* v = o.if_contains("id")) {
        if (v->is_string()) {
            id = v->get_string();
        } else if (auto x = integer_of(*v)) {
            id = std::to_string(*x);
        } else {
            return ws_bad{{}, "id: expected a string or an integer, got " + json_kind_name(*v)};
        }
    }
    const json::value* type = o.if_contains("type");
    if (!type || !type->is_string()) return ws_bad{id, "type: required, one of start, cancel"};
    if (type->get_string() == "cancel") {
        if (id.empty()) return ws_bad{id, "cancel: id is required"};
        return ws_cancel{id};
    }
    if (type->get_string() != "start") {
        return ws_bad{id,
                      "type: unknown message type '" + std::string(type->get_string()) + "' (valid: start, cancel)"};
    }
    if (id.empty()) return ws_bad{id, "start: id is required"};
    ws_start s{id, {}};
    generation_request& r = s.request;
    r.sampling = defaults;
    r.stream = true;
    bool has_input = false;
    for (const auto& kv : o) {
        if (kv.key() == "type" || kv.key() == "id") continue;
        if (kv.key() == "messages") {
            r.kind = api_kind::chat;
            has_input = true;
            if (auto e = read_messages(kv.value(), r.messages)) return ws_bad{id, e->message};
        } else if (kv.key() == "prompt") {
            r.kind = api_kind::completion;
            has_input = true;
            if (!kv.value().is_string())
                return ws_bad{id, "prompt: expected a string, got " + json_kind_name(kv.value())};
            r.prompt = kv.value().get_string();
        } else if (kv.key() == "params") {
            if (kv.value().is_null()) continue;
            if (!kv.value().is_object())
                return ws_bad{id, "params: expected an object, got " + json_kind_name(kv.value())};
            common_fields c{r, 1, std::nullopt};
            std::vector<field> fields;
            for (auto& f : c.fields()) {
                if (f.name != "stream" && f.name != "stream_options" && f.name != "n" && f.name != "model") {
                    fields.push_back(std::move(f));
                }
            }
            if (auto e = read_fields(kv.value().get_object(), fields)) {
                return ws_bad{id, "params: " + e->message};
            }
        } else {
            return ws_bad{id,
                          "unknown field '" + std::string(kv.key()) + "' (valid: type, id, messages, prompt, params)"};
        }
    }
    if (!has_input) return ws_bad{id, "start: messages (or prompt) is required"};
    return s;
}

}  // namespace troupe::server
