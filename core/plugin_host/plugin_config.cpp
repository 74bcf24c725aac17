#include "core/plugin_host/plugin_config.h"

#include <vector>

namespace troupe {
namespace {

void add(std::string& errors, const std::string& message) {
    if (!errors.empty()) errors += "\n";
    errors += message;
}

bool valid_name(const std::string& name) {
    if (name.empty()) return false;
    for (char c : name) {
        const bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

// Parses into `out`, appending errors; YAML exceptions are converted here (the edge).
void parse_spec_into(plugin_kind kind, const YAML::Node& node, const std::string& path, plugin_spec& out,
                     std::string& errors) {
    out.kind = kind;
    if (node.IsScalar()) {
        out.name = node.Scalar();
    } else if (node.IsMap()) {
        for (const auto& kv : node) {
            const std::string key = kv.first.as<std::string>();
            if (key == "name" && kv.second.IsScalar()) {
                out.name = kv.second.Scalar();
            } else if (key == "path" && kv.second.IsScalar()) {
                out.path = kv.second.Scalar();
            } else if (key == "params") {
                if (!kv.second.IsMap() && !kv.second.IsNull()) {
                    add(errors, path + ".params: must be a map of the plugin's parameters");
                }
                out.params = kv.second;
            } else if (key == "name" || key == "path") {
                add(errors, path + "." + key + ": must be a string");
            } else {
                add(errors, path + "." + key + ": unknown key (valid keys: name, path, params)");
            }
        }
    } else {
        add(errors, path + ": must be a plugin name or a map with name, path, params");
        return;
    }
    if (out.name.empty() && out.path.empty()) {
        add(errors, path + ".name: missing (e.g. name: " +
                        std::string(kind == plugin_kind::attention ? "gqa"
                                    : kind == plugin_kind::quant   ? "q8"
                                    : kind == plugin_kind::kv      ? "int8"
                                                                   : "ngram") +
                        ")");
    } else if (!out.name.empty() && !valid_name(out.name)) {
        add(errors, path + ".name: '" + out.name + "' is not a plugin name (letters, digits, '_' and '-' only)");
    }
}

}  // namespace

result<plugin_spec> parse_plugin_spec(plugin_kind kind, const YAML::Node& node, const std::string& path) {
    plugin_spec spec{kind, "", "", YAML::Node()};
    std::string errors;
    try {
        parse_spec_into(kind, node, path, spec, errors);
    } catch (const YAML::Exception& e) {
        add(errors, path + ": " + e.what());
    }
    if (!errors.empty()) return make_error(errors);
    return spec;
}

result<plugin_selection> parse_plugin_selection(const YAML::Node& node, const std::string& path) {
    plugin_selection sel;
    if (!node.IsDefined() || node.IsNull()) return sel;
    std::string errors;
    try {
        if (!node.IsMap()) return make_error(path + ": must be a map with dir, attention, quant, spec");
        for (const auto& kv : node) {
            const std::string key = kv.first.as<std::string>();
            const std::string sub = path + "." + key;
            if (key == "dir") {
                if (kv.second.IsScalar()) {
                    sel.dir = kv.second.Scalar();
                } else {
                    add(errors, sub + ": must be a folder path");
                }
                continue;
            }
            const result<plugin_kind> kind = parse_plugin_kind(key);
            if (!kind.ok() || *kind == plugin_kind::kv) {
                // A KV plugin replaces the cache, so it is chosen with the cache: kv.plugin.
                add(errors, sub + ": unknown key (valid keys: dir, attention, quant, spec" +
                                (kind.ok() ? std::string("; a KV plugin is chosen under kv.plugin)") : ")"));
                continue;
            }
            plugin_spec spec{*kind, "", "", YAML::Node()};
            std::string spec_errors;
            parse_spec_into(*kind, kv.second, sub, spec, spec_errors);
            if (!spec_errors.empty()) {
                add(errors, spec_errors);
                continue;
            }
            switch (*kind) {
                case plugin_kind::attention:
                    sel.attention = spec;
                    break;
                case plugin_kind::quant:
                    sel.quant = spec;
                    break;
                case plugin_kind::spec:
                    sel.spec = spec;
                    break;
                case plugin_kind::kv:
                    break;  // refused above
            }
        }
    } catch (const YAML::Exception& e) {
        add(errors, path + ": " + e.what());
    }
    if (!errors.empty()) return make_error(errors);
    return sel;
}

}  // namespace troupe
