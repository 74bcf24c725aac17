// The command line: a tiny parser for `troupe <command> [flags] [arguments]` (no extra library).
//
// Each command declares its flags in a command_spec; parse_args() checks argv against it:
//   --flag value, --flag=value, -n value (short aliases), switches without a value, repeatable flags,
//   "--" ends the flags. Unknown flags, missing values and wrong argument counts are usage errors that
//   name the flag and list the valid ones; main() prints them with the command's usage and exits 2.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace troupe::cli {

// Exit codes.
constexpr int exit_ok = 0;
constexpr int exit_failure = 1;  // the command ran and failed (missing file, bad model, ...)
constexpr int exit_usage = 2;    // the command line was wrong

struct flag_spec {
    std::string_view name;        // "--top-k"
    std::string_view short_name;  // "-n", or empty
    std::string_view value_name;  // "N"; empty: a switch that takes no value
    std::string_view help;
    bool repeatable = false;
};

struct command_spec {
    std::string_view name = {};  // "tokenize"
    std::string_view summary;    // one line for `troupe --help`
    std::string_view usage;      // "troupe tokenize --model M.gguf [--no-bos] TEXT"
    std::vector<flag_spec> flags = {};
    int min_args = 0;               // positional arguments
    int max_args = 0;               // -1: any number
    std::string_view details = {};  // optional paragraph after the flags
};

// The parsed command line of one command.
struct cli_args {
    std::string command;
    std::vector<std::string> args;                           // positional, in order
    std::map<std::string, std::vector<std::string>> values;  // long flag name -> values in order
    bool help = false;                                       // --help / -h was given

    bool has(std::string_view flag) const;
    // The last value of a flag, if given.
    std::optional<std::string> value(std::string_view flag) const;
    std::string value_or(std::string_view flag, std::string fallback) const;
    // All values of a repeatable flag.
    std::vector<std::string> all(std::string_view flag) const;
};

// Parses argv (without the program and command names). Errors are usage errors:
// "unknown flag '--temprature' (valid: --model, --prompt, ...)".
result<cli_args> parse_args(const command_spec& spec, std::span<const std::string> argv);

// `troupe <command> --help`.
std::string help_text(const command_spec& spec);

// One message for several problems: the problem itself, or "N problems:" and one indented line each.
std::string join_problems(const std::vector<std::string>& problems);

// Integer and float values of flags, with errors naming the flag: "--max-tokens: expected an integer, got 'x'".
result<long long> parse_int_flag(std::string_view flag, std::string_view text);
result<double> parse_float_flag(std::string_view flag, std::string_view text);

}  // namespace troupe::cli
