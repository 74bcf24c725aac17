#include "core/plugin_host/plugin_host.h"

#include <cstdlib>
#include <filesystem>

#include "core/log/log.h"
#include "core/plugin_host/plugin_attention_op.h"
#include "core/plugin_host/plugin_instance.h"
#include "core/plugin_host/plugin_params.h"
#include "core/plugin_host/plugin_quant_op.h"
#include "core/plugin_host/plugin_speculator.h"

#ifndef TROUPE_DEFAULT_PLUGIN_DIR
#define TROUPE_DEFAULT_PLUGIN_DIR "plugins"
#endif

namespace troupe {
namespace {

std::string choose_plugin_dir(const plugin_host_options& options) {
    if (!options.plugin_dir.empty()) return options.plugin_dir;
    if (const char* env = std::getenv("TROUPE_PLUGIN_DIR"); env != nullptr && env[0] != '\0') return env;
    return TROUPE_DEFAULT_PLUGIN_DIR;
}

}  // namespace

plugin_host::plugin_host(plugin_host_options options, std::shared_ptr<const troupe_model_services> model)
    : options_(std::move(options)), model_(std::move(model)), plugin_dir_(choose_plugin_dir(options_)) {}

std::string plugin_host::library_path(plugin_kind kind, std::string_view name) const {
    const std::string k(plugin_kind_name(kind));
    return plugin_dir_ + "/" + k + "/libtroupe_" + k + "_" + std::string(name) + ".so";
}

result<loaded_plugin> plugin_host::load(const plugin_spec& spec) {
    const std::string kind_name(plugin_kind_name(spec.kind));
    std::string name = spec.name;
    if (name.empty()) name = std::filesystem::path(spec.path).stem().string();
    const std::string label = kind_name + "/" + name;
    const std::string path = spec.path.empty() ? library_path(spec.kind, spec.name) : spec.path;

    auto library = plugin_library::open(path, spec.kind, label);
    if (!library.ok()) {
        if (spec.path.empty() && library.message().find("no such file") != std::string::npos) {
            return make_error(library.message() + " (plugin folder " + plugin_dir_ +
                              ", set by plugins.plugin_dir or $TROUPE_PLUGIN_DIR)");
        }
        return library.err();
    }
    const plugin_info& info = (*library)->info();
    if (!spec.name.empty() && info.name != spec.name) {
        TROUPE_LOG_WARN("plugin_host", "%s: the library at %s calls itself '%s'", label.c_str(), path.c_str(),
                        info.name.c_str());
    }
    if ((*library)->score(options_.backend) < 0) {
        return make_error("plugin " + label + ": cannot run on the " +
                          std::string(plugin_backend_name(options_.backend)) + " backend (its score refuses it)");
    }
    flat_params params;
    try {
        params = flat_params::from_yaml(spec.params);
    } catch (const YAML::Exception& e) {
        return make_error("plugin " + label + ": params: " + e.what());
    }
    auto instance = plugin_instance::create(*library, params, options_.backend, model_);
    if (!instance.ok()) return instance.err();

    loaded_plugin out{info, *instance, nullptr, nullptr, nullptr};
    switch (spec.kind) {
        case plugin_kind::attention:
            out.attention = std::make_shared<plugin_attention_op>(*instance);
            break;
        case plugin_kind::quant:
            if ((*instance)->quant_ops() != nullptr) out.quant = std::make_shared<plugin_quant_op>(*instance);
            break;
        case plugin_kind::spec:
            out.spec = std::make_shared<plugin_speculator>(*instance);
            break;
        case plugin_kind::kv:
            break;  // used through the instance's kv_ops()
    }
    return out;
}

result<loaded_plugin> plugin_host::load(plugin_kind kind, std::string_view name, const YAML::Node& params) {
    auto spec = parse_plugin_spec(kind, YAML::Node(std::string(name)), std::string(plugin_kind_name(kind)));
    if (!spec.ok())
        return make_error("plugin " + std::string(plugin_kind_name(kind)) + "/" + std::string(name) + ": " +
                          spec.message());
    spec->params = params;
    return load(*spec);
}

result<std::shared_ptr<attention_op>> plugin_host::load_attention(std::string_view name, const YAML::Node& params) {
    auto p = load(plugin_kind::attention, name, params);
    if (!p.ok()) return p.err();
    return p->attention;
}

result<std::shared_ptr<quant_op>> plugin_host::load_quant(std::string_view name, const YAML::Node& params) {
    auto p = load(plugin_kind::quant, name, params);
    if (!p.ok()) return p.err();
    if (p->quant == nullptr) {
        return make_error("plugin quant/" + std::string(name) +
                          ": has no runtime matmul (no quant op table); it only quantizes offline (troupe quantize "
                          "--method " +
                          std::string(name) + ")");
    }
    return p->quant;
}

result<std::shared_ptr<plugin_speculator>> plugin_host::load_spec(std::string_view name, const YAML::Node& params) {
    auto p = load(plugin_kind::spec, name, params);
    if (!p.ok()) return p.err();
    return p->spec;
}

result<std::shared_ptr<plugin_instance>> plugin_host::load_kv(std::string_view name, const YAML::Node& params) {
    auto p = load(plugin_kind::kv, name, params);
    if (!p.ok()) return p.err();
    return p->instance;
}

}  // namespace troupe
