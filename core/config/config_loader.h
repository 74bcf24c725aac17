// Loading, validating and overriding the engine config.
//
// Every problem is collected before anything is returned, so one message lists them all, each with
// where it came from and the key's path, and what would be right:
//
//   config.yaml: 3 errors:
//     config.yaml:2: device: unknown value 'gpu' (valid: cpu, cuda)
//     config.yaml:5: scheduler.max_batched_tokens: must be >= 1, got 0
//     config.yaml:9: sampling.top_q: unknown key (valid: temperature, top_k, ...)
//
// Keys absent from the file keep their defaults. Overrides ("key.path=value", from --set or from a
// command-line flag) go through the same reader, so they get the same checks and messages.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/engine_config.h"
#include "core/result.h"

namespace troupe {

// Reads YAML text over the defaults. `source` names it in messages (a file name, "<string>").
result<engine_config> parse_config(std::string_view yaml_text, std::string_view source = "<string>");
// Reads a file over the defaults; a missing or unreadable file is an error naming the path.
result<engine_config> load_config_file(const std::string& path);
// Reads YAML text over an existing config (keys present replace values; plugin params merge by key).
status merge_config(engine_config& config, std::string_view yaml_text, std::string_view source);

// One "key.path=value" assignment; value is YAML ("0.7", "cuda", "[a, b]"). source names it in messages:
// "--set" or the flag it came from ("--top-p").
struct config_override {
    std::string key;
    std::string value;
    std::string source;
};

// Splits "key.path=value"; an error when there is no '=' or the key is empty.
result<config_override> parse_override(std::string_view assignment, std::string source = "--set");
// Applies all overrides in order; all problems are reported together.
status apply_overrides(engine_config& config, std::span<const config_override> overrides);

// $TROUPE_MODEL, when set and non-empty, names the model.
void apply_environment(engine_config& config);

// The start-up order: defaults, the file (when path is non-empty), $TROUPE_MODEL, then the overrides.
result<engine_config> resolve_config(const std::string& path, std::span<const config_override> overrides);

// Full validation of a config built in code (ranges and names), with the same messages as loading.
status validate(const engine_config& config);

}  // namespace troupe
