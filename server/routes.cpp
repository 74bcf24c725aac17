#include "server/routes.h"

#include <charconv>

namespace troupe::server {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string percent_decode(std::string_view s, bool plus_is_space) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '+' && plus_is_space) {
            out += ' ';
        } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

bool equal_constant_time(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    unsigned diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
    return diff == 0;
}

}  // namespace

std::string percent_decoded(std::string_view path) {
    return percent_decode(path, false);
}

split_target split(std::string_view target) {
    const auto q = target.find('?');
    if (q == std::string_view::npos) return {target, {}};
    return {target.substr(0, q), target.substr(q + 1)};
}

std::optional<std::string> query_param(std::string_view query, std::string_view name) {
    while (!query.empty()) {
        const auto amp = query.find('&');
        std::string_view pair = query.substr(0, amp);
        const auto eq = pair.find('=');
        if (pair.substr(0, eq) == name) {
            return eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
        }
        if (amp == std::string_view::npos) break;
        query.remove_prefix(amp + 1);
    }
    return std::nullopt;
}

bool admin_authorized(std::string_view authorization_header, std::string_view query, std::string_view token) {
    if (token.empty()) return false;
    constexpr std::string_view bearer = "Bearer ";
    if (authorization_header.starts_with(bearer) &&
        equal_constant_time(authorization_header.substr(bearer.size()), token)) {
        return true;
    }
    if (auto t = query_param(query, "token")) return equal_constant_time(*t, token);
    return false;
}

std::optional<long long> id_after(std::string_view path, std::string_view prefix) {
    if (!path.starts_with(prefix)) return std::nullopt;
    std::string_view tail = path.substr(prefix.size());
    long long id = 0;
    auto r = std::from_chars(tail.data(), tail.data() + tail.size(), id);
    if (r.ec != std::errc{} || r.ptr != tail.data() + tail.size() || id <= 0) return std::nullopt;
    return id;
}

}  // namespace troupe::server
