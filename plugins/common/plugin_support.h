// Conveniences for troupe's own plugins written in C++ (not part of the SDK: third parties need only
// plugins/include/troupe/plugin.h). Header-only, so each plugin gets its own hidden copy.
//
// - param_reader: typed reads of the flat (key, value) parameters with messages that name the key as
//   `params.<key>`, and a final check that rejects unknown keys listing the valid ones.
// - host_log: the host's log callback, saved at negotiation.
// - run_parallel: calls a C++ callable over [0, n) through the caller's troupe_parallel.
// - guarded: runs an ABI function body, turning any exception into a status and a message, so nothing
//   is thrown across the boundary.
#pragma once

#include <troupe/plugin.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe::plugin_support {

class param_reader {
public:
    explicit param_reader(const troupe_plugin_params* params) {
        if (params == nullptr) return;
        for (size_t i = 0; i < params->n_items; ++i) {
            const troupe_param& p = params->items[i];
            items_[p.key != nullptr ? p.key : ""] = p.value != nullptr ? p.value : "";
        }
    }

    // An integer in [lo, hi]; `fallback` when the key is absent.
    int64_t integer(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) {
        const std::string* v = take(key);
        if (v == nullptr) return fallback;
        errno = 0;
        char* end = nullptr;
        const long long x = std::strtoll(v->c_str(), &end, 10);
        if (v->empty() || *end != '\0' || errno != 0) {
            fail(key, "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got '" +
                          *v + "'");
            return fallback;
        }
        if (x < lo || x > hi) {
            fail(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + *v);
            return fallback;
        }
        return x;
    }

    // A finite number in [lo, hi]; `fallback` when the key is absent.
    double number(const std::string& key, double lo, double hi, double fallback) {
        const std::string* v = take(key);
        if (v == nullptr) return fallback;
        errno = 0;
        char* end = nullptr;
        const double x = std::strtod(v->c_str(), &end);
        const std::string range = number_text(lo) + " and " + number_text(hi);
        if (v->empty() || *end != '\0' || errno != 0 || !(x == x) || x - x != 0) {
            fail(key, "must be a number between " + range + ", got '" + *v + "'");
            return fallback;
        }
        if (x < lo || x > hi) {
            fail(key, "must be between " + range + ", got " + *v);
            return fallback;
        }
        return x;
    }

    bool boolean(const std::string& key, bool fallback) {
        const std::string* v = take(key);
        if (v == nullptr) return fallback;
        if (*v == "true" || *v == "True" || *v == "TRUE" || *v == "yes" || *v == "on") return true;
        if (*v == "false" || *v == "False" || *v == "FALSE" || *v == "no" || *v == "off") return false;
        fail(key, "must be true or false, got '" + *v + "'");
        return fallback;
    }

    // One of `choices`; `fallback` when absent.
    std::string choice(const std::string& key, const std::vector<std::string>& choices, const std::string& fallback) {
        const std::string* v = take(key);
        if (v == nullptr) return fallback;
        for (const std::string& c : choices) {
            if (*v == c) return c;
        }
        fail(key, "must be one of " + join(choices) + ", got '" + *v + "'");
        return fallback;
    }

    // Adds an error about `key` found by the plugin's own cross-checks.
    void fail(const std::string& key, const std::string& what) {
        if (!errors_.empty()) errors_ += "; ";
        errors_ += "params." + key + ": " + what;
    }

    // Call after all reads: reports keys nobody read. Returns all errors joined, or "" when fine.
    const std::string& finish(const std::vector<std::string>& valid_keys) {
        for (const auto& [key, value] : items_) {
            if (read_.count(key) == 0) {
                fail(key, valid_keys.empty() ? "unknown key (this plugin takes no parameters)"
                                             : "unknown key (valid keys: " + join(valid_keys) + ")");
            }
        }
        return errors_;
    }

private:
    const std::string* take(const std::string& key) {
        auto it = items_.find(key);
        if (it == items_.end()) return nullptr;
        read_[key] = true;
        return &it->second;
    }

    static std::string number_text(double x) {
        char text[32];
        std::snprintf(text, sizeof text, "%g", x);
        return text;
    }

    static std::string join(const std::vector<std::string>& xs) {
        std::string s;
        for (const std::string& x : xs) {
            if (!s.empty()) s += ", ";
            s += x;
        }
        return s;
    }

    std::map<std::string, std::string> items_;
    std::map<std::string, bool> read_;
    std::string errors_;
};

class host_log {
public:
    static void attach(const troupe_host_services* host) {
        if (host != nullptr && TROUPE_HAS_FIELD(host, troupe_host_services, log)) services() = host;
    }
    static void write(troupe_log_level level, const char* source, const char* fmt, ...)
        __attribute__((format(printf, 3, 4))) {
        const troupe_host_services* host = services();
        if (host == nullptr || host->log == nullptr) return;
        char line[512];
        va_list args;
        va_start(args, fmt);
        std::vsnprintf(line, sizeof line, fmt, args);
        va_end(args);
        host->log(host->host_ctx, level, source, line);
    }
    static const troupe_host_services*& services() {
        static const troupe_host_services* host = nullptr;
        return host;
    }
};

// Runs f(begin, end) over [0, n) through `parallel`: with grain > 0 and a host that gives parallel_ranges
// (troupe_parallel version 3), one contiguous share per thread walked in pieces of `grain` items (for loops that stream
// memory: each thread reads one region front to back); else through parallel_for; inline when it gives neither. With
// `bounds` ([n_shares + 1], from 0 to n) and a host that gives parallel_shares (version 4), thread s takes share s of
// the caller's. f runs concurrently on the host's threads; an exception in it is caught there and reported as a status.
template <class F>
int32_t run_split(const troupe_parallel* parallel, int64_t n, int64_t grain, F&& f, const int64_t* bounds = nullptr,
                  int32_t n_shares = 0) {
    if (n <= 0) return TROUPE_OK;
    using fn_type = std::remove_reference_t<F>;
    struct job {
        fn_type* fn;
        std::atomic<bool> failed{false};
    } work{&f};
    auto trampoline = [](void* ctx, int64_t begin, int64_t end) {
        job* w = static_cast<job*>(ctx);
        try {
            (*w->fn)(begin, end);
        } catch (...) {
            w->failed.store(true);
        }
    };
    int32_t rc = TROUPE_OK;
    if (bounds != nullptr && grain > 0 && parallel != nullptr &&
        TROUPE_HAS_FIELD(parallel, troupe_parallel, n_threads) && parallel->parallel_shares != nullptr &&
        n_shares <= parallel->n_threads) {
        rc = parallel->parallel_shares(parallel->host_ctx, bounds, n_shares, grain, trampoline, &work);
    } else if (grain > 0 && parallel != nullptr && TROUPE_HAS_FIELD(parallel, troupe_parallel, parallel_ranges) &&
               parallel->parallel_ranges != nullptr) {
        rc = parallel->parallel_ranges(parallel->host_ctx, n, grain, trampoline, &work);
    } else if (parallel == nullptr || !TROUPE_HAS_FIELD(parallel, troupe_parallel, parallel_for) ||
               parallel->parallel_for == nullptr) {
        trampoline(&work, 0, n);
    } else {
        rc = parallel->parallel_for(parallel->host_ctx, n, trampoline, &work);
    }
    if (rc == TROUPE_OK && work.failed.load()) rc = TROUPE_ERR_INTERNAL;
    return rc;
}

// Runs f(begin, end) over [0, n) through the host's parallel_for (or inline when it gives none).
template <class F>
int32_t run_parallel(const troupe_parallel* parallel, int64_t n, F&& f) {
    return run_split(parallel, n, 0, std::forward<F>(f));
}

// Bytes per piece of a streaming loop's share: as the host's own decode matmuls (kernels/cpu/streamed_rows.h), where
// 256 KiB pieces ran faster than 64 KiB ones (each piece is a call through the host and the kernel's setup).
constexpr size_t k_stream_piece_bytes = size_t{256} << 10;

// The same for a loop that streams memory: one contiguous share per thread (parallel_ranges) where the host gives
// it, in pieces of about k_stream_piece_bytes (bytes_per_item: what one item reads).
template <class F>
int32_t run_streaming(const troupe_parallel* parallel, int64_t n, size_t bytes_per_item, F&& f) {
    const int64_t grain =
        std::max<int64_t>(1, static_cast<int64_t>(k_stream_piece_bytes / std::max<size_t>(1, bytes_per_item)));
    return run_split(parallel, n, grain, std::forward<F>(f));
}

// The same over [0, bounds[n_shares]) with the shares given: share s (items [bounds[s], bounds[s + 1])) on thread s
// where the host gives parallel_shares (a weight placed in one region per thread), else as run_streaming.
template <class F>
int32_t run_shares(const troupe_parallel* parallel, const int64_t* bounds, int32_t n_shares, size_t bytes_per_item,
                   F&& f) {
    const int64_t grain =
        std::max<int64_t>(1, static_cast<int64_t>(k_stream_piece_bytes / std::max<size_t>(1, bytes_per_item)));
    return run_split(parallel, bounds[n_shares], grain, std::forward<F>(f), bounds, n_shares);
}

// Runs body() (returning an int32_t status); an exception becomes a status and a message in `error`.
template <class F>
int32_t guarded(std::string& error, F&& body) {
    try {
        return body();
    } catch (const std::bad_alloc&) {
        error = "out of memory";
        return TROUPE_ERR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        error = std::string("internal error: ") + e.what();
        return TROUPE_ERR_INTERNAL;
    } catch (...) {
        error = "internal error: unknown exception";
        return TROUPE_ERR_INTERNAL;
    }
}

// The last create() failure on this thread (what error_message(NULL) returns). A plain char buffer:
// a thread_local with a destructor would keep the library from unloading at dlclose.
inline char* create_error_buffer() {
    thread_local char buffer[1024];
    return buffer;
}
inline void set_create_error(const std::string& message) {
    std::snprintf(create_error_buffer(), 1024, "%s", message.c_str());
}

}  // namespace troupe::plugin_support
