// What the front end answers at once, without the engine's tokens (http_front.h): /health, /metrics,
// /v1/models and /v1/models/{id}, the CORS preflight, the admin API (state, drain, cancel), the embedded pages,
// and /tokenize and /detokenize (on the prep pool).
#include "core/log/log.h"
#include "core/tokenizer/tokenizer.h"
#include "server/http_front.h"
#include "server/response_builder.h"
#include "server/static_files.h"
#include "server/tokenize_api.h"

namespace troupe::server {

response http_server::impl::method_not_allowed(const http::request<http::string_body>& req, std::string_view path,
                                               std::string_view allowed) {
    response res = error_response(api_error{405,
                                            "Method " + std::string(req.method_string()) + " is not allowed on " +
                                                std::string(path) + " (allowed: " + std::string(allowed) + ")",
                                            "invalid_request_error",
                                            {},
                                            "method_not_allowed"},
                                  req.keep_alive());
    res.set(http::field::allow, allowed);
    return res;
}

// Everything but generation: answered at once.
response http_server::impl::route(http::request<http::string_body>& req) {
    const bool keep = req.keep_alive();
    const split_target t = split(req.target());
    const std::string path(t.path);
    const auto method = req.method();
    const bool get = method == http::verb::get || method == http::verb::head;
    auto wrong_method = [&](std::string_view allowed) { return method_not_allowed(req, path, allowed); };
    if (method == http::verb::options) return preflight(req);
    if (path == "/health") {
        if (!get) return wrong_method("GET");
        const bool ok = ready_.load() && !draining_.load();
        const char* state = !ready_.load() ? "loading" : draining_.load() ? "draining" : "ok";
        return make_response(ok ? 200 : 503, json_type, std::string("{\"status\":\"") + state + "\"}", keep);
    }
    if (path == "/metrics") {
        if (!get) return wrong_method("GET");
        return make_response(200, "text/plain; version=0.0.4; charset=utf-8",
                             prometheus_text(snapshot(), figures(), model_.facts), keep);
    }
    if (path == "/v1/models") {
        if (!get) return wrong_method("GET");
        if (!ready_.load()) return error_response(unavailable("The model is loading"), keep);
        return make_response(
            200, json_type,
            models_json(model_.facts.name, unix_now(), model_.facts.context_length, model_.facts.chat_template), keep);
    }
    if (path.starts_with("/v1/models/")) {
        if (!get) return wrong_method("GET");
        if (!ready_.load()) return error_response(unavailable("The model is loading"), keep);
        // A name may hold '/' ("org/model"), sent as is or percent-encoded.
        const std::string id = percent_decoded(path.substr(std::string_view("/v1/models/").size()));
        if (id != model_.facts.name) {
            return error_response(
                api_error{404, "The model '" + id + "' does not exist; this server serves '" + model_.facts.name + "'",
                          "invalid_request_error", "model", "model_not_found"},
                keep);
        }
        return make_response(
            200, json_type,
            model_json(model_.facts.name, unix_now(), model_.facts.context_length, model_.facts.chat_template), keep);
    }
    if (path == "/tokenize" || path == "/detokenize") {  // a POST to a ready server went to tokenize_route
        if (method != http::verb::post) return wrong_method("POST");
        return error_response(unavailable("The model is loading"), keep);
    }
    if (path == "/v1/completions" || path == "/v1/chat/completions") return wrong_method("POST");
    if (path.starts_with("/admin/api/")) return admin(req, path, t.query);
    if (get) {
        if (const static_file* f = find_static_file(path)) {
            auto res = make_response(200, f->content_type, std::string(f->body), keep);
            res.set(http::field::cache_control, "no-cache");
            return res;
        }
    }
    return error_response(api_error{404,
                                    "Unknown route: " + std::string(req.method_string()) + " " + path,
                                    "invalid_request_error",
                                    {},
                                    "not_found"},
                          keep);
}

// OPTIONS: the CORS preflight of a listed origin (request_guard refused the others), or the methods.
response http_server::impl::preflight(http::request<http::string_body>& req) {
    response res = make_response(204, "text/plain", {}, req.keep_alive());
    res.erase(http::field::content_type);
    res.set(http::field::allow, "GET, HEAD, POST, OPTIONS");
    const request_head h = head_of(req);
    for (const auto& [name, value] : cors_headers(h, guard_, true, req[http::field::access_control_request_headers])) {
        res.set(name, value);
    }
    return res;
}

response http_server::impl::admin(http::request<http::string_body>& req, const std::string& path,
                                  std::string_view query) {
    const bool keep = req.keep_alive();
    if (sc_.admin_token.empty()) {
        return error_response(
            api_error{403,
                      "The admin console is disabled (server.admin_console: false, or no server.admin_token)",
                      "permission_error",
                      {},
                      "admin_disabled"},
            keep);
    }
    const auto auth = req[http::field::authorization];
    if (!admin_authorized(std::string_view(auth.data(), auth.size()), query, sc_.admin_token)) {
        return error_response(api_error{401,
                                        "The admin API needs the token: Authorization: Bearer <server.admin_token>",
                                        "authentication_error",
                                        {},
                                        "invalid_admin_token"},
                              keep);
    }
    auto wrong_method = [&](std::string_view allowed) { return method_not_allowed(req, path, allowed); };
    if (path == "/admin/api/state") {
        if (req.method() != http::verb::get) return wrong_method("GET");
        return make_response(200, json_type, admin_state_json(snapshot(), figures(), model_.facts, history_.samples()),
                             keep);
    }
    if (req.method() != http::verb::post) return wrong_method("POST");
    if (path == "/admin/api/drain") {
        begin_drain();
        return make_response(200, json_type, "{\"draining\":true}", keep);
    }
    if (auto id = id_after(path, "/admin/api/cancel/")) {
        if (!ready_.load()) return error_response(unavailable("The model is loading"), keep);
        bool found = false;
        for (const auto& r : model_.eng->snapshot().requests) found = found || r.id == *id;
        if (!found) {
            return error_response(api_error{404,
                                            "No request " + std::to_string(*id) + " is in flight",
                                            "invalid_request_error",
                                            {},
                                            "not_found"},
                                  keep);
        }
        model_.eng->cancel(*id);
        return make_response(200, json_type, "{\"cancelled\":" + std::to_string(*id) + "}", keep);
    }
    return error_response(api_error{404, "Unknown admin route: " + path, "invalid_request_error", {}, "not_found"},
                          keep);
}

void http_server::impl::begin_drain() {
    if (draining_.exchange(true)) return;
    TROUPE_LOG_INFO("server", "draining: new requests are refused, running ones finish");
    if (ready_.load()) model_.eng->drain();
}

// POST /tokenize and /detokenize (llama-server's bodies), tokenized on the prep pool as prompts are: a
// megabyte of text must not stall /health and the running streams.
net::awaitable<bool> http_server::impl::tokenize_route(const std::shared_ptr<http_conn>& c,
                                                       http::request<http::string_body>& req, bool tokenize) {
    const bool keep = req.keep_alive();
    auto work = [this, tokenize, body = std::move(req.body())] {
        return tokenize ? tokenize_answer(body, *model_.tok) : detokenize_answer(body, *model_.tok);
    };
    api_answer a = co_await prep_.run(std::move(work));
    if (const auto* e = std::get_if<api_error>(&a)) co_return co_await send_error(*c, *e, keep);
    response res = make_response(200, json_type, std::move(std::get<std::string>(a)), keep);
    const bool again = co_await send(*c, res);
    co_return again;
}

}  // namespace troupe::server
