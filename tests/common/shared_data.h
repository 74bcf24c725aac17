// Finding ../shared (models, vocabularies, goldens) from tests.
//
// The folder is $TROUPE_SHARED_DIR, else <source>/../shared. Where it or a file in it is missing,
// a test skips with a clear message, except in CI (CI=true), where it fails: CI always has it.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace troupe::testing {

// The shared folder, if it exists.
std::optional<std::string> shared_dir();
// Full path of a file under the shared folder, if it exists.
std::optional<std::string> shared_file(const std::string& relative);
// Message for a missing file; used by TROUPE_REQUIRE_SHARED.
std::string missing_shared_message(const std::string& relative);
bool in_ci();

}  // namespace troupe::testing

// Declares `std::string var` = full path of `relative` under ../shared, or skips (fails in CI).
#define TROUPE_REQUIRE_SHARED(var, relative)                                               \
    std::string var;                                                                       \
    do {                                                                                   \
        auto troupe_found_ = ::troupe::testing::shared_file(relative);                     \
        if (!troupe_found_) {                                                              \
            if (::troupe::testing::in_ci()) FAIL() << ::troupe::testing::missing_shared_message(relative); \
            GTEST_SKIP() << ::troupe::testing::missing_shared_message(relative);           \
        }                                                                                  \
        var = *troupe_found_;                                                              \
    } while (0)
