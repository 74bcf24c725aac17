#include "core/log/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace troupe {
namespace {

std::atomic<log_level> g_level{log_level::info};
std::mutex g_mutex;
std::function<void(log_level, std::string_view, std::string_view)> g_sink;

}  // namespace

std::string_view log_level_name(log_level level) {
    switch (level) {
        case log_level::debug: return "debug";
        case log_level::info: return "info";
        case log_level::warn: return "warn";
        case log_level::error: return "error";
        case log_level::off: return "off";
    }
    return "?";
}

void set_log_level(log_level level) { g_level.store(level); }
log_level current_log_level() { return g_level.load(); }

void set_log_sink(std::function<void(log_level, std::string_view, std::string_view)> sink) {
    std::lock_guard lock(g_mutex);
    g_sink = std::move(sink);
}

void log_message(log_level level, std::string_view component, const char* fmt, ...) {
    if (level < g_level.load() || level == log_level::off) return;
    char buf[2048];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    std::lock_guard lock(g_mutex);
    if (g_sink) {
        g_sink(level, component, buf);
    } else {
        std::fprintf(stderr, "troupe: [%.*s] %.*s: %s\n", static_cast<int>(log_level_name(level).size()),
                     log_level_name(level).data(), static_cast<int>(component.size()), component.data(), buf);
    }
}

}  // namespace troupe
