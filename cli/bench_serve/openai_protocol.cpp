// OpenAI request bodies and streamed chunks (see openai_protocol.h).
#include "cli/bench_serve/openai_protocol.h"

#include <boost/json.hpp>

#include <charconv>

namespace troupe::bench {

result<http_url> parse_url(std::string_view url) {
    constexpr std::string_view scheme = "http://";
    if (!url.starts_with(scheme)) {
        return make_error("url: expected http://host[:port][/path] (https is not supported), got '" + std::string(url) +
                          "'");
    }
    std::string_view rest = url.substr(scheme.size());
    const size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    std::string path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
    while (!path.empty() && path.back() == '/') path.pop_back();
    http_url u;
    const size_t colon = authority.rfind(':');
    if (colon == std::string_view::npos) {
        u.host = std::string(authority);
        u.port = "80";
    } else {
        u.host = std::string(authority.substr(0, colon));
        u.port = std::string(authority.substr(colon + 1));
        int port = 0;
        auto r = std::from_chars(u.port.data(), u.port.data() + u.port.size(), port);
        if (r.ec != std::errc{} || r.ptr != u.port.data() + u.port.size() || port < 1 || port > 65535) {
            return make_error("url: port must be a number between 1 and 65535, got '" + u.port + "'");
        }
    }
    if (u.host.empty()) return make_error("url: no host in '" + std::string(url) + "'");
    u.base_path = path;
    return u;
}

std::string_view endpoint_path(endpoint_kind k) {
    switch (k) {
        case endpoint_kind::completions:
            return "/v1/completions";
        case endpoint_kind::chat:
            return "/v1/chat/completions";
    }
    return "";
}

std::string request_body(endpoint_kind endpoint, const std::string& model, const std::string& prompt,
                         int32_t max_tokens, const output_config& output) {
    boost::json::object o;
    o["model"] = model;
    switch (endpoint) {
        case endpoint_kind::completions:
            o["prompt"] = prompt;
            break;
        case endpoint_kind::chat: {
            boost::json::object msg;
            msg["role"] = "user";
            msg["content"] = prompt;
            o["messages"] = boost::json::array{msg};
            break;
        }
    }
    o["max_tokens"] = max_tokens;
    o["temperature"] = output.temperature;
    o["ignore_eos"] = output.ignore_eos;
    o["stream"] = true;
    o["stream_options"] = boost::json::object{{"include_usage", true}};
    return boost::json::serialize(o);
}

namespace {

std::optional<int32_t> int_at(const boost::json::object& o, std::string_view key) {
    const boost::json::value* v = o.if_contains(key);
    if (!v) return std::nullopt;
    if (v->is_int64()) return static_cast<int32_t>(v->as_int64());
    if (v->is_uint64()) return static_cast<int32_t>(v->as_uint64());
    return std::nullopt;
}

}  // namespace

stream_chunk parse_stream_chunk(std::string_view data) {
    stream_chunk c;
    if (data == "[DONE]") {
        c.done = true;
        return c;
    }
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(data, ec);
    if (ec || !v.is_object()) {
        c.error = "unparsable stream chunk: " + std::string(data.substr(0, 200));
        return c;
    }
    const auto& o = v.as_object();
    if (const auto* err = o.if_contains("error")) {
        const auto* msg = err->is_object() ? err->as_object().if_contains("message") : nullptr;
        c.error = msg && msg->is_string() ? std::string(msg->as_string()) : boost::json::serialize(*err);
        return c;
    }
    if (const auto* usage = o.if_contains("usage"); usage && usage->is_object()) {
        c.prompt_tokens = int_at(usage->as_object(), "prompt_tokens");
        c.completion_tokens = int_at(usage->as_object(), "completion_tokens");
    }
    const auto* choices = o.if_contains("choices");
    if (!choices || !choices->is_array() || choices->as_array().empty()) return c;
    const auto& first = choices->as_array()[0];
    if (!first.is_object()) return c;
    const auto& ch = first.as_object();
    if (const auto* t = ch.if_contains("text"); t && t->is_string()) c.text = std::string(t->as_string());
    const auto* d = ch.if_contains("delta");
    if (d && d->is_object()) {
        if (const auto* t = d->as_object().if_contains("content"); t && t->is_string()) {
            c.text = std::string(t->as_string());
        }
    }
    const auto* fr = ch.if_contains("finish_reason");
    const bool finished = fr && fr->is_string();
    if (finished) c.finish_reason = std::string(fr->as_string());
    // A chat delta counts only with content (the first one often carries just the role); a completion
    // chunk counts unless it only says why the stream ends.
    c.token = !c.text.empty() || (!finished && !d);
    return c;
}

result<std::string> first_model_id(std::string_view models_json) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(models_json, ec);
    if (!ec && v.is_object()) {
        const auto* data = v.as_object().if_contains("data");
        if (data && data->is_array() && !data->as_array().empty() && data->as_array()[0].is_object()) {
            const auto* id = data->as_array()[0].as_object().if_contains("id");
            if (id && id->is_string()) return std::string(id->as_string());
        }
    }
    return make_error("GET /v1/models: expected {\"data\": [{\"id\": ...}]}, got '" +
                      std::string(models_json.substr(0, 200)) + "'");
}

}  // namespace troupe::bench
