// api_error: an expected failure of an API request, in OpenAI's shape:
//   HTTP <status>  {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null}}
// Statuses: 400 malformed / invalid, 401 no or wrong admin token, 403 admin disabled, 404 unknown route or
// model, 413 body too large, 422 well-formed but unprocessable (prompt longer than the context),
// 429 overloaded, 503 loading or draining.
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

inline api_error overloaded(std::string message) {
    return api_error{429, std::move(message), "rate_limit_error", {}, "overloaded"};
}

inline api_error unavailable(std::string message) {
    return api_error{503, std::move(message), "service_unavailable", {}, "unavailable"};
}

}  // namespace troupe::server
