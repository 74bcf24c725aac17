// routes: the plain pieces of request routing — splitting a target into path and query, reading one
// query parameter, and the admin token check — kept apart from Beast so they are tested without sockets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace troupe::server {

struct split_target {
    std::string_view path;
    std::string_view query;  // after '?', without it
};
split_target split(std::string_view target);

// A path segment percent-decoded ('+' stays '+': that is the query's rule only).
std::string percent_decoded(std::string_view path);

// The value of `name` in a query string ("a=1&token=x"), percent-decoded; nullopt when absent.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

// The admin token matches "Authorization: Bearer <token>" or ?token=<token> (compared in constant time).
// An empty configured token never matches (the console is disabled).
bool admin_authorized(std::string_view authorization_header, std::string_view query, std::string_view token);

// "/admin/api/cancel/42" -> 42; nullopt when the tail is not a positive integer.
std::optional<long long> id_after(std::string_view path, std::string_view prefix);

}  // namespace troupe::server
