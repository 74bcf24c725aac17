// Which plugins a run uses, as read from YAML:
//
//   plugins:
//     dir: /opt/troupe/plugins         # optional; else $TROUPE_PLUGIN_DIR, else the build's plugin folder
//     attention: gqa                   # short form: the name only
//     quant:
//       name: q8
//       params: {online: true}         # handed to the plugin, which validates it
//     spec:
//       name: ngram
//       path: /somewhere/libtroupe_spec_ngram.so   # optional explicit library
//       params: {ngram_min: 1, ngram_max: 3, max_draft: 8}
//
// Every kind is optional. Errors name their path (plugins.spec.name: ...), all of them at once.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>

#include "core/plugin_host/plugin_kind.h"
#include "core/result.h"

namespace troupe {

struct plugin_spec {
    plugin_kind kind;
    std::string name;   // "gqa": library libtroupe_<kind>_<name>.so in the plugin folder
    std::string path;   // explicit library path; empty: found by kind and name
    YAML::Node params;  // the plugin's params sub-tree (undefined or null when absent)
};

struct plugin_selection {
    std::string dir;  // empty: the host's default
    std::optional<plugin_spec> attention;
    std::optional<plugin_spec> quant;
    std::optional<plugin_spec> spec;
};

// Parses one kind's entry (`node` is what follows "attention:"); `path` names it in messages.
result<plugin_spec> parse_plugin_spec(plugin_kind kind, const YAML::Node& node, const std::string& path);
// Parses the whole `plugins:` node; an absent or null node selects nothing.
result<plugin_selection> parse_plugin_selection(const YAML::Node& node, const std::string& path = "plugins");

}  // namespace troupe
