// request_guard: the checks every request passes on its header alone, before its body is read, and the
// CORS answer. Plain C++ (header fields in as strings), so the whole policy is tested from tables.
//
//   1. Host (DNS rebinding): a page on evil.example whose name is made to resolve to 127.0.0.1 reaches
//      the server with "Host: evil.example". Accepted: localhost, any IP literal (a browser sends one
//      only for a page loaded from that very address), the names in server.allowed_hosts, or any with
//      "*". Ports are not compared: rebinding changes the name, never the port, and port forwarding
//      (docker -p 9000:8080) must keep working. HTTP/1.1 without Host is malformed (400); HTTP/1.0
//      clients may omit it (browsers always send it).
//   2. Origin (cross-site pages): browsers send Origin on WebSocket handshakes and cross-site POSTs. The
//      server's own pages have Origin == Host. /ws also accepts server.allowed_origins, the HTTP routes
//      server.cors_origins; any other Origin is 403, so a foreign page cannot even spend compute.
//   3. API key (server.api_key, when set): "Authorization: Bearer <key>" as OpenAI clients send it, on
//      /v1/*, /tokenize, /detokenize and /metrics; /ws also takes it as the subprotocol
//      "troupe.key.<key>" (what a browser's WebSocket can send) or ?api_key=<key>. Compared in time
//      that depends on the offered key's length only. /health and the static pages stay open; /admin/api
//      keeps its own token (admin_authorized in routes.h): the API key does not open the console.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/config/engine_config.h"
#include "server/api_error.h"

namespace troupe::server {

struct guard_policy {
    std::string api_key;                       // empty: no key required
    std::vector<std::string> allowed_hosts;    // lower-case names; "*": any
    std::vector<std::string> allowed_origins;  // for /ws; "*": any
    std::vector<std::string> cors_origins;     // for the HTTP routes; "*": any
};
guard_policy make_guard_policy(const server_config& config);

// What the guard needs of a request: absent headers are nullopt.
struct request_head {
    std::string_view method;  // "GET", "POST", "OPTIONS", ...
    std::string_view path;
    std::string_view query;
    std::optional<std::string_view> host;
    std::optional<std::string_view> origin;
    std::string_view authorization;
    std::string_view ws_protocols;  // Sec-WebSocket-Protocol as sent: "troupe, troupe.key.abc"
    bool http10 = false;
    bool websocket = false;  // an Upgrade: websocket handshake
};

// Which secret a route needs.
enum class route_access {
    open,   // /health, the static pages
    api,    // /v1/*, /tokenize, /detokenize, /ws, /metrics: the API key when one is set
    admin,  // /admin/api/*: the admin token (checked by the admin handler)
};
route_access access_of(std::string_view path);

// The first check the request fails, as the answer to send (400, 401, 403); nullopt: let it through.
std::optional<api_error> check_request(const request_head& h, const guard_policy& p);

// True when the Host header names this server (rule 1 above).
bool host_allowed(std::string_view host_header, const guard_policy& p);

// The API key the request offers (Bearer header; for /ws also the subprotocol and ?api_key=); empty if none.
std::string offered_key(const request_head& h);

// The subprotocol to answer a WebSocket handshake with: "troupe" when offered, else empty (none).
std::string_view ws_subprotocol(std::string_view ws_protocols);

using header_pairs = std::vector<std::pair<std::string, std::string>>;

// The Access-Control-* headers for a request from a listed foreign origin (empty otherwise: same-origin
// or no Origin needs none). For a preflight, also the allowed methods and headers and a max age.
// request_headers: the preflight's Access-Control-Request-Headers.
header_pairs cors_headers(const request_head& h, const guard_policy& p, bool preflight,
                          std::string_view request_headers = {});

// Non-loopback host without an API key: the refusal (unless allow_insecure) or the warning to log.
struct exposure_check {
    std::optional<std::string> error;    // refuse to start
    std::optional<std::string> warning;  // start, and log this
};
exposure_check check_exposure(const server_config& config);

// 127.0.0.0/8, ::1, "localhost": nothing outside this machine can connect.
bool is_loopback_host(std::string_view host);

}  // namespace troupe::server
