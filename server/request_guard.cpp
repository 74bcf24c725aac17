#include "server/request_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include "server/routes.h"

namespace troupe::server {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

bool iequal(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
               return std::tolower(x) == std::tolower(y);
           });
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// The name in a Host header, without port or IPv6 brackets: "[::1]:8080" -> "::1", "a.b:80" -> "a.b".
std::string host_name(std::string_view host) {
    host = trim(host);
    if (host.starts_with('[')) {
        const auto close = host.find(']');
        return close == std::string_view::npos ? std::string() : lower(host.substr(1, close - 1));
    }
    const auto colon = host.find(':');
    if (colon != std::string_view::npos && host.find(':', colon + 1) != std::string_view::npos) {
        return lower(host);  // a bare IPv6 address (server.host "::1"), no port
    }
    if (colon != std::string_view::npos) host = host.substr(0, colon);
    if (host.ends_with('.')) host.remove_suffix(1);  // "localhost." is localhost
    return lower(host);
}

bool is_ip_literal(const std::string& name) {
    unsigned char buf[16];
    return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

// "http://a.b:8080" -> "a.b:8080"; empty for anything that is not scheme://authority ("null").
std::string_view origin_authority(std::string_view origin) {
    const auto sep = origin.find("://");
    if (sep == std::string_view::npos) return {};
    std::string_view rest = origin.substr(sep + 3);
    if (rest.find('/') != std::string_view::npos) return {};
    return rest;
}

bool listed(std::string_view origin, const std::vector<std::string>& list) {
    for (std::string_view o : list) {
        if (o == "*") return true;
        if (o.ends_with('/')) o.remove_suffix(1);
        if (iequal(o, origin)) return true;
    }
    return false;
}

bool same_origin(const request_head& h) {
    if (!h.origin || !h.host) return false;
    const std::string_view authority = origin_authority(trim(*h.origin));
    return !authority.empty() && iequal(authority, trim(*h.host));
}

// The offered key against the secret, in time that depends on the offered key's length only.
bool key_matches(std::string_view offered, std::string_view secret) {
    if (secret.empty()) return false;
    unsigned diff = offered.size() == secret.size() ? 0u : 1u;
    for (size_t i = 0; i < offered.size(); ++i) {
        diff |= static_cast<unsigned char>(offered[i]) ^ static_cast<unsigned char>(secret[i % secret.size()]);
    }
    return diff == 0;
}

constexpr std::string_view key_protocol_prefix = "troupe.key.";

api_error forbidden(std::string message, std::string code) {
    return api_error{403, std::move(message), "permission_error", {}, std::move(code)};
}

}  // namespace

guard_policy make_guard_policy(const server_config& config) {
    guard_policy p;
    p.api_key = config.api_key;
    for (const auto& h : config.allowed_hosts) p.allowed_hosts.push_back(h == "*" ? h : host_name(h));
    p.allowed_origins = config.allowed_origins;
    p.cors_origins = config.cors_origins;
    return p;
}

route_access access_of(std::string_view path) {
    if (path.starts_with("/admin/api/")) return route_access::admin;
    if (path == "/v1" || path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize" || path == "/ws" ||
        path == "/metrics") {
        return route_access::api;
    }
    return route_access::open;
}

bool host_allowed(std::string_view host_header, const guard_policy& p) {
    const std::string name = host_name(host_header);
    if (name.empty()) return false;
    if (name == "localhost" || is_ip_literal(name)) return true;
    for (const auto& h : p.allowed_hosts) {
        if (h == "*" || h == name) return true;
    }
    return false;
}

std::string offered_key(const request_head& h) {
    std::string_view auth = trim(h.authorization);
    if (auth.size() > 7 && iequal(auth.substr(0, 7), "bearer ")) return std::string(trim(auth.substr(7)));
    if (!h.websocket) return {};
    std::string_view protocols = h.ws_protocols;
    while (!protocols.empty()) {
        const auto comma = protocols.find(',');
        const std::string_view one = trim(protocols.substr(0, comma));
        if (one.starts_with(key_protocol_prefix)) return std::string(one.substr(key_protocol_prefix.size()));
        if (comma == std::string_view::npos) break;
        protocols.remove_prefix(comma + 1);
    }
    if (auto k = query_param(h.query, "api_key")) return *k;
    return {};
}

std::string_view ws_subprotocol(std::string_view ws_protocols) {
    while (!ws_protocols.empty()) {
        const auto comma = ws_protocols.find(',');
        if (trim(ws_protocols.substr(0, comma)) == "troupe") return "troupe";
        if (comma == std::string_view::npos) break;
        ws_protocols.remove_prefix(comma + 1);
    }
    return {};
}

std::optional<api_error> check_request(const request_head& h, const guard_policy& p) {
    if (!h.host) {
        if (!h.http10) return bad_request("HTTP/1.1 requests need a Host header");
    } else if (!host_allowed(*h.host, p)) {
        return forbidden("Host '" + std::string(trim(*h.host)) +
                             "' is not a name of this server (accepted: localhost, an IP address, or a name in "
                             "server.allowed_hosts)",
                         "host_not_allowed");
    }
    if (h.origin && !same_origin(h)) {
        const std::string origin(trim(*h.origin));
        if (h.websocket && !listed(origin, p.allowed_origins)) {
            return forbidden("WebSocket connections from origin '" + origin +
                                 "' are not allowed (the server's own pages, or an origin in server.allowed_origins)",
                             "origin_not_allowed");
        }
        if (!h.websocket && !listed(origin, p.cors_origins)) {
            return forbidden("Requests from origin '" + origin +
                                 "' are not allowed (the server's own pages, or an origin in server.cors_origins)",
                             "origin_not_allowed");
        }
    }
    // A preflight carries no credentials; the request it announces will.
    if (h.method == "OPTIONS" || p.api_key.empty() || access_of(h.path) != route_access::api) return std::nullopt;
    const std::string key = offered_key(h);
    if (key_matches(key, p.api_key)) return std::nullopt;
    const std::string how = h.websocket
                                ? "Authorization: Bearer <key>, the subprotocol troupe.key.<key>, or ?api_key=<key>"
                                : "Authorization: Bearer <key>";
    if (key.empty()) {
        return api_error{401,
                         "You didn't provide an API key: this server requires server.api_key (" + how + ")",
                         "invalid_request_error",
                         {},
                         "invalid_api_key"};
    }
    return api_error{401,
                     "Incorrect API key provided (send server.api_key as " + how + ")",
                     "invalid_request_error",
                     {},
                     "invalid_api_key"};
}

header_pairs cors_headers(const request_head& h, const guard_policy& p, bool preflight,
                          std::string_view request_headers) {
    if (!h.origin || same_origin(h)) return {};
    const std::string origin(trim(*h.origin));
    if (!listed(origin, p.cors_origins)) return {};
    header_pairs out{{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
    if (preflight) {
        out.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string_view asked = trim(request_headers);
        out.emplace_back("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        out.emplace_back("Access-Control-Max-Age", "600");
    }
    return out;
}

bool is_loopback_host(std::string_view host) {
    const std::string name = host_name(host);
    if (name == "localhost" || name == "::1") return true;
    unsigned char buf[4];
    return inet_pton(AF_INET, name.c_str(), buf) == 1 && buf[0] == 127;
}

exposure_check check_exposure(const server_config& config) {
    exposure_check out;
    if (is_loopback_host(config.host) || !config.api_key.empty()) return out;
    if (!config.allow_insecure) {
        out.error = "server.host '" + config.host +
                    "' accepts connections from other machines, and no API key is set: set server.api_key (or "
                    "--api-key), or bind 127.0.0.1, or set server.allow_insecure: true to serve without a key";
    } else {
        out.warning = "server.host '" + config.host +
                      "' accepts connections from other machines without an API key (server.allow_insecure: "
                      "true): anyone who can reach it can generate, and read /metrics";
    }
    return out;
}

}  // namespace troupe::server
