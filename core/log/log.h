// Logging: one line per event to stderr (or a sink set by the host), with a level threshold.
// Prompts and outputs never appear above debug level; log ids and lengths (STYLE.md).
#pragma once

#include <cstdarg>
#include <functional>
#include <string>
#include <string_view>

namespace troupe {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

std::string_view log_level_name(log_level level);
void set_log_level(log_level level);
log_level current_log_level();
// Replaces the sink (default: "troupe: [level] component: message" on stderr). Null restores it.
void set_log_sink(std::function<void(log_level, std::string_view component, std::string_view message)> sink);

void log_message(log_level level, std::string_view component, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace troupe

#define TROUPE_LOG_DEBUG(component, ...) ::troupe::log_message(::troupe::log_level::debug, component, __VA_ARGS__)
#define TROUPE_LOG_INFO(component, ...) ::troupe::log_message(::troupe::log_level::info, component, __VA_ARGS__)
#define TROUPE_LOG_WARN(component, ...) ::troupe::log_message(::troupe::log_level::warn, component, __VA_ARGS__)
#define TROUPE_LOG_ERROR(component, ...) ::troupe::log_message(::troupe::log_level::error, component, __VA_ARGS__)
