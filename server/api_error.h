// api_error: an expected failure of an API request, in OpenAI's shape:
//   HTTP <status>  {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null}}
// Statuses: 400 malformed / invalid (and, as OpenAI answers it, code context_length_exceeded: a prompt, or
// prompt plus max_tokens, longer than the context), 401 no or wrong API key or admin token, 403 admin
// disabled, a Host or Origin not allowed, 404 unknown route or model, 405 wrong method, 413 body too
// large, 429 overloaded, 503 loading or draining.
#pragma once

#include <string>

namespace troupe::server {

struct api_error {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the offending field, or empty (JSON null)
    std::string code;   // OpenAI's machine code ("model_not_found"), or empty (JSON null)
};

inline api_error bad_request(std::string message, std::string param = {}) {
    return api_error{400, std::move(message), "invalid_request_error", std::move(param), {}};
}

inline api_error context_exceeded(std::string message, std::string param) {
    return api_error{400, std::move(message), "invalid_request_error", std::move(param), "context_length_exceeded"};
}

inline api_error overloaded(std::string message) {
    return api_error{429, std::move(message), "rate_limit_error", {}, "overloaded"};
}

inline api_error unavailable(std::string message) {
    return api_error{503, std::move(message), "service_unavailable", {}, "unavailable"};
}

}  // namespace troupe::server
