// yaml_fields: the pieces every validating YAML reader of troupe shares (the engine config, load
// experiments): a collector of problems with source, line and key path, a mapping walker that reports
// unknown keys with the valid ones, and the plain scalar readers. The readers never throw and never
// stop at the first problem: the caller reports them all at once.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::yaml_fields {

// Collects "source[:line]: path: message" lines.
struct diagnostics {
    std::string source;  // "config.yaml", "--set", "--top-p"
    bool with_lines;     // file sources carry line numbers
    std::vector<std::string>* errors;

    void add(const YAML::Node& node, const std::string& path, const std::string& message) const;
};

// "nothing", "'text'", "a list", "a mapping": what a node is, for messages.
std::string describe(const YAML::Node& node);

struct field {
    std::string_view key;
    std::function<void(const YAML::Node&, const std::string&)> read;
};

// A mapping with known keys (null reads as empty); every other key is reported with the valid ones.
void read_map(const YAML::Node& node, const std::string& path, const diagnostics& d,
              std::initializer_list<field> fields);

// true/yes/on or false/no/off.
void read_bool(const YAML::Node& node, const std::string& path, const diagnostics& d, bool& out);

// Strings: null reads as the empty string.
void read_string(const YAML::Node& node, const std::string& path, const diagnostics& d, std::string& out);

}  // namespace troupe::yaml_fields
