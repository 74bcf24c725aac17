// static_files: the chat page and the admin console (server/static/), embedded into the binary at build
// time (embed_static.cmake turns each file into a byte array), so `troupe serve` works offline and from
// any folder.
#pragma once

#include <string_view>

namespace troupe::server {

struct static_file {
    std::string_view path;  // "/index.html", "/admin/admin.js"
    std::string_view content_type;
    std::string_view body;
};

// The file served at a URL path: "/" is /index.html, "/admin" and "/admin/" are /admin/index.html.
// nullptr when there is none.
const static_file* find_static_file(std::string_view url_path);

}  // namespace troupe::server
