#include "server/static_files.h"

#include <cstddef>
#include <string>
#include <vector>

namespace troupe::server {
namespace embedded {
struct entry {
    const char* path;
    const char* content_type;
    const char* data;
    std::size_t size;
};
extern const entry entries[];
}  // namespace embedded

namespace {

const std::vector<static_file>& table() {
    static const std::vector<static_file> files = [] {
        std::vector<static_file> v;
        for (const embedded::entry* e = embedded::entries; e->path != nullptr; ++e) {
            v.push_back({e->path, e->content_type, std::string_view(e->data, e->size)});
        }
        return v;
    }();
    return files;
}

}  // namespace

const static_file* find_static_file(std::string_view url_path) {
    std::string path(url_path);
    if (path == "/") path = "/index.html";
    if (path == "/admin" || path == "/admin/") path = "/admin/index.html";
    for (const auto& f : table()) {
        if (f.path == path) return &f;
    }
    return nullptr;
}

}  // namespace troupe::server
