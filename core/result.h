// result<T>: a value or an error message, for expected failures (bad file, bad request, unknown plugin).
//
// DESIGN.md: a broken invariant is a bug (TROUPE_ASSERT, always on); an expected failure is a value that
// carries a clear message up to the user. Exceptions stay at the edges (YAML parsing, Beast I/O).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace troupe {

struct error {
    std::string message;
};

inline error make_error(std::string message) { return error{std::move(message)}; }

template <class T>
class [[nodiscard]] result {
public:
    result(T value) : v_(std::move(value)) {}
    result(error e) : v_(std::move(e)) {}

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() { return value(); }
    const T& operator*() const { return value(); }

    const error& err() const { return std::get<1>(v_); }
    const std::string& message() const { return std::get<1>(v_).message; }

private:
    std::variant<T, error> v_;
};

// status: success or an error message.
class [[nodiscard]] status {
public:
    status() = default;
    status(error e) : err_(std::move(e)), failed_(true) {}
    static status success() { return {}; }

    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const std::string& message() const { return err_.message; }
    const error& err() const { return err_; }

private:
    error err_;
    bool failed_ = false;
};

[[noreturn]] inline void assertion_failed(const char* expr, const char* file, int line, const std::string& context) {
    std::fprintf(stderr, "troupe: internal error: %s:%d: assertion '%s' failed%s%s\n", file, line, expr,
                 context.empty() ? "" : ": ", context.c_str());
    std::abort();
}

}  // namespace troupe

// Always-on invariant check; the optional second argument is a context string.
#define TROUPE_ASSERT(expr, ...) \
    ((expr) ? (void)0 : ::troupe::assertion_failed(#expr, __FILE__, __LINE__, std::string{__VA_ARGS__}))
