#include "core/config/yaml_fields.h"

namespace troupe::yaml_fields {

void diagnostics::add(const YAML::Node& node, const std::string& path, const std::string& message) const {
    std::string where = source;
    if (with_lines && node.IsDefined() && node.Mark().line >= 0) where += ":" + std::to_string(node.Mark().line + 1);
    errors->push_back(where + ": " + path + ": " + message);
}

std::string describe(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Null:
        case YAML::NodeType::Undefined:
            return "nothing";
        case YAML::NodeType::Scalar:
            return "'" + node.Scalar() + "'";
        case YAML::NodeType::Sequence:
            return "a list";
        case YAML::NodeType::Map:
            return "a mapping";
    }
    return "?";
}

void read_map(const YAML::Node& node, const std::string& path, const diagnostics& d,
              std::initializer_list<field> fields) {
    if (node.IsNull()) return;
    if (!node.IsMap())
        return d.add(node, path.empty() ? "(top level)" : path, "expected a mapping, got " + describe(node));
    for (const auto& kv : node) {
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : describe(kv.first);
        const std::string sub = path.empty() ? key : path + "." + key;
        const field* found = nullptr;
        for (const auto& f : fields) {
            if (f.key == key) found = &f;
        }
        if (!found) {
            std::string valid;
            for (const auto& f : fields) valid += (valid.empty() ? "" : ", ") + std::string(f.key);
            d.add(kv.first, sub, "unknown key (valid: " + valid + ")");
            continue;
        }
        found->read(kv.second, sub);
    }
}

void read_bool(const YAML::Node& node, const std::string& path, const diagnostics& d, bool& out) {
    if (node.IsScalar()) {
        const std::string& s = node.Scalar();
        if (s == "true" || s == "yes" || s == "on" || s == "True" || s == "TRUE") return void(out = true);
        if (s == "false" || s == "no" || s == "off" || s == "False" || s == "FALSE") return void(out = false);
    }
    d.add(node, path, "expected true or false, got " + describe(node));
}

void read_string(const YAML::Node& node, const std::string& path, const diagnostics& d, std::string& out) {
    if (node.IsNull()) return void(out.clear());
    if (!node.IsScalar()) return d.add(node, path, "expected a string, got " + describe(node));
    out = node.Scalar();
}

}  // namespace troupe::yaml_fields
