// plugin_host: finds, loads and instantiates plugins by kind and name, and hands them to the core as
// attention_op, quant_op (core/model/ops.h) or speculator, and as the plugin_instance itself (for the KV
// adapter, offline quantization and taps, which build on its op tables).
//
//   <plugin_dir>/<kind>/libtroupe_<kind>_<name>.so      e.g. plugins/spec/libtroupe_spec_ngram.so
//
// plugin_dir is the one in the options (config `plugins.plugin_dir`, flags), else $TROUPE_PLUGIN_DIR, else the
// build's plugin folder (TROUPE_DEFAULT_PLUGIN_DIR). A spec with an explicit path loads that file.
//
// Loading: dlopen (RTLD_LOCAL) -> negotiate the ABI -> check kind and backend -> create the instance
// from the YAML params (the plugin validates them) -> wrap it in an adapter. Each step refuses with a
// message "plugin <kind>/<name>: ...". The objects returned keep the library loaded while they live.
#pragma once

#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/model/ops.h"
#include "core/plugin_host/plugin_config.h"
#include "core/plugin_host/plugin_instance.h"
#include "core/plugin_host/plugin_kind.h"
#include "core/plugin_host/plugin_library.h"
#include "core/plugin_host/plugin_speculator.h"
#include "core/result.h"

namespace troupe {

struct plugin_host_options {
    std::string plugin_dir;                        // empty: $TROUPE_PLUGIN_DIR, else TROUPE_DEFAULT_PLUGIN_DIR
    plugin_backend backend = plugin_backend::cpu;  // plugins whose score refuses it are refused
};

// A loaded plugin: the instance, always; and the core-facing adapter of its kind where there is one:
// attention for kind attention, quant for a quant plugin with a runtime (matmul) table, spec for kind spec.
// A KV plugin, a quant plugin that only quantizes offline, and any plugin's taps are used through `instance`
// (its kv_ops(), quantize_ops(), tap_ops()).
struct loaded_plugin {
    plugin_info info;
    std::shared_ptr<plugin_instance> instance;
    std::shared_ptr<attention_op> attention;
    std::shared_ptr<quant_op> quant;
    std::shared_ptr<plugin_speculator> spec;
};

class plugin_host {
public:
    // `model`: the model the plugins are made for (troupe_plugin_params.model: its tensors by name, side files);
    // null: instances are made without a model. Kept alive by every instance made with it.
    explicit plugin_host(plugin_host_options options = {}, std::shared_ptr<const troupe_model_services> model = {});

    const std::string& plugin_dir() const { return plugin_dir_; }
    // Where a plugin of this kind and name is looked for.
    std::string library_path(plugin_kind kind, std::string_view name) const;

    result<loaded_plugin> load(const plugin_spec& spec);
    result<loaded_plugin> load(plugin_kind kind, std::string_view name, const YAML::Node& params = YAML::Node());

    result<std::shared_ptr<attention_op>> load_attention(std::string_view name,
                                                         const YAML::Node& params = YAML::Node());
    result<std::shared_ptr<quant_op>> load_quant(std::string_view name, const YAML::Node& params = YAML::Node());
    result<std::shared_ptr<plugin_speculator>> load_spec(std::string_view name,
                                                         const YAML::Node& params = YAML::Node());
    // A KV plugin's instance (its kv_ops() are checked: layout and forward are there).
    result<std::shared_ptr<plugin_instance>> load_kv(std::string_view name, const YAML::Node& params = YAML::Node());

private:
    plugin_host_options options_;
    std::shared_ptr<const troupe_model_services> model_;
    std::string plugin_dir_;
};

}  // namespace troupe
