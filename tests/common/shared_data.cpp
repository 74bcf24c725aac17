#include "tests/common/shared_data.h"

#include <cstdlib>
#include <filesystem>

namespace troupe::testing {

std::optional<std::string> shared_dir() {
    namespace fs = std::filesystem;
    if (const char* env = std::getenv("TROUPE_SHARED_DIR"); env && *env) {
        if (fs::is_directory(env)) return std::string(env);
        return std::nullopt;
    }
    const fs::path p = fs::path(TROUPE_SOURCE_DIR) / ".." / "shared";
    if (fs::is_directory(p)) return fs::weakly_canonical(p).string();
    return std::nullopt;
}

std::optional<std::string> shared_file(const std::string& relative) {
    auto dir = shared_dir();
    if (!dir) return std::nullopt;
    const auto p = std::filesystem::path(*dir) / relative;
    if (!std::filesystem::exists(p)) return std::nullopt;
    return p.string();
}

std::string missing_shared_message(const std::string& relative) {
    return "shared test data '" + relative +
           "' not found: put the shared folder beside the repository (../shared) or set TROUPE_SHARED_DIR";
}

bool in_ci() {
    const char* ci = std::getenv("CI");
    return ci && std::string(ci) == "true";
}

}  // namespace troupe::testing
